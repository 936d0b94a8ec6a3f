//! Where things live in a GustFS instance, computed from the hosts file alone.
//!
//! This crate is pure: no I/O, no clocks, no randomness. Every client computes the
//! same answers, which is what lets GustFS run without a central metadata server.
//!
//! * Metadata of path `p` lives on daemon `jump_hash(xxh3(p), n)`.
//! * Chunk `k` of the file with id `f` lives on `jump_hash(xxh3(f, k), n)`.
//!
//! * With `--placement capacity` chunks are weighted by daemon capacity instead
//!   ([`capacity`]).
//! * With `--placement local` a file's chunks live on the daemon its id names, one
//!   of its creator's node ([`local`]).
//! * With `--ec K+M` chunks live in erasure-coded stripes over K+M daemons ([`ec`]).
//!
//! Not for: deciding *how* to talk to a daemon (that is the client core).

pub mod capacity;
pub mod ec;
pub mod local;

pub use capacity::CapacityWeighted;
pub use ec::ErasureCoded;
pub use local::NodeLocal;
use twox_hash::XxHash3_64;

/// Default chunk size: 512 KiB, as in GekkoFS.
pub const CHUNK_SIZE_BYTES_DEFAULT: u64 = 512 * 1024;
/// Smallest and largest chunk sizes an instance may use. The lower bound keeps the
/// number of chunks per request sane; the upper keeps one chunk within a frame.
pub const CHUNK_SIZE_BYTES_MIN: u64 = 4 * 1024;
pub const CHUNK_SIZE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// Bound on copies of each record and chunk (`gust start --replicas`).
pub const REPLICAS_MAX: u32 = 3;

/// The daemons holding the copies of whatever daemon `primary` holds when every
/// record and chunk lives on `replicas` daemons: `primary` and the next ids after
/// it, wrapping around (distinct as long as `replicas <= daemons`). A function of
/// the primary alone, so every routing decision (a record's daemon, a chunk's, a
/// spilled chunk's next daemon) extends to its copies the same way.
pub fn replica_group(primary: u32, replicas: u32, daemons: u32) -> impl Iterator<Item = u32> {
    assert!(primary < daemons && replicas >= 1 && replicas <= daemons, "replicas within the daemon count");
    (0..replicas).map(move |i| (primary + i) % daemons)
}

/// The daemons that share a replica group with `daemon` (every group holding it,
/// less itself), in id order: the peers it takes its lease from and on which a
/// client fences it. Empty with one replica. With fewer daemons than `replicas`
/// (an instance still starting), every other daemon.
pub fn replica_peers(daemon: u32, replicas: u32, daemons: u32) -> Vec<u32> {
    if replicas <= 1 || daemon >= daemons {
        return Vec::new();
    }
    let reach = (replicas - 1).min(daemons / 2 + 1);
    let mut v: Vec<u32> = (1..=reach)
        .flat_map(|k| [(daemon + k) % daemons, (daemon + daemons - k % daemons) % daemons])
        .filter(|m| *m != daemon)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Jump consistent hash (Lamping and Veach, 2014): maps `key` to a bucket in
/// `0..buckets` so that growing `buckets` from n to n+1 moves only 1/(n+1) of keys.
pub fn jump_hash(mut key: u64, buckets: u32) -> u32 {
    assert!(buckets > 0, "jump_hash needs at least one bucket");
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    while j < buckets as i64 {
        b = j;
        key = key.wrapping_mul(2862933555777941757).wrapping_add(1);
        j = ((b.wrapping_add(1) as f64) * ((1u64 << 31) as f64 / ((key >> 33).wrapping_add(1)) as f64)) as i64;
    }
    b as u32
}

/// A byte range of one chunk touched by a file-level range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Chunk index within the file.
    pub chunk: u64,
    /// Offset of the span in the file (also its offset in a daemon's local file).
    pub file_offset: u64,
    /// Length of the span in bytes (never 0, never crosses a chunk boundary).
    pub len: u64,
}

