//! mkstemp and friends on a GustFS template (glibc's own open a file with an internal
//! open this library cannot see).

use super::{now_ns, open::gust_open};
use crate::{real, reentrant, ret, route_cwd, Route};
use libc::{c_char, c_int};

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
