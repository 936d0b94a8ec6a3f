//! Fencing, the client's part (docs/DESIGN.md, "Fencing"): a change that went to a
//! replica group without one of its members D (D was down, hung, unreachable or
//! refusing) is acknowledged only once D cannot serve its now stale copies.
//!
//! Before acknowledging, the client sends `fence D` to D's peers (the daemons that
//! share a replica group with D, gust_placement's `replica_peers`) that it does not
//! find down. Each records the fence durably, answers D's heartbeats with `fenced`
//! from then on, and says how long the lease it last granted D may still run; the
//! client waits out the longest (plus an eighth and 20 ms for clocks that run at
//! slightly different rates). D, whose lease needs a peer's `not fenced` answer, then
//! cannot be serving: it asked a fenced peer and stopped, or it reached none and its
//! lease ran out. A peer the client cannot reach but D can is a second fault.
//!
//! A client remembers for `DOWN_SKIP` (5 s) that it fenced D, or until it sees D
//! serve: `gust repair` clears the fences and waits as long before D serves again,
//! so no client skips fencing a D that was repaired and failed again meanwhile.
//!
//! Cost: only the first change a client makes without D pays, one request to each
//! of D's peers (2(R-1) in parallel, again every 200 ms while it waits) and the
//! wait: at most `LEASE` (2 s) + 270 ms when D was answering heartbeats until the
//! moment it was fenced; about one heartbeat round (250-750 ms) when D's process
//! is gone (killed: the peers' heartbeats are refused, and they answer 0 then);
//! nothing when D has been silent (hung, partitioned) for a lease already, as when
//! the change first waited for D's RPC timeout. Later changes, and other clients once D knows
//! it is fenced, wait nothing; they send the fence requests again once per
//! `DOWN_SKIP`.
//!
//! Not for: the peer's and the fenced daemon's parts (gust-daemon, fence.rs and
//! lease.rs), routing of copies (replica.rs).

use crate::replica::DOWN_SKIP;
use crate::rpc::{Answer, Call, Transport};
use crate::Errno;
use gust_proto::{Request, Response};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Transport {
    /// `daemon` answered as a serving daemon: a fence this client set was cleared
    /// (it was repaired), so a later skip fences it again.
    pub(crate) fn serving(&self, daemon: u32) {
        let f = &self.fenced_until_ms[daemon as usize];
        if f.load(Ordering::Relaxed) != 0 {
            f.store(0, Ordering::Relaxed);
        }
    }

    /// Whether this client fenced `daemon` less than `DOWN_SKIP` ago.
    fn fenced_lately(&self, daemon: u32) -> bool {
        self.fenced_until_ms[daemon as usize].load(Ordering::Relaxed) > self.now_ms()
    }

    /// For every change answered by some member while another member of its group
    /// was skipped (`skipped`: call index, member): fences the skipped members this
    /// client has not fenced yet. A change whose skipped member cannot be fenced is
    /// not acknowledged: its answer becomes EIO.
    pub(crate) fn fence_before_acknowledging(&self, skipped: &[(usize, u32)], answers: &mut [Answer]) {
        let applied = |i: usize| !matches!(answers[i], Err(Errno(libc::EIO)));
        let mut todo: Vec<u32> =
            skipped.iter().filter(|(i, m)| applied(*i) && !self.fenced_lately(*m)).map(|(_, m)| *m).collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return;
        }
        let failed: Vec<u32> = todo.into_iter().filter(|d| self.fence(*d).is_err()).collect();
        for (i, m) in skipped {
            if failed.contains(m) {
                answers[*i] = Err(Errno(libc::EIO));
            }
        }
    }

    /// Fences `daemon` on its reachable peers and waits out its lease. The wait is
    /// asked again every `FENCE_RECHECK`: a peer whose heartbeat finds `daemon`'s
    /// process gone (a refused connection) answers 0 from then on, so a killed
    /// daemon costs a few hundred milliseconds, not a lease.
    fn fence(&self, daemon: u32) -> Result<(), Errno> {
        let peers: Vec<u32> = gust_placement::replica_peers(daemon, self.replicas, self.placed())
            .into_iter()
            .filter(|p| !self.is_down(*p))
            .collect();
        // Per peer that took the fence: the earliest moment its answers promise
        // `daemon`'s lease from it is over.
        let mut over: Vec<Option<Instant>> = vec![None; peers.len()];
        loop {
            let calls =
                peers.iter().map(|p| Call { daemon: *p, req: Request::Fence { daemon }, bulk: Vec::new() }).collect();
            let answers = self.send_batch(calls, peers.iter().map(|_| None).collect(), &mut []);
            let now = Instant::now();
            for (o, a) in over.iter_mut().zip(answers) {
                if let Ok((Response::Fenced { lease_left_ms: left }, _)) = a {
                    // An eighth and 20 ms more: clocks may run at slightly different rates.
                    let left = if left == 0 { 0 } else { left + left / 8 + 20 };
                    let t = now + Duration::from_millis(left);
                    *o = Some(o.map_or(t, |prev| prev.min(t)));
                }
            }
            let Some(until) = over.iter().flatten().max().copied() else {
                let msg = format!(
                    "daemon {daemon} missed a change and none of its peers ({}) took the fence; the change is not \
                     acknowledged",
                    peers.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                );
                *self.last_error_slot() = Some(msg);
                return Err(Errno(libc::EIO));
            };
            let now = Instant::now();
            if until <= now {
                break;
            }
            std::thread::sleep((until - now).min(FENCE_RECHECK));
        }
        let until = self.now_ms() + DOWN_SKIP.as_millis() as u64;
        self.fenced_until_ms[daemon as usize].store(until, Ordering::Relaxed);
        Ok(())
    }
}

/// How often a client waiting out a fenced daemon's lease asks its peers again.
const FENCE_RECHECK: Duration = Duration::from_millis(200);

impl crate::Client {
    /// The peers of `daemon` that hold a fence on it (`gust status`). Asks with the
    /// heartbeat `daemon` itself sends, which counts as a lease grant to it: a
    /// client fencing it within `LEASE` after waits up to that much longer.
    pub fn fenced_by(&self, daemon: u32) -> Vec<u32> {
        let t = &self.transport;
        let peers = gust_placement::replica_peers(daemon, t.replicas, t.placed());
        let calls =
            peers.iter().map(|p| Call { daemon: *p, req: Request::Heartbeat { from: daemon }, bulk: Vec::new() });
        let answers = t.send_batch(calls.collect(), peers.iter().map(|_| None).collect(), &mut []);
        peers
            .into_iter()
            .zip(answers)
            .filter(|(_, a)| matches!(a, Ok((Response::Lease { fenced: true }, _))))
            .map(|(p, _)| p)
            .collect()
    }

    /// Clears the fences on `daemon` (`gust repair`, once it is rebuilt). Returns
    /// the peers that could not be told (not answering): they still hold the fence,
    /// and `daemon` will be fenced again when it reaches one of them.
    pub fn unfence(&self, daemon: u32) -> Vec<u32> {
        let t = &self.transport;
        let peers = gust_placement::replica_peers(daemon, t.replicas, t.placed());
        let calls = peers.iter().map(|p| Call { daemon: *p, req: Request::Unfence { daemon }, bulk: Vec::new() });
        let answers = t.send_batch(calls.collect(), peers.iter().map(|_| None).collect(), &mut []);
        peers.into_iter().zip(answers).filter(|(_, a)| a.is_err()).map(|(p, _)| p).collect()
    }
}
