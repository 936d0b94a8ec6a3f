//! Interposed functions of the descriptor and path API (open ... mmap).
//!
//! Every function starts the same way: inside the library ([`reentrant`]) or on
//! something that is not GustFS, it calls libc with the same arguments and returns
//! its answer unchanged.

#![allow(clippy::missing_safety_doc)]

use crate::{
    call, external, install, ours, real, reentrant, ret, route, route_cwd, set_errno, stdio, tracked, umask,
    unregister, Route,
};
use gust_client::{Kind, Stat};
use libc::{c_char, c_int, c_uint, c_ulong, c_void, mode_t, off64_t, off_t, size_t, ssize_t};
use std::ffi::CStr;

/// Symlinks realpath follows before ELOOP.
const SYMLINK_HOPS_MAX: u32 = 40;

unsafe fn buf_mut<'a>(b: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || b.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(b.cast(), n)
    }
}

unsafe fn buf<'a>(b: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || b.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(b.cast(), n)
    }
}

/// The common shape of a path call: libc for foreign paths, `gust` for ours.
unsafe fn by_path<T: From<i8>>(
    dirfd: c_int,
    path: *const c_char,
    real: impl FnOnce(*const c_char) -> T,
    gust: impl FnOnce(String) -> Result<T, i32>,
) -> T {
    if reentrant() {
        return real(path);
    }
    match route(dirfd, path) {
        Ok(Route::Real) => real(path),
        Ok(Route::RealAbs(c)) => real(c.as_ptr()),
        Ok(Route::Ours(p)) => ret(gust(p)),
        Err(e) => {
            set_errno(e);
            T::from(-1)
        }
    }
}

pub(crate) unsafe fn fill_stat(s: &Stat, out: *mut libc::stat) {
    *out = s.to_libc_stat();
}

pub(crate) unsafe fn fill_stat64(s: &Stat, out: *mut libc::stat64) {
    *out = s.to_libc_stat64();
}

unsafe fn fill_statx(s: &Stat, out: *mut libc::statx) {
    let mut st: libc::statx = std::mem::zeroed();
    st.stx_mask = libc::STATX_BASIC_STATS;
    st.stx_blksize = s.blksize.min(1 << 30) as u32;
    st.stx_nlink = s.nlink;
    st.stx_uid = libc::geteuid();
    st.stx_gid = libc::getegid();
    st.stx_mode = s.st_mode() as u16;
    st.stx_ino = s.ino;
    st.stx_size = s.size;
    st.stx_blocks = s.blocks;
    let ts = |ns: i64| {
        let (a, b) = gust_client::split_ns(ns);
        let mut t: libc::statx_timestamp = std::mem::zeroed();
        t.tv_sec = a;
        t.tv_nsec = b as u32;
        t
    };
    st.stx_atime = ts(s.atime_ns);
    st.stx_mtime = ts(s.mtime_ns);
    st.stx_ctime = ts(s.ctime_ns);
    st.stx_dev_major = 0;
    st.stx_dev_minor = crate::GUST_DEV as u32;
    *out = st;
}

fn stat_path(p: &str, follow: bool) -> Result<Stat, i32> {
    call(|c| if follow { c.stat(p) } else { c.lstat(p) })
}

fn fd_path(cfd: i32) -> Result<String, i32> {
    call(|c| c.fd_info(cfd)).map(|(p, _)| p)
}

// ----- open / close -----------------------------------------------------------------

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
    let cfd = call(|c| c.open(p, cflags, mode & !umask() & 0o7777))?;
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
    if let Some(cfd) = unregister(fd) {
        let _ = call(|c| c.close(cfd));
    }
    let r = real::close(fd);
    stdio::std_sync(fd);
    r
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if reentrant() || !tracked(fd) {
        return real::close(fd);
    }
    close_ours(fd)
}

// ----- data ---------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    if reentrant() {
        return real::read(fd, b, n);
    }
    match ours(fd) {
        None => real::read(fd, b, n),
        Some(c) => ret(call(|cl| cl.read(c, buf_mut(b, n))).map(|x| x as ssize_t)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    if reentrant() {
        return real::write(fd, b, n);
    }
    match ours(fd) {
        None => real::write(fd, b, n),
        Some(c) => ret(call(|cl| cl.write(c, buf(b, n))).map(|x| x as ssize_t)),
    }
}

unsafe fn gust_pread(c: i32, b: *mut c_void, n: size_t, o: i64) -> ssize_t {
    if o < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    ret(call(|cl| cl.pread(c, buf_mut(b, n), o as u64)).map(|x| x as ssize_t))
}

unsafe fn gust_pwrite(c: i32, b: *const c_void, n: size_t, o: i64) -> ssize_t {
    if o < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    ret(call(|cl| cl.pwrite(c, buf(b, n), o as u64)).map(|x| x as ssize_t))
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::pread(fd, b, n, o),
        Some(c) => gust_pread(c, b, n, o),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, b: *mut c_void, n: size_t, o: off64_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::pread64(fd, b, n, o),
        Some(c) => gust_pread(c, b, n, o),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::pwrite(fd, b, n, o),
        Some(c) => gust_pwrite(c, b, n, o),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, b: *const c_void, n: size_t, o: off64_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::pwrite64(fd, b, n, o),
        Some(c) => gust_pwrite(c, b, n, o),
    }
}

unsafe fn iov_slices<'a>(v: *const libc::iovec, n: c_int) -> Result<&'a [libc::iovec], i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    Ok(if n == 0 { &[] } else { std::slice::from_raw_parts(v, n as usize) })
}

