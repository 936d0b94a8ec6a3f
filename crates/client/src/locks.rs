//! File locks (flock, fcntl POSIX and OFD locks) kept by each file's metadata
//! daemon (docs/DESIGN.md, "Locks"; the daemon's half is gust-daemon's locks.rs and
//! lock_service.rs).
//!
//! * Where: the daemon holding the descriptor's path's record, or with copies the
//!   first member of its group not found down. Before its first lock there, this
//!   process opens its `callback` connection to that daemon (grants.rs): the
//!   daemon keeps this process's locks as long as that connection lives, and sends
//!   `lock_granted` on it when a queued wait ends.
//! * Owners: the process for POSIX locks (`PROCESS_OWNER`; a child after fork is
//!   another client, so POSIX locks are not inherited, as POSIX says), an open file
//!   description for OFD and flock locks (`OpenFile::lock_owner`), and whatever
//!   the FUSE kernel module names through the `*_as` calls.
//! * Release: an explicit unlock; any close of a descriptor of the file for the
//!   process's POSIX locks; the last close of a description for its OFD and flock
//!   locks; the end of the callback connection (exit, kill, exec) for all.
//! * Waiting: F_SETLKW and blocking flock wait on an eventfd that the callback
//!   connection's reader thread writes when `lock_granted` comes. A signal handler
//!   that runs meanwhile makes the wait give up (`lock_cancel`) and return EINTR,
//!   unless the lock was granted first. The FUSE mount waits without a thread:
//!   the kernel's request is answered from the reader thread.
//! * What a lock orders: before a lock or unlock request this process sends what
//!   it held back (deferred creates, batched sizes, write-behind buffers), and
//!   after a lock is granted it forgets the stats listings gave it, so that data
//!   written under a lock is seen by the next holder.
//!
//! Not for: the rules of conflicts (the daemon's), fcntl's struct flock (front ends).

use crate::open_files::OpenFile;
use crate::{Client, Errno, Result};
use gust_proto::{LockInfo, LockKind, LockMode, Request, Response, LOCK_END_EOF};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The owner number of this process's POSIX locks. Open file descriptions get
/// numbers from 1 (`next_description_owner`), so the two never meet.
pub const PROCESS_OWNER: u64 = 0;

/// Called once a queued wait ends: Ok when the lock is held.
pub type LockDone = Box<dyn FnOnce(Result<()>) + Send>;

/// What a lock request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    /// Held (or released) now.
    Held,
    /// Waiting under this token: its `LockDone` is called when the wait ends
    /// (`cancel_lock_wait` ends it early).
    Queued(u64),
}

