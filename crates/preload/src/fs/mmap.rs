//! mmap of a GustFS file: a private copy of its bytes (read-only sharing semantics).

use super::by_fd;
use crate::{call, real, set_errno};
use libc::{c_int, c_void, off64_t, off_t, size_t};

/// mmap of a GustFS file: the data is copied into an anonymous private mapping.
/// Writable shared mappings cannot be kept coherent and fail with ENODEV. Reports
/// its own failures (MAP_FAILED, errno set).
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
    if f & libc::MAP_ANONYMOUS != 0 {
        return real::mmap(a, l, p, f, fd, o);
    }
    by_fd(fd, || real::mmap(a, l, p, f, fd, o), |c| Ok(gust_mmap(a, l, p, f, c, o)))
}
#[no_mangle]
pub unsafe extern "C" fn mmap64(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off64_t) -> *mut c_void {
    if f & libc::MAP_ANONYMOUS != 0 {
        return real::mmap64(a, l, p, f, fd, o);
    }
    by_fd(fd, || real::mmap64(a, l, p, f, fd, o), |c| Ok(gust_mmap(a, l, p, f, c, o)))
}