/// readv/preadv: one client read into a bounce buffer, then scattered.
unsafe fn gust_readv(c: i32, v: *const libc::iovec, n: c_int, off: Option<i64>) -> ssize_t {
    let r = (|| {
        let iov = iov_slices(v, n)?;
        let total: usize = iov.iter().map(|x| x.iov_len).sum();
        let mut tmp = vec![0u8; total];
        let got = match off {
            Some(o) if o < 0 => return Err(libc::EINVAL),
            Some(o) => call(|cl| cl.pread(c, &mut tmp, o as u64))?,
            None => call(|cl| cl.read(c, &mut tmp))?,
        };
        let mut pos = 0;
        for x in iov {
            if pos >= got {
                break;
            }
            let k = x.iov_len.min(got - pos);
            std::ptr::copy_nonoverlapping(tmp.as_ptr().add(pos), x.iov_base.cast::<u8>(), k);
            pos += k;
        }
        Ok(got as ssize_t)
    })();
    ret(r)
}

/// writev/pwritev: gathered into one buffer so the write is one client call.
unsafe fn gust_writev(c: i32, v: *const libc::iovec, n: c_int, off: Option<i64>) -> ssize_t {
    let r = (|| {
        let iov = iov_slices(v, n)?;
        let mut tmp = Vec::with_capacity(iov.iter().map(|x| x.iov_len).sum());
        for x in iov {
            tmp.extend_from_slice(buf(x.iov_base, x.iov_len));
        }
        let n = match off {
            Some(o) if o < 0 => return Err(libc::EINVAL),
            Some(o) => call(|cl| cl.pwrite(c, &tmp, o as u64))?,
            None => call(|cl| cl.write(c, &tmp))?,
        };
        Ok(n as ssize_t)
    })();
    ret(r)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::readv(fd, v, n),
        Some(c) => gust_readv(c, v, n, None),
    }
}
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::writev(fd, v, n),
        Some(c) => gust_writev(c, v, n, None),
    }
}
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::preadv(fd, v, n, o),
        Some(c) => gust_readv(c, v, n, Some(o)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, v: *const libc::iovec, n: c_int, o: off64_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::preadv64(fd, v, n, o),
        Some(c) => gust_readv(c, v, n, Some(o)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::pwritev(fd, v, n, o),
        Some(c) => gust_writev(c, v, n, Some(o)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, v: *const libc::iovec, n: c_int, o: off64_t) -> ssize_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::pwritev64(fd, v, n, o),
        Some(c) => gust_writev(c, v, n, Some(o)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, o: off_t, w: c_int) -> off_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::lseek(fd, o, w),
        Some(c) => ret(call(|cl| cl.lseek(c, o, w)).map(|x| x as off_t)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, o: off64_t, w: c_int) -> off64_t {
    match if reentrant() { None } else { ours(fd) } {
        None => real::lseek64(fd, o, w),
        Some(c) => ret(call(|cl| cl.lseek(c, o, w)).map(|x| x as off64_t)),
    }
}

// ----- stat family ------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn stat(p: *const c_char, b: *mut libc::stat) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::stat(p, b), |p| stat_path(&p, true).map(|s| fill_stat(&s, b)).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn stat64(p: *const c_char, b: *mut libc::stat64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::stat64(p, b), |p| stat_path(&p, true).map(|s| fill_stat64(&s, b)).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn lstat(p: *const c_char, b: *mut libc::stat) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lstat(p, b), |p| stat_path(&p, false).map(|s| fill_stat(&s, b)).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn lstat64(p: *const c_char, b: *mut libc::stat64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lstat64(p, b), |p| stat_path(&p, false).map(|s| fill_stat64(&s, b)).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, b: *mut libc::stat) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fstat(fd, b),
        Some(c) => ret(call(|cl| cl.fstat(c)).map(|s| fill_stat(&s, b)).map(|_| 0)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, b: *mut libc::stat64) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fstat64(fd, b),
        Some(c) => ret(call(|cl| cl.fstat(c)).map(|s| fill_stat64(&s, b)).map(|_| 0)),
    }
}

/// fstatat/statx: AT_EMPTY_PATH on our descriptor, else by path.
unsafe fn at_stat(d: c_int, p: *const c_char, flags: c_int) -> Option<Result<Stat, i32>> {
    if reentrant() {
        return None;
    }
    if flags & libc::AT_EMPTY_PATH != 0 && (p.is_null() || *p == 0) {
        return ours(d).map(|c| call(|cl| cl.fstat(c)));
    }
    match route(d, p) {
        Ok(Route::Ours(path)) => Some(stat_path(&path, flags & libc::AT_SYMLINK_NOFOLLOW == 0)),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    }
}

