//! The daemon's counters: what `gust status` shows (the Stats request).
//!
//! Plain relaxed atomics, bumped on the request path: one uncontended atomic add per
//! counter per request, nothing allocated.

use gust_proto::{DaemonStats, OPS, OP_MAX};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

pub struct Metrics {
    started: Instant,
    ops: Vec<AtomicU64>,
    pub connections_open: AtomicU64,
    pub frames_refused: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            started: Instant::now(),
            ops: (0..=OP_MAX).map(|_| AtomicU64::new(0)).collect(),
            connections_open: AtomicU64::new(0),
            frames_refused: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
        }
    }

    /// One request of op code `op` (already checked to be a known op).
    pub fn count_op(&self, op: u16) {
        if let Some(c) = self.ops.get(op as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn refused(&self) {
        self.frames_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self, daemon_id: u32) -> DaemonStats {
        DaemonStats {
            daemon_id,
            uptime_ms: self.started.elapsed().as_millis() as u64,
            ops: OPS
                .iter()
                .map(|(op, name)| (name.to_string(), self.ops[*op as usize].load(Ordering::Relaxed)))
                .collect(),
            connections_open: self.connections_open.load(Ordering::Relaxed),
            frames_refused: self.frames_refused.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
        }
    }
}
