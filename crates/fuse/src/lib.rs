//! The GustFS FUSE front end: `gust mount` serves one instance at a directory so that
//! any program (static binaries, exec, mmap, any language) can use it.
//!
//! What it is for: translating the kernel's inode-based FUSE requests into calls on the
//! path-based client core ([`gust_client::Client`]). What it is not for: caching or
//! policy of its own beyond what the kernel's attribute/entry/page caches give (their
//! timeouts are mount options), and anything the client core does not offer (hard
//! links: EPERM; xattrs, locks, device nodes).
//!
//! Owners: every request runs as its caller ([`gust_client::as_caller`] with the
//! request's uid and gid), so what it creates is the caller's, and chown is checked
//! against the caller's groups (read from /proc/PID/status). With `--allow-other`
//! the kernel checks mode bits and owners itself (`default_permissions`) against
//! the attributes reported here, which are the records' own. FIFOs and sockets are
//! records of their kind; the kernel opens them node-locally and never asks here.
//!
//! The inode table maps inode numbers (the client's `Stat::ino`, derived from the
//! file id, so a rename keeps its inode number) to paths. Entries live while the kernel
//! holds a lookup reference (lookup counts, `forget`). Rename rewrites the paths of the
//! renamed entry and, for directories, of every remembered descendant (the client
//! core moves its own open descriptors). A file unlinked while open is
//! renamed to a hidden name and removed at its last release (as libfuse does), so the
//! open descriptors keep working.
//!
//! Sizing sketch: one request costs one or two RPCs (tens of microseconds on loopback)
//! plus a kernel round trip (a few microseconds). A 1 MiB write is one FUSE request
//! (max_write 1 MiB) and one client pwrite, which fans out to the chunk daemons in
//! parallel. `threads` request loops (default 8) each hold one 16 MiB receive buffer
//! of fuser's (touched only up to max_write), so memory stays under ~10 MiB touched.

use fuser::{
    AccessFlags, Config, Errno as FErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    SessionACL, TimeOrNow, WriteFlags,
};
use gust_client::path::{join, parent, rebase};
use gust_client::{as_caller, Client, Credentials, DirEntry, DirStream, Errno, Kind, Stat};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Largest write the kernel sends in one request. Linux caps a request at
/// `fuse_max_pages_limit` pages (256 = 1 MiB by default); larger values are clamped.
pub const MAX_WRITE_BYTES: u32 = 1 << 20;
/// Bound on the buffer one read request allocates (the kernel asks for at most
/// max_pages pages; this only guards against a surprise).
const READ_BYTES_MAX: u32 = 16 << 20;
/// Upper bound on request loops: each owns a receive buffer and a /dev/fuse clone.
pub const THREADS_MAX: usize = 64;
/// Entries the kernel may have outstanding as asynchronous (readahead, writeback)
/// requests; more lets readahead of several files overlap.
const MAX_BACKGROUND_REQUESTS: u16 = 64;
/// Seconds the signal handler waits for the request loops to end after unmounting
/// before it exits the process (which aborts the FUSE connection): unmount never hangs.
const SHUTDOWN_GRACE_MS: u64 = 3000;

/// Mount options; `Default` gives the documented defaults (docs/FUSE.md).
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// How long the kernel may cache attributes (stat) without asking.
    pub attr_timeout: Duration,
    /// How long the kernel may cache a name -> inode lookup without asking.
    pub entry_timeout: Duration,
    /// Let the kernel buffer writes in the page cache and send them later in large
    /// pieces (FUSE_WRITEBACK_CACHE).
    pub writeback_cache: bool,
    /// Bypass the page cache for file data (FOPEN_DIRECT_IO): every read and write
    /// goes to the daemons; mmap needs kernel support (Linux 6.6+).
    pub direct_io: bool,
    /// Let users other than the one who mounted access the mount (implies kernel
    /// permission checks, `default_permissions`).
    pub allow_other: bool,
    /// Mount read-only.
    pub read_only: bool,
    /// Request loops serving the kernel concurrently.
    pub threads: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            writeback_cache: false,
            direct_io: false,
            allow_other: false,
            read_only: false,
            threads: 8,
        }
    }
}

