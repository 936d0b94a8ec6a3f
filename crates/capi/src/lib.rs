//! `libgust.so`: the C API of GustFS (declared in `include/gust.h`).
//!
//! Direct calls into the client core, no interception: a program links `-lgust`,
//! calls `gust_mount` once and then `gust_open`, `gust_read`, `gust_stat`, ... on a
//! `gust_fs *` that any number of threads may share. Errors follow the C habit:
//! -1 (or NULL) and `errno`, plus a thread-local message from `gust_last_error`.
//!
//! What this crate is not: a file system. It only translates between the C ABI and
//! [`gust_client::Client`]; all semantics live in the client core, and the header
//! documents only what this layer adds (pointer checks, path mapping, messages).
//!
//! Rules every entry point keeps:
//! * Every pointer argument is checked; NULL fails with EINVAL, never a crash.
//! * A Rust panic never unwinds into C: [`guard`] catches it and reports EIO.
//! * errno is written only on failure (a successful call leaves it alone, as libc
//!   does), and always last, after the message is stored.

#![allow(non_camel_case_types, clippy::missing_safety_doc)]

use gust_client::{now_ns, Client, ClientOptions, DirStream, Errno, Stat};
use libc::{c_char, c_int, c_uchar, mode_t, off_t, size_t, ssize_t};
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

/// Bytes of `gust_dirent.name`, including the terminating NUL (NAME_MAX + 1).
const DIRENT_NAME_BYTES: usize = 256;

/// An instance handle: the client core behind an `Arc`, so that an open directory
/// stream keeps it alive even if the program unmounts first.
pub struct gust_fs {
    client: Arc<Client>,
}

/// One directory entry as C sees it (`struct gust_dirent` in gust.h).
#[repr(C)]
pub struct gust_dirent {
    pub name: [c_char; DIRENT_NAME_BYTES],
    /// DT_REG, DT_DIR or DT_LNK.
    pub r#type: c_uchar,
}

/// A directory stream. Field order matters: `stream` borrows the client that
/// `client` owns, so it must be dropped first (fields drop in declaration order).
pub struct gust_dir {
    stream: DirStream<'static>,
    client: Arc<Client>,
    entry: gust_dirent,
}

// ----- errors ------------------------------------------------------------------------

/// Why a call failed: the errno for the caller and a detail for the message.
#[derive(Debug)]
pub struct Failure {
    errno: i32,
    detail: String,
}

type R<T> = Result<T, Failure>;

fn failure(errno: i32, detail: impl Into<String>) -> Failure {
    Failure { errno, detail: detail.into() }
}

thread_local! {
    /// Message of this thread's last failure; gust_last_error returns a pointer into it.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_errno(e: i32) {
    // SAFETY: __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn set_last_error(msg: String) {
    // An interior NUL cannot come from our messages, but a path could carry one in
    // theory; cut there rather than lose the message.
    let msg = match CString::new(msg) {
        Ok(c) => c,
        Err(e) => {
            let n = e.nul_position();
            let mut v = e.into_vec();
            v.truncate(n);
            CString::new(v).unwrap_or_default()
        }
    };
    // try_with: during thread teardown the slot may be gone; errno still works.
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = msg);
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "panic"
    }
}

/// Runs the body of entry point `op`: on failure stores the message, sets errno and
/// returns `fail`; a panic becomes EIO and never crosses into C.
pub fn guard<T>(op: &str, fail: T, body: impl FnOnce() -> R<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(f)) => {
            set_last_error(format!("{op}: {}", f.detail));
            set_errno(f.errno);
            fail
        }
        Err(p) => {
            set_last_error(format!("{op}: internal error (a bug in GustFS, please report it): {}", panic_text(&*p)));
            set_errno(libc::EIO);
            fail
        }
    }
}

impl gust_fs {
    /// A failure of the client core on `subject` (a path or "fd N"). EIO usually
    /// means a daemon failed; the transport knows which one, so the message says it.
    fn fail(&self, subject: &str, e: Errno) -> Failure {
        let mut d = format!("{subject}: {e}");
        if e.0 == libc::EIO {
            if let Some(t) = self.client.last_transport_error() {
                d.push_str(&format!(" ({t})"));
            }
        }
        failure(e.0, d)
    }

    /// Maps a caller's path to a path inside the file system: a path under the
    /// instance's mount directory ("/gustfs/a") loses that prefix; any other path
    /// ("/a") is taken as a file-system path already.
    fn map(&self, p: &str) -> R<String> {
        if p.is_empty() {
            return Err(failure(libc::ENOENT, "empty path"));
        }
        Ok(self.client.internal_path(p).unwrap_or_else(|| p.to_string()))
    }

