//! The read log: which files (by file id) and byte ranges this daemon served reads
//! of since it started, for `gust stop --record-reads` and `gust stage in
//! --from-record` (prefetch exactly what the last run of a workflow read).
//!
//! Bounded: at most `FILES_MAX` files (later ones are counted as dropped, never
//! silently missing) and `READ_LOG_RANGES_PER_FILE_MAX` ranges per file (past it the
//! two closest ranges merge, so the log may name bytes that were not read but never
//! misses bytes that were). A read costs one lock of one of 16 shards.

use gust_proto::{ReadLogEntry, READ_LOG_RANGES_PER_FILE_MAX};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bound on the files the log holds (about 100 bytes each when read whole).
pub const FILES_MAX: usize = 1 << 20;
const SHARDS: usize = 16;

/// File id -> byte ranges read (sorted, disjoint).
type Shard = HashMap<u128, Vec<(u64, u64)>>;

pub struct ReadLog {
    shards: Vec<Mutex<Shard>>,
    files: AtomicUsize,
    dropped: AtomicU64,
}

impl Default for ReadLog {
    fn default() -> Self {
        Self::new()
    }
}

impl ReadLog {
    pub fn new() -> Self {
        ReadLog {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            files: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Notes that the byte ranges `(start, end)` of file `file_id` were read (one
    /// request's spans: one lock for all of them).
    pub fn note(&self, file_id: u128, ranges: impl IntoIterator<Item = (u64, u64)>) {
        let mut ranges = ranges.into_iter().filter(|(s, e)| e > s).peekable();
        if ranges.peek().is_none() {
            return;
        }
        let mut shard = self.shards[(file_id as usize) % SHARDS].lock().unwrap_or_else(|e| e.into_inner());
        let kept = match shard.get_mut(&file_id) {
            Some(r) => r,
            None => {
                if self.files.fetch_add(1, Ordering::Relaxed) >= FILES_MAX {
                    self.files.fetch_sub(1, Ordering::Relaxed);
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                shard.entry(file_id).or_default()
            }
        };
        for (start, end) in ranges {
            insert(kept, start, end);
        }
    }

    /// Files with ids > `after`, in id order, at most `max` (and at most
    /// `bytes_max` counted bytes: 16 per file plus 16 per range); whether that was
    /// all; files dropped for lack of room.
    pub fn page(&self, after: Option<u128>, max: usize, bytes_max: usize) -> (Vec<ReadLogEntry>, bool, u64) {
        let mut all: BTreeMap<u128, Vec<(u64, u64)>> = BTreeMap::new();
        for s in &self.shards {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            for (id, r) in s.iter() {
                if after.is_none_or(|a| *id > a) {
                    all.insert(*id, r.clone());
                }
            }
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        let total = all.len();
        for (file_id, chunks) in all {
            if out.len() >= max || bytes >= bytes_max {
                break;
            }
            bytes += 16 + 16 * chunks.len();
            out.push(ReadLogEntry { file_id, chunks });
        }
        let done = out.len() == total;
        (out, done, self.dropped.load(Ordering::Relaxed))
    }
}

/// Adds `start..end` to sorted, disjoint, non-adjacent ranges, merging what it
/// touches; past the bound the two ranges with the smallest gap merge.
fn insert(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    // The common case, a sequential read continuing the last range.
    if let Some(last) = ranges.last_mut() {
        if last.0 <= start && start <= last.1 {
            last.1 = last.1.max(end);
            return;
        }
    }
    let i = ranges.partition_point(|r| r.1 < start);
    let mut j = i;
    let (mut s, mut e) = (start, end);
    while j < ranges.len() && ranges[j].0 <= e {
        s = s.min(ranges[j].0);
        e = e.max(ranges[j].1);
        j += 1;
    }
    ranges.splice(i..j, [(s, e)]);
    if ranges.len() > READ_LOG_RANGES_PER_FILE_MAX {
        let k = (0..ranges.len() - 1).min_by_key(|&k| ranges[k + 1].0 - ranges[k].1).expect("more than one range");
        ranges[k].1 = ranges[k + 1].1;
        ranges.remove(k + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_stay_bounded() {
        let mut r = Vec::new();
        insert(&mut r, 0, 10);
        insert(&mut r, 10, 20); // adjacent: one range
        insert(&mut r, 30, 40);
        insert(&mut r, 5, 35); // bridges both
        assert_eq!(r, vec![(0, 40)]);
        insert(&mut r, 100, 110);
        insert(&mut r, 50, 60);
        assert_eq!(r, vec![(0, 40), (50, 60), (100, 110)]);
        for k in 0..200u64 {
            insert(&mut r, 1000 + k * 100 + k % 7, 1000 + k * 100 + 10);
        }
        assert!(r.len() <= READ_LOG_RANGES_PER_FILE_MAX);
        // Nothing read is missing: every range noted lies inside one kept range.
        for k in 0..200u64 {
            let (s, e) = (1000 + k * 100 + k % 7, 1000 + k * 100 + 10);
            assert!(r.iter().any(|x| x.0 <= s && e <= x.1), "{s}..{e} lost");
        }
        assert!(r.windows(2).all(|w| w[0].1 < w[1].0), "sorted and disjoint: {r:?}");
    }

    #[test]
    fn pages_in_id_order_and_drops_counted() {
        let log = ReadLog::new();
        for id in (1..=50u128).rev() {
            log.note(id, [(0, 4096)]);
        }
        let (p, done, dropped) = log.page(None, 20, usize::MAX);
        assert_eq!((p.len(), done, dropped), (20, false, 0));
        assert!(p.windows(2).all(|w| w[0].file_id < w[1].file_id));
        let (p2, done, _) = log.page(Some(p[19].file_id), 100, usize::MAX);
        assert_eq!((p2.len(), done, p2[0].file_id), (30, true, 21));
    }
}