struct Node {
    path: String,
    /// File id, kind, mode and group from the last lookup/getattr/create, and when:
    /// `open` (and a create's set-group-id check of its directory) within the
    /// attribute timeout trusts them, as the kernel trusts the attributes.
    known: Option<Known>,
    /// Lookup references the kernel holds (FUSE `nlookup`).
    lookups: u64,
    /// Open file handles on this inode.
    open_handles: u32,
    /// Renamed to a hidden name because it was unlinked while open; removed at the
    /// last release.
    hidden: bool,
}

/// What the last lookup or getattr of an inode said, and when.
#[derive(Clone, Copy)]
struct Known {
    file_id: u128,
    kind: Kind,
    mode: u32,
    gid: u32,
    at: Instant,
}

impl Known {
    fn of(st: &Stat) -> Known {
        Known { file_id: st.file_id, kind: st.kind, mode: st.mode, gid: st.gid, at: Instant::now() }
    }
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    by_path: BTreeMap<String, u64>,
}

impl Table {
    fn path(&self, ino: u64) -> Result<String, Errno> {
        self.nodes.get(&ino).map(|n| n.path.clone()).ok_or(Errno(libc::ESTALE))
    }

    fn set_path(&mut self, ino: u64, path: &str) {
        let Some(n) = self.nodes.get_mut(&ino) else { return };
        if n.path != path {
            if self.by_path.get(&n.path) == Some(&ino) {
                self.by_path.remove(&n.path);
            }
            n.path = path.to_string();
        }
        self.by_path.insert(path.to_string(), ino);
    }

    fn forget_path(&mut self, path: &str) {
        self.by_path.remove(path);
    }

    fn drop_if_unused(&mut self, ino: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(n) = self.nodes.get(&ino) {
            if n.lookups == 0 && n.open_handles == 0 {
                if self.by_path.get(&n.path) == Some(&ino) {
                    self.by_path.remove(&n.path);
                }
                self.nodes.remove(&ino);
            }
        }
    }
}

/// One open file: a client descriptor (which follows renames made through this client).
struct Handle {
    client_flags: i32,
    fd: i32,
}

struct DirState {
    stream: Option<DirStream<'static>>,
    /// Position of the next entry to hand out ("." is 0, ".." is 1, then the stream).
    pos: u64,
    /// The entry that did not fit in the previous reply.
    pending: Option<DirEntry>,
    /// A listing error to report on the next call (the stream ends after an error).
    failed: Option<Errno>,
}

struct DirHandle {
    path: String,
    /// The directory's attributes at opendir ("." and ".." in READDIRPLUS).
    stat: Stat,
    state: Mutex<DirState>,
}

/// What adding one entry to a READDIR(PLUS) reply did.
#[derive(PartialEq, Eq)]
enum Emitted {
    Added,
    /// The reply is full; the entry goes first into the next one.
    Full,
    /// Gone since the listing (READDIRPLUS could not stat it): left out.
    Skipped,
}

const ROOT: u64 = 1;

/// The file system the kernel talks to.
pub struct GustFs {
    client: &'static Client,
    opts: MountOptions,
    table: Mutex<Table>,
    files: RwLock<HashMap<u64, Arc<Handle>>>,
    dirs: RwLock<HashMap<u64, Arc<DirHandle>>>,
    next_fh: AtomicU64,
    hidden_seq: AtomicU64,
}

fn fe(e: Errno) -> FErrno {
    FErrno::from_i32(e.0)
}

fn time_of(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_nanos(ns.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// Nanoseconds since the epoch of a time the kernel sent in a setattr; `now` for
/// UTIME_NOW (one value for both times, as the kernel would give them).
fn ns_of(t: TimeOrNow, now: i64) -> i64 {
    let t = match t {
        TimeOrNow::Now => return now,
        TimeOrNow::SpecificTime(t) => t,
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        // fuser 0.18 builds a time before 1970 from the kernel's (secs < 0, nsec) as
        // epoch - (-secs s + nsec ns) (its time.rs has a TODO for it); the time meant
        // is secs s + nsec ns, so take the parts back apart.
        Err(e) => {
            let d = e.duration();
            // Seconds bounded so that the product fits an i64.
            let secs = d.as_secs().min(i64::MAX as u64 / 1_000_000_000 - 1) as i64;
            -secs * 1_000_000_000 + d.subsec_nanos() as i64
        }
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
    }
}

/// The caller of a request, without supplementary groups (enough to own what it
/// creates).
fn caller(req: &Request) -> Credentials {
    Credentials { uid: req.uid(), gid: req.gid(), groups: Vec::new() }
}

/// The caller of a request with its supplementary groups, for checks that need them
/// (chown's new group, access). A process that is gone by now has none.
fn caller_with_groups(req: &Request) -> Credentials {
    let mut who = caller(req);
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) {
            who.groups = line.split_whitespace().filter_map(|g| g.parse().ok()).collect();
        }
    }
    who
}

