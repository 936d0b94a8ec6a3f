//! Writes of an erasure-coded file: one round of `write_swap`s to the data
//! cells' daemons (with the caller's other calls, such as the size update), each
//! answering the bytes it replaced; then one round of `xor_chunks` to the parity
//! cells' daemons, each carrying, per stripe, the sum of its data cells' changes
//! times their factors (gust-ec's `parity_change`).
//!
//! A stripe written whole for the first time thus costs its data and M/K of it in
//! parity on the wire, as encoding it whole would; an overwrite also brings the
//! old bytes back. A data cell whose daemon fails is not written (the write
//! fails; its parity is not changed for it); a parity cell whose daemon is down
//! is passed over, and the daemon fenced before the write returns (it is rebuilt
//! by `gust repair`). A client that dies between the rounds leaves the stripe's
//! parity behind its data (docs/SEMANTICS.md, "Erasure codes").

use super::Stripes;
use crate::error::unexpected;
use crate::routing::{group_spans, placed_spans, Placed};
use crate::rpc::Call;
use crate::{Client, Errno, Result};
use gust_proto::sums::piece_sums;
use gust_proto::{Request, Response, Span};
use std::collections::BTreeMap;

/// Per parity cells' daemon: the parity file id, its spans and their bytes.
type ParityCalls<'a> = BTreeMap<u32, (u128, Vec<Span>, Vec<&'a [u8]>)>;

/// The parity changes of one stripe: the range of cell offsets the write touched
/// and, per parity cell, its change over that range.
struct StripeChange {
    lo: u64,
    hi: u64,
    parity: Vec<Vec<u8>>,
}

impl Client {
    /// Writes `data` at file offset `at` of the erasure-coded file `file_id`,
    /// with `extra` calls in the first round (module doc).
    pub(crate) fn write_stripes(&self, file_id: u128, at: u64, data: &[u8], extra: Vec<Call<'_>>) -> Result<()> {
        let s = self.stripes().expect("erasure-coded");
        let groups: Vec<(u32, Vec<Placed>)> =
            group_spans(placed_spans(at, data.len() as u64, s.cell_bytes), s.cell_bytes, |c| {
                s.place.cell_daemon(file_id, c / s.k, (c % s.k) as u32)
            })
            .into_iter()
            .collect();
        let mut calls: Vec<Call> = groups
            .iter()
            .map(|(d, spans)| {
                let bulk: Vec<&[u8]> = spans.iter().map(|(sp, rel)| &data[*rel..*rel + sp.len as usize]).collect();
                let sums = spans.iter().zip(&bulk).flat_map(|((sp, _), b)| piece_sums(sp.offset, b)).collect();
                Call {
                    daemon: *d,
                    bulk,
                    req: Request::WriteSwap { file_id, spans: spans.iter().map(|x| x.0).collect(), sums },
                }
            })
            .collect();
        calls.extend(extra);
        let answers = self.transport.batch(calls);
        let mut first_err = None;
        let mut changes: BTreeMap<u64, StripeChange> = BTreeMap::new();
        for (i, a) in answers.into_iter().enumerate() {
            match (a, groups.get(i)) {
                (Ok((Response::Data { span_lens }, old)), Some((_, spans))) => {
                    Self::note_changes(s, &mut changes, spans, &span_lens, &old, data)
                }
                (Ok((Response::Written(_) | Response::Ok | Response::Offset(_), _)), None) => {}
                (Ok((r, _)), _) => first_err = first_err.or(Some(unexpected(r))),
                (Err(Errno(libc::EBADMSG)), Some((d, _))) => {
                    first_err = first_err.or(Some(self.transport.corrupt_on_the_way(*d)))
                }
                (Err(e), _) => first_err = first_err.or(Some(e)),
            }
        }
        // The parity follows what was written, even when some cell failed.
        let parity = self.send_parity(file_id, s, changes);
        match first_err {
            Some(e) => Err(e),
            None => parity,
        }
    }

