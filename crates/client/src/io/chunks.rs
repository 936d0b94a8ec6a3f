//! Where a window's chunk spans go: to the local file a daemon of this node handed
//! over (short_circuit.rs), or in one request per daemon, together with the
//! window's size update.
//!
//! Chunk writes and reads when placement spills: with `--placement capacity` a
//! daemon that is full refuses a write (ENOSPC) and the chunk goes to the next
//! daemon of its order (gust_placement's `chunk_order`), up to `spill_daemons`
//! daemons further. Reads look there too.
//!
//! * Writes: one round sends every chunk span to its first daemon (with the caller's
//!   other calls, such as the size update). Spans refused with ENOSPC are sent again,
//!   each to the next daemon of its chunk's order; round r asks the r-th. Only when
//!   every candidate refuses does the write fail with ENOSPC.
//! * Reads: a daemon answers how many bytes of a span it holds, cut where only a hole
//!   follows (gust-daemon's chunk store). Where a span comes back short inside the
//!   file's size, the rest is asked of the chunk's next daemon, round by round. A
//!   range never written (a hole) thus costs up to `spill_daemons` more requests.
//! * A daemon refuses only writes that extend its local file (a declared capacity)
//!   or that the disk refuses (a real full disk): an overwrite of bytes a daemon
//!   holds goes where they are, so a chunk's bytes have one place.
//!
//! Without spilling (wide striping) the write is the one round of before and reads
//! probe nothing.
//!
//! Not for: choosing daemons (gust_placement), connections (rpc.rs).

use crate::error::unexpected;
use crate::open_files::OpenFile;
use crate::routing::{group_spans, Placed};
use crate::rpc::{Call, Dest};
use crate::{namespace::now_ns, Client, Errno, Result};
use gust_placement::Distributor;
use gust_proto::sums::piece_sums;
use gust_proto::{Request, Response, Span};
use std::collections::BTreeMap;

impl Client {
    /// Writes one window (`piece` at file offset `at`) of `f` through chunks; with
    /// `with_size`, the size update to `path`'s metadata daemon travels in the same
    /// round. A file linked since its open (links.rs) answers the size update
    /// EREMOTE: the data is written by then, and the size goes to the link path,
    /// which `path` becomes.
    pub(crate) fn write_window(
        &self,
        f: &OpenFile,
        path: &mut String,
        at: u64,
        piece: &[u8],
        with_size: bool,
    ) -> Result<()> {
        let update = |path: &str| Request::UpdateSize {
            path: path.to_string(),
            file_id: f.file_id(),
            end: at + piece.len() as u64,
            append_len: None,
            mtime_ns: now_ns(),
        };
        let extra = match with_size {
            true => vec![Call { daemon: self.md_daemon(path), req: update(path), bulk: Vec::new() }],
            false => Vec::new(),
        };
        match self.write_chunks(f.file_id(), at, piece, extra, Self::may_ask(f)) {
            Err(Errno(libc::EREMOTE)) => {
                *path = self.learn_link(f)?;
                self.transport.call(self.md_daemon(path), update(path)).map(|_| ())
            }
            r => r,
        }
    }

    /// Spans grouped by the `rank`-th daemon of their chunk's order.
    fn group_by_rank(&self, file_id: u128, spans: Vec<Placed>, rank: u32) -> BTreeMap<u32, Vec<Placed>> {
        let mut order = Vec::new();
        group_spans(spans, self.chunk_size, |chunk| {
            if rank == 0 {
                return self.dist.locate_chunk(file_id, chunk);
            }
            self.dist.chunk_order(file_id, chunk, &mut order);
            order[rank as usize]
        })
    }

