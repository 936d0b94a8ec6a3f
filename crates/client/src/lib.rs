//! The GustFS client core.
//!
//! Reads the hosts file, computes placement, keeps connections and the open-file
//! table, and offers a POSIX-like API with errno-style errors. Every front end (the
//! `gust` CLI, the LD_PRELOAD library, the FUSE mount, the C API) is a thin layer
//! over [`Client`].
//!
//! Paths given to the API are paths inside the file system ("/a/b"); front ends map
//! their mount directory onto them with [`Client::internal_path`].
//!
//! Consistency: every operation on one file goes to the daemons that own it, with no
//! client-side caching, so operations on one file are strongly consistent. Directory
//! listings are assembled from all daemons and are eventually consistent; there are
//! no distributed locks (see docs/SEMANTICS.md).

mod rpc;

use gust_hosts::HostsFile;
use gust_placement::{chunk_spans, Distributor, WideStriping};
use gust_proto::{FileKind, RemoveKind, Request, Response, Span};
use rpc::{Call, Transport};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

pub use gust_proto::{DaemonStats, DirEntry, FileKind as Kind, Record};

/// An errno value (Linux numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

pub type Result<T> = std::result::Result<T, Errno>;

/// Bytes per daemon request in one round of a large read or write. Keeps frames far
/// under BULK_BYTES_MAX and bounds the memory a transfer pins.
const TRANSFER_WINDOW_BYTES: u64 = 16 << 20;
/// Symlinks followed before ELOOP (Linux's limit).
const SYMLINK_HOPS_MAX: u32 = 40;
/// Entries requested per readdir page.
const READDIR_PAGE_ENTRIES: u32 = 4096;
/// Bound on the open-file table of one client.
pub const OPEN_FILES_MAX: usize = 65_536;

/// What `stat` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub kind: FileKind,
    /// Permission bits (no type bits).
    pub mode: u32,
    pub size: u64,
    pub ino: u64,
    pub nlink: u32,
    pub blksize: u64,
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub file_id: u128,
}

impl Stat {
    fn from_record(r: &Record, chunk_size: u64) -> Stat {
        let ino = if r.file_id == 0 { 1 } else { ((r.file_id as u64) ^ ((r.file_id >> 64) as u64)) | 2 };
        let size = if r.kind == FileKind::Symlink { r.target.len() as u64 } else { r.size };
        Stat {
            kind: r.kind,
            mode: r.mode,
            size,
            ino,
            nlink: r.nlink,
            blksize: chunk_size,
            blocks: r.size.div_ceil(512),
            atime_ns: r.atime_ns,
            mtime_ns: r.mtime_ns,
            ctime_ns: r.ctime_ns,
            file_id: r.file_id,
        }
    }

    /// `st_mode` with the file type bits.
    pub fn st_mode(&self) -> u32 {
        let t = match self.kind {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
        };
        t | (self.mode & 0o7777)
    }

    /// As `struct stat`, the way every C-facing front end (preload, C API) reports
    /// it: one user owns every file of an instance, so uid/gid are the caller's.
    pub fn to_libc_stat(&self) -> libc::stat {
        fill_libc_stat!(self, libc::stat)
    }

    /// As `struct stat64` (the same fields; older binaries call the 64 variants).
    pub fn to_libc_stat64(&self) -> libc::stat64 {
        fill_libc_stat!(self, libc::stat64)
    }
}

/// Device number every GustFS file reports (st_dev), so tools that compare devices
/// (du, find -xdev, cp) see one file system.
pub const GUST_DEV: u64 = 0x6775;

/// Splits nanoseconds since the epoch into (seconds, nanoseconds), also before 1970.
pub fn split_ns(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

macro_rules! fill_libc_stat {
    ($s:expr, $t:ty) => {{
        let s = $s;
        // SAFETY: stat structs are plain C data; all-zero is a valid value.
        let mut st: $t = unsafe { std::mem::zeroed() };
        st.st_dev = GUST_DEV as _;
        st.st_ino = s.ino as _;
        st.st_nlink = s.nlink as _;
        st.st_mode = s.st_mode() as _;
        // SAFETY: geteuid/getegid have no preconditions.
        st.st_uid = unsafe { libc::geteuid() };
        st.st_gid = unsafe { libc::getegid() };
        st.st_size = s.size as _;
        st.st_blksize = s.blksize.min(1 << 30) as _;
        st.st_blocks = s.blocks as _;
        let (a, an) = split_ns(s.atime_ns);
        let (m, mn) = split_ns(s.mtime_ns);
        let (c, cn) = split_ns(s.ctime_ns);
        st.st_atime = a as _;
        st.st_atime_nsec = an as _;
        st.st_mtime = m as _;
        st.st_mtime_nsec = mn as _;
        st.st_ctime = c as _;
        st.st_ctime_nsec = cn as _;
        st
    }};
}
use fill_libc_stat;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub files: u64,
    pub daemons: u32,
    pub chunk_size_bytes: u64,
}

/// f_type and f_fsid reported for GustFS ("GUST").
pub const GUST_MAGIC: u64 = 0x4755_5354;
/// Block unit of statfs/statvfs results.
pub const STATFS_BLOCK_BYTES: u64 = 4096;

