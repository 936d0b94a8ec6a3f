//! Checksums, the client's part (docs/DESIGN.md, "Checksums"). Every write
//! carries the client's sum of each piece it writes (gust-proto's sums.rs; io/chunks.rs
//! computes them), which the daemon checks before it writes anything: bytes
//! corrupted on their way are refused (EBADMSG), and the application gets EIO.
//! The daemon's chunk store verifies every block it reads against the sum it
//! stored (gust-store, sums.rs) and answers EUCLEAN (117, the kernel's
//! EFSCORRUPTED) instead of corrupt bytes. Here:
//!
//! * With copies (R > 1), replica.rs asks a read answered EUCLEAN of the next
//!   member of the group, as if the first were down (it is not marked down: the
//!   rest of its data is good). Once a member answered, [`Transport::repair_blocks`]
//!   rewrites the corrupt member's blocks from it: the read's spans widened to
//!   whole blocks (within their chunk), read from the member that answered, sent
//!   to the corrupt one as `repair_blocks`, which rewrites only the blocks that
//!   are still corrupt there (never one a write changed since: its bytes may be
//!   newer than the copy's; gust-store marks those poisoned).
//! * Without a copy, or when no member holds good bytes, the caller gets EIO, and
//!   the last error names the daemon (whose log names the file, chunk and bytes).
//!   Applications see EIO, as for a failed disk read (btrfs answers a checksum
//!   failure so too).
//! * On the way back: a read's answer carries the sum of each piece of its bytes
//!   (for a whole block, the sum the daemon stored when it was written), and
//!   [`Transport::answer_intact`] checks them where the bytes arrived (in the
//!   application's buffer). A read that arrives corrupt is asked once more on a
//!   fresh connection (rpc.rs), then answered EBADMSG: with copies replica.rs asks
//!   the next member, and the caller gets EIO if none answers intact. So a block
//!   is checked against the sum its writer computed from end to end: the
//!   writer's sums are checked by the daemon, stored, and checked by the reader.
//!
//! Not for: computing or storing sums (gust-store), routing copies (replica.rs).

use crate::rpc::{Bulk, Call, Dest, PlacedAnswer, Transport};
use crate::{Client, Errno};
use gust_proto::sums::piece_sums;
use gust_proto::{CorruptRange, Request, Response, Span, SUM_BLOCK_BYTES};

/// The errno a daemon answers for a block whose bytes do not match its sum.
pub(crate) const CORRUPT: i32 = libc::EUCLEAN;

impl Transport {
    /// EIO for an application, with the last error saying which daemon's data
    /// failed its checksum.
    pub(crate) fn corrupt_error(&self, daemon: u32, copies: bool) -> Errno {
        let rest = if copies { "no copy held good bytes either" } else { "there is no copy to read instead" };
        let msg = format!(
            "daemon {daemon} holds a corrupt block of this data (checksum mismatch; its log names the file and \
             chunk): not served, and {rest}"
        );
        *self.last_error_slot() = Some(msg);
        Errno(libc::EIO)
    }

    /// EIO for a write whose bytes `daemon` found corrupted on their way (they did
    /// not match the sums this client sent: EBADMSG); it wrote nothing.
    pub(crate) fn corrupt_on_the_way(&self, daemon: u32) -> Errno {
        let msg = format!(
            "daemon {daemon} received bytes of a write that do not match their checksums (corrupted on the way); \
             it wrote nothing"
        );
        *self.last_error_slot() = Some(msg);
        Errno(libc::EIO)
    }

    /// Whether the bytes of `call`'s answer match the sums the daemon sent with
    /// them (a `read` answered `Data`: module doc); true for any other answer (a
    /// `write_swap`'s old bytes are checked by its caller, ec/write.rs). The bytes
    /// are where they arrived: at `dest`'s places in `buf`, or in the answer's bulk.
    pub(crate) fn answer_intact(call: &Call<'_>, answer: &PlacedAnswer, dest: Option<&Dest>, buf: &[u8]) -> bool {
        let Request::Read { spans, .. } = &call.req else { return true };
        let Ok((Response::Data { span_lens, sums }, bulk)) = answer else { return true };
        if span_lens.len() != spans.len() {
            return false;
        }
        let offsets = spans.iter().map(|s| s.offset);
        match (dest, bulk) {
            (Some(dest), _) => {
                let parts =
                    offsets.zip(span_lens).zip(dest).map(|((o, &n), &(at, _))| (o, buf.get(at..at + n as usize)));
                pieces_match(parts, sums)
            }
            (None, Bulk::Vec(v)) => {
                let mut pos = 0usize;
                let parts = offsets.zip(span_lens).map(|(o, &n)| {
                    let part = v.get(pos..pos + n as usize);
                    pos += n as usize;
                    (o, part)
                });
                pieces_match(parts, sums) && pos == v.len()
            }
            // Taken by a batch's placer: not chunk bytes (read_many's files).
            (None, Bulk::Placed(_)) => true,
        }
    }

