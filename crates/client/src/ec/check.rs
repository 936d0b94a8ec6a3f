//! A stripe's parity against its data (`gust scrub --stripes`). Checksums say
//! whether each cell holds what was last written to it; they cannot say whether
//! the parity cells hold what the data cells encode to. A writer killed between
//! the two rounds of a write (the RAID "write hole": docs/SEMANTICS.md) leaves
//! parity that passes every checksum and is wrong, which shows only when a lost
//! data cell is rebuilt from it. This reads every cell of a stripe, encodes the
//! data cells again, and names the parity cells that differ; a repair writes
//! them as encoded (the data cells, whose checksums verify, are taken as right).
//!
//! Not for: corrupt blocks (checksums: the daemons' `scrub`, ec/read.rs's
//! `repair_cells`).

use super::Stripes;
use crate::error::unexpected;
use crate::rpc::{Call, Dest};
use crate::{Client, Errno, Result};
use gust_proto::sums::piece_sums;
use gust_proto::{Request, Response, Span};

/// A stripe's cells as read: K data cells then M parity cells, `len` bytes each.
struct StripeCells {
    cells: Vec<u8>,
    len: usize,
}

impl Client {
    /// The parity cells of stripe `stripe` of file `file_id` (`size` bytes long)
    /// that do not hold what its data cells encode to, as (cell index from K,
    /// daemon); and the bytes read. A mismatch is read and encoded once more
    /// before it counts (a writer may have been between its two rounds). EIO if a
    /// cell cannot be read (its daemon is down: nothing to compare).
    pub fn stale_parity(&self, file_id: u128, size: u64, stripe: u64) -> Result<(Vec<(usize, u32)>, u64)> {
        let s = self.stripes().ok_or(Errno(libc::EINVAL))?;
        let mut read = 0;
        let mut stale = Vec::new();
        for _ in 0..2 {
            let Some(cells) = self.read_stripe(s, file_id, size, stripe)? else { return Ok((Vec::new(), 0)) };
            read += cells.cells.len() as u64;
            let encoded = Self::encode(s, &cells);
            stale = (0..s.m as usize)
                .filter(|j| encoded[*j] != cells.cells[(s.k as usize + j) * cells.len..][..cells.len])
                .map(|j| (j, s.place.cell_daemon(file_id, stripe, (s.k as usize + j) as u32)))
                .collect();
            if stale.is_empty() {
                break;
            }
        }
        Ok((stale, read))
    }

    /// Writes parity cells `cells` (indices from K) of stripe `stripe` of file
    /// `file_id` as its data cells encode to now.
    pub fn rewrite_parity(&self, file_id: u128, size: u64, stripe: u64, cells: &[usize]) -> Result<()> {
        let s = self.stripes().ok_or(Errno(libc::EINVAL))?;
        let Some(read) = self.read_stripe(s, file_id, size, stripe)? else { return Ok(()) };
        let encoded = Self::encode(s, &read);
        let mut calls = Vec::new();
        for &j in cells {
            let (d, pid, offset) = s.cell_at(file_id, stripe, s.k as usize + j, 0);
            let bytes = &encoded[j][..];
            let span = Span { offset, len: bytes.len() as u32 };
            let req = Request::Write { file_id: pid, spans: vec![span], sums: piece_sums(offset, bytes).collect() };
            calls.push(Call { daemon: d, req, bulk: vec![bytes] });
        }
        self.send_to_cells(calls, Vec::new())
    }

    /// Every cell of a stripe, as far as the file reaches into it (zeros past a
    /// cell's end and in holes); None for a stripe past the end.
    fn read_stripe(&self, s: &Stripes, file_id: u128, size: u64, stripe: u64) -> Result<Option<StripeCells>> {
        let start = stripe * s.stripe_bytes();
        if start >= size {
            return Ok(None);
        }
        let n = (size - start).min(s.cell_bytes) as usize;
        let width = (s.k + s.m) as usize;
        let mut cells = vec![0u8; width * n];
        let (mut calls, mut dests) = (Vec::new(), Vec::<Option<Dest>>::new());
        for cell in 0..width {
            let (d, id, offset) = s.cell_at(file_id, stripe, cell, 0);
            let req = Request::Read { file_id: id, spans: vec![Span { offset, len: n as u32 }] };
            calls.push(Call { daemon: d, req, bulk: Vec::new() });
            dests.push(Some(vec![(cell * n, n as u32)]));
        }
        for a in self.transport.batch_into(calls, dests, &mut cells) {
            match a {
                Ok((Response::Data { .. }, _)) => {}
                Ok((r, _)) => return Err(unexpected(r)),
                Err(e) => return Err(e),
            }
        }
        Ok(Some(StripeCells { cells, len: n }))
    }

    /// The M parity cells that the data cells of `read` encode to.
    fn encode(s: &Stripes, read: &StripeCells) -> Vec<Vec<u8>> {
        let data: Vec<&[u8]> = read.cells.chunks(read.len).take(s.k as usize).collect();
        let mut parity = vec![vec![0u8; read.len]; s.m as usize];
        let mut out: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
        s.code.encode(&data, &mut out);
        parity
    }
}