    /// `what` checked, read as UTF-8 and mapped.
    unsafe fn path(&self, p: *const c_char, what: &str) -> R<String> {
        let s = cstr(p, what)?;
        self.map(s)
    }

    fn fd_subject(fd: c_int) -> String {
        format!("fd {fd}")
    }
}

unsafe fn fs_ref<'a>(fs: *const gust_fs) -> R<&'a gust_fs> {
    fs.as_ref().ok_or_else(|| failure(libc::EINVAL, "gust_fs handle is NULL"))
}

unsafe fn cstr<'a>(p: *const c_char, what: &str) -> R<&'a str> {
    if p.is_null() {
        return Err(failure(libc::EINVAL, format!("{what} is NULL")));
    }
    CStr::from_ptr(p).to_str().map_err(|_| failure(libc::EINVAL, format!("{what} is not valid UTF-8")))
}

fn nonnull<T>(p: *const T, what: &str) -> R<()> {
    if p.is_null() {
        Err(failure(libc::EINVAL, format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// A caller's buffer as a slice. NULL is EINVAL even for zero bytes (one rule for
/// every pointer); more than SSIZE_MAX bytes is EINVAL (the result must fit).
unsafe fn buf_len(p: *const libc::c_void, n: size_t) -> R<usize> {
    nonnull(p, "buffer")?;
    if n > isize::MAX as usize {
        return Err(failure(libc::EINVAL, format!("count {n} exceeds SSIZE_MAX")));
    }
    Ok(n)
}

fn offset_arg(off: off_t, what: &str) -> R<u64> {
    u64::try_from(off).map_err(|_| failure(libc::EINVAL, format!("negative {what} {off}")))
}

// ----- instance ----------------------------------------------------------------------

fn mount(hosts: Option<&str>) -> R<gust_fs> {
    let path =
        match hosts {
            Some(p) => p.to_string(),
            None => match std::env::var("GUST_HOSTS_FILE") {
                Ok(p) if !p.is_empty() => p,
                _ => return Err(failure(
                    libc::EINVAL,
                    "hosts file is NULL and GUST_HOSTS_FILE is not set; run `eval \"$(gust env)\"` or pass the path",
                )),
            },
        };
    let client = Client::open_instance(Path::new(&path), ClientOptions::from_env()).map_err(|msg| {
        // The core reports a message; the errno comes from the file itself where it
        // is the cause (missing, unreadable), otherwise the file's content is bad.
        let errno = match std::fs::metadata(&path) {
            Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
            Ok(m) if m.is_dir() => libc::EISDIR,
            Ok(_) => libc::EINVAL,
        };
        // The hosts error names the path in most cases; make sure it always does.
        if msg.contains(&path) {
            failure(errno, msg)
        } else {
            failure(errno, format!("hosts file {path}: {msg}"))
        }
    })?;
    let fs = gust_fs { client: Arc::new(client) };
    // What open descriptors hold back goes out at exit (gust-client's exit.rs).
    gust_client::settle_at_exit(&fs.client);
    // One RPC (stat of "/" on its metadata daemon), so that a stale hosts file or a
    // stopped instance fails here, with the daemon named, not at the first I/O.
    // Other daemons connect lazily, as in every front end.
    fs.client.stat("/").map_err(|e| {
        let f = fs.fail("/", e);
        failure(f.errno, format!("hosts file {path}: instance not reachable: {}", f.detail))
    })?;
    Ok(fs)
}

#[no_mangle]
pub unsafe extern "C" fn gust_mount(hosts_file: *const c_char) -> *mut gust_fs {
    guard("gust_mount", std::ptr::null_mut(), || {
        let hosts = if hosts_file.is_null() { None } else { Some(cstr(hosts_file, "hosts file")?) };
        Ok(Box::into_raw(Box::new(mount(hosts)?)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_unmount(fs: *mut gust_fs) {
    guard("gust_unmount", (), || {
        if !fs.is_null() {
            drop(Box::from_raw(fs));
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn gust_last_error() -> *const c_char {
    static EMPTY: &[u8; 1] = b"\0";
    LAST_ERROR.try_with(|l| l.borrow().as_ptr()).unwrap_or(EMPTY.as_ptr() as *const c_char)
}

// ----- descriptors -------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn gust_open(fs: *mut gust_fs, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    guard("gust_open", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        fs.client.open(&p, flags, mode).map_err(|e| fs.fail(&p, e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_close(fs: *mut gust_fs, fd: c_int) -> c_int {
    guard("gust_close", -1, || {
        let fs = fs_ref(fs)?;
        fs.client.close(fd).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_dup(fs: *mut gust_fs, fd: c_int) -> c_int {
    guard("gust_dup", -1, || {
        let fs = fs_ref(fs)?;
        fs.client.dup(fd).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_read(fs: *mut gust_fs, fd: c_int, buf: *mut libc::c_void, count: size_t) -> ssize_t {
    guard("gust_read", -1, || {
        let fs = fs_ref(fs)?;
        let n = buf_len(buf, count)?;
        let b = std::slice::from_raw_parts_mut(buf as *mut u8, n);
        fs.client.read(fd, b).map(|n| n as ssize_t).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_write(fs: *mut gust_fs, fd: c_int, buf: *const libc::c_void, count: size_t) -> ssize_t {
    guard("gust_write", -1, || {
        let fs = fs_ref(fs)?;
        let n = buf_len(buf, count)?;
        let b = std::slice::from_raw_parts(buf as *const u8, n);
        fs.client.write(fd, b).map(|n| n as ssize_t).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_pread(
    fs: *mut gust_fs,
    fd: c_int,
    buf: *mut libc::c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    guard("gust_pread", -1, || {
        let fs = fs_ref(fs)?;
        let n = buf_len(buf, count)?;
        let off = offset_arg(offset, "offset")?;
        let b = std::slice::from_raw_parts_mut(buf as *mut u8, n);
        fs.client.pread(fd, b, off).map(|n| n as ssize_t).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_pwrite(
    fs: *mut gust_fs,
    fd: c_int,
    buf: *const libc::c_void,
    count: size_t,
    offset: off_t,
) -> ssize_t {
    guard("gust_pwrite", -1, || {
        let fs = fs_ref(fs)?;
        let n = buf_len(buf, count)?;
        let off = offset_arg(offset, "offset")?;
        let b = std::slice::from_raw_parts(buf as *const u8, n);
        fs.client.pwrite(fd, b, off).map(|n| n as ssize_t).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_lseek(fs: *mut gust_fs, fd: c_int, offset: off_t, whence: c_int) -> off_t {
    guard("gust_lseek", -1, || {
        let fs = fs_ref(fs)?;
        let at = fs.client.lseek(fd, offset, whence).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))?;
        off_t::try_from(at).map_err(|_| failure(libc::EOVERFLOW, format!("fd {fd}: offset {at} does not fit off_t")))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_fsync(fs: *mut gust_fs, fd: c_int) -> c_int {
    guard("gust_fsync", -1, || {
        let fs = fs_ref(fs)?;
        fs.client.fsync(fd).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_ftruncate(fs: *mut gust_fs, fd: c_int, length: off_t) -> c_int {
    guard("gust_ftruncate", -1, || {
        let fs = fs_ref(fs)?;
        let len = offset_arg(length, "length")?;
        fs.client.ftruncate(fd, len).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))?;
        Ok(0)
    })
}

// ----- attributes --------------------------------------------------------------------

/// Fills `struct stat` as the client core reports it (`Stat::to_libc_stat`).
unsafe fn fill_stat(s: &Stat, out: *mut libc::stat) {
    *out = s.to_libc_stat();
}

unsafe fn stat_common(op: &str, fs: *mut gust_fs, path: *const c_char, buf: *mut libc::stat, follow: bool) -> c_int {
    guard(op, -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        nonnull(buf, "struct stat pointer")?;
        let s = if follow { fs.client.stat(&p) } else { fs.client.lstat(&p) }.map_err(|e| fs.fail(&p, e))?;
        fill_stat(&s, buf);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_stat(fs: *mut gust_fs, path: *const c_char, buf: *mut libc::stat) -> c_int {
    stat_common("gust_stat", fs, path, buf, true)
}

#[no_mangle]
pub unsafe extern "C" fn gust_lstat(fs: *mut gust_fs, path: *const c_char, buf: *mut libc::stat) -> c_int {
    stat_common("gust_lstat", fs, path, buf, false)
}

#[no_mangle]
pub unsafe extern "C" fn gust_fstat(fs: *mut gust_fs, fd: c_int, buf: *mut libc::stat) -> c_int {
    guard("gust_fstat", -1, || {
        let fs = fs_ref(fs)?;
        nonnull(buf, "struct stat pointer")?;
        let s = fs.client.fstat(fd).map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))?;
        fill_stat(&s, buf);
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_access(fs: *mut gust_fs, path: *const c_char, mode: c_int) -> c_int {
    guard("gust_access", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
            return Err(failure(libc::EINVAL, format!("{p}: bad access mode {mode:#o}")));
        }
        fs.client.access(&p, mode).map_err(|e| fs.fail(&p, e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_chmod(fs: *mut gust_fs, path: *const c_char, mode: mode_t) -> c_int {
    guard("gust_chmod", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        fs.client.chmod(&p, mode).map_err(|e| fs.fail(&p, e))?;
        Ok(0)
    })
}

/// (atime, mtime) from a utimensat-style array: NULL means now for both,
/// UTIME_OMIT leaves one unchanged, UTIME_NOW is now.
unsafe fn times_ts(t: *const libc::timespec) -> R<(Option<i64>, Option<i64>)> {
    if t.is_null() {
        let n = now_ns();
        return Ok((Some(n), Some(n)));
    }
    let one = |x: &libc::timespec| -> R<Option<i64>> {
        match x.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now_ns())),
            ns if (0..1_000_000_000).contains(&ns) => x
                .tv_sec
                .checked_mul(1_000_000_000)
                .and_then(|s| s.checked_add(ns))
                .map(Some)
                .ok_or_else(|| failure(libc::EINVAL, format!("time {}s out of range", x.tv_sec))),
            ns => Err(failure(libc::EINVAL, format!("tv_nsec {ns} is not in 0..999999999, UTIME_NOW or UTIME_OMIT"))),
        }
    };
    Ok((one(&*t)?, one(&*t.add(1))?))
}

#[no_mangle]
pub unsafe extern "C" fn gust_utimens(fs: *mut gust_fs, path: *const c_char, times: *const libc::timespec) -> c_int {
    guard("gust_utimens", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let (a, m) = times_ts(times).map_err(|f| failure(f.errno, format!("{p}: {}", f.detail)))?;
        fs.client.utimens(&p, a, m, true).map_err(|e| fs.fail(&p, e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_truncate(fs: *mut gust_fs, path: *const c_char, length: off_t) -> c_int {
    guard("gust_truncate", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let len = offset_arg(length, "length")?;
        fs.client.truncate(&p, len).map_err(|e| fs.fail(&p, e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_statvfs(fs: *mut gust_fs, buf: *mut libc::statvfs) -> c_int {
    guard("gust_statvfs", -1, || {
        let fs = fs_ref(fs)?;
        nonnull(buf, "struct statvfs pointer")?;
        let s = fs.client.statfs().map_err(|e| fs.fail("/", e))?;
        *buf = s.to_libc_statvfs();
        Ok(0)
    })
}

// ----- namespace ---------------------------------------------------------------------

macro_rules! path_op {
    ($name:ident, |$c:ident, $p:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fs: *mut gust_fs, path: *const c_char) -> c_int {
            guard(stringify!($name), -1, || {
                let fs = fs_ref(fs)?;
                let $p = fs.path(path, "path")?;
                let $c = &fs.client;
                $body.map_err(|e| fs.fail(&$p, e))?;
                Ok(0)
            })
        }
    };
}

path_op!(gust_rmdir, |c, p| c.rmdir(&p));
path_op!(gust_unlink, |c, p| c.unlink(&p));

#[no_mangle]
pub unsafe extern "C" fn gust_mkdir(fs: *mut gust_fs, path: *const c_char, mode: mode_t) -> c_int {
    guard("gust_mkdir", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        fs.client.mkdir(&p, mode).map_err(|e| fs.fail(&p, e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_rename(fs: *mut gust_fs, oldpath: *const c_char, newpath: *const c_char) -> c_int {
    guard("gust_rename", -1, || {
        let fs = fs_ref(fs)?;
        let o = fs.path(oldpath, "old path")?;
        let n = fs.path(newpath, "new path")?;
        fs.client.rename(&o, &n).map_err(|e| fs.fail(&format!("{o} -> {n}"), e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_symlink(fs: *mut gust_fs, target: *const c_char, linkpath: *const c_char) -> c_int {
    guard("gust_symlink", -1, || {
        let fs = fs_ref(fs)?;
        // The target is stored as given, not mapped: it is resolved when followed.
        let t = cstr(target, "target")?;
        let l = fs.path(linkpath, "link path")?;
        fs.client.symlink(t, &l).map_err(|e| fs.fail(&l, e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_readlink(
    fs: *mut gust_fs,
    path: *const c_char,
    buf: *mut c_char,
    bufsiz: size_t,
) -> ssize_t {
    guard("gust_readlink", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        nonnull(buf, "buffer")?;
        if bufsiz == 0 || bufsiz > isize::MAX as usize {
            return Err(failure(libc::EINVAL, format!("{p}: buffer size {bufsiz}")));
        }
        let t = fs.client.readlink(&p).map_err(|e| fs.fail(&p, e))?;
        // readlink(2): no terminating NUL, silently truncated to the buffer.
        let n = t.len().min(bufsiz);
        std::ptr::copy_nonoverlapping(t.as_ptr(), buf as *mut u8, n);
        Ok(n as ssize_t)
    })
}

// ----- directories -------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn gust_opendir(fs: *mut gust_fs, path: *const c_char) -> *mut gust_dir {
    guard("gust_opendir", std::ptr::null_mut(), || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let client = Arc::clone(&fs.client);
        let stream = client.opendir(&p).map_err(|e| fs.fail(&p, e))?;
        // SAFETY: the stream borrows the Client inside the Arc, whose heap address is
        // stable; gust_dir holds a clone of that Arc and drops the stream first.
        let stream: DirStream<'static> = std::mem::transmute::<DirStream<'_>, DirStream<'static>>(stream);
        let entry = gust_dirent { name: [0; DIRENT_NAME_BYTES], r#type: 0 };
        Ok(Box::into_raw(Box::new(gust_dir { stream, client, entry })))
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_readdir(dir: *mut gust_dir) -> *const gust_dirent {
    guard("gust_readdir", std::ptr::null(), || {
        let d = dir.as_mut().ok_or_else(|| failure(libc::EINVAL, "gust_dir handle is NULL"))?;
        let e = match d.stream.next() {
            // End of the directory: NULL with errno untouched, as readdir(3).
            None => return Ok(std::ptr::null()),
            Some(Err(e)) => {
                let mut detail = format!("directory listing: {e}");
                if e.0 == libc::EIO {
                    if let Some(t) = d.client.last_transport_error() {
                        detail.push_str(&format!(" ({t})"));
                    }
                }
                return Err(failure(e.0, detail));
            }
            Some(Ok(e)) => e,
        };
        let name = e.name.as_bytes();
        // The daemons bound names to NAME_MAX (255); a longer one is a protocol bug.
        if name.len() >= DIRENT_NAME_BYTES || name.contains(&0) {
            return Err(failure(libc::EPROTO, format!("directory entry name of {} bytes from a daemon", name.len())));
        }
        for (dst, src) in d.entry.name.iter_mut().zip(name) {
            *dst = *src as c_char;
        }
        d.entry.name[name.len()] = 0;
        d.entry.r#type = gust_client::d_type(e.kind);
        Ok(&d.entry as *const gust_dirent)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_closedir(dir: *mut gust_dir) -> c_int {
    guard("gust_closedir", -1, || {
        nonnull(dir, "gust_dir handle")?;
        drop(Box::from_raw(dir));
        Ok(0)
    })
}

mod locks;
mod xattrs;

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        // SAFETY: see set_errno.
        unsafe { *libc::__errno_location() }
    }

    fn last_error() -> String {
        // SAFETY: gust_last_error returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(gust_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn a_panic_becomes_eio_and_a_message() {
        set_errno(0);
        let r: c_int = guard("gust_test", -1, || panic!("boom"));
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::EIO);
        assert!(last_error().contains("gust_test") && last_error().contains("boom"), "{}", last_error());
    }

    #[test]
    fn success_leaves_errno_and_failure_sets_it() {
        set_errno(1234);
        assert_eq!(guard("gust_test", -1, || Ok(7)), 7);
        assert_eq!(errno(), 1234);
        assert_eq!(guard("gust_test", -1, || Err(failure(libc::ENOENT, "/x: gone"))), -1);
        assert_eq!(errno(), libc::ENOENT);
        assert_eq!(last_error(), "gust_test: /x: gone");
    }

    #[test]
    fn null_pointers_are_einval() {
        unsafe {
            assert_eq!(gust_open(std::ptr::null_mut(), c"/x".as_ptr(), 0, 0), -1);
            assert_eq!(errno(), libc::EINVAL);
            assert!(gust_readdir(std::ptr::null_mut()).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert_eq!(gust_closedir(std::ptr::null_mut()), -1);
            gust_unmount(std::ptr::null_mut());
        }
    }

    #[test]
    fn times() {
        let ts = [libc::timespec { tv_sec: 5, tv_nsec: 7 }, libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }];
        assert_eq!(unsafe { times_ts(ts.as_ptr()) }.unwrap(), (Some(5_000_000_007), None));
        let bad = [libc::timespec { tv_sec: 5, tv_nsec: 1_000_000_000 }, ts[1]];
        assert_eq!(unsafe { times_ts(bad.as_ptr()) }.unwrap_err().errno, libc::EINVAL);
    }
}
