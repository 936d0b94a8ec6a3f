//! mkdir, rmdir, unlink, rename and link, and their *at variants.

use super::{abs_or, by_path};
use crate::{call, real, reentrant, ret, route, umask, Route};
use gust_client::Kind;
use libc::{c_char, c_int, c_uint, mode_t};

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
        Err(e) => ret(Err(e)),
        Ok(Some(_)) if flags & !libc::RENAME_NOREPLACE != 0 => ret(Err(libc::EINVAL)),
        Ok(Some((x, y))) => ret(gust_rename(&x, &y, flags & libc::RENAME_NOREPLACE != 0)),
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

/// Hard links (the client's links.rs): `a` is not followed if a symlink, as Linux's
/// link(2) does not; linkat follows it with AT_SYMLINK_FOLLOW.
#[no_mangle]
pub unsafe extern "C" fn link(a: *const c_char, b: *const c_char) -> c_int {
    match route2(libc::AT_FDCWD, a, libc::AT_FDCWD, b) {
        Ok(None) => real::link(a, b),
        Ok(Some((x, y))) => ret(call(|c| c.link(&x, &y)).map(|_| 0)),
        Err(e) => ret(Err(e)),
    }
}
#[no_mangle]
pub unsafe extern "C" fn linkat(da: c_int, a: *const c_char, db: c_int, b: *const c_char, f: c_int) -> c_int {
    match route2(da, a, db, b) {
        Ok(None) => real::linkat(da, a, db, b, f),
        Ok(Some(_)) if f & !(libc::AT_SYMLINK_FOLLOW | libc::AT_EMPTY_PATH) != 0 => ret(Err(libc::EINVAL)),
        Ok(Some((x, y))) if f & libc::AT_SYMLINK_FOLLOW != 0 => ret(call(|c| c.link_following(&x, &y)).map(|_| 0)),
        Ok(Some((x, y))) => ret(call(|c| c.link(&x, &y)).map(|_| 0)),
        Err(e) => ret(Err(e)),
    }
}
