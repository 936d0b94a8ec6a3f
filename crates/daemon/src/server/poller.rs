//! A thin wrapper over epoll for the worker threads: one-shot interest, one event
//! per wait.
//!
//! One-shot (EPOLLONESHOT) is what lets every worker wait on the same epoll set: an
//! event disarms its descriptor, so exactly one worker owns a connection until that
//! worker re-arms it; no two threads ever serve one connection at once, and no lock
//! is held while waiting. One event per wait (maxevents 1) keeps a worker from
//! claiming several connections and serving them one after another while other
//! workers sleep.

use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Interest {
    Read,
    Write,
}

impl Interest {
    fn bits(self) -> u32 {
        let base = (libc::EPOLLONESHOT | libc::EPOLLRDHUP) as u32;
        match self {
            Interest::Read => base | libc::EPOLLIN as u32,
            Interest::Write => base | libc::EPOLLOUT as u32,
        }
    }
}

pub(crate) struct Poller {
    epfd: OwnedFd,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Poller {
    pub fn new() -> io::Result<Poller> {
        // SAFETY: epoll_create1 has no preconditions; the result is checked.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a fresh descriptor this process owns alone.
        Ok(Poller { epfd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: interest.bits(), u64: token };
        // SAFETY: a valid epoll descriptor and an event struct we own.
        cvt(unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) }).map(|_| ())
    }

    /// Starts watching `fd`, armed for `interest`.
    pub fn add(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, interest)
    }

    /// Arms `fd` again after its event was handled. Level-triggered underneath: if
    /// the condition already holds (bytes are waiting), the event comes at once.
    pub fn rearm(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, interest)
    }

    pub fn delete(&self, fd: RawFd) {
        // SAFETY: as in ctl; a null event is allowed for EPOLL_CTL_DEL.
        unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    /// Waits for one event: its token. None on timeout or interruption.
    pub fn wait(&self, timeout_ms: i32) -> Option<u64> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for exactly one event, as maxevents says.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), &mut ev, 1, timeout_ms) };
        (n == 1).then_some(ev.u64)
    }
}
