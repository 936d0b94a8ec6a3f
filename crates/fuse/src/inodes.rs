//! The inode table (inode numbers to paths, lookup counts, what the last lookup
//! said) and what requests need from it and from the handle tables: paths,
//! attributes, handles, the owner of what a request creates.

use super::*;

pub(crate) struct Node {
    pub(crate) path: String,
    /// File id, kind, mode and group from the last lookup/getattr/create, and when:
    /// `open` (and a create's set-group-id check of its directory) within the
    /// attribute timeout trusts them, as the kernel trusts the attributes.
    pub(crate) known: Option<Known>,
    /// Lookup references the kernel holds (FUSE `nlookup`).
    pub(crate) lookups: u64,
    /// Open file handles on this inode.
    pub(crate) open_handles: u32,
    /// Names of this inode renamed to hidden ones because they were unlinked while
    /// it was open; removed at the last release. Its other names (a hard-linked
    /// file's) stay as they are.
    pub(crate) hidden: Vec<String>,
    /// Other names of a hard-linked file that lookups found (the kernel may reach
    /// the inode through any): one takes over when `path` is unlinked.
    pub(crate) aliases: Vec<String>,
    /// A directory: the listing (`Client::listing_held`) the kernel's cached
    /// entries of it came from (coherence.rs).
    pub(crate) dir_cache: Option<u64>,
}

impl Node {
    pub(crate) fn new(path: &str, lookups: u64) -> Node {
        Node {
            path: path.to_string(),
            known: None,
            lookups,
            open_handles: 0,
            hidden: Vec::new(),
            aliases: Vec::new(),
            dir_cache: None,
        }
    }
}

/// What the last lookup or getattr of an inode said, and until when it holds (the
/// attribute timeout the kernel was given: coherence.rs).
#[derive(Clone, Copy)]
pub(crate) struct Known {
    pub(crate) file_id: u128,
    pub(crate) kind: Kind,
    pub(crate) mode: u32,
    pub(crate) gid: u32,
    pub(crate) until: Instant,
    /// A view's entry not fetched yet: opened by path, which fetches it.
    pub(crate) unfetched: bool,
}

impl Known {
    pub(crate) fn of(st: &Stat, ttl: Duration) -> Known {
        Known {
            file_id: st.file_id,
            kind: st.kind,
            mode: st.mode,
            gid: st.gid,
            until: Instant::now() + ttl,
            unfetched: st.unfetched,
        }
    }

    fn holds(&self) -> bool {
        Instant::now() < self.until
    }
}

#[derive(Default)]
pub(crate) struct Table {
    pub(crate) nodes: HashMap<u64, Node>,
    pub(crate) by_path: BTreeMap<String, u64>,
    /// Hidden names of files unlinked while open whose removal is under way (an
    /// rmdir of their directory waits for it).
    pub(crate) removing: Vec<String>,
}

impl Table {
    pub(crate) fn path(&self, ino: u64) -> Result<String, Errno> {
        self.nodes.get(&ino).map(|n| n.path.clone()).ok_or(Errno(libc::ESTALE))
    }

    /// `path` is now the inode's name; with `linked` (the file has more than one
    /// name), the old path stays a name of the inode.
    pub(crate) fn set_path_linked(&mut self, ino: u64, path: &str, linked: bool) {
        let Some(n) = self.nodes.get_mut(&ino) else { return };
        if n.path != path {
            let old = std::mem::replace(&mut n.path, path.to_string());
            n.aliases.retain(|a| a != path);
            if linked {
                if !n.aliases.contains(&old) {
                    n.aliases.push(old);
                }
            } else if self.by_path.get(&old) == Some(&ino) {
                self.by_path.remove(&old);
            }
        }
        self.by_path.insert(path.to_string(), ino);
    }

    /// The name `from` of `ino` is now `to`; its other names stay.
    pub(crate) fn rename_name(&mut self, ino: u64, from: &str, to: &str) {
        let Some(n) = self.nodes.get_mut(&ino) else { return };
        if n.path == from {
            n.path = to.to_string();
        } else if let Some(a) = n.aliases.iter_mut().find(|a| *a == from) {
            *a = to.to_string();
        } else {
            n.aliases.push(to.to_string());
        }
        if self.by_path.get(from) == Some(&ino) {
            self.by_path.remove(from);
        }
        self.by_path.insert(to.to_string(), ino);
    }