unsafe fn abs_or(d: c_int, p: *const c_char, keep: &mut Option<std::ffi::CString>) -> (c_int, *const c_char) {
    // A relative path seen from a GustFS working directory that leaves GustFS.
    if !reentrant() {
        if let Ok(Route::RealAbs(c)) = route(d, p) {
            *keep = Some(c);
            return (libc::AT_FDCWD, keep.as_ref().unwrap().as_ptr());
        }
    }
    (d, p)
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(d: c_int, p: *const c_char, b: *mut libc::stat, f: c_int) -> c_int {
    match at_stat(d, p, f) {
        Some(r) => ret(r.map(|s| fill_stat(&s, b)).map(|_| 0)),
        None => {
            let mut k = None;
            let (d, p) = abs_or(d, p, &mut k);
            real::fstatat(d, p, b, f)
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatat64(d: c_int, p: *const c_char, b: *mut libc::stat64, f: c_int) -> c_int {
    match at_stat(d, p, f) {
        Some(r) => ret(r.map(|s| fill_stat64(&s, b)).map(|_| 0)),
        None => {
            let mut k = None;
            let (d, p) = abs_or(d, p, &mut k);
            real::fstatat64(d, p, b, f)
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn statx(d: c_int, p: *const c_char, f: c_int, m: c_uint, b: *mut libc::statx) -> c_int {
    match at_stat(d, p, f) {
        Some(r) => ret(r.map(|s| fill_statx(&s, b)).map(|_| 0)),
        None => {
            let mut k = None;
            let (d, p) = abs_or(d, p, &mut k);
            real::statx(d, p, f, m, b)
        }
    }
}

// glibc before 2.33 compiled stat() into calls of these; old binaries still use them.
// The struct layout for _STAT_VER_LINUX is `struct stat`.
#[no_mangle]
pub unsafe extern "C" fn __xstat(_v: c_int, p: *const c_char, b: *mut libc::stat) -> c_int {
    stat(p, b)
}
#[no_mangle]
pub unsafe extern "C" fn __xstat64(_v: c_int, p: *const c_char, b: *mut libc::stat64) -> c_int {
    stat64(p, b)
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat(_v: c_int, p: *const c_char, b: *mut libc::stat) -> c_int {
    lstat(p, b)
}
#[no_mangle]
pub unsafe extern "C" fn __lxstat64(_v: c_int, p: *const c_char, b: *mut libc::stat64) -> c_int {
    lstat64(p, b)
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_v: c_int, fd: c_int, b: *mut libc::stat) -> c_int {
    fstat(fd, b)
}
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(_v: c_int, fd: c_int, b: *mut libc::stat64) -> c_int {
    fstat64(fd, b)
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat(_v: c_int, d: c_int, p: *const c_char, b: *mut libc::stat, f: c_int) -> c_int {
    fstatat(d, p, b, f)
}
#[no_mangle]
pub unsafe extern "C" fn __fxstatat64(_v: c_int, d: c_int, p: *const c_char, b: *mut libc::stat64, f: c_int) -> c_int {
    fstatat64(d, p, b, f)
}

fn gust_access(p: &str, mode: c_int, follow: bool) -> Result<c_int, i32> {
    if follow {
        call(|c| c.access(p, mode)).map(|_| 0)
    } else {
        stat_path(p, false).map(|_| 0)
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(p: *const c_char, m: c_int) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::access(p, m), |p| gust_access(&p, m, true))
}
#[no_mangle]
pub unsafe extern "C" fn euidaccess(p: *const c_char, m: c_int) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::euidaccess(p, m), |p| gust_access(&p, m, true))
}
#[no_mangle]
pub unsafe extern "C" fn eaccess(p: *const c_char, m: c_int) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::eaccess(p, m), |p| gust_access(&p, m, true))
}
#[no_mangle]
pub unsafe extern "C" fn faccessat(d: c_int, p: *const c_char, m: c_int, f: c_int) -> c_int {
    by_path(d, p, |p| real::faccessat(d, p, m, f), |p| gust_access(&p, m, f & libc::AT_SYMLINK_NOFOLLOW == 0))
}

// ----- namespace ----------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn mkdir(p: *const c_char, m: mode_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::mkdir(p, m), |p| call(|c| c.mkdir(&p, m & !umask())).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn mkdirat(d: c_int, p: *const c_char, m: mode_t) -> c_int {
    by_path(d, p, |p| real::mkdirat(d, p, m), |p| call(|c| c.mkdir(&p, m & !umask())).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn rmdir(p: *const c_char) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::rmdir(p), |p| call(|c| c.rmdir(&p)).map(|_| 0))
}

fn gust_unlink(p: &str) -> Result<c_int, i32> {
    call(|c| {
        match c.unlink(p) {
            // Linux says EISDIR for unlink of a directory.
            Err(gust_client::Errno(libc::EPERM)) if c.lstat(p).map(|s| s.kind == Kind::Dir).unwrap_or(false) => {
                Err(gust_client::Errno(libc::EISDIR))
            }
            r => r,
        }
    })
    .map(|_| 0)
}

#[no_mangle]
pub unsafe extern "C" fn unlink(p: *const c_char) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::unlink(p), |p| gust_unlink(&p))
}
#[no_mangle]
pub unsafe extern "C" fn unlinkat(d: c_int, p: *const c_char, f: c_int) -> c_int {
    by_path(
        d,
        p,
        |p| real::unlinkat(d, p, f),
        |p| if f & libc::AT_REMOVEDIR != 0 { call(|c| c.rmdir(&p)).map(|_| 0) } else { gust_unlink(&p) },
    )
}

/// Routes both names of a rename or link: both ours, both foreign, or EXDEV.
unsafe fn route2(da: c_int, a: *const c_char, db: c_int, b: *const c_char) -> Result<Option<(String, String)>, i32> {
    if reentrant() {
        return Ok(None);
    }
    match (route(da, a)?, route(db, b)?) {
        (Route::Ours(x), Route::Ours(y)) => Ok(Some((x, y))),
        (Route::Ours(_), _) | (_, Route::Ours(_)) => Err(libc::EXDEV),
        _ => Ok(None),
    }
}

fn gust_rename(a: &str, b: &str, noreplace: bool) -> Result<c_int, i32> {
    call(|c| {
        let from = c.lstat(a)?;
        match c.lstat(b) {
            Ok(_) if noreplace => return Err(gust_client::Errno(libc::EEXIST)),
            Ok(to) if to.kind == Kind::Dir && from.kind != Kind::Dir => return Err(gust_client::Errno(libc::EISDIR)),
            _ => {}
        }
        c.rename(a, b)
    })
    .map(|_| 0)
}

unsafe fn rename_any(da: c_int, a: *const c_char, db: c_int, b: *const c_char, flags: c_uint) -> c_int {
    match route2(da, a, db, b) {
        Err(e) => {
            set_errno(e);
            -1
        }
        Ok(Some((x, y))) => {
            if flags & !libc::RENAME_NOREPLACE != 0 {
                set_errno(libc::EINVAL);
                return -1;
            }
            ret(gust_rename(&x, &y, flags & libc::RENAME_NOREPLACE != 0))
        }
        Ok(None) => {
            let (mut ka, mut kb) = (None, None);
            let (da, a) = abs_or(da, a, &mut ka);
            let (db, b) = abs_or(db, b, &mut kb);
            if flags == 0 {
                real::renameat(da, a, db, b)
            } else {
                real::renameat2(da, a, db, b, flags)
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rename(a: *const c_char, b: *const c_char) -> c_int {
    if reentrant() {
        return real::rename(a, b);
    }
    match route2(libc::AT_FDCWD, a, libc::AT_FDCWD, b) {
        Ok(None) if crate::vcwd().is_none() => real::rename(a, b),
        _ => rename_any(libc::AT_FDCWD, a, libc::AT_FDCWD, b, 0),
    }
}
#[no_mangle]
pub unsafe extern "C" fn renameat(da: c_int, a: *const c_char, db: c_int, b: *const c_char) -> c_int {
    rename_any(da, a, db, b, 0)
}
#[no_mangle]
pub unsafe extern "C" fn renameat2(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_uint) -> c_int {
    rename_any(da, a, db, b, f)
}

/// Hard links are not supported by GustFS: EPERM, as Linux says for such file systems.
#[no_mangle]
pub unsafe extern "C" fn link(a: *const c_char, b: *const c_char) -> c_int {
    match route2(libc::AT_FDCWD, a, libc::AT_FDCWD, b) {
        Ok(None) => real::link(a, b),
        Ok(Some(_)) => ret(Err(libc::EPERM)),
        Err(e) => ret(Err(e)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn linkat(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_int) -> c_int {
    match route2(da, a, db, b) {
        Ok(None) => real::linkat(da, a, db, b, f),
        Ok(Some(_)) => ret(Err(libc::EPERM)),
        Err(e) => ret(Err(e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(p: *const c_char, l: off_t) -> c_int {
    by_path(
        libc::AT_FDCWD,
        p,
        |p| real::truncate(p, l),
        |p| if l < 0 { Err(libc::EINVAL) } else { call(|c| c.truncate(&p, l as u64)).map(|_| 0) },
    )
}
#[no_mangle]
pub unsafe extern "C" fn truncate64(p: *const c_char, l: off64_t) -> c_int {
    by_path(
        libc::AT_FDCWD,
        p,
        |p| real::truncate64(p, l),
        |p| if l < 0 { Err(libc::EINVAL) } else { call(|c| c.truncate(&p, l as u64)).map(|_| 0) },
    )
}
fn gust_ftruncate(c: i32, l: i64) -> c_int {
    ret(if l < 0 { Err(libc::EINVAL) } else { call(|cl| cl.ftruncate(c, l as u64)).map(|_| 0) })
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, l: off_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::ftruncate(fd, l),
        Some(c) => gust_ftruncate(c, l),
    }
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, l: off64_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::ftruncate64(fd, l),
        Some(c) => gust_ftruncate(c, l),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fsync(fd),
        Some(c) => ret(call(|cl| cl.fsync(c)).map(|_| 0)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fdatasync(fd),
        Some(c) => ret(call(|cl| cl.fsync(c)).map(|_| 0)),
    }
}

// ----- descriptors ----------------------------------------------------------------

/// fcntl on our descriptor. Descriptor flags live on the placeholder (so
/// close-on-exec is the kernel's); status flags are the open flags; record locks
/// are not implemented (no distributed locks) and say so with ENOLCK.
unsafe fn gust_fcntl(fd: c_int, c: i32, cmd: c_int, arg: usize) -> c_int {
    match cmd {
        libc::F_GETFD | libc::F_SETFD => real::fcntl(fd, cmd, arg),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let nfd = real::fcntl(fd, cmd, arg);
            if nfd < 0 {
                return nfd;
            }
            dup_into(c, nfd)
        }
        libc::F_GETFL => ret(call(|cl| cl.fd_info(c)).map(|(_, f)| f & !libc::O_CLOEXEC | libc::O_LARGEFILE)),
        libc::F_SETFL => {
            let (_, f) = match call(|cl| cl.fd_info(c)) {
                Ok(x) => x,
                Err(e) => return ret(Err(e)),
            };
            // Only O_APPEND changes what GustFS does, and it cannot change after open.
            if (f ^ arg as c_int) & libc::O_APPEND != 0 {
                ret(Err(libc::EINVAL))
            } else {
                0
            }
        }
        libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
            ret(Err(libc::ENOLCK))
        }
        _ => ret(Err(libc::EINVAL)),
    }
}

/// Registers kernel descriptor `nfd` (already a copy of a placeholder) as a dup of `c`.
unsafe fn dup_into(c: i32, nfd: c_int) -> c_int {
    if nfd as usize >= crate::FD_MAX {
        real::close(nfd);
        return ret(Err(libc::EMFILE));
    }
    match call(|cl| cl.dup(c)) {
        Ok(nc) => {
            crate::register(nfd, nc);
            stdio::std_sync(nfd);
            nfd
        }
        Err(e) => {
            real::close(nfd);
            ret(Err(e))
        }
    }
}

/// A socket the client core opens is moved above [`crate::high_fd_base`].
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let fd = real::socket(domain, ty, proto);
    if fd < 0 || !reentrant() {
        return fd;
    }
    let high = real::fcntl(fd, libc::F_DUPFD_CLOEXEC, crate::high_fd_base() as usize);
    if high < 0 {
        return fd;
    }
    real::close(fd);
    high
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    if reentrant() {
        // The client core's socket clones (try_clone) stay high as well.
        let arg = if cmd == libc::F_DUPFD_CLOEXEC { arg.max(crate::high_fd_base() as usize) } else { arg };
        return real::fcntl(fd, cmd, arg);
    }
    match ours(fd) {
        None => real::fcntl(fd, cmd, arg),
        Some(c) => gust_fcntl(fd, c, cmd, arg),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fcntl64(fd, cmd, arg),
        Some(c) => gust_fcntl(fd, c, cmd, arg),
    }
}
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::ioctl(fd, req, arg),
        Some(_) => ret(Err(libc::ENOTTY)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::flock(fd, op),
        Some(_) => ret(Err(libc::ENOLCK)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, op: c_int, l: off_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::lockf(fd, op, l),
        Some(_) => ret(Err(libc::ENOLCK)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, op: c_int, l: off64_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::lockf64(fd, op, l),
        Some(_) => ret(Err(libc::ENOLCK)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::isatty(fd),
        Some(_) => {
            set_errno(libc::ENOTTY);
            0
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::dup(fd),
        Some(c) => {
            let nfd = real::dup(fd);
            if nfd < 0 {
                return nfd;
            }
            dup_into(c, nfd)
        }
    }
}

/// dup2/dup3: `new` is replaced atomically by the kernel; our bookkeeping follows.
unsafe fn dup_onto(old: c_int, new: c_int, flags: c_int, three: bool) -> c_int {
    let src = ours(old);
    if src.is_none() && !tracked(new) {
        return if three { real::dup3(old, new, flags) } else { real::dup2(old, new) };
    }
    if old == new {
        return if three { ret(Err(libc::EINVAL)) } else { new };
    }
    stdio::std_before_change(new);
    let r = if three { real::dup3(old, new, flags) } else { real::dup2(old, new) };
    if r < 0 {
        return r;
    }
    crate::dir::forget_fd(new);
    if let Some(prev) = unregister(new) {
        let _ = call(|cl| cl.close(prev));
    }
    if let Some(c) = src {
        match call(|cl| cl.dup(c)) {
            Ok(nc) => crate::register(new, nc),
            Err(e) => {
                real::close(new);
                stdio::std_sync(new);
                return ret(Err(e));
            }
        }
    }
    stdio::std_sync(new);
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if reentrant() {
        return real::dup2(old, new);
    }
    dup_onto(old, new, 0, false)
}
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, f: c_int) -> c_int {
    if reentrant() {
        return real::dup3(old, new, f);
    }
    dup_onto(old, new, f, true)
}

// ----- working directory -----------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn chdir(p: *const c_char) -> c_int {
    if reentrant() {
        return real::chdir(p);
    }
    match route_cwd(p) {
        Ok(Route::Ours(i)) => ret(stat_path(&i, true).and_then(|s| {
            if s.kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            crate::set_vcwd(Some(external(&i)));
            Ok(0)
        })),
        Ok(r) => {
            let rc = match &r {
                Route::RealAbs(c) => real::chdir(c.as_ptr()),
                _ => real::chdir(p),
            };
            if rc == 0 && crate::vcwd().is_some() {
                crate::set_vcwd(None);
            }
            rc
        }
        Err(e) => ret(Err(e)),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => {
            let rc = real::fchdir(fd);
            if rc == 0 && !reentrant() && crate::vcwd().is_some() {
                crate::set_vcwd(None);
            }
            rc
        }
        Some(c) => ret(call(|cl| cl.fstat(c)).and_then(|s| {
            if s.kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            crate::set_vcwd(Some(external(&fd_path(c)?)));
            Ok(0)
        })),
    }
}

/// Copies `s` into a caller buffer, or a malloc'd one when `b` is NULL (glibc's
/// extension, used by getcwd(NULL, 0) and realpath(p, NULL)).
pub(crate) unsafe fn out_str(s: &str, b: *mut c_char, n: size_t, alloc_min: bool) -> *mut c_char {
    let need = s.len() + 1;
    let (dst, cap) = if b.is_null() {
        let cap = if alloc_min || n == 0 { need } else { n };
        if cap < need {
            set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        let m = libc::malloc(cap) as *mut c_char;
        if m.is_null() {
            set_errno(libc::ENOMEM);
            return m;
        }
        (m, cap)
    } else {
        (b, n)
    };
    if cap < need {
        set_errno(libc::ERANGE);
        return std::ptr::null_mut();
    }
    std::ptr::copy_nonoverlapping(s.as_ptr(), dst.cast::<u8>(), s.len());
    *dst.add(s.len()) = 0;
    dst
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(b: *mut c_char, n: size_t) -> *mut c_char {
    if reentrant() {
        return real::getcwd(b, n);
    }
    match crate::vcwd() {
        None => real::getcwd(b, n),
        Some(c) => {
            if !b.is_null() && n == 0 {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
            out_str(&c, b, n, false)
        }
    }
}

// ----- links, attributes ----------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn symlink(t: *const c_char, l: *const c_char) -> c_int {
    by_path(libc::AT_FDCWD, l, |l| real::symlink(t, l), |l| gust_symlink(t, &l))
}
#[no_mangle]
pub unsafe extern "C" fn symlinkat(t: *const c_char, d: c_int, l: *const c_char) -> c_int {
    by_path(d, l, |l| real::symlinkat(t, d, l), |l| gust_symlink(t, &l))
}
unsafe fn gust_symlink(t: *const c_char, l: &str) -> Result<c_int, i32> {
    if t.is_null() {
        return Err(libc::EFAULT);
    }
    let t = CStr::from_ptr(t).to_str().map_err(|_| libc::EINVAL)?;
    call(|c| c.symlink(t, l)).map(|_| 0)
}
unsafe fn gust_readlink(p: &str, b: *mut c_char, n: size_t) -> Result<ssize_t, i32> {
    let t = call(|c| c.readlink(p))?;
    let k = t.len().min(n);
    std::ptr::copy_nonoverlapping(t.as_ptr(), b.cast::<u8>(), k);
    Ok(k as ssize_t)
}
#[no_mangle]
pub unsafe extern "C" fn readlink(p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t {
    by_path(libc::AT_FDCWD, p, |p| real::readlink(p, b, n), |p| gust_readlink(&p, b, n))
}
#[no_mangle]
pub unsafe extern "C" fn readlinkat(d: c_int, p: *const c_char, b: *mut c_char, n: size_t) -> ssize_t {
    by_path(d, p, |p| real::readlinkat(d, p, b, n), |p| gust_readlink(&p, b, n))
}

#[no_mangle]
pub unsafe extern "C" fn chmod(p: *const c_char, m: mode_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::chmod(p, m), |p| call(|c| c.chmod(&p, m)).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn fchmodat(d: c_int, p: *const c_char, m: mode_t, f: c_int) -> c_int {
    by_path(
        d,
        p,
        |p| real::fchmodat(d, p, m, f),
        |p| {
            if f & libc::AT_SYMLINK_NOFOLLOW != 0 {
                Err(libc::EOPNOTSUPP)
            } else {
                call(|c| c.chmod(&p, m)).map(|_| 0)
            }
        },
    )
}
#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, m: mode_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fchmod(fd, m),
        Some(c) => ret(fd_path(c).and_then(|p| call(|cl| cl.chmod(&p, m))).map(|_| 0)),
    }
}

// One user owns an instance; ownership changes are accepted and not recorded.
#[no_mangle]
pub unsafe extern "C" fn chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::chown(p, u, g), |p| stat_path(&p, true).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lchown(p, u, g), |p| stat_path(&p, false).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn fchownat(d: c_int, p: *const c_char, u: libc::uid_t, g: libc::gid_t, f: c_int) -> c_int {
    if !reentrant() && f & libc::AT_EMPTY_PATH != 0 && (p.is_null() || *p == 0) && ours(d).is_some() {
        return 0;
    }
    by_path(d, p, |p| real::fchownat(d, p, u, g, f), |p| stat_path(&p, f & libc::AT_SYMLINK_NOFOLLOW == 0).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fchown(fd, u, g),
        Some(_) => 0,
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// (atime, mtime) from a utimensat-style array: NULL means now, UTIME_OMIT None.
unsafe fn times_ts(t: *const libc::timespec) -> Result<(Option<i64>, Option<i64>), i32> {
    if t.is_null() {
        let n = now_ns();
        return Ok((Some(n), Some(n)));
    }
    let one = |x: &libc::timespec| -> Result<Option<i64>, i32> {
        match x.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now_ns())),
            ns if (0..1_000_000_000).contains(&ns) => Ok(Some(x.tv_sec * 1_000_000_000 + ns)),
            _ => Err(libc::EINVAL),
        }
    };
    Ok((one(&*t)?, one(&*t.add(1))?))
}

unsafe fn times_tv(t: *const libc::timeval) -> Result<(Option<i64>, Option<i64>), i32> {
    if t.is_null() {
        let n = now_ns();
        return Ok((Some(n), Some(n)));
    }
    let one = |x: &libc::timeval| Some(x.tv_sec * 1_000_000_000 + x.tv_usec * 1000);
    Ok((one(&*t), one(&*t.add(1))))
}

fn gust_utimens(p: &str, t: Result<(Option<i64>, Option<i64>), i32>, follow: bool) -> Result<c_int, i32> {
    let (a, m) = t?;
    call(|c| c.utimens(p, a, m, follow)).map(|_| 0)
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(d: c_int, p: *const c_char, t: *const libc::timespec, f: c_int) -> c_int {
    if p.is_null() {
        // Linux: utimensat(fd, NULL, ...) is futimens(fd, ...).
        return futimens(d, t);
    }
    by_path(
        d,
        p,
        |p| real::utimensat(d, p, t, f),
        |p| gust_utimens(&p, times_ts(t), f & libc::AT_SYMLINK_NOFOLLOW == 0),
    )
}
#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, t: *const libc::timespec) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::futimens(fd, t),
        Some(c) => ret(fd_path(c).and_then(|p| gust_utimens(&p, times_ts(t), true))),
    }
}
#[no_mangle]
pub unsafe extern "C" fn utimes(p: *const c_char, t: *const libc::timeval) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::utimes(p, t), |p| gust_utimens(&p, times_tv(t), true))
}
#[no_mangle]
pub unsafe extern "C" fn lutimes(p: *const c_char, t: *const libc::timeval) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lutimes(p, t), |p| gust_utimens(&p, times_tv(t), false))
}
#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, t: *const libc::timeval) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::futimes(fd, t),
        Some(c) => ret(fd_path(c).and_then(|p| gust_utimens(&p, times_tv(t), true))),
    }
}
#[no_mangle]
pub unsafe extern "C" fn utime(p: *const c_char, t: *const libc::utimbuf) -> c_int {
    by_path(
        libc::AT_FDCWD,
        p,
        |p| real::utime(p, t),
        |p| {
            let tt = if t.is_null() {
                let n = now_ns();
                Ok((Some(n), Some(n)))
            } else {
                Ok((Some((*t).actime * 1_000_000_000), Some((*t).modtime * 1_000_000_000)))
            };
            gust_utimens(&p, tt, true)
        },
    )
}

// xattrs: not supported; ENOTSUP is what cp, ls and Python's shutil expect then.
macro_rules! xattr_path {
    ($name:ident, ($($a:ident : $t:ty),*), $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: *const c_char, $($a: $t),*) -> $r {
            by_path(libc::AT_FDCWD, p, |p| real::$name(p, $($a),*), |_| Err(libc::ENOTSUP))
        }
    };
}
macro_rules! xattr_fd {
    ($name:ident, ($($a:ident : $t:ty),*), $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> $r {
            match if reentrant() { None } else { ours(fd) } {
                None => real::$name(fd, $($a),*),
                Some(_) => ret(Err(libc::ENOTSUP)),
            }
        }
    };
}
xattr_path!(getxattr, (n: *const c_char, v: *mut c_void, s: size_t), ssize_t);
xattr_path!(lgetxattr, (n: *const c_char, v: *mut c_void, s: size_t), ssize_t);
xattr_path!(listxattr, (l: *mut c_char, s: size_t), ssize_t);
xattr_path!(llistxattr, (l: *mut c_char, s: size_t), ssize_t);
xattr_path!(setxattr, (n: *const c_char, v: *const c_void, s: size_t, f: c_int), c_int);
xattr_path!(lsetxattr, (n: *const c_char, v: *const c_void, s: size_t, f: c_int), c_int);
xattr_path!(removexattr, (n: *const c_char), c_int);
xattr_path!(lremovexattr, (n: *const c_char), c_int);
xattr_fd!(fgetxattr, (n: *const c_char, v: *mut c_void, s: size_t), ssize_t);
xattr_fd!(flistxattr, (l: *mut c_char, s: size_t), ssize_t);
xattr_fd!(fsetxattr, (n: *const c_char, v: *const c_void, s: size_t, f: c_int), c_int);
xattr_fd!(fremovexattr, (n: *const c_char), c_int);

// ----- file system ------------------------------------------------------------------

use gust_client::{GUST_MAGIC, STATFS_BLOCK_BYTES};

macro_rules! fill_statfs_fn {
    ($name:ident, $t:ty) => {
        unsafe fn $name(out: *mut $t) -> Result<c_int, i32> {
            let s = call(|c| c.statfs())?;
            let mut b: $t = std::mem::zeroed();
            b.f_type = GUST_MAGIC as _;
            b.f_bsize = STATFS_BLOCK_BYTES as _;
            b.f_frsize = STATFS_BLOCK_BYTES as _;
            b.f_blocks = (s.total_bytes / STATFS_BLOCK_BYTES) as _;
            b.f_bfree = (s.free_bytes / STATFS_BLOCK_BYTES) as _;
            b.f_bavail = (s.avail_bytes / STATFS_BLOCK_BYTES) as _;
            b.f_files = (s.files + (1 << 32)) as _;
            b.f_ffree = (1u64 << 32) as _;
            b.f_namelen = 255;
            *out = b;
            Ok(0)
        }
    };
}
fill_statfs_fn!(fill_statfs, libc::statfs);
fill_statfs_fn!(fill_statfs64, libc::statfs64);

unsafe fn fill_statvfs(out: *mut libc::statvfs) -> Result<c_int, i32> {
    *out = call(|c| c.statfs())?.to_libc_statvfs();
    Ok(0)
}

unsafe fn fill_statvfs64(out: *mut libc::statvfs64) -> Result<c_int, i32> {
    *out = call(|c| c.statfs())?.to_libc_statvfs64();
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn statfs(p: *const c_char, b: *mut libc::statfs) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statfs(p, b), |p| stat_path(&p, true).and_then(|_| fill_statfs(b)))
}
#[no_mangle]
pub unsafe extern "C" fn statfs64(p: *const c_char, b: *mut libc::statfs64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statfs64(p, b), |p| stat_path(&p, true).and_then(|_| fill_statfs64(b)))
}
#[no_mangle]
pub unsafe extern "C" fn statvfs(p: *const c_char, b: *mut libc::statvfs) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statvfs(p, b), |p| stat_path(&p, true).and_then(|_| fill_statvfs(b)))
}
#[no_mangle]
pub unsafe extern "C" fn statvfs64(p: *const c_char, b: *mut libc::statvfs64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statvfs64(p, b), |p| stat_path(&p, true).and_then(|_| fill_statvfs64(b)))
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, b: *mut libc::statfs) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fstatfs(fd, b),
        Some(_) => ret(fill_statfs(b)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, b: *mut libc::statfs64) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fstatfs64(fd, b),
        Some(_) => ret(fill_statfs64(b)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, b: *mut libc::statvfs) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fstatvfs(fd, b),
        Some(_) => ret(fill_statvfs(b)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, b: *mut libc::statvfs64) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fstatvfs64(fd, b),
        Some(_) => ret(fill_statvfs64(b)),
    }
}

