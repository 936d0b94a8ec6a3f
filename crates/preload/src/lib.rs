//! `libgust_preload.so`: the LD_PRELOAD front end of GustFS.
//!
//! It defines the libc functions of the POSIX file API (open, read, stat, opendir,
//! fopen, ...). A call on a path under the mount directory (`$GUST_MOUNTDIR`, default
//! `/gustfs`), or on a descriptor this library issued, goes to the client core; every
//! other call goes to the next definition (libc, found with `dlsym(RTLD_NEXT)`)
//! untouched. What is interposed and what differs from POSIX: docs/PRELOAD.md.
//!
//! What this crate is not: a file system. It only translates between the C ABI and
//! [`gust_client::Client`]; all semantics live in the client core.
//!
//! Design points:
//! * Descriptors. A GustFS descriptor is a real kernel descriptor, an `O_PATH` handle
//!   on "/" reserved as a placeholder, so its number never collides with one the
//!   application or libc opens. [`FDS`] maps the placeholder number to the client's
//!   descriptor; a lookup is one atomic load, no lock. `O_PATH` makes any call that
//!   slips past the library (a raw syscall, glibc-internal I/O) fail with EBADF
//!   rather than silently hit another file.
//! * Reentrancy. The client core and Rust std call open/read/write/close themselves;
//!   inside the library a thread-local flag ([`Guard`]) sends every such call to libc.
//! * Laziness. Loading costs two getenv calls and the registration of an exit and a
//!   fork handler (exit.rs). The client (hosts file, secret) is built on the first
//!   GustFS access; connections open on the first RPC.
//! * fork: the child inherits the descriptor table and reconnects lazily (the
//!   transport drops pooled connections when the pid changes). exec: descriptors
//!   without FD_CLOEXEC and a GustFS working directory travel in the environment
//!   (GUST_PRELOAD_FDS, GUST_PRELOAD_CWD) and are re-opened lazily in the new image.

#![allow(clippy::missing_safety_doc)]

mod copy;
mod creds;
mod dir;
mod exec;
mod exit;
mod fs;
mod real;
mod sockets;
mod stdio;
#[cfg(test)]
mod tests;

use gust_client::{Client, Errno};
use libc::{c_char, c_int};
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};

/// Placeholder descriptors must be below this; the table costs 4 bytes per slot
/// (256 KiB of zero pages, untouched until used).
pub(crate) const FD_MAX: usize = 1 << 16;
/// Table value of a descriptor inherited across exec and not yet re-opened.
const FD_PENDING: i32 = -1;
/// st_dev reported for every GustFS file.
pub(crate) use gust_client::GUST_DEV;

#[allow(clippy::declare_interior_mutable_const)]
const FD_FREE: AtomicI32 = AtomicI32::new(0);
/// Kernel placeholder descriptor -> client descriptor + 1 (0: not ours).
static FDS: [AtomicI32; FD_MAX] = [FD_FREE; FD_MAX];

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// True while this thread runs library code: every libc call then goes to libc.
/// During thread teardown (TLS gone) everything goes to libc as well.
#[inline]
pub(crate) fn reentrant() -> bool {
    BUSY.try_with(|b| b.get()).unwrap_or(true)
}

pub(crate) struct Guard(bool);

impl Guard {
    pub(crate) fn enter() -> Guard {
        Guard(BUSY.try_with(|b| b.replace(true)).unwrap_or(true))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let prev = self.0;
        let _ = BUSY.try_with(|b| b.set(prev));
    }
}

pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn get_errno() -> i32 {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() }
}

/// What a C function returns when it fails (with errno set): -1, or NULL for the
/// functions that return a pointer. (mmap's MAP_FAILED is its own.)
pub(crate) trait Failed {
    const FAILED: Self;
}

impl Failed for i32 {
    const FAILED: Self = -1;
}

impl Failed for i64 {
    const FAILED: Self = -1;
}

impl Failed for isize {
    const FAILED: Self = -1;
}

impl<T> Failed for *mut T {
    const FAILED: Self = std::ptr::null_mut();
}

