//! Namespace operations: lookups that follow symlinks, stat, access, mkdir, mknod,
//! rmdir, unlink, symlink, readlink, chmod, chown, utimens. Each is one request to
//! the daemon that holds the record (chown: a stat first, to check the caller may;
//! mkdir and rmdir: a merge on the parent's daemon, for its link count and times),
//! plus the chunk removals of an unlinked file.
//!
//! Not for: rename (rename.rs), listings (readdir.rs), descriptors (open_files.rs).

use crate::credentials::Credentials;
use crate::error::unexpected;
use crate::permissions::Checked;
use crate::stat::Stat;
use crate::{normalize, Client, Errno, Result};
use gust_proto::{path, FileKind, Record, RemoveKind, Request, Response, PATH_ARG_BYTES_MAX};

/// Symlinks followed before ELOOP (Linux's limit).
pub(crate) const SYMLINK_HOPS_MAX: u32 = 40;

pub(crate) use gust_proto::now_ns;

/// A generator seeded from the OS once per process (not per id: a getrandom call
/// per create showed in profiles of small-file creates), and again in a child after
/// fork, whose copy of the parent's state would repeat the parent's ids. Not the
/// thread-local one: deferred creates may be settled at process exit, after
/// thread-locals are gone (inline.rs).
static FILE_IDS: std::sync::Mutex<Option<(u64, rand::rngs::StdRng)>> = std::sync::Mutex::new(None);

fn random_u128() -> u128 {
    use rand::{Rng, SeedableRng};
    let generation = crate::rpc::fork_generation();
    // Held by another thread at a fork: the child never gets it; the OS then.
    let Ok(mut g) = FILE_IDS.try_lock() else { return rand::rngs::OsRng.gen() };
    match g.as_mut() {
        Some((gen, rng)) if *gen == generation => rng.gen(),
        _ => {
            let mut rng = rand::rngs::StdRng::from_rng(rand::rngs::OsRng).expect("the OS random source");
            let r = rng.gen();
            *g = Some((generation, rng));
            r
        }
    }
}

fn new_file_id() -> u128 {
    loop {
        let random = random_u128();
        // With local placement, the id names the daemon of this node that holds
        // the file's chunks (home.rs).
        let id = gust_placement::local::file_id(random, crate::home::home());
        if id != 0 {
            return id;
        }
    }
}

impl Client {
    /// The attributes of `path`: its record, or for a name of a hard-linked file the
    /// record at the file's link path (links.rs).
    pub(crate) fn get_record(&self, path: &str) -> Result<Record> {
        let r = self.get_stored_record(path)?;
        match r.linked_to() {
            None => Ok(r),
            Some(link) => self.get_stored_record(link),
        }
    }

    /// The record of `path` as stored (a name of a linked file is not followed): from
    /// a grant this process holds (grants.rs), else one request, which may bring a
    /// grant.
    pub(crate) fn get_stored_record(&self, path: &str) -> Result<Record> {
        // Lookups that did not settle (`Client::norm`) still see this process's unlinks.
        self.flush_removes();
        if let Some((r, _)) = self.granted_record(path, false) {
            return Ok(r);
        }
        let daemon = self.md_daemon(path);
        let ticket = self.lookup_ticket(daemon);
        match self.transport.call(daemon, Request::Stat { path: path.to_string() })? {
            Response::Record(r) => {
                self.lookup_answered(ticket, daemon, path, &r, None);
                Ok(r)
            }
            r => Err(unexpected(r)),
        }
    }

    /// Follows symlinks at the final component. Returns the resolved path and record.
    pub(crate) fn resolve(&self, path: &str) -> Result<(String, Record)> {
        self.resolve_normalized(self.norm(path)?)
    }

    /// `resolve` of a normalized path, without settling anything first.
    fn resolve_normalized(&self, mut p: String) -> Result<(String, Record)> {
        for _ in 0..=SYMLINK_HOPS_MAX {
            let r = self.lookup(&p)?;
            if r.kind != FileKind::Symlink {
                return Ok((p, r));
            }
            p = self.link_target_path(&p, &r.target)?;
        }
        Err(Errno(libc::ELOOP))
    }

    pub(crate) fn link_target_path(&self, link: &str, target: &str) -> Result<String> {
        if target.starts_with('/') {
            // An absolute target inside the mount directory maps into the file
            // system; other absolute targets are outside GustFS.
            self.internal_path(target).ok_or(Errno(libc::EXDEV))
        } else {
            normalize(&path::join(path::parent(link), target))
        }
    }