macro_rules! fill_libc_statvfs {
    ($s:expr, $t:ty) => {{
        let s = $s;
        // SAFETY: statvfs structs are plain C data; all-zero is a valid value.
        let mut b: $t = unsafe { std::mem::zeroed() };
        b.f_bsize = STATFS_BLOCK_BYTES as _;
        b.f_frsize = STATFS_BLOCK_BYTES as _;
        b.f_blocks = (s.total_bytes / STATFS_BLOCK_BYTES) as _;
        b.f_bfree = (s.free_bytes / STATFS_BLOCK_BYTES) as _;
        b.f_bavail = (s.avail_bytes / STATFS_BLOCK_BYTES) as _;
        // No inode table: report what exists plus a large free count, so tools that
        // check for free inodes proceed.
        b.f_files = (s.files + (1 << 32)) as _;
        b.f_ffree = (1u64 << 32) as _;
        b.f_favail = (1u64 << 32) as _;
        b.f_fsid = GUST_MAGIC as _;
        b.f_namemax = 255;
        b
    }};
}

impl StatFs {
    /// As `struct statvfs`, the way the C-facing front ends report it.
    pub fn to_libc_statvfs(&self) -> libc::statvfs {
        fill_libc_statvfs!(self, libc::statvfs)
    }

    /// As `struct statvfs64`.
    pub fn to_libc_statvfs64(&self) -> libc::statvfs64 {
        fill_libc_statvfs!(self, libc::statvfs64)
    }
}

/// One open file description; shared by descriptors made with `dup`.
struct OpenFile {
    /// Current path: rename through this client rewrites it (see `rename`).
    path: RwLock<String>,
    file_id: u128,
    kind: FileKind,
    flags: i32,
    offset: Mutex<u64>,
}

impl OpenFile {
    fn path(&self) -> String {
        self.path.read().unwrap().clone()
    }
}

/// Options a client is built with; `from_env` reads them from GUST_* variables.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Bound on any one RPC; a dead daemon surfaces as EIO within it.
    pub rpc_timeout: Duration,
    /// Use TCP even to daemons on this host (benchmarks, tests).
    pub force_tcp: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { rpc_timeout: Duration::from_secs(30), force_tcp: false }
    }
}

impl ClientOptions {
    pub fn from_env() -> Self {
        let mut o = ClientOptions::default();
        if let Some(ms) = std::env::var("GUST_RPC_TIMEOUT_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
            o.rpc_timeout = Duration::from_millis(ms.max(1));
        }
        o.force_tcp = std::env::var("GUST_TRANSPORT").map(|v| v == "tcp").unwrap_or(false);
        o
    }
}

/// A connection to one GustFS instance. Cheap to share across threads (`&self`
/// everywhere); no global lock on the I/O path.
pub struct Client {
    hosts: HostsFile,
    hosts_path: PathBuf,
    dist: Box<dyn Distributor>,
    chunk_size: u64,
    transport: Transport,
    files: RwLock<HashMap<i32, Arc<OpenFile>>>,
    next_fd: Mutex<i32>,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn new_file_id() -> u128 {
    loop {
        let id: u128 = rand::random();
        if id != 0 {
            return id;
        }
    }
}

fn unexpected(r: Response) -> Errno {
    debug_assert!(false, "unexpected response {r:?}");
    Errno(libc::EPROTO)
}

/// Lexically normalizes an absolute path: collapses "//" and ".", resolves "..".
/// Relative paths are EINVAL here; front ends resolve them against their cwd.
pub fn normalize(path: &str) -> Result<String> {
    if !path.starts_with('/') {
        return Err(Errno(libc::EINVAL));
    }
    if path.len() > gust_proto::PATH_BYTES_MAX {
        return Err(Errno(libc::ENAMETOOLONG));
    }
    if path.contains('\0') {
        return Err(Errno(libc::EINVAL));
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => {
                if c.len() > gust_proto::NAME_BYTES_MAX {
                    return Err(Errno(libc::ENAMETOOLONG));
                }
                parts.push(c)
            }
        }
    }
    if parts.is_empty() {
        return Ok("/".into());
    }
    let mut out = String::with_capacity(path.len());
    for p in parts {
        out.push('/');
        out.push_str(p);
    }
    Ok(out)
}

fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Client {
    /// Connects to the instance described by `$GUST_HOSTS_FILE`.
    pub fn from_env() -> std::result::Result<Client, String> {
        let p = std::env::var_os("GUST_HOSTS_FILE")
            .ok_or("GUST_HOSTS_FILE is not set; run `eval \"$(gust env)\"` or pass --hosts-file")?;
        Client::open_instance(Path::new(&p), ClientOptions::from_env())
    }

    /// Reads the hosts file and secret. Connections open lazily on first use.
    pub fn open_instance(hosts_path: &Path, opts: ClientOptions) -> std::result::Result<Client, String> {
        let hosts = HostsFile::load(hosts_path).map_err(|e| e.to_string())?;
        if hosts.daemons.is_empty() {
            return Err(format!("{}: no daemon registered yet", hosts_path.display()));
        }
        if !hosts.is_complete(hosts.daemons.len()) {
            return Err(format!(
                "{}: daemon ids are not 0..{} (a daemon missing?)",
                hosts_path.display(),
                hosts.daemons.len()
            ));
        }
        let secret = gust_hosts::load_secret(hosts_path).map_err(|e| e.to_string())?;
        let n = hosts.daemons.len() as u32;
        let transport = Transport::new(
            hosts.daemons.clone(),
            Some(hosts_path.to_path_buf()),
            secret,
            opts.rpc_timeout,
            opts.force_tcp,
        );
        Ok(Client {
            chunk_size: hosts.chunk_size_bytes,
            hosts,
            hosts_path: hosts_path.to_path_buf(),
            dist: Box::new(WideStriping::new(n)),
            transport,
            files: RwLock::new(HashMap::new()),
            next_fd: Mutex::new(3),
        })
    }

    pub fn hosts(&self) -> &HostsFile {
        &self.hosts
    }
    pub fn hosts_path(&self) -> &Path {
        &self.hosts_path
    }
    pub fn daemon_count(&self) -> u32 {
        self.dist.daemon_count()
    }
    pub fn chunk_size_bytes(&self) -> u64 {
        self.chunk_size
    }
    /// RPCs this client has sent (each request to each daemon counts once).
    pub fn rpcs_sent(&self) -> u64 {
        self.transport.rpcs_sent.load(Ordering::Relaxed)
    }
    /// What the last transport failure was (daemon, address, cause), for messages.
    pub fn last_transport_error(&self) -> Option<String> {
        self.transport.last_error()
    }

    /// Maps a path under the mount directory to a path inside the file system.
    /// `None` if `p` is not under the mount directory.
    pub fn internal_path(&self, p: &str) -> Option<String> {
        let m = self.hosts.mountdir.trim_end_matches('/');
        if m.is_empty() {
            return normalize(p).ok();
        }
        let rest = p.strip_prefix(m)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        normalize(if rest.is_empty() { "/" } else { rest }).ok()
    }

    // ----- metadata helpers -------------------------------------------------------

    fn md_daemon(&self, path: &str) -> u32 {
        self.dist.locate_metadata(path)
    }

    fn get_record(&self, path: &str) -> Result<Record> {
        match self.transport.call(self.md_daemon(path), Request::Stat { path: path.to_string() })? {
            Response::Record(r) => Ok(r),
            r => Err(unexpected(r)),
        }
    }

    /// Follows symlinks at the final component. Returns the resolved path and record.
    fn resolve(&self, path: &str) -> Result<(String, Record)> {
        let mut p = normalize(path)?;
        for _ in 0..=SYMLINK_HOPS_MAX {
            let r = self.get_record(&p)?;
            if r.kind != FileKind::Symlink {
                return Ok((p, r));
            }
            p = self.link_target_path(&p, &r.target)?;
        }
        Err(Errno(libc::ELOOP))
    }

    fn link_target_path(&self, link: &str, target: &str) -> Result<String> {
        if target.starts_with('/') {
            // An absolute target inside the mount directory maps into the file
            // system; other absolute targets are outside GustFS.
            self.internal_path(target).ok_or(Errno(libc::EXDEV))
        } else {
            normalize(&join(parent_of(link), target))
        }
    }

    fn check_parent(&self, path: &str) -> Result<()> {
        if !self.hosts.check_parent || path == "/" {
            return Ok(());
        }
        let (_, r) = self.resolve(parent_of(path))?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(())
    }

    fn new_record(kind: FileKind, mode: u32, target: String) -> Record {
        let t = now_ns();
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
        }
    }

    // ----- POSIX-like API -----------------------------------------------------------

    pub fn stat(&self, path: &str) -> Result<Stat> {
        let (_, r) = self.resolve(path)?;
        Ok(Stat::from_record(&r, self.chunk_size))
    }

    pub fn lstat(&self, path: &str) -> Result<Stat> {
        let p = normalize(path)?;
        Ok(Stat::from_record(&self.get_record(&p)?, self.chunk_size))
    }

    pub fn access(&self, path: &str, mode: i32) -> Result<()> {
        let st = self.stat(path)?;
        if mode == libc::F_OK {
            return Ok(());
        }
        // One user owns everything in an instance: check the owner bits. Root may
        // read and write anything, and execute what has any x bit.
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let m = st.mode;
        let ok = |bit: i32, owner_bit: u32| {
            mode & bit == 0
                || (if root {
                    bit != libc::X_OK || m & 0o111 != 0 || st.kind == FileKind::Dir
                } else {
                    m & owner_bit != 0
                })
        };
        if ok(libc::R_OK, 0o400) && ok(libc::W_OK, 0o200) && ok(libc::X_OK, 0o100) {
            Ok(())
        } else {
            Err(Errno(libc::EACCES))
        }
    }

    /// Opens (and with O_CREAT creates) a file. Costs one RPC for an existing file or
    /// for a create, plus one for O_TRUNC of a non-empty file.
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> Result<i32> {
        self.open_stat(path, flags, mode).map(|(fd, _)| fd)
    }

    /// `open` that also returns the attributes it fetched anyway, saving a front end
    /// (FUSE create, preload open+fstat) one `fstat` RPC.
    pub fn open_stat(&self, path: &str, flags: i32, mode: u32) -> Result<(i32, Stat)> {
        let mut p = normalize(path)?;
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let mut hops = 0;
        let rec = loop {
            let r = if flags & libc::O_CREAT != 0 {
                if p == "/" {
                    return Err(Errno(if flags & libc::O_EXCL != 0 { libc::EEXIST } else { libc::EISDIR }));
                }
                self.check_parent(&p)?;
                let req = Request::Create {
                    path: p.clone(),
                    record: Self::new_record(FileKind::File, mode, String::new()),
                    exclusive: flags & libc::O_EXCL != 0,
                };
                match self.transport.call(self.md_daemon(&p), req)? {
                    Response::Record(r) => r,
                    r => return Err(unexpected(r)),
                }
            } else {
                self.get_record(&p)?
            };
            if r.kind != FileKind::Symlink {
                break r;
            }
            if flags & libc::O_NOFOLLOW != 0 {
                return Err(Errno(libc::ELOOP));
            }
            hops += 1;
            if hops > SYMLINK_HOPS_MAX {
                return Err(Errno(libc::ELOOP));
            }
            p = self.link_target_path(&p, &r.target)?;
        };
        if flags & libc::O_DIRECTORY != 0 && rec.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if rec.kind == FileKind::Dir && (writable || flags & libc::O_CREAT != 0) {
            return Err(Errno(libc::EISDIR));
        }
        let mut rec = rec;
        if flags & libc::O_TRUNC != 0 && writable && rec.kind == FileKind::File && rec.size > 0 {
            self.truncate_resolved(&p, 0)?;
            rec.size = 0;
        }
        let st = Stat::from_record(&rec, self.chunk_size);
        let fd = self.install(OpenFile {
            path: RwLock::new(p),
            file_id: rec.file_id,
            kind: rec.kind,
            flags,
            offset: Mutex::new(0),
        })?;
        Ok((fd, st))
    }

    /// Opens a file whose record the caller fetched recently, without an RPC: for a
    /// FUSE mount, which may trust attributes within their timeout. If the path names
    /// another file by now, I/O through the descriptor fails with ESTALE, as for any
    /// descriptor whose path was replaced. O_CREAT and O_TRUNC need `open`.
    pub fn open_known(&self, path: &str, flags: i32, file_id: u128, kind: FileKind) -> Result<i32> {
        let p = normalize(path)?;
        if flags & (libc::O_CREAT | libc::O_TRUNC) != 0 || kind == FileKind::Symlink {
            return Err(Errno(libc::EINVAL));
        }
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        if flags & libc::O_DIRECTORY != 0 && kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if kind == FileKind::Dir && writable {
            return Err(Errno(libc::EISDIR));
        }
        self.install(OpenFile { path: RwLock::new(p), file_id, kind, flags, offset: Mutex::new(0) })
    }

    fn install(&self, f: OpenFile) -> Result<i32> {
        let mut files = self.files.write().unwrap();
        if files.len() >= OPEN_FILES_MAX {
            return Err(Errno(libc::EMFILE));
        }
        let mut next = self.next_fd.lock().unwrap();
        while files.contains_key(&*next) {
            *next = if *next >= i32::MAX - 1 { 3 } else { *next + 1 };
        }
        let fd = *next;
        *next += 1;
        files.insert(fd, Arc::new(f));
        Ok(fd)
    }

    fn file(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.files.read().unwrap().get(&fd).cloned().ok_or(Errno(libc::EBADF))
    }

    pub fn close(&self, fd: i32) -> Result<()> {
        self.files.write().unwrap().remove(&fd).map(|_| ()).ok_or(Errno(libc::EBADF))
    }

    /// A new descriptor sharing the open file description (offset, flags) of `fd`.
    pub fn dup(&self, fd: i32) -> Result<i32> {
        let f = self.file(fd)?;
        let mut files = self.files.write().unwrap();
        let mut next = self.next_fd.lock().unwrap();
        while files.contains_key(&*next) {
            *next += 1;
        }
        let nfd = *next;
        *next += 1;
        files.insert(nfd, f);
        Ok(nfd)
    }

    /// Path (inside the file system) and open flags of a descriptor.
    pub fn fd_info(&self, fd: i32) -> Result<(String, i32)> {
        let f = self.file(fd)?;
        Ok((f.path(), f.flags))
    }

    pub fn read(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        let f = self.file(fd)?;
        let mut off = f.offset.lock().unwrap();
        let n = self.read_file(&f, buf, *off)?;
        *off += n as u64;
        Ok(n)
    }

    pub fn pread(&self, fd: i32, buf: &mut [u8], offset: u64) -> Result<usize> {
        let f = self.file(fd)?;
        self.read_file(&f, buf, offset)
    }

    pub fn write(&self, fd: i32, buf: &[u8]) -> Result<usize> {
        let f = self.file(fd)?;
        let mut off = f.offset.lock().unwrap();
        let (at, n) = self.write_file(&f, buf, Some(*off))?;
        *off = at + n as u64;
        drop(off);
        self.sync_if_asked(&f)?;
        Ok(n)
    }

    /// O_SYNC and O_DSYNC: a write returns only once it is durable.
    fn sync_if_asked(&self, f: &OpenFile) -> Result<()> {
        if f.flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            self.sync_file(f)?;
        }
        Ok(())
    }

    /// Writes at `offset`; on a descriptor opened with O_APPEND, Linux appends
    /// anyway, and so does this.
    pub fn pwrite(&self, fd: i32, buf: &[u8], offset: u64) -> Result<usize> {
        let f = self.file(fd)?;
        let n = self.write_file(&f, buf, Some(offset)).map(|(_, n)| n)?;
        self.sync_if_asked(&f)?;
        Ok(n)
    }

    fn check_readable(f: &OpenFile) -> Result<()> {
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        if f.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(Errno(libc::EBADF));
        }
        Ok(())
    }

    fn read_file(&self, f: &OpenFile, buf: &mut [u8], offset: u64) -> Result<usize> {
        Self::check_readable(f)?;
        if buf.is_empty() {
            return Ok(0);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let window = ((buf.len() - done) as u64).min(TRANSFER_WINDOW_BYTES) as usize;
            let n = self.read_window(f, &mut buf[done..done + window], offset + done as u64)?;
            done += n;
            if n < window {
                break;
            }
        }
        Ok(done)
    }

    /// One round: the size lookup and the chunk reads go out together, so a read
    /// costs one round trip however many daemons hold its chunks.
    fn read_window(&self, f: &OpenFile, buf: &mut [u8], offset: u64) -> Result<usize> {
        let len = buf.len() as u64;
        let mut per_daemon: BTreeMap<u32, Vec<(Span, usize)>> = BTreeMap::new();
        for s in chunk_spans(offset, len, self.chunk_size) {
            let d = self.dist.locate_chunk(f.file_id, s.chunk);
            per_daemon
                .entry(d)
                .or_default()
                .push((Span { offset: s.file_offset, len: s.len as u32 }, (s.file_offset - offset) as usize));
        }
        let path = f.path();
        let mut calls = vec![Call { daemon: self.md_daemon(&path), req: Request::Stat { path }, bulk: Vec::new() }];
        let mut dests = vec![None];
        let order: Vec<u32> = per_daemon.keys().copied().collect();
        for d in &order {
            calls.push(Call {
                daemon: *d,
                req: Request::Read { file_id: f.file_id, spans: per_daemon[d].iter().map(|x| x.0).collect() },
                bulk: Vec::new(),
            });
            dests.push(Some(per_daemon[d].iter().map(|(span, at)| (*at, span.len)).collect()));
        }
        // Chunk bytes land in `buf` straight from the sockets.
        let mut answers = self.transport.batch_into(calls, dests, buf).into_iter();
        let size = match answers.next().expect("stat answer")? {
            (Response::Record(r), _) if r.file_id == f.file_id => r.size,
            // The path now names another file (renamed or replaced by another process).
            (Response::Record(_), _) => return Err(Errno(libc::ESTALE)),
            (r, _) => return Err(unexpected(r)),
        };
        let mut first_err = None;
        for a in answers {
            match a {
                Ok((Response::Data { .. }, _)) => {}
                Ok((r, _)) => return Err(unexpected(r)),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok(size.saturating_sub(offset).min(len) as usize)
    }

    fn check_writable(f: &OpenFile) -> Result<()> {
        // Linux checks the access mode first: write(2) on a directory opened
        // read-only is EBADF.
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno(libc::EBADF));
        }
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        Ok(())
    }

    /// Returns (offset written at, bytes written).
    fn write_file(&self, f: &OpenFile, buf: &[u8], offset: Option<u64>) -> Result<(u64, usize)> {
        Self::check_writable(f)?;
        // One snapshot of the path for the whole write: a rename through this
        // client meanwhile cannot split its requests between two names.
        let path = f.path();
        let md = self.md_daemon(&path);
        let append = f.flags & libc::O_APPEND != 0;
        let start = if append {
            // Reserve the range first: two appenders never get the same offset.
            match self.transport.call(
                md,
                Request::UpdateSize {
                    path: path.clone(),
                    file_id: f.file_id,
                    end: 0,
                    append_len: Some(buf.len() as u64),
                    mtime_ns: now_ns(),
                },
            )? {
                Response::Offset(o) => o,
                r => return Err(unexpected(r)),
            }
        } else {
            offset.expect("non-append writes have an offset")
        };
        if buf.is_empty() {
            return Ok((start, 0));
        }
        start.checked_add(buf.len() as u64).filter(|e| *e <= i64::MAX as u64).ok_or(Errno(libc::EFBIG))?;
        let mut done = 0usize;
        while done < buf.len() {
            let window = ((buf.len() - done) as u64).min(TRANSFER_WINDOW_BYTES) as usize;
            let at = start + done as u64;
            let piece = &buf[done..done + window];
            let mut per_daemon: BTreeMap<u32, (Vec<Span>, Vec<&[u8]>)> = BTreeMap::new();
            for s in chunk_spans(at, window as u64, self.chunk_size) {
                let d = self.dist.locate_chunk(f.file_id, s.chunk);
                let e = per_daemon.entry(d).or_default();
                let rel = (s.file_offset - at) as usize;
                e.0.push(Span { offset: s.file_offset, len: s.len as u32 });
                e.1.push(&piece[rel..rel + s.len as usize]);
            }
            let mut calls: Vec<Call> = per_daemon
                .into_iter()
                .map(|(d, (spans, parts))| Call {
                    daemon: d,
                    req: Request::Write { file_id: f.file_id, spans },
                    bulk: parts,
                })
                .collect();
            if !append {
                // The size update travels with the data, not after it.
                calls.push(Call {
                    daemon: md,
                    req: Request::UpdateSize {
                        path: path.clone(),
                        file_id: f.file_id,
                        end: at + window as u64,
                        append_len: None,
                        mtime_ns: now_ns(),
                    },
                    bulk: Vec::new(),
                });
            }
            for a in self.transport.batch(calls) {
                a?;
            }
            done += window;
        }
        Ok((start, done))
    }

    pub fn lseek(&self, fd: i32, offset: i64, whence: i32) -> Result<u64> {
        let f = self.file(fd)?;
        let mut off = f.offset.lock().unwrap();
        let size = || -> Result<u64> { Ok(self.get_record(&f.path())?.size) };
        let new: i64 = match whence {
            libc::SEEK_SET => offset,
            libc::SEEK_CUR => (*off as i64).checked_add(offset).ok_or(Errno(libc::EOVERFLOW))?,
            libc::SEEK_END => (size()? as i64).checked_add(offset).ok_or(Errno(libc::EOVERFLOW))?,
            // The whole file counts as data (allowed by POSIX; Linux does the same on
            // file systems without hole tracking).
            libc::SEEK_DATA => {
                let s = size()?;
                if offset < 0 || offset as u64 >= s {
                    return Err(Errno(libc::ENXIO));
                }
                offset
            }
            libc::SEEK_HOLE => {
                let s = size()?;
                if offset < 0 || offset as u64 >= s {
                    return Err(Errno(libc::ENXIO));
                }
                s as i64
            }
            _ => return Err(Errno(libc::EINVAL)),
        };
        if new < 0 {
            return Err(Errno(libc::EINVAL));
        }
        *off = new as u64;
        Ok(new as u64)
    }

    pub fn fstat(&self, fd: i32) -> Result<Stat> {
        let f = self.file(fd)?;
        let r = self.get_record(&f.path())?;
        Ok(Stat::from_record(&r, self.chunk_size))
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        let p = normalize(path)?;
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        self.check_parent(&p)?;
        let req = Request::Create {
            path: p.clone(),
            record: Self::new_record(FileKind::Dir, mode, String::new()),
            exclusive: true,
        };
        self.transport.call(self.md_daemon(&p), req).map(|_| ())
    }

    /// Whether any daemon holds a direct child of `dir` (one RPC per daemon, in parallel).
    fn dir_has_children(&self, dir: &str) -> Result<bool> {
        let calls = (0..self.daemon_count())
            .map(|d| Call { daemon: d, req: Request::HasChildren { dir: dir.to_string() }, bulk: Vec::new() })
            .collect();
        let mut any = false;
        for a in self.transport.batch(calls) {
            match a? {
                (Response::Bool(b), _) => any |= b,
                (r, _) => return Err(unexpected(r)),
            }
        }
        Ok(any)
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        let p = normalize(path)?;
        if p == "/" {
            return Err(Errno(libc::EBUSY));
        }
        let r = self.get_record(&p)?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if self.dir_has_children(&p)? {
            return Err(Errno(libc::ENOTEMPTY));
        }
        self.transport.call(self.md_daemon(&p), Request::Remove { path: p, kind: RemoveKind::Dir }).map(|_| ())
    }

    /// Removes a file's chunks, asking only the daemons that can hold them.
    fn remove_chunks(&self, r: &Record) -> Result<()> {
        if r.kind != FileKind::File || r.size == 0 {
            return Ok(());
        }
        let last = (r.size - 1) / self.chunk_size;
        let calls = self
            .dist
            .daemons_for_chunks(r.file_id, 0, last)
            .into_iter()
            .map(|d| Call { daemon: d, req: Request::RemoveChunks { file_id: r.file_id }, bulk: Vec::new() })
            .collect();
        for a in self.transport.batch(calls) {
            a?;
        }
        Ok(())
    }

    /// Removes a file or symlink: one RPC for the record, plus one per daemon that
    /// holds its chunks (none for an empty file).
    pub fn unlink(&self, path: &str) -> Result<()> {
        let p = normalize(path)?;
        if p == "/" {
            return Err(Errno(libc::EISDIR));
        }
        let r = match self.transport.call(self.md_daemon(&p), Request::Remove { path: p, kind: RemoveKind::NotDir })? {
            Response::Record(r) => r,
            r => return Err(unexpected(r)),
        };
        self.remove_chunks(&r)
    }

    fn truncate_resolved(&self, p: &str, size: u64) -> Result<()> {
        if size > i64::MAX as u64 {
            return Err(Errno(libc::EFBIG));
        }
        let old = match self
            .transport
            .call(self.md_daemon(p), Request::Truncate { path: p.to_string(), size, mtime_ns: now_ns() })?
        {
            Response::Record(r) => r,
            r => return Err(unexpected(r)),
        };
        if size < old.size {
            let first = size / self.chunk_size;
            let last = (old.size - 1) / self.chunk_size;
            let calls = self
                .dist
                .daemons_for_chunks(old.file_id, first, last)
                .into_iter()
                .map(|d| Call {
                    daemon: d,
                    req: Request::TruncateChunks { file_id: old.file_id, size },
                    bulk: Vec::new(),
                })
                .collect();
            for a in self.transport.batch(calls) {
                a?;
            }
        }
        Ok(())
    }

    pub fn truncate(&self, path: &str, size: u64) -> Result<()> {
        let (p, r) = self.resolve(path)?;
        if r.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        self.truncate_resolved(&p, size)
    }

    pub fn ftruncate(&self, fd: i32, size: u64) -> Result<()> {
        let f = self.file(fd)?;
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno(libc::EINVAL));
        }
        self.truncate_resolved(&f.path(), size)
    }

    /// Makes the file's data and the metadata log durable on every daemon involved.
    pub fn fsync(&self, fd: i32) -> Result<()> {
        let f = self.file(fd)?;
        self.sync_file(&f)
    }

    fn sync_file(&self, f: &OpenFile) -> Result<()> {
        let path = f.path();
        let r = self.get_record(&path)?;
        let mut daemons = if r.size > 0 {
            self.dist.daemons_for_chunks(f.file_id, 0, (r.size - 1) / self.chunk_size)
        } else {
            Vec::new()
        };
        let md = self.md_daemon(&path);
        if !daemons.contains(&md) {
            daemons.push(md);
        }
        let calls = daemons
            .into_iter()
            .map(|d| Call { daemon: d, req: Request::Fsync { file_id: Some(f.file_id) }, bulk: Vec::new() })
            .collect();
        for a in self.transport.batch(calls) {
            a?;
        }
        Ok(())
    }

    pub fn symlink(&self, target: &str, linkpath: &str) -> Result<()> {
        let p = normalize(linkpath)?;
        if target.is_empty() {
            return Err(Errno(libc::ENOENT));
        }
        if target.len() > gust_proto::PATH_BYTES_MAX || target.contains('\0') {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        self.check_parent(&p)?;
        let req = Request::Create {
            path: p.clone(),
            record: Self::new_record(FileKind::Symlink, 0o777, target.to_string()),
            exclusive: true,
        };
        self.transport.call(self.md_daemon(&p), req).map(|_| ())
    }

    pub fn readlink(&self, path: &str) -> Result<String> {
        let r = self.get_record(&normalize(path)?)?;
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
        let p = if follow { self.resolve(path)?.0 } else { normalize(path)? };
        let req = Request::SetAttr { path: p.clone(), mode, atime_ns: atime, mtime_ns: mtime, ctime_ns: now_ns() };
        self.transport.call(self.md_daemon(&p), req).map(|_| ())
    }

    pub fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        self.set_attr(path, Some(mode), None, None, true)
    }

    /// Sets access and modification times (nanoseconds since the epoch); `None`
    /// leaves one unchanged.
    pub fn utimens(&self, path: &str, atime_ns: Option<i64>, mtime_ns: Option<i64>, follow: bool) -> Result<()> {
        self.set_attr(path, None, atime_ns, mtime_ns, follow)
    }

    pub fn statfs(&self) -> Result<StatFs> {
        let calls =
            (0..self.daemon_count()).map(|d| Call { daemon: d, req: Request::StatFs, bulk: Vec::new() }).collect();
        let mut s = StatFs {
            total_bytes: 0,
            free_bytes: 0,
            avail_bytes: 0,
            files: 0,
            daemons: self.daemon_count(),
            chunk_size_bytes: self.chunk_size,
        };
        for a in self.transport.batch(calls) {
            match a? {
                (Response::StatFs { total_bytes, free_bytes, avail_bytes, files }, _) => {
                    s.total_bytes += total_bytes;
                    s.free_bytes += free_bytes;
                    s.avail_bytes += avail_bytes;
                    s.files += files;
                }
                (r, _) => return Err(unexpected(r)),
            }
        }
        Ok(s)
    }

    /// Opens a directory listing that pulls pages lazily, daemon by daemon, so a
    /// directory of millions of entries never needs one large message or buffer.
    pub fn opendir(&self, path: &str) -> Result<DirStream<'_>> {
        let (p, r) = self.resolve(path)?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(DirStream { client: self, dir: p, daemon: 0, after: None, page: Vec::new(), done_daemon: false })
    }

    /// Every entry of a directory (convenience over `opendir`).
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.opendir(path)?.collect()
    }

    pub fn rename(&self, old: &str, new: &str) -> Result<()> {
        let old = normalize(old)?;
        let new = normalize(new)?;
        if old == "/" || new == "/" {
            return Err(Errno(libc::EBUSY));
        }
        let r = self.get_record(&old)?;
        if old == new {
            return Ok(());
        }
        if r.kind == FileKind::Dir {
            if new.starts_with(&format!("{old}/")) {
                return Err(Errno(libc::EINVAL));
            }
            self.rename_dir(&old, &new, r)?;
        } else {
            self.rename_file(&old, &new, r)?;
        }
        self.retarget_open_files(&old, &new);
        Ok(())
    }

    /// Descriptors of this client open on `old` (or below it) follow the rename,
    /// as POSIX descriptors follow the file. Other processes' descriptors keep the
    /// old path and get ENOENT or ESTALE (docs/SEMANTICS.md).
    fn retarget_open_files(&self, old: &str, new: &str) {
        let prefix = format!("{old}/");
        for f in self.files.read().unwrap().values() {
            let mut p = f.path.write().unwrap();
            if *p == old {
                *p = new.to_string();
            } else if p.starts_with(&prefix) {
                *p = format!("{new}{}", &p[old.len()..]);
            }
        }
    }

    fn rename_file(&self, old: &str, new: &str, r: Record) -> Result<()> {
        let (old, new) = (old.to_string(), new.to_string());
        self.check_parent(&new)?;
        let mut moved = r.clone();
        moved.ctime_ns = now_ns();
        let replaced = match self
            .transport
            .call(self.md_daemon(&new), Request::PutRecord { path: new.clone(), record: moved, replace: true })?
        {
            Response::MaybeRecord(x) => x,
            r => return Err(unexpected(r)),
        };
        // Remove the old name. Should this fail, both names exist and the error says so.
        self.transport.call(self.md_daemon(&old), Request::Remove { path: old, kind: RemoveKind::NotDir })?;
        if let Some(rep) = replaced {
            if rep.file_id != r.file_id {
                self.remove_chunks(&rep)?;
            }
        }
        Ok(())
    }

    /// Renames a directory by moving every descendant record. Phase one writes all new
    /// records (undone on failure, so nothing changes); phase two removes the old
    /// ones. Only a daemon failing during phase two can leave both trees visible, and
    /// then the caller gets EIO and `last_transport_error` names the daemon.
    fn rename_dir(&self, old: &str, new: &str, dir_rec: Record) -> Result<()> {
        match self.get_record(new) {
            Ok(t) if t.kind != FileKind::Dir => return Err(Errno(libc::ENOTDIR)),
            Ok(_) => {
                if self.dir_has_children(new)? {
                    return Err(Errno(libc::ENOTEMPTY));
                }
            }
            Err(Errno(libc::ENOENT)) => self.check_parent(new)?,
            Err(e) => return Err(e),
        }
        // Collect descendants from every daemon.
        let mut desc: Vec<(String, Record)> = Vec::new();
        for d in 0..self.daemon_count() {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let req = Request::ScanTree { dir: old.to_string(), after: after.clone(), max_entries: 4096 };
                match self.transport.call(d, req)? {
                    Response::Tree { records, last_key, done } => {
                        desc.extend(records);
                        if done {
                            break;
                        }
                        after = last_key.or(after);
                    }
                    r => return Err(unexpected(r)),
                }
            }
        }
        let rebase = |p: &str| format!("{new}{}", &p[old.len()..]);
        // Phase one: new records, grouped per owning daemon, in bounded batches.
        let mut moved_dir = dir_rec.clone();
        moved_dir.ctime_ns = now_ns();
        let replaced = match self
            .transport
            .call(self.md_daemon(new), Request::PutRecord { path: new.to_string(), record: moved_dir, replace: true })?
        {
            Response::MaybeRecord(x) => x,
            r => return Err(unexpected(r)),
        };
        let mut groups: BTreeMap<u32, Vec<(String, Record)>> = BTreeMap::new();
        for (p, r) in &desc {
            let np = rebase(p);
            groups.entry(self.md_daemon(&np)).or_default().push((np, r.clone()));
        }
        let mut written: Vec<(u32, Vec<String>)> = Vec::new();
        let mut failure = None;
        'outer: for (d, recs) in &groups {
            for batch in recs.chunks(1024) {
                match self.transport.call(*d, Request::PutRecords { records: batch.to_vec() }) {
                    Ok(_) => written.push((*d, batch.iter().map(|x| x.0.clone()).collect())),
                    Err(e) => {
                        failure = Some(e);
                        break 'outer;
                    }
                }
            }
        }
        if let Some(e) = failure {
            for (d, paths) in written {
                let _ = self.transport.call(d, Request::RemoveRecords { paths });
            }
            match replaced {
                Some(t) => {
                    let _ = self.transport.call(
                        self.md_daemon(new),
                        Request::PutRecord { path: new.to_string(), record: t, replace: true },
                    );
                }
                None => {
                    let _ = self
                        .transport
                        .call(self.md_daemon(new), Request::RemoveRecords { paths: vec![new.to_string()] });
                }
            }
            return Err(e);
        }
        // Phase two: remove the old records.
        let mut old_groups: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (p, _) in &desc {
            old_groups.entry(self.md_daemon(p)).or_default().push(p.clone());
        }
        for (d, paths) in old_groups {
            for batch in paths.chunks(1024) {
                self.transport.call(d, Request::RemoveRecords { paths: batch.to_vec() })?;
            }
        }
        self.transport.call(self.md_daemon(old), Request::RemoveRecords { paths: vec![old.to_string()] })?;
        Ok(())
    }

    /// Counters of one daemon (requests per op, bytes, connections).
    pub fn daemon_stats(&self, daemon: u32) -> Result<DaemonStats> {
        match self.transport.call(daemon, Request::Stats)? {
            Response::Stats(s) => Ok(s),
            r => Err(unexpected(r)),
        }
    }

    /// Capacity of one daemon's root directory.
    pub fn daemon_statfs(&self, daemon: u32) -> Result<StatFs> {
        match self.transport.call(daemon, Request::StatFs)? {
            Response::StatFs { total_bytes, free_bytes, avail_bytes, files } => Ok(StatFs {
                total_bytes,
                free_bytes,
                avail_bytes,
                files,
                daemons: 1,
                chunk_size_bytes: self.chunk_size,
            }),
            r => Err(unexpected(r)),
        }
    }

    pub fn ping(&self, daemon: u32) -> Result<()> {
        self.transport.call(daemon, Request::Ping).map(|_| ())
    }

    /// Asks one daemon to stop; unless `keep`, it removes its root directory.
    pub fn shutdown_daemon(&self, daemon: u32, keep: bool) -> Result<()> {
        self.transport.call(daemon, Request::Shutdown { keep }).map(|_| ())
    }
}

