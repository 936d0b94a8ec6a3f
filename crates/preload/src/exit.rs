//! The end of a process: no acknowledged write is lost, whatever order the
//! program's exit handlers run in, and also at `_exit`.
//!
//! The client holds work back (deferred creates, unsent sizes; gust-client's
//! exit.rs). It all goes out, and the client writes through from then on, when:
//! * `exit` runs this library's handler. It is registered at load, before `main`
//!   and so before any handler of the program's (gnulib's `close_stdout`, C++
//!   destructors of `main`'s image), which therefore run first. Writes that still
//!   come after it (another library's handler, glibc's last flush of every stdio
//!   stream, this library's cookie streams included) are written through.
//! * `_exit` or `_Exit` is called through this library (Python's `os._exit`,
//!   Perl's `POSIX::_exit`, a forked child's exit). Not in a child of `vfork` (or a
//!   raw `clone`): it shares the parent's memory, whose client is not its own to
//!   touch; such a child is known by its process id, which only a fork handler
//!   updates.
//!
//! What no library can see (a fatal signal, SIGKILL, a raw `exit_group` system
//! call) loses what was held back: docs/SEMANTICS.md.

use crate::Guard;
use libc::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// Set when the exit handler ran: a client built afterwards (by a write from a
/// later handler) starts writing through.
static ENDING: AtomicBool = AtomicBool::new(false);
/// This process's id as of load or the last fork (a fork handler's child side).
static PID: AtomicI32 = AtomicI32::new(0);
/// libc's `_exit`, looked up at load (a `vfork` child must not enter the loader).
static NEXT_EXIT: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn ending() -> bool {
    ENDING.load(Ordering::Acquire)
}

/// At load: the exit handler, and the fork handlers: before, what the client holds
/// back goes out (a no-op until a client is built); in the child, [`PID`].
pub(crate) fn install_hooks() {
    // SAFETY: getpid has no preconditions; the handlers have none either.
    unsafe {
        PID.store(libc::getpid(), Ordering::Release);
        NEXT_EXIT.store(libc::dlsym(libc::RTLD_NEXT, c"_exit".as_ptr()) as usize, Ordering::Release);
        libc::atexit(at_exit);
        libc::pthread_atfork(Some(crate::send_creates_before_fork), None, Some(after_fork_in_child));
    }
}

extern "C" fn after_fork_in_child() {
    // SAFETY: as above.
    PID.store(unsafe { libc::getpid() }, Ordering::Release);
}

extern "C" fn at_exit() {
    ENDING.store(true, Ordering::Release);
    end();
}

/// Sends what the client holds back and makes it write through. Nothing to do
/// when no client was built, or when called from inside the library.
fn end() {
    if crate::reentrant() {
        return;
    }
    if let Some(c) = crate::built_client() {
        let _g = Guard::enter();
        // A panic must not unwind into libc's exit.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.begin_exit()));
    }
}

/// Ends the process as libc's `_exit` does, after sending what the client holds
/// back (see the module doc for `vfork`).
fn exit_now(status: c_int) -> ! {
    // SAFETY: getpid has no preconditions.
    if PID.load(Ordering::Acquire) == unsafe { libc::getpid() } {
        ENDING.store(true, Ordering::Release);
        end();
    }
    // SAFETY: the next definition of `_exit` (libc's) takes a status and does not
    // return; if there is none, the system call is what it would make.
    unsafe {
        let next = NEXT_EXIT.load(Ordering::Acquire);
        if next != 0 {
            let f: extern "C" fn(c_int) -> ! = std::mem::transmute(next);
            f(status)
        }
        loop {
            libc::syscall(libc::SYS_exit_group, status);
        }
    }
}

#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    exit_now(status)
}

#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    exit_now(status)
}