fn child(dir: &str, name: &OsStr) -> Result<String, Errno> {
    // The wire protocol carries names as UTF-8 strings.
    let name = name.to_str().ok_or(Errno(libc::EINVAL))?;
    gust_client::path::child(dir, name).map_err(Errno)
}

/// An inode number for a readdir entry the table does not know: readdir does not
/// return file ids, and the kernel uses lookup for the real one; this only has to be
/// non-zero (glibc skips d_ino 0) and stable for a name.
fn name_ino(path: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish() | 2
}

impl GustFs {
    pub fn new(client: &'static Client, opts: MountOptions) -> GustFs {
        let mut t = Table::default();
        t.nodes.insert(ROOT, Node { path: "/".into(), known: None, lookups: 1, open_handles: 0, hidden: false });
        t.by_path.insert("/".into(), ROOT);
        GustFs {
            client,
            opts,
            table: Mutex::new(t),
            files: RwLock::new(HashMap::new()),
            dirs: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            hidden_seq: AtomicU64::new(0),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        self.table.lock().unwrap().path(ino.0)
    }

    fn ino_of(path: &str, st: &Stat) -> u64 {
        if path == "/" {
            ROOT
        } else {
            st.ino
        }
    }

    fn attr(&self, ino: u64, st: &Stat) -> FileAttr {
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
            rdev: 0,
            blksize: st.blksize.clamp(512, 1 << 20) as u32,
            flags: 0,
        }
    }

