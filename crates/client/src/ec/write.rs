//! Writes of an erasure-coded file. Parity is kept by changes (gust-ec's
//! `parity_change`): data cell `i` going from `old` to `new` changes parity cell
//! `j` by `c[j][i] * (old XOR new)`, and since XOR commutes, that change may be
//! sent in parts and in any order. So a write is:
//!
//! 1. one round: each data cell's daemon gets its spans in a `write_swap`, which
//!    answers the bytes they replaced; each parity cell's daemon gets, per stripe,
//!    the change of the new bytes as if they replaced zeros (`xor_chunks`); the
//!    caller's other calls (the size update) go too;
//! 2. only where old bytes came back (an overwrite), or a data cell failed: one
//!    more round of `xor_chunks` adds the old bytes' part (`c * old`), or takes the
//!    failed cell's part back out.
//!
//! A write into holes (a file written once, a checkpoint) is thus one round
//! trip, with its data and, per stripe it covers whole, M/K of it in parity on
//! the wire (a part of a stripe costs M times that part). A data cell whose
//! daemon is down is not written: its old bytes, rebuilt from the stripe, and its
//! new ones go into the parity (a degraded write); it and a parity cell whose
//! daemon is down are passed over, and the daemon fenced before the write returns
//! (its cells are rebuilt by `gust repair`). A client that dies between the rounds leaves
//! the stripe's parity off by the old bytes (docs/SEMANTICS.md, "Erasure codes").

use super::Stripes;
use crate::error::unexpected;
use crate::routing::{group_spans, placed_spans, Placed};
use crate::rpc::{Answer, Call};
use crate::{Client, Errno, Result};
use gust_proto::sums::piece_sums;
use gust_proto::{Request, Response, Span};
use std::collections::BTreeMap;

/// Per parity cells' daemon: the parity file id, its spans and their bytes.
type ParityCalls<'a> = BTreeMap<u32, (u128, Vec<Span>, Vec<&'a [u8]>)>;

/// Parity changes by stripe.
pub(crate) type Changes = BTreeMap<u64, StripeChange>;

/// What the data cells' answers to a write's first round leave to do.
struct Swapped {
    /// The first error (the write fails with it).
    first_err: Option<Errno>,
    /// The parity changes still to send: the old bytes' part where a cell answered
    /// some, the new bytes' part taken back where a cell failed (it went out with
    /// the first round).
    after: Changes,
    /// Spans whose old bytes arrived not matching their sums (corrupted on the
    /// way back: integrity.rs): their parity is encoded again from the data.
    stale: Vec<Span>,
    /// A data cell's daemon failed and is now known down (its part taken back).
    lost_now: bool,
}

/// The parity changes of one stripe: the range of cell offsets the write touched
/// and, per parity cell, its change over that range.
pub(crate) struct StripeChange {
    lo: u64,
    hi: u64,
    pub(crate) parity: Vec<Vec<u8>>,
}

impl Client {
    /// Writes `data` at file offset `at` of the erasure-coded file `file_id`,
    /// with `extra` calls in the first round (module doc). A data cell whose
    /// daemon fails during the write has its part taken back out of the parity;
    /// the write is then made again with that daemon known down (degraded).
    pub(crate) fn write_stripes(&self, file_id: u128, at: u64, data: &[u8], extra: Vec<Call<'_>>) -> Result<()> {
        if self.write_stripes_once(file_id, at, data, extra)? {
            return Ok(());
        }
        match self.write_stripes_once(file_id, at, data, Vec::new())? {
            true => Ok(()),
            false => Err(Errno(libc::EIO)),
        }
    }

