//! The node proxy (docs/DESIGN.md, "The node proxy"): client processes of a node
//! hand requests for remote daemons to their own node's daemon in a `Forward`
//! envelope; this daemon sends each on one of a few multiplexed connections it
//! keeps to every remote daemon (gust-rpc's `Connection`, here called a link), with
//! a request id of its own, and answers
//! the client with the remote reply as it came. A remote daemon serves such a
//! connection out of order on a small pool of its own (`mux`), so one slow request
//! does not hold up the others on it.
//!
//! Connections per daemon: its own node's P client processes, plus k from each of
//! the other N-1 daemons (k = `GUST_PROXY_LINKS`, default 2), instead of N·P.
//!
//! Bounds: a forward waits for the remote reply at most the client's RPC timeout
//! (carried in the envelope); a remote daemon that refuses, cannot be reached, dies
//! or does not answer in time gives the client EHOSTUNREACH, which the client turns
//! into the same EIO (and replica skip) as a failed direct connection. A forwarded
//! request is decoded here before it goes on, so a malformed one gets EPROTO and
//! never reaches, or disturbs, a shared connection.
//!
//! Not for: the client's side (gust-client's rpc.rs picks the proxy with
//! `GUST_PROXY=1`), placement, replicas (the client still addresses every copy).

mod mux;

use crate::state::State;
use gust_proto::{decode_request, Request};
use gust_rpc::{Connection as Link, Options};
pub(crate) use mux::MuxWriter;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::warn;

/// Multiplexed connections kept to each remote daemon (`GUST_PROXY_LINKS`, 1-16).
pub const LINKS_PER_PEER_DEFAULT: usize = 2;
/// A forward's wait when the envelope names no timeout, and the most it may name.
const FORWARD_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
const FORWARD_TIMEOUT_MAX: Duration = Duration::from_secs(600);

pub struct Proxy {
    hosts_file: PathBuf,
    /// Forwards being waited for by event-loop workers, and the most at once: two
    /// workers always stay free to read the links of other daemons, whose
    /// forwards may be what this daemon's forwards wait for.
    forwarding: AtomicUsize,
    forwarding_max: usize,
    links_per_peer: usize,
    /// Per remote daemon: its connection slots (a dead or unopened one is None).
    links: Mutex<HashMap<u32, Peer>>,
    pub(crate) mux: mux::Pool,
}

fn links_per_peer() -> usize {
    std::env::var("GUST_PROXY_LINKS").ok().and_then(|v| v.parse().ok()).unwrap_or(LINKS_PER_PEER_DEFAULT).clamp(1, 16)
}

/// Sets up the proxy of this daemon: forwarding to the daemons `hosts_file` lists,
/// and the pool serving multiplexed connections (`threads` workers).
pub fn start(state: &Arc<State>, hosts_file: PathBuf, threads: usize) -> std::io::Result<()> {
    let mux = mux::Pool::start(state, threads)?;
    let p = Proxy {
        hosts_file,
        forwarding: AtomicUsize::new(0),
        forwarding_max: threads.saturating_sub(2).max(1),
        links_per_peer: links_per_peer(),
        links: Mutex::new(HashMap::new()),
        mux,
    };
    let _ = state.proxy.set(p);
    Ok(())
}

/// Answers the request that switched a connection to multiplexed service.
pub(crate) fn answer_multiplex(w: &MuxWriter, op: u16, id: u64) -> std::io::Result<()> {
    mux::Pool::answer_ok(w, op, id)
}

/// The connections to one remote daemon, taken in turn.
struct Peer {
    slots: Vec<Option<Arc<Link>>>,
    next: usize,
}

/// What a forward answers: the remote reply's body and bulk, or an errno.
pub(crate) type Forwarded = Result<(Vec<u8>, Vec<u8>), i32>;

