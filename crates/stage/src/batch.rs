//! Batches per daemon, and the threads that send them.
//!
//! Entries bound for one daemon are cut into batches at the protocol's bounds
//! (entries, counted bytes, spans, file bytes moved). A pool of threads sends them
//! with at most `jobs` requests in flight per daemon, every daemon busy at once:
//! the daemons copy in parallel while this process only waits.

use gust_client::stage_types::{
    entry_bytes, StageChunks, STAGE_BATCH_BYTES_MAX, STAGE_BATCH_ENTRIES_MAX, STAGE_REQUEST_BYTES_MAX,
};
use gust_client::Client;
use gust_client::Span;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bound on the threads sending batches, whatever the daemon count.
const THREADS_MAX: usize = 64;
/// Spans in one batch (the protocol's bound on a request's spans).
const SPANS_MAX: usize = 4096;

/// Entries for one daemon, each with the item (file) it is for.
pub(crate) struct Batch<T> {
    pub entries: Vec<T>,
    pub owners: Vec<usize>,
}

struct Open<T> {
    batch: Batch<T>,
    counted: usize,
    data: u64,
    spans: usize,
}

impl<T> Default for Open<T> {
    fn default() -> Self {
        Open { batch: Batch { entries: Vec::new(), owners: Vec::new() }, counted: 0, data: 0, spans: 0 }
    }
}

pub(crate) struct Batcher<T> {
    done: Vec<VecDeque<Batch<T>>>,
    open: Vec<Open<T>>,
    data_max: u64,
}

impl<T> Batcher<T> {
    pub fn new(daemons: u32) -> Self {
        Self::with_data_max(daemons, STAGE_REQUEST_BYTES_MAX)
    }

    /// Batches that move at most `data_max` file bytes each (a throttle's piece).
    pub fn with_data_max(daemons: u32, data_max: u64) -> Self {
        Batcher {
            done: (0..daemons).map(|_| VecDeque::new()).collect(),
            open: (0..daemons).map(|_| Open::default()).collect(),
            data_max,
        }
    }

    /// Adds an entry for `daemon` on behalf of item `owner`: `counted` bytes of
    /// strings and overhead, `data` file bytes moved, `spans` spans.
    pub fn push(&mut self, daemon: u32, owner: usize, entry: T, counted: usize, data: u64, spans: usize) {
        let d = daemon as usize;
        let o = &mut self.open[d];
        if !o.batch.entries.is_empty()
            && (o.batch.entries.len() >= STAGE_BATCH_ENTRIES_MAX
                || o.counted + counted > STAGE_BATCH_BYTES_MAX
                || o.data + data > self.data_max
                || o.spans + spans > SPANS_MAX)
        {
            let full = std::mem::take(o);
            self.done[d].push_back(full.batch);
        }
        let o = &mut self.open[d];
        o.batch.entries.push(entry);
        o.batch.owners.push(owner);
        o.counted += counted;
        o.data += data;
        o.spans += spans;
    }

    pub fn finish(mut self) -> Vec<VecDeque<Batch<T>>> {
        for (d, o) in self.open.into_iter().enumerate() {
            if !o.batch.entries.is_empty() {
                self.done[d].push_back(o.batch);
            }
        }
        self.done
    }
}

/// `--max-bandwidth`: every request waits until its file bytes fit the rate since
/// the stage began, and (throttled) a request moves at most an eighth of a second's
/// worth, so the copy runs as a steady trickle rather than full-speed bursts.
pub(crate) struct Throttle {
    bytes_per_s: Option<u64>,
    started: Instant,
    admitted: Mutex<u64>,
}

impl Throttle {
    pub fn new(bytes_per_s: Option<u64>) -> Self {
        Throttle { bytes_per_s: bytes_per_s.map(|b| b.max(1)), started: Instant::now(), admitted: Mutex::new(0) }
    }

    /// Waits until `bytes` more fit the rate.
    pub fn admit(&self, bytes: u64) {
        let Some(bw) = self.bytes_per_s else { return };
        let due = {
            let mut a = self.admitted.lock().unwrap_or_else(|e| e.into_inner());
            *a += bytes;
            Duration::from_secs_f64(*a as f64 / bw as f64)
        };
        if let Some(rest) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(rest);
        }
    }

    /// The most file bytes one request moves.
    pub fn piece_max(&self) -> u64 {
        match self.bytes_per_s {
            None => STAGE_REQUEST_BYTES_MAX,
            Some(bw) => (bw / 8).clamp(1 << 20, STAGE_REQUEST_BYTES_MAX),
        }
    }
}

impl Batcher<StageChunks> {
    /// Adds the whole of file `file_id` (`size` bytes) for owner `owner`: per daemon
    /// the spans it holds, in pieces of at most `piece_max` bytes, each copied to or
    /// from `external`. Returns the number of pieces.
    pub fn push_file(
        &mut self,
        c: &Client,
        owner: usize,
        file_id: u128,
        size: u64,
        external: &str,
        piece_max: u64,
    ) -> usize {
        let mut pieces = 0;
        for (d, spans) in c.chunk_spans_by_daemon(file_id, size) {
            for piece in cut_spans(&spans, piece_max) {
                let data: u64 = piece.iter().map(|s| s.len as u64).sum();
                let counted = entry_bytes(&[external], piece.len());
                let spans_n = piece.len();
                self.push(
                    d,
                    owner,
                    StageChunks { file_id, external: external.to_string(), spans: piece },
                    counted,
                    data,
                    spans_n,
                );
                pieces += 1;
            }
        }
        pieces
    }
}

