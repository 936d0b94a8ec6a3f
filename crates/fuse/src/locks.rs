//! File locks through the mount: the kernel sends fcntl's record locks (and, with
//! FUSE_FLOCK_LOCKS, flock) as GETLK, SETLK and SETLKW, and they go to the file's
//! metadata daemon through the client core (gust-client's locks.rs), so they hold
//! between nodes. Unless `--local-locks`: then the kernel keeps them, node-local.
//!
//! * Owners are the kernel's: a process's descriptor table for POSIX locks, the
//!   open file for OFD and flock locks. fuser 0.18 does not pass FUSE_LK_FLOCK on,
//!   so a flock lock is taken as a whole-file byte-range lock of its open file, as
//!   Linux's NFS client does: it conflicts with other owners' fcntl locks too.
//! * Waiting (SETLKW) holds no request thread: the request is answered from the
//!   callback connection's reader thread when the daemon grants the lock. fuser
//!   answers FUSE_INTERRUPT with ENOSYS, and the kernel then waits for the answer
//!   even for a process being killed. So a wait is answered EINTR after
//!   `WAIT_SLICE` (`Slices`), which the kernel turns into a restart of the
//!   syscall (fuse_setlk: "locking is restartable"): a process with no signal
//!   pending asks again (at the back of the queue), a killed one dies, and one
//!   whose signal handler ran gets EINTR or a restart, as its SA_RESTART says.
//! * Release: the kernel sends FLUSH with the closing process's owner at every
//!   close (POSIX: any close ends the process's locks on the file), and RELEASE at
//!   the last close of an open file, which ends its OFD and flock locks: the
//!   owners that locked through that handle and did not flush it since.
//!
//! Not for: the lock rules (the daemon's), open files (handles.rs).

use super::*;
use gust_client::{LockDone, LockMode, LockState, LOCK_END_EOF};
use std::time::Instant;

/// The kernel's "to the end of the file" (OFFSET_MAX), inclusive ends.
const KERNEL_EOF: u64 = i64::MAX as u64;

fn mode_of(typ: i32) -> Result<LockMode, Errno> {
    match typ {
        libc::F_RDLCK => Ok(LockMode::Read),
        libc::F_WRLCK => Ok(LockMode::Write),
        libc::F_UNLCK => Ok(LockMode::Unlock),
        _ => Err(Errno(libc::EINVAL)),
    }
}

/// The kernel's inclusive range as the client's (end exclusive).
fn range(start: u64, end: u64) -> Result<(u64, u64), Errno> {
    if end < start {
        return Err(Errno(libc::EINVAL));
    }
    Ok((start, if end >= KERNEL_EOF { LOCK_END_EOF } else { end + 1 }))
}

impl GustFs {
    pub(crate) fn do_getlk(&self, fh: FileHandle, owner: u64, start: u64, end: u64, typ: i32, reply: ReplyLock) {
        let r = (|| {
            let (_h, fd) = self.fd(fh)?;
            let (start, end) = range(start, end)?;
            self.client.lock_test_as(fd, owner, mode_of(typ)?, start, end)
        })();
        match r {
            Ok(None) => reply.locked(0, 0, libc::F_UNLCK, 0),
            Ok(Some(info)) => {
                let typ = if info.mode == LockMode::Write { libc::F_WRLCK } else { libc::F_RDLCK };
                let end = if info.end == LOCK_END_EOF { KERNEL_EOF } else { info.end - 1 };
                reply.locked(info.start, end, typ, info.pid.max(0) as u32)
            }
            Err(e) => reply.error(fe(e)),
        }
    }

    /// SETLK, SETLKW (`sleep`): a waiting request is answered when its wait ends.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_setlk(
        &self,
        fh: FileHandle,
        owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        // The reply goes to whichever answers first: this thread, or the reader
        // thread once a queued wait ends.
        let slot = Arc::new(Mutex::new(Some(reply)));
        let r = (|| {
            let (h, fd) = self.fd(fh)?;
            let mode = mode_of(typ)?;
            let range = range(start, end)?;
            if mode != LockMode::Unlock {
                let mut owners = h.lock_owners.lock().unwrap_or_else(|e| e.into_inner());
                if !owners.contains(&owner) {
                    owners.push(owner);
                }
            }
            let later = slot.clone();
            let done: Option<LockDone> = sleep.then(|| {
                Box::new(move |r: Result<(), Errno>| {
                    if let Some(reply) = later.lock().unwrap_or_else(|e| e.into_inner()).take() {
                        match r {
                            Ok(()) => reply.ok(),
                            Err(e) => reply.error(fe(e)),
                        }
                    }
                }) as LockDone
            });
            self.client.lock_as(fd, owner, pid as i32, mode, range, done)
        })();
        if let Ok(LockState::Queued(token)) = r {
            self.slices.waiting(self.client, token);
            return;
        }
        let reply = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (reply, r) {
            (Some(reply), Ok(_)) => reply.ok(),
            (Some(reply), Err(e)) => reply.error(fe(e)),
            (None, _) => {}
        }
    }

    /// FLUSH: the closing process's locks on the file go.
    pub(crate) fn locks_at_flush(&self, h: &Handle, owner: u64) -> Result<(), Errno> {
        h.lock_owners.lock().unwrap_or_else(|e| e.into_inner()).retain(|o| *o != owner);
        self.client.release_locks_as(h.fd, owner)
    }

    /// RELEASE: the open file's own locks go (OFD locks, flock's `owner`).
    pub(crate) fn locks_at_release(&self, h: &Handle, owner: Option<u64>) {
        let mut owners = std::mem::take(&mut *h.lock_owners.lock().unwrap_or_else(|e| e.into_inner()));
        owners.extend(owner.filter(|o| !owners.contains(o)));
        for o in owners {
            let _ = self.client.release_locks_as(h.fd, o);
        }
    }
}

/// How long the mount lets a SETLKW wait before it answers EINTR (the kernel then
/// restarts the call): a waiter being killed dies within this (plus `SLICE_TICK`).
const WAIT_SLICE: Duration = Duration::from_secs(1);
const SLICE_TICK: Duration = Duration::from_millis(250);

/// The SETLKW waits of this mount, answered EINTR once older than `WAIT_SLICE`.
pub(crate) struct Slices {
    waits: Mutex<Vec<(u64, Instant)>>,
    started: std::sync::Once,
}

impl Default for Slices {
    fn default() -> Self {
        Slices { waits: Mutex::new(Vec::new()), started: std::sync::Once::new() }
    }
}

impl Slices {
    /// A wait began: its slice runs from now (the thread starts at the first).
    fn waiting(&'static self, client: &'static Client, token: u64) {
        self.waits.lock().unwrap_or_else(|e| e.into_inner()).push((token, Instant::now()));
        self.started.call_once(|| {
            let spawned = std::thread::Builder::new().name("gust-lock-slices".into()).spawn(move || loop {
                std::thread::sleep(SLICE_TICK);
                let due: Vec<u64> = {
                    let mut w = self.waits.lock().unwrap_or_else(|e| e.into_inner());
                    let (due, keep) = w.drain(..).partition(|(_, since)| since.elapsed() >= WAIT_SLICE);
                    *w = keep;
                    due.into_iter().map(|(t, _)| t).collect()
                };
                for token in due {
                    // Still waiting: answered EINTR now. Granted or failed meanwhile:
                    // answered with that already (or about to be).
                    let _ = client.cancel_lock_wait(token);
                }
            });
            if let Err(e) = spawned {
                eprintln!("gust mount: cannot start the lock wait thread ({e}); waits last until granted");
            }
        });
    }
}