    /// `path` names nothing any more; an inode it named keeps another name it has.
    pub(crate) fn forget_path(&mut self, path: &str) {
        let Some(ino) = self.by_path.remove(path) else { return };
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.aliases.retain(|a| a != path);
            if n.path == path {
                if let Some(other) = n.aliases.pop() {
                    n.path = other;
                }
            }
        }
    }

    pub(crate) fn drop_if_unused(&mut self, ino: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(n) = self.nodes.get(&ino) {
            if n.lookups == 0 && n.open_handles == 0 {
                for p in std::iter::once(&n.path).chain(&n.aliases) {
                    if self.by_path.get(p) == Some(&ino) {
                        self.by_path.remove(p);
                    }
                }
                self.nodes.remove(&ino);
            }
        }
    }
}

/// An inode number for a readdir entry the table does not know: readdir does not
/// return file ids, and the kernel uses lookup for the real one; this only has to be
/// non-zero (glibc skips d_ino 0) and stable for a name.
pub(crate) fn name_ino(path: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish() | 2
}

impl GustFs {
    pub fn new(client: &'static Client, opts: MountOptions) -> GustFs {
        let mut t = Table::default();
        t.nodes.insert(ROOT, Node::new("/", 1));
        t.by_path.insert("/".into(), ROOT);
        let table = Arc::new(Mutex::new(t));
        GustFs {
            client,
            coherence: Arc::new(coherence::Coherence::new(table.clone())),
            negative: negative::Negative::new(opts.negative_timeout),
            slices: Box::leak(Box::default()),
            opts,
            table,
            files: RwLock::new(HashMap::new()),
            dirs: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            hidden_seq: AtomicU64::new(0),
        }
    }

