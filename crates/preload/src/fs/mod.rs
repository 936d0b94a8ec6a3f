//! Interposed functions of the descriptor and path API (open ... mkstemp), one module
//! per family, and the two helpers every one of them starts with.
//!
//! Every function has the same shape: inside the library ([`reentrant`]), or on a path
//! or descriptor that is not GustFS, it calls libc with the same arguments and returns
//! its answer unchanged; otherwise it calls the client and reports in the C way.
//! [`by_path`] and [`by_fd`] are that shape, so an entry point is one call of either:
//!
//! ```ignore
//! #[no_mangle]
//! pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
//!     by_fd(fd, || real::fsync(fd), |c| call(|cl| cl.fsync(c)).map(|_| 0))
//! }
//! ```
//!
//! Not for: directory streams (dir.rs), stdio (stdio.rs), exec (exec.rs), copies
//! (copy.rs), the descriptor table and path routing themselves (lib.rs).

#![allow(clippy::missing_safety_doc)]

pub(crate) mod aio;
pub(crate) mod attrs;
pub(crate) mod cwd;
pub(crate) mod data;
pub(crate) mod descriptors;
pub(crate) mod locks;
pub(crate) mod mkstemp;
pub(crate) mod mmap;
pub(crate) mod namespace;
pub(crate) mod open;
pub(crate) mod realpath;
pub(crate) mod stat;
pub(crate) mod statfs;

use crate::{call, ours, reentrant, ret, route, set_errno, Failed, Route};
pub(crate) use gust_client::now_ns;
use gust_client::Stat;
use libc::{c_char, c_int, c_void, size_t};

/// The common shape of a path call: libc for foreign paths (and every call from
/// inside the library), `gust` with the path inside GustFS for ours. `gust` returns
/// `Ok` with what it reports itself (a value whose errno it set, as libc would).
pub(crate) unsafe fn by_path<T: Failed>(
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
        Err(e) => ret(Err(e)),
    }
}

/// The common shape of a descriptor call: libc for descriptors that are not ours (and
/// every call from inside the library), `gust` with the client's descriptor for ours.
#[inline]
pub(crate) fn by_fd<T: Failed>(fd: c_int, real: impl FnOnce() -> T, gust: impl FnOnce(i32) -> Result<T, i32>) -> T {
    match if reentrant() { None } else { ours(fd) } {
        None => real(),
        Some(c) => ret(gust(c)),
    }
}

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

fn stat_path(p: &str, follow: bool) -> Result<Stat, i32> {
    call(|c| if follow { c.stat(p) } else { c.lstat(p) })
}

fn fd_path(cfd: i32) -> Result<String, i32> {
    call(|c| c.fd_info(cfd)).map(|(p, _)| p)
}

/// For a libc call on (`d`, `p`): a relative path seen from a GustFS working
/// directory that leaves GustFS is given to libc as an absolute path, kept in `keep`.
unsafe fn abs_or(d: c_int, p: *const c_char, keep: &mut Option<std::ffi::CString>) -> (c_int, *const c_char) {
    if !reentrant() {
        if let Ok(Route::RealAbs(c)) = route(d, p) {
            *keep = Some(c);
            return (libc::AT_FDCWD, keep.as_ref().unwrap().as_ptr());
        }
    }
    (d, p)
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
