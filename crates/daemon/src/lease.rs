//! Leases, the asking half of lease-based fencing (docs/DESIGN.md, "Fencing"): in
//! a replicated instance a daemon serves contents only while it holds a lease from
//! its peers (the daemons it shares a replica group with), renewed by heartbeats in
//! a thread of its own, off the I/O path.
//!
//! Every `HEARTBEAT_INTERVAL` the daemon asks all its peers at once (`heartbeat`,
//! `HEARTBEAT_TIMEOUT` per step). The round renews the lease for `LEASE` from the
//! moment it started if no peer answered `fenced` and either some peer answered or
//! every peer refused the connection (their processes are gone: no peer can hold
//! changes this daemon lacks and serve them). A `fenced` answer makes the daemon
//! recovering (EHOSTDOWN for contents) until `gust repair`. A daemon that cannot
//! renew (partitioned, or frozen by SIGSTOP or a VM pause: its lease ran out on the
//! clock while it was stopped) refuses contents with EHOSTDOWN from the moment the
//! lease ends until a round renews it; a client that skipped it for a change
//! fenced it first, so that round says `fenced`.
//!
//! The clock is CLOCK_BOOTTIME, which also runs while the machine is suspended.
//!
//! Cost: one heartbeat per peer per interval, 2(R-1) peers: 8 requests per second
//! per daemon with R = 2, 16 with R = 3, each a 12-byte body and a 12-byte reply.
//!
//! Not for: the peer's answers (fence.rs), the connection (gust-rpc).

use crate::state::State;
use gust_hosts::{DaemonEntry, HostsFile};
use gust_proto::{Reply, Request, Response};
use gust_rpc::{Connection, Options};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

/// How long a renewed lease lasts, from the start of the round that renewed it.
pub const LEASE: Duration = Duration::from_millis(2000);
/// Time between the starts of two heartbeat rounds.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(250);
/// Bound on each step of a heartbeat (connect, send, reply). A round takes at most
/// this long whatever the peers do (they are asked in parallel), so a healthy
/// daemon renews at least every 750 ms, twice within `LEASE` even on a loaded
/// machine, where a busy peer may answer late without costing a lease.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(500);

/// Milliseconds of CLOCK_BOOTTIME.
fn now_ms() -> u64 {
    // SAFETY: clock_gettime writes into a timespec we own.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A daemon's lease: whether it may serve contents now.
pub struct Lease {
    /// Off (always held) with one replica.
    needed: AtomicBool,
    /// CLOCK_BOOTTIME milliseconds until which the lease holds.
    until_ms: AtomicU64,
    /// Whether the first round (run by `start`) is over, whatever it found.
    first_round: Mutex<bool>,
    first_round_over: Condvar,
}

/// How long a request that arrives before the first round is over waits for it.
/// The round is bounded by two steps of `HEARTBEAT_TIMEOUT` (connect, reply).
const FIRST_ROUND_WAIT: Duration = Duration::from_millis(2 * HEARTBEAT_TIMEOUT.as_millis() as u64 + 250);

impl Lease {
    pub fn new() -> Lease {
        Lease {
            needed: AtomicBool::new(false),
            until_ms: AtomicU64::new(0),
            first_round: Mutex::new(false),
            first_round_over: Condvar::new(),
        }
    }

    /// Whether the daemon may serve contents: checked per request, two loads and a
    /// clock read (vDSO) in replicated instances, one load otherwise.
    pub fn holds(&self) -> bool {
        !self.needed.load(Ordering::Relaxed) || now_ms() < self.until_ms.load(Ordering::Acquire)
    }

    /// `holds`, but a request that arrives while the first round is still under way
    /// waits for it (bounded by `FIRST_ROUND_WAIT`). A daemon registers in the hosts
    /// file before its server and first round start, so a client that found the
    /// hosts file complete may ask it that early: answering EHOSTDOWN then would make
    /// the client fence a daemon that was only starting (and so lose it for the
    /// instance's life, until `gust repair`).
    pub fn holds_or_wait_first_round(&self) -> bool {
        if self.holds() {
            return true;
        }
        let over = self.first_round.lock().unwrap_or_else(|e| e.into_inner());
        if !*over {
            let _ = self.first_round_over.wait_timeout_while(over, FIRST_ROUND_WAIT, |over| !*over);
        }
        self.holds()
    }

    fn first_round_done(&self) {
        *self.first_round.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.first_round_over.notify_all();
    }

    /// From now on, contents need the lease (a replicated instance): set before the
    /// server starts, so that nothing is served before the first round.
    pub fn require(&self) {
        self.needed.store(true, Ordering::SeqCst);
    }

    fn renew_from(&self, start_ms: u64) {
        let until = start_ms + LEASE.as_millis() as u64;
        self.until_ms.fetch_max(until, Ordering::AcqRel);
    }
}

impl Default for Lease {
    fn default() -> Self {
        Lease::new()
    }
}

/// What one round of heartbeats found.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// With the milliseconds the lease had run out for when this round started
    /// (0 if it still held).
    Renewed(u64),
    Fenced(u32),
    /// No peer answered and not all refused: (peers, first failure).
    Lost(usize, String),
}