/// A number for a new open file description's OFD and flock locks.
pub(crate) fn next_description_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(PROCESS_OWNER + 1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A queued wait of this process.
struct Pending {
    daemon: u32,
    file_id: u128,
    owner: u64,
    done: LockDone,
}

/// Bits of `Held`'s spaces.
const SPACE_RANGE: u8 = 1;
const SPACE_FLOCK: u8 = 2;

fn space_of(kind: LockKind) -> u8 {
    if kind.byte_range() {
        SPACE_RANGE
    } else {
        SPACE_FLOCK
    }
}

/// This process's side of its locks: its queued waits, and which (file, owner)
/// may hold locks (so a close sends an unlock only where there is something to
/// release). Shared with the callback connections' reader threads (grants.rs).
#[derive(Default)]
pub(crate) struct LockTable {
    waits: Mutex<HashMap<u64, Pending>>,
    next_token: AtomicU64,
    /// (file id, owner) -> (daemon, spaces it locked in).
    held: Mutex<HashMap<(u128, u64), (u32, u8)>>,
    /// `held.len()`, read without the lock by every close.
    held_count: AtomicUsize,
}

impl LockTable {
    fn wait(&self, daemon: u32, file_id: u128, owner: u64, done: LockDone) -> u64 {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.waits).insert(token, Pending { daemon, file_id, owner, done });
        token
    }

    fn take(&self, token: u64) -> Option<Pending> {
        lock(&self.waits).remove(&token)
    }

    /// `lock_granted` came (the callback connection's reader thread).
    pub(crate) fn granted(&self, token: u64, errno: i32) {
        if let Some(p) = self.take(token) {
            (p.done)(if errno == 0 { Ok(()) } else { Err(Errno(errno)) });
        }
    }

    /// The callback connection to `daemon` ended: the daemon dropped this process's
    /// locks there, and its waits there will never be granted.
    pub(crate) fn daemon_lost(&self, daemon: u32) {
        let lost: Vec<Pending> = {
            let mut w = lock(&self.waits);
            let tokens: Vec<u64> = w.iter().filter(|(_, p)| p.daemon == daemon).map(|(t, _)| *t).collect();
            tokens.into_iter().filter_map(|t| w.remove(&t)).collect()
        };
        for p in lost {
            (p.done)(Err(Errno(libc::ENOLCK)));
        }
        let mut h = lock(&self.held);
        h.retain(|_, (d, _)| *d != daemon);
        self.held_count.store(h.len(), Ordering::Release);
    }

    /// In a child after fork: the parent's locks and waits are not this process's.
    pub(crate) fn forget_all(&self) {
        // The parent's threads wait on these; in the child nobody does. Only tried:
        // a thread of the parent that held one at the fork does not exist here.
        if let Ok(mut w) = self.waits.try_lock() {
            std::mem::take(&mut *w).into_values().for_each(std::mem::forget);
        }
        if let Ok(mut h) = self.held.try_lock() {
            h.clear();
        }
        self.held_count.store(0, Ordering::Release);
    }

    fn note(&self, file_id: u128, owner: u64, daemon: u32, space: u8) {
        let mut h = lock(&self.held);
        h.entry((file_id, owner)).or_insert((daemon, 0)).1 |= space;
        self.held_count.store(h.len(), Ordering::Release);
    }

    /// The spaces `owner` may hold locks of `file_id` in (and their daemon); forgotten.
    fn forget(&self, file_id: u128, owner: u64) -> Option<(u32, u8)> {
        if self.held_count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut h = lock(&self.held);
        let r = h.remove(&(file_id, owner));
        self.held_count.store(h.len(), Ordering::Release);
        r
    }

    /// Tokens of `owner`'s waits on `file_id`.
    fn waits_of(&self, file_id: u128, owner: u64) -> Vec<u64> {
        let w = lock(&self.waits);
        w.iter().filter(|(_, p)| p.file_id == file_id && p.owner == owner).map(|(t, _)| *t).collect()
    }
}

/// A blocking wait's wake-up: an eventfd the reader thread writes, and the result.
/// Shared by the waiting thread and the `LockDone` (which may run after the wait
/// gave up), so the descriptor closes when both are done with it.
struct Wakeup {
    fd: i32,
    result: Mutex<Option<Result<()>>>,
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        // SAFETY: our own eventfd, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// What one lock request is about.
struct Target {
    daemon: u32,
    file_id: u128,
    owner: u64,
    pid: i32,
    kind: LockKind,
}

impl Client {
    /// Takes (`mode` Read or Write), changes or releases (Unlock) a lock on
    /// `start..end` (end exclusive, `LOCK_END_EOF` to the end of the file) of the
    /// file open at `fd`: a POSIX lock of this process, or an OFD or flock lock of
    /// the descriptor's open file description. With `wait`, a conflict waits
    /// (EINTR if a signal handler runs first); without, it fails with EAGAIN.
    /// EDEADLK: waiting would deadlock (POSIX); ENOLCK: no room, or the daemon
    /// could not be reached for locks; EBADF: an fcntl read lock through a
    /// descriptor not open for reading, a write lock through one not open for
    /// writing.
    pub fn lock(&self, fd: i32, kind: LockKind, mode: LockMode, start: u64, end: u64, wait: bool) -> Result<()> {
        let f = self.locked_file(fd)?;
        // As the kernel: an fcntl read lock needs a descriptor open for reading, a
        // write lock one open for writing (flock needs neither).
        let acc = f.flags & libc::O_ACCMODE;
        let denied = match mode {
            LockMode::Read => acc == libc::O_WRONLY,
            LockMode::Write => acc == libc::O_RDONLY,
            LockMode::Unlock => false,
        };
        if denied && kind.byte_range() {
            return Err(Errno(libc::EBADF));
        }
        let t = self.target(&f, kind);
        if !wait || mode == LockMode::Unlock {
            return self.lock_request(&t, mode, start, end, None).map(|_| ());
        }
        // SAFETY: a new eventfd owned by the Wakeup.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(Errno(libc::ENOLCK));
        }
        let w = Arc::new(Wakeup { fd: efd, result: Mutex::new(None) });
        let woken = w.clone();
        let done: LockDone = Box::new(move |r| {
            *lock(&woken.result) = Some(r);
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a local to the eventfd the Wakeup keeps open.
            unsafe { libc::write(woken.fd, (&one as *const u64).cast(), 8) };
        });
        match self.lock_request(&t, mode, start, end, Some(done))? {
            LockState::Held => Ok(()),
            LockState::Queued(token) => self.wait_for(&t, token, &w),
        }
    }

