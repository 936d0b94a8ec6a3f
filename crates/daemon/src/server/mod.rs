//! The RPC server: a fixed pool of worker threads serving every connection through
//! one epoll set.
//!
//! Why event-driven: a job of 512 nodes with 16 processes each opens up to 8,192
//! connections to every daemon (each process talks to every daemon sooner or later).
//! A thread per connection would cost 8,192 threads and their stacks; here threads
//! and memory do not grow with connections: an idle connection costs its `Session`
//! (a few hundred bytes) and the kernel's socket buffers.
//!
//! How: every worker waits in `epoll_wait` on the same set, connections armed one-shot
//! (see `poller`), so the worker that wakes for a connection reads, dispatches and
//! answers on the spot, with no hand-off to another thread: the same one wake-up per
//! request as a thread per connection, plus the epoll calls. Each turn does at most
//! one read (see `session`), and a re-armed connection goes to the back of the ready
//! list, so a busy client cannot starve the others. Workers block in the stores
//! (RocksDB, chunk files), so there are several per core.
//!
//! Peers that stall: a handshake must finish within `HANDSHAKE_TIMEOUT`, a frame that
//! started must arrive, and a reply must be taken, within `STALL_TIMEOUT`; a reaper
//! thread closes connections past their deadline. Memory held for partial frames and
//! unsent replies is bounded across all connections by `budget`.
//!
//! Streams without a descriptor (shared-memory rings, bounded to 256 per daemon by
//! their listener, and the in-memory transport of tests) get a thread each, running
//! the same `Session` turns blocking; a read or write in such a turn waits at most
//! until the connection's stall deadline.

mod budget;
mod poller;
mod session;
mod splice;

pub use budget::REQUEST_MEMORY_BYTES_DEFAULT;
pub use session::STALL_TIMEOUT_DEFAULT;

use crate::state::State;
use budget::Budget;
use gust_proto::frame::HEADER_BYTES;
use gust_proto::{BODY_BYTES_MAX, BULK_BYTES_MAX};
use gust_transport::{Listener, Stream};
use poller::{Interest, Poller};
use session::{Outcome, Session, Worker};
use slab::Slab;
use std::collections::VecDeque;
use std::io;
use std::os::unix::io::RawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::error;

/// Bound on concurrent connections; past it the handshake answers "busy". The
/// daemon raises its descriptor limit as far as it may (`raise_descriptor_limit`).
pub const CONNECTIONS_MAX: u64 = 65_536;
/// Connections taken from the listen queue per turn of a listener.
const ACCEPT_BATCH: usize = 64;
/// How often the reaper looks for connections past their deadline.
const REAPER_PERIOD: Duration = Duration::from_millis(100);
/// Parked connections woken when a frame's memory is given back.
const WAKE_ON_FREE: usize = 4;
/// Listener tokens sit above any connection's slab index.
const LISTENER_TOKEN_BASE: u64 = 1 << 62;

#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Worker threads (`gust start --threads`).
    pub threads: usize,
    /// Bound on memory held for requests between turns (`--request-memory`).
    pub request_memory_bytes: usize,
    /// How long a frame may take to arrive once started, and a reply to be taken
    /// (`--stall-timeout`).
    pub stall_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            threads: default_threads(),
            request_memory_bytes: REQUEST_MEMORY_BYTES_DEFAULT,
            stall_timeout: session::STALL_TIMEOUT_DEFAULT,
        }
    }
}

/// Four workers per core, at least 8: a worker waiting on an fsync or a RocksDB
/// flush must not leave a core idle while requests wait.
pub fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    (cores * 4).clamp(8, 64)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Shared {
    state: Arc<State>,
    stall_timeout: Duration,
    poller: Poller,
    budget: Budget,
    /// Listeners with descriptors, by token - LISTENER_TOKEN_BASE.
    listeners: Vec<Listener>,
    /// Every connection with a descriptor, by token: the descriptor (read without
    /// locking the session) and the session.
    sessions: Mutex<Slab<(RawFd, Arc<Mutex<Session>>)>>,
    /// Connections waiting for request memory, oldest first: not armed until woken.
    parked: Mutex<VecDeque<usize>>,
}

