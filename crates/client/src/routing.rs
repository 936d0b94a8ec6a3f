//! Routing: which daemons a request goes to, and the one way of asking several.
//!
//! Every placement decision of the client passes through here: the daemon that holds
//! a path's metadata record, the daemons that hold a file's chunks, all daemons for
//! questions only all of them together answer (listings, capacity, emptiness, subtree
//! scans). Replicated placement (a record or chunk on R daemons, reads failing over)
//! changes this module, not the operations that call it.
//!
//! Asking several daemons is always the same: send every request first (the daemons
//! work in parallel), then read and check every reply; the first error in request
//! order is the answer ([`Client::call_all`], [`Client::call_each`]).
//!
//! Not for: hashing and chunk math (gust_placement), connections and framing
//! (rpc.rs).

use crate::rpc::Call;
use crate::{Client, Errno, Result};
use gust_placement::chunk_spans;
use gust_placement::Distributor;
use gust_proto::{Request, Response, Span};
use std::collections::BTreeMap;
use std::ops::Range;

/// A span of a read or write and where its bytes sit in the caller's buffer
/// (relative to the request's first byte).
pub(crate) type Placed = (Span, usize);

/// Spans grouped by the daemon `locate` names for the chunk each lies in: the one
/// grouping of every caller (reads, writes, spills to a chunk's next daemon,
/// staging). Order within a daemon is the order given.
pub(crate) fn group_spans(
    spans: impl IntoIterator<Item = Placed>,
    chunk_size: u64,
    mut locate: impl FnMut(u64) -> u32,
) -> BTreeMap<u32, Vec<Placed>> {
    let mut per_daemon: BTreeMap<u32, Vec<Placed>> = BTreeMap::new();
    for p in spans {
        let chunk = p.0.offset / chunk_size;
        // A span never crosses a chunk boundary: its daemon holds all of it. (On in
        // release builds: a division per span, against a request per daemon.)
        assert!(p.0.len > 0 && (p.0.offset + p.0.len as u64 - 1) / chunk_size == chunk, "span {:?}", p.0);
        per_daemon.entry(locate(chunk)).or_default().push(p);
    }
    per_daemon
}

/// The spans of bytes `offset..offset + len`, at most one chunk each, with their
/// positions relative to `offset`; together they cover the range exactly once.
pub(crate) fn placed_spans(offset: u64, len: u64, chunk_size: u64) -> impl Iterator<Item = Placed> {
    chunk_spans(offset, len, chunk_size).map(move |s| {
        assert!(s.file_offset >= offset && s.file_offset + s.len <= offset + len && s.len <= chunk_size);
        (Span { offset: s.file_offset, len: s.len as u32 }, (s.file_offset - offset) as usize)
    })
}

/// `spans` with each run of adjacent ones joined (as long as a span's length fits
/// half of u32): fewer, longer spans for requests that move whole files.
pub(crate) fn join_adjacent(spans: Vec<Placed>) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for (s, _) in spans {
        match out.last_mut() {
            Some(l) if l.offset + l.len as u64 == s.offset && (l.len as u64 + s.len as u64) <= u32::MAX as u64 / 2 => {
                l.len += s.len
            }
            _ => out.push(s),
        }
    }
    out
}

impl Client {
    /// The daemon that holds the metadata record of `path`.
    pub(crate) fn md_daemon(&self, path: &str) -> u32 {
        self.dist.locate_metadata(path)
    }

    /// One request about the record of `path`, to the daemon that holds it. (Where
    /// the request takes the path by value, callers ask `md_daemon` first instead of
    /// copying the path.)
    /// A change of attributes asked of a name of a hard-linked file is sent again to
    /// its link path (links.rs).
    pub(crate) fn call_md(&self, path: &str, req: Request) -> Result<Response> {
        // Kept for a second send: a daemon that moved to a new layout (layout.rs)
        // served nothing, and the request goes to the path's daemon of the new
        // layout; a name of a hard-linked file sends it to the link path.
        let again = req.clone();
        let first = match self.transport.call(self.md_daemon(path), req) {
            Err(Errno(gust_proto::errno::MOVED)) => {
                self.refresh_layout()?;
                self.transport.call(self.md_daemon(path), again.clone())
            }
            r => r,
        };
        match first {
            Err(Errno(libc::EREMOTE)) => {
                let mut req = again;
                let Some(at) = req.attrs_path_mut() else { return Err(Errno(libc::EREMOTE)) };
                let link = self.link_path_of(path)?;
                *at = link.clone();
                self.transport.call(self.md_daemon(&link), req)
            }
            r => r,
        }
    }

