//! The stat family (stat, lstat, fstat, fstatat, statx, glibc's old __xstat entry
//! points) and access.

use super::{abs_or, by_fd, by_path, stat_path};
use crate::{call, ours, real, reentrant, ret, route, Route};
use gust_client::Stat;
use libc::{c_char, c_int, c_uint};

/// Fills a `struct stat`; returns 0, the success value of the stat calls.
unsafe fn fill_stat(s: &Stat, out: *mut libc::stat) -> c_int {
    *out = s.to_libc_stat();
    0
}

unsafe fn fill_stat64(s: &Stat, out: *mut libc::stat64) -> c_int {
    *out = s.to_libc_stat64();
    0
}

unsafe fn fill_statx(s: &Stat, out: *mut libc::statx) -> c_int {
    let mut st: libc::statx = std::mem::zeroed();
    st.stx_mask = libc::STATX_BASIC_STATS;
    st.stx_blksize = s.blksize.min(1 << 30) as u32;
    st.stx_nlink = s.nlink;
    st.stx_uid = s.uid;
    st.stx_gid = s.gid;
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
    0
}

#[no_mangle]
pub unsafe extern "C" fn stat(p: *const c_char, b: *mut libc::stat) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::stat(p, b), |p| stat_path(&p, true).map(|s| fill_stat(&s, b)))
}
#[no_mangle]
pub unsafe extern "C" fn stat64(p: *const c_char, b: *mut libc::stat64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::stat64(p, b), |p| stat_path(&p, true).map(|s| fill_stat64(&s, b)))
}
#[no_mangle]
pub unsafe extern "C" fn lstat(p: *const c_char, b: *mut libc::stat) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lstat(p, b), |p| stat_path(&p, false).map(|s| fill_stat(&s, b)))
}
#[no_mangle]
pub unsafe extern "C" fn lstat64(p: *const c_char, b: *mut libc::stat64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lstat64(p, b), |p| stat_path(&p, false).map(|s| fill_stat64(&s, b)))
}
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, b: *mut libc::stat) -> c_int {
    by_fd(fd, || real::fstat(fd, b), |c| call(|cl| cl.fstat(c)).map(|s| fill_stat(&s, b)))
}
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, b: *mut libc::stat64) -> c_int {
    by_fd(fd, || real::fstat64(fd, b), |c| call(|cl| cl.fstat(c)).map(|s| fill_stat64(&s, b)))
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

/// The shape of fstatat and statx: ours through `at_stat`, else libc with the path
/// made absolute where a GustFS working directory requires it.
unsafe fn by_at(
    d: c_int,
    p: *const c_char,
    f: c_int,
    fill: impl FnOnce(&Stat) -> c_int,
    real: impl FnOnce(c_int, *const c_char) -> c_int,
) -> c_int {
    match at_stat(d, p, f) {
        Some(r) => ret(r.map(|s| fill(&s))),
        None => {
            let mut k = None;
            let (d, p) = abs_or(d, p, &mut k);
            real(d, p)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fstatat(d: c_int, p: *const c_char, b: *mut libc::stat, f: c_int) -> c_int {
    by_at(d, p, f, |s| fill_stat(s, b), |d, p| real::fstatat(d, p, b, f))
}
#[no_mangle]
pub unsafe extern "C" fn fstatat64(d: c_int, p: *const c_char, b: *mut libc::stat64, f: c_int) -> c_int {
    by_at(d, p, f, |s| fill_stat64(s, b), |d, p| real::fstatat64(d, p, b, f))
}
#[no_mangle]
pub unsafe extern "C" fn statx(d: c_int, p: *const c_char, f: c_int, m: c_uint, b: *mut libc::statx) -> c_int {
    by_at(d, p, f, |s| fill_statx(s, b), |d, p| real::statx(d, p, f, m, b))
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