/// Converts a result to the C convention: the value, or the failure value with errno
/// set.
pub(crate) fn ret<T: Failed>(r: Result<T, i32>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            T::FAILED
        }
    }
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// One line on stderr, once per process, unless GUST_QUIET=1.
pub(crate) fn warn_once(msg: &str) {
    if WARNED.swap(true, Ordering::Relaxed) {
        return;
    }
    if std::env::var_os("GUST_QUIET").is_some_and(|v| v == "1") {
        return;
    }
    let line = format!("gust-preload: {msg}\n");
    // SAFETY: plain write of a valid buffer to fd 2.
    unsafe { real::write(2, line.as_ptr().cast(), line.len()) };
}

static CLIENT: OnceLock<Option<Client>> = OnceLock::new();

/// The client, built on first use. Without an instance every GustFS call is EIO.
pub(crate) fn client() -> Result<&'static Client, i32> {
    CLIENT
        .get_or_init(|| {
            let _g = Guard::enter();
            match Client::from_env() {
                Ok(c) => {
                    c.set_defer_exclusive_create(std::env::var("GUST_DEFER_EXCL").is_ok_and(|v| v == "1"));
                    // Built by a write from an exit handler (ls's close_stdout):
                    // nothing may be held back from here on (exit.rs).
                    if exit::ending() {
                        c.begin_exit();
                    }
                    Some(c)
                }
                Err(e) => {
                    warn_once(&format!("GustFS unavailable, calls under {} fail with EIO: {e}", mount()));
                    None
                }
            }
        })
        .as_ref()
        .inspect(|c| ARMED.call_once(|| c.arm_claims()))
        .ok_or(libc::EIO)
}

/// Claims (deferred creates under a directory's claim, gust-client claims.rs) are
/// armed once the client exists: their recall runs the client's code.
static ARMED: std::sync::Once = std::sync::Once::new();

/// The client if it was built already (hooks that must not build one).
pub(crate) fn built_client() -> Option<&'static Client> {
    CLIENT.get().and_then(Option::as_ref)
}

/// Before fork (registered at load, exit.rs): a child (a shell's `cat f` after
/// `echo > f`) must find the files its parent wrote, and a deferred create must not
/// be held by both.
pub(crate) extern "C" fn send_creates_before_fork() {
    if let Some(c) = built_client() {
        let _g = Guard::enter();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.send_before_fork()));
    }
}

/// Sends what the client holds back (creates that open deferred and no close has
/// sent yet, unsent sizes) before exec: the files must exist, whole, for whatever
/// comes next.
pub(crate) fn settle_deferred() {
    if let Some(c) = built_client() {
        let _g = Guard::enter();
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.settle_all()));
    }
}

/// Runs a client call with the reentrancy flag set; a panic becomes EIO.
pub(crate) fn call<T>(f: impl FnOnce(&'static Client) -> gust_client::Result<T>) -> Result<T, i32> {
    let _g = Guard::enter();
    let c = client()?;
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c))) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Errno(e))) => {
            if e == libc::EIO {
                if let Some(t) = c.last_transport_error() {
                    warn_once(&format!("no answer from GustFS ({t}); calls fail with EIO"));
                }
            }
            Err(e)
        }
        Err(_) => Err(libc::EIO),
    }
}

static MOUNT: OnceLock<String> = OnceLock::new();

/// The mount directory without a trailing slash ("" disables the library).
pub(crate) fn mount() -> &'static str {
    MOUNT.get_or_init(|| {
        let m = std::env::var("GUST_MOUNTDIR").unwrap_or_else(|_| "/gustfs".into());
        match gust_client::normalize(&m) {
            Ok(n) if n != "/" => n,
            _ => String::new(),
        }
    })
}

// ----- descriptor table -------------------------------------------------------------

pub(crate) struct Inherited {
    path: String,
    flags: i32,
    offset: u64,
}

static INHERITED: Mutex<Option<HashMap<i32, Inherited>>> = Mutex::new(None);

/// The client descriptor behind kernel descriptor `fd`, if it is ours.
#[inline]
pub(crate) fn ours(fd: c_int) -> Option<i32> {
    if fd < 0 || fd as usize >= FD_MAX {
        return None;
    }
    let v = FDS[fd as usize].load(Ordering::Acquire);
    if v == 0 {
        None
    } else if v > 0 {
        Some(v - 1)
    } else {
        adopt(fd)
    }
}

