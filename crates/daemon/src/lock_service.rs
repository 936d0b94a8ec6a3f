//! Lock requests served with the lock table (locks.rs), and the two things the
//! table cannot do itself: tell a waiting client that its lock is granted, and
//! drop the locks of a client that is gone (docs/DESIGN.md, "Locks").
//!
//! * Who: a lock request names its client process; the client must hold a
//!   `callback` connection to this daemon (grants.rs keeps them), else ENOTCONN
//!   (it then opens one). Locks live as long as that connection: its end (the
//!   process exited or was killed: the kernel closes its sockets) drops them at
//!   once.
//! * Waiting: a request that must wait is answered `Queued` at once; no worker
//!   waits. When the lock is granted, `lock_granted` goes out on the waiter's
//!   callback connection from this module's thread (`gust-locks`), so a granting
//!   worker never blocks on a slow client's socket.
//! * Silence: a client holding a lock that another process asks for (a conflict,
//!   waiting or not) and that this daemon has not heard from for `PROBE_AFTER` is
//!   asked `ping` on its callback connection; no answer within `LEASE` (it is
//!   stopped, hung or cut off) ends the connection and with it its locks. Bound: a
//!   silent holder's locks go within PROBE_AFTER + TICK + LEASE (3.25 s) of the
//!   first conflicting request; a dead one's at once.
//!
//! Not for: the rules of conflicts and waits (locks.rs), the callback connection
//! itself (grants.rs, server/session_callback.rs).

use crate::grants::{Grants, LEASE};
use crate::locks::{Decision, Outcome, Owner, Table, Wake, Want};
use gust_proto::{lock_range_valid, LockKind, LockMode, Reply, Request, Response};
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// How often the thread looks for silent holders.
const TICK: Duration = Duration::from_millis(250);
/// A holder not heard from for this long is asked whether it is alive once its
/// locks matter to another process. Half the grants' lease: a busy client renews
/// by its own requests and is never asked.
const PROBE_AFTER: Duration = Duration::from_secs(1);
/// How long a conflict keeps its holders under watch: a process retrying a
/// non-blocking lock (SQLite's busy handler) asks again within it.
const CONTENDED_FOR: Duration = Duration::from_secs(5);
/// Bound on the holders under watch, and on the probes in flight (each a thread
/// for at most `LEASE`).
const CONTENDED_MAX: usize = 4096;
const PROBES_MAX: usize = 64;

/// A granted (or failed) wait, to be told to its client on `link`.
struct Notice {
    link: Arc<gust_rpc::Connection>,
    token: u64,
    errno: i32,
}