    /// Writes `data` at file offset `at` through chunks, together with `extra` calls
    /// (sent in the first round, their replies checked). The first error in call
    /// order is the answer, except that ENOSPC from a chunk's daemon moves its spans
    /// on (module doc).
    /// With `ask`, a daemon of this node may be asked to hand its local file over
    /// (short_circuit.rs).
    pub(crate) fn write_chunks(
        &self,
        file_id: u128,
        at: u64,
        data: &[u8],
        extra: Vec<Call<'_>>,
        ask: bool,
    ) -> Result<()> {
        if self.stripes().is_some() {
            return self.write_stripes(file_id, at, data, extra);
        }
        let spill = self.dist.spill_daemons();
        let mut pending: Vec<Placed> = Vec::new();
        let mut first_err: Option<Errno> = None;
        let mut extra = Some(extra);
        let mut groups = self.spans_by_daemon(file_id, at, data.len() as u64);
        for rank in 0..=spill {
            let mut group_list: Vec<(u32, Vec<Placed>)> = std::mem::take(&mut groups).into_iter().collect();
            if rank == 0 {
                // What daemons of this node handed over is written here (short_circuit.rs).
                group_list.retain(|(d, spans)| match self.write_handed(*d, file_id, spans, data, ask) {
                    None => true,
                    Some(Ok(())) => false,
                    Some(Err(Errno(libc::ENOSPC))) if spill > 0 => {
                        pending.extend(spans.iter().copied());
                        false
                    }
                    Some(Err(e)) => {
                        first_err = first_err.or(Some(e));
                        false
                    }
                });
            }
            let mut calls: Vec<Call> = group_list
                .iter()
                .map(|(d, spans)| {
                    let bulk: Vec<&[u8]> = spans.iter().map(|(s, rel)| &data[*rel..*rel + s.len as usize]).collect();
                    // The daemon checks them before it writes (integrity.rs).
                    let sums = spans.iter().zip(&bulk).flat_map(|((s, _), b)| piece_sums(s.offset, b)).collect();
                    Call {
                        daemon: *d,
                        bulk,
                        req: Request::Write { file_id, spans: spans.iter().map(|x| x.0).collect(), sums },
                    }
                })
                .collect();
            calls.extend(extra.take().unwrap_or_default());
            let answers = if calls.is_empty() { Vec::new() } else { self.transport.batch(calls) };
            for (i, a) in answers.into_iter().enumerate() {
                match a {
                    Ok((Response::Written(_) | Response::Ok | Response::Offset(_), _)) => {}
                    Ok((r, _)) => first_err = first_err.or(Some(unexpected(r))),
                    Err(Errno(libc::ENOSPC)) if i < group_list.len() && rank < spill => {
                        pending.extend(group_list[i].1.iter().copied())
                    }
                    Err(Errno(libc::EBADMSG)) if i < group_list.len() => {
                        first_err = first_err.or(Some(self.transport.corrupt_on_the_way(group_list[i].0)))
                    }
                    Err(e) => first_err = first_err.or(Some(e)),
                }
            }
            if first_err.is_some() || pending.is_empty() {
                break;
            }
            groups = self.group_by_rank(file_id, std::mem::take(&mut pending), rank + 1);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Writes `spans` (their bytes in `data`) in the local file `daemon` handed
    /// this process, if it did (short_circuit.rs); None: send a request.
    fn write_handed(&self, daemon: u32, file_id: u128, spans: &[Placed], data: &[u8], ask: bool) -> Option<Result<()>> {
        let h = self.handed(daemon, file_id, ask)?;
        let access = &self.transport.grants.short_circuit()?.access;
        h.with(|local| {
            for (s, rel) in spans {
                access
                    .write(local, file_id, std::slice::from_ref(s), &data[*rel..*rel + s.len as usize], &[])
                    .map_err(Errno)?;
            }
            Ok(())
        })
    }

    /// After a read round, asks the chunks' next daemons for the parts of spans that
    /// came back short (`short`: span remainders inside the file's size, with their
    /// place in `buf`), round by round, until each is found or its candidates are
    /// all asked. Bytes nobody holds stay zero (a hole).
    pub(crate) fn read_spilled(&self, file_id: u128, mut short: Vec<Placed>, buf: &mut [u8]) -> Result<()> {
        let spill = self.dist.spill_daemons();
        let mut rank = 1;
        while !short.is_empty() && rank <= spill {
            let groups: Vec<(u32, Vec<Placed>)> =
                self.group_by_rank(file_id, std::mem::take(&mut short), rank).into_iter().collect();
            let calls = groups
                .iter()
                .map(|(d, spans)| Call {
                    daemon: *d,
                    req: Request::Read { file_id, spans: spans.iter().map(|x| x.0).collect() },
                    bulk: Vec::new(),
                })
                .collect();
            let dests: Vec<Option<Dest>> =
                groups.iter().map(|(_, spans)| Some(spans.iter().map(|(s, at)| (*at, s.len)).collect())).collect();
            for ((_, spans), a) in groups.iter().zip(self.transport.batch_into(calls, dests, buf)) {
                match a? {
                    (Response::Data { span_lens, .. }, _) => short.extend(remainders(spans, &span_lens)),
                    (r, _) => return Err(unexpected(r)),
                }
            }
            rank += 1;
        }
        Ok(())
    }
}

/// The parts of `spans` past what a daemon held of each (`got`), as spans of their
/// own with their place in the caller's buffer.
pub(crate) fn remainders<'a>(spans: &'a [Placed], got: &'a [u32]) -> impl Iterator<Item = Placed> + 'a {
    spans
        .iter()
        .zip(got)
        .filter(|((s, _), g)| **g < s.len)
        .map(|((s, at), g)| (Span { offset: s.offset + *g as u64, len: s.len - g }, at + *g as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a daemon did not hold of each span becomes a span of its own, at the
    /// right place in the caller's buffer; spans it held whole leave nothing.
    #[test]
    fn short_answers_leave_the_rest_of_each_span() {
        let spans: Vec<Placed> = vec![
            (Span { offset: 0, len: 100 }, 0),
            (Span { offset: 100, len: 50 }, 100),
            (Span { offset: 4096, len: 10 }, 150),
        ];
        let rest: Vec<Placed> = remainders(&spans, &[100, 20, 0]).collect();
        assert_eq!(rest, vec![(Span { offset: 120, len: 30 }, 120), (Span { offset: 4096, len: 10 }, 150)]);
        assert_eq!(remainders(&spans, &[100, 50, 10]).count(), 0);
    }
}
