//! Links and attributes: symlink, readlink, chmod, chown (POSIX's rules for this
//! process's ids), mknod and mkfifo (FIFOs and socket names as records), utimes and
//! friends, extended attributes (`user.*`; other namespaces EOPNOTSUPP).

use super::{by_fd, by_path, fd_path, now_ns};
use crate::{call, ours, real, reentrant, ret, umask};
use gust_client::Kind;
use libc::{c_char, c_int, c_void, mode_t, size_t, ssize_t};
use std::ffi::CStr;

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
    by_fd(fd, || real::fchmod(fd, m), |c| fd_path(c).and_then(|p| call(|cl| cl.chmod(&p, m))).map(|_| 0))
}

/// An id argument of chown: -1 leaves it unchanged.
fn id_arg(x: u32) -> Option<u32> {
    (x != u32::MAX).then_some(x)
}
fn gust_chown(p: &str, u: libc::uid_t, g: libc::gid_t, follow: bool) -> Result<c_int, i32> {
    call(|c| c.chown(p, id_arg(u), id_arg(g), follow)).map(|_| 0)
}
#[no_mangle]
pub unsafe extern "C" fn chown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::chown(p, u, g), |p| gust_chown(&p, u, g, true))
}
#[no_mangle]
pub unsafe extern "C" fn lchown(p: *const c_char, u: libc::uid_t, g: libc::gid_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lchown(p, u, g), |p| gust_chown(&p, u, g, false))
}
#[no_mangle]
pub unsafe extern "C" fn fchownat(d: c_int, p: *const c_char, u: libc::uid_t, g: libc::gid_t, f: c_int) -> c_int {
    if !reentrant() && f & libc::AT_EMPTY_PATH != 0 && (p.is_null() || *p == 0) {
        if let Some(c) = ours(d) {
            return ret(call(|cl| cl.fchown(c, id_arg(u), id_arg(g))).map(|_| 0));
        }
    }
    by_path(d, p, |p| real::fchownat(d, p, u, g, f), |p| gust_chown(&p, u, g, f & libc::AT_SYMLINK_NOFOLLOW == 0))
}
#[no_mangle]
pub unsafe extern "C" fn fchown(fd: c_int, u: libc::uid_t, g: libc::gid_t) -> c_int {
    by_fd(fd, || real::fchown(fd, u, g), |c| call(|cl| cl.fchown(c, id_arg(u), id_arg(g))).map(|_| 0))
}

