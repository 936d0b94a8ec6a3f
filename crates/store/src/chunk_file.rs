//! One local chunk file and its sums, read and written: the chunk file format's
//! code, shared by the daemon's chunk store (chunks.rs) and by a client that was
//! handed a node-local daemon's files (short-circuit I/O, docs/DESIGN.md).
//!
//! [`Local`] is a local file and its sums, open; [`Access`] reads and writes one,
//! keeping a block and its sum together under the locks of their regions
//! (sums.rs `Regions`). The locks are a process's own: two processes writing the
//! same local file at once would race between a block's bytes and its sum, so
//! the daemon hands a local file to one client at a time and takes it back before
//! it serves anyone else's request for that file (a recall, as for grants).

use crate::chunks::{allocated, data_end, errno};
use crate::sums::{self, Regions};
use crate::Res;
use gust_proto::Span;
use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::MutexGuard;

#[cfg(test)]
thread_local! {
    /// Tests: this thread's writes stop after their data, before their sums, as a
    /// daemon killed there would.
    pub(crate) static CUT_BEFORE_SUMS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How one process reads and writes local files: their regions' locks, and what
/// its log lines and hole cuts need.
pub struct Access {
    regions: Regions,
    /// Who this is, for log lines about corrupt blocks ("daemon 3").
    pub(crate) label: String,
    /// The instance's chunk size, to name the chunk of a corrupt block.
    pub(crate) chunk_bytes: u64,
    /// Cut read spans where only a hole follows (capacity and local placement's
    /// readers look for the rest on the chunk's next daemon); off, spans end at the
    /// local file's end only, without the SEEK_DATA calls. Changed at run time
    /// when the instance's placement changes (`gust tune --placement`).
    pub(crate) trim_holes: AtomicBool,
}

impl Access {
    pub fn new(label: String, chunk_bytes: u64, trim_holes: bool) -> Access {
        Access { regions: Regions::new(), label, chunk_bytes, trim_holes: AtomicBool::new(trim_holes) }
    }

    pub fn set_trim_holes(&self, on: bool) {
        self.trim_holes.store(on, Ordering::Relaxed);
    }

    pub(crate) fn regions(&self) -> &Regions {
        &self.regions
    }

    /// Writes `spans` of `data` into `f` with their blocks' sums, checking every
    /// piece against `given` first (the writer's sums, if any: see
    /// `ChunkStore::write_checked`).
    pub fn write(&self, f: &Local, file_id: u128, spans: &[Span], data: &[u8], given: &[u64]) -> Res<u64> {
        let whole = whole_block_sums(spans, data, given)?;
        let (_regions, m) = self.lock_write(f, file_id, spans)?;
        self.write_summed(f, file_id, spans, data, m.len(), whole)
    }

    /// Locks the regions a write of `spans` touches, and returns the local file's
    /// metadata as it stays until the locks go. A write that extends the file
    /// extends its old last block too: it also locks that block's region (and only
    /// one that holds it changes the length, so the length it saw stays until it is
    /// done), then reads and sums the block again as an edge of the write.
    pub(crate) fn lock_write(
        &self,
        f: &Local,
        file_id: u128,
        spans: &[Span],
    ) -> Res<(Vec<MutexGuard<'_, ()>>, Metadata)> {
        let ranges = || spans.iter().map(|s| (s.offset, s.offset + s.len as u64));
        let end = ranges().map(|r| r.1).max().unwrap_or(0);
        loop {
            let len = f.data.metadata().map_err(errno)?.len();
            // An empty file's tail is its first byte's region: two writes that both
            // extend an empty file must meet on a lock too. Without it each took
            // the other's extension for none of its business, and the one that
            // ended first kept its last block's sum over the part it wrote while
            // the other's extension made that block whole (a read then found the
            // block corrupt: 1 run in 300-800 of the test below under load).
            let tail = (end > len).then_some((len.saturating_sub(1), len.max(1)));
            let regions = self.regions.lock(file_id, ranges().chain(tail));
            let m = f.data.metadata().map_err(errno)?;
            let extends = end > m.len();
            let tail_locked = tail.is_some() && Regions::same(m.len().saturating_sub(1), len.saturating_sub(1));
            if !extends || tail_locked {
                return Ok((regions, m));
            }
        }
    }

    /// `read`, each span's bytes straight into `buf` at its place (`spans`: span,
    /// offset in `buf`); what a span's count leaves of it is zeroed (a hole).
    pub fn read_placed(&self, f: &Local, file_id: u128, spans: &[(Span, usize)], buf: &mut [u8]) -> Res<Vec<u32>> {
        let m = f.data.metadata().map_err(errno)?;
        let local_len = m.len();
        let trim = self.trim_holes.load(Ordering::Relaxed) && allocated(&m) < local_len;
        let mut lens = Vec::with_capacity(spans.len());
        let mut tmp = Vec::new();
        for (s, at) in spans {
            let end = (s.offset + s.len as u64).min(local_len);
            let end = if trim { data_end(&f.data, s.offset, end) } else { end };
            let n = end.saturating_sub(s.offset) as usize;
            let dest = &mut buf[*at..*at + s.len as usize];
            // Shrunk concurrently: the rest reads as zeros.
            let n = sums::read_some(&f.data, &mut dest[..n], s.offset).map_err(errno)?;
            dest[n..].fill(0);
            if n > 0 && self.corrupt_blocks(f, file_id, s.offset, &mut dest[..n], &mut tmp, "a read")?.is_some() {
                return Err(libc::EUCLEAN);
            }
            lens.push(n as u32);
        }
        Ok(lens)
    }

    /// Writes `spans` and their blocks' sums (the regions are locked). A block
    /// the write covers whole is summed from `data`; any other block it touches
    /// (and the old last block, which a longer file extends) is summed again from
    /// the file after the write. If some of that block's old bytes stay, they are
    /// verified first: a corrupt block is marked `POISONED`, so reads still find
    /// it corrupt instead of the write blessing the damage.
    pub(crate) fn write_summed(
        &self,
        f: &Local,
        file_id: u128,
        spans: &[Span],
        data: &[u8],
        old_len: u64,
        whole: BTreeMap<u64, u64>,
    ) -> Res<u64> {
        let b = sums::SUM_BLOCK_BYTES as u64;
        let new_len = spans.iter().map(|s| s.offset + s.len as u64).fold(old_len, u64::max);
        // Whether some span overwrites every old byte of block `blk`.
        let renewed = |blk: u64| {
            let old_end = ((blk + 1) * b).min(old_len);
            blk * b >= old_len || spans.iter().any(|s| s.offset <= blk * b && s.offset + s.len as u64 >= old_end)
        };
        // Blocks summed again from the file, and whether they may be (their old
        // bytes matched their sums, or none stay).
        let mut edges: BTreeMap<u64, bool> = BTreeMap::new();
        for s in spans.iter().filter(|s| s.len > 0) {
            let end = s.offset + s.len as u64;
            let (first, last) = sums::blocks(s.offset, end);
            for blk in [first, last] {
                if s.offset > blk * b || end < (blk + 1) * b {
                    edges.insert(blk, true);
                }
            }
        }
        if new_len > old_len && !old_len.is_multiple_of(b) {
            edges.insert(old_len / b, true);
        }
        let mut buf = Vec::new();
        for (&blk, ok) in edges.iter_mut() {
            if !renewed(blk) {
                *ok = self.block_matches(f, file_id, blk, old_len, &mut buf)?;
            }
        }
        // The blocks whose old bytes stay and matched their sums lose the sums until
        // the new ones are stored (`unsum`).
        Self::unsum(f, edges.iter().filter(|(&blk, &ok)| ok && !renewed(blk)).map(|(&blk, _)| blk))?;
        let n = Self::write_spans(&f.data, spans, data)?;
        #[cfg(test)]
        if CUT_BEFORE_SUMS.with(|c| c.get()) {
            return Ok(n); // a daemon killed here
        }
        let mut new_sums: BTreeMap<u64, u64> = whole.into_iter().filter(|(blk, _)| !edges.contains_key(blk)).collect();
        let len_now = f.data.metadata().map_err(errno)?.len();
        for (&blk, &ok) in &edges {
            if ok {
                sums::read_block(&f.data, blk, len_now, &mut buf).map_err(errno)?;
                new_sums.insert(blk, sums::sum_of(&buf));
            } else {
                new_sums.insert(blk, sums::POISONED);
            }
        }
        self.store_sums(f, &new_sums)?;
        Ok(n)
    }

    /// Takes the sums off `blocks` (a write's partly covered blocks whose old
    /// bytes stay and matched their sums) before the data is written: a daemon
    /// killed between its data and its sums then leaves them unverified (sum 0)
    /// rather than failing their check, which would make the earlier, acknowledged
    /// bytes in them unreadable (an append's last block). The new sums are stored
    /// after the data. Blocks the write covers whole hold no earlier bytes: a kill
    /// there leaves the write's own, unacknowledged range failing its check, as a
    /// torn write. A corrupt block keeps its sum (and is poisoned after).
    pub(crate) fn unsum(f: &Local, blocks: impl Iterator<Item = u64>) -> Res<()> {
        let mut run: Option<(u64, usize)> = None;
        for blk in blocks {
            run = match run {
                Some((first, n)) if first + n as u64 == blk => Some((first, n + 1)),
                Some((first, n)) => {
                    sums::write_sums(&f.sums, first, &vec![0; n]).map_err(errno)?;
                    Some((blk, 1))
                }
                None => Some((blk, 1)),
            };
        }
        if let Some((first, n)) = run {
            sums::write_sums(&f.sums, first, &vec![0; n]).map_err(errno)?;
        }
        Ok(())
    }

    /// Writes `sums` (block, value) in runs of consecutive blocks.
    pub(crate) fn store_sums(&self, f: &Local, new_sums: &BTreeMap<u64, u64>) -> Res<()> {
        let mut run: Vec<u64> = Vec::new();
        let mut run_first = 0;
        for (&blk, &v) in new_sums {
            if !run.is_empty() && blk != run_first + run.len() as u64 {
                sums::write_sums(&f.sums, run_first, &run).map_err(errno)?;
                run.clear();
            }
            if run.is_empty() {
                run_first = blk;
            }
            run.push(v);
        }
        if !run.is_empty() {
            sums::write_sums(&f.sums, run_first, &run).map_err(errno)?;
        }
        Ok(())
    }

    /// Whether block `blk` of a local file `len` long matches its sum (or has
    /// none); a mismatch is logged.
    pub(crate) fn block_matches(&self, f: &Local, file_id: u128, blk: u64, len: u64, buf: &mut Vec<u8>) -> Res<bool> {
        let stored = sums::read_sums(&f.sums, blk, blk).map_err(errno)?[0];
        if stored == 0 {
            return Ok(true);
        }
        sums::read_block(&f.data, blk, len, buf).map_err(errno)?;
        if sums::sum_of(buf) == stored {
            return Ok(true);
        }
        self.report(file_id, blk, blk, "met by a write of part of it: the block stays corrupt");
        Ok(false)
    }

    /// Logs corrupt blocks `first..=last` of `file_id`.
    pub(crate) fn report(&self, file_id: u128, first: u64, last: u64, what: &str) {
        let b = sums::SUM_BLOCK_BYTES as u64;
        let (start, end) = (first * b, (last + 1) * b);
        let chunk = start.checked_div(self.chunk_bytes).map_or(String::new(), |k| format!(", chunk {k}"));
        tracing::error!(
            "{}: checksum mismatch in file {file_id:032x}{chunk}, bytes {start}-{end} of its local file: corrupt \
             on this node's disk, not served ({what})",
            self.label
        );
    }

    fn write_spans(f: &File, spans: &[Span], data: &[u8]) -> Res<u64> {
        let mut pos = 0usize;
        for s in spans {
            let len = s.len as usize;
            f.write_all_at(&data[pos..pos + len], s.offset).map_err(errno)?;
            pos += len;
        }
        Ok(pos as u64)
    }

    /// Reads spans into `out` (cleared first) and returns how many bytes of each span
    /// it holds: a span is cut short where the local file ends, or where only a hole
    /// follows inside it (the caller reads the rest as zeros). Holes between data
    /// come back as zeros. The cut tells a client of capacity placement that the
    /// rest of the span may have spilled to the chunk's next daemon.
    ///
    /// Every block a span touches is verified against its sum; one that does not
    /// match fails the read with EUCLEAN (and a log line naming the file, chunk and
    /// bytes): it is never served. `pieces` gets the sum of every piece of the bytes
    /// returned (gust-proto's `sums::pieces`), for the reader to check them again
    /// where they arrive: a whole block's is its stored sum, so only the pieces at a
    /// span's unaligned ends are hashed for it.
    pub fn read(
        &self,
        f: &Local,
        file_id: u128,
        spans: &[Span],
        out: &mut Vec<u8>,
        pieces: &mut Vec<u64>,
    ) -> Res<Vec<u32>> {
        let mut buf = Vec::new();
        self.read_checked(f, spans, out, pieces, |offset, bytes, pieces| {
            Ok(self.corrupt_blocks_summed(f, file_id, offset, bytes, &mut buf, "a read", pieces)?.is_some())
        })
    }

    /// `read`, for a caller that holds the spans' regions locked already (a
    /// read-modify-write: chunks/rmw.rs): no writer can be between a block and its
    /// sum then, so a mismatch is final and is not looked at again.
    pub(crate) fn read_held(
        &self,
        f: &Local,
        file_id: u128,
        spans: &[Span],
        out: &mut Vec<u8>,
        pieces: &mut Vec<u64>,
    ) -> Res<Vec<u32>> {
        let mut buf = Vec::new();
        self.read_checked(f, spans, out, pieces, |offset, bytes, pieces| {
            let bad = self.span_mismatch(f, offset, bytes, &mut buf, pieces)?;
            if let Some((first, last)) = bad {
                self.report(file_id, first, last, "a read-modify-write");
            }
            Ok(bad.is_some())
        })
    }

    /// Reads spans into `out` (cleared first) as `read` does, and their pieces'
    /// sums into `pieces` (cleared first); EUCLEAN as soon as
    /// `corrupt(offset, bytes, pieces)` says the bytes of a span are.
    fn read_checked(
        &self,
        f: &Local,
        spans: &[Span],
        out: &mut Vec<u8>,
        pieces: &mut Vec<u64>,
        mut corrupt: impl FnMut(u64, &mut [u8], &mut Vec<u64>) -> Res<bool>,
    ) -> Res<Vec<u32>> {
        out.clear();
        pieces.clear();
        let lens = self.read_unverified(f, spans, out)?;
        let mut pos = 0;
        for (s, &n) in spans.iter().zip(&lens) {
            let n = n as usize;
            if n > 0 && corrupt(s.offset, &mut out[pos..pos + n], pieces)? {
                return Err(libc::EUCLEAN);
            }
            pos += n;
        }
        Ok(lens)
    }

    /// The first and last corrupt block that `bytes`, read at `offset`, touch
    /// (None if they all match their sums), logged for `what`. A mismatch is
    /// looked at again before it counts: a writer may be between a block's bytes
    /// and its sum, so under the locks of the regions the bytes are read again
    /// (into `bytes`) and checked again.
    pub(crate) fn corrupt_blocks(
        &self,
        f: &Local,
        file_id: u128,
        offset: u64,
        bytes: &mut [u8],
        buf: &mut Vec<u8>,
        what: &str,
    ) -> Res<Option<(u64, u64)>> {
        self.corrupt_blocks_summed(f, file_id, offset, bytes, buf, what, &mut Vec::new())
    }

    /// `corrupt_blocks`, pushing the sums of the pieces of `bytes` to `pieces`.
    #[allow(clippy::too_many_arguments)]
    fn corrupt_blocks_summed(
        &self,
        f: &Local,
        file_id: u128,
        offset: u64,
        bytes: &mut [u8],
        buf: &mut Vec<u8>,
        what: &str,
        pieces: &mut Vec<u64>,
    ) -> Res<Option<(u64, u64)>> {
        let before = pieces.len();
        if self.span_mismatch(f, offset, bytes, buf, pieces)?.is_none() {
            return Ok(None);
        }
        pieces.truncate(before);
        let _regions = self.regions.lock(file_id, [(offset, offset + bytes.len() as u64)].into_iter());
        sums::read_full(&f.data, bytes, offset).map_err(errno)?;
        let bad = self.span_mismatch(f, offset, bytes, buf, pieces)?;
        if let Some((first, last)) = bad {
            self.report(file_id, first, last, what);
        }
        Ok(bad)
    }

    /// The first and last block, touched by `bytes` read at `offset`, that do not
    /// match their sums (None if all do or have none); the sums of the pieces of
    /// `bytes` pushed to `pieces`. Blocks wholly inside `bytes` are summed from
    /// them (a piece that is a whole block has the block's sum), the edge blocks
    /// read whole from the file (their pieces in `bytes` summed on their own).
    fn span_mismatch(
        &self,
        f: &Local,
        offset: u64,
        bytes: &[u8],
        buf: &mut Vec<u8>,
        pieces: &mut Vec<u64>,
    ) -> Res<Option<(u64, u64)>> {
        let end = offset + bytes.len() as u64;
        let (first, last) = sums::blocks(offset, end);
        let stored = sums::read_sums(&f.sums, first, last).map_err(errno)?;
        let len = f.data.metadata().map_err(errno)?.len();
        let mut bad: Option<(u64, u64)> = None;
        for (blk, &want) in (first..=last).zip(&stored) {
            let (bs, be) = sums::block_range(blk, len);
            let (ps, pe) = (bs.max(offset), ((blk + 1) * sums::SUM_BLOCK_BYTES as u64).min(end));
            let sum = sums::sum_of(&bytes[(ps - offset) as usize..(pe - offset) as usize]);
            pieces.push(sum);
            if want == 0 {
                continue;
            }
            let got = if ps == bs && pe == be {
                sum
            } else {
                sums::read_block(&f.data, blk, len, buf).map_err(errno)?;
                sums::sum_of(buf)
            };
            if got != want {
                bad = Some((bad.map_or(blk, |b| b.0), blk));
            }
        }
        Ok(bad)
    }

    /// `read` without the sums.
    fn read_unverified(&self, f: &Local, spans: &[Span], out: &mut Vec<u8>) -> Res<Vec<u32>> {
        let f = &f.data;
        let m = f.metadata().map_err(errno)?;
        let local_len = m.len();
        // A file with as many bytes allocated as it is long has no hole: no need to
        // look for one (SEEK_HOLE walks the rest of the file on tmpfs, which made
        // every read of a large local file cost its length).
        let trim = self.trim_holes.load(Ordering::Relaxed) && allocated(&m) < local_len;
        let mut lens = Vec::with_capacity(spans.len());
        for s in spans {
            let end = (s.offset + s.len as u64).min(local_len);
            let end = if trim { data_end(f, s.offset, end) } else { end };
            let want = end.saturating_sub(s.offset) as usize;
            let start = out.len();
            out.resize(start + want, 0);
            // Shrunk concurrently: the rest stays zero.
            sums::read_full(f, &mut out[start..], s.offset).map_err(errno)?;
            lens.push(want as u32);
        }
        Ok(lens)
    }
}

/// The sums of the whole blocks that `spans` (with their bytes `data`) cover,
/// by block, checking every piece against `given` (the writer's, if any).
pub(crate) fn whole_block_sums(spans: &[Span], data: &[u8], given: &[u64]) -> Res<BTreeMap<u64, u64>> {
    let b = sums::SUM_BLOCK_BYTES;
    let mut whole = BTreeMap::new();
    let mut given = given.iter();
    let checked = !given.as_slice().is_empty();
    let mut pos = 0usize;
    for s in spans {
        let bytes = &data[pos..pos + s.len as usize];
        pos += s.len as usize;
        for (at, n) in gust_proto::sums::pieces(s.offset, bytes.len()) {
            if n < b && !checked {
                continue;
            }
            let sum = sums::sum_of(&bytes[at..at + n]);
            if checked {
                match given.next() {
                    None => return Err(libc::EINVAL),
                    Some(g) if *g != sum => return Err(libc::EBADMSG),
                    Some(_) => {}
                }
            }
            if n == b {
                whole.insert((s.offset + at as u64) / b as u64, sum);
            }
        }
    }
    if given.next().is_some() {
        return Err(libc::EINVAL);
    }
    Ok(whole)
}

/// A local file and its sums, open.
pub struct Local {
    pub data: File,
    pub(crate) sums: File,
}

impl Local {
    /// A local file and its sums opened elsewhere (a client handed them by its
    /// node's daemon).
    pub fn from_files(data: File, sums: File) -> Local {
        Local { data, sums }
    }

    /// The local file and its sums (to hand them to a client).
    pub fn files(&self) -> (&File, &File) {
        (&self.data, &self.sums)
    }
}