pub struct LockService {
    table: Mutex<Table>,
    grants: Arc<Grants>,
    /// Holders of locks others asked for, with when (see `CONTENDED_FOR`).
    contended: Mutex<HashMap<u64, Instant>>,
    probing: Mutex<HashSet<u64>>,
    /// The thread's inbox, once a lock was asked for (so a daemon without locks
    /// starts no thread). Unbounded, but each notice ends a queued wait, and waits
    /// are bounded by the table.
    inbox: OnceLock<Mutex<Sender<Notice>>>,
    this: Weak<LockService>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LockService {
    pub fn new(grants: Arc<Grants>) -> Arc<LockService> {
        Arc::new_cyclic(|this| LockService {
            table: Mutex::new(Table::default()),
            grants,
            contended: Mutex::new(HashMap::new()),
            probing: Mutex::new(HashSet::new()),
            inbox: OnceLock::new(),
            this: this.clone(),
        })
    }

    /// (locks held, waits queued).
    pub fn counts(&self) -> (usize, usize) {
        lock(&self.table).counts()
    }

    /// Serves `lock`, `lock_test` and `lock_cancel`.
    pub fn serve(&self, req: Request) -> Reply {
        match req {
            Request::Lock { file_id, client, owner, pid, kind, mode, start, end, wait } => {
                if !lock_range_valid(kind, start, end) || (wait.is_some() && mode == LockMode::Unlock) {
                    return Err(libc::EINVAL);
                }
                // Locks last as long as the client's callback connection: without
                // one, nothing would ever take them back. ENOTCONN tells the client
                // to open one (this daemon may have ended its last one).
                let h = self.grants.holder(client).filter(|h| h.leased()).ok_or(libc::ENOTCONN)?;
                self.grants.seen(&h);
                self.start();
                let want = Want { owner: Owner { client, owner }, kind, mode, start, end, pid };
                let d = lock(&self.table).lock(file_id, want, wait);
                self.decided(d)
            }
            Request::LockTest { file_id, client, owner, kind, mode, start, end } => {
                if kind == LockKind::Flock || mode == LockMode::Unlock || !lock_range_valid(kind, start, end) {
                    return Err(libc::EINVAL);
                }
                let want = Want { owner: Owner { client, owner }, kind, mode, start, end, pid: 0 };
                Ok(Response::LockHeld(lock(&self.table).test(file_id, &want)))
            }
            Request::LockCancel { client, token } => Ok(Response::Bool(lock(&self.table).cancel(client, token))),
            _ => Err(libc::EPROTO),
        }
    }

    fn decided(&self, d: Decision) -> Reply {
        if !d.blockers.is_empty() {
            let mut c = lock(&self.contended);
            if c.len() + d.blockers.len() > CONTENDED_MAX {
                c.retain(|_, since| since.elapsed() < CONTENDED_FOR);
            }
            for b in d.blockers {
                if c.len() < CONTENDED_MAX || c.contains_key(&b) {
                    c.insert(b, Instant::now());
                }
            }
        }
        self.deliver(d.wakes);
        match d.outcome {
            Outcome::Granted => Ok(Response::Ok),
            Outcome::Queued => Ok(Response::Queued),
            other => Err(other.errno().expect("an outcome that fails")),
        }
    }

    /// The callback connection of `client` ended (or was replaced: then its new
    /// one keeps its locks). Its locks go, and the waits they held up are granted.
    pub fn link_ended(&self, client: u64) {
        if self.grants.holder(client).is_some_and(|h| h.leased()) {
            return;
        }
        self.release_client(client);
    }

    /// Every lock and wait of `client` goes (its connection ended or went silent,
    /// or it opens a new callback connection: it forgot its locks with the old one).
    pub fn release_client(&self, client: u64) {
        let wakes = lock(&self.table).release_client(client);
        if !wakes.is_empty() {
            debug!(client = format!("{client:016x}"), granted = wakes.len(), "locks of a client released");
        }
        self.deliver(wakes);
    }

    /// Tells each woken waiter, through the thread. A waiter whose client has no
    /// callback connection any more is gone: what it was just granted goes too.
    fn deliver(&self, mut wakes: Vec<Wake>) {
        while let Some(w) = wakes.pop() {
            match self.grants.holder(w.client).and_then(|h| h.link()) {
                Some(link) => self.post(Notice { link, token: w.token, errno: w.errno }),
                None => wakes.extend(lock(&self.table).release_client(w.client)),
            }
        }
    }

    fn post(&self, n: Notice) {
        if let Some(inbox) = self.inbox.get() {
            let _ = lock(inbox).send(n);
        }
    }

    /// Starts the thread at the first lock request.
    fn start(&self) {
        self.inbox.get_or_init(|| {
            let (tx, rx) = channel::<Notice>();
            let this = self.this.clone();
            let mut watched = Instant::now();
            let spawned = std::thread::Builder::new().name("gust-locks".into()).spawn(move || loop {
                match rx.recv_timeout(TICK) {
                    Ok(n) => {
                        let sent = n.link.notify(&Request::LockGranted { token: n.token, errno: n.errno });
                        if let Err(e) = sent {
                            // Its connection ended: link_ended takes its locks back.
                            debug!("lock_granted not sent: {e}");
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                if watched.elapsed() < TICK {
                    continue;
                }
                watched = Instant::now();
                let Some(s) = this.upgrade() else { return };
                s.watch();
            });
            if let Err(e) = spawned {
                warn!("cannot start the lock thread: {e}; queued locks are granted only when asked again");
            }
            Mutex::new(tx)
        });
    }

    /// Once per TICK at most: holders others wait for, or asked for lately, that
    /// this daemon has not heard from are probed; those without a callback
    /// connection lose their locks now.
    fn watch(&self) {
        let mut suspects = lock(&self.table).blocking_clients();
        {
            let mut c = lock(&self.contended);
            c.retain(|_, since| since.elapsed() < CONTENDED_FOR);
            suspects.extend(c.keys().copied());
        }
        for client in suspects {
            if !lock(&self.table).has_client(client) {
                continue;
            }
            let Some(link) = self.grants.holder(client).and_then(|h| h.link().map(|l| (h, l))) else {
                self.release_client(client);
                continue;
            };
            let (h, link) = link;
            if self.grants.silent_for(&h) < PROBE_AFTER {
                continue;
            }
            {
                let mut p = lock(&self.probing);
                if p.len() >= PROBES_MAX || !p.insert(client) {
                    continue;
                }
            }
            let (grants, this) = (self.grants.clone(), self.this.clone());
            let spawned = std::thread::Builder::new().name("gust-lock-probe".into()).spawn(move || {
                match link.call(&Request::Ping, &[], LEASE) {
                    // Any answer (an old client's ENOSYS too) says it is alive.
                    Ok(_) => grants.seen(&h),
                    // The call closed the connection: its end releases the locks.
                    Err(e) => {
                        warn!(client = format!("{client:016x}"), "a lock holder did not answer ({e}); its locks go")
                    }
                }
                if let Some(s) = this.upgrade() {
                    lock(&s.probing).remove(&client);
                }
            });
            if spawned.is_err() {
                lock(&self.probing).remove(&client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(kind: LockKind, mode: LockMode, start: u64, end: u64, wait: Option<u64>) -> Request {
        Request::Lock { file_id: 1, client: 7, owner: 0, pid: 1, kind, mode, start, end, wait }
    }

    /// What a peer sends is checked before anything reaches the table: malformed
    /// ranges and combinations are EINVAL, a client without a callback connection
    /// ENOTCONN, a request that only goes to clients EPROTO. Nothing panics.
    #[test]
    fn bad_requests_get_errnos() {
        let s = LockService::new(Arc::new(Grants::new()));
        let eof = gust_proto::LOCK_END_EOF;
        let cases = [
            (lock(LockKind::Posix, LockMode::Write, 5, 5, None), libc::EINVAL),
            (lock(LockKind::Posix, LockMode::Write, 6, 5, None), libc::EINVAL),
            (lock(LockKind::Flock, LockMode::Write, 0, 10, None), libc::EINVAL),
            (lock(LockKind::Flock, LockMode::Read, 1, eof, None), libc::EINVAL),
            (lock(LockKind::Ofd, LockMode::Unlock, 0, eof, Some(3)), libc::EINVAL),
            (lock(LockKind::Posix, LockMode::Write, 0, eof, Some(3)), libc::ENOTCONN),
            (lock(LockKind::Posix, LockMode::Unlock, 0, eof, None), libc::ENOTCONN),
            (
                Request::LockTest {
                    file_id: 1,
                    client: 7,
                    owner: 0,
                    kind: LockKind::Flock,
                    mode: LockMode::Read,
                    start: 0,
                    end: eof,
                },
                libc::EINVAL,
            ),
            (
                Request::LockTest {
                    file_id: 1,
                    client: 7,
                    owner: 0,
                    kind: LockKind::Posix,
                    mode: LockMode::Unlock,
                    start: 0,
                    end: 1,
                },
                libc::EINVAL,
            ),
            (
                Request::LockTest {
                    file_id: 1,
                    client: 7,
                    owner: 0,
                    kind: LockKind::Posix,
                    mode: LockMode::Read,
                    start: 1,
                    end: 0,
                },
                libc::EINVAL,
            ),
            (Request::LockGranted { token: 1, errno: 0 }, libc::EPROTO),
        ];
        for (req, errno) in cases {
            assert_eq!(s.serve(req.clone()), Err(errno), "{req:?}");
        }
        assert_eq!(s.serve(Request::LockCancel { client: 7, token: 3 }), Ok(Response::Bool(false)));
        let test = Request::LockTest {
            file_id: 1,
            client: 7,
            owner: 0,
            kind: LockKind::Ofd,
            mode: LockMode::Write,
            start: 0,
            end: eof,
        };
        assert_eq!(s.serve(test), Ok(Response::LockHeld(None)));
        assert_eq!(s.counts(), (0, 0));
        assert!(s.inbox.get().is_none(), "no thread for a daemon whose clients took no lock");
    }
}