    /// One try of `write_stripes`: false if a data cell's daemon failed during it
    /// (nothing else did), so that a second try writes without it. A data cell
    /// whose daemon is known down is not written: its old bytes, rebuilt from the
    /// stripe first, and the new ones go into the parity, and the daemon is fenced
    /// before the write returns (`gust repair` rebuilds the cell with the new
    /// bytes).
    fn write_stripes_once(&self, file_id: u128, at: u64, data: &[u8], extra: Vec<Call<'_>>) -> Result<bool> {
        let s = self.stripes().expect("erasure-coded");
        let (lost, groups): (Vec<_>, Vec<_>) =
            group_spans(placed_spans(at, data.len() as u64, s.cell_bytes), s.cell_bytes, |c| {
                s.place.cell_daemon(file_id, c / s.k, (c % s.k) as u32)
            })
            .into_iter()
            .partition(|(d, _)| self.transport.is_down(*d));
        let lost_old = self.lost_cells_bytes(file_id, s, &lost)?;
        let new = |spans: &[Placed], i: usize| {
            let (sp, rel) = spans[i];
            &data[rel..rel + sp.len as usize]
        };
        let mut ahead = Changes::new();
        for (_, spans) in groups.iter().chain(&lost) {
            Self::note_changes(s, &mut ahead, spans, |i| new(spans, i));
        }
        let mut calls: Vec<Call> = groups.iter().map(|(d, spans)| Self::swap_call(file_id, *d, spans, data)).collect();
        let (parity_calls, mut down) = self.parity_calls(file_id, s, &ahead);
        let parity_daemons: Vec<u32> = parity_calls.iter().map(|c| c.daemon).collect();
        let (n_swaps, n_parity) = (calls.len(), parity_calls.len());
        calls.extend(parity_calls);
        calls.extend(extra);
        let mut answers = self.transport.batch(calls);
        let rest = answers.split_off(n_swaps + n_parity);
        let parity_answers = answers.split_off(n_swaps);
        let mut sw = self.swapped(s, &groups, answers, &new);
        for a in rest {
            match a {
                Ok((Response::Written(_) | Response::Ok | Response::Offset(_), _)) => {}
                Ok((r, _)) => sw.first_err = sw.first_err.or(Some(unexpected(r))),
                Err(e) => sw.first_err = sw.first_err.or(Some(e)),
            }
        }
        for ((d, spans), old) in lost.iter().zip(&lost_old) {
            Self::note_changes(s, &mut sw.after, spans, |i| &old[i]);
            down.push(*d);
        }
        let parity =
            self.settle_cells(&parity_daemons, &parity_answers, &mut down).and_then(|_| match sw.after.is_empty() {
                true => Ok(()),
                false => self.send_parity(file_id, s, sw.after),
            });
        s.give_back_all(ahead);
        let parity = parity.and_then(|_| self.encode_parity_again(file_id, s, &sw.stale));
        sw.first_err.map_or(parity, Err).map(|_| !sw.lost_now)
    }

    /// The bytes the spans of data cells whose daemons are down hold now, rebuilt
    /// from their stripes (per group, per span). EIO if a stripe has fewer than K
    /// cells left.
    fn lost_cells_bytes(&self, file_id: u128, s: &Stripes, lost: &[(u32, Vec<Placed>)]) -> Result<Vec<Vec<Vec<u8>>>> {
        let rebuild = |(sp, _): &Placed| {
            let (stripe, cell, off) = s.locate(sp.offset);
            self.rebuild_cell(file_id, stripe, cell, off, sp.len)
        };
        lost.iter().map(|(_, spans)| spans.iter().map(rebuild).collect()).collect()
    }