    /// Adds the change of each written span (new bytes XOR the `old` ones its
    /// daemon answered, `lens` of them per span) to its stripe's parity changes.
    fn note_changes(
        s: &Stripes,
        changes: &mut BTreeMap<u64, StripeChange>,
        spans: &[Placed],
        lens: &[u32],
        old: &[u8],
        data: &[u8],
    ) {
        let mut pos = 0usize;
        for ((sp, rel), &n) in spans.iter().zip(lens) {
            let (stripe, cell, off) = s.locate(sp.offset);
            let mut change = data[*rel..*rel + sp.len as usize].to_vec();
            let n = (n as usize).min(change.len());
            change[..n].iter_mut().zip(&old[pos..pos + n]).for_each(|(c, o)| *c ^= o);
            pos += n;
            let c = changes.entry(stripe).or_insert_with(|| StripeChange {
                lo: off,
                hi: off,
                parity: vec![Vec::new(); s.m as usize],
            });
            Self::widen(c, off, off + sp.len as u64);
            let lo = c.lo;
            let mut bufs: Vec<&mut [u8]> =
                c.parity.iter_mut().map(|p| &mut p[(off - lo) as usize..(off - lo) as usize + change.len()]).collect();
            s.code.parity_change(cell, &change, &mut bufs);
        }
    }

    /// Widens a stripe's change range to `lo..hi`, keeping what it holds in place.
    fn widen(c: &mut StripeChange, lo: u64, hi: u64) {
        let (new_lo, new_hi) = if c.parity[0].is_empty() { (lo, hi) } else { (c.lo.min(lo), c.hi.max(hi)) };
        for p in &mut c.parity {
            let mut v = vec![0u8; (new_hi - new_lo) as usize];
            if !p.is_empty() {
                let at = (c.lo - new_lo) as usize;
                v[at..at + p.len()].copy_from_slice(p);
            }
            *p = v;
        }
        (c.lo, c.hi) = (new_lo, new_hi);
    }

    /// Sends each parity cell its stripes' changes, one `xor_chunks` per daemon.
    fn send_parity(&self, file_id: u128, s: &Stripes, changes: BTreeMap<u64, StripeChange>) -> Result<()> {
        let mut per_daemon: ParityCalls = BTreeMap::new();
        for (stripe, c) in &changes {
            for (j, p) in c.parity.iter().enumerate() {
                let (d, pid, offset) = s.cell_at(file_id, *stripe, s.k as usize + j, c.lo);
                let e = per_daemon.entry(d).or_insert_with(|| (pid, Vec::new(), Vec::new()));
                e.1.push(Span { offset, len: p.len() as u32 });
                e.2.push(p);
            }
        }
        let (daemons, calls): (Vec<u32>, Vec<Call>) = per_daemon
            .into_iter()
            .filter(|(d, _)| !self.transport.is_down(*d))
            .map(|(d, (pid, spans, bulk))| {
                let sums = spans.iter().zip(&bulk).flat_map(|(sp, b)| piece_sums(sp.offset, b)).collect();
                (d, Call { daemon: d, bulk, req: Request::XorChunks { file_id: pid, spans, sums } })
            })
            .unzip();
        let skipped = self.parity_daemons_down(file_id, s, &changes);
        let answers = if calls.is_empty() { Vec::new() } else { self.transport.batch(calls) };
        self.settle_cells(daemons, answers, skipped).map(|_| ())
    }

    /// The parity cells' daemons of these stripes that this client skips now.
    fn parity_daemons_down(&self, file_id: u128, s: &Stripes, changes: &BTreeMap<u64, StripeChange>) -> Vec<u32> {
        changes
            .keys()
            .flat_map(|st| (0..s.m as usize).map(move |j| s.place.cell_daemon(file_id, *st, (s.k as usize + j) as u32)))
            .filter(|d| self.transport.is_down(*d))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes of several spans of one stripe land at their cell offsets, the range
    /// widening either way without moving what is there.
    #[test]
    fn a_stripes_change_widens_in_place() {
        let mut c = StripeChange { lo: 0, hi: 0, parity: vec![Vec::new(); 2] };
        Client::widen(&mut c, 100, 110);
        c.parity[0][0] = 7;
        Client::widen(&mut c, 50, 60);
        assert_eq!((c.lo, c.hi), (50, 110));
        assert_eq!(c.parity[0][50], 7);
        Client::widen(&mut c, 105, 200);
        assert_eq!((c.lo, c.hi, c.parity[1].len()), (50, 200, 150));
        assert_eq!(c.parity[0][50], 7);
    }
}
