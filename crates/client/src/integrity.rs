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
//!
//! Not for: computing or storing sums (gust-store), routing copies (replica.rs).

use crate::rpc::{Call, Transport};
use crate::{Client, Errno};
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
            (Response::Data { span_lens }, bytes) => (span_lens, bytes),
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
}