/// Starts serving `listeners` on a pool of `opts.threads` workers; returns at once.
pub fn start(state: Arc<State>, listeners: Vec<Listener>, opts: &ServerOptions) -> io::Result<()> {
    let poller = Poller::new()?;
    let (polled, blocking): (Vec<Listener>, Vec<Listener>) = listeners.into_iter().partition(|l| l.raw_fd().is_some());
    for (i, l) in polled.iter().enumerate() {
        l.set_nonblocking(true)?;
        poller.add(l.raw_fd().expect("partitioned"), LISTENER_TOKEN_BASE + i as u64, Interest::Read)?;
    }
    let sh = Arc::new(Shared {
        state,
        stall_timeout: opts.stall_timeout,
        poller,
        budget: Budget::new(request_memory_bytes(opts)),
        listeners: polled,
        sessions: Mutex::new(Slab::new()),
        parked: Mutex::new(VecDeque::new()),
    });
    for i in 0..opts.threads.max(1) {
        let sh = sh.clone();
        std::thread::Builder::new().name(format!("worker-{i}")).spawn(move || sh.work())?;
    }
    let reaper = sh.clone();
    std::thread::Builder::new().name("reaper".into()).spawn(move || reaper.reap())?;
    for l in blocking {
        let sh = sh.clone();
        let name = format!("accept-{}", l.local().kind());
        l.serve(&name, move |s| sh.serve_blocking(s), |e| error!("accept: {e}"))?;
    }
    Ok(())
}

/// The bound in force: at least one frame of the largest size, or such a frame
/// could never be received.
fn request_memory_bytes(opts: &ServerOptions) -> usize {
    let frame_max = HEADER_BYTES + BODY_BYTES_MAX as usize + BULK_BYTES_MAX as usize;
    if opts.request_memory_bytes < frame_max {
        tracing::warn!(
            "request memory bound of {} bytes is below the largest frame; using {frame_max}",
            opts.request_memory_bytes
        );
    }
    opts.request_memory_bytes.max(frame_max)
}

impl Shared {
    fn work(&self) {
        let mut w = Worker::new();
        loop {
            let Some(token) = self.poller.wait(-1) else { continue };
            if token >= LISTENER_TOKEN_BASE {
                self.accept((token - LISTENER_TOKEN_BASE) as usize);
                continue;
            }
            let key = token as usize;
            let Some((_, sess)) = lock(&self.sessions).get(key).cloned() else { continue };
            self.run_turn(key, &sess, &mut w);
        }
    }

    fn run_turn(&self, key: usize, sess: &Mutex<Session>, w: &mut Worker) {
        let mut s = lock(sess);
        let charged_before = s.charged();
        let outcome = s.turn(&self.state, &self.budget, w);
        let fd = s.stream().raw_fd().expect("polled sessions have descriptors");
        let rearm = |i| self.poller.rearm(fd, key as u64, i).is_ok();
        // Memory given back, or a place for a forward (crate::proxy): parked
        // connections may go on.
        let freed = s.charged() < charged_before || std::mem::take(&mut s.forward_ended);
        match outcome {
            Outcome::Read if rearm(Interest::Read) => {}
            Outcome::Write if rearm(Interest::Write) => {}
            Outcome::Park => lock(&self.parked).push_back(key),
            _ => {
                self.poller.delete(fd);
                self.end(&mut s);
                lock(&self.sessions).remove(key);
            }
        }
        drop(s);
        if freed {
            // A few, oldest first: waking every parked connection for each frame
            // that completes would run a turn for each only to park most again.
            self.wake_parked(WAKE_ON_FREE);
        }
    }

    /// A session is over: its memory and its place in the count go back.
    fn end(&self, s: &mut Session) {
        self.budget.release(s.charged());
        s.forget_charge();
        self.state.metrics.connections_open.fetch_sub(1, Ordering::SeqCst);
    }

    /// Up to `n` parked connections try again, oldest first. Armed for writing,
    /// which fires at once: a connection parked with whole frames already read (a
    /// forward waiting for a place, crate::proxy) has nothing more to read; one
    /// parked for memory parks again in its turn if there is still none.
    fn wake_parked(&self, n: usize) {
        let keys: Vec<usize> = {
            let mut parked = lock(&self.parked);
            let n = n.min(parked.len());
            parked.drain(..n).collect()
        };
        if keys.is_empty() {
            return;
        }
        let sessions = lock(&self.sessions);
        for key in keys {
            if let Some((fd, _)) = sessions.get(key) {
                let _ = self.poller.rearm(*fd, key as u64, Interest::Write);
            }
        }
    }

