//! File locks through the C API (`gust_flock`, `gust_lock` in gust.h): the client
//! core's locks, kept by each file's metadata daemon, with flock's and fcntl's
//! arguments. Owners as for the preload library: the process for POSIX locks, the
//! open file (shared by `gust_dup`) for OFD and flock locks.

use super::*;
use gust_client::{LockKind, LockMode, LOCK_END_EOF};

#[no_mangle]
pub unsafe extern "C" fn gust_flock(fs: *mut gust_fs, fd: c_int, operation: c_int) -> c_int {
    guard("gust_flock", -1, || {
        let fs = fs_ref(fs)?;
        let mode = match operation & !libc::LOCK_NB {
            libc::LOCK_SH => LockMode::Read,
            libc::LOCK_EX => LockMode::Write,
            libc::LOCK_UN => LockMode::Unlock,
            _ => {
                return Err(failure(
                    libc::EINVAL,
                    format!("flock operation {operation} is not LOCK_SH, LOCK_EX or LOCK_UN"),
                ))
            }
        };
        let wait = operation & libc::LOCK_NB == 0;
        fs.client
            .lock(fd, LockKind::Flock, mode, 0, LOCK_END_EOF, wait)
            .map_err(|e| fs.fail(&gust_fs::fd_subject(fd), e))?;
        Ok(0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn gust_lock(fs: *mut gust_fs, fd: c_int, cmd: c_int, lock: *mut libc::flock) -> c_int {
    guard("gust_lock", -1, || {
        let fs = fs_ref(fs)?;
        nonnull(lock, "lock")?;
        let l = &mut *lock;
        let kind = match cmd {
            libc::F_GETLK | libc::F_SETLK | libc::F_SETLKW => LockKind::Posix,
            libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW if l.l_pid == 0 => LockKind::Ofd,
            libc::F_OFD_GETLK | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
                return Err(failure(libc::EINVAL, "an OFD lock's l_pid must be 0"))
            }
            _ => return Err(failure(libc::EINVAL, format!("lock command {cmd}"))),
        };
        let mode = match l.l_type as c_int {
            libc::F_RDLCK => LockMode::Read,
            libc::F_WRLCK => LockMode::Write,
            libc::F_UNLCK if !matches!(cmd, libc::F_GETLK | libc::F_OFD_GETLK) => LockMode::Unlock,
            t => return Err(failure(libc::EINVAL, format!("lock type {t}"))),
        };
        let subject = gust_fs::fd_subject(fd);
        let (start, end) =
            fs.client.lock_range(fd, l.l_whence as c_int, l.l_start, l.l_len).map_err(|e| fs.fail(&subject, e))?;
        match cmd {
            libc::F_GETLK | libc::F_OFD_GETLK => {
                match fs.client.lock_test(fd, kind, mode, start, end).map_err(|e| fs.fail(&subject, e))? {
                    None => l.l_type = libc::F_UNLCK as libc::c_short,
                    Some(info) => {
                        let write = info.mode == LockMode::Write;
                        l.l_type = (if write { libc::F_WRLCK } else { libc::F_RDLCK }) as libc::c_short;
                        l.l_whence = libc::SEEK_SET as libc::c_short;
                        l.l_start = info.start as off_t;
                        l.l_len = if info.end == LOCK_END_EOF { 0 } else { (info.end - info.start) as off_t };
                        l.l_pid = info.pid;
                    }
                }
            }
            _ => {
                let wait = matches!(cmd, libc::F_SETLKW | libc::F_OFD_SETLKW);
                fs.client.lock(fd, kind, mode, start, end, wait).map_err(|e| fs.fail(&subject, e))?;
            }
        }
        Ok(0)
    })
}
