//! Extended attributes through the C API (`gust_getxattr` and friends in gust.h):
//! the client core's `user.*` attributes, following symlinks, with getxattr(2)'s
//! buffer rules (size 0 asks for the length; a buffer too small is ERANGE).

use super::*;

/// `v` into the caller's buffer as getxattr(2) and listxattr(2) answer.
unsafe fn sized_out(v: &[u8], out: *mut libc::c_void, size: size_t, subject: &str) -> R<ssize_t> {
    if size == 0 {
        return Ok(v.len() as ssize_t);
    }
    nonnull(out, "buffer")?;
    if v.len() > size {
        return Err(failure(libc::ERANGE, format!("{subject}: {} bytes do not fit a buffer of {size}", v.len())));
    }
    std::ptr::copy_nonoverlapping(v.as_ptr(), out.cast::<u8>(), v.len());
    Ok(v.len() as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn gust_getxattr(
    fs: *mut gust_fs,
    path: *const c_char,
    name: *const c_char,
    value: *mut libc::c_void,
    size: size_t,
) -> ssize_t {
    guard("gust_getxattr", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let n = cstr(name, "name")?;
        let v = fs.client.getxattr(&p, n, true).map_err(|e| fs.fail(&format!("{p} ({n})"), e))?;
        sized_out(&v, value, size, &p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_listxattr(
    fs: *mut gust_fs,
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    guard("gust_listxattr", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let v = fs.client.listxattr(&p, true).map_err(|e| fs.fail(&p, e))?;
        sized_out(&v, list.cast(), size, &p)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_setxattr(
    fs: *mut gust_fs,
    path: *const c_char,
    name: *const c_char,
    value: *const libc::c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    guard("gust_setxattr", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let n = cstr(name, "name")?;
        let v = if size == 0 { &[][..] } else { std::slice::from_raw_parts(value.cast::<u8>(), buf_len(value, size)?) };
        fs.client.setxattr(&p, n, v, flags as u32, true).map_err(|e| fs.fail(&format!("{p} ({n})"), e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_removexattr(fs: *mut gust_fs, path: *const c_char, name: *const c_char) -> c_int {
    guard("gust_removexattr", -1, || {
        let fs = fs_ref(fs)?;
        let p = fs.path(path, "path")?;
        let n = cstr(name, "name")?;
        fs.client.removexattr(&p, n, true).map_err(|e| fs.fail(&format!("{p} ({n})"), e))?;
        Ok(0)
    })
}
