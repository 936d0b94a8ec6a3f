//! stdio: fopen/fopen64/fdopen on GustFS, and the standard streams.
//!
//! glibc's FILE does its I/O with internal calls that cannot be interposed, so a
//! GustFS stream is a `fopencookie` stream whose callbacks call this library's
//! read/write/lseek/close. Its `_fileno` is set to the placeholder descriptor so
//! that `fileno()` (and fstat/fadvise on it) work.
//!
//! The standard streams: when descriptor 0, 1 or 2 becomes a GustFS descriptor (a
//! shell redirection: open + dup2, or a descriptor inherited across exec), the
//! `stdin`/`stdout`/`stderr` variable is pointed at a cookie stream on it, and back
//! at the original stream when the descriptor stops being ours. Buffered data is
//! flushed before every such switch, so it lands where it was written.

#![allow(clippy::missing_safety_doc)]

use crate::fs::open::gust_open;
use crate::fs::{by_fd, by_path};
use crate::{real, tracked, Guard};
use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t, FILE};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

#[repr(C)]
struct CookieFns {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, fns: CookieFns) -> *mut FILE;
}

/// Offset of `_fileno` in glibc's `struct _IO_FILE` on 64-bit targets (an int and
/// padding, then 13 pointers); checked by the e2e tests through fileno().
#[cfg(all(target_env = "gnu", target_pointer_width = "64"))]
const FILENO_OFFSET: usize = 112;

struct Cookie {
    fd: c_int,
    /// A standard-stream cookie: closing the FILE leaves the descriptor alone.
    std: bool,
}

static STD_CLOSED: [AtomicBool; 3] = [AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false)];

unsafe extern "C" fn ck_read(c: *mut c_void, b: *mut c_char, n: size_t) -> ssize_t {
    crate::fs::data::read((*(c as *mut Cookie)).fd, b.cast(), n)
}

unsafe extern "C" fn ck_write(c: *mut c_void, b: *const c_char, n: size_t) -> ssize_t {
    let fd = (*(c as *mut Cookie)).fd;
    let mut done = 0usize;
    while done < n {
        let w = crate::fs::data::write(fd, b.add(done).cast(), n - done);
        if w <= 0 {
            return if done > 0 { done as ssize_t } else { -1 };
        }
        done += w as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn ck_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let r = crate::fs::data::lseek64((*(c as *mut Cookie)).fd, *off, whence);
    if r < 0 {
        return -1;
    }
    *off = r;
    0
}

unsafe extern "C" fn ck_close(c: *mut c_void) -> c_int {
    let ck = Box::from_raw(c as *mut Cookie);
    if ck.std {
        if (0..3).contains(&ck.fd) {
            STD_CLOSED[ck.fd as usize].store(true, Ordering::Release);
        }
        0
    } else {
        crate::fs::open::close(ck.fd)
    }
}

unsafe fn cookie_file(fd: c_int, mode: *const c_char, std: bool) -> *mut FILE {
    let ck = Box::into_raw(Box::new(Cookie { fd, std }));
    let fns = CookieFns { read: Some(ck_read), write: Some(ck_write), seek: Some(ck_seek), close: Some(ck_close) };
    let f = {
        let _g = Guard::enter();
        fopencookie(ck.cast(), mode, fns)
    };
    if f.is_null() {
        drop(Box::from_raw(ck));
        return f;
    }
    #[cfg(all(target_env = "gnu", target_pointer_width = "64"))]
    {
        *((f as *mut u8).add(FILENO_OFFSET) as *mut c_int) = fd;
    }
    f
}

/// Open flags of an fopen mode string ("r", "w+", "ae", "wx", ...).
pub(crate) fn mode_flags(m: &[u8]) -> Option<c_int> {
    let plus = m.contains(&b'+');
    let mut f = match m.first()? {
        b'r' => {
            if plus {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            }
        }
        b'w' => libc::O_CREAT | libc::O_TRUNC | if plus { libc::O_RDWR } else { libc::O_WRONLY },
        b'a' => libc::O_CREAT | libc::O_APPEND | if plus { libc::O_RDWR } else { libc::O_WRONLY },
        _ => return None,
    };
    for c in &m[1..] {
        match c {
            b'x' => f |= libc::O_EXCL,
            b'e' => f |= libc::O_CLOEXEC,
            b',' => break,
            _ => {}
        }
    }
    Some(f)
}

unsafe fn fopen_any(
    p: *const c_char,
    mode: *const c_char,
    realf: impl FnOnce(*const c_char) -> *mut FILE,
) -> *mut FILE {
    if mode.is_null() {
        return realf(p);
    }
    by_path(libc::AT_FDCWD, p, realf, |i| {
        let flags = mode_flags(std::ffi::CStr::from_ptr(mode).to_bytes()).ok_or(libc::EINVAL)?;
        let fd = gust_open(&i, flags, 0o666)?;
        let f = cookie_file(fd, mode, false);
        if f.is_null() {
            let e = crate::get_errno();
            crate::fs::open::close(fd);
            return Err(e);
        }
        Ok(f)
    })
}

#[no_mangle]
pub unsafe extern "C" fn fopen(p: *const c_char, m: *const c_char) -> *mut FILE {
    fopen_any(p, m, |p| real::fopen(p, m))
}
#[no_mangle]
pub unsafe extern "C" fn fopen64(p: *const c_char, m: *const c_char) -> *mut FILE {
    fopen_any(p, m, |p| real::fopen64(p, m))
}
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, m: *const c_char) -> *mut FILE {
    by_fd(fd, || real::fdopen(fd, m), |_| Ok(cookie_file(fd, m, false)))
}