/// mknod's kinds GustFS stores: files, FIFOs, socket names, and device nodes (never
/// opened: the instance is nodev).
fn gust_mknod(p: &str, m: mode_t, dev: libc::dev_t) -> Result<c_int, i32> {
    let kind = match m & libc::S_IFMT {
        0 | libc::S_IFREG => Kind::File,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFBLK => Kind::BlockDevice,
        libc::S_IFCHR => Kind::CharDevice,
        _ => return Err(libc::EINVAL),
    };
    let m = m & 0o7777 & !umask();
    if kind.is_device() {
        return call(|c| c.mknod_device(p, kind, m, dev)).map(|_| 0);
    }
    call(|c| c.mknod(p, kind, m)).map(|_| 0)
}
#[no_mangle]
pub unsafe extern "C" fn mknod(p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::mknod(p, m, dev), |p| gust_mknod(&p, m, dev))
}
#[no_mangle]
pub unsafe extern "C" fn mknodat(d: c_int, p: *const c_char, m: mode_t, dev: libc::dev_t) -> c_int {
    by_path(d, p, |p| real::mknodat(d, p, m, dev), |p| gust_mknod(&p, m, dev))
}
#[no_mangle]
pub unsafe extern "C" fn mkfifo(p: *const c_char, m: mode_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::mkfifo(p, m), |p| gust_mknod(&p, libc::S_IFIFO | (m & 0o7777), 0))
}
#[no_mangle]
pub unsafe extern "C" fn mkfifoat(d: c_int, p: *const c_char, m: mode_t) -> c_int {
    by_path(d, p, |p| real::mkfifoat(d, p, m), |p| gust_mknod(&p, libc::S_IFIFO | (m & 0o7777), 0))
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
    by_fd(fd, || real::futimens(fd, t), |c| fd_path(c).and_then(|p| gust_utimens(&p, times_ts(t), true)))
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
    by_fd(fd, || real::futimes(fd, t), |c| fd_path(c).and_then(|p| gust_utimens(&p, times_tv(t), true)))
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

// Extended attributes (gust-client xattrs.rs): `user.*` ones are the record's;
// other namespaces answer EOPNOTSUPP (what cp, ls and Python's shutil expect of a
// file system without them).

/// A name argument: EFAULT for NULL; a name that is not UTF-8 cannot exist (a
/// get is ENODATA) nor be set here (EINVAL).
unsafe fn xattr_name<'a>(n: *const c_char, not_utf8: i32) -> Result<&'a str, i32> {
    if n.is_null() {
        return Err(libc::EFAULT);
    }
    CStr::from_ptr(n).to_str().map_err(|_| not_utf8)
}

/// getxattr's and listxattr's answer: with size 0 the length, else the bytes
/// when they fit (ERANGE when not).
unsafe fn xattr_out(v: Vec<u8>, out: *mut c_void, size: size_t) -> Result<ssize_t, i32> {
    if size == 0 {
        return Ok(v.len() as ssize_t);
    }
    if v.len() > size {
        return Err(libc::ERANGE);
    }
    if !v.is_empty() {
        if out.is_null() {
            return Err(libc::EFAULT);
        }
        std::ptr::copy_nonoverlapping(v.as_ptr(), out.cast::<u8>(), v.len());
    }
    Ok(v.len() as ssize_t)
}

unsafe fn xattr_value<'a>(v: *const c_void, s: size_t) -> Result<&'a [u8], i32> {
    if s == 0 {
        Ok(&[])
    } else if v.is_null() {
        Err(libc::EFAULT)
    } else {
        Ok(std::slice::from_raw_parts(v.cast(), s))
    }
}

unsafe fn gust_getxattr(p: &str, n: *const c_char, v: *mut c_void, s: size_t, follow: bool) -> Result<ssize_t, i32> {
    let name = xattr_name(n, libc::ENODATA)?;
    xattr_out(call(|c| c.getxattr(p, name, follow))?, v, s)
}
unsafe fn gust_listxattr(p: &str, l: *mut c_char, s: size_t, follow: bool) -> Result<ssize_t, i32> {
    xattr_out(call(|c| c.listxattr(p, follow))?, l.cast(), s)
}
unsafe fn gust_setxattr(
    p: &str,
    n: *const c_char,
    v: *const c_void,
    s: size_t,
    f: c_int,
    follow: bool,
) -> Result<c_int, i32> {
    let (name, value) = (xattr_name(n, libc::EINVAL)?, xattr_value(v, s)?);
    call(|c| c.setxattr(p, name, value, f as u32, follow)).map(|_| 0)
}
unsafe fn gust_removexattr(p: &str, n: *const c_char, follow: bool) -> Result<c_int, i32> {
    let name = xattr_name(n, libc::EINVAL)?;
    call(|c| c.removexattr(p, name, follow)).map(|_| 0)
}

#[no_mangle]
pub unsafe extern "C" fn getxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t {
    by_path(libc::AT_FDCWD, p, |p| real::getxattr(p, n, v, s), |p| gust_getxattr(&p, n, v, s, true))
}
#[no_mangle]
pub unsafe extern "C" fn lgetxattr(p: *const c_char, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t {
    by_path(libc::AT_FDCWD, p, |p| real::lgetxattr(p, n, v, s), |p| gust_getxattr(&p, n, v, s, false))
}
#[no_mangle]
pub unsafe extern "C" fn fgetxattr(fd: c_int, n: *const c_char, v: *mut c_void, s: size_t) -> ssize_t {
    by_fd(
        fd,
        || real::fgetxattr(fd, n, v, s),
        |c| {
            let name = xattr_name(n, libc::ENODATA)?;
            xattr_out(call(|cl| cl.fgetxattr(c, name))?, v, s)
        },
    )
}
#[no_mangle]
pub unsafe extern "C" fn listxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t {
    by_path(libc::AT_FDCWD, p, |p| real::listxattr(p, l, s), |p| gust_listxattr(&p, l, s, true))
}
#[no_mangle]
pub unsafe extern "C" fn llistxattr(p: *const c_char, l: *mut c_char, s: size_t) -> ssize_t {
    by_path(libc::AT_FDCWD, p, |p| real::llistxattr(p, l, s), |p| gust_listxattr(&p, l, s, false))
}
#[no_mangle]
pub unsafe extern "C" fn flistxattr(fd: c_int, l: *mut c_char, s: size_t) -> ssize_t {
    by_fd(fd, || real::flistxattr(fd, l, s), |c| xattr_out(call(|cl| cl.flistxattr(c))?, l.cast(), s))
}
#[no_mangle]
pub unsafe extern "C" fn setxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::setxattr(p, n, v, s, f), |p| gust_setxattr(&p, n, v, s, f, true))
}
#[no_mangle]
pub unsafe extern "C" fn lsetxattr(p: *const c_char, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lsetxattr(p, n, v, s, f), |p| gust_setxattr(&p, n, v, s, f, false))
}
#[no_mangle]
pub unsafe extern "C" fn fsetxattr(fd: c_int, n: *const c_char, v: *const c_void, s: size_t, f: c_int) -> c_int {
    by_fd(
        fd,
        || real::fsetxattr(fd, n, v, s, f),
        |c| {
            let (name, value) = (xattr_name(n, libc::EINVAL)?, xattr_value(v, s)?);
            call(|cl| cl.fsetxattr(c, name, value, f as u32)).map(|_| 0)
        },
    )
}
#[no_mangle]
pub unsafe extern "C" fn removexattr(p: *const c_char, n: *const c_char) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::removexattr(p, n), |p| gust_removexattr(&p, n, true))
}
#[no_mangle]
pub unsafe extern "C" fn lremovexattr(p: *const c_char, n: *const c_char) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::lremovexattr(p, n), |p| gust_removexattr(&p, n, false))
}
#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, n: *const c_char) -> c_int {
    by_fd(
        fd,
        || real::fremovexattr(fd, n),
        |c| {
            let name = xattr_name(n, libc::EINVAL)?;
            call(|cl| cl.fremovexattr(c, name)).map(|_| 0)
        },
    )
}