    pub(crate) fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).path(ino.0)
    }

    pub(crate) fn ino_of(path: &str, st: &Stat) -> u64 {
        if path == "/" {
            ROOT
        } else {
            st.ino
        }
    }

    pub(crate) fn attr(&self, ino: u64, st: &Stat) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: st.size,
            blocks: st.blocks,
            atime: time_of(st.atime_ns),
            mtime: time_of(st.mtime_ns),
            ctime: time_of(st.ctime_ns),
            crtime: time_of(st.ctime_ns),
            kind: file_type(st.kind),
            perm: (st.mode & 0o7777) as u16,
            nlink: st.nlink.max(1),
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev as u32,
            blksize: st.blksize.clamp(512, 1 << 20) as u32,
            flags: 0,
        }
    }

    /// Records that the kernel now holds one more lookup reference to `path`, whose
    /// attributes it may keep for `ttl`.
    pub(crate) fn remember(&self, path: &str, st: &Stat, ttl: Duration) -> FileAttr {
        let ino = Self::ino_of(path, st);
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        match t.nodes.get_mut(&ino) {
            Some(n) => n.lookups += 1,
            None => {
                t.nodes.insert(ino, Node::new(path, 1));
            }
        }
        // Also corrects the path if another client renamed the entry.
        t.set_path_linked(ino, path, st.nlink > 1 && st.kind != Kind::Dir);
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.known = Some(Known::of(st, ttl));
        }
        drop(t);
        self.attr(ino, st)
    }

    /// File id and kind of `ino` while what the kernel was told of them holds (not
    /// for a view's entry not fetched yet: its open goes by path and fetches).
    pub(crate) fn known(&self, ino: u64) -> Option<(u128, Kind)> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let k = t.nodes.get(&ino)?.known?;
        (k.holds() && !k.unfetched).then_some((k.file_id, k.kind))
    }

    /// Stat of an inode by its path, checking that the path still names that inode
    /// (it may have been replaced by another client).
    pub(crate) fn stat_ino(&self, ino: u64) -> Result<(String, Stat), Errno> {
        let path = self.table.lock().unwrap_or_else(|e| e.into_inner()).path(ino)?;
        let st = self.client.lstat(&path)?;
        if Self::ino_of(&path, &st) != ino {
            return Err(Errno(libc::ESTALE));
        }
        Ok((path, st))
    }

    /// The attributes of `ino` for an attribute reply (getattr, setattr), after
    /// `st` came back for `path`: what the kernel is told and how long it may keep
    /// it (coherence.rs), noted for `known`; `reply` sends it.
    pub(crate) fn attr_reply(&self, ino: u64, path: &str, st: Stat, reply: ReplyAttr) {
        let epoch = self.coherence.epoch();
        let told = self.for_kernel(path, st);
        if let Some(n) = self.table.lock().unwrap_or_else(|e| e.into_inner()).nodes.get_mut(&ino) {
            n.known = Some(Known::of(&told.st, told.attr));
        }
        reply.attr(&told.attr, &self.attr(ino, &told.st));
        if !told.attr.is_zero() {
            self.coherence.after_reply(epoch, &[path.to_string()]);
        }
    }

    /// Who creates an entry in directory `parent` (at `parent_path`): the request's
    /// caller, with the directory's group instead of the caller's if the directory
    /// has S_ISGID (as Linux's inode_init_owner does; the second value says so, and a
    /// new subdirectory then gets S_ISGID too). The directory's attributes come from
    /// the last lookup or getattr within the attribute timeout (the kernel looked the
    /// directory up to reach it), else from one stat (a create relative to a
    /// directory descriptor held open longer than that).
    pub(crate) fn creator(
        &self,
        req: &Request,
        parent: INodeNo,
        parent_path: &str,
    ) -> Result<(Credentials, bool), Errno> {
        if parent.0 == ROOT {
            // The root's attributes are fixed (mode 0777, no S_ISGID).
            return Ok((caller(req), false));
        }
        let cached = {
            let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            t.nodes.get(&parent.0).and_then(|n| n.known).filter(|k| k.holds()).map(|k| (k.mode, k.gid))
        };
        let (mode, gid) = match cached {
            Some(x) => x,
            None => {
                let st = self.client.lstat(parent_path)?;
                (st.mode, st.gid)
            }
        };
        let mut who = caller(req);
        let setgid = mode & libc::S_ISGID != 0;
        if setgid {
            who.gid = gid;
        }
        Ok((who, setgid))
    }

    pub(crate) fn file(&self, fh: FileHandle) -> Result<Arc<Handle>, Errno> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).get(&fh.0).cloned().ok_or(Errno(libc::EBADF))
    }

    pub(crate) fn fd(&self, fh: FileHandle) -> Result<(Arc<Handle>, i32), Errno> {
        let h = self.file(fh)?;
        let fd = h.fd;
        Ok((h, fd))
    }

    /// A lookup's (or a create's) reply: the kernel keeps the name and attributes
    /// while this process's grant on the record lasts (coherence.rs).
    pub(crate) fn entry(&self, reply: ReplyEntry, path: &str, st: &Stat) {
        let epoch = self.coherence.epoch();
        let told = self.for_kernel(path, st.clone());
        let attr = self.remember(path, &told.st, told.attr);
        reply.entry_with_ttls(&told.attr, &told.entry, &attr, Generation(0));
        if !(told.attr.is_zero() && told.entry.is_zero()) {
            self.coherence.after_reply(epoch, &[path.to_string()]);
        }
    }

    /// A negative entry: the name is absent, and the kernel may keep that for `ttl`
    /// (node id 0 is FUSE's "no such entry" that the kernel caches).
    pub(crate) fn absent(&self, reply: ReplyEntry, ttl: Duration) {
        let t = UNIX_EPOCH;
        let attr = FileAttr {
            ino: INodeNo(0),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::RegularFile,
            perm: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 512,
            flags: 0,
        };
        reply.entry_with_ttls(&ttl, &ttl, &attr, Generation(0));
    }

    pub(crate) fn ro(&self) -> Result<(), Errno> {
        if self.opts.read_only {
            Err(Errno(libc::EROFS))
        } else {
            Ok(())
        }
    }

    /// Open flags of a handle opened with `client_flags`.
    pub(crate) fn open_flags(&self, client_flags: i32) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if self.opts.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        }
        // Without it every close of a read-only handle sends FLUSH, which is where the
        // kernel has a file system drop the closing process's POSIX locks
        // (locks.rs): a mount that serves locks needs every FLUSH.
        if !self.opts.writeback_cache && self.opts.local_locks && client_flags & libc::O_ACCMODE == libc::O_RDONLY {
            // A read-only handle's flush has nothing to do, so the kernel may skip
            // the request at close(). A writable one's flush sends the size its
            // writes reached (the client batches it, size_cache.rs): without the
            // FLUSH, that happened at RELEASE, after close(2) had returned, and
            // another client's stat right after the close saw the old size. With the
            // writeback cache the kernel ignores this flag and flushes at close.
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }

    /// The flags the client descriptor is opened with. Writable handles are O_RDWR
    /// because the kernel reads through any handle to fill pages (writeback cache,
    /// shared mmap). With the writeback cache the kernel places appends itself, so
    /// O_APPEND must not move them again.
    pub(crate) fn client_flags(&self, kernel_flags: i32) -> i32 {
        let acc = kernel_flags & libc::O_ACCMODE;
        let mut f = if acc == libc::O_RDONLY { libc::O_RDONLY } else { libc::O_RDWR };
        if kernel_flags & libc::O_APPEND != 0 && !self.opts.writeback_cache {
            f |= libc::O_APPEND;
        }
        f
    }

    pub(crate) fn add_handle(&self, ino: u64, fd: i32, client_flags: i32) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = self.table.lock().unwrap_or_else(|e| e.into_inner()).nodes.get_mut(&ino) {
            n.open_handles += 1;
        }
        self.files
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh, Arc::new(Handle { client_flags, fd, lock_owners: Mutex::new(Vec::new()) }));
        fh
    }

    /// Renames an entry that is still open to a hidden name in the same directory, so
    /// its open handles keep working; removed at its last release.
    pub(crate) fn hide(&self, ino: u64, path: &str) -> Result<(), Errno> {
        let seq = self.hidden_seq.fetch_add(1, Ordering::Relaxed);
        let hidden = child(parent(path), OsStr::new(&format!(".gust_hidden.{ino:x}.{seq}")))?;
        self.negative.added(&hidden);
        self.client.rename(path, &hidden)?;
        self.negative.removed(path);
        // The client's rename also moves its descriptors open on `path`. Only that
        // name is hidden: a hard-linked file's other names still reach the inode
        // (git links each new object to its name and unlinks the temporary one,
        // whose release may come later; hiding the inode's current name lost the
        // object's).
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.rename_name(ino, path, &hidden);
        let released = match t.nodes.get_mut(&ino) {
            Some(n) => {
                n.hidden.push(hidden.clone());
                n.open_handles == 0
            }
            None => true,
        };
        drop(t);
        if released {
            // The last release came while the rename was under way: it did not
            // know the name was hidden, so the name goes now.
            self.remove_hidden(ino, &hidden);
        }
        Ok(())
    }

    /// Removes the hidden name of `ino` (unlinked while open, now released).
    pub(crate) fn remove_hidden(&self, ino: u64, hidden: &str) {
        {
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            t.forget_path(hidden);
            if let Some(n) = t.nodes.get_mut(&ino) {
                n.hidden.retain(|h| h != hidden);
            }
            t.removing.push(hidden.to_string());
            t.drop_if_unused(ino);
        }
        let _ = self.client.unlink(hidden);
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = t.removing.iter().position(|p| p == hidden) {
            t.removing.swap_remove(i);
        }
    }

    /// Inode of `path` if it is in the table and has open handles.
    /// Whether directory `dir` holds a file unlinked while open, kept under a hidden
    /// name until its last release.
    pub(crate) fn hidden_open_in(&self, dir: &str) -> bool {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.nodes.values().any(|n| n.open_handles > 0 && n.hidden.iter().any(|h| gust_client::path::parent(h) == dir))
            || t.removing.iter().any(|p| gust_client::path::parent(p) == dir)
    }

    pub(crate) fn open_ino(&self, path: &str) -> Option<u64> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let ino = *t.by_path.get(path)?;
        (t.nodes.get(&ino)?.open_handles > 0).then_some(ino)
    }
}
