//! copy_file_range and sendfile with a GustFS side: emulated as a read into a bounce
//! buffer and a write from it, through the interposed read and write, so either side
//! may be GustFS or not.
//!
//! Sketch of the cost that shaped this: `cp` asks copy_file_range for a large length
//! (often SSIZE_MAX) twice per file: once to copy, once to find the end. A buffer sized
//! by the request and zeroed per call cost an 8 MiB allocation, 2,048 page faults and
//! their zeroing per call (0.8 ms of CPU, 1.6 s for 500 files of 4 KiB). Here the
//! length is cut to what the source still holds (one fstat; for a GustFS source a stat
//! of its metadata, cheaper than reading chunks that are not there), the buffer is kept
//! per thread and reused, and only bytes newly grown into it are ever initialised.
//!
//! Not for: server-side copies between daemons (the data crosses this process).

use crate::fs::data::{lseek64, pread64, pwrite64, read, write};
use crate::fs::stat::fstat64;
use crate::{ours, real, reentrant, ret};
use libc::{c_int, c_uint, off64_t, off_t, size_t, ssize_t};
use std::cell::RefCell;

/// Largest single transfer one emulated call moves; callers loop on short copies.
const COPY_CALL_BYTES_MAX: usize = 8 << 20;

thread_local! {
    /// The bounce buffer, kept between calls: at most COPY_CALL_BYTES_MAX per thread
    /// that ever copied, freed when the thread exits.
    static COPY_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Reads from any descriptor (ours or not), at `off` or the current offset.
unsafe fn any_read(fd: c_int, b: &mut [u8], off: Option<i64>) -> Result<usize, i32> {
    let n = match off {
        Some(o) => pread64(fd, b.as_mut_ptr().cast(), b.len(), o),
        None => read(fd, b.as_mut_ptr().cast(), b.len()),
    };
    if n < 0 {
        Err(crate::get_errno())
    } else {
        Ok(n as usize)
    }
}

unsafe fn any_write_all(fd: c_int, b: &[u8], off: Option<i64>) -> Result<usize, i32> {
    let mut done = 0;
    while done < b.len() {
        let rest = &b[done..];
        let n = match off {
            Some(o) => pwrite64(fd, rest.as_ptr().cast(), rest.len(), o + done as i64),
            None => write(fd, rest.as_ptr().cast(), rest.len()),
        };
        if n < 0 {
            if done > 0 {
                return Ok(done);
            }
            return Err(crate::get_errno());
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done)
}

/// A zero-length write: only the descriptor's checks.
unsafe fn any_write_zero(fd: c_int, off: Option<i64>) -> Result<(), i32> {
    let b = [0u8; 1];
    let n = match off {
        Some(o) => pwrite64(fd, b.as_ptr().cast(), 0, o),
        None => write(fd, b.as_ptr().cast(), 0),
    };
    if n < 0 {
        Err(crate::get_errno())
    } else {
        Ok(())
    }
}

/// Bytes a regular file still holds from `off` (or its current offset); `None` when
/// that cannot be known cheaply (a pipe, a socket, a failed fstat): then the request
/// alone bounds the read.
unsafe fn source_remaining(fd: c_int, off: Option<i64>) -> Option<u64> {
    let mut st: libc::stat64 = std::mem::zeroed();
    if fstat64(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    // /proc and /sys files say 0 bytes and hold more; a GustFS size is exact.
    if st.st_size == 0 && ours(fd).is_none() {
        return None;
    }
    let pos = match off {
        Some(o) => o,
        None => lseek64(fd, 0, libc::SEEK_CUR),
    };
    if pos < 0 {
        return None;
    }
    Some((st.st_size as u64).saturating_sub(pos as u64))
}

/// One bounded read then write through `buf`, which grows to `want` bytes if smaller.
unsafe fn copy_through(
    buf: &mut Vec<u8>,
    want: usize,
    fin: c_int,
    off_in: *mut i64,
    fout: c_int,
    off_out: *mut i64,
) -> Result<usize, i32> {
    if buf.len() < want {
        // Zeroes only the new tail, once per thread and size; never what a read is
        // about to overwrite again.
        buf.resize(want, 0);
    }
    let tmp = &mut buf[..want];
    let oi = if off_in.is_null() { None } else { Some(*off_in) };
    let got = any_read(fin, tmp, oi)?;
    if got == 0 {
        return Ok(0);
    }
    let oo = if off_out.is_null() { None } else { Some(*off_out) };
    let put = any_write_all(fout, &tmp[..got], oo)?;
    if let Some(o) = oi {
        *off_in = o + put as i64;
    } else if put < got {
        // Give back what was read and not written.
        lseek64(fin, put as i64 - got as i64, libc::SEEK_CUR);
    }
    if let Some(o) = oo {
        *off_out = o + put as i64;
    }
    Ok(put)
}

unsafe fn copy_emulated(fin: c_int, off_in: *mut i64, fout: c_int, off_out: *mut i64, n: usize) -> ssize_t {
    let oi = if off_in.is_null() { None } else { Some(*off_in) };
    let oo = if off_out.is_null() { None } else { Some(*off_out) };
    let mut want = n.min(COPY_CALL_BYTES_MAX);
    if let Some(left) = source_remaining(fin, oi) {
        want = want.min(left as usize);
    }
    if want == 0 {
        // Nothing to move, but a descriptor of the wrong mode is still EBADF, as in
        // Linux: zero-length calls check without moving anything.
        let r = any_read(fin, &mut [], oi).and_then(|_| any_write_zero(fout, oo));
        return ret(r.map(|_| 0));
    }
    let r = COPY_BUF
        .try_with(|b| match b.try_borrow_mut() {
            Ok(mut buf) => copy_through(&mut buf, want, fin, off_in, fout, off_out),
            // Reentered on this thread (a signal handler copying): a buffer of its own.
            Err(_) => copy_through(&mut Vec::new(), want, fin, off_in, fout, off_out),
        })
        // Thread teardown: thread-locals are gone.
        .unwrap_or_else(|_| copy_through(&mut Vec::new(), want, fin, off_in, fout, off_out));
    ret(r.map(|n| n as ssize_t))
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    a: c_int,
    oa: *mut off64_t,
    b: c_int,
    ob: *mut off64_t,
    n: size_t,
    f: c_uint,
) -> ssize_t {
    if reentrant() || (ours(a).is_none() && ours(b).is_none()) {
        return real::copy_file_range(a, oa, b, ob, n, f);
    }
    if f != 0 {
        return ret(Err(libc::EINVAL));
    }
    copy_emulated(a, oa, b, ob, n)
}
#[no_mangle]
pub unsafe extern "C" fn sendfile(o: c_int, i: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if reentrant() || (ours(o).is_none() && ours(i).is_none()) {
        return real::sendfile(o, i, off, n);
    }
    copy_emulated(i, off, o, std::ptr::null_mut(), n)
}
#[no_mangle]
pub unsafe extern "C" fn sendfile64(o: c_int, i: c_int, off: *mut off64_t, n: size_t) -> ssize_t {
    if reentrant() || (ours(o).is_none() && ours(i).is_none()) {
        return real::sendfile64(o, i, off, n);
    }
    copy_emulated(i, off, o, std::ptr::null_mut(), n)
}