/// Re-opens a descriptor inherited across exec, on its first use.
#[cold]
fn adopt(fd: c_int) -> Option<i32> {
    let _g = Guard::enter();
    let mut map = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(inh) = map.as_mut().and_then(|m| m.remove(&fd)) else {
        let v = FDS[fd as usize].load(Ordering::Acquire);
        return if v > 0 { Some(v - 1) } else { None };
    };
    let flags = inh.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
    let r = call(|c| {
        let cfd = c.open(&inh.path, flags, 0)?;
        if inh.offset > 0 {
            c.lseek(cfd, inh.offset as i64, libc::SEEK_SET)?;
        }
        Ok(cfd)
    });
    match r {
        Ok(cfd) => {
            FDS[fd as usize].store(cfd + 1, Ordering::Release);
            Some(cfd)
        }
        Err(_) => {
            // The placeholder stays: kernel calls on it fail with EBADF.
            FDS[fd as usize].store(0, Ordering::Release);
            None
        }
    }
}

pub(crate) fn register(kfd: c_int, cfd: i32) {
    FDS[kfd as usize].store(cfd + 1, Ordering::Release);
}

/// Forgets `kfd`; returns the client descriptor it held.
pub(crate) fn unregister(kfd: c_int) -> Option<i32> {
    if kfd < 0 || kfd as usize >= FD_MAX {
        return None;
    }
    let v = FDS[kfd as usize].swap(0, Ordering::AcqRel);
    if v == FD_PENDING {
        let _g = Guard::enter();
        if let Some(m) = INHERITED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            m.remove(&kfd);
        }
    }
    if v > 0 {
        Some(v - 1)
    } else {
        None
    }
}

/// Every descriptor that is ours: (kernel fd, client fd).
pub(crate) fn all_ours() -> Vec<(c_int, i32)> {
    let mut v = Vec::new();
    for (i, s) in FDS.iter().enumerate() {
        let x = s.load(Ordering::Acquire);
        if x != 0 {
            if let Some(c) = ours(i as c_int) {
                v.push((i as c_int, c));
            }
        }
    }
    v
}

/// Whether `fd` is ours or inherited-and-pending (no adoption).
#[inline]
pub(crate) fn tracked(fd: c_int) -> bool {
    fd >= 0 && (fd as usize) < FD_MAX && FDS[fd as usize].load(Ordering::Acquire) != 0
}

static HIGH_FD_BASE: OnceLock<c_int> = OnceLock::new();

/// Lowest number for the client's own descriptors (sockets and their clones).
/// Programs such as shells dup2 onto small numbers they believe free ("exec 3>f");
/// keeping our sockets high keeps them out of the way. Three quarters of the soft
/// RLIMIT_NOFILE, at most 1024 (a kernel fd table grows to the highest number).
pub(crate) fn high_fd_base() -> c_int {
    *HIGH_FD_BASE.get_or_init(|| {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: valid out-pointer.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 { r.rlim_cur } else { 1024 };
        (soft.min(1 << 20) * 3 / 4).clamp(10, 1024) as c_int
    })
}

static UMASK: OnceLock<u32> = OnceLock::new();

/// The process umask, read once on first use (reading it means setting it, so it
/// is not re-read on every create).
pub(crate) fn umask() -> u32 {
    *UMASK.get_or_init(|| {
        // SAFETY: umask has no preconditions; the old value is restored at once.
        unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m as u32
        }
    })
}

/// Reserves a kernel descriptor for client descriptor `cfd`.
pub(crate) fn install(cfd: i32, cloexec: bool) -> Result<c_int, i32> {
    let flags = libc::O_PATH | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: valid NUL-terminated path.
    let kfd = unsafe { real::open(c"/".as_ptr(), flags, 0) };
    if kfd < 0 {
        let e = get_errno();
        let _ = call(|c| c.close(cfd));
        return Err(e);
    }
    if kfd as usize >= FD_MAX {
        // SAFETY: closing the descriptor just opened.
        unsafe { real::close(kfd) };
        let _ = call(|c| c.close(cfd));
        return Err(libc::EMFILE);
    }
    register(kfd, cfd);
    // SAFETY: kfd is a descriptor this library just registered.
    unsafe { stdio::std_sync(kfd) };
    Ok(kfd)
}