    /// Records that the kernel now holds one more lookup reference to `path`.
    fn remember(&self, path: &str, st: &Stat) -> FileAttr {
        let ino = Self::ino_of(path, st);
        let mut t = self.table.lock().unwrap();
        match t.nodes.get_mut(&ino) {
            Some(n) => n.lookups += 1,
            None => {
                t.nodes.insert(
                    ino,
                    Node { path: path.to_string(), known: None, lookups: 1, open_handles: 0, hidden: false },
                );
            }
        }
        // Also corrects the path if another client renamed the entry.
        t.set_path(ino, path);
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.known = Some(Known::of(st));
        }
        drop(t);
        self.attr(ino, st)
    }

    /// File id and kind of `ino` if fetched within the attribute timeout.
    fn known(&self, ino: u64) -> Option<(u128, Kind)> {
        let t = self.table.lock().unwrap();
        let k = t.nodes.get(&ino)?.known?;
        (k.at.elapsed() < self.opts.attr_timeout).then_some((k.file_id, k.kind))
    }

    /// Stat of an inode by its path, checking that the path still names that inode
    /// (it may have been replaced by another client).
    fn stat_ino(&self, ino: u64) -> Result<(String, Stat), Errno> {
        let path = self.table.lock().unwrap().path(ino)?;
        let st = self.client.lstat(&path)?;
        if Self::ino_of(&path, &st) != ino {
            return Err(Errno(libc::ESTALE));
        }
        if let Some(n) = self.table.lock().unwrap().nodes.get_mut(&ino) {
            n.known = Some(Known::of(&st));
        }
        Ok((path, st))
    }

    /// Who creates an entry in directory `parent` (at `parent_path`): the request's
    /// caller, with the directory's group instead of the caller's if the directory
    /// has S_ISGID (as Linux's inode_init_owner does; the second value says so, and a
    /// new subdirectory then gets S_ISGID too). The directory's attributes come from
    /// the last lookup or getattr within the attribute timeout (the kernel looked the
    /// directory up to reach it), else from one stat (a create relative to a
    /// directory descriptor held open longer than that).
    fn creator(&self, req: &Request, parent: INodeNo, parent_path: &str) -> Result<(Credentials, bool), Errno> {
        if parent.0 == ROOT {
            // The root's attributes are fixed (mode 0777, no S_ISGID).
            return Ok((caller(req), false));
        }
        let cached = {
            let t = self.table.lock().unwrap();
            t.nodes
                .get(&parent.0)
                .and_then(|n| n.known)
                .filter(|k| k.at.elapsed() < self.opts.attr_timeout)
                .map(|k| (k.mode, k.gid))
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

    fn file(&self, fh: FileHandle) -> Result<Arc<Handle>, Errno> {
        self.files.read().unwrap().get(&fh.0).cloned().ok_or(Errno(libc::EBADF))
    }

    fn fd(&self, fh: FileHandle) -> Result<(Arc<Handle>, i32), Errno> {
        let h = self.file(fh)?;
        let fd = h.fd;
        Ok((h, fd))
    }

    fn entry(&self, reply: ReplyEntry, path: &str, st: &Stat) {
        let attr = self.remember(path, st);
        reply.entry_with_ttls(&self.opts.attr_timeout, &self.opts.entry_timeout, &attr, Generation(0));
    }

    fn ro(&self) -> Result<(), Errno> {
        if self.opts.read_only {
            Err(Errno(libc::EROFS))
        } else {
            Ok(())
        }
    }

    fn open_flags(&self) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if self.opts.direct_io {
            f |= FopenFlags::FOPEN_DIRECT_IO;
        }
        if !self.opts.writeback_cache {
            // Our flush has nothing to do (the client core buffers nothing), so the
            // kernel may skip the request at close(). With the writeback cache the
            // kernel ignores this flag and flushes dirty pages at close as it must.
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }

    /// The flags the client descriptor is opened with. Writable handles are O_RDWR
    /// because the kernel reads through any handle to fill pages (writeback cache,
    /// shared mmap). With the writeback cache the kernel places appends itself, so
    /// O_APPEND must not move them again.
    fn client_flags(&self, kernel_flags: i32) -> i32 {
        let acc = kernel_flags & libc::O_ACCMODE;
        let mut f = if acc == libc::O_RDONLY { libc::O_RDONLY } else { libc::O_RDWR };
        if kernel_flags & libc::O_APPEND != 0 && !self.opts.writeback_cache {
            f |= libc::O_APPEND;
        }
        f
    }

    fn add_handle(&self, ino: u64, fd: i32, client_flags: i32) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        if let Some(n) = self.table.lock().unwrap().nodes.get_mut(&ino) {
            n.open_handles += 1;
        }
        self.files.write().unwrap().insert(fh, Arc::new(Handle { client_flags, fd }));
        fh
    }

    /// Renames an entry that is still open to a hidden name in the same directory, so
    /// its open handles keep working; removed at its last release.
    fn hide(&self, ino: u64, path: &str) -> Result<(), Errno> {
        let seq = self.hidden_seq.fetch_add(1, Ordering::Relaxed);
        let hidden = child(parent(path), OsStr::new(&format!(".gust_hidden.{ino:x}.{seq}")))?;
        self.client.rename(path, &hidden)?;
        // The client's rename also moves its descriptors open on `path`.
        let mut t = self.table.lock().unwrap();
        t.set_path(ino, &hidden);
        if let Some(n) = t.nodes.get_mut(&ino) {
            n.hidden = true;
        }
        Ok(())
    }

    /// Inode of `path` if it is in the table and has open handles.
    fn open_ino(&self, path: &str) -> Option<u64> {
        let t = self.table.lock().unwrap();
        let ino = *t.by_path.get(path)?;
        (t.nodes.get(&ino)?.open_handles > 0).then_some(ino)
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        self.ro()?;
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno(libc::EINVAL));
        }
        let old = child(&self.path(parent)?, name)?;
        let new = child(&self.path(newparent)?, newname)?;
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            match self.client.lstat(&new) {
                Ok(_) => return Err(Errno(libc::EEXIST)),
                Err(Errno(libc::ENOENT)) => {}
                Err(e) => return Err(e),
            }
        }
        if old == new {
            return Ok(());
        }
        // A replaced target that is still open keeps its data under a hidden name.
        if let Some(ino) = self.open_ino(&new) {
            if let Ok(st) = self.client.lstat(&new) {
                if st.kind == Kind::File {
                    self.hide(ino, &new)?;
                }
            }
        }
        self.client.rename(&old, &new)?;
        // Rebase the renamed entry and every remembered descendant (the client core
        // moves its open descriptors itself).
        {
            let mut t = self.table.lock().unwrap();
            t.forget_path(&new);
            let prefix = format!("{old}/");
            let mut affected: Vec<(String, u64)> = Vec::new();
            if let Some(&ino) = t.by_path.get(&old) {
                affected.push((old.clone(), ino));
            }
            // '/' + 1 == '0': the range holds exactly the paths under `old/`.
            let end = format!("{old}0");
            for (p, &ino) in t.by_path.range(prefix.clone()..end) {
                affected.push((p.clone(), ino));
            }
            for (p, _) in &affected {
                t.by_path.remove(p);
            }
            for (p, ino) in affected {
                let np = rebase(&p, &old, &new).expect("the old path or below it");
                if let Some(n) = t.nodes.get_mut(&ino) {
                    n.path = np.clone();
                }
                t.by_path.insert(np, ino);
            }
        }
        Ok(())
    }

    /// One READDIR or READDIRPLUS reply. `emit(next offset, name, kind, path)` adds
    /// an entry (`path` None for "." and ".."), true when the reply is full. With
    /// `plus` the listing fetches attributes, which the client keeps for the stats
    /// READDIRPLUS answers with.
    fn do_readdir(
        &self,
        d: &DirHandle,
        offset: u64,
        plus: bool,
        mut emit: impl FnMut(u64, &str, Kind, Option<&str>) -> Emitted,
    ) -> Result<(), Errno> {
        let open = |p: &str| if plus { self.client.opendir_plus(p) } else { self.client.opendir(p) };
        let mut s = d.state.lock().unwrap();
        if let Some(e) = s.failed.take() {
            return Err(e);
        }
        if offset != s.pos {
            // A seek (rewinddir, seekdir): start over and skip. Bounded by the
            // directory size; sequential listings never come here.
            s.stream = None;
            s.pending = None;
            s.pos = offset.min(2);
            if offset > 2 {
                let mut st = open(&d.path)?;
                while s.pos < offset {
                    match st.next() {
                        None => break,
                        Some(Err(e)) => return Err(e),
                        Some(Ok(_)) => s.pos += 1,
                    }
                }
                s.stream = Some(st);
            }
        }
        let mut added = 0usize;
        loop {
            let pos = s.pos;
            if pos < 2 {
                let name = if pos == 0 { "." } else { ".." };
                if emit(pos + 1, name, Kind::Dir, None) == Emitted::Full {
                    break;
                }
                s.pos += 1;
                added += 1;
                if s.pos == 2 && s.stream.is_none() {
                    s.stream = Some(open(&d.path)?);
                }
                continue;
            }
            let e = match s.pending.take() {
                Some(e) => e,
                None => match s.stream.as_mut().and_then(|st| st.next()) {
                    None => break,
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        if added == 0 {
                            return Err(e);
                        }
                        s.failed = Some(e);
                        break;
                    }
                },
            };
            let path = join(&d.path, &e.name);
            match emit(pos + 1, &e.name, e.kind, Some(&path)) {
                Emitted::Full => {
                    s.pending = Some(e);
                    break;
                }
                Emitted::Added => added += 1,
                Emitted::Skipped => {}
            }
            s.pos += 1;
        }
        Ok(())
    }

    /// READDIRPLUS's entry for `path`: its attributes (from the listing, see
    /// gust-client listing.rs), added to the reply and, once added, counted as a
    /// lookup the kernel holds (it will FORGET it).
    fn emit_plus(
        &self,
        reply: &mut ReplyDirectoryPlus,
        next: u64,
        name: &str,
        dir: &DirHandle,
        path: Option<&str>,
    ) -> Emitted {
        let ttl = self.opts.entry_timeout;
        let Some(path) = path else {
            // "." and "..": the kernel takes no reference on them; any attributes do.
            let ino = name_ino(&format!("{}/{name}", dir.path));
            let dir = &dir.stat;
            return if reply.add(INodeNo(ino), next, name, &ttl, &self.attr(ino, dir), Generation(0)) {
                Emitted::Full
            } else {
                Emitted::Added
            };
        };
        let Ok(st) = self.client.lstat(path) else { return Emitted::Skipped };
        let ino = self.table.lock().unwrap().by_path.get(path).copied().unwrap_or_else(|| Self::ino_of(path, &st));
        if reply.add(INodeNo(ino), next, name, &ttl, &self.attr(ino, &st), Generation(0)) {
            return Emitted::Full;
        }
        self.remember(path, &st);
        Emitted::Added
    }
}

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
        for cap in [
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            // Listings come with attributes (readdirplus), always: the client fetches
            // them with the names at little extra cost (gust-client listing.rs).
            InitFlags::FUSE_DO_READDIRPLUS,
        ] {
            let _ = config.add_capabilities(cap);
        }
        if self.opts.writeback_cache && config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).is_err() {
            eprintln!("gust mount: this kernel does not offer the writeback cache; continuing without it");
            self.opts.writeback_cache = false;
        }
        if self.opts.direct_io {
            // Lets programs mmap files even though their handles bypass the page cache.
            let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let path = child(&self.path(parent)?, name)?;
            let st = self.client.lstat(&path)?;
            Ok((path, st))
        })();
        match r {
            Ok((path, st)) => self.entry(reply, &path, &st),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut t = self.table.lock().unwrap();
        if let Some(n) = t.nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        t.drop_if_unused(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.stat_ino(ino.0) {
            Ok((_, st)) => reply.attr(&self.opts.attr_timeout, &self.attr(ino.0, &st)),
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
        _ctime: Option<SystemTime>,
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
            if uid.is_some() || gid.is_some() {
                as_caller(caller_with_groups(req), || self.client.chown(&path, uid, gid, false))?;
            }
            if let Some(sz) = size {
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
            Ok(st)
        })();
        match r {
            Ok(st) => reply.attr(&self.opts.attr_timeout, &self.attr(ino.0, &st)),
            Err(e) => reply.error(fe(e)),
        }
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
            as_caller(who, || self.client.mkdir(&path, mode))?;
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
            self.table.lock().unwrap().forget_path(&path);
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
            self.client.rmdir(&path)?;
            self.table.lock().unwrap().forget_path(&path);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            self.ro()?;
            let dir = self.path(parent)?;
            let path = child(&dir, name)?;
            let kind = match mode & libc::S_IFMT {
                0 | libc::S_IFREG => Kind::File,
                libc::S_IFIFO => Kind::Fifo,
                libc::S_IFSOCK => Kind::Socket,
                // Device nodes: the mount is nodev, and GustFS stores none.
                _ => return Err(Errno(libc::EPERM)),
            };
            let (who, _) = self.creator(req, parent, &dir)?;
            let st = as_caller(who, || self.client.mknod(&path, kind, mode & !umask & 0o7777))?;
            Ok((path, st))
        })();
        match r {
            Ok((path, st)) => self.entry(reply, &path, &st),
            Err(e) => reply.error(fe(e)),
        }
    }

    /// Hard links are not stored (docs/SEMANTICS.md): EPERM, what link(2) gives on a
    /// file system without them, and what `ln`, `cp -l`, git and tar report.
    fn link(&self, _req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr, reply: ReplyEntry) {
        reply.error(FErrno::from_i32(libc::EPERM));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let r = (|| {
            self.ro()?;
            let dir = self.path(parent)?;
            let path = child(&dir, link_name)?;
            let target = target.to_str().ok_or(Errno(libc::EINVAL))?;
            let (who, _) = self.creator(req, parent, &dir)?;
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

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let kflags = flags.0;
            if kflags & libc::O_ACCMODE != libc::O_RDONLY || kflags & libc::O_TRUNC != 0 {
                self.ro()?;
            }
            let path = self.path(ino)?;
            let cflags = self.client_flags(kflags);
            // The kernel looked this inode up (or stat'ed it) within the attribute
            // timeout: open without asking the daemon again.
            let fd = match self.known(ino.0) {
                Some((id, kind)) if kflags & libc::O_TRUNC == 0 && kind != Kind::Symlink => {
                    self.client.open_known(&path, cflags, id, kind)?
                }
                _ => self.client.open(&path, cflags | (kflags & libc::O_TRUNC), 0)?,
            };
            Ok(self.add_handle(ino.0, fd, cflags))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), self.open_flags()),
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
            let (fd, st) = as_caller(who, || {
                self.client.open_stat(
                    &path,
                    cflags | libc::O_CREAT | (flags & (libc::O_EXCL | libc::O_TRUNC)),
                    mode & !umask & 0o7777,
                )
            })?;
            let attr = self.remember(&path, &st);
            let fh = self.add_handle(attr.ino.0, fd, cflags);
            Ok((attr, fh))
        })();
        match r {
            Ok((attr, fh)) => {
                reply.created(&self.opts.entry_timeout, &attr, Generation(0), FileHandle(fh), self.open_flags())
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
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = (|| {
            self.ro()?;
            let (_h, fd) = self.fd(fh)?;
            self.client.pwrite(fd, data, offset)
        })();
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _lock: LockOwner, reply: ReplyEmpty) {
        // Every acknowledged write's data is on the daemons; its size is sent now
        // (the client batches it, see gust-client size_cache.rs), so other clients
        // see it once close(2) returns.
        match self.fd(fh).and_then(|(_, fd)| self.client.flush(fd)) {
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
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let h = self.files.write().unwrap().remove(&fh.0);
        if let Some(h) = h {
            let _ = self.client.close(h.fd);
            let remove = {
                let mut t = self.table.lock().unwrap();
                let r = match t.nodes.get_mut(&ino.0) {
                    Some(n) => {
                        n.open_handles = n.open_handles.saturating_sub(1);
                        (n.open_handles == 0 && n.hidden).then(|| n.path.clone())
                    }
                    None => None,
                };
                if let Some(p) = &r {
                    t.forget_path(p);
                    if let Some(n) = t.nodes.get_mut(&ino.0) {
                        n.hidden = false;
                    }
                }
                t.drop_if_unused(ino.0);
                r
            };
            if let Some(p) = remove {
                let _ = self.client.unlink(&p);
            }
        }
        reply.ok();
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
            let d = DirHandle {
                path,
                stat: st,
                state: Mutex::new(DirState { stream: None, pos: 0, pending: None, failed: None }),
            };
            self.dirs.write().unwrap().insert(fh, Arc::new(d));
            Ok(fh)
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let d = self.dirs.read().unwrap().get(&fh.0).cloned();
        let Some(d) = d else { return reply.error(FErrno::from_i32(libc::EBADF)) };
        let r = self.do_readdir(&d, offset, false, |next, name, kind, path| {
            let ino = match path {
                None => name_ino(&format!("{}/{name}", d.path)),
                Some(p) => self.table.lock().unwrap().by_path.get(p).copied().unwrap_or_else(|| name_ino(p)),
            };
            if reply.add(INodeNo(ino), next, file_type(kind), name) {
                Emitted::Full
            } else {
                Emitted::Added
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    /// The listing with each entry's attributes (FUSE_DO_READDIRPLUS): `ls -l` needs
    /// no LOOKUP per entry, and the attributes come with the listing's pages.
    fn readdirplus(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let d = self.dirs.read().unwrap().get(&fh.0).cloned();
        let Some(d) = d else { return reply.error(FErrno::from_i32(libc::EBADF)) };
        let r =
            self.do_readdir(&d, offset, true, |next, name, _, path| self.emit_plus(&mut reply, next, name, &d, path));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.write().unwrap().remove(&fh.0);
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

/// Whether `mountpoint` is currently a mount point of a GustFS FUSE mount.
pub fn is_mounted(mountpoint: &Path) -> bool {
    let Ok(mp) = std::fs::canonicalize(mountpoint) else { return false };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = mp.to_string_lossy().replace(' ', "\\040");
    // mountinfo: id parent dev root MOUNTPOINT opts [optional...] - FSTYPE SOURCE superopts
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else { return false };
        f.len() > sep + 2 && f[4] == want && f[sep + 1].starts_with("fuse") && f[sep + 2].starts_with("gustfs")
    })
}

static SHUTDOWN_DONE: AtomicBool = AtomicBool::new(false);

/// Mounts `client`'s instance at `mountpoint` and serves it until it is unmounted
/// (`gust umount`, `fusermount3 -u`, `umount`) or SIGINT/SIGTERM/SIGHUP arrive, which
/// unmount it. `ready` runs once the mount is live.
pub fn run(client: Client, mountpoint: &Path, opts: MountOptions, ready: impl FnOnce()) -> Result<(), String> {
    if !mountpoint.is_dir() {
        return Err(format!("mount point {} is not a directory", mountpoint.display()));
    }
    if opts.threads == 0 || opts.threads > THREADS_MAX {
        return Err(format!("--threads must be between 1 and {THREADS_MAX}"));
    }
    // Block the termination signals in every thread (the request loops inherit the
    // mask); one thread takes them with sigwait and unmounts.
    // SAFETY: plain sigset manipulation on a local, then pthread_sigmask of this thread.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let client: &'static Client = Box::leak(Box::new(client));
    let fs = GustFs::new(client, opts.clone());
    let mut config = Config::default();
    let mut mo = vec![
        MountOption::FSName(format!("gustfs:{}", client.hosts_path().display())),
        MountOption::Subtype("gust".into()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoAtime,
        MountOption::Exec,
    ];
    if opts.read_only {
        mo.push(MountOption::RO);
    }
    if opts.allow_other {
        // Other users: the kernel checks mode bits, owners, groups and sticky
        // directories against the records' attributes, as for a local file system.
        // Not for a mount of one user: the checks need the attributes of every
        // directory on a path (a getattr per component whose attributes expired),
        // so a dead daemon holding a directory's record would cut off everything
        // below it, where a lookup of a child needs only the child's daemon.
        mo.push(MountOption::DefaultPermissions);
        config.acl = SessionACL::All;
    }
    config.mount_options = mo;
    config.n_threads = Some(opts.threads);
    config.clone_fd = true;
    let mut session = fuser::Session::new(fs, mountpoint, &config).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (is /dev/fuse accessible? is fusermount3 installed?)"
        } else {
            ""
        };
        format!("cannot mount at {}: {e}{hint}", mountpoint.display())
    })?;
    set_read_ahead(mountpoint);
    let mut unmounter = session.unmount_callable();
    let mp = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("gust-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid initialized sigset; sig is a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            eprintln!("gust mount: signal {sig}: unmounting {}", mp.display());
            if unmounter.unmount().is_err() {
                // Busy (a process still has files open there): detach it now; the
                // kernel finishes the unmount when the last user goes away.
                let _ = unmount(&mp, true);
            }
            let mut waited_ms = 0;
            while !SHUTDOWN_DONE.load(Ordering::Acquire) && waited_ms < SHUTDOWN_GRACE_MS {
                std::thread::sleep(Duration::from_millis(20));
                waited_ms += 20;
            }
            if !SHUTDOWN_DONE.load(Ordering::Acquire) {
                // Closing /dev/fuse by exiting aborts the connection: waiting callers get
                // ENOTCONN instead of hanging.
                eprintln!("gust mount: request loops still busy after {SHUTDOWN_GRACE_MS} ms; exiting");
                std::process::exit(0);
            }
        })
        .map_err(|e| e.to_string())?;
    ready();
    let r = session.run();
    SHUTDOWN_DONE.store(true, Ordering::Release);
    r.map_err(|e| format!("serving {}: {e}", mountpoint.display()))
}

/// Raises the mount's read-ahead window from the kernel's 128 KiB default to
/// MAX_WRITE_BYTES, so sequential reads reach the daemons as 1 MiB requests (the FUSE
/// INIT reply cannot raise it past the kernel's offer). Needs root; best effort.
fn set_read_ahead(mountpoint: &Path) {
    // The device number comes from mountinfo: a stat of the mount point would be a
    // FUSE request, and nothing serves requests yet.
    let Ok(mp) = std::fs::canonicalize(mountpoint.parent().unwrap_or(Path::new("/")))
        .map(|p| p.join(mountpoint.file_name().unwrap_or_default()))
    else {
        return;
    };
    let want = mp.to_string_lossy().replace(' ', "\\040");
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    if let Some(dev) = info
        .lines()
        .rev()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f.len() > 4 && f[4] == want)
        .map(|f| f[2].to_string())
    {
        let _ = std::fs::write(format!("/sys/class/bdi/{dev}/read_ahead_kb"), format!("{}", MAX_WRITE_BYTES / 1024));
    }
}

/// Unmounts a FUSE mount. As root with umount2(2); otherwise through
/// `fusermount3 -u`. `lazy` detaches a busy mount (MNT_DETACH / `-z`).
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| "mount point contains a NUL byte".to_string())?;
    // SAFETY: c is a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EPERM) => {
            let mut cmd = std::process::Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd.arg(mountpoint).output().map_err(|e| format!("cannot run fusermount3: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("fusermount3 -u {}: {}", mountpoint.display(), String::from_utf8_lossy(&out.stderr).trim()))
            }
        }
        Some(libc::EBUSY) => Err(format!(
            "{} is busy (a process has files open or its cwd there); pass --lazy to detach it now",
            mountpoint.display()
        )),
        Some(libc::EINVAL) => Err(format!("{} is not a mount point", mountpoint.display())),
        _ => Err(format!("cannot unmount {}: {err}", mountpoint.display())),
    }
}