    fn accept(&self, i: usize) {
        let l = &self.listeners[i];
        for _ in 0..ACCEPT_BATCH {
            match l.accept() {
                Ok(s) => self.admit(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Out of descriptors, or a peer that reset before accept: pause,
                    // so a burst of them cannot spin a core.
                    if self.state.accept_errors_logged.admit().is_some() {
                        error!(daemon = self.state.daemon_id, "accept ({}): {e}", l.local().kind());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }
        let _ = self.poller.rearm(l.raw_fd().expect("polled listener"), LISTENER_TOKEN_BASE + i as u64, Interest::Read);
    }

    fn admit(&self, s: Box<dyn Stream>) {
        let n = self.state.metrics.connections_open.fetch_add(1, Ordering::SeqCst) + 1;
        let busy = n > CONNECTIONS_MAX;
        let (Some(fd), Ok(())) = (s.raw_fd(), s.set_nonblocking(true)) else {
            self.state.metrics.connections_open.fetch_sub(1, Ordering::SeqCst);
            return;
        };
        let sess = Arc::new(Mutex::new(Session::new(s, self.state.daemon_id, busy, self.stall_timeout)));
        let mut sessions = lock(&self.sessions);
        let key = sessions.insert((fd, sess));
        if self.poller.add(fd, key as u64, Interest::Read).is_err() {
            sessions.remove(key);
            self.state.metrics.connections_open.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Closes connections past their deadline: shutting the socket down makes its
    /// next event an end of stream, which its worker turns into a close.
    fn reap(&self) {
        loop {
            std::thread::sleep(REAPER_PERIOD);
            let now = Instant::now();
            {
                let sessions = lock(&self.sessions);
                for (_, (_, sess)) in sessions.iter() {
                    // A session being served is not idle; skip it this round.
                    if let Ok(s) = sess.try_lock() {
                        if s.deadline.is_some_and(|d| d <= now) {
                            s.stream().shutdown();
                        }
                    }
                }
            }
            // Every parked connection retries now and then, also those the reaper
            // just cut off (their turn finds the end of stream and closes them).
            self.wake_parked(usize::MAX);
        }
    }

    /// A stream without a descriptor: a thread of its own, the same turns, blocking.
    fn serve_blocking(self: &Arc<Self>, s: Box<dyn Stream>) {
        let n = self.state.metrics.connections_open.fetch_add(1, Ordering::SeqCst) + 1;
        let busy = n > CONNECTIONS_MAX;
        let _ = s.set_timeout(Some(session::HANDSHAKE_TIMEOUT));
        let sh = self.clone();
        let r = std::thread::Builder::new().name("conn".into()).spawn(move || {
            let mut sess = Session::new(s, sh.state.daemon_id, busy, sh.stall_timeout);
            let mut w = Worker::new();
            loop {
                let now = Instant::now();
                if sess.deadline.is_some_and(|d| d <= now) {
                    break;
                }
                // A frame started or a reply owed: the turn's read or write may wait
                // only until the deadline (no reaper can cut a thread's wait short).
                // Before the handshake the session keeps its own bound.
                if let (Some(d), true) = (sess.deadline, sess.established()) {
                    let _ =
                        sess.stream().set_timeout(Some(d.saturating_duration_since(now).max(Duration::from_millis(1))));
                } else if sess.established() {
                    let _ = sess.stream().set_timeout(None);
                }
                match sess.turn(&sh.state, &sh.budget, &mut w) {
                    Outcome::Read | Outcome::Write => {}
                    Outcome::Park => std::thread::sleep(Duration::from_millis(10)),
                    Outcome::Close => break,
                }
            }
            sh.end(&mut sess);
        });
        if let Err(e) = r {
            error!(daemon = self.state.daemon_id, "cannot spawn connection thread: {e}");
            self.state.metrics.connections_open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Raises this process's descriptor limit to its hard limit: every connection is a
/// descriptor. Returns the limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < r.rlim_max {
            let want = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return want.rlim_cur;
            }
        }
        r.rlim_cur
    }
}

pub fn block_termination_signals() {
    // SAFETY: plain signal-mask manipulation on this thread; threads spawned later
    // inherit the mask, so only `wait_for_termination` receives these signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        // A peer vanishing mid-write must give EPIPE, not kill the daemon.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

pub fn wait_for_termination() -> i32 {
    // SAFETY: sigwait on a set of blocked signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
        sig
    }
}
