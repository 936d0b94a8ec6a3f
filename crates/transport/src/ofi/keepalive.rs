//! Finding peers that are gone.
//!
//! A reliable-datagram endpoint has no connection to reset: when a client process
//! dies, the daemon's thread serving it would wait for its next request for ever,
//! and every short-lived process would leave a thread behind. So the background
//! thread sends a PING on each connection that has been silent for a keepalive
//! interval (10 s; `GUST_FABRIC_KEEPALIVE_MS`), which the peer answers with a
//! PONG; a connection that hears nothing for MISSES_MAX + 1 intervals ends, as a
//! socket's ends on a reset (and one whose send completes with an error ends at
//! once). Providers differ in what they say about a peer that is gone (rxm over
//! tcp refuses sends while its reconnects are refused; shm takes them into the
//! dead process's queue), so only an answer counts. A peer stopped (SIGSTOP)
//! longer than that loses its connections too, and connects again when it
//! resumes.

use super::conn::{lock, Conn};
use super::fabric::{header, Control, Fabric, KIND_PING, KIND_PONG};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Intervals of silence after which a peer is gone, beyond the first.
const MISSES_MAX: u32 = 3;

/// How often silent connections are probed.
pub(super) fn interval() -> Duration {
    static EVERY: OnceLock<Duration> = OnceLock::new();
    *EVERY.get_or_init(|| {
        let ms = std::env::var("GUST_FABRIC_KEEPALIVE_MS").ok().and_then(|v| v.parse::<u64>().ok());
        Duration::from_millis(ms.unwrap_or(10_000).max(10))
    })
}

impl Fabric {
    /// A keepalive round, if one is due (the background thread asks often).
    pub(super) fn keepalive_due(&self) {
        {
            let mut next = lock(&self.next_keepalive);
            let now = Instant::now();
            if now < *next {
                return;
            }
            *next = now + interval();
        }
        for c in self.connections() {
            self.probe(&c);
        }
    }

    fn probe(&self, c: &Arc<Conn>) {
        let to = c.peer_conn.load(Ordering::Acquire);
        if to == 0 || c.closed() || c.heard_within(interval()) {
            return;
        }
        if !c.heard_within(interval() * (MISSES_MAX + 1)) {
            // Gone: reads see the end of the stream.
            c.close();
            self.forget(c);
            return;
        }
        self.queue_control(c.peer, header(KIND_PING, to));
    }

    /// A PING on `c`: answered when the provider takes it.
    pub(super) fn answer_ping(&self, c: &Conn) {
        let to = c.peer_conn.load(Ordering::Acquire);
        if to != 0 {
            self.queue_control(c.peer, header(KIND_PONG, to));
        }
    }

    fn queue_control(&self, dest: u64, bytes: Vec<u8>) {
        let until = Instant::now() + interval();
        lock(&self.outbox).push_back(Control { dest, bytes, until });
    }
}
