//! read, write and their positioned and vectored variants, lseek, truncate, fsync,
//! fallocate and posix_fadvise.

use super::{buf, buf_mut, by_fd, by_path};
use crate::{call, real};
use gust_client::Kind;
use libc::{c_char, c_int, c_void, off64_t, off_t, size_t, ssize_t};

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    by_fd(fd, || real::read(fd, b, n), |c| call(|cl| cl.read(c, buf_mut(b, n))).map(|x| x as ssize_t))
}
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, b: *const c_void, n: size_t) -> ssize_t {
    by_fd(fd, || real::write(fd, b, n), |c| call(|cl| cl.write(c, buf(b, n))).map(|x| x as ssize_t))
}

unsafe fn gust_pread(c: i32, b: *mut c_void, n: size_t, o: i64) -> Result<ssize_t, i32> {
    if o < 0 {
        return Err(libc::EINVAL);
    }
    call(|cl| cl.pread(c, buf_mut(b, n), o as u64)).map(|x| x as ssize_t)
}

unsafe fn gust_pwrite(c: i32, b: *const c_void, n: size_t, o: i64) -> Result<ssize_t, i32> {
    if o < 0 {
        return Err(libc::EINVAL);
    }
    call(|cl| cl.pwrite(c, buf(b, n), o as u64)).map(|x| x as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t {
    by_fd(fd, || real::pread(fd, b, n, o), |c| gust_pread(c, b, n, o))
}
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, b: *mut c_void, n: size_t, o: off64_t) -> ssize_t {
    by_fd(fd, || real::pread64(fd, b, n, o), |c| gust_pread(c, b, n, o))
}
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t {
    by_fd(fd, || real::pwrite(fd, b, n, o), |c| gust_pwrite(c, b, n, o))
}
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, b: *const c_void, n: size_t, o: off64_t) -> ssize_t {
    by_fd(fd, || real::pwrite64(fd, b, n, o), |c| gust_pwrite(c, b, n, o))
}

unsafe fn iov_slices<'a>(v: *const libc::iovec, n: c_int) -> Result<&'a [libc::iovec], i32> {
    if !(0..=libc::UIO_MAXIOV).contains(&n) {
        return Err(libc::EINVAL);
    }
    Ok(if n == 0 { &[] } else { std::slice::from_raw_parts(v, n as usize) })
}

/// readv/preadv: one client read into a bounce buffer, then scattered.
unsafe fn gust_readv(c: i32, v: *const libc::iovec, n: c_int, off: Option<i64>) -> Result<ssize_t, i32> {
    let iov = iov_slices(v, n)?;
    let total: usize = iov.iter().map(|x| x.iov_len).sum();
    let mut tmp = vec![0u8; total];
    let got = match off {
        Some(o) if o < 0 => return Err(libc::EINVAL),
        Some(o) => call(|cl| cl.pread(c, &mut tmp, o as u64))?,
        None => call(|cl| cl.read(c, &mut tmp))?,
    };
    let mut pos = 0;
    for x in iov {
        if pos >= got {
            break;
        }
        let k = x.iov_len.min(got - pos);
        std::ptr::copy_nonoverlapping(tmp.as_ptr().add(pos), x.iov_base.cast::<u8>(), k);
        pos += k;
    }
    Ok(got as ssize_t)
}

/// writev/pwritev: gathered into one buffer so the write is one client call.
unsafe fn gust_writev(c: i32, v: *const libc::iovec, n: c_int, off: Option<i64>) -> Result<ssize_t, i32> {
    let iov = iov_slices(v, n)?;
    let mut tmp = Vec::with_capacity(iov.iter().map(|x| x.iov_len).sum());
    for x in iov {
        tmp.extend_from_slice(buf(x.iov_base, x.iov_len));
    }
    let n = match off {
        Some(o) if o < 0 => return Err(libc::EINVAL),
        Some(o) => call(|cl| cl.pwrite(c, &tmp, o as u64))?,
        None => call(|cl| cl.write(c, &tmp))?,
    };
    Ok(n as ssize_t)
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t {
    by_fd(fd, || real::readv(fd, v, n), |c| gust_readv(c, v, n, None))
}
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, v: *const libc::iovec, n: c_int) -> ssize_t {
    by_fd(fd, || real::writev(fd, v, n), |c| gust_writev(c, v, n, None))
}
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t {
    by_fd(fd, || real::preadv(fd, v, n, o), |c| gust_readv(c, v, n, Some(o)))
}
#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, v: *const libc::iovec, n: c_int, o: off64_t) -> ssize_t {
    by_fd(fd, || real::preadv64(fd, v, n, o), |c| gust_readv(c, v, n, Some(o)))
}
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, v: *const libc::iovec, n: c_int, o: off_t) -> ssize_t {
    by_fd(fd, || real::pwritev(fd, v, n, o), |c| gust_writev(c, v, n, Some(o)))
}
#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, v: *const libc::iovec, n: c_int, o: off64_t) -> ssize_t {
    by_fd(fd, || real::pwritev64(fd, v, n, o), |c| gust_writev(c, v, n, Some(o)))
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, o: off_t, w: c_int) -> off_t {
    by_fd(fd, || real::lseek(fd, o, w), |c| call(|cl| cl.lseek(c, o, w)).map(|x| x as off_t))
}
#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, o: off64_t, w: c_int) -> off64_t {
    by_fd(fd, || real::lseek64(fd, o, w), |c| call(|cl| cl.lseek(c, o, w)).map(|x| x as off64_t))
}