    /// A data cell's daemon's `write_swap` of its spans of `data`.
    fn swap_call<'a>(file_id: u128, daemon: u32, spans: &[Placed], data: &'a [u8]) -> Call<'a> {
        let bulk: Vec<&[u8]> = spans.iter().map(|(sp, rel)| &data[*rel..*rel + sp.len as usize]).collect();
        let sums = spans.iter().zip(&bulk).flat_map(|((sp, _), b)| piece_sums(sp.offset, b)).collect();
        Call { daemon, bulk, req: Request::WriteSwap { file_id, spans: spans.iter().map(|x| x.0).collect(), sums } }
    }

    /// The data cells' answers (module doc, step 2): what is left to do.
    fn swapped<'a>(
        &self,
        s: &Stripes,
        groups: &[(u32, Vec<Placed>)],
        answers: Vec<Answer>,
        new: &dyn for<'s> Fn(&'s [Placed], usize) -> &'a [u8],
    ) -> Swapped {
        let mut sw = Swapped { first_err: None, after: Changes::new(), stale: Vec::new(), lost_now: false };
        for ((d, spans), a) in groups.iter().zip(answers) {
            match a {
                Ok((Response::Data { span_lens, sums }, old)) if !old_intact(spans, &span_lens, &sums, &old) => {
                    tracing::warn!(
                        "daemon {d}: the bytes a write replaced arrived not matching their checksums: the \
                         parity of those stripes is encoded again from the data"
                    );
                    sw.stale.extend(spans.iter().map(|(sp, _)| *sp));
                    continue;
                }
                Ok((Response::Data { span_lens, .. }, old)) => {
                    let starts: Vec<usize> = span_lens
                        .iter()
                        .scan(0usize, |pos, &n| Some(std::mem::replace(pos, *pos + n as usize)))
                        .collect();
                    Self::note_changes(s, &mut sw.after, spans, |i| {
                        let n = span_lens.get(i).map_or(0, |&n| n as usize).min(spans[i].0.len as usize);
                        &old[starts[i]..starts[i] + n]
                    });
                    continue;
                }
                Ok((r, _)) => sw.first_err = sw.first_err.or(Some(unexpected(r))),
                Err(Errno(libc::EBADMSG)) => {
                    sw.first_err = sw.first_err.or(Some(self.transport.corrupt_on_the_way(*d)))
                }
                Err(Errno(libc::EIO | libc::EHOSTDOWN)) if self.transport.is_down(*d) => sw.lost_now = true,
                Err(e) => sw.first_err = sw.first_err.or(Some(e)),
            }
            Self::note_changes(s, &mut sw.after, spans, |i| new(spans, i));
        }
        sw
    }

    /// Writes the parity cells of the bytes of `spans` (file offsets, each within
    /// a cell) as encoded from the data cells now (`parity_bytes`): for a write
    /// whose old bytes did not arrive intact, so that its changes could not be
    /// sent. One round; parity cells' daemons found down are passed over (fenced).
    fn encode_parity_again(&self, file_id: u128, s: &Stripes, spans: &[Span]) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        let mut parts = Vec::new();
        for sp in spans {
            let (stripe, _, off) = s.locate(sp.offset);
            for (j, bytes) in self.stripe_parity(file_id, stripe, off, sp.len)?.into_iter().enumerate() {
                let (d, pid, offset) = s.cell_at(file_id, stripe, s.k as usize + j, off);
                parts.push((d, pid, Span { offset, len: sp.len }, bytes));
            }
        }
        let (live, down): (Vec<_>, Vec<_>) = parts.iter().partition(|p| !self.transport.is_down(p.0));
        let calls = live
            .into_iter()
            .map(|(d, pid, span, bytes)| Call {
                daemon: *d,
                req: Request::Write {
                    file_id: *pid,
                    spans: vec![*span],
                    sums: piece_sums(span.offset, bytes).collect(),
                },
                bulk: vec![&bytes[..]],
            })
            .collect();
        self.send_to_cells(calls, down.into_iter().map(|p| p.0).collect())
    }

    /// Adds to `changes` each span's part in its stripe's parity cells, for a
    /// change of the span's bytes by `change_of(span index)` (shorter than the span:
    /// no change past it; empty: none).
    fn note_changes<'d>(s: &Stripes, changes: &mut Changes, spans: &[Placed], change_of: impl Fn(usize) -> &'d [u8]) {
        for (i, (sp, _)) in spans.iter().enumerate() {
            let change = change_of(i);
            if change.iter().all(|b| *b == 0) {
                continue;
            }
            let (stripe, cell, off) = s.locate(sp.offset);
            let c = changes.entry(stripe).or_insert_with(|| StripeChange {
                lo: off,
                hi: off,
                parity: vec![Vec::new(); s.m as usize],
            });
            Self::widen(s, c, off, off + sp.len as u64);
            let at = (off - c.lo) as usize;
            let mut bufs: Vec<&mut [u8]> = c.parity.iter_mut().map(|p| &mut p[at..at + change.len()]).collect();
            s.code.parity_change(cell, change, &mut bufs);
        }
    }

    /// Widens a stripe's change range to `lo..hi`, keeping what it holds in place
    /// (buffers from `s`'s pool: fresh memory costs a page fault per page).
    fn widen(s: &Stripes, c: &mut StripeChange, lo: u64, hi: u64) {
        let (new_lo, new_hi) = if c.parity[0].is_empty() { (lo, hi) } else { (c.lo.min(lo), c.hi.max(hi)) };
        if (new_lo, new_hi) == (c.lo, c.hi) && !c.parity[0].is_empty() {
            return;
        }
        for p in &mut c.parity {
            let mut v = s.buffer((new_hi - new_lo) as usize);
            if !p.is_empty() {
                let at = (c.lo - new_lo) as usize;
                v[at..at + p.len()].copy_from_slice(p);
            }
            s.give_back(std::mem::replace(p, v));
        }
        (c.lo, c.hi) = (new_lo, new_hi);
    }

    /// One `xor_chunks` per parity cells' daemon not found down, carrying its
    /// stripes' changes; and the parity cells' daemons found down (passed over).
    fn parity_calls<'a>(&self, file_id: u128, s: &Stripes, changes: &'a Changes) -> (Vec<Call<'a>>, Vec<u32>) {
        let mut per_daemon: ParityCalls = BTreeMap::new();
        for (stripe, c) in changes {
            for (j, p) in c.parity.iter().enumerate() {
                let (d, pid, offset) = s.cell_at(file_id, *stripe, s.k as usize + j, c.lo);
                let e = per_daemon.entry(d).or_insert_with(|| (pid, Vec::new(), Vec::new()));
                e.1.push(Span { offset, len: p.len() as u32 });
                e.2.push(p);
            }
        }
        let (down, live): (Vec<_>, Vec<_>) = per_daemon.into_iter().partition(|(d, _)| self.transport.is_down(*d));
        let calls = live
            .into_iter()
            .map(|(d, (pid, spans, bulk))| {
                let sums = spans.iter().zip(&bulk).flat_map(|(sp, b)| piece_sums(sp.offset, b)).collect();
                Call { daemon: d, bulk, req: Request::XorChunks { file_id: pid, spans, sums } }
            })
            .collect();
        (calls, down.into_iter().map(|(d, _)| d).collect())
    }

    /// Sends each parity cell its stripes' changes in a round of its own.
    fn send_parity(&self, file_id: u128, s: &Stripes, changes: Changes) -> Result<()> {
        let (calls, down) = self.parity_calls(file_id, s, &changes);
        let r = self.send_to_cells(calls, down);
        s.give_back_all(changes);
        r
    }
}