/// A streaming directory listing; see [`Client::opendir`].
pub struct DirStream<'a> {
    client: &'a Client,
    dir: String,
    daemon: u32,
    after: Option<String>,
    page: Vec<DirEntry>,
    done_daemon: bool,
}

impl Iterator for DirStream<'_> {
    type Item = Result<DirEntry>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.page.pop() {
                return Some(Ok(e));
            }
            if self.done_daemon {
                self.daemon += 1;
                self.after = None;
                self.done_daemon = false;
            }
            if self.daemon >= self.client.daemon_count() {
                return None;
            }
            let req = Request::ReadDir {
                dir: self.dir.clone(),
                after: self.after.clone(),
                max_entries: READDIR_PAGE_ENTRIES,
            };
            match self.client.transport.call(self.daemon, req) {
                Ok(Response::DirPage { mut entries, done }) => {
                    self.after = entries.last().map(|e| e.name.clone());
                    self.done_daemon = done || entries.is_empty();
                    entries.reverse();
                    self.page = entries;
                }
                Ok(r) => return Some(Err(unexpected(r))),
                Err(e) => {
                    self.daemon = u32::MAX;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_paths() {
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("//a//b/").unwrap(), "/a/b");
        assert_eq!(normalize("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(normalize("/../..").unwrap(), "/");
        assert_eq!(normalize("a"), Err(Errno(libc::EINVAL)));
        assert_eq!(normalize("/a\0b"), Err(Errno(libc::EINVAL)));
        assert_eq!(normalize(&format!("/{}", "x".repeat(300))), Err(Errno(libc::ENAMETOOLONG)));
    }

    #[test]
    fn parents() {
        assert_eq!(parent_of("/a"), "/");
        assert_eq!(parent_of("/a/b"), "/a");
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/a", "x"), "/a/x");
    }
}
