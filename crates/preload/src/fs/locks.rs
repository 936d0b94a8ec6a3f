//! File locks on GustFS descriptors: fcntl's F_GETLK, F_SETLK, F_SETLKW and their
//! F_OFD_* forms, flock and lockf, translated to the client core's locks (kept by
//! each file's metadata daemon: gust-client's locks.rs). Here only the C side:
//! struct flock, the commands' errors.

use crate::call;
use gust_client::{LockInfo, LockKind, LockMode, LOCK_END_EOF};
use libc::{c_int, off64_t};

/// fcntl's lock commands on our descriptor `c`; `arg` points at a struct flock
/// (the same layout as flock64 on 64-bit Linux).
pub(crate) unsafe fn fcntl_lock(c: i32, cmd: c_int, arg: usize) -> Result<c_int, i32> {
    let fl = arg as *mut libc::flock;
    if fl.is_null() {
        return Err(libc::EFAULT);
    }
    let ofd = matches!(cmd, libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW);
    let kind = if ofd { LockKind::Ofd } else { LockKind::Posix };
    // An OFD lock names no process: Linux wants l_pid 0 going in.
    if ofd && (*fl).l_pid != 0 {
        return Err(libc::EINVAL);
    }
    let mode = match (*fl).l_type as c_int {
        libc::F_RDLCK => LockMode::Read,
        libc::F_WRLCK => LockMode::Write,
        libc::F_UNLCK => LockMode::Unlock,
        _ => return Err(libc::EINVAL),
    };
    let (whence, l_start, l_len) = ((*fl).l_whence as c_int, (*fl).l_start, (*fl).l_len);
    let (start, end) = call(|cl| cl.lock_range(c, whence, l_start, l_len))?;
    if matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) {
        if mode == LockMode::Unlock {
            return Err(libc::EINVAL);
        }
        match call(|cl| cl.lock_test(c, kind, mode, start, end))? {
            None => (*fl).l_type = libc::F_UNLCK as libc::c_short,
            Some(info) => describe(fl, &info),
        }
        return Ok(0);
    }
    let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
    call(|cl| cl.lock(c, kind, mode, start, end, wait)).map(|_| 0)
}

/// F_GETLK's answer: the conflicting lock, from offset 0.
unsafe fn describe(fl: *mut libc::flock, info: &LockInfo) {
    (*fl).l_type = (if info.mode == LockMode::Write { libc::F_WRLCK } else { libc::F_RDLCK }) as libc::c_short;
    (*fl).l_whence = libc::SEEK_SET as libc::c_short;
    (*fl).l_start = info.start as libc::off_t;
    (*fl).l_len = if info.end == LOCK_END_EOF { 0 } else { (info.end - info.start) as libc::off_t };
    (*fl).l_pid = info.pid;
}

/// flock(2): LOCK_SH, LOCK_EX or LOCK_UN, with LOCK_NB not to wait.
pub(crate) fn flock(c: i32, op: c_int) -> Result<c_int, i32> {
    let mode = match op & !libc::LOCK_NB {
        libc::LOCK_SH => LockMode::Read,
        libc::LOCK_EX => LockMode::Write,
        libc::LOCK_UN => LockMode::Unlock,
        _ => return Err(libc::EINVAL),
    };
    let wait = op & libc::LOCK_NB == 0;
    call(|cl| cl.lock(c, LockKind::Flock, mode, 0, LOCK_END_EOF, wait)).map(|_| 0)
}

/// lockf(3): a POSIX write lock of `len` bytes from the descriptor's offset, as
/// glibc builds it on fcntl.
pub(crate) fn lockf(c: i32, cmd: c_int, len: off64_t) -> Result<c_int, i32> {
    let (start, end) = call(|cl| cl.lock_range(c, libc::SEEK_CUR, 0, len))?;
    let set = |mode, wait| call(|cl| cl.lock(c, LockKind::Posix, mode, start, end, wait)).map(|_| 0);
    match cmd {
        libc::F_ULOCK => set(LockMode::Unlock, false),
        libc::F_LOCK => set(LockMode::Write, true),
        libc::F_TLOCK => set(LockMode::Write, false),
        libc::F_TEST => match call(|cl| cl.lock_test(c, LockKind::Posix, LockMode::Write, start, end))? {
            None => Ok(0),
            Some(_) => Err(libc::EACCES),
        },
        _ => Err(libc::EINVAL),
    }
}