    /// EBADMSG for a read whose answer from `daemon` arrived twice with bytes
    /// that do not match their sums (corrupted on the way back); the last error
    /// says so. replica.rs asks the next member, then answers EIO.
    pub(crate) fn corrupt_arrival(&self, daemon: u32, file_id: u128) -> Errno {
        let msg = format!(
            "the bytes of file {file_id:032x} that daemon {daemon} sent arrived twice not matching their checksums \
             (corrupted on the way back; the daemon verified them before they left)"
        );
        tracing::warn!("{msg}");
        *self.last_error_slot() = Some(msg);
        Errno(libc::EBADMSG)
    }

    /// Rewrites the blocks of `req` (a read that `bad` answered EUCLEAN and
    /// `good` answered) on `bad` from `good`'s bytes. Best effort: a failure
    /// leaves the block corrupt on `bad`, where reads keep finding it.
    pub(crate) fn repair_blocks(&self, req: &Request, good: u32, bad: u32) {
        let Request::Read { file_id, spans } = req else { return };
        let wide: Vec<Span> = spans.iter().filter(|s| s.len > 0).map(|s| self.whole_blocks(s)).collect();
        match self.rewrite_from(*file_id, wide, good, bad) {
            Ok(n) => {
                tracing::warn!("daemon {bad}: {n} corrupt block(s) of file {file_id:032x} rewritten from daemon {good}")
            }
            Err(e) => tracing::warn!(
                "daemon {bad}: corrupt blocks of file {file_id:032x} not rewritten from daemon {good}: {e}"
            ),
        }
    }

    /// Reads `spans` (whole blocks) of `file_id` from `good` and sends them to
    /// `bad` as `repair_blocks`: the blocks rewritten there.
    fn rewrite_from(&self, file_id: u128, spans: Vec<Span>, good: u32, bad: u32) -> Result<u64, Errno> {
        let read = Call { daemon: good, req: Request::Read { file_id, spans: spans.clone() }, bulk: Vec::new() };
        let (span_lens, bytes) = match self.send_batch(vec![read], vec![None], &mut []).pop().expect("one answer")? {
            (Response::Data { span_lens, .. }, bytes) => (span_lens, bytes),
            _ => return Err(Errno(libc::EPROTO)),
        };
        // What the good copy holds of each span (its tail may be a hole).
        let mut parts: Vec<&[u8]> = Vec::new();
        let mut got: Vec<Span> = Vec::new();
        let mut pos = 0usize;
        for (s, &n) in spans.iter().zip(&span_lens) {
            let n = (n as usize).min(bytes.len() - pos);
            if n > 0 {
                got.push(Span { offset: s.offset, len: n as u32 });
                parts.push(&bytes[pos..pos + n]);
            }
            pos += n;
        }
        if got.is_empty() {
            return Ok(0);
        }
        let repair = Call { daemon: bad, req: Request::RepairBlocks { file_id, spans: got }, bulk: parts };
        match self.send_batch(vec![repair], vec![None], &mut []).pop().expect("one answer")? {
            (Response::Written(n), _) => Ok(n),
            _ => Err(Errno(libc::EPROTO)),
        }
    }

    /// `s` widened to whole checksum blocks, within the chunk that holds it.
    pub(crate) fn whole_blocks(&self, s: &Span) -> Span {
        let b = SUM_BLOCK_BYTES as u64;
        let cs = self.chunk_bytes.max(1);
        let chunk_start = s.offset / cs * cs;
        let start = (s.offset / b * b).max(chunk_start);
        let end = (s.offset + s.len as u64).div_ceil(b) * b;
        let end = end.min(chunk_start + cs);
        Span { offset: start, len: (end - start) as u32 }
    }
}

/// One page of a daemon's scrub (`Client::scrub_page`).
pub struct ScrubPage {
    pub files: u64,
    pub bytes: u64,
    pub corrupt: Vec<CorruptRange>,
    /// Where the next page starts; None: the daemon is done.
    pub next: Option<u128>,
}

/// Whether `parts` (each span's file offset and bytes, None where the answer
/// does not hold them) cut into pieces (gust-proto's `sums::pieces`) have exactly
/// the sums `sums`, in order.
pub(crate) fn pieces_match<'a>(parts: impl Iterator<Item = (u64, Option<&'a [u8]>)>, sums: &[u64]) -> bool {
    let mut want = sums.iter();
    for (offset, bytes) in parts {
        let Some(bytes) = bytes else { return false };
        if !piece_sums(offset, bytes).all(|got| want.next() == Some(&got)) {
            return false;
        }
    }
    want.next().is_none()
}

impl Client {
    /// Verifies the local files of `daemon` after `after` until about `max_bytes`
    /// were read (`gust scrub`).
    pub fn scrub_page(&self, daemon: u32, after: Option<u128>, max_bytes: u64) -> crate::Result<ScrubPage> {
        match self.transport.call(daemon, Request::Scrub { after, max_bytes })? {
            Response::Scrubbed { files, bytes, corrupt, next } => Ok(ScrubPage { files, bytes, corrupt, next }),
            other => Err(crate::error::unexpected(other)),
        }
    }