// posix_fadvise and posix_fallocate return the error number instead of setting errno.
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, o: off_t, l: off_t, a: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::posix_fadvise(fd, o, l, a),
        Some(_) => 0,
    }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(fd: c_int, o: off64_t, l: off64_t, a: c_int) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::posix_fadvise64(fd, o, l, a),
        Some(_) => 0,
    }
}

/// Space is not reserved (chunks are sparse files); the size grows as POSIX says.
fn gust_fallocate(c: i32, mode: c_int, o: i64, l: i64) -> Result<c_int, i32> {
    if o < 0 || l <= 0 {
        return Err(libc::EINVAL);
    }
    if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let st = call(|cl| cl.fstat(c))?;
    if st.kind != Kind::File {
        return Err(libc::ENODEV);
    }
    let end = (o as u64).checked_add(l as u64).ok_or(libc::EFBIG)?;
    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > st.size {
        call(|cl| cl.ftruncate(c, end))?;
    }
    Ok(0)
}
#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, m: c_int, o: off_t, l: off_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fallocate(fd, m, o, l),
        Some(c) => ret(gust_fallocate(c, m, o, l)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, m: c_int, o: off64_t, l: off64_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::fallocate64(fd, m, o, l),
        Some(c) => ret(gust_fallocate(c, m, o, l)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, o: off_t, l: off_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::posix_fallocate(fd, o, l),
        Some(c) => gust_fallocate(c, 0, o, l).err().unwrap_or(0),
    }
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, o: off64_t, l: off64_t) -> c_int {
    match if reentrant() { None } else { ours(fd) } {
        None => real::posix_fallocate64(fd, o, l),
        Some(c) => gust_fallocate(c, 0, o, l).err().unwrap_or(0),
    }
}

