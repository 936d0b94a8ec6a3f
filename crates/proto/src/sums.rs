//! The checksum of chunk data, defined once for the client that computes it and
//! the daemon that verifies and stores it (docs/DESIGN.md, "Checksums").
//!
//! A write carries one sum per *piece*: the bytes of a span between two multiples
//! of [`crate::SUM_BLOCK_BYTES`] (file offsets), in span order. A piece that is a
//! whole block has the sum the daemon stores for that block, so the daemon checks
//! those at no extra cost; it hashes only the pieces at a span's unaligned ends.

use twox_hash::XxHash3_64;

/// The sum of a block that was corrupt when a write changed part of it (see
/// gust-store's sums.rs): it matches no bytes.
pub const POISONED: u64 = u64::MAX;

/// The sum of `bytes`: xxh3-64, never 0 (which stands for "none") nor `POISONED`.
pub fn sum_of(bytes: &[u8]) -> u64 {
    match XxHash3_64::oneshot(bytes) {
        0 => 1,
        POISONED => POISONED - 1,
        s => s,
    }
}

/// The pieces of `len` bytes at file offset `offset`: (offset within them, length),
/// split at every multiple of `SUM_BLOCK_BYTES`.
pub fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (usize, usize)> {
    let b = crate::SUM_BLOCK_BYTES as u64;
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let pos = offset + at as u64;
        let n = ((pos / b + 1) * b - pos).min((len - at) as u64) as usize;
        let p = (at, n);
        at += n;
        Some(p)
    })
}

/// The sums a write of `data` at `offset` carries, one per piece.
pub fn piece_sums(offset: u64, data: &[u8]) -> impl Iterator<Item = u64> + '_ {
    pieces(offset, data.len()).map(move |(at, n)| sum_of(&data[at..at + n]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_at_block_boundaries() {
        let v: Vec<_> = pieces(4000, 10_000).collect();
        assert_eq!(v, vec![(0, 96), (96, 4096), (4192, 4096), (8288, 1712)]);
        assert_eq!(pieces(8192, 4096).collect::<Vec<_>>(), vec![(0, 4096)]);
        assert_eq!(pieces(5, 0).count(), 0);
    }

    /// The sums stored on disk are xxh3-64: these values are what the xxhash
    /// reference gives (and the xxhash-rust crate GustFS used before twox-hash), so
    /// blocks summed by an older build still check.
    #[test]
    fn sums_are_the_reference_xxh3() {
        let block: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(sum_of(b""), 0x2d06800538d394c2);
        assert_eq!(sum_of(&block), 0x5d9027c84d5f33f7);
        assert_eq!(sum_of(&block[..1000]), 0xd1eb8367bf3294e7);
    }

    #[test]
    fn a_sum_is_never_none_nor_poisoned() {
        assert_ne!(sum_of(b""), 0);
        assert_ne!(sum_of(&[0; 4096]), POISONED);
    }
}
