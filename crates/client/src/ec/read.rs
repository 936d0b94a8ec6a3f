//! Reads of an erasure-coded file whose data cell's daemon failed: the span is
//! asked of every other cell of its stripe at once (the same offsets in each
//! cell), and rebuilt from the first K that answer (gust-ec). A stripe with fewer
//! than K cells left fails the read with EIO, and `gust_last_error()` says which
//! daemons it lacked. A cell that answered with a corrupt block is rewritten
//! from the rebuilt bytes. Also a parity cell's bytes encoded from its stripe's
//! data, for `gust scrub` and `gust repair`.

use crate::error::unexpected;
use crate::routing::Placed;
use crate::rpc::{Call, Dest};
use crate::{Client, Errno, Result};
use gust_proto::{Request, Response, Span};

impl Client {
    /// Rebuilds `spans` of file `file_id` (data cells' spans whose daemon failed,
    /// with their places in `buf`) from the other cells of their stripes. A cell
    /// whose daemon answers (a corrupt block: EUCLEAN) gets its corrupt blocks
    /// rewritten from the rebuilt bytes (`repair_blocks`; each span is rebuilt
    /// widened to whole checksum blocks for that).
    pub(crate) fn read_degraded(&self, file_id: u128, spans: &[Placed], buf: &mut [u8]) -> Result<()> {
        let s = self.stripes().expect("erasure-coded");
        for (span, at) in spans {
            let wide = self.transport.whole_blocks(span);
            let (stripe, lost, off) = s.locate(wide.offset);
            let rebuilt = self.rebuild_cell(file_id, stripe, lost, off, wide.len)?;
            let skip = (span.offset - wide.offset) as usize;
            buf[*at..*at + span.len as usize].copy_from_slice(&rebuilt[skip..skip + span.len as usize]);
            let (d, ..) = s.cell_at(file_id, stripe, lost, off);
            if !self.transport.is_down(d) {
                let repair =
                    Call { daemon: d, req: Request::RepairBlocks { file_id, spans: vec![wide] }, bulk: vec![&rebuilt] };
                match self.transport.send_batch(vec![repair], vec![None], &mut []).pop() {
                    Some(Ok((Response::Written(n), _))) if n > 0 => tracing::warn!(
                        "daemon {d}: {n} corrupt block(s) of file {file_id:032x} rewritten from stripe {stripe}"
                    ),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Bytes `off..off + len` of cell `lost` of stripe `stripe`, rebuilt from the
    /// same bytes of the stripe's other cells (asked at once, the first K to
    /// answer used).
    pub(super) fn rebuild_cell(&self, file_id: u128, stripe: u64, lost: usize, off: u64, len: u32) -> Result<Vec<u8>> {
        let s = self.stripes().expect("erasure-coded");
        let width = (s.k + s.m) as usize;
        let n = len as usize;
        let mut cells = vec![0u8; width * n];
        let mut calls = Vec::new();
        let mut dests: Vec<Option<Dest>> = Vec::new();
        let mut which = Vec::new();
        for cell in (0..width).filter(|c| *c != lost) {
            let (d, id, offset) = s.cell_at(file_id, stripe, cell, off);
            if self.transport.is_down(d) {
                continue;
            }
            let req = Request::Read { file_id: id, spans: vec![Span { offset, len }] };
            calls.push(Call { daemon: d, req, bulk: Vec::new() });
            dests.push(Some(vec![(cell * n, len)]));
            which.push(cell);
        }
        let mut present = vec![false; width];
        for (cell, a) in which.into_iter().zip(self.transport.batch_into(calls, dests, &mut cells)) {
            match a {
                Ok((Response::Data { .. }, _)) => present[cell] = true,
                Ok((r, _)) => return Err(unexpected(r)),
                Err(_) => {}
            }
        }
        let mut v: Vec<(&mut [u8], bool)> = cells.chunks_mut(n).zip(present.iter().copied()).collect();
        if let Err(why) = s.code.rebuild(&mut v, true) {
            let missing: Vec<String> = (0..width)
                .filter(|c| !present[*c])
                .map(|c| s.place.cell_daemon(file_id, stripe, c as u32).to_string())
                .collect();
            *self.transport.last_error_slot() = Some(format!(
                "stripe {stripe} of file {file_id:032x}: {why} (daemons {} do not answer)",
                missing.join(", ")
            ));
            return Err(Errno(libc::EIO));
        }
        cells.truncate((lost + 1) * n);
        Ok(cells.split_off(lost * n))
    }

    /// `repair_range` of an erasure-coded instance: the corrupt range `r` that
    /// `gust scrub` found on `daemon`, rewritten from its stripe (whole checksum
    /// blocks, a cell at a time): a data cell's bytes rebuilt from the other
    /// cells, a parity cell's encoded again from the data cells. Returns the
    /// blocks rewritten.
    pub(crate) fn repair_cells(&self, daemon: u32, r: &gust_proto::CorruptRange) -> Result<u64> {
        let s = self.stripes().expect("erasure-coded");
        let data_id = gust_placement::ec::data_file_id(r.file_id);
        let parity = data_id != r.file_id;
        let (mut pos, end, mut done) = (r.offset, r.offset + r.len, 0);
        while pos < end {
            let piece_end = end.min((pos / s.cell_bytes + 1) * s.cell_bytes);
            let span = self.transport.whole_blocks(&Span { offset: pos, len: (piece_end - pos) as u32 });
            pos = piece_end;
            let bytes = match parity {
                false => {
                    let (stripe, cell, off) = s.locate(span.offset);
                    self.rebuild_cell(data_id, stripe, cell, off, span.len)?
                }
                true => self.parity_bytes(
                    data_id,
                    span.offset / s.cell_bytes,
                    daemon,
                    span.offset % s.cell_bytes,
                    span.len,
                )?,
            };
            let repair = Call {
                daemon,
                req: Request::RepairBlocks { file_id: r.file_id, spans: vec![span] },
                bulk: vec![&bytes],
            };
            match self.transport.send_batch(vec![repair], vec![None], &mut []).pop().expect("one answer")? {
                (Response::Written(n), _) => done += n,
                (other, _) => return Err(unexpected(other)),
            }
        }
        Ok(done)
    }

    /// Bytes `off..off + len` of the parity cell that `daemon` holds of stripe
    /// `stripe` of file `file_id`, encoded from the data cells' same bytes (all
    /// asked at once; a cell whose daemon fails is rebuilt): what `gust scrub`
    /// and `gust repair` write where that parity cell is corrupt or lost.
    pub fn parity_bytes(&self, file_id: u128, stripe: u64, daemon: u32, off: u64, len: u32) -> Result<Vec<u8>> {
        let s = self.stripes().ok_or(Errno(libc::EINVAL))?;
        let j = (0..s.m as usize)
            .find(|j| s.place.cell_daemon(file_id, stripe, (s.k as usize + j) as u32) == daemon)
            .ok_or(Errno(libc::EINVAL))?;
        Ok(self.stripe_parity(file_id, stripe, off, len)?.swap_remove(j))
    }

    /// Bytes `off..off + len` of every parity cell of stripe `stripe` of file
    /// `file_id`, encoded from the data cells' same bytes (all asked at once; a
    /// cell whose daemon fails is rebuilt).
    pub(super) fn stripe_parity(&self, file_id: u128, stripe: u64, off: u64, len: u32) -> Result<Vec<Vec<u8>>> {
        let s = self.stripes().ok_or(Errno(libc::EINVAL))?;
        let (k, n) = (s.k as usize, len as usize);
        let mut cells = vec![0u8; k * n];
        let (mut calls, mut dests) = (Vec::new(), Vec::new());
        for cell in 0..k {
            let (d, id, offset) = s.cell_at(file_id, stripe, cell, off);
            calls.push(Call {
                daemon: d,
                req: Request::Read { file_id: id, spans: vec![Span { offset, len }] },
                bulk: Vec::new(),
            });
            dests.push(Some(vec![(cell * n, len)]));
        }
        let answers = self.transport.batch_into(calls, dests, &mut cells);
        for (cell, a) in answers.into_iter().enumerate() {
            if !matches!(a, Ok((Response::Data { .. }, _))) {
                let rebuilt = self.rebuild_cell(file_id, stripe, cell, off, len)?;
                cells[cell * n..(cell + 1) * n].copy_from_slice(&rebuilt);
            }
        }
        let refs: Vec<&[u8]> = cells.chunks(n).collect();
        let mut parity = vec![vec![0u8; n]; s.m as usize];
        let mut out: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
        s.code.encode(&refs, &mut out);
        Ok(parity)
    }
}
