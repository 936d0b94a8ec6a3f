//! Unix sockets named in the instance (bind and connect of an AF_UNIX path under
//! the mount directory). A socket lives in one node's kernel, so the name in GustFS
//! is a record of kind socket whose target is an abstract address the socket is
//! bound to instead (Linux's autobind, `@` and five hex digits): bind makes both,
//! connect reads the record and connects to the address. It works between processes
//! of one node (one network namespace), as a FIFO does through the FUSE mount; from
//! another node connect finds no such address (ECONNREFUSED). A socket record made
//! otherwise (mknod, or a bind through a FUSE mount) has no address: ECONNREFUSED.

use crate::{call, real, ret, route, umask, Route};
use libc::{c_int, sa_family_t, sockaddr, sockaddr_un, socklen_t};
use std::ffi::CString;
use std::mem::size_of;

/// The path of an AF_UNIX address that names a file (not abstract, not unnamed),
/// read within the `l` bytes the caller gave.
unsafe fn unix_path(a: *const sockaddr, l: socklen_t) -> Option<CString> {
    let fam = size_of::<sa_family_t>();
    if a.is_null() || (l as usize) <= fam {
        return None;
    }
    let bytes = std::slice::from_raw_parts(a as *const u8, (l as usize).min(size_of::<sockaddr_un>()));
    if sa_family_t::from_ne_bytes([bytes[0], bytes[1]]) != libc::AF_UNIX as sa_family_t || bytes[fam] == 0 {
        return None;
    }
    let path = &bytes[fam..];
    let end = path.iter().position(|b| *b == 0).unwrap_or(path.len());
    CString::new(&path[..end]).ok()
}

/// The abstract address `fd` is bound to, as `@` and its name.
unsafe fn abstract_name(fd: c_int) -> Option<String> {
    let mut un: sockaddr_un = std::mem::zeroed();
    let mut l = size_of::<sockaddr_un>() as socklen_t;
    if libc::getsockname(fd, &mut un as *mut sockaddr_un as *mut sockaddr, &mut l) != 0 {
        return None;
    }
    let n = (l as usize).checked_sub(size_of::<sa_family_t>())?;
    if n < 2 || un.sun_path[0] != 0 {
        return None;
    }
    let name: Vec<u8> = un.sun_path[1..n].iter().map(|c| *c as u8).collect();
    String::from_utf8(name).ok().map(|s| format!("@{s}"))
}

#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int {
    let Some(p) = unix_path(a, l) else { return real::bind(fd, a, l) };
    let path = match route(libc::AT_FDCWD, p.as_ptr()) {
        Ok(Route::Ours(path)) => path,
        Ok(_) => return real::bind(fd, a, l),
        Err(e) => return ret(Err(e)),
    };
    // Autobind: an abstract address of the kernel's choosing.
    let family = libc::AF_UNIX as sa_family_t;
    let r = real::bind(fd, &family as *const sa_family_t as *const sockaddr, size_of::<sa_family_t>() as socklen_t);
    if r != 0 {
        return r;
    }
    let Some(address) = abstract_name(fd) else { return ret(Err(libc::EIO)) };
    let mode = 0o777 & !umask();
    ret(call(|c| c.bind_socket(&path, mode, &address)).map(|_| 0).map_err(|e| {
        if e == libc::EEXIST {
            libc::EADDRINUSE
        } else {
            e
        }
    }))
}

#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, a: *const sockaddr, l: socklen_t) -> c_int {
    let Some(p) = unix_path(a, l) else { return real::connect(fd, a, l) };
    let path = match route(libc::AT_FDCWD, p.as_ptr()) {
        Ok(Route::Ours(path)) => path,
        Ok(_) => return real::connect(fd, a, l),
        Err(e) => return ret(Err(e)),
    };
    let address = match call(|c| c.socket_address(&path)) {
        Ok(Some(address)) => address,
        Ok(None) => return ret(Err(libc::ECONNREFUSED)),
        Err(e) => return ret(Err(e)),
    };
    let name = address.trim_start_matches('@').as_bytes();
    let mut un: sockaddr_un = std::mem::zeroed();
    if name.len() + 1 > un.sun_path.len() {
        return ret(Err(libc::ECONNREFUSED));
    }
    un.sun_family = libc::AF_UNIX as sa_family_t;
    for (dst, src) in un.sun_path[1..].iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    let len = (size_of::<sa_family_t>() + 1 + name.len()) as socklen_t;
    real::connect(fd, &un as *const sockaddr_un as *const sockaddr, len)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_named_unix_addresses_are_ours() {
        unsafe {
            let mut un: libc::sockaddr_un = std::mem::zeroed();
            un.sun_family = libc::AF_UNIX as libc::sa_family_t;
            let full = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let a = |un: &libc::sockaddr_un| un as *const libc::sockaddr_un as *const libc::sockaddr;
            assert!(super::unix_path(a(&un), full).is_none(), "abstract");
            un.sun_path[0] = b'/' as libc::c_char;
            un.sun_path[1] = b's' as libc::c_char;
            assert_eq!(super::unix_path(a(&un), full).unwrap().as_bytes(), b"/s");
            assert_eq!(super::unix_path(a(&un), 3).unwrap().as_bytes(), b"/", "within the length given");
            un.sun_family = libc::AF_INET as libc::sa_family_t;
            assert!(super::unix_path(a(&un), full).is_none());
        }
    }
}