/// The heartbeat thread's own state.
struct Heartbeats {
    state: Arc<State>,
    peers: Peers,
}

/// Which daemons this one asks for its lease, as the hosts file says: its replica
/// peers among the daemons registered there, a link to each.
struct Peers {
    hosts_path: PathBuf,
    /// The hosts file read last: inode, mtime and length. A registration replaces
    /// the file (a rename), so the inode tells two versions apart even when both
    /// got the same mtime (timestamps move in clock ticks of a few milliseconds,
    /// and daemons starting together register within one).
    seen: Option<(u64, SystemTime, u64)>,
    /// Whether every peer the file names has an entry in it. Until it does (peers
    /// still registering), the file is read every round.
    complete: bool,
    links: HashMap<u32, PeerLink>,
}

/// The connection to one peer, opened on first use and again after a failure.
struct PeerLink {
    entry: DaemonEntry,
    conn: Option<Connection>,
}

impl PeerLink {
    fn new(entry: DaemonEntry) -> Self {
        PeerLink { entry, conn: None }
    }

    /// Sends `req` and waits for its reply, `timeout` at most per step (connect,
    /// handshake, the reply). Over the network endpoint always: a peer on the same
    /// host answers there too, and the Unix socket may be another test host's path.
    fn call(&mut self, secret: &[u8], req: &Request, timeout: Duration) -> Result<Reply, gust_rpc::Error> {
        let conn = match self.conn.take().filter(Connection::alive) {
            Some(c) => c,
            None => {
                let Some(ep) = self.entry.network() else {
                    return Err(gust_rpc::Error::Connect("no network endpoint in the hosts file".into()));
                };
                Connection::open(ep, secret, Options { name: "lease-peer", ..Options::new(timeout) })?
            }
        };
        // A failed call closed the connection; the next opens a new one.
        let (reply, _) = conn.call(req, &[], timeout)?;
        self.conn = Some(conn);
        Ok(reply)
    }
}

/// Whether a reply says the peer considers the asking daemon fenced; None if the
/// reply is no heartbeat answer (the peer is recovering from an older build, or
/// refused the request).
fn lease_answer(reply: &Reply) -> Option<bool> {
    match reply {
        Ok(Response::Lease { fenced }) => Some(*fenced),
        _ => None,
    }
}

impl Peers {
    fn new(hosts_path: &Path) -> Peers {
        Peers { hosts_path: hosts_path.to_path_buf(), seen: None, complete: false, links: HashMap::new() }
    }

    /// Re-reads the hosts file when it changed or named peers it lacked (daemons
    /// register during a start, and a restarted daemon may listen elsewhere) and
    /// keeps one link per peer of daemon `me`.
    ///
    /// A stale view is a fencing hole, not a slow start: a daemon that read the file
    /// before its peers registered and never again asks nobody, and a round that asks
    /// nobody renews the lease (no peer can hold changes it lacks). It then serves
    /// its stale copies after missing writes that its peers fenced it for.
    fn refresh(&mut self, me: u32) {
        use std::os::unix::fs::MetadataExt;
        let seen = std::fs::metadata(&self.hosts_path).ok().and_then(|m| Some((m.ino(), m.modified().ok()?, m.len())));
        if self.complete && seen.is_some() && seen == self.seen {
            return;
        }
        let Ok(h) = HostsFile::load(&self.hosts_path) else { return };
        self.seen = seen;
        let peers = gust_placement::replica_peers(me, h.replicas, h.daemons.len() as u32);
        self.links.retain(|id, _| peers.contains(id));
        self.complete = true;
        for p in peers {
            let Some(e) = h.daemons.iter().find(|d| d.id == p) else {
                self.complete = false;
                continue;
            };
            if self.links.get(&p).map(|l| &l.entry != e).unwrap_or(true) {
                self.links.insert(p, PeerLink::new(e.clone()));
            }
        }
    }
}

