//! POSIX asynchronous I/O (aio_read, aio_write, aio_fsync, lio_listio, and the calls
//! that ask after them) on our descriptors.
//!
//! glibc runs a request on a helper thread of its own that calls the kernel on the
//! descriptor directly, not through this library, and our descriptors are
//! placeholders the kernel refuses (EBADF). So Open MPI's OMPIO, whose non-blocking
//! and split-collective I/O goes through aio_write and aio_read, failed
//! (`MPI_File_iwrite`, `MPI_File_write_all_begin`: ROMIO's async and split_coll
//! tests). Here a request on our descriptor is done at once, in the caller's thread,
//! through the client core, which POSIX allows (a request may complete before its
//! submission returns); its outcome is kept by the address of its control block
//! until `aio_return`, and its notification (signal or thread) is sent then.
//! Requests on other descriptors go to glibc as before.

use crate::{call, ours, real, reentrant, set_errno};
use libc::{aiocb, c_int, c_void, sigevent, ssize_t, timespec};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Outcomes of requests done here, by control block address: (errno, return value),
/// until `aio_return` takes them.
static DONE: Mutex<BTreeMap<usize, (c_int, ssize_t)>> = Mutex::new(BTreeMap::new());

fn done() -> std::sync::MutexGuard<'static, BTreeMap<usize, (c_int, ssize_t)>> {
    DONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The client descriptor behind `fd`, if it is ours (and this is not the library's
/// own call).
fn ours_now(fd: c_int) -> Option<i32> {
    if reentrant() {
        None
    } else {
        ours(fd)
    }
}

/// Does the request of `cb` (an opcode of lio_listio's) on client descriptor `c` and
/// keeps its outcome.
unsafe fn run(cb: *mut aiocb, c: i32, op: c_int) {
    let b = &*cb;
    let r: Result<ssize_t, i32> = match op {
        libc::LIO_READ if b.aio_offset >= 0 => {
            let buf = std::slice::from_raw_parts_mut(b.aio_buf.cast::<u8>(), b.aio_nbytes);
            call(|cl| cl.pread(c, buf, b.aio_offset as u64)).map(|n| n as ssize_t)
        }
        libc::LIO_WRITE if b.aio_offset >= 0 => {
            let buf = std::slice::from_raw_parts(b.aio_buf.cast::<u8>().cast_const(), b.aio_nbytes);
            call(|cl| cl.pwrite(c, buf, b.aio_offset as u64)).map(|n| n as ssize_t)
        }
        libc::LIO_READ | libc::LIO_WRITE => Err(libc::EINVAL),
        // aio_fsync's O_SYNC and O_DSYNC alike.
        _ => call(|cl| cl.fsync(c)).map(|()| 0),
    };
    done().insert(
        cb as usize,
        match r {
            Ok(n) => (0, n),
            Err(e) => (e, -1),
        },
    );
}

/// Sends the notification `ev` asks for a completed request.
unsafe fn notify(ev: &sigevent) {
    match ev.sigev_notify {
        libc::SIGEV_SIGNAL => {
            libc::sigqueue(libc::getpid(), ev.sigev_signo, ev.sigev_value);
        }
        libc::SIGEV_THREAD => {
            // glibc's sigevent: the function and its attributes share the union
            // that starts where `sigev_notify_thread_id` is.
            let at = std::ptr::addr_of!(ev.sigev_notify_thread_id).cast::<Option<extern "C" fn(libc::sigval)>>();
            if let Some(f) = *at {
                let value = ev.sigev_value.sival_ptr as usize;
                std::thread::spawn(move || f(libc::sigval { sival_ptr: value as *mut c_void }));
            }
        }
        libc::SIGEV_THREAD_ID => {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), ev.sigev_notify_thread_id, ev.sigev_signo);
        }
        _ => {}
    }
}

