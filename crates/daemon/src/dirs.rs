//! Metadata requests per directory, for "the busiest directories" of `gust stop
//! --stats`: a fixed table, lock-free on the request path, bounded in memory.
//!
//! A request naming a path counts for its parent directory (a readdir for the
//! directory itself). The directory's name hashes (xxh3) to a slot of `DIR_SLOTS`;
//! the first directory to reach a free slot among `PROBES` neighbours claims it for
//! good and is counted there; a directory that finds all its slots taken by others
//! counts in `untracked`, which the report shows, so nothing is lost silently. Cost
//! per request: one hash of the path, one or a few atomic loads, one atomic add.
//! Memory: `DIR_SLOTS` slots and at most that many names (at most 4 MiB with the
//! longest paths, a few tens of KiB in practice).
//!
//! A job that touches more than `DIR_SLOTS` directories keeps the first ones it
//! touched; its busiest directories are almost always among them (a job's working
//! directories are made first), and `untracked` says how much is not.
//!
//! Not for: exact per-directory accounting, or directories the daemon holds no
//! requests for (a directory's entries spread over all daemons: the client sums).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const DIR_SLOTS: usize = 1024;
const PROBES: usize = 4;

struct Slot {
    /// 0: free; else the directory's hash (with the low bit set, never 0).
    hash: AtomicU64,
    count: AtomicU64,
    name: OnceLock<Box<str>>,
}

pub struct DirTable {
    slots: Vec<Slot>,
    untracked: AtomicU64,
}

impl Default for DirTable {
    fn default() -> Self {
        Self::new()
    }
}

impl DirTable {
    pub fn new() -> Self {
        DirTable {
            slots: (0..DIR_SLOTS)
                .map(|_| Slot { hash: AtomicU64::new(0), count: AtomicU64::new(0), name: OnceLock::new() })
                .collect(),
            untracked: AtomicU64::new(0),
        }
    }

    /// One request in directory `dir`.
    pub fn note(&self, dir: &str) {
        let h = twox_hash::XxHash3_64::oneshot(dir.as_bytes()) | 1;
        let base = (h >> 1) as usize % DIR_SLOTS;
        for i in 0..PROBES {
            let s = &self.slots[(base + i) % DIR_SLOTS];
            let mut cur = s.hash.load(Ordering::Relaxed);
            if cur == 0 {
                cur = match s.hash.compare_exchange(0, h, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => {
                        let _ = s.name.set(dir.into());
                        h
                    }
                    Err(other) => other,
                };
            }
            if cur == h {
                s.count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.untracked.fetch_add(1, Ordering::Relaxed);
    }

    /// The `max` busiest directories (name, requests), busiest first, and the
    /// requests of directories the table had no room for.
    pub fn busiest(&self, max: usize) -> (Vec<(String, u64)>, u64) {
        let mut v: Vec<(String, u64)> = self
            .slots
            .iter()
            .filter_map(|s| {
                let n = s.count.load(Ordering::Relaxed);
                // A slot just claimed may not have its name yet: skip it this time.
                s.name.get().filter(|_| n > 0).map(|name| (name.to_string(), n))
            })
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(max);
        (v, self.untracked.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_directory_within_bounds() {
        let t = DirTable::new();
        for _ in 0..5 {
            t.note("/a");
        }
        t.note("/b");
        let (top, untracked) = t.busiest(10);
        assert_eq!(top, vec![("/a".to_string(), 5), ("/b".to_string(), 1)]);
        assert_eq!(untracked, 0);
        // Far more directories than slots: every request is counted somewhere.
        let t = DirTable::new();
        let n = DIR_SLOTS * 3;
        for i in 0..n {
            t.note(&format!("/d{i}"));
        }
        let (top, untracked) = t.busiest(usize::MAX);
        assert!(top.len() <= DIR_SLOTS);
        assert_eq!(top.iter().map(|x| x.1).sum::<u64>() + untracked, n as u64);
        assert!(top.len() > DIR_SLOTS / 2, "the table should fill mostly: {}", top.len());
    }
}