/// freopen onto a GustFS path. A standard stream keeps its identity: the new file is
/// opened and dup2'd onto descriptor 0, 1 or 2, which swaps in a GustFS stream (see
/// below). Another stream is closed and a new one returned (callers use freopen's
/// return value; the old pointer is not reused, unlike glibc).
unsafe fn freopen_any(
    p: *const c_char,
    mode: *const c_char,
    s: *mut FILE,
    realf: impl FnOnce(*const c_char) -> *mut FILE,
) -> *mut FILE {
    if p.is_null() || mode.is_null() || s.is_null() {
        return realf(p);
    }
    by_path(libc::AT_FDCWD, p, realf, |i| {
        let flags = mode_flags(std::ffi::CStr::from_ptr(mode).to_bytes()).ok_or(libc::EINVAL)?;
        for k in 0..3 {
            let var = std_var(k);
            if !var.is_null() && *var == s {
                libc::fflush(s);
                let fd = gust_open(&i, flags | libc::O_CLOEXEC, 0o666)?;
                let r = crate::fs::descriptors::dup2(fd, k);
                let e = crate::get_errno();
                crate::fs::open::close(fd);
                if r < 0 {
                    return Err(e);
                }
                return Ok(*var);
            }
        }
        libc::fclose(s);
        Ok(fopen_any(p, mode, |p| real::fopen(p, mode)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn freopen(p: *const c_char, m: *const c_char, s: *mut FILE) -> *mut FILE {
    freopen_any(p, m, s, |p| real::freopen(p, m, s))
}
#[no_mangle]
pub unsafe extern "C" fn freopen64(p: *const c_char, m: *const c_char, s: *mut FILE) -> *mut FILE {
    freopen_any(p, m, s, |p| real::freopen64(p, m, s))
}

// ----- standard streams ---------------------------------------------------------------

/// (original FILE, our cookie FILE) per standard descriptor, while swapped.
static SWAPS: Mutex<[Option<(usize, usize)>; 3]> = Mutex::new([None; 3]);

unsafe fn std_var(fd: c_int) -> *mut *mut FILE {
    let name: &[u8] = match fd {
        0 => b"stdin\0",
        1 => b"stdout\0",
        _ => b"stderr\0",
    };
    libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) as *mut *mut FILE
}

fn swapped(fd: c_int) -> bool {
    SWAPS.lock().unwrap_or_else(|e| e.into_inner())[fd as usize].is_some()
}

/// Before descriptor `fd` changes: flush its standard stream, so buffered data goes
/// where it was written. Only when GustFS is involved.
pub(crate) unsafe fn std_before_change(fd: c_int) {
    if !(0..3).contains(&fd) || fd == 0 {
        return;
    }
    if !tracked(fd) && !swapped(fd) {
        return;
    }
    let v = std_var(fd);
    if !v.is_null() && !(*v).is_null() && !STD_CLOSED[fd as usize].load(Ordering::Acquire) {
        libc::fflush(*v);
    }
}

/// After descriptor `fd` changed: make its standard stream match.
pub(crate) unsafe fn std_sync(fd: c_int) {
    if !(0..3).contains(&fd) {
        return;
    }
    let v = std_var(fd);
    if v.is_null() {
        return;
    }
    let is_ours = tracked(fd);
    let mut s = SWAPS.lock().unwrap_or_else(|e| e.into_inner());
    match (is_ours, s[fd as usize]) {
        (true, None) => {
            if !(*v).is_null() && fd != 0 {
                libc::fflush(*v);
            }
            STD_CLOSED[fd as usize].store(false, Ordering::Release);
            let mode: &[u8] = if fd == 0 { b"r\0" } else { b"w\0" };
            let f = cookie_file(fd, mode.as_ptr().cast(), true);
            if f.is_null() {
                return;
            }
            if fd == 2 {
                libc::setvbuf(f, std::ptr::null_mut(), libc::_IONBF, 0);
            }
            s[fd as usize] = Some((*v as usize, f as usize));
            *v = f;
        }
        (false, Some((orig, f))) => {
            s[fd as usize] = None;
            if *v == f as *mut FILE {
                *v = orig as *mut FILE;
            }
            if !STD_CLOSED[fd as usize].swap(false, Ordering::AcqRel) {
                libc::fclose(f as *mut FILE);
                STD_CLOSED[fd as usize].store(false, Ordering::Release);
            }
        }
        _ => {}
    }
}