impl Heartbeats {
    fn round(&mut self) -> Round {
        self.peers.refresh(self.state.daemon_id);
        let start_ms = now_ms();
        let asked = std::time::Instant::now();
        let me = self.state.daemon_id;
        let secret = &self.state.secret;
        let mut answers: Vec<(u32, Result<Reply, gust_rpc::Error>)> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .peers
                .links
                .iter_mut()
                .map(|(id, link)| {
                    let id = *id;
                    s.spawn(move || (id, link.call(secret, &Request::Heartbeat { from: me }, HEARTBEAT_TIMEOUT)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("heartbeat thread")).collect()
        });
        answers.sort_by_key(|(id, _)| *id);
        let mut answered = 0;
        let mut refused = 0;
        let mut failure = String::new();
        for (id, a) in &answers {
            match a {
                Ok(r) => match lease_answer(r) {
                    Some(true) => return Round::Fenced(*id),
                    Some(false) => answered += 1,
                    None if failure.is_empty() => failure = format!("daemon {id} gave no heartbeat answer"),
                    None => {}
                },
                Err(gust_rpc::Error::Refused(_)) => {
                    self.state.fences.peer_refused(*id, asked);
                    refused += 1;
                }
                Err(e) if failure.is_empty() => failure = format!("daemon {id}: {e}"),
                Err(_) => {}
            }
        }
        if answered > 0 || refused == answers.len() {
            let until = self.state.lease.until_ms.load(Ordering::Acquire);
            let lapsed = if until == 0 { 0 } else { start_ms.saturating_sub(until) };
            self.state.lease.renew_from(start_ms);
            Round::Renewed(lapsed)
        } else {
            Round::Lost(answers.len(), failure)
        }
    }

    fn run(mut self) {
        let mut last_ms = now_ms();
        let mut lost_logged = false;
        loop {
            let now = now_ms();
            if now.saturating_sub(last_ms) > LEASE.as_millis() as u64 {
                tracing::warn!(
                    "daemon {}: no heartbeat for {} ms (the process was frozen: SIGSTOP, a VM pause); \
                     refusing contents until a peer renews the lease",
                    self.state.daemon_id,
                    now - last_ms
                );
            }
            last_ms = now;
            match self.round() {
                Round::Renewed(lapsed) => {
                    if lost_logged {
                        tracing::info!("daemon {}: lease renewed; serving again", self.state.daemon_id);
                        lost_logged = false;
                    } else if lapsed > 0 {
                        // Peers answered, but none within a lease: contents were
                        // refused meanwhile, and nothing else would say so.
                        tracing::warn!(
                            "daemon {}: its lease had run out for {lapsed} ms before a peer's heartbeat answer                              renewed it (peers slow to answer); contents were refused (EHOSTDOWN) meanwhile",
                            self.state.daemon_id
                        );
                    }
                }
                Round::Fenced(by) => {
                    if !self.state.recovering.swap(true, Ordering::SeqCst) {
                        tracing::warn!(
                            "daemon {}: fenced (daemon {by} says clients changed its copies without it); \
                             refusing contents (EHOSTDOWN) until `gust repair --id {}`",
                            self.state.daemon_id,
                            self.state.daemon_id
                        );
                    }
                }
                Round::Lost(peers, why) => {
                    if !lost_logged && !self.state.lease.holds() {
                        tracing::warn!(
                            "daemon {}: none of its {peers} peers answered a heartbeat for {} ms ({why}); \
                             refusing contents (EHOSTDOWN) until one does",
                            self.state.daemon_id,
                            LEASE.as_millis()
                        );
                        lost_logged = true;
                    }
                }
            }
            let spent = Duration::from_millis(now_ms().saturating_sub(now));
            std::thread::sleep(HEARTBEAT_INTERVAL.saturating_sub(spent));
        }
    }
}

/// In a replicated instance: requires the lease from now on, runs a first round
/// before returning (so a fenced daemon never serves after a restart, and one whose
/// peers are all gone or not started yet serves at once), then heartbeats in a
/// thread. A daemon that cannot renew in that first round starts without a lease
/// and serves once a round renews it.
pub fn start(state: Arc<State>, hosts_path: &Path, replicas: u32) -> Result<(), String> {
    if replicas <= 1 {
        return Ok(());
    }
    state.lease.require();
    let mut hb = Heartbeats { state: state.clone(), peers: Peers::new(hosts_path) };
    match hb.round() {
        Round::Fenced(by) => {
            state.recovering.store(true, Ordering::SeqCst);
            tracing::warn!(
                "daemon {} is fenced (daemon {by}: clients changed its copies without it); refusing contents \
                 (EHOSTDOWN) until `gust repair --id {}`",
                state.daemon_id,
                state.daemon_id
            );
        }
        Round::Lost(peers, why) => {
            tracing::warn!("daemon {}: no lease yet ({peers} peers, {why}); serving once one answers", state.daemon_id)
        }
        Round::Renewed(_) => {}
    }
    state.lease.first_round_done();
    std::thread::Builder::new()
        .name("gust-heartbeat".into())
        .spawn(move || hb.run())
        .map(|_| ())
        .map_err(|e| format!("cannot start the heartbeat thread: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_before_the_first_round_waits_for_it() {
        let lease = Arc::new(Lease::new());
        lease.require();
        assert!(!lease.holds(), "no round yet: no lease");
        let l = lease.clone();
        let round = std::thread::spawn(move || {
            // A first round that takes a while, then renews.
            std::thread::sleep(Duration::from_millis(100));
            l.renew_from(now_ms());
            l.first_round_done();
        });
        assert!(lease.holds_or_wait_first_round(), "served once the first round renewed the lease");
        round.join().unwrap();
    }

    #[test]
    fn after_the_first_round_a_missing_lease_is_refused_at_once() {
        let lease = Lease::new();
        lease.require();
        lease.first_round_done();
        let t = std::time::Instant::now();
        assert!(!lease.holds_or_wait_first_round());
        assert!(t.elapsed() < FIRST_ROUND_WAIT, "no wait once the first round is over");
    }

    fn hosts(ids: &[u32], port0: u16) -> HostsFile {
        let mut h = HostsFile::new("test".into(), 4096, "/gust".into(), false);
        h.replicas = 2;
        h.daemons = ids
            .iter()
            .map(|&id| DaemonEntry {
                id,
                host: "h".into(),
                pid: 1,
                rootdir: PathBuf::from("/r"),
                endpoints: vec![gust_transport::Endpoint::Tcp(([127, 0, 0, 1], port0 + id as u16).into())],
                capacity_bytes: None,
            })
            .collect();
        h
    }

    /// Writes `h` over `path` (a new file, as a registration does) with the mtime
    /// the file had before: two registrations within one clock tick.
    fn store_within_the_same_tick(h: &HostsFile, path: &Path) {
        let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
        h.store(path).unwrap();
        std::fs::File::options().write(true).open(path).unwrap().set_modified(mtime).unwrap();
        assert_eq!(std::fs::metadata(path).unwrap().modified().unwrap(), mtime);
    }

    fn linked(p: &Peers) -> Vec<(u32, String)> {
        let mut v: Vec<_> = p.links.iter().map(|(id, l)| (*id, l.entry.network().unwrap().to_string())).collect();
        v.sort();
        v
    }

    #[test]
    fn peers_that_register_after_the_first_read_are_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        // Daemon 1 reads the file while daemon 0 has not registered yet.
        hosts(&[1, 2], 40000).store(&path).unwrap();
        let mut p = Peers::new(&path);
        p.refresh(1);
        assert!(linked(&p).is_empty(), "its peer 0 is not in the file yet");
        store_within_the_same_tick(&hosts(&[0, 1, 2], 40000), &path);
        p.refresh(1);
        assert_eq!(
            linked(&p),
            vec![(0, "tcp:127.0.0.1:40000".into()), (2, "tcp:127.0.0.1:40002".into())],
            "a round that asks nobody renews the lease: the peers must be found"
        );
    }

    #[test]
    fn a_replaced_hosts_file_is_read_again_whatever_its_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        hosts(&[0, 1, 2], 40000).store(&path).unwrap();
        let mut p = Peers::new(&path);
        p.refresh(1);
        assert_eq!(linked(&p).len(), 2);
        // Daemon 2 restarted elsewhere (same length of text, same mtime).
        let mut moved = hosts(&[0, 1, 2], 40000);
        moved.daemons[2].endpoints = vec![gust_transport::Endpoint::Tcp(([127, 0, 0, 1], 41002).into())];
        store_within_the_same_tick(&moved, &path);
        p.refresh(1);
        assert_eq!(linked(&p)[1], (2, "tcp:127.0.0.1:41002".into()));
    }
}
