//! The GustFS FUSE front end: `gust mount` serves one instance at a directory so that
//! any program (static binaries, exec, mmap, any language) can use it.
//!
//! What it is for: translating the kernel's inode-based FUSE requests into calls on the
//! path-based client core ([`gust_client::Client`]). What it is not for: caching or
//! policy of its own beyond what the kernel's attribute/entry/page caches give (their
//! timeouts are mount options), and anything the client core does not offer (hard
//! links: EPERM; device nodes). File locks are the daemons' (locks.rs), so
//! they hold between nodes.
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
//! open descriptors keep working; a hard-linked file's other names stay as they are.
//!
//! Modules: `ops` (one method per kernel request), `inodes` (the inode table,
//! attributes, handles, owners of new files), `listing` (READDIR/READDIRPLUS),
//! `locks` (GETLK, SETLK, SETLKW and the releases at FLUSH and RELEASE),
//! `rename`, `handles` (open files and directories), `negative` (names known
//! absent, so the LOOKUP before a CREATE need not ask), `xattrs` (extended
//! attributes), `setid` (set-id bits dropped on writes, as the kernel would),
//! `convert` (errno, times, types, credentials).
//!
//! Sizing sketch: one request costs one or two RPCs (tens of microseconds on loopback)
//! plus a kernel round trip (a few microseconds). A 1 MiB write is one FUSE request
//! (max_write 1 MiB) and one client pwrite, which fans out to the chunk daemons in
//! parallel. `threads` request loops (default 8) each hold one 16 MiB receive buffer
//! of fuser's (touched only up to max_write), so memory stays under ~10 MiB touched.

use fuser::{
    AccessFlags, Config, Errno as FErrno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
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
    /// How long a name this mount knows to be absent (a failed lookup, a name in a
    /// directory it made) is answered as absent without asking (negative.rs); zero:
    /// never.
    pub negative_timeout: Duration,
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
    /// When the kernel asks for listings with attributes (READDIRPLUS).
    pub readdirplus: Readdirplus,
    /// Leave flock and fcntl locks to the kernel of this node (locks.rs): they then
    /// hold between this node's processes only.
    pub local_locks: bool,
}

/// When the kernel lists a directory with each entry's attributes (READDIRPLUS)
/// rather than names alone (READDIR). With attributes, `ls -l`, `du` and
/// `os.scandir` + stat need no LOOKUP per entry afterwards, but the kernel makes an
/// inode and a dentry for every entry listed, which costs a walk that only wants
/// names (`find -name`, `os.walk`) several times the listing itself
/// (docs/PERFORMANCE.md, "gust find"). The kernel's own middle way
/// (FUSE_READDIRPLUS_AUTO) measured the same as `Always` for both kinds of walk, so
/// it is not offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readdirplus {
    /// Every listing carries attributes (the default).
    Always,
    /// Names only.
    Never,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            negative_timeout: Duration::ZERO,
            writeback_cache: false,
            direct_io: false,
            allow_other: false,
            read_only: false,
            threads: 8,
            readdirplus: Readdirplus::Always,
            local_locks: false,
        }
    }
}

const ROOT: u64 = 1;

/// The file system the kernel talks to.
pub struct GustFs {
    client: &'static Client,
    opts: MountOptions,
    table: Arc<Mutex<Table>>,
    /// The kernel's caches under grants: replies and recalls (coherence.rs).
    coherence: Arc<coherence::Coherence>,
    files: RwLock<HashMap<u64, Arc<Handle>>>,
    dirs: RwLock<HashMap<u64, Arc<DirHandle>>>,
    next_fh: AtomicU64,
    hidden_seq: AtomicU64,
    negative: negative::Negative,
    /// SETLKW waits, answered EINTR after a while (locks.rs).
    slices: &'static locks::Slices,
}

mod coherence;
mod convert;
mod handles;
mod inodes;
mod listing;
mod locks;
mod negative;
mod ops;
mod rename;
mod setid;
mod xattrs;

use convert::*;
use handles::*;
use inodes::*;

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
    let coherence = fs.coherence.clone();
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
    coherence.set_notifier(session.notifier());
    client.set_long_lived();
    client.on_recall(move |path| coherence.recalled(path));
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