// ----- realpath -----------------------------------------------------------------------

/// Resolves every symlink of an internal path, component by component.
fn resolve_all(p: &str) -> Result<String, i32> {
    call(|c| {
        let mut todo: Vec<String> = p.split('/').rev().filter(|s| !s.is_empty()).map(String::from).collect();
        let mut done = String::from("/");
        let mut hops = 0u32;
        while let Some(comp) = todo.pop() {
            if comp == "." {
                continue;
            }
            if comp == ".." {
                done = match done.rfind('/') {
                    Some(0) | None => "/".into(),
                    Some(i) => done[..i].to_string(),
                };
                continue;
            }
            let cand = if done == "/" { format!("/{comp}") } else { format!("{done}/{comp}") };
            let st = c.lstat(&cand)?;
            if st.kind == Kind::Symlink {
                hops += 1;
                if hops > SYMLINK_HOPS_MAX {
                    return Err(gust_client::Errno(libc::ELOOP));
                }
                let t = c.readlink(&cand)?;
                if t.starts_with('/') {
                    // Targets outside the mount directory are outside GustFS.
                    let inner = c.internal_path(&t).ok_or(gust_client::Errno(libc::EXDEV))?;
                    done = "/".into();
                    todo.extend(inner.split('/').rev().filter(|s| !s.is_empty()).map(String::from));
                } else {
                    todo.extend(t.split('/').rev().filter(|s| !s.is_empty()).map(String::from));
                }
                continue;
            }
            if !todo.is_empty() && st.kind != Kind::Dir {
                return Err(gust_client::Errno(libc::ENOTDIR));
            }
            done = cand;
        }
        Ok(done)
    })
}