fn gust_truncate(p: &str, l: i64) -> Result<c_int, i32> {
    if l < 0 {
        return Err(libc::EINVAL);
    }
    call(|c| c.truncate(p, l as u64)).map(|_| 0)
}
fn gust_ftruncate(c: i32, l: i64) -> Result<c_int, i32> {
    if l < 0 {
        return Err(libc::EINVAL);
    }
    call(|cl| cl.ftruncate(c, l as u64)).map(|_| 0)
}

#[no_mangle]
pub unsafe extern "C" fn truncate(p: *const c_char, l: off_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::truncate(p, l), |p| gust_truncate(&p, l))
}
#[no_mangle]
pub unsafe extern "C" fn truncate64(p: *const c_char, l: off64_t) -> c_int {
    by_path(libc::AT_FDCWD, p, |p| real::truncate64(p, l), |p| gust_truncate(&p, l))
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, l: off_t) -> c_int {
    by_fd(fd, || real::ftruncate(fd, l), |c| gust_ftruncate(c, l))
}
#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, l: off64_t) -> c_int {
    by_fd(fd, || real::ftruncate64(fd, l), |c| gust_ftruncate(c, l))
}
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    by_fd(fd, || real::fsync(fd), |c| call(|cl| cl.fsync(c)).map(|_| 0))
}
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    by_fd(fd, || real::fdatasync(fd), |c| call(|cl| cl.fsync(c)).map(|_| 0))
}

// posix_fadvise and posix_fallocate return the error number instead of setting errno.
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise(fd: c_int, o: off_t, l: off_t, a: c_int) -> c_int {
    by_fd(fd, || real::posix_fadvise(fd, o, l, a), |_| Ok(0))
}
#[no_mangle]
pub unsafe extern "C" fn posix_fadvise64(fd: c_int, o: off64_t, l: off64_t, a: c_int) -> c_int {
    by_fd(fd, || real::posix_fadvise64(fd, o, l, a), |_| Ok(0))
}

/// Space is not reserved (chunks are sparse files); the size grows as POSIX says.
fn gust_fallocate(c: i32, mode: c_int, o: i64, l: i64) -> Result<c_int, i32> {
    if o < 0 || l <= 0 {
        return Err(libc::EINVAL);
    }
    if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let st = call(|cl| cl.fstat(c))?;
    if st.kind != Kind::File {
        return Err(libc::ENODEV);
    }
    let end = (o as u64).checked_add(l as u64).ok_or(libc::EFBIG)?;
    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && end > st.size {
        call(|cl| cl.ftruncate(c, end))?;
    }
    Ok(0)
}
#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, m: c_int, o: off_t, l: off_t) -> c_int {
    by_fd(fd, || real::fallocate(fd, m, o, l), |c| gust_fallocate(c, m, o, l))
}
#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, m: c_int, o: off64_t, l: off64_t) -> c_int {
    by_fd(fd, || real::fallocate64(fd, m, o, l), |c| gust_fallocate(c, m, o, l))
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, o: off_t, l: off_t) -> c_int {
    by_fd(fd, || real::posix_fallocate(fd, o, l), |c| Ok(gust_fallocate(c, 0, o, l).err().unwrap_or(0)))
}
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, o: off64_t, l: off64_t) -> c_int {
    by_fd(fd, || real::posix_fallocate64(fd, o, l), |c| Ok(gust_fallocate(c, 0, o, l).err().unwrap_or(0)))
}