/// Whether the old bytes a data cell answered (`old`, `span_lens` of each of
/// `spans`) match the sums that came with them.
fn old_intact(spans: &[Placed], span_lens: &[u32], sums: &[u64], old: &[u8]) -> bool {
    let mut pos = 0usize;
    let parts = spans.iter().zip(span_lens).map(|((sp, _), &n)| {
        let part = old.get(pos..pos + n as usize);
        pos += n as usize;
        (sp.offset, part)
    });
    span_lens.len() == spans.len() && crate::integrity::pieces_match(parts, sums) && pos == old.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes of several spans of one stripe land at their cell offsets, the range
    /// widening either way without moving what is there.
    #[test]
    fn a_stripes_change_widens_in_place() {
        let s = Stripes::new(6, 4, 2, 4096, None).unwrap();
        let mut c = StripeChange { lo: 0, hi: 0, parity: vec![Vec::new(); 2] };
        Client::widen(&s, &mut c, 100, 110);
        c.parity[0][0] = 7;
        Client::widen(&s, &mut c, 50, 60);
        assert_eq!((c.lo, c.hi), (50, 110));
        assert_eq!(c.parity[0][50], 7);
        Client::widen(&s, &mut c, 105, 200);
        assert_eq!((c.lo, c.hi, c.parity[1].len()), (50, 200, 150));
        assert_eq!(c.parity[0][50], 7);
    }
}
