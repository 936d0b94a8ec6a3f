//! The kernel's requests, one method each: path lookups through the inode table,
//! calls on the client core as the caller, replies.

use super::*;

/// How long an rmdir waits for the release of a file unlinked while open in the
/// directory (the kernel sends releases after close returned, asynchronously).
const HIDDEN_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Filesystem for GustFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE_BYTES) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_WRITE_BYTES) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(MAX_BACKGROUND_REQUESTS);
        // Each is optional; a kernel without one simply runs without it.
        for cap in [InitFlags::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_ATOMIC_O_TRUNC, InitFlags::FUSE_AUTO_INVAL_DATA] {
            let _ = config.add_capabilities(cap);
        }
        // Set-id bits are dropped here on writes (setid.rs): the kernel then asks
        // no GETXATTR `security.capability` before every write.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // Listings come with attributes unless told otherwise: the client fetches them
        // with the names at little extra cost (gust-client listing.rs).
        let plus = match self.opts.readdirplus {
            crate::Readdirplus::Always => InitFlags::FUSE_DO_READDIRPLUS,
            crate::Readdirplus::Never => InitFlags::empty(),
        };
        let _ = config.add_capabilities(plus);
        if self.opts.writeback_cache && config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).is_err() {
            eprintln!("gust mount: this kernel does not offer the writeback cache; continuing without it");
            self.opts.writeback_cache = false;
        }
        if self.opts.direct_io {
            // Lets programs mmap files even though their handles bypass the page cache.
            let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        }
        if !self.opts.local_locks {
            // The kernel sends fcntl and flock locks here instead of keeping them
            // itself (locks.rs): the daemons hold them, between nodes.
            for cap in [InitFlags::FUSE_POSIX_LOCKS, InitFlags::FUSE_FLOCK_LOCKS] {
                if config.add_capabilities(cap).is_err() {
                    eprintln!("gust mount: this kernel does not offer {cap:?}; such locks stay node-local");
                }
            }
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let path = child(&self.path(parent)?, name)?;
            // Known absent (negative.rs): the lookup before a create asks nothing.
            if let Some(ttl) = self.negative.known_absent(&path) {
                return Ok(Err(ttl));
            }
            match self.client.lstat(&path) {
                Ok(st) => Ok(Ok((path, st))),
                Err(Errno(libc::ENOENT)) if !self.negative.timeout().is_zero() => Ok(Err(self.negative.timeout())),
                Err(e) => Err(e),
            }
        })();
        match r {
            Ok(Ok((path, st))) => self.entry(reply, &path, &st),
            Ok(Err(ttl)) => self.absent(reply, ttl),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        t.drop_if_unused(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat_ino(ino.0) {
            Ok((path, st)) => self.attr_reply(ino.0, &path, st, reply),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| {
            self.ro()?;
            let path = self.path(ino)?;
            // Owner first: it may clear set-id bits, and a mode the kernel sends along
            // (it clears them too) comes after.
            let nothing = [mode, uid, gid].iter().all(Option::is_none)
                && size.is_none()
                && atime.is_none()
                && mtime.is_none()
                && ctime.is_none();
            if uid.is_some() || gid.is_some() || nothing {
                // A chown that changes no id comes with no attribute at all, only
                // the kernel's flag to drop set-id bits (setid.rs).
                as_caller(caller_with_groups(req), || self.client.chown(&path, uid, gid, false))?;
            }
            if let Some(sz) = size {
                if req.uid() != 0 {
                    self.drop_setid(req, ino.0, &path)?;
                }
                match fh.and_then(|f| self.fd(f).ok()) {
                    Some((h, fd)) if h.client_flags & libc::O_ACCMODE != libc::O_RDONLY => {
                        self.client.ftruncate(fd, sz)?
                    }
                    _ => self.client.truncate(&path, sz)?,
                }
            }
            if let Some(m) = mode {
                self.client.chmod(&path, m & 0o7777)?;
            }
            if atime.is_some() || mtime.is_some() {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
                self.client.utimens(&path, atime.map(|t| ns_of(t, now)), mtime.map(|t| ns_of(t, now)), false)?;
            }
            let st = self.client.lstat(&path)?;
            Ok((path, st))
        })();
        match r {
            // The attributes after the change, kept by the kernel under a grant only.
            Ok((path, st)) => self.attr_reply(ino.0, &path, st, reply),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.xattr_get(ino, name, size, reply)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.xattr_list(ino, size, reply)
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.xattr_set(ino, name, Some(value), flags, reply)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.xattr_set(ino, name, None, 0, reply)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.path(ino).and_then(|p| self.client.readlink(&p)) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let r = (|| {
            self.ro()?;
            let dir = self.path(parent)?;
            let path = child(&dir, name)?;
            let (who, setgid) = self.creator(req, parent, &dir)?;
            let mode = (mode & !umask & 0o7777) | if setgid { libc::S_ISGID } else { 0 };
            self.negative.added(&path);
            as_caller(who, || self.client.mkdir(&path, mode))?;
            self.negative.made_dir(&path);
            let st = self.client.lstat(&path)?;
            Ok((path, st))
        })();
        match r {
            Ok((path, st)) => self.entry(reply, &path, &st),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            self.ro()?;
            let path = child(&self.path(parent)?, name)?;
            if let Some(ino) = self.open_ino(&path) {
                return self.hide(ino, &path);
            }
            self.client.unlink(&path)?;
            self.negative.removed(&path);
            self.table.lock().unwrap_or_else(|e| e.into_inner()).forget_path(&path);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            self.ro()?;
            let path = child(&self.path(parent)?, name)?;
            let mut r = self.client.rmdir(&path);
            // A file closed and unlinked just before (rm -r, shutil.rmtree) may still
            // wait under a hidden name for its release, which the kernel sends
            // asynchronously: let it go first (bounded), then try again.
            let deadline = std::time::Instant::now() + HIDDEN_RELEASE_WAIT;
            while r == Err(gust_client::Errno(libc::ENOTEMPTY))
                && self.hidden_open_in(&path)
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
                if !self.hidden_open_in(&path) {
                    r = self.client.rmdir(&path);
                }
            }
            r?;
            self.negative.removed(&path);
            self.table.lock().unwrap_or_else(|e| e.into_inner()).forget_path(&path);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let r = (|| {
            self.ro()?;
            let dir = self.path(parent)?;
            let path = child(&dir, name)?;
            let kind = match mode & libc::S_IFMT {
                0 | libc::S_IFREG => Kind::File,
                libc::S_IFIFO => Kind::Fifo,
                libc::S_IFSOCK => Kind::Socket,
                // Stored, never opened: the mount is nodev.
                libc::S_IFBLK => Kind::BlockDevice,
                libc::S_IFCHR => Kind::CharDevice,
                _ => return Err(Errno(libc::EINVAL)),
            };
            let (who, _) = self.creator(req, parent, &dir)?;
            self.negative.added(&path);
            let perm = mode & !umask & 0o7777;
            let st = if kind.is_device() {
                as_caller(who, || self.client.mknod_device(&path, kind, perm, u64::from(rdev)))?
            } else {
                as_caller(who, || self.client.mknod(&path, kind, perm))?
            };
            Ok((path, st))
        })();
        match r {
            Ok((path, st)) => self.entry(reply, &path, &st),
            Err(e) => reply.error(fe(e)),
        }
    }

    /// A hard link (the client's links.rs). The inode's path becomes the new name
    /// (the table keeps one path per inode; either name reaches the file).
    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            self.ro()?;
            let old = self.path(ino)?;
            let new = child(&self.path(newparent)?, newname)?;
            self.negative.added(&new);
            self.client.link(&old, &new)?;
            let st = self.client.lstat(&new)?;
            Ok((new, st))
        })();
        match r {
            Ok((path, st)) => self.entry(reply, &path, &st),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = (|| {
            self.ro()?;
            let dir = self.path(parent)?;
            let path = child(&dir, link_name)?;
            let target = target.to_str().ok_or(Errno(libc::EINVAL))?;
            let (who, _) = self.creator(req, parent, &dir)?;
            self.negative.added(&path);
            as_caller(who, || self.client.symlink(target, &path))?;
            let st = self.client.lstat(&path)?;
            Ok((path, st))
        })();
        match r {
            Ok((path, st)) => self.entry(reply, &path, &st),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        match self.do_rename(parent, name, newparent, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let kflags = flags.0;
            if kflags & libc::O_ACCMODE != libc::O_RDONLY || kflags & libc::O_TRUNC != 0 {
                self.ro()?;
            }
            let path = self.path(ino)?;
            if kflags & libc::O_TRUNC != 0 && req.uid() != 0 {
                self.drop_setid(req, ino.0, &path)?;
            }
            let cflags = self.client_flags(kflags);
            // The kernel looked this inode up (or stat'ed it) within the attribute
            // timeout: open without asking the daemon again.
            let fd = match self.known(ino.0) {
                Some((id, kind)) if kflags & libc::O_TRUNC == 0 && kind != Kind::Symlink => {
                    self.client.open_known(&path, cflags, id, kind)?
                }
                _ => self.client.open(&path, cflags | (kflags & libc::O_TRUNC), 0)?,
            };
            let keep = self.keep_pages(&path, cflags);
            Ok((self.add_handle(ino.0, fd, cflags), cflags, keep))
        })();
        match r {
            Ok((fh, cflags, keep)) => reply.opened(FileHandle(fh), self.open_flags(cflags) | keep),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            self.ro()?;
            let dir = self.path(parent)?;
            let path = child(&dir, name)?;
            let cflags = self.client_flags(flags);
            let (who, _) = self.creator(req, parent, &dir)?;
            self.negative.added(&path);
            let (fd, st) = as_caller(who, || {
                self.client.open_stat(
                    &path,
                    cflags | libc::O_CREAT | (flags & (libc::O_EXCL | libc::O_TRUNC)),
                    mode & !umask & 0o7777,
                )
            })?;
            Ok((path, st, fd, cflags))
        })();
        match r {
            Ok((path, st, fd, cflags)) => {
                // fuser gives one timeout for the entry and the attributes.
                let epoch = self.coherence.epoch();
                let told = self.for_kernel(&path, st);
                let ttl = told.attr.min(told.entry);
                let attr = self.remember(&path, &told.st, ttl);
                let fh = self.add_handle(attr.ino.0, fd, cflags);
                reply.created(&ttl, &attr, Generation(0), FileHandle(fh), self.open_flags(cflags));
                if !ttl.is_zero() {
                    self.coherence.after_reply(epoch, &[path]);
                }
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = (|| {
            let (_h, fd) = self.fd(fh)?;
            let mut buf = vec![0u8; size.min(READ_BYTES_MAX) as usize];
            let n = self.client.pread(fd, &mut buf, offset)?;
            buf.truncate(n);
            Ok(buf)
        })();
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            self.ro()?;
            let (_h, fd) = self.fd(fh)?;
            self.drop_setid_on_write(req, ino, fd, wf)?;
            self.client.pwrite(fd, data, offset)
        })();
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, lock: LockOwner, reply: ReplyEmpty) {
        // Every acknowledged write's data is on the daemons; its size is sent now
        // (the client batches it, see gust-client size_cache.rs), so other clients
        // see it once close(2) returns. Then the closing process's locks go.
        let r = self.fd(fh).and_then(|(h, fd)| {
            let sized = self.client.flush(fd);
            sized.and(self.locks_at_flush(&h, lock.0))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self.files.write().unwrap_or_else(|e| e.into_inner()).remove(&fh.0);
        if let Some(h) = h {
            self.locks_at_release(&h, lock.map(|l| l.0));
            let _ = self.client.close(h.fd);
            let remove = {
                let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
                let r = match t.nodes.get_mut(&ino.0) {
                    Some(n) => {
                        n.open_handles = n.open_handles.saturating_sub(1);
                        if n.open_handles == 0 {
                            std::mem::take(&mut n.hidden)
                        } else {
                            Vec::new()
                        }
                    }
                    None => Vec::new(),
                };
                if r.is_empty() {
                    t.drop_if_unused(ino.0);
                }
                r
            };
            for p in remove {
                self.remove_hidden(ino.0, &p);
            }
        }
        reply.ok();
    }

    fn getlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        self.do_getlk(fh, lock_owner.0, start, end, typ, reply)
    }

    fn setlk(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.do_setlk(fh, lock_owner.0, start, end, typ, pid, sleep, reply)
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.fd(fh).and_then(|(_, fd)| self.client.fsync(fd)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let path = self.path(ino)?;
            let st = self.client.lstat(&path)?;
            if st.kind != Kind::Dir {
                return Err(Errno(libc::ENOTDIR));
            }
            let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
            let flags = self.dir_open_flags(ino.0, &path);
            let d = DirHandle {
                path,
                stat: st,
                state: Mutex::new(DirState { stream: None, pos: 0, pending: None, failed: None, ended_with: None }),
            };
            self.dirs.write().unwrap_or_else(|e| e.into_inner()).insert(fh, Arc::new(d));
            Ok((fh, flags))
        })();
        match r {
            Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let d = self.dirs.read().unwrap_or_else(|e| e.into_inner()).get(&fh.0).cloned();
        let Some(d) = d else { return reply.error(FErrno::from_i32(libc::EBADF)) };
        let r = self.do_readdir(&d, offset, false, |next, name, kind, path| {
            let ino = match path {
                None => name_ino(&format!("{}/{name}", d.path)),
                Some(p) => self
                    .table
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .by_path
                    .get(p)
                    .copied()
                    .unwrap_or_else(|| name_ino(p)),
            };
            if reply.add(INodeNo(ino), next, file_type(kind), name) {
                Emitted::Full
            } else {
                Emitted::Added
            }
        });
        match r {
            Ok(()) => {
                reply.ok();
                self.dir_listed(ino.0, &d);
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    /// The listing with each entry's attributes (FUSE_DO_READDIRPLUS): `ls -l` needs
    /// no LOOKUP per entry, and the attributes come with the listing's pages.
    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let d = self.dirs.read().unwrap_or_else(|e| e.into_inner()).get(&fh.0).cloned();
        let Some(d) = d else { return reply.error(FErrno::from_i32(libc::EBADF)) };
        // Entries' timeouts come from grants (coherence.rs): those the kernel may
        // keep are invalidated again if a recall came meanwhile.
        let epoch = self.coherence.epoch();
        let mut kept = Vec::new();
        let r = self.do_readdir(&d, offset, true, |next, name, _, path| {
            self.emit_plus(&mut reply, next, name, &d, path, &mut kept)
        });
        match r {
            Ok(()) => {
                reply.ok();
                self.coherence.after_reply(epoch, &kept);
                self.dir_listed(ino.0, &d);
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.write().unwrap_or_else(|e| e.into_inner()).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Directory entries are metadata records, made durable with each operation's
        // RocksDB write; there is nothing buffered here to flush.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const BLOCK: u64 = 4096;
        match self.client.statfs() {
            Ok(s) => reply.statfs(
                s.total_bytes / BLOCK,
                s.free_bytes / BLOCK,
                s.avail_bytes / BLOCK,
                s.files,
                u32::MAX as u64,
                BLOCK as u32,
                255,
                BLOCK as u32,
            ),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let r = (|| {
            let path = self.path(ino)?;
            if mask.contains(AccessFlags::W_OK) && self.opts.read_only {
                return Err(Errno(libc::EROFS));
            }
            as_caller(caller_with_groups(req), || self.client.access(&path, mask.bits()))
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }
}
