//! Read-modify-writes of chunk bytes, for erasure codes (docs/DESIGN.md,
//! "Erasure codes"): a data cell's write that answers the bytes it replaced
//! ([`ChunkStore::swap`]), and a parity cell's update that XORs a change into
//! what it holds ([`ChunkStore::xor`]). Each reads and writes under the region
//! locks a write takes, so that two writers of the same bytes each get their own
//! old bytes and their parity changes add up, in whatever order they arrive.
//!
//! With a declared capacity (`gust start --declare-capacity`), what a cell's write
//! allocates counts against it as an ordinary write's does (ENOSPC past it).

use super::{allocated, hole_bytes, ChunkStore};
use crate::chunk_file::whole_block_sums;
use crate::Res;
use gust_proto::Span;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Checksums of whole blocks, by block (chunk_file.rs's `whole_block_sums`).
type Sums = BTreeMap<u64, u64>;

impl ChunkStore {
    /// Writes `spans` (their bytes one after the other in `data`, checked against
    /// the writer's `given` sums as `write_checked` does) and puts the bytes they
    /// replaced into `old` (cleared first), as `read` would have answered just
    /// before: the bytes held of each span, cut where only a hole followed, whose
    /// lengths it returns. An old block the write keeps in part that does not
    /// match its sum fails it with EUCLEAN before anything is written: a change
    /// computed from it would carry the damage into the parity. `pieces` gets the
    /// sums of the old bytes' pieces, as `read_summed` gives them.
    pub fn swap(
        &self,
        file_id: u128,
        spans: &[Span],
        (data, given): (&[u8], &[u64]),
        old: &mut Vec<u8>,
        pieces: &mut Vec<u64>,
    ) -> Res<Vec<u32>> {
        let keep = |_: &[u32], _: &[u8], sums| Ok((Cow::Borrowed(data), sums));
        self.read_modify_write(file_id, spans, (data, given), (old, pieces), keep).map(|(lens, _)| lens)
    }

    /// XORs `data` (the spans' bytes one after the other, checked against the
    /// sender's `given` sums) into `spans` of the local file of `file_id`, created
    /// if absent; holes count as zeros. Returns the bytes written. A block it
    /// changes that does not match its sum fails it with EUCLEAN, nothing written.
    pub fn xor(&self, file_id: u128, spans: &[Span], data: &[u8], given: &[u64]) -> Res<u64> {
        let (mut old, mut pieces) = (Vec::new(), Vec::new());
        let r = self.read_modify_write(file_id, spans, (data, given), (&mut old, &mut pieces), |lens, old, sums| {
            // Where nothing was held (a parity cell's first write) the change's
            // sums are those of the bytes written.
            if lens.iter().all(|&n| n == 0) {
                return Ok((Cow::Borrowed(data), sums));
            }
            let mut new = data.to_vec();
            let (mut at, mut pos) = (0usize, 0usize);
            for (s, &n) in spans.iter().zip(lens) {
                let n = n as usize;
                new[at..at + n].iter_mut().zip(&old[pos..pos + n]).for_each(|(b, o)| *b ^= o);
                at += s.len as usize;
                pos += n;
            }
            let whole = whole_block_sums(spans, &new, &[])?;
            Ok((Cow::Owned(new), whole))
        });
        r.map(|(_, n)| n)
    }

    /// The steps both share, under the region locks a write takes: `data` checked
    /// against `given` (EBADMSG), the spans' old bytes read into `old` (verified:
    /// EUCLEAN; their pieces' sums into `pieces`), then what `bytes(lens, old, sums
    /// of data)` makes of them written with its sums. Returns the old bytes'
    /// lengths and the bytes written.
    fn read_modify_write<'d>(
        &self,
        file_id: u128,
        spans: &[Span],
        (data, given): (&'d [u8], &[u64]),
        (old, pieces): (&mut Vec<u8>, &mut Vec<u64>),
        bytes: impl FnOnce(&[u32], &[u8], Sums) -> Res<(Cow<'d, [u8]>, Sums)>,
    ) -> Res<(Vec<u32>, u64)> {
        let sums = whole_block_sums(spans, data, given)?;
        let f = self.file(file_id, true)?.expect("create=true always yields a file");
        let r = (|| {
            let (_regions, m) = self.access.lock_write(&f, file_id, spans)?;
            // A declared capacity counts what the write allocates, as
            // `write_unnoted` does.
            let mut used = self.quota.as_ref().map(|q| (q, q.used_bytes.lock().unwrap_or_else(|e| e.into_inner())));
            if let Some((q, used)) = &used {
                let need: u64 =
                    spans.iter().map(|s| hole_bytes(&f.data, s.offset, s.offset + s.len as u64, m.len())).sum();
                if need > 0 && **used + need > q.capacity_bytes {
                    return Err(libc::ENOSPC);
                }
            }
            let written = (|| {
                let lens = self.access.read_held(&f, file_id, spans, old, pieces)?;
                let (new, sums) = bytes(&lens, old, sums)?;
                let n = self.access.write_summed(&f, file_id, spans, &new, m.len(), sums)?;
                Ok((lens, n))
            })();
            if let Some((_, used)) = &mut used {
                let after = f.data.metadata().map(|a| allocated(&a)).unwrap_or(allocated(&m));
                **used = (**used + after).saturating_sub(allocated(&m));
            }
            written
        })();
        self.changes.note(file_id);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, ChunkStore) {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        (d, s)
    }

    fn read(s: &ChunkStore, id: u128, offset: u64, len: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let lens = s.read(id, &[Span { offset, len }], &mut out).unwrap();
        out.resize(len as usize, 0);
        assert!(lens[0] <= len);
        out
    }

    /// Under a declared capacity, a cell's swap and a parity cell's XOR count what
    /// they allocate, refuse what does not fit (ENOSPC, nothing written), and
    /// overwrite held bytes when full.
    #[test]
    fn cell_writes_count_against_a_declared_capacity() {
        let (_d, mut s) = store();
        s.declare_capacity(3 * 4096);
        let used = |s: &ChunkStore| s.declared().unwrap().1;
        let (mut old, mut pieces) = (Vec::new(), Vec::new());
        let block = |o: u64| [Span { offset: o, len: 4096 }];
        s.swap(1, &block(0), (&[1; 4096], &[]), &mut old, &mut pieces).unwrap();
        s.xor(2, &block(0), &[2; 4096], &[]).unwrap();
        assert_eq!(used(&s), 2 * 4096);
        s.swap(1, &block(8192), (&[3; 4096], &[]), &mut old, &mut pieces).unwrap();
        assert_eq!(used(&s), 3 * 4096);
        assert_eq!(s.xor(2, &block(4096), &[4; 4096], &[]), Err(libc::ENOSPC));
        assert_eq!(s.swap(3, &block(0), (&[5; 4096], &[]), &mut old, &mut pieces), Err(libc::ENOSPC));
        assert_eq!(used(&s), 3 * 4096, "a refused write takes nothing");
        s.xor(2, &block(0), &[2; 4096], &[]).unwrap();
        assert_eq!(read(&s, 2, 0, 4096), vec![0; 4096], "held bytes overwritten when full");
        assert_eq!(used(&s), 3 * 4096);
    }

    /// A swap answers what was there (nothing for a hole), with the sums of its
    /// pieces, and leaves the new bytes.
    #[test]
    fn a_swap_answers_the_bytes_it_replaced() {
        use gust_proto::sums::piece_sums;
        let (_d, s) = store();
        let (mut old, mut pieces) = (Vec::new(), Vec::new());
        let span = [Span { offset: 5000, len: 6 }];
        assert_eq!(s.swap(7, &span, (b"abcdef", &[]), &mut old, &mut pieces).unwrap(), vec![0]);
        assert!(old.is_empty() && pieces.is_empty());
        let two = [Span { offset: 5002, len: 2 }];
        assert_eq!(s.swap(7, &two, (b"XY", &[]), &mut old, &mut pieces).unwrap(), vec![2]);
        assert_eq!(old, b"cd");
        assert_eq!(pieces, piece_sums(5002, b"cd").collect::<Vec<_>>());
        assert_eq!(read(&s, 7, 5000, 6), b"abXYef");
        // Spans past the end answer short, as reads do.
        let past = [Span { offset: 5004, len: 4 }];
        assert_eq!(s.swap(7, &past, (b"1234", &[]), &mut old, &mut pieces).unwrap(), vec![2]);
        assert_eq!(old, b"ef");
    }

    /// XOR updates commute and undo themselves, holes count as zeros, and the
    /// sums follow (a read verifies every block).
    #[test]
    fn xor_updates_commute_and_keep_sums_right() {
        let (_d, s) = store();
        let a: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let b: Vec<u8> = (0..10_000u32).map(|i| (i * 13 + 1) as u8).collect();
        let span = [Span { offset: 3000, len: 10_000 }];
        s.xor(9, &span, &a, &[]).unwrap();
        assert_eq!(read(&s, 9, 3000, 10_000), a);
        s.xor(9, &span, &b, &[]).unwrap();
        let ab: Vec<u8> = a.iter().zip(&b).map(|(x, y)| x ^ y).collect();
        assert_eq!(read(&s, 9, 3000, 10_000), ab);
        s.xor(9, &span, &a, &[]).unwrap();
        assert_eq!(read(&s, 9, 3000, 10_000), b);
        assert_eq!(read(&s, 9, 0, 3000), vec![0; 3000]);
    }

    /// A change whose bytes do not match the sender's sums changes nothing.
    #[test]
    fn an_xor_that_arrived_damaged_writes_nothing() {
        let (_d, s) = store();
        let data = vec![1u8; 4096];
        let sums: Vec<u64> = gust_proto::sums::piece_sums(0, &data).collect();
        let mut bad = data.clone();
        bad[10] ^= 1;
        assert_eq!(s.xor(3, &[Span { offset: 0, len: 4096 }], &bad, &sums), Err(libc::EBADMSG));
        assert_eq!(read(&s, 3, 0, 4096), vec![0; 4096]);
        s.xor(3, &[Span { offset: 0, len: 4096 }], &data, &sums).unwrap();
        assert_eq!(read(&s, 3, 0, 4096), data);
    }
}