    pub(crate) fn check_parent(&self, path: &str) -> Result<()> {
        if !self.hosts.check_parent {
            return Ok(());
        }
        self.check_parent_always(path)
    }

    /// `check_parent` whatever the instance's setting: for link, which programs
    /// (git) send first and follow with a mkdir of the parent only on ENOENT.
    pub(crate) fn check_parent_always(&self, path: &str) -> Result<()> {
        if path == "/" {
            return Ok(());
        }
        // Not `resolve`: that would send the queue of batched creates (create_batch.rs)
        // before every create; a parent is a directory, never in that queue.
        let (_, r) = self.resolve_normalized(normalize(path::parent(path))?)?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(())
    }

    /// A new record owned by the caller ([`Credentials`]).
    pub(crate) fn new_record(kind: FileKind, mode: u32, target: String) -> Record {
        let t = now_ns();
        let (uid, gid) = Credentials::owner();
        Record {
            kind,
            mode: mode & 0o7777,
            size: 0,
            file_id: new_file_id(),
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            ctime_ns: t,
            mtime_ns: t,
            atime_ns: t,
            target,
            uid,
            gid,
            xattrs: Vec::new(),
        }
    }

    /// Follows a symlink at the last component. Answered from a recent listing when
    /// it returned this entry (listing.rs).
    pub(crate) fn stat_impl(&self, path: &str) -> Result<Stat> {
        let p = self.norm(path)?;
        if let Some(r) = self.listing.get(&p).filter(|r| r.kind != FileKind::Symlink) {
            return Ok(Stat::from_record(&r, self.chunk_size));
        }
        let (_, r) = self.resolve(&p)?;
        Ok(Stat::from_record(&r, self.chunk_size))
    }

    /// Answered from a recent listing when it returned this entry (listing.rs).
    pub(crate) fn lstat_impl(&self, path: &str) -> Result<Stat> {
        let p = self.norm(path)?;
        if let Some(r) = self.listing.get(&p) {
            return Ok(Stat::from_record(&r, self.chunk_size));
        }
        Ok(Stat::from_record(&self.lookup(&p)?, self.chunk_size))
    }

    pub(crate) fn fstat_impl(&self, fd: i32) -> Result<Stat> {
        Ok(Stat::from_record(&self.record_of_fd(fd)?.1, self.chunk_size))
    }

    /// The path and record of an open descriptor's file: a file this process
    /// created and has not sent yet is its pending record (inline.rs), without
    /// sending it.
    pub(crate) fn record_of_fd(&self, fd: i32) -> Result<(String, Record)> {
        let pending = self.files.get(fd)?;
        if let Some(r) = self.pending_record(&pending) {
            return Ok((pending.path(), r));
        }
        let p = self.file(fd)?.path();
        let r = self.get_record(&p)?;
        Ok((p, r))
    }

    /// access(2) for the caller ([`Credentials`]): the owner's, the group's or the
    /// others' bits, whichever class the caller falls in. Root may read and write
    /// anything, and execute what has any x bit (or search any directory).
    pub(crate) fn access_impl(&self, path: &str, mode: i32) -> Result<()> {
        let st = self.stat_impl(path)?;
        if mode == libc::F_OK {
            return Ok(());
        }
        let who = Credentials::current();
        let m = st.mode;
        let granted = if who.is_root() {
            0o6 | u32::from(m & 0o111 != 0 || st.kind == FileKind::Dir)
        } else if who.uid == st.uid {
            (m >> 6) & 0o7
        } else if who.in_group(st.gid) {
            (m >> 3) & 0o7
        } else {
            m & 0o7
        };
        let want = (mode & (libc::R_OK | libc::W_OK | libc::X_OK)) as u32;
        if want & !granted == 0 {
            Ok(())
        } else {
            Err(Errno(libc::EACCES))
        }
    }