// ----- paths --------------------------------------------------------------------------

/// Where a path argument goes.
pub(crate) enum Route {
    /// To libc, exactly as given.
    Real,
    /// To libc, as this absolute path (a relative path seen from a GustFS working
    /// directory, or a GustFS path whose ".." leaves the mount directory).
    RealAbs(std::ffi::CString),
    /// To the client, as this path inside the file system.
    Ours(String),
}

static VCWD_SET: AtomicBool = AtomicBool::new(false);
/// The working directory when it is inside GustFS (an absolute external path).
static VCWD: RwLock<Option<String>> = RwLock::new(None);

pub(crate) fn vcwd() -> Option<String> {
    if !VCWD_SET.load(Ordering::Acquire) {
        return None;
    }
    VCWD.read().unwrap_or_else(|e| e.into_inner()).clone()
}

pub(crate) fn set_vcwd(v: Option<String>) {
    let _g = Guard::enter();
    let mut w = VCWD.write().unwrap_or_else(|e| e.into_inner());
    VCWD_SET.store(v.is_some(), Ordering::Release);
    match &v {
        // Children started through any exec path that passes `environ` inherit it.
        Some(p) => std::env::set_var("GUST_PRELOAD_CWD", p),
        None => {
            if w.is_some() {
                std::env::remove_var("GUST_PRELOAD_CWD")
            }
        }
    }
    *w = v;
}

/// External (mount-relative) form of an internal path.
pub(crate) fn external(internal: &str) -> String {
    if internal == "/" {
        mount().to_string()
    } else {
        format!("{}{internal}", mount())
    }
}

fn under_mount(p: &[u8], m: &[u8]) -> bool {
    p.starts_with(m) && (p.len() == m.len() || p[m.len()] == b'/')
}

/// Routes an absolute path.
fn route_abs(p: &[u8]) -> Result<Route, i32> {
    let m = mount().as_bytes();
    if m.is_empty() {
        return Ok(Route::Real);
    }
    let quick = under_mount(p, m);
    let odd = p.windows(2).any(|w| w == b"//" || w == b"/.");
    if !quick && !odd {
        return Ok(Route::Real);
    }
    let Ok(s) = std::str::from_utf8(p) else {
        return if quick { Err(libc::EINVAL) } else { Ok(Route::Real) };
    };
    let n = match gust_client::normalize(s) {
        Ok(n) => n,
        Err(Errno(e)) => return if quick { Err(e) } else { Ok(Route::Real) },
    };
    if under_mount(n.as_bytes(), m) {
        let rest = &n[m.len()..];
        return Ok(Route::Ours(if rest.is_empty() { "/".into() } else { rest.to_string() }));
    }
    if quick {
        // "/gustfs/../x": the kernel cannot resolve "/gustfs", so say what is meant.
        return Ok(Route::RealAbs(std::ffi::CString::new(n).map_err(|_| libc::EINVAL)?));
    }
    Ok(Route::Real)
}

/// Routes `path` relative to `dirfd` (AT_FDCWD or a descriptor). A GustFS path
/// written with a trailing slash must name a directory (or nothing yet): ENOTDIR
/// otherwise, as the kernel says, at the price of one stat for such paths only
/// (normalizing drops the slash, so the call itself could not tell).
pub(crate) unsafe fn route(dirfd: c_int, path: *const c_char) -> Result<Route, i32> {
    let r = route_unchecked(dirfd, path)?;
    if let Route::Ours(p) = &r {
        if p != "/" && CStr::from_ptr(path).to_bytes().ends_with(b"/") {
            if let Ok(st) = call(|c| c.stat(p)) {
                if st.kind != gust_client::Kind::Dir {
                    return Err(libc::ENOTDIR);
                }
            }
        }
    }
    Ok(r)
}