unsafe fn realpath_any(
    p: *const c_char,
    r: *mut c_char,
    realf: impl FnOnce(*const c_char) -> *mut c_char,
) -> *mut c_char {
    if reentrant() {
        return realf(p);
    }
    match route_cwd(p) {
        Ok(Route::Real) => realf(p),
        Ok(Route::RealAbs(c)) => realf(c.as_ptr()),
        Ok(Route::Ours(i)) => match resolve_all(&i) {
            Ok(x) => {
                let s = external(&x);
                if s.len() >= libc::PATH_MAX as usize {
                    set_errno(libc::ENAMETOOLONG);
                    return std::ptr::null_mut();
                }
                out_str(&s, r, if r.is_null() { 0 } else { libc::PATH_MAX as usize }, true)
            }
            Err(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
        },
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn realpath(p: *const c_char, r: *mut c_char) -> *mut c_char {
    realpath_any(p, r, |p| real::realpath(p, r))
}
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(p: *const c_char, r: *mut c_char, _n: size_t) -> *mut c_char {
    realpath_any(p, r, |p| real::realpath(p, r))
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(p: *const c_char) -> *mut c_char {
    realpath_any(p, std::ptr::null_mut(), |p| real::canonicalize_file_name(p))
}

// ----- mmap ---------------------------------------------------------------------------

/// mmap of a GustFS file: the data is copied into an anonymous private mapping.
/// Writable shared mappings cannot be kept coherent and fail with ENODEV.
unsafe fn gust_mmap(a: *mut c_void, l: size_t, prot: c_int, flags: c_int, c: i32, o: i64) -> *mut c_void {
    let fail = |e: i32| {
        set_errno(e);
        libc::MAP_FAILED
    };
    if flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
        return fail(libc::ENODEV);
    }
    if l == 0 || o < 0 || o % 4096 != 0 {
        return fail(libc::EINVAL);
    }
    let keep = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE | libc::MAP_NORESERVE | libc::MAP_POPULATE);
    let m = real::mmap(a, l, libc::PROT_READ | libc::PROT_WRITE, keep | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
    if m == libc::MAP_FAILED {
        return m;
    }
    if let Err(e) = call(|cl| cl.pread(c, std::slice::from_raw_parts_mut(m.cast::<u8>(), l), o as u64)) {
        libc::munmap(m, l);
        return fail(if e == libc::EBADF { libc::EACCES } else { e });
    }
    if prot != libc::PROT_READ | libc::PROT_WRITE && libc::mprotect(m, l, prot) != 0 {
        let e = crate::get_errno();
        libc::munmap(m, l);
        return fail(e);
    }
    m
}

#[no_mangle]
pub unsafe extern "C" fn mmap(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void {
    match if reentrant() || f & libc::MAP_ANONYMOUS != 0 { None } else { ours(fd) } {
        None => real::mmap(a, l, p, f, fd, o),
        Some(c) => gust_mmap(a, l, p, f, c, o),
    }
}
#[no_mangle]
pub unsafe extern "C" fn mmap64(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off64_t) -> *mut c_void {
    match if reentrant() || f & libc::MAP_ANONYMOUS != 0 { None } else { ours(fd) } {
        None => real::mmap64(a, l, p, f, fd, o),
        Some(c) => gust_mmap(a, l, p, f, c, o),
    }
}

// ----- mkstemp ------------------------------------------------------------------------

/// glibc's mkstemp opens with its internal open; GustFS templates are handled here.
unsafe fn gust_mkstemp(t: *mut c_char, flags: c_int, suffix: usize, realf: impl FnOnce(*mut c_char) -> c_int) -> c_int {
    if reentrant() {
        return realf(t);
    }
    let Ok(Route::Ours(_)) = route_cwd(t) else {
        return realf(t);
    };
    let len = libc::strlen(t);
    if len < 6 + suffix {
        return ret(Err(libc::EINVAL));
    }
    let xs = std::slice::from_raw_parts_mut(t.cast::<u8>().add(len - 6 - suffix), 6);
    if xs != b"XXXXXX" {
        return ret(Err(libc::EINVAL));
    }
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut seed = now_ns() as u64 ^ (libc::getpid() as u64) << 32;
    // Bounded like glibc (TMP_MAX-ish attempts).
    for _ in 0..1000 {
        for x in xs.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *x = CHARS[(seed % CHARS.len() as u64) as usize];
        }
        let Ok(Route::Ours(p)) = route_cwd(t) else {
            return ret(Err(libc::EINVAL));
        };
        match gust_open(&p, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | flags, 0o600) {
            Err(libc::EEXIST) => continue,
            r => return ret(r),
        }
    }
    ret(Err(libc::EEXIST))
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(t: *mut c_char) -> c_int {
    gust_mkstemp(t, 0, 0, |t| real::mkstemp(t))
}
#[no_mangle]
pub unsafe extern "C" fn mkstemp64(t: *mut c_char) -> c_int {
    gust_mkstemp(t, 0, 0, |t| real::mkstemp64(t))
}
#[no_mangle]
pub unsafe extern "C" fn mkostemp(t: *mut c_char, f: c_int) -> c_int {
    gust_mkstemp(t, f, 0, |t| real::mkostemp(t, f))
}
#[no_mangle]
pub unsafe extern "C" fn mkostemp64(t: *mut c_char, f: c_int) -> c_int {
    gust_mkstemp(t, f, 0, |t| real::mkostemp64(t, f))
}
