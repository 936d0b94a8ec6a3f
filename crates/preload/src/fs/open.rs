//! open, openat, creat and their 64 and fortified (__open_2) variants; close.

use super::by_path;
use crate::{call, install, real, reentrant, stdio, tracked, umask, unregister};
use libc::{c_char, c_int, mode_t};

pub(crate) fn gust_open(p: &str, flags: c_int, mode: mode_t) -> Result<c_int, i32> {
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(libc::EOPNOTSUPP);
    }
    let cflags = flags
        & !(libc::O_CLOEXEC
            | libc::O_PATH
            | libc::O_NOCTTY
            | libc::O_NONBLOCK
            | libc::O_DIRECT
            | libc::O_NOATIME
            | libc::O_LARGEFILE);
    // Deferred: a small file created, written and closed costs one request
    // (gust-client, inline.rs; docs/SEMANTICS.md).
    let cfd = call(|c| c.open_deferred(p, cflags, mode & !umask() & 0o7777))?;
    install(cfd, flags & libc::O_CLOEXEC != 0)
}

unsafe fn open_any(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
    real: impl FnOnce(*const c_char) -> c_int,
) -> c_int {
    by_path(dirfd, path, real, |p| gust_open(&p, flags, mode))
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    open_any(libc::AT_FDCWD, path, flags, mode, |p| real::open(p, flags, mode))
}
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    open_any(libc::AT_FDCWD, path, flags, mode, |p| real::open64(p, flags, mode))
}
#[no_mangle]
pub unsafe extern "C" fn openat(d: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    open_any(d, path, flags, mode, |p| real::openat(d, p, flags, mode))
}
#[no_mangle]
pub unsafe extern "C" fn openat64(d: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    open_any(d, path, flags, mode, |p| real::openat64(d, p, flags, mode))
}
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    open_any(libc::AT_FDCWD, path, flags, 0, |p| real::__open_2(p, flags))
}
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    open_any(libc::AT_FDCWD, path, flags, 0, |p| real::__open64_2(p, flags))
}
#[no_mangle]
pub unsafe extern "C" fn __openat_2(d: c_int, path: *const c_char, flags: c_int) -> c_int {
    open_any(d, path, flags, 0, |p| real::__openat_2(d, p, flags))
}
#[no_mangle]
pub unsafe extern "C" fn __openat64_2(d: c_int, path: *const c_char, flags: c_int) -> c_int {
    open_any(d, path, flags, 0, |p| real::__openat64_2(d, p, flags))
}
#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    let f = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    open_any(libc::AT_FDCWD, path, f, mode, |p| real::creat(p, mode))
}
#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    let f = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;
    open_any(libc::AT_FDCWD, path, f, mode, |p| real::creat64(p, mode))
}

/// Closes one of our descriptors: the client's, then the placeholder.
pub(crate) unsafe fn close_ours(fd: c_int) -> c_int {
    stdio::std_before_change(fd);
    crate::dir::forget_fd(fd);
    // close reports what sending a deferred create met (EEXIST for O_EXCL, ...).
    let settled = match unregister(fd) {
        Some(cfd) => call(|c| c.close(cfd)),
        None => Ok(()),
    };
    let r = real::close(fd);
    stdio::std_sync(fd);
    match settled {
        Err(e) if r == 0 => {
            crate::set_errno(e);
            -1
        }
        _ => r,
    }
}

/// Goes by `tracked`, not `ours`: a descriptor inherited across exec and never used
/// is closed without being re-opened first.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if reentrant() || !tracked(fd) {
        return real::close(fd);
    }
    close_ours(fd)
}
