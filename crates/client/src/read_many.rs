//! Whole files by the batch: what a data loader asks for when it fetches the
//! samples of a batch (PyTorch's `__getitems__`, fsspec's `cat` of a list).
//!
//! [`Client::read_many_into`] sends the `stat_data` request of every file of a
//! batch before it reads any reply, each on its own pooled connection to the file's
//! metadata daemon (rpc.rs `send_batch_placed`): the daemons work on the batch in
//! parallel, and a daemon worker that wakes finds the next requests ready, so the
//! wake-ups and system calls of one request per file are shared by the batch. An
//! inline file's data goes from the socket straight into the buffer the caller
//! makes for it once its record says the size, as for `read_whole_into`.
//!
//! Per file, the answer is what `read_whole_into` gives for that file alone: the
//! data of an inline file, else the record for an ordinary open. Files are
//! independent: one missing file fails only its own entry.
//!
//! Not for: reading one file (inline.rs), chunk I/O (data.rs).

use crate::error::unexpected;
use crate::inline::{inline_file, WholeFile};
use crate::rpc::{Bulk, Call};
use crate::{Client, Result};
use gust_proto::{Record, Request, Response};

/// Requests of a batch in flight at once (each holds a connection until its reply
/// is read): bounds connections per daemon and the replies daemons hold for us.
pub const READ_MANY_IN_FLIGHT: usize = 64;

impl Client {
    /// Every file of `paths` as [`Client::read_whole_into`] reads one, in order,
    /// with the requests of up to `READ_MANY_IN_FLIGHT` files in flight at once.
    /// `place` is called with the file's index and record when its data is inline
    /// and returns where to read it (or None: the entry becomes `Other`).
    pub(crate) fn read_many_into_impl<'p>(
        &self,
        paths: &[&str],
        place: &mut dyn FnMut(usize, &Record) -> Option<&'p mut [u8]>,
    ) -> Vec<Result<WholeFile>> {
        // Replicas route reads to a live copy (replica.rs), cache mode may fetch
        // the file first (cache.rs): both keep the ordinary path.
        if self.transport.replicas > 1 || self.hosts.cache_of.is_some() {
            return paths.iter().map(|_| Ok(WholeFile::Other(None))).collect();
        }
        let mut out = Vec::with_capacity(paths.len());
        for (group, first) in paths.chunks(READ_MANY_IN_FLIGHT).zip((0..).step_by(READ_MANY_IN_FLIGHT)) {
            self.read_group(group, first, place, &mut out);
        }
        out
    }

    fn read_group<'p>(
        &self,
        paths: &[&str],
        first: usize,
        place: &mut dyn FnMut(usize, &Record) -> Option<&'p mut [u8]>,
        out: &mut Vec<Result<WholeFile>>,
    ) {
        // A path that does not normalize fails alone; the others are sent.
        let normed: Vec<Result<String>> = paths.iter().map(|p| self.norm(p)).collect();
        let sent: Vec<usize> = (0..paths.len()).filter(|&i| normed[i].is_ok()).collect();
        let calls: Vec<Call<'_>> = sent
            .iter()
            .map(|&i| {
                let p = normed[i].as_ref().expect("sent paths normalized");
                Call { daemon: self.md_daemon(p), req: Request::StatData { path: p.clone() }, bulk: Vec::new() }
            })
            .collect();
        let dests = calls.iter().map(|_| None).collect();
        let mut placer = |k: usize, r: &Response, len: usize| place(first + sent[k], inline_file(r, len)?);
        let mut answers = self.transport.send_batch_placed(calls, dests, &mut [], Some(&mut placer)).into_iter();
        for n in normed {
            out.push(n.and_then(|_| match answers.next().expect("an answer per call")? {
                (Response::RecordData { record, .. }, Bulk::Placed(len)) => Ok(WholeFile::Placed { record, len }),
                (Response::RecordData { record, .. }, Bulk::Vec(_)) => Ok(WholeFile::Other(Some(record))),
                (r, _) => Err(unexpected(r)),
            }));
        }
    }
}
