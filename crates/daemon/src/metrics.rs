//! The daemon's counters: what `gust status`, `gust stop --stats` and the Prometheus
//! page show (the Stats and Metrics requests).
//!
//! Plain relaxed atomics, bumped on the request path: per request one add for its op,
//! one for its latency bucket, one for the latency sum, one for an error if any, one
//! for its directory (see `dirs`); nothing allocated, no lock taken. Store sizes are
//! computed when asked for, never on the request path.
//!
//! Not for: serving the numbers (exporter), deciding anything.

use crate::dirs::DirTable;
use crate::state::State;
use gust_proto::{DaemonMetrics, DaemonStats, OpMetrics, LATENCY_BUCKET_BOUNDS_US, OPS, OP_MAX};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Errnos counted one by one (Linux numbers them below 134); others count as this.
const ERRNO_COUNTED_MAX: usize = 133;
const BUCKETS: usize = LATENCY_BUCKET_BOUNDS_US.len() + 1;
/// The chunk store's disk usage is a walk over its files: recomputed at most this
/// often, so that a scrape every few seconds does not walk a million files each time.
const CHUNK_USAGE_TTL: Duration = Duration::from_secs(10);

#[derive(Default)]
struct OpCounters {
    count: AtomicU64,
    errors: AtomicU64,
    latency_us_sum: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

pub struct Metrics {
    started: Instant,
    ops: Vec<OpCounters>,
    pub connections_open: AtomicU64,
    pub frames_refused: AtomicU64,
    pub bytes_written: AtomicU64,
    pub bytes_read: AtomicU64,
    errors: Vec<AtomicU64>,
    /// Metadata requests per directory (bounded).
    pub dirs: DirTable,
    /// The address of the Prometheus page, once it is bound.
    pub exporter_addr: OnceLock<String>,
    chunk_usage: Mutex<Option<(Instant, u64)>>,
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
            ops: (0..=OP_MAX).map(|_| OpCounters::default()).collect(),
            connections_open: AtomicU64::new(0),
            frames_refused: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            errors: (0..=ERRNO_COUNTED_MAX + 1).map(|_| AtomicU64::new(0)).collect(),
            dirs: DirTable::new(),
            exporter_addr: OnceLock::new(),
            chunk_usage: Mutex::new(None),
        }
    }

    /// One request of op code `op` (already checked to be a known op).
    pub fn count_op(&self, op: u16) {
        if let Some(c) = self.ops.get(op as usize) {
            c.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request of op `op` answered after `took`, with an errno or not.
    pub fn finish(&self, op: u16, took: Duration, errno: Option<i32>) {
        let Some(c) = self.ops.get(op as usize) else { return };
        let us = took.as_micros().min(u64::MAX as u128) as u64;
        let b = LATENCY_BUCKET_BOUNDS_US.iter().position(|&bound| us <= bound).unwrap_or(BUCKETS - 1);
        c.buckets[b].fetch_add(1, Ordering::Relaxed);
        c.latency_us_sum.fetch_add(us, Ordering::Relaxed);
        if let Some(e) = errno {
            c.errors.fetch_add(1, Ordering::Relaxed);
            let i = if e > 0 && (e as usize) <= ERRNO_COUNTED_MAX { e as usize } else { ERRNO_COUNTED_MAX + 1 };
            self.errors[i].fetch_add(1, Ordering::Relaxed);
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
                .map(|(op, name)| (name.to_string(), self.ops[*op as usize].count.load(Ordering::Relaxed)))
                .collect(),
            connections_open: self.connections_open.load(Ordering::Relaxed),
            frames_refused: self.frames_refused.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
        }
    }

    /// Forgets the cached disk usage (a move changed it at once): the next
    /// metrics request walks the store again.
    pub fn forget_chunk_usage(&self) {
        *self.chunk_usage.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Disk usage of the chunk store, at most `CHUNK_USAGE_TTL` old.
    fn chunk_store_bytes(&self, state: &State) -> u64 {
        let mut cached = self.chunk_usage.lock().unwrap_or_else(|e| e.into_inner());
        match *cached {
            Some((at, bytes)) if at.elapsed() < CHUNK_USAGE_TTL => bytes,
            _ => {
                let bytes = state.chunks.disk_usage_bytes();
                *cached = Some((Instant::now(), bytes));
                bytes
            }
        }
    }
}

/// Everything a daemon counts and knows about its stores (the Metrics request).
pub fn collect(state: &State) -> DaemonMetrics {
    let m = &state.metrics;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let ops = OPS
        .iter()
        .map(|(op, name)| {
            let c = &m.ops[*op as usize];
            OpMetrics {
                name: name.to_string(),
                count: load(&c.count),
                errors: load(&c.errors),
                latency_us_sum: load(&c.latency_us_sum),
                latency_buckets: c.buckets.iter().map(load).collect(),
            }
        })
        .collect();
    let errors = m
        .errors
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            let n = load(n);
            let errno = if i > ERRNO_COUNTED_MAX { -1 } else { i as i32 };
            (n > 0).then_some((errno, n))
        })
        .collect();
    let (capacity_bytes, free_bytes, avail_bytes) = state.capacity().unwrap_or((0, 0, 0));
    let (busiest_dirs, dirs_untracked) = m.dirs.busiest(gust_proto::BUSIEST_DIRS_MAX);
    DaemonMetrics {
        daemon_id: state.daemon_id,
        uptime_ms: m.started.elapsed().as_millis() as u64,
        metrics_addr: m.exporter_addr.get().cloned().unwrap_or_default(),
        ops,
        errors,
        bytes_written: load(&m.bytes_written),
        bytes_read: load(&m.bytes_read),
        connections_open: load(&m.connections_open),
        frames_refused: load(&m.frames_refused),
        metadata_records: state.metadata.estimate_records(),
        metadata_store_bytes: state.metadata.size_bytes(),
        chunk_store_bytes: m.chunk_store_bytes(state),
        capacity_bytes,
        free_bytes,
        avail_bytes,
        busiest_dirs,
        dirs_untracked,
        grants: state.grants.metrics(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_their_buckets_and_errors_by_errno() {
        let m = Metrics::new();
        let first = LATENCY_BUCKET_BOUNDS_US[0];
        m.finish(3, Duration::from_micros(first), None); // bound inclusive: first bucket
        m.finish(3, Duration::from_micros(first + 1), Some(libc::ENOENT));
        m.finish(3, Duration::from_secs(5), Some(9999)); // slower than every bound; odd errno
        let c = &m.ops[3];
        let b: Vec<u64> = c.buckets.iter().map(|x| x.load(Ordering::Relaxed)).collect();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 1);
        assert_eq!(b[BUCKETS - 1], 1);
        assert_eq!(c.errors.load(Ordering::Relaxed), 2);
        assert_eq!(c.latency_us_sum.load(Ordering::Relaxed), 2 * first + 1 + 5_000_000);
        assert_eq!(m.errors[libc::ENOENT as usize].load(Ordering::Relaxed), 1);
        assert_eq!(m.errors[ERRNO_COUNTED_MAX + 1].load(Ordering::Relaxed), 1);
        // An op code past the table is ignored, not a panic.
        m.finish(OP_MAX + 1, Duration::ZERO, None);
    }
}