/// Splits `[offset, offset + len)` into per-chunk spans.
pub fn chunk_spans(offset: u64, len: u64, chunk_size_bytes: u64) -> impl Iterator<Item = ChunkSpan> {
    assert!(chunk_size_bytes > 0);
    let end = offset.saturating_add(len);
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let chunk = pos / chunk_size_bytes;
        let chunk_end = (chunk + 1).saturating_mul(chunk_size_bytes);
        let span_end = chunk_end.min(end);
        let span = ChunkSpan { chunk, file_offset: pos, len: span_end - pos };
        pos = span_end;
        Some(span)
    })
}

/// Number of chunks a file of `size_bytes` occupies.
pub fn chunk_count(size_bytes: u64, chunk_size_bytes: u64) -> u64 {
    size_bytes.div_ceil(chunk_size_bytes)
}

/// Decides which daemon holds a path's metadata and a file's chunks.
///
/// Implementations must be deterministic functions of their inputs and the daemon
/// count, since every client computes placement independently.
pub trait Distributor: Send + Sync {
    /// Number of daemons in the instance.
    fn daemon_count(&self) -> u32;
    /// Daemon holding the metadata record of `path`.
    fn locate_metadata(&self, path: &str) -> u32;
    /// Daemon holding chunk `chunk` of the file with id `file_id`.
    fn locate_chunk(&self, file_id: u128, chunk: u64) -> u32;

    /// Every daemon, in the order chunk `chunk` tries them, into `out`: the first is
    /// [`Distributor::locate_chunk`]'s; a chunk refused for space goes to the next
    /// (up to [`Distributor::spill_daemons`] of them). The default is the owner,
    /// then the following ids, wrapping around.
    fn chunk_order(&self, file_id: u128, chunk: u64, out: &mut Vec<u32>) {
        let n = self.daemon_count();
        let first = self.locate_chunk(file_id, chunk);
        out.clear();
        out.extend((0..n).map(|i| (first + i) % n));
    }

    /// How many daemons past the first of its order a chunk may be written to when
    /// daemons refuse it for space (ENOSPC). 0: a full daemon fails the write.
    fn spill_daemons(&self) -> u32 {
        0
    }

    /// Daemons that may hold any chunk in `chunk_first..=chunk_last`, deduplicated and
    /// sorted (with spilling, the first `1 + spill_daemons()` of each chunk's order).
    /// Costs at most `min(chunks, daemons)` distinct entries: this is what lets
    /// unlink and truncate avoid broadcasting to every daemon.
    fn daemons_for_chunks(&self, file_id: u128, chunk_first: u64, chunk_last: u64) -> Vec<u32> {
        let n = self.daemon_count();
        let spill = self.spill_daemons() as usize;
        let mut seen = vec![false; n as usize];
        let mut out = Vec::new();
        let mut order = Vec::new();
        let mut k = chunk_first;
        while k <= chunk_last {
            if spill == 0 {
                order.clear();
                order.push(self.locate_chunk(file_id, k));
            } else {
                self.chunk_order(file_id, k, &mut order);
                order.truncate(1 + spill);
            }
            for &d in &order {
                if !seen[d as usize] {
                    seen[d as usize] = true;
                    out.push(d);
                }
            }
            if out.len() == n as usize {
                break;
            }
            k += 1;
        }
        out.sort_unstable();
        out
    }
}

/// The default distributor: metadata and chunks spread over all daemons by hashing.
#[derive(Debug, Clone)]
pub struct WideStriping {
    daemons: u32,
}

impl WideStriping {
    pub fn new(daemons: u32) -> Self {
        assert!(daemons > 0, "an instance has at least one daemon");
        WideStriping { daemons }
    }
}

/// Hash of a chunk's identity: xxh3 over the 16-byte file id and the 8-byte index.
pub fn chunk_hash(file_id: u128, chunk: u64) -> u64 {
    let mut buf = [0u8; 24];
    buf[..16].copy_from_slice(&file_id.to_le_bytes());
    buf[16..].copy_from_slice(&chunk.to_le_bytes());
    XxHash3_64::oneshot(&buf)
}