    /// Rewrites range `r`, found corrupt on `daemon`, from another copy (a member
    /// of each chunk's group that is not down): the blocks rewritten. EIO when
    /// the instance keeps one copy or no other copy answers.
    pub fn repair_range(&self, daemon: u32, r: &CorruptRange) -> crate::Result<u64> {
        if self.stripes().is_some() {
            // Erasure-coded: rebuilt from the stripe (ec/read.rs).
            return self.repair_cells(daemon, r);
        }
        let t = &self.transport;
        let cs = t.chunk_bytes.max(1);
        let mut done = 0;
        let mut pos = r.offset;
        let end = r.offset + r.len;
        while pos < end {
            let chunk = pos / cs;
            let piece_end = end.min((chunk + 1) * cs);
            let span = t.whole_blocks(&Span { offset: pos, len: (piece_end - pos) as u32 });
            let good = self.chunk_holders(r.file_id, chunk).into_iter().find(|m| *m != daemon && !t.is_down(*m));
            let Some(good) = good else {
                *t.last_error_slot() = Some(format!("no other copy of chunk {chunk} of file {:032x}", r.file_id));
                return Err(Errno(libc::EIO));
            };
            done += t.rewrite_from(r.file_id, vec![span], good, daemon)?;
            pos = piece_end;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_widen_to_whole_blocks_inside_their_chunk() {
        let t = |chunk_bytes: u64, offset: u64, len: u32| {
            let tr = Transport::new(
                Vec::new(),
                None,
                vec![0; 32],
                crate::rpc::TransportOptions {
                    timeout: std::time::Duration::from_secs(1),
                    force_tcp: true,
                    fabric: false,
                    replicas: 2,
                    proxy: false,
                    grants: false,
                    chunk_bytes,
                    short_circuit: None,
                    erasure_coded: false,
                },
            );
            let w = tr.whole_blocks(&Span { offset, len });
            (w.offset, w.len)
        };
        assert_eq!(t(1 << 20, 5000, 10), (4096, 4096));
        assert_eq!(t(1 << 20, 4095, 2), (0, 8192));
        // A chunk size that is no multiple of a block: the widening stops at the
        // chunk's ends (the local file holds nothing of the next chunk here).
        assert_eq!(t(10_000, 10_001, 5), (10_000, 2_288));
        assert_eq!(t(10_000, 9_000, 900), (8_192, 1_808));
    }

    /// A read answer's bytes match their sums wherever they arrived (a buffer's
    /// places or the bulk); a flipped byte, a sum missing or one too many, or
    /// bytes the sums do not account for do not.
    #[test]
    fn an_answer_is_intact_only_if_every_piece_matches() {
        let data: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
        let spans = vec![Span { offset: 1000, len: 6000 }, Span { offset: 20_000, len: 4000 }];
        // The first span whole, the second cut short (the file ends there).
        let sums: Vec<u64> = piece_sums(1000, &data[..6000]).chain(piece_sums(20_000, &data[6000..9000])).collect();
        let call = Call { daemon: 0, req: Request::Read { file_id: 1, spans }, bulk: Vec::new() };
        let answer = |sums: Vec<u64>, bulk: Vec<u8>| -> PlacedAnswer {
            Ok((Response::Data { span_lens: vec![6000, 3000], sums }, Bulk::Vec(bulk)))
        };
        assert!(Transport::answer_intact(&call, &answer(sums.clone(), data.clone()), None, &[]));
        let mut flipped = data.clone();
        flipped[7000] ^= 1;
        assert!(!Transport::answer_intact(&call, &answer(sums.clone(), flipped), None, &[]));
        assert!(!Transport::answer_intact(&call, &answer(sums[1..].to_vec(), data.clone()), None, &[]));
        assert!(!Transport::answer_intact(&call, &answer([&sums[..], &[7]].concat(), data.clone()), None, &[]));
        assert!(!Transport::answer_intact(&call, &answer(sums.clone(), [&data[..], b"x"].concat()), None, &[]));
        // Delivered into a buffer at the places `dest` gives.
        let mut buf = vec![0u8; 12_000];
        buf[0..6000].copy_from_slice(&data[..6000]);
        buf[8000..11_000].copy_from_slice(&data[6000..]);
        let dest: Dest = vec![(0, 6000), (8000, 4000)];
        let placed = Ok((Response::Data { span_lens: vec![6000, 3000], sums }, Bulk::Vec(Vec::new())));
        assert!(Transport::answer_intact(&call, &placed, Some(&dest), &buf));
        buf[9000] ^= 4;
        assert!(!Transport::answer_intact(&call, &placed, Some(&dest), &buf));
        // Other answers are not chunk bytes.
        assert!(Transport::answer_intact(&call, &Ok((Response::Ok, Bulk::Vec(Vec::new()))), None, &[]));
    }
}
