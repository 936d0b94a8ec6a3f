//! The working directory: chdir and fchdir into GustFS keep a virtual working
//! directory (the kernel's stays where it was); getcwd reports it.

use super::{by_fd, fd_path, out_str, stat_path};
use crate::{call, external, real, reentrant, ret, route_cwd, set_errno, Route};
use gust_client::Kind;
use libc::{c_char, c_int, size_t};

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
    let real_fchdir = || {
        let rc = real::fchdir(fd);
        if rc == 0 && !reentrant() && crate::vcwd().is_some() {
            crate::set_vcwd(None);
        }
        rc
    };
    by_fd(fd, real_fchdir, |c| {
        if call(|cl| cl.fstat(c))?.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        crate::set_vcwd(Some(external(&fd_path(c)?)));
        Ok(0)
    })
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