/// Cuts `spans` (of one file on one daemon) into pieces of at most `max` bytes.
pub(crate) fn cut_spans(spans: &[Span], max: u64) -> Vec<Vec<Span>> {
    let mut out = vec![Vec::new()];
    let mut bytes = 0u64;
    for s in spans {
        let mut off = s.offset;
        let mut left = s.len as u64;
        while left > 0 {
            if bytes == max {
                out.push(Vec::new());
                bytes = 0;
            }
            let n = left.min(max - bytes);
            out.last_mut().expect("never empty").push(Span { offset: off, len: n as u32 });
            bytes += n;
            off += n;
            left -= n;
        }
    }
    out.retain(|v| !v.is_empty());
    out
}

/// Sends every batch: `work(daemon, batch)` runs on a pool of threads, at most
/// `jobs` at a time per daemon.
pub(crate) fn drive<T: Send>(queues: Vec<VecDeque<Batch<T>>>, jobs: usize, work: impl Fn(u32, Batch<T>) + Sync) {
    let n = queues.len();
    let jobs = jobs.max(1);
    let total: usize = queues.iter().map(|q| q.len()).sum();
    if total == 0 {
        return;
    }
    let threads = (n * jobs).min(total).clamp(1, THREADS_MAX);
    struct Shared<T> {
        queues: Vec<VecDeque<Batch<T>>>,
        in_flight: Vec<usize>,
        next: usize,
    }
    let shared = Mutex::new(Shared { queues, in_flight: vec![0; n], next: 0 });
    let freed = Condvar::new();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let (d, batch) = {
                    let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
                    loop {
                        if g.queues.iter().all(|q| q.is_empty()) {
                            return;
                        }
                        // Round robin over daemons with work and room.
                        let start = g.next;
                        let pick =
                            (0..n).map(|k| (start + k) % n).find(|&d| !g.queues[d].is_empty() && g.in_flight[d] < jobs);
                        if let Some(d) = pick {
                            g.next = (d + 1) % n;
                            g.in_flight[d] += 1;
                            let b = g.queues[d].pop_front().expect("picked a daemon with work");
                            break (d, b);
                        }
                        g = freed.wait(g).unwrap_or_else(|e| e.into_inner());
                    }
                };
                work(d as u32, batch);
                shared.lock().unwrap_or_else(|e| e.into_inner()).in_flight[d] -= 1;
                freed.notify_all();
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_holds_the_rate() {
        let t = Throttle::new(Some(10 << 20));
        let started = Instant::now();
        for _ in 0..4 {
            t.admit(1 << 20);
        }
        let took = started.elapsed().as_secs_f64();
        assert!((0.35..1.0).contains(&took), "4 MiB at 10 MiB/s took {took} s");
        assert_eq!(t.piece_max(), (10 << 20) / 8);
        assert_eq!(Throttle::new(None).piece_max(), STAGE_REQUEST_BYTES_MAX);
    }

    #[test]
    fn spans_are_cut_at_the_bound_and_keep_every_byte() {
        let spans = [Span { offset: 0, len: 100 }, Span { offset: 300, len: 50 }];
        let cut = cut_spans(&spans, 60);
        let lens: Vec<Vec<(u64, u32)>> = cut.iter().map(|v| v.iter().map(|s| (s.offset, s.len)).collect()).collect();
        assert_eq!(lens, vec![vec![(0, 60)], vec![(60, 40), (300, 20)], vec![(320, 30)]]);
    }

    #[test]
    fn batches_respect_entry_bounds_and_every_batch_is_sent_once() {
        let mut b = Batcher::new(3);
        for i in 0..5000usize {
            b.push((i % 3) as u32, i, i, 10, 0, 0);
        }
        let queues = b.finish();
        assert!(queues.iter().flatten().all(|b| b.entries.len() <= STAGE_BATCH_ENTRIES_MAX));
        let seen = Mutex::new(Vec::new());
        let in_flight = Mutex::new([0usize; 3]);
        drive(queues, 2, |d, batch| {
            {
                let mut f = in_flight.lock().unwrap_or_else(|e| e.into_inner());
                f[d as usize] += 1;
                assert!(f[d as usize] <= 2, "at most `jobs` per daemon");
            }
            assert!(batch.entries.iter().all(|&e| e % 3 == d as usize), "entries reach their daemon");
            std::thread::sleep(std::time::Duration::from_millis(2));
            seen.lock().unwrap_or_else(|e| e.into_inner()).extend(batch.entries);
            in_flight.lock().unwrap_or_else(|e| e.into_inner())[d as usize] -= 1;
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, (0..5000).collect::<Vec<_>>());
    }
}