    /// F_GETLK: a lock of another owner that a `mode` lock of `start..end` through
    /// `fd` would conflict with (POSIX: this process; OFD: the description).
    pub fn lock_test(&self, fd: i32, kind: LockKind, mode: LockMode, start: u64, end: u64) -> Result<Option<LockInfo>> {
        let f = self.locked_file(fd)?;
        let t = self.target(&f, kind);
        self.test_request(&t, mode, start, end)
    }

    /// `start..end` of an fcntl lock through `fd`: `l_start` counted from `whence`
    /// (SEEK_SET, SEEK_CUR: the descriptor's offset, SEEK_END: the file's size),
    /// `l_len` bytes (0: to the end of the file, negative: the bytes before it).
    pub fn lock_range(&self, fd: i32, whence: i32, l_start: i64, l_len: i64) -> Result<(u64, u64)> {
        let base: i64 = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => self.lseek(fd, 0, libc::SEEK_CUR)? as i64,
            libc::SEEK_END => self.fstat(fd)?.size as i64,
            _ => return Err(Errno(libc::EINVAL)),
        };
        let start = base.checked_add(l_start).ok_or(Errno(libc::EOVERFLOW))?;
        let (s, e) = match l_len {
            0 => (start, None),
            n if n > 0 => (start, Some(start.checked_add(n).ok_or(Errno(libc::EOVERFLOW))?)),
            n => (start.checked_add(n).ok_or(Errno(libc::EINVAL))?, Some(start)),
        };
        if s < 0 {
            return Err(Errno(libc::EINVAL));
        }
        Ok((s as u64, e.map_or(LOCK_END_EOF, |e| e as u64)))
    }

    /// For the FUSE mount: a POSIX lock of the kernel's lock `owner` (and `pid`) on
    /// the file open at `fd`. A conflict with `wait` queues the request and returns
    /// `Queued`; `done` is then called when the wait ends (from the callback
    /// connection's reader thread), and no thread waits meanwhile.
    pub fn lock_as(
        &self,
        fd: i32,
        owner: u64,
        pid: i32,
        mode: LockMode,
        (start, end): (u64, u64),
        wait: Option<LockDone>,
    ) -> Result<LockState> {
        let f = self.locked_file(fd)?;
        let t = Target { owner, pid, ..self.target(&f, LockKind::Posix) };
        // An unlock never waits, whatever the call (F_SETLKW with F_UNLCK, as
        // Python's lockf sends it).
        let wait = if mode == LockMode::Unlock { None } else { wait };
        self.lock_request(&t, mode, start, end, wait)
    }

    /// For the FUSE mount: F_GETLK for the kernel's lock `owner`.
    pub fn lock_test_as(&self, fd: i32, owner: u64, mode: LockMode, start: u64, end: u64) -> Result<Option<LockInfo>> {
        let f = self.locked_file(fd)?;
        let t = Target { owner, ..self.target(&f, LockKind::Posix) };
        self.test_request(&t, mode, start, end)
    }

    /// For the FUSE mount: every lock of `owner` on the file open at `fd` goes, and
    /// its waits there end with EINTR (a close: FLUSH or RELEASE). No request when
    /// the owner never locked the file.
    pub fn release_locks_as(&self, fd: i32, owner: u64) -> Result<()> {
        let f = self.file_unsettled(fd)?;
        let Some(file_id) = f.file_id_if_known() else { return Ok(()) };
        for token in self.transport.grants.locks.waits_of(file_id, owner) {
            // Cancelled: it ends here with EINTR. Not waiting any more: it was
            // granted, and the unlock below takes it back.
            let _ = self.cancel_lock_wait(token);
        }
        self.release(file_id, owner)
    }

    /// At a close of `f` (`last`: its description's last): the process's POSIX
    /// locks on the file go, and with the last close the description's own. Costs
    /// nothing unless this process locked the file.
    pub(crate) fn release_locks_at_close(&self, f: &Arc<OpenFile>, last: bool) {
        let Some(file_id) = f.file_id_if_known() else { return };
        let _ = self.release(file_id, PROCESS_OWNER);
        if last {
            let _ = self.release(file_id, f.lock_owner);
        }
    }

    /// Unlocks everything `owner` may hold on `file_id`, in each space it locked in.
    fn release(&self, file_id: u128, owner: u64) -> Result<()> {
        let Some((daemon, spaces)) = self.transport.grants.locks.forget(file_id, owner) else { return Ok(()) };
        let mut r = Ok(());
        for (bit, kind) in [(SPACE_RANGE, LockKind::Posix), (SPACE_FLOCK, LockKind::Flock)] {
            if spaces & bit != 0 {
                let t = Target { daemon, file_id, owner, pid: 0, kind };
                r = r.and(self.lock_request(&t, LockMode::Unlock, 0, LOCK_END_EOF, None).map(|_| ()));
            }
        }
        r
    }

    /// The open file of `fd`, with what this process held back sent first.
    fn locked_file(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.settle_all();
        self.file(fd)
    }

    fn target(&self, f: &OpenFile, kind: LockKind) -> Target {
        let (owner, pid) = match kind {
            // SAFETY: getpid has no preconditions.
            LockKind::Posix => (PROCESS_OWNER, unsafe { libc::getpid() }),
            LockKind::Ofd | LockKind::Flock => (f.lock_owner, -1),
        };
        Target { daemon: self.first_live(self.md_daemon(&f.path())), file_id: f.file_id(), owner, pid, kind }
    }

    /// Sends one `lock`; with `wait`, registered under a token first (the grant may
    /// come before the reply says `Queued`).
    fn lock_request(
        &self,
        t: &Target,
        mode: LockMode,
        start: u64,
        end: u64,
        wait: Option<LockDone>,
    ) -> Result<LockState> {
        let locks = &self.transport.grants.locks;
        if mode == LockMode::Unlock && !self.transport.grants.link_up(t.daemon) {
            // No callback connection: the daemon holds nothing of this process.
            return Ok(LockState::Held);
        }
        self.lock_link(t.daemon)?;
        let token = wait.map(|done| locks.wait(t.daemon, t.file_id, t.owner, done));
        let req = Request::Lock {
            file_id: t.file_id,
            client: self.transport.grants.client_id(),
            owner: t.owner,
            pid: t.pid,
            kind: t.kind,
            mode,
            start,
            end,
            wait: token,
        };
        let mut r = self.transport.call(t.daemon, req.clone());
        if r == Err(Errno(libc::ENOTCONN)) {
            // The daemon ended this process's callback connection (it was silent for
            // a lease) before the end reached this process: a new one, and once more.
            // Whatever this process held there is gone.
            let mine = token.and_then(|t| locks.take(t));
            self.transport.grants.drop_link(t.daemon);
            if let (Some(token), Some(p)) = (token, mine) {
                lock(&locks.waits).insert(token, p);
            }
            r = self.lock_link(t.daemon).and_then(|()| self.transport.call(t.daemon, req));
        }
        let r = match r {
            Ok(Response::Ok) => Ok(LockState::Held),
            Ok(Response::Queued) if token.is_some() => Ok(LockState::Queued(token.unwrap_or(0))),
            Ok(r) => Err(crate::error::unexpected(r)),
            Err(Errno(libc::ENOTCONN)) => Err(Errno(libc::ENOLCK)),
            Err(e) => Err(e),
        };
        if !matches!(r, Ok(LockState::Queued(_))) {
            if let Some(token) = token {
                locks.take(token);
            }
        }
        if r.is_ok() && mode != LockMode::Unlock {
            locks.note(t.file_id, t.owner, t.daemon, space_of(t.kind));
            // Stats under the lock come from the daemons, not an older listing.
            self.listing.invalidate();
        }
        r
    }

    /// Ends queued wait `token` early (its `LockDone` gets EINTR): true if it was
    /// still waiting; false if it ended meanwhile (its `LockDone` is called, or
    /// was, with what it came to). The FUSE mount answers a long wait with EINTR
    /// this way, so that the kernel asks again (and a killed waiter can die).
    pub fn cancel_lock_wait(&self, token: u64) -> Result<bool> {
        let locks = &self.transport.grants.locks;
        let Some(daemon) = lock(&locks.waits).get(&token).map(|p| p.daemon) else { return Ok(false) };
        let req = Request::LockCancel { client: self.transport.grants.client_id(), token };
        match self.transport.call(daemon, req)? {
            Response::Bool(true) => {
                if let Some(p) = locks.take(token) {
                    (p.done)(Err(Errno(libc::EINTR)));
                }
                Ok(true)
            }
            Response::Bool(false) => Ok(false),
            r => Err(crate::error::unexpected(r)),
        }
    }

    fn test_request(&self, t: &Target, mode: LockMode, start: u64, end: u64) -> Result<Option<LockInfo>> {
        let req = Request::LockTest {
            file_id: t.file_id,
            client: self.transport.grants.client_id(),
            owner: t.owner,
            kind: t.kind,
            mode,
            start,
            end,
        };
        match self.transport.call(t.daemon, req)? {
            Response::LockHeld(info) => Ok(info),
            r => Err(crate::error::unexpected(r)),
        }
    }

    /// The callback connection to `daemon` that this process's locks there live by.
    /// A daemon that cannot be reached at its address may have restarted elsewhere:
    /// its line of the hosts file is read again, once.
    fn lock_link(&self, daemon: u32) -> Result<()> {
        let g = &self.transport.grants;
        if g.link_up(daemon) {
            return Ok(());
        }
        let open = || {
            let ep = self.transport.callback_endpoint(daemon);
            ep.is_some_and(|ep| g.open_link(daemon, &ep, self.transport.secret(), self.transport.timeout()))
        };
        if open() || (self.transport.refresh_entry(daemon) && open()) {
            Ok(())
        } else {
            Err(Errno(libc::ENOLCK))
        }
    }

    /// Waits for queued wait `token`: its grant, its failure, or a signal handler
    /// (then the wait is cancelled: EINTR, unless the grant came first).
    fn wait_for(&self, t: &Target, token: u64, w: &Wakeup) -> Result<()> {
        loop {
            if let Some(r) = lock(&w.result).take() {
                return r;
            }
            let mut p = libc::pollfd { fd: w.fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                continue;
            }
            if let Some(r) = lock(&w.result).take() {
                return r;
            }
            let cancel = Request::LockCancel { client: self.transport.grants.client_id(), token };
            match self.transport.call(t.daemon, cancel) {
                Ok(Response::Bool(true)) | Err(_) => {
                    self.transport.grants.locks.take(token);
                    return Err(Errno(libc::EINTR));
                }
                // Granted (or failed) meanwhile: its lock_granted is on its way.
                _ => {}
            }
        }
    }
}