impl Proxy {
    /// Takes a place among the forwards being waited for; false if all are taken
    /// (the connection waits, parked, and tries again).
    pub(crate) fn begin_forward(&self) -> bool {
        self.forwarding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.forwarding_max).then_some(n + 1))
            .is_ok()
    }

    pub(crate) fn end_forward(&self) {
        self.forwarding.fetch_sub(1, Ordering::AcqRel);
    }

    /// Sends `op` with `body` and `bulk` to daemon `target` and waits for its reply.
    /// `generation` is the layout the client routed by (the forward's frame
    /// header): the target checks it as it would the client's own request.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        &self,
        state: &State,
        target: u32,
        op: u16,
        generation: u32,
        timeout_ms: u32,
        body: &[u8],
        bulk: &[u8],
    ) -> Forwarded {
        // Checked here, not at the remote: a frame it refused would close a
        // connection other clients' requests share.
        let idempotent = match decode_request(op, body) {
            Ok(Request::Forward { .. } | Request::Multiplex) | Err(_) => return Err(libc::EPROTO),
            Ok(r) => r.is_idempotent(),
        };
        if target == state.daemon_id {
            return Err(libc::EINVAL);
        }
        let timeout = match timeout_ms {
            0 => FORWARD_TIMEOUT_DEFAULT,
            t => Duration::from_millis(t as u64).min(FORWARD_TIMEOUT_MAX),
        };
        // A connection that died before any reply (the remote restarted) is worth
        // one more try on a new one when the request may be applied twice.
        for attempt in 0..2 {
            let (link, fresh) = match self.link(state, target, timeout) {
                Ok(l) => l,
                Err(e) => {
                    if state.refusals_logged.admit().is_some() {
                        warn!(daemon = state.daemon_id, "proxy: daemon {target}: {e}");
                    }
                    return Err(libc::EHOSTUNREACH);
                }
            };
            match link.call_routed(op, generation, body, bulk, timeout) {
                Ok(r) => return Ok(r),
                Err(gust_rpc::Error::Lost(_)) if attempt == 0 && idempotent && !fresh => continue,
                Err(e) => {
                    if state.refusals_logged.admit().is_some() {
                        warn!(daemon = state.daemon_id, "proxy: daemon {target}: {e}");
                    }
                    return Err(libc::EHOSTUNREACH);
                }
            }
        }
        Err(libc::EHOSTUNREACH)
    }

    /// One of the connections to `target`, round robin, opened if needed; true if
    /// opened just now.
    fn link(&self, state: &State, target: u32, timeout: Duration) -> Result<(Arc<Link>, bool), String> {
        let slot = {
            let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
            let k = self.links_per_peer;
            let peer = links.entry(target).or_insert_with(|| Peer { slots: vec![None; k], next: 0 });
            let slot = peer.next % k;
            peer.next = peer.next.wrapping_add(1);
            match &peer.slots[slot] {
                Some(l) if l.alive() => return Ok((l.clone(), false)),
                _ => slot,
            }
        };
        // Connect outside the lock: a daemon that does not answer must not hold up
        // forwards to the others. Two threads may both connect; the later one wins
        // the slot and the other connection serves its one call, then closes.
        let hosts = gust_hosts::HostsFile::load(&self.hosts_file).map_err(|e| format!("hosts file: {e}"))?;
        let entry = hosts.daemons.iter().find(|d| d.id == target).ok_or_else(|| format!("no daemon {target}"))?;
        let ep = entry.network().ok_or_else(|| format!("daemon {target} has no network endpoint"))?;
        let opts = Options { multiplex: true, name: "proxy-link", ..Options::new(timeout) };
        let l = Arc::new(Link::open(ep, &state.secret, opts).map_err(|e| e.to_string())?);
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(peer) = links.get_mut(&target) {
            peer.slots[slot] = Some(l.clone());
        }
        Ok((l, true))
    }

    /// Open connections to remote daemons (for `gust status` and tests).
    pub fn links_open(&self) -> usize {
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        links.values().flat_map(|p| p.slots.iter().flatten()).filter(|l| l.alive()).count()
    }
}
