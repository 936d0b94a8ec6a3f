//! statfs and statvfs (and their f- and 64 variants): the capacity of the whole
//! instance, summed over its daemons.

use super::{by_fd, by_path, stat_path};
use crate::{call, real};
use gust_client::StatFs;
use libc::{c_char, c_int};

/// Asks the instance for its capacity and stores it in the form `conv` makes.
unsafe fn fill<T>(out: *mut T, conv: impl FnOnce(&StatFs) -> T) -> Result<c_int, i32> {
    *out = conv(&call(|c| c.statfs())?);
    Ok(0)
}

/// `fill` for a path, which must exist.
unsafe fn fill_path<T>(p: &str, out: *mut T, conv: impl FnOnce(&StatFs) -> T) -> Result<c_int, i32> {
    stat_path(p, true)?;
    fill(out, conv)
}

#[no_mangle]
pub unsafe extern "C" fn statfs(p: *const c_char, b: *mut libc::statfs) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statfs(p, b), |p| fill_path(&p, b, StatFs::to_libc_statfs))
}
#[no_mangle]
pub unsafe extern "C" fn statfs64(p: *const c_char, b: *mut libc::statfs64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statfs64(p, b), |p| fill_path(&p, b, StatFs::to_libc_statfs64))
}
#[no_mangle]
pub unsafe extern "C" fn statvfs(p: *const c_char, b: *mut libc::statvfs) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statvfs(p, b), |p| fill_path(&p, b, StatFs::to_libc_statvfs))
}
#[no_mangle]
pub unsafe extern "C" fn statvfs64(p: *const c_char, b: *mut libc::statvfs64) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::statvfs64(p, b), |p| fill_path(&p, b, StatFs::to_libc_statvfs64))
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs(fd: c_int, b: *mut libc::statfs) -> c_int {
    by_fd(fd, || real::fstatfs(fd, b), |_| fill(b, StatFs::to_libc_statfs))
}
#[no_mangle]
pub unsafe extern "C" fn fstatfs64(fd: c_int, b: *mut libc::statfs64) -> c_int {
    by_fd(fd, || real::fstatfs64(fd, b), |_| fill(b, StatFs::to_libc_statfs64))
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs(fd: c_int, b: *mut libc::statvfs) -> c_int {
    by_fd(fd, || real::fstatvfs(fd, b), |_| fill(b, StatFs::to_libc_statvfs))
}
#[no_mangle]
pub unsafe extern "C" fn fstatvfs64(fd: c_int, b: *mut libc::statvfs64) -> c_int {
    by_fd(fd, || real::fstatvfs64(fd, b), |_| fill(b, StatFs::to_libc_statvfs64))
}