    /// chown, lchown (`follow` false) and fchown (through the descriptor's path),
    /// with POSIX's rules for the caller ([`Credentials`]): only root changes the
    /// owner; the owner may change the group to one of its own groups; anyone else
    /// gets EPERM. `None` leaves an id unchanged (-1 in C). The change clears the
    /// set-user-id bit of a non-directory (and set-group-id with group execute), as
    /// Linux does, and sets ctime.
    pub(crate) fn chown_impl(&self, path: &str, uid: Option<u32>, gid: Option<u32>, follow: bool) -> Result<Stat> {
        let (p, r) = if follow {
            self.resolve(path)?
        } else {
            let p = normalize(path)?;
            let r = self.get_record(&p)?;
            (p, r)
        };
        let who = Credentials::current();
        if !who.is_root() {
            let owner = who.uid == r.uid;
            if uid.is_some_and(|u| !(owner && u == r.uid))
                || gid.is_some_and(|g| !(owner && (g == r.gid || who.in_group(g))))
            {
                return Err(Errno(libc::EPERM));
            }
        }
        match self.call_md(&p, Request::SetOwner { path: p.clone(), uid, gid, ctime_ns: now_ns() })? {
            Response::Record(r) => Ok(Stat::from_record(&r, self.chunk_size)),
            r => Err(unexpected(r)),
        }
    }

    /// chown of an open descriptor's file.
    pub fn fchown(&self, fd: i32, uid: Option<u32>, gid: Option<u32>) -> Result<Stat> {
        let f = self.file(fd)?;
        self.chown(&f.path(), uid, gid, false)
    }

    /// mknod and mkfifo, and the name of a Unix socket (bind): a record of `kind`
    /// (file, FIFO or socket), owned by the caller. Device nodes: [`Client::mknod_device`].
    pub fn mknod(&self, path: &str, kind: FileKind, mode: u32) -> Result<Stat> {
        if !matches!(kind, FileKind::File | FileKind::Fifo | FileKind::Socket) {
            return Err(Errno(libc::EINVAL));
        }
        self.make_node(path, kind, mode, 0)
    }

    /// mknod of a block or character device: a record with its device number,
    /// stored and never opened (the mount is nodev: docs/SEMANTICS.md). Only root
    /// may make one (CAP_MKNOD), as on Linux.
    pub fn mknod_device(&self, path: &str, kind: FileKind, mode: u32, rdev: u64) -> Result<Stat> {
        if !kind.is_device() {
            return Err(Errno(libc::EINVAL));
        }
        if !crate::Credentials::is_root_caller() {
            return Err(Errno(libc::EPERM));
        }
        self.make_node(path, kind, mode, rdev)
    }

    /// The name of a Unix socket bound through a front end without a kernel
    /// (the preload library): a socket record whose target is the abstract address
    /// the socket is bound to on this node (`@` and its name).
    pub fn bind_socket(&self, path: &str, mode: u32, address: &str) -> Result<()> {
        let p = normalize(path)?;
        if p == "/" {
            return Err(Errno(libc::EADDRINUSE));
        }
        self.make_name(&p, Self::new_record(FileKind::Socket, mode, address.to_string())).map(|_| ())
    }

    /// Makes the new name `p` (normalized, not "/") with `record`, if its parent
    /// exists (when checked) and the caller may: one exclusive create. mkdir,
    /// symlink, mknod and a socket's bind.
    fn make_name(&self, p: &str, record: Record) -> Result<Record> {
        self.check_parent(p)?;
        self.may_make(p)?;
        match self.call_md(p, Request::Create { path: p.to_string(), record, exclusive: true })? {
            Response::Record(r) => Ok(r),
            r => Err(unexpected(r)),
        }
    }

    /// The abstract address a socket record names ([`Client::bind_socket`]); `None`
    /// for one made otherwise. ECONNREFUSED for anything but a socket, as connect(2).
    pub fn socket_address(&self, path: &str) -> Result<Option<String>> {
        let r = self.get_record(&normalize(path)?)?;
        if r.kind != FileKind::Socket {
            return Err(Errno(libc::ECONNREFUSED));
        }
        Ok(r.target.starts_with('@').then_some(r.target))
    }

    fn make_node(&self, path: &str, kind: FileKind, mode: u32, rdev: u64) -> Result<Stat> {
        let p = normalize(path)?;
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        let record = Record { size: rdev, ..Self::new_record(kind, mode, String::new()) };
        self.make_name(&p, record).map(|r| Stat::from_record(&r, self.chunk_size))
    }

