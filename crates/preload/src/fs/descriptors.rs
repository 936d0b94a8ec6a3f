//! Descriptor calls: fcntl, dup, dup2, dup3, ioctl, flock, lockf, isatty, and socket
//! (to keep the client core's own sockets out of the application's way).

use super::by_fd;
use crate::{call, ours, real, reentrant, ret, set_errno, stdio, tracked, unregister};
use libc::{c_int, c_ulong, off64_t, off_t};

/// fcntl on our descriptor. Descriptor flags live on the placeholder (so
/// close-on-exec is the kernel's); status flags are the open flags; record locks
/// are the file's metadata daemon's (locks.rs).
unsafe fn gust_fcntl(fd: c_int, c: i32, cmd: c_int, arg: usize) -> Result<c_int, i32> {
    match cmd {
        // libc's answer, errno and all.
        libc::F_GETFD | libc::F_SETFD => Ok(real::fcntl(fd, cmd, arg)),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let nfd = real::fcntl(fd, cmd, arg);
            if nfd < 0 {
                return Ok(nfd);
            }
            dup_into(c, nfd)
        }
        libc::F_GETFL => call(|cl| cl.fd_info(c)).map(|(_, f)| f & !libc::O_CLOEXEC | libc::O_LARGEFILE),
        libc::F_SETFL => {
            let (_, f) = call(|cl| cl.fd_info(c))?;
            // Only O_APPEND changes what GustFS does, and it cannot change after open.
            if (f ^ arg as c_int) & libc::O_APPEND != 0 {
                Err(libc::EINVAL)
            } else {
                Ok(0)
            }
        }
        libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
            super::locks::fcntl_lock(c, cmd, arg)
        }
        _ => Err(libc::EINVAL),
    }
}

/// Registers kernel descriptor `nfd` (already a copy of a placeholder) as a dup of `c`.
unsafe fn dup_into(c: i32, nfd: c_int) -> Result<c_int, i32> {
    if nfd as usize >= crate::FD_MAX {
        real::close(nfd);
        return Err(libc::EMFILE);
    }
    match call(|cl| cl.dup(c)) {
        Ok(nc) => {
            crate::register(nfd, nc);
            stdio::std_sync(nfd);
            Ok(nfd)
        }
        Err(e) => {
            real::close(nfd);
            Err(e)
        }
    }
}

/// A socket the client core opens is moved above [`crate::high_fd_base`].
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let fd = real::socket(domain, ty, proto);
    if fd < 0 || !reentrant() {
        return fd;
    }
    let high = real::fcntl(fd, libc::F_DUPFD_CLOEXEC, crate::high_fd_base() as usize);
    if high < 0 {
        return fd;
    }
    real::close(fd);
    high
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    if reentrant() {
        // The client core's socket clones (try_clone) stay high as well.
        let arg = if cmd == libc::F_DUPFD_CLOEXEC { arg.max(crate::high_fd_base() as usize) } else { arg };
        return real::fcntl(fd, cmd, arg);
    }
    by_fd(fd, || real::fcntl(fd, cmd, arg), |c| gust_fcntl(fd, c, cmd, arg))
}
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    by_fd(fd, || real::fcntl64(fd, cmd, arg), |c| gust_fcntl(fd, c, cmd, arg))
}
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    by_fd(fd, || real::ioctl(fd, req, arg), |_| Err(libc::ENOTTY))
}
#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    by_fd(fd, || real::flock(fd, op), |c| super::locks::flock(c, op))
}
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, op: c_int, l: off_t) -> c_int {
    by_fd(fd, || real::lockf(fd, op, l), |c| super::locks::lockf(c, op, l))
}
#[no_mangle]
pub unsafe extern "C" fn lockf64(fd: c_int, op: c_int, l: off64_t) -> c_int {
    by_fd(fd, || real::lockf64(fd, op, l), |c| super::locks::lockf(c, op, l))
}
/// isatty says "no" with 0 (not -1) and errno ENOTTY.
#[no_mangle]
pub unsafe extern "C" fn isatty(fd: c_int) -> c_int {
    by_fd(
        fd,
        || real::isatty(fd),
        |_| {
            set_errno(libc::ENOTTY);
            Ok(0)
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    by_fd(
        fd,
        || real::dup(fd),
        |c| match real::dup(fd) {
            nfd if nfd < 0 => Ok(nfd),
            nfd => dup_into(c, nfd),
        },
    )
}

/// dup2/dup3: `new` is replaced atomically by the kernel; our bookkeeping follows.
unsafe fn dup_onto(old: c_int, new: c_int, flags: c_int, three: bool) -> c_int {
    let src = ours(old);
    if src.is_none() && !tracked(new) {
        return if three { real::dup3(old, new, flags) } else { real::dup2(old, new) };
    }
    if old == new {
        return if three { ret(Err(libc::EINVAL)) } else { new };
    }
    stdio::std_before_change(new);
    let r = if three { real::dup3(old, new, flags) } else { real::dup2(old, new) };
    if r < 0 {
        return r;
    }
    crate::dir::forget_fd(new);
    if let Some(prev) = unregister(new) {
        let _ = call(|cl| cl.close(prev));
    }
    if let Some(c) = src {
        match call(|cl| cl.dup(c)) {
            Ok(nc) => crate::register(new, nc),
            Err(e) => {
                real::close(new);
                stdio::std_sync(new);
                return ret(Err(e));
            }
        }
    }
    stdio::std_sync(new);
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if reentrant() {
        return real::dup2(old, new);
    }
    dup_onto(old, new, 0, false)
}
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, f: c_int) -> c_int {
    if reentrant() {
        return real::dup3(old, new, f);
    }
    dup_onto(old, new, f, true)
}