unsafe fn route_unchecked(dirfd: c_int, path: *const c_char) -> Result<Route, i32> {
    if path.is_null() {
        return Ok(Route::Real);
    }
    let p = CStr::from_ptr(path).to_bytes();
    if p.is_empty() {
        return Ok(Route::Real);
    }
    if p.len() >= gust_client::PATH_ARG_BYTES_MAX {
        // What the kernel says of any path argument this long, ours or not.
        return Err(libc::ENAMETOOLONG);
    }
    if p[0] == b'/' {
        return route_abs(p);
    }
    let base = if dirfd == libc::AT_FDCWD {
        match vcwd() {
            Some(c) => c,
            None => return Ok(Route::Real),
        }
    } else if let Some(cfd) = ours(dirfd) {
        external(&call(|c| c.fd_info(cfd))?.0)
    } else if may_enter_mount(p) {
        // A directory outside the instance, a name that may lead into it (rsync
        // opens "/" and walks down with openat and fstatat).
        match real_dir_path(dirfd) {
            Some(d) => {
                let mut abs = d.into_bytes();
                if abs.last() != Some(&b'/') {
                    abs.push(b'/');
                }
                abs.extend_from_slice(p);
                return match route_abs(&abs)? {
                    Route::Ours(q) => Ok(Route::Ours(q)),
                    _ => Ok(Route::Real),
                };
            }
            None => return Ok(Route::Real),
        }
    } else {
        return Ok(Route::Real);
    };
    let mut abs = base.into_bytes();
    abs.push(b'/');
    abs.extend_from_slice(p);
    match route_abs(&abs)? {
        Route::Real => Ok(Route::RealAbs(std::ffi::CString::new(abs).map_err(|_| libc::EINVAL)?)),
        r => Ok(r),
    }
}

/// Whether relative path `p` could reach the mount directory from some directory
/// outside it: its first component is one of the mount path's, or "..". A cheap
/// test before `real_dir_path`'s system call, so other programs' *at calls on their
/// own directories pay nothing.
fn may_enter_mount(p: &[u8]) -> bool {
    let first = p.split(|&b| b == b'/').next().unwrap_or_default();
    first == b".." || mount().as_bytes().split(|&b| b == b'/').any(|c| !c.is_empty() && c == first)
}

/// The path of real directory descriptor `fd` (from /proc/self/fd).
fn real_dir_path(fd: c_int) -> Option<String> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?.into_os_string().into_string().ok()
}

pub(crate) unsafe fn route_cwd(path: *const c_char) -> Result<Route, i32> {
    route(libc::AT_FDCWD, path)
}

// ----- load ---------------------------------------------------------------------------

/// Runs at load: reads the state a parent passed across exec. Costs two getenv
/// calls when there is none.
extern "C" fn on_load() {
    let _g = Guard::enter();
    exit::install_hooks();
    if let Ok(c) = std::env::var("GUST_PRELOAD_CWD") {
        if c.starts_with('/') {
            *VCWD.write().unwrap_or_else(|e| e.into_inner()) = Some(c);
            VCWD_SET.store(true, Ordering::Release);
        }
    }
    if let Ok(list) = std::env::var("GUST_PRELOAD_FDS") {
        std::env::remove_var("GUST_PRELOAD_FDS");
        let mut map = HashMap::new();
        for item in list.split(';').filter(|s| !s.is_empty()) {
            if let Some((fd, inh)) = exec::decode_fd(item) {
                if fd < 0 || fd as usize >= FD_MAX {
                    continue;
                }
                // Only a placeholder (O_PATH) can be ours: a stale variable must
                // never capture a pipe or a file the parent put there.
                // SAFETY: fcntl on an arbitrary number is harmless.
                let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
                if fl < 0 || fl & libc::O_PATH == 0 {
                    continue;
                }
                map.insert(fd, inh);
                FDS[fd as usize].store(FD_PENDING, Ordering::Release);
            }
        }
        let std_fds: Vec<i32> = map.keys().copied().filter(|fd| *fd <= 2).collect();
        *INHERITED.lock().unwrap_or_else(|e| e.into_inner()) = Some(map);
        for fd in std_fds {
            // SAFETY: at load, before main.
            unsafe { stdio::std_sync(fd) };
        }
    }
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