    /// One request (made by `req`) to each daemon that can hold chunks of file
    /// `file_id` at or past `from` (of `size` bytes): a truncate, removal or sync
    /// of chunks, which a daemon may apply twice. If one answers `MOVED` (a new
    /// layout, layout.rs), the daemons of the new layout are asked again.
    pub(crate) fn call_chunk_daemons(
        &self,
        file_id: u128,
        from: u64,
        size: u64,
        also: Option<u32>,
        req: impl Fn() -> Request,
    ) -> Result<()> {
        if self.stripes().is_some() {
            return self.call_cells(file_id, from, size, also, req());
        }
        for _ in 0..8 {
            let mut daemons = self.chunk_daemons(file_id, from, size);
            if let Some(d) = also.filter(|d| !daemons.contains(d)) {
                daemons.push(d);
            }
            match self.call_each(daemons, |_| req()) {
                Err(Errno(gust_proto::errno::MOVED)) => self.refresh_layout()?,
                r => return r.map(|_| ()),
            }
        }
        Err(Errno(libc::EIO))
    }

    /// Every daemon of the instance.
    pub(crate) fn all_daemons(&self) -> Range<u32> {
        0..self.daemon_count()
    }

    /// The daemons that can hold chunks of file `file_id` with bytes at or past
    /// `from`, for a file of `size` bytes (none when `from >= size`).
    pub(crate) fn chunk_daemons(&self, file_id: u128, from: u64, size: u64) -> Vec<u32> {
        if from >= size {
            return Vec::new();
        }
        self.dist.daemons_for_chunks(file_id, from / self.chunk_size, (size - 1) / self.chunk_size)
    }

    /// The bytes `offset..offset + len` of file `file_id` as spans grouped per daemon
    /// that holds them, each span with its position relative to `offset`.
    pub(crate) fn spans_by_daemon(&self, file_id: u128, offset: u64, len: u64) -> BTreeMap<u32, Vec<Placed>> {
        let groups = group_spans(placed_spans(offset, len, self.chunk_size), self.chunk_size, |chunk| {
            self.dist.locate_chunk(file_id, chunk)
        });
        // Paired with the check per span above: together they cover the request.
        assert_eq!(groups.values().flatten().map(|(s, _)| s.len as u64).sum::<u64>(), len, "spans of {offset}+{len}");
        groups
    }

    /// Sends every call at once, then checks every reply: the responses in call
    /// order, or the first error in call order.
    pub(crate) fn call_all(&self, calls: Vec<Call<'_>>) -> Result<Vec<Response>> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        self.transport.batch(calls).into_iter().map(|a| a.map(|(r, _)| r)).collect()
    }

    /// One request per daemon of `daemons` (made by `req`), sent at once, every reply
    /// checked, as [`Client::call_all`].
    pub(crate) fn call_each(
        &self,
        daemons: impl IntoIterator<Item = u32>,
        req: impl Fn(u32) -> Request,
    ) -> Result<Vec<Response>> {
        self.call_all(daemons.into_iter().map(|d| Call { daemon: d, req: req(d), bulk: Vec::new() }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Every byte of the request is in exactly one span, at its position; each
    /// span lies in one chunk, on the daemon located for that chunk.
    #[test]
    fn grouped_spans_cover_the_request_once() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(27);
        for _ in 0..500 {
            let chunk: u64 = [4096, 65536, 512 << 10][rng.gen_range(0..3)];
            let offset = rng.gen_range(0..8 * chunk);
            let len = rng.gen_range(1..6 * chunk);
            let daemons = rng.gen_range(1..7u32);
            let locate = |c: u64| (c.wrapping_mul(0x9E37_79B9) % daemons as u64) as u32;
            let groups = group_spans(placed_spans(offset, len, chunk), chunk, locate);
            let mut seen = vec![false; len as usize];
            for (d, spans) in &groups {
                for (s, rel) in spans {
                    assert_eq!(*d, locate(s.offset / chunk), "span {s:?} on the wrong daemon");
                    assert_eq!(s.offset / chunk, (s.offset + s.len as u64 - 1) / chunk, "span {s:?} crosses a chunk");
                    assert_eq!(s.offset - offset, *rel as u64, "position of {s:?}");
                    for b in &mut seen[*rel..*rel + s.len as usize] {
                        assert!(!*b, "byte covered twice");
                        *b = true;
                    }
                }
            }
            assert!(seen.iter().all(|b| *b), "offset {offset} len {len} chunk {chunk}: bytes not covered");
        }
    }

    #[test]
    fn adjacent_spans_join_within_half_of_u32() {
        let p = |offset, len| (Span { offset, len }, 0usize);
        let joined = join_adjacent(vec![p(0, 10), p(10, 5), p(20, 1), p(21, 1)]);
        assert_eq!(joined, vec![Span { offset: 0, len: 15 }, Span { offset: 20, len: 2 }]);
        let big = u32::MAX / 4 + 1;
        let joined = join_adjacent(vec![p(0, big), p(big as u64, big), p(2 * big as u64, 1)]);
        assert_eq!(joined.len(), 2, "a join past u32::MAX / 2 starts a new span: {joined:?}");
    }
}