impl Distributor for WideStriping {
    fn daemon_count(&self) -> u32 {
        self.daemons
    }
    fn locate_metadata(&self, path: &str) -> u32 {
        jump_hash(XxHash3_64::oneshot(path.as_bytes()), self.daemons)
    }
    fn locate_chunk(&self, file_id: u128, chunk: u64) -> u32 {
        jump_hash(chunk_hash(file_id, chunk), self.daemons)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Peers are exactly the daemons sharing some replica group with the daemon.
    #[test]
    fn replica_peers_are_the_group_sharers() {
        for n in 1..9u32 {
            for r in 1..=3u32.min(n) {
                for d in 0..n {
                    let want: Vec<u32> = (0..n)
                        .filter(|m| *m != d)
                        .filter(|m| {
                            (0..n).any(|p| {
                                let g: Vec<u32> = replica_group(p, r, n).collect();
                                g.contains(&d) && g.contains(m)
                            })
                        })
                        .collect();
                    assert_eq!(replica_peers(d, r, n), want, "daemon {d} of {n}, {r} replicas");
                }
            }
        }
        assert_eq!(replica_peers(0, 2, 1), Vec::<u32>::new());
        assert_eq!(replica_peers(1, 3, 2), vec![0]);
    }

    #[test]
    fn jump_hash_is_in_range_and_stable_under_growth() {
        let keys: Vec<u64> = (0..10_000u64).map(|i| XxHash3_64::oneshot(&i.to_le_bytes())).collect();
        for n in 1..20u32 {
            let mut moved = 0;
            for &k in &keys {
                let a = jump_hash(k, n);
                let b = jump_hash(k, n + 1);
                assert!(a < n && b < n + 1);
                if a != b {
                    // A key only ever moves to the new bucket.
                    assert_eq!(b, n);
                    moved += 1;
                }
            }
            // Expected fraction 1/(n+1); allow generous noise.
            let expect = keys.len() as f64 / (n + 1) as f64;
            assert!((moved as f64) < expect * 1.3 + 50.0, "n={n} moved={moved}");
        }
    }

    #[test]
    fn jump_hash_spreads_evenly() {
        let n = 8;
        let mut counts = vec![0u32; n as usize];
        for i in 0..80_000u64 {
            counts[jump_hash(XxHash3_64::oneshot(&i.to_le_bytes()), n) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven: {c}");
        }
    }

    #[test]
    fn spans_cover_range_exactly() {
        let cs = 4096;
        let spans: Vec<_> = chunk_spans(4000, 10_000, cs).collect();
        assert_eq!(spans.first().unwrap().file_offset, 4000);
        assert_eq!(spans.first().unwrap().len, 96);
        let total: u64 = spans.iter().map(|s| s.len).sum();
        assert_eq!(total, 10_000);
        for w in spans.windows(2) {
            assert_eq!(w[0].file_offset + w[0].len, w[1].file_offset);
            assert_eq!(w[0].chunk + 1, w[1].chunk);
        }
        assert_eq!(chunk_spans(10, 0, cs).count(), 0);
    }

    #[test]
    fn daemons_for_chunks_is_minimal() {
        let d = WideStriping::new(16);
        let fid = 0x1234_5678_9abc_def0_1122_3344_5566_7788u128;
        assert_eq!(d.daemons_for_chunks(fid, 0, 0), vec![d.locate_chunk(fid, 0)]);
        let many = d.daemons_for_chunks(fid, 0, 999);
        assert_eq!(many.len(), 16);
    }

    #[test]
    fn replica_groups_are_distinct_and_wrap() {
        assert_eq!(replica_group(2, 2, 4).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(replica_group(3, 3, 4).collect::<Vec<_>>(), vec![3, 0, 1]);
        assert_eq!(replica_group(0, 1, 1).collect::<Vec<_>>(), vec![0]);
    }

    /// With spilling, a chunk's candidates (its first 1 + spill daemons) all count.
    #[test]
    fn daemons_for_chunks_covers_spill_candidates() {
        let d = CapacityWeighted::new(&[1; 16]);
        let mut order = Vec::new();
        d.chunk_order(9, 3, &mut order);
        let mut want: Vec<u32> = order[..1 + capacity::SPILL_DAEMONS_MAX as usize].to_vec();
        want.sort_unstable();
        assert_eq!(d.daemons_for_chunks(9, 3, 3), want);
        let w = WideStriping::new(5);
        w.chunk_order(9, 3, &mut order);
        let first = w.locate_chunk(9, 3);
        assert_eq!(order, (0..5).map(|i| (first + i) % 5).collect::<Vec<_>>());
    }
}