/// One request on our descriptor: done now, then notified.
unsafe fn submit(cb: *mut aiocb, op: c_int, real: impl FnOnce() -> c_int) -> c_int {
    if cb.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    match ours_now((*cb).aio_fildes) {
        None => real(),
        Some(c) => {
            run(cb, c, op);
            notify(&(*cb).aio_sigevent);
            0
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn aio_read(cb: *mut aiocb) -> c_int {
    submit(cb, libc::LIO_READ, || real::aio_read(cb))
}
#[no_mangle]
pub unsafe extern "C" fn aio_read64(cb: *mut aiocb) -> c_int {
    submit(cb, libc::LIO_READ, || real::aio_read64(cb))
}
#[no_mangle]
pub unsafe extern "C" fn aio_write(cb: *mut aiocb) -> c_int {
    submit(cb, libc::LIO_WRITE, || real::aio_write(cb))
}
#[no_mangle]
pub unsafe extern "C" fn aio_write64(cb: *mut aiocb) -> c_int {
    submit(cb, libc::LIO_WRITE, || real::aio_write64(cb))
}
#[no_mangle]
pub unsafe extern "C" fn aio_fsync(op: c_int, cb: *mut aiocb) -> c_int {
    if op != libc::O_SYNC && op != libc::O_DSYNC {
        set_errno(libc::EINVAL);
        return -1;
    }
    submit(cb, libc::LIO_NOP, || real::aio_fsync(op, cb))
}
#[no_mangle]
pub unsafe extern "C" fn aio_fsync64(op: c_int, cb: *mut aiocb) -> c_int {
    aio_fsync(op, cb)
}

/// The errno of a request done here (0: done, never EINPROGRESS), else glibc's.
#[no_mangle]
pub unsafe extern "C" fn aio_error(cb: *const aiocb) -> c_int {
    match done().get(&(cb as usize)) {
        Some((e, _)) => *e,
        None => real::aio_error(cb),
    }
}
#[no_mangle]
pub unsafe extern "C" fn aio_error64(cb: *const aiocb) -> c_int {
    aio_error(cb)
}

/// The return value of a request done here, once (its outcome is forgotten).
#[no_mangle]
pub unsafe extern "C" fn aio_return(cb: *mut aiocb) -> ssize_t {
    match done().remove(&(cb as usize)) {
        Some((0, n)) => n,
        Some((e, _)) => {
            set_errno(e);
            -1
        }
        None => real::aio_return(cb),
    }
}
#[no_mangle]
pub unsafe extern "C" fn aio_return64(cb: *mut aiocb) -> ssize_t {
    aio_return(cb)
}

/// Returns at once if any listed request was done here; else glibc waits.
#[no_mangle]
pub unsafe extern "C" fn aio_suspend(list: *const *const aiocb, n: c_int, timeout: *const timespec) -> c_int {
    let any_done = {
        let d = done();
        (0..n.max(0) as usize).any(|i| {
            let cb = *list.add(i);
            !cb.is_null() && d.contains_key(&(cb as usize))
        })
    };
    if any_done {
        0
    } else {
        real::aio_suspend(list, n, timeout)
    }
}
#[no_mangle]
pub unsafe extern "C" fn aio_suspend64(list: *const *const aiocb, n: c_int, timeout: *const timespec) -> c_int {
    aio_suspend(list, n, timeout)
}

/// Requests on our descriptors are done by the time anyone can cancel them.
#[no_mangle]
pub unsafe extern "C" fn aio_cancel(fd: c_int, cb: *mut aiocb) -> c_int {
    match ours_now(fd) {
        Some(_) => libc::AIO_ALLDONE,
        None => real::aio_cancel(fd, cb),
    }
}
#[no_mangle]
pub unsafe extern "C" fn aio_cancel64(fd: c_int, cb: *mut aiocb) -> c_int {
    aio_cancel(fd, cb)
}

/// A list of requests: those on our descriptors are done now, the others go to
/// glibc's lio_listio (which waits for them under LIO_WAIT and sends the list's
/// notification when they are done); a list with none of glibc's is notified here.
#[no_mangle]
pub unsafe extern "C" fn lio_listio(mode: c_int, list: *const *mut aiocb, n: c_int, sig: *mut sigevent) -> c_int {
    let mut rest: Vec<*mut aiocb> = Vec::new();
    for i in 0..n.max(0) as usize {
        let cb = *list.add(i);
        if cb.is_null() {
            continue;
        }
        match ours_now((*cb).aio_fildes) {
            Some(c) if (*cb).aio_lio_opcode != libc::LIO_NOP => run(cb, c, (*cb).aio_lio_opcode),
            Some(_) => {}
            None => rest.push(cb),
        }
    }
    if !rest.is_empty() {
        return real::lio_listio(mode, rest.as_ptr(), rest.len() as c_int, sig);
    }
    if mode == libc::LIO_NOWAIT && !sig.is_null() {
        notify(&*sig);
    }
    let failed = (0..n.max(0) as usize).any(|i| {
        let cb = *list.add(i);
        !cb.is_null() && done().get(&(cb as usize)).is_some_and(|(e, _)| *e != 0)
    });
    if mode == libc::LIO_WAIT && failed {
        set_errno(libc::EIO);
        return -1;
    }
    0
}
#[no_mangle]
pub unsafe extern "C" fn lio_listio64(mode: c_int, list: *const *mut aiocb, n: c_int, sig: *mut sigevent) -> c_int {
    lio_listio(mode, list, n, sig)
}
