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
use crate::{Client, Result};
use gust_placement::chunk_spans;
use gust_proto::{Request, Response, Span};
use std::collections::BTreeMap;
use std::ops::Range;

impl Client {
    /// The daemon that holds the metadata record of `path`.
    pub(crate) fn md_daemon(&self, path: &str) -> u32 {
        self.dist.locate_metadata(path)
    }

    /// One request about the record of `path`, to the daemon that holds it. (Where
    /// the request takes the path by value, callers ask `md_daemon` first instead of
    /// copying the path.)
    pub(crate) fn call_md(&self, path: &str, req: Request) -> Result<Response> {
        self.transport.call(self.md_daemon(path), req)
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
    pub(crate) fn spans_by_daemon(&self, file_id: u128, offset: u64, len: u64) -> BTreeMap<u32, Vec<(Span, usize)>> {
        let mut per_daemon: BTreeMap<u32, Vec<(Span, usize)>> = BTreeMap::new();
        for s in chunk_spans(offset, len, self.chunk_size) {
            let d = self.dist.locate_chunk(file_id, s.chunk);
            per_daemon
                .entry(d)
                .or_default()
                .push((Span { offset: s.file_offset, len: s.len as u32 }, (s.file_offset - offset) as usize));
        }
        per_daemon
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
