//! Fences, the peer's half of lease-based fencing (docs/DESIGN.md, "Fencing"): which
//! daemons of the instance clients fenced here, and when this daemon last granted
//! each peer a lease.
//!
//! A client that skipped daemon D for a change (D was down, hung or unreachable)
//! fences D on D's peers before it acknowledges the change. A fence is a key in the
//! column family `fences` of the metadata store (gust-store, fences.rs), written with
//! a synced WAL: it outlives this daemon's crash, since D must stay fenced until
//! `gust repair` rebuilds it, whoever restarts in between. From then on D's
//! heartbeats get `fenced`, and D stops serving. The answer to the fence says how
//! long the lease this daemon last granted D may still run, which the client waits
//! out.
//!
//! Not for: the asking side (lease.rs), the client's fencing (gust-client, fence.rs).

use gust_store::metadata::MetadataStore;
use gust_store::Res;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bound on the peers whose last grant is remembered (a hostile but authenticated
/// peer could name any id): the hosts file's own bound on daemons.
const GRANTS_MAX: usize = gust_hosts::DAEMONS_MAX;

/// What this daemon knows as a peer: the fences (a copy of the store's, read on
/// every heartbeat) and its last grant to each peer.
pub struct Fences {
    fenced: Mutex<HashSet<u32>>,
    granted: Mutex<HashMap<u32, Instant>>,
    /// When this daemon's own heartbeat to a peer last found nothing listening
    /// (lease.rs): its process was gone then.
    refused: Mutex<HashMap<u32, Instant>>,
    /// Held while a fence is written to the store (a synced write, slow on a busy
    /// disk), in place of `fenced`: heartbeats, which need `fenced`, are answered
    /// meanwhile. Holding `fenced` there made the other peers' heartbeats wait for
    /// the disk, and a write longer than their lease stopped them serving.
    storing: Mutex<()>,
}

impl Fences {
    pub fn new() -> Fences {
        Fences {
            fenced: Mutex::new(HashSet::new()),
            granted: Mutex::new(HashMap::new()),
            refused: Mutex::new(HashMap::new()),
            storing: Mutex::new(()),
        }
    }

    /// Takes the fences the metadata store holds (at start).
    pub fn load(&self, md: &MetadataStore) -> Result<(), String> {
        let stored = md.fences().map_err(|e| format!("cannot read the fences of the metadata store: errno {e}"))?;
        if !stored.is_empty() {
            tracing::warn!("fenced here until repaired: daemon(s) {}", ids(&stored));
        }
        self.fenced.lock().unwrap_or_else(|e| e.into_inner()).extend(stored);
        Ok(())
    }

    /// Answers daemon `from`'s heartbeat: whether it is fenced; if not, the grant is
    /// remembered (a fence set later waits out its lease).
    pub fn heartbeat(&self, from: u32) -> Res<bool> {
        let fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        if fenced.contains(&from) {
            return Ok(true);
        }
        let mut g = self.granted.lock().unwrap_or_else(|e| e.into_inner());
        if g.len() >= GRANTS_MAX && !g.contains_key(&from) {
            return Err(libc::EINVAL);
        }
        // Under the fence lock: a fence set after this grant sees it.
        g.insert(from, Instant::now());
        Ok(false)
    }

    /// Fences `daemon` (durably first); returns how long its lease from this daemon
    /// may still run.
    ///
    /// Durable before it counts: the fence is stored, then heartbeats see it. Grants
    /// made while it was being stored are in the answer (the lease left is read
    /// after), and none is made once it counts (both under `fenced`).
    pub fn fence(&self, md: &MetadataStore, daemon: u32, lease: Duration) -> Res<Duration> {
        let storing = self.storing.lock().unwrap_or_else(|e| e.into_inner());
        if !self.is_fenced(daemon) {
            md.set_fence(daemon, true)?;
            self.fenced.lock().unwrap_or_else(|e| e.into_inner()).insert(daemon);
            tracing::warn!(
                "daemon {daemon} fenced by a client: it missed changes; it serves again after `gust repair`"
            );
        }
        drop(storing);
        let _fenced = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        let Some(granted) = self.granted.lock().unwrap_or_else(|e| e.into_inner()).get(&daemon).copied() else {
            return Ok(Duration::ZERO);
        };
        // Its process was gone after the last grant (a refused connection): any
        // process of it now is a new one, which serves only after a heartbeat round,
        // and that round meets the fence. Nothing to wait for (a killed daemon).
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner()).get(&daemon).copied();
        if refused.is_some_and(|r| r > granted) {
            return Ok(Duration::ZERO);
        }
        Ok(lease.saturating_sub(granted.elapsed()))
    }

    /// This daemon's heartbeat to `peer`, sent after `asked`, found nothing
    /// listening (a peer, so one of the instance's daemons: the map stays within
    /// the peers). The time is the one before the attempt: a process of the peer
    /// that started after the refusal got any grant after it.
    pub fn peer_refused(&self, peer: u32, asked: Instant) {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).insert(peer, asked);
    }

    /// Lifts the fence on `daemon`: it counts no longer (heartbeats get `not
    /// fenced`) only once the store no longer holds it.
    pub fn unfence(&self, md: &MetadataStore, daemon: u32) -> Res<()> {
        let _storing = self.storing.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_fenced(daemon) {
            md.set_fence(daemon, false)?;
            self.fenced.lock().unwrap_or_else(|e| e.into_inner()).remove(&daemon);
            tracing::info!("daemon {daemon} unfenced (repaired)");
        }
        Ok(())
    }

    fn is_fenced(&self, daemon: u32) -> bool {
        self.fenced.lock().unwrap_or_else(|e| e.into_inner()).contains(&daemon)
    }
}

impl Default for Fences {
    fn default() -> Self {
        Fences::new()
    }
}

/// Daemon ids for a log line: "1, 3".
fn ids(v: &[u32]) -> String {
    v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
}
