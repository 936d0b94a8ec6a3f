//! Capacity-aware placement: chunks weighted by each daemon's capacity, with weighted
//! rendezvous hashing (highest random weight; Schindelhauer and Schomaker 2005,
//! "Weighted distributed hash tables"; Resch, "New Hashing Algorithms for Data
//! Storage", the `-w / ln(u)` score).
//!
//! For chunk `c` every daemon `d` draws `u = hash(c, d)` uniform in (0, 1) and scores
//! `-w_d / ln(u)`; the chunk lives on the daemon with the highest score. A daemon then
//! wins with probability `w_d / sum(w)`: daemons of capacities 1:1:2:4 fill in that
//! proportion. The whole ranking is the chunk's *order*: where a chunk goes when its
//! first daemon is full ([`SPILL_DAEMONS_MAX`]), and, with replicas, its next copies.
//!
//! Metadata is not weighted: records are small and RocksDB's share of a node is not
//! what fills it; they stay on `jump_hash(xxh3(path), n)` as in wide striping.
//!
//! Cost: one 64-bit mix per daemon per chunk (about 1 ns each): 500 daemons add about
//! 0.5 µs to a chunk's placement, against the tens of microseconds of its RPC.
//!
//! Not for: learning capacities (the daemons declare them in the hosts file) or
//! retrying writes (the client core's routing).

use crate::{chunk_hash, Distributor, WideStriping};

/// How many daemons past the first a chunk may spill to when daemons are full. It
/// bounds what a read of a never-written range (a hole) probes and what unlink and
/// truncate must ask: every chunk has at most `1 + SPILL_DAEMONS_MAX` candidates.
/// Since placement is proportional to capacity, daemons fill together, and a
/// chunk's first five are all full only when the instance nearly is.
pub const SPILL_DAEMONS_MAX: u32 = 4;

/// Chunks weighted by capacity, metadata wide-striped.
#[derive(Debug, Clone)]
pub struct CapacityWeighted {
    /// One weight per daemon, positive and finite (bytes as f64 are fine: only
    /// ratios count).
    weights: Vec<f64>,
    metadata: WideStriping,
}

/// splitmix64's finaliser: a bijective mix that turns `key ^ daemon` into a
/// well-distributed 64-bit value, far cheaper than a second xxh3 per daemon.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl CapacityWeighted {
    /// `capacities[d]` is daemon d's capacity in bytes. A capacity of 0 counts as 1
    /// byte (such a daemon takes next to nothing, but a chunk order still ranks it).
    pub fn new(capacities: &[u64]) -> Self {
        assert!(!capacities.is_empty(), "an instance has at least one daemon");
        let weights = capacities.iter().map(|c| (*c).max(1) as f64).collect();
        CapacityWeighted { weights, metadata: WideStriping::new(capacities.len() as u32) }
    }

    /// The daemons by score for chunk `chunk` of `file_id`, highest first; ties
    /// (practically impossible) by id, so every client agrees.
    fn scored(&self, file_id: u128, chunk: u64) -> Vec<(f64, u32)> {
        let key = chunk_hash(file_id, chunk);
        let mut scored: Vec<(f64, u32)> = (0..self.daemon_count()).map(|d| (self.score(key, d), d)).collect();
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
    }

    /// The `rank`-th daemon (0: the first) of the order of chunk `chunk` of
    /// `file_id`: an erasure-coded stripe's cell `rank` (ec.rs).
    pub fn ranked(&self, file_id: u128, chunk: u64, rank: u32) -> u32 {
        self.scored(file_id, chunk)[rank as usize].1
    }

    /// The score of daemon `d` for a chunk whose hash is `key`: `-w / ln(u)`, u in
    /// (0, 1) from the top 53 bits of the mix.
    fn score(&self, key: u64, d: u32) -> f64 {
        let h = mix(key ^ mix(d as u64 + 1));
        let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -self.weights[d as usize] / u.ln()
    }
}

impl Distributor for CapacityWeighted {
    fn daemon_count(&self) -> u32 {
        self.weights.len() as u32
    }
    fn locate_metadata(&self, path: &str) -> u32 {
        self.metadata.locate_metadata(path)
    }
    fn locate_chunk(&self, file_id: u128, chunk: u64) -> u32 {
        let key = chunk_hash(file_id, chunk);
        let mut best = (0u32, f64::NEG_INFINITY);
        for d in 0..self.daemon_count() {
            let s = self.score(key, d);
            if s > best.1 {
                best = (d, s);
            }
        }
        best.0
    }
    fn chunk_order(&self, file_id: u128, chunk: u64, out: &mut Vec<u32>) {
        out.clear();
        out.extend(self.scored(file_id, chunk).into_iter().map(|(_, d)| d));
    }
    fn spill_daemons(&self) -> u32 {
        SPILL_DAEMONS_MAX.min(self.daemon_count() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1:1:2:4 over 200,000 chunks: each daemon's share within 5% of its weight's.
    #[test]
    fn chunks_follow_capacity() {
        let d = CapacityWeighted::new(&[1 << 30, 1 << 30, 2 << 30, 4 << 30]);
        let mut counts = [0u64; 4];
        for f in 0..2_000u128 {
            for k in 0..100 {
                counts[d.locate_chunk(f * 0x9e37_79b9_7f4a_7c15, k) as usize] += 1;
            }
        }
        let total: u64 = counts.iter().sum();
        for (i, w) in [1.0, 1.0, 2.0, 4.0].iter().enumerate() {
            let want = total as f64 * w / 8.0;
            let got = counts[i] as f64;
            assert!((got - want).abs() / want < 0.05, "daemon {i}: {got} chunks, want {want:.0} ({counts:?})");
        }
    }

    #[test]
    fn order_starts_with_the_owner_and_ranks_every_daemon_once() {
        let d = CapacityWeighted::new(&[5, 1, 9, 3, 3, 0, 7]);
        let mut order = Vec::new();
        for k in 0..1_000 {
            d.chunk_order(42, k, &mut order);
            assert_eq!(order[0], d.locate_chunk(42, k));
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..7).collect::<Vec<_>>());
        }
        assert_eq!(d.spill_daemons(), SPILL_DAEMONS_MAX);
        assert_eq!(CapacityWeighted::new(&[1, 1]).spill_daemons(), 1);
    }

    /// Rendezvous hashing's point: a daemon's capacity changing moves only chunks to
    /// or from that daemon, never between two others.
    #[test]
    fn reweighting_one_daemon_moves_only_its_chunks() {
        let a = CapacityWeighted::new(&[4, 4, 4, 4]);
        let b = CapacityWeighted::new(&[4, 4, 8, 4]);
        let mut moved = 0;
        for k in 0..20_000 {
            let (x, y) = (a.locate_chunk(7, k), b.locate_chunk(7, k));
            if x != y {
                assert_eq!(y, 2, "chunk {k} moved from {x} to {y}");
                moved += 1;
            }
        }
        // Daemon 2's share goes from 1/4 to 2/5: about 15% of chunks move to it.
        assert!((2_400..3_600).contains(&moved), "{moved} moved");
    }

    /// Metadata ignores capacity: the same daemon as wide striping.
    #[test]
    fn metadata_is_wide_striped() {
        let d = CapacityWeighted::new(&[1, 100, 1]);
        let w = WideStriping::new(3);
        for i in 0..100 {
            let p = format!("/f{i}");
            assert_eq!(d.locate_metadata(&p), w.locate_metadata(&p));
        }
    }
}