    pub(crate) fn mkdir_impl(&self, path: &str, mode: u32) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        self.make_name(&p, Self::new_record(FileKind::Dir, mode, String::new()))?;
        self.dir_changed(path::parent(&p), 1);
        Ok(())
    }

    /// Tells the daemon of directory `dir` that it gained (+1) or lost (-1)
    /// subdirectories, or that a directory moved within it (0): its link count and
    /// times follow (one request; none for the root, which keeps no record). Best
    /// effort: the change itself is done, so a failure here (the directory removed
    /// meanwhile, its daemon down) leaves its count or times stale and is logged.
    pub(crate) fn dir_changed(&self, dir: &str, subdirs_delta: i32) {
        if dir == "/" {
            return;
        }
        let req = Request::DirChanged { path: dir.to_string(), subdirs_delta, time_ns: now_ns() };
        if let Err(e) = self.call_md(dir, req) {
            tracing::debug!("link count of {dir} not updated ({subdirs_delta:+}): {e}");
        }
    }

    pub(crate) fn rmdir_impl(&self, path: &str) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno(libc::EBUSY));
        }
        let r = self.get_record(&p)?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        self.may_unlink(&p)?;
        if self.dir_has_children(&p)? {
            return Err(Errno(libc::ENOTEMPTY));
        }
        let d = self.md_daemon(&p);
        self.transport.call(d, Request::Remove { path: p.clone(), kind: RemoveKind::Dir })?;
        self.dir_changed(path::parent(&p), -1);
        Ok(())
    }

    /// Removes a file's chunks, asking only the daemons that can hold them.
    pub(crate) fn remove_chunks(&self, r: &Record) -> Result<()> {
        if r.kind != FileKind::File || r.size == 0 {
            return Ok(());
        }
        self.call_chunk_daemons(r.file_id, 0, r.size, None, || Request::RemoveChunks { file_id: r.file_id })
    }

    /// Removes a file or symlink: one RPC for the record, plus one per daemon that
    /// can hold its chunks (none for an empty file or one whose data was inline,
    /// `Response::Removed`).
    /// Under a claim on its directory, the unlink of a small file may be queued and
    /// sent with others (remove_batch.rs): no request then.
    pub(crate) fn unlink_impl(&self, path: &str) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm_for_unlink(path)?;
        if p == "/" {
            return Err(Errno(libc::EISDIR));
        }
        if self.remove_queued(&p) {
            return Err(Errno(libc::ENOENT));
        }
        // A checked caller's unlink is sent: the daemon's answer to it is what
        // counts (the mode bits may have changed since this process looked).
        if self.may_unlink(&p)? == Checked::No && self.unlink_deferred(&p) {
            return Ok(());
        }
        let d = self.md_daemon(&p);
        match self.transport.call(d, Request::Remove { path: p, kind: RemoveKind::NotDir })? {
            Response::Removed { record, inline } => self.name_removed(&record, inline),
            r => Err(unexpected(r)),
        }
    }

    pub(crate) fn symlink_impl(&self, target: &str, linkpath: &str) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(linkpath)?;
        if target.is_empty() {
            return Err(Errno(libc::ENOENT));
        }
        // symlink(2): ENAMETOOLONG for a target of PATH_MAX bytes or more.
        if target.len() >= PATH_ARG_BYTES_MAX || target.contains('\0') {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        self.make_name(&p, Self::new_record(FileKind::Symlink, 0o777, target.to_string())).map(|_| ())
    }

    pub(crate) fn readlink_impl(&self, path: &str) -> Result<String> {
        let r = self.lookup(&self.norm(path)?)?;
        if r.kind != FileKind::Symlink {
            return Err(Errno(libc::EINVAL));
        }
        Ok(r.target)
    }

    fn set_attr(
        &self,
        path: &str,
        mode: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        follow: bool,
    ) -> Result<()> {
        self.listing.invalidate();
        let p = if follow { self.resolve(path)?.0 } else { self.norm(path)? };
        if mode.is_some() {
            self.may_chmod(&self.get_record(&p)?)?;
        }
        let req = Request::SetAttr { path: p.clone(), mode, atime_ns: atime, mtime_ns: mtime, ctime_ns: now_ns() };
        self.call_md(&p, req).map(|_| ())
    }

    pub(crate) fn chmod_impl(&self, path: &str, mode: u32) -> Result<()> {
        self.set_attr(path, Some(mode), None, None, true)
    }

    /// Sets access and modification times (nanoseconds since the epoch); `None`
    /// leaves one unchanged.
    pub(crate) fn utimens_impl(
        &self,
        path: &str,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
        follow: bool,
    ) -> Result<()> {
        self.set_attr(path, None, atime_ns, mtime_ns, follow)
    }
}
