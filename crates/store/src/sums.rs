//! Checksums of the chunk store's bytes at rest: every local file `<id>` has a
//! sidecar `<id>.sum` holding, for each block of [`SUM_BLOCK_BYTES`] of the local
//! file, the xxh3-64 of the block's bytes (up to the file's end for the last one),
//! little-endian, at offset `8 * block`. Zero means "no sum" (a block in a hole,
//! or written by a build without sums): such a block is served unverified; a sum
//! that happens to be 0 is stored as 1. [`POISONED`] marks a corrupt block that a
//! write changed in part since.
//!
//! Why xxh3: the chunk store already links it (gust-stage hashes with it), and it
//! runs at memory speed (tens of GB/s on one core), so a verified read costs a pass
//! over bytes that are in cache anyway. A CRC would add combinability, which a
//! store that reads a block back to sum it does not need.
//!
//! What it catches: a flipped bit in a local file, a torn or lost write (the data
//! and the sidecar disagree after a power loss), a write that landed in the wrong
//! place. Not: corruption on the way from the client (TCP's and the socket's own
//! care), nor bytes that were wrong when the client sent them.
//!
//! Concurrency: a block's sum depends on all of its bytes, so the writes that touch
//! a block, and its sum, are serialized by a lock on the block's region
//! ([`REGION_BYTES`], striped over [`STRIPES`] locks for all files). Reads take no
//! lock: a read that finds a block and its sum disagreeing takes the locks and
//! looks again before it calls the block corrupt (a writer was between the two).
//!
//! Not for: where the local files are (chunks.rs), repairing (the client, from a
//! copy; gust scrub).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, MutexGuard};
use twox_hash::XxHash3_64;

pub use gust_proto::SUM_BLOCK_BYTES;

const B: u64 = SUM_BLOCK_BYTES as u64;

/// Bytes of a sum in the sidecar.
pub const SUM_BYTES: u64 = 8;

/// Bytes of a local file whose writes one lock serializes: a 1 MiB transfer takes
/// one or two locks; writers of different regions of one file go in parallel.
pub const REGION_BYTES: u64 = 1 << 20;

/// Locks shared by all files of a store (region and file id hashed onto them).
pub const STRIPES: usize = 256;

/// The sum of a block that was corrupt when a write changed some of its bytes:
/// it matches no bytes (reads keep failing over to a copy), and a repair from a
/// copy leaves it alone, since the copy's bytes may predate that write. Only a
/// write of every old byte of the block (or `gust repair`) renews it.
pub use gust_proto::sums::POISONED;

/// The sum stored for a block's bytes (never 0, which means "none", nor
/// `POISONED`): gust-proto's, the one clients compute for the pieces they write.
pub use gust_proto::sums::sum_of;

/// Blocks `first..=last` that bytes `start..end` (end > start) touch.
pub fn blocks(start: u64, end: u64) -> (u64, u64) {
    (start / B, (end - 1) / B)
}

/// The bytes of block `b` in a local file `len` long: `start..end`.
pub fn block_range(b: u64, len: u64) -> (u64, u64) {
    (b * B, ((b + 1) * B).min(len))
}

/// The stored sums of blocks `first..=last` (0 where none is stored).
pub fn read_sums(sums: &File, first: u64, last: u64) -> io::Result<Vec<u64>> {
    let n = (last - first + 1) as usize;
    let mut raw = vec![0u8; n * SUM_BYTES as usize];
    // Past the sidecar's end: no sums there (zeros).
    read_full(sums, &mut raw, first * SUM_BYTES)?;
    Ok(raw.chunks_exact(SUM_BYTES as usize).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
}

/// Stores the sums of blocks `first..`.
pub fn write_sums(sums: &File, first: u64, values: &[u64]) -> io::Result<()> {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    sums.write_all_at(&raw, first * SUM_BYTES)
}

/// Reads block `b` of `data` (a local file `len` long) into `buf`; the bytes past
/// the file's end, if it shrank meanwhile, stay zero.
pub fn read_block(data: &File, b: u64, len: u64, buf: &mut Vec<u8>) -> io::Result<()> {
    let (start, end) = block_range(b, len);
    buf.clear();
    buf.resize((end - start) as usize, 0);
    read_full(data, buf, start)
}

/// `read_at` until `buf` is full or the file ends (the rest of `buf` is left as
/// it was).
pub fn read_full(f: &File, buf: &mut [u8], at: u64) -> io::Result<()> {
    read_some(f, buf, at).map(|_| ())
}

/// Reads into `buf` at `at` until it is full or the file ends: how many bytes.
pub fn read_some(f: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The region locks of a store.
pub struct Regions {
    stripes: Vec<Mutex<()>>,
}

impl Regions {
    pub fn new() -> Regions {
        Regions { stripes: (0..STRIPES).map(|_| Mutex::new(())).collect() }
    }

    fn stripe(file_id: u128, region: u64) -> usize {
        let h = XxHash3_64::oneshot(&[file_id.to_le_bytes().as_slice(), &region.to_le_bytes()].concat());
        (h % STRIPES as u64) as usize
    }

    /// Locks every region that bytes in `ranges` (start, end) touch, in stripe
    /// order (so two writers never wait on each other in a cycle).
    pub fn lock(&self, file_id: u128, ranges: impl Iterator<Item = (u64, u64)>) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = Vec::new();
        for (start, end) in ranges.filter(|(s, e)| e > s) {
            for region in start / REGION_BYTES..=(end - 1) / REGION_BYTES {
                idx.push(Self::stripe(file_id, region));
                if idx.len() > STRIPES {
                    break;
                }
            }
        }
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.stripes[i].lock().unwrap_or_else(|e| e.into_inner())).collect()
    }

    /// Whether bytes `a` and `b` of a file are in one region.
    pub fn same(a: u64, b: u64) -> bool {
        a / REGION_BYTES == b / REGION_BYTES
    }

    /// Every lock (a truncate, which may touch any region).
    pub fn lock_all(&self) -> Vec<MutexGuard<'_, ()>> {
        self.stripes.iter().map(|m| m.lock().unwrap_or_else(|e| e.into_inner())).collect()
    }
}

impl Default for Regions {
    fn default() -> Self {
        Regions::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_and_ranges() {
        assert_eq!(blocks(0, 1), (0, 0));
        assert_eq!(blocks(0, B), (0, 0));
        assert_eq!(blocks(B - 1, B + 1), (0, 1));
        assert_eq!(block_range(2, 2 * B + 10), (2 * B, 2 * B + 10));
        assert_eq!(block_range(1, 10 * B), (B, 2 * B));
    }

    #[test]
    fn a_sum_is_never_the_none_value() {
        assert_ne!(sum_of(b""), 0);
        assert_ne!(sum_of(&[0u8; 4096]), 0);
    }

    #[test]
    fn sums_past_the_sidecar_read_as_none() {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::options().read(true).write(true).create_new(true).open(d.path().join("s")).unwrap();
        write_sums(&f, 2, &[7, 8]).unwrap();
        assert_eq!(read_sums(&f, 0, 5).unwrap(), vec![0, 0, 7, 8, 0, 0]);
    }

    #[test]
    fn regions_lock_in_one_order_without_duplicates() {
        let r = Regions::new();
        // Overlapping ranges of one region: one lock, not two (a second would deadlock).
        let g = r.lock(5, [(0, 10), (5, 20), (REGION_BYTES, REGION_BYTES + 1)].into_iter());
        assert!(!g.is_empty() && g.len() <= 2);
    }
}
