//! Whole files by the batch: what a data loader asks for when it fetches the
//! samples of a batch (PyTorch's `__getitems__`, fsspec's `cat` of a list).
//!
//! [`Client::read_many_into`] sends one `read_many` request per metadata daemon
//! for the files of a batch it holds (at most `READ_MANY_ENTRIES_MAX` each), all
//! before it reads any reply: the daemons work on the batch in parallel, and each
//! serves its share with one wake-up, one receive and one vectored send. The inline
//! data of each file goes from the socket straight into the buffer the caller makes
//! for it once its record says the size, as for `read_whole_into`.
//!
//! Per file, the answer is what `read_whole_into` gives for that file alone: the
//! data of an inline file, else the record for an ordinary open. Files are
//! independent: one missing file fails only its own entry; a daemon that fails
//! fails the files asked of it.
//!
//! Not for: reading one file (inline.rs), chunk I/O (io/).

use crate::error::{unexpected, Errno};
use crate::inline::{holds_inline, WholeFile};
use crate::rpc::{read_placed, Bulk, Call};
use crate::{Client, Result};
use gust_proto::{Record, Request, Response, WholeFile as Entry, READ_MANY_ENTRIES_MAX};
use std::collections::BTreeMap;
use std::io::{self, Read};

/// Files of a batch whose requests are in flight at once: bounds the replies
/// daemons hold for us (their inline data, at most 256 KiB a file).
pub const READ_MANY_IN_FLIGHT: usize = 256;

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
        // A view's placeholder has no data yet: the ordinary path fetches it.
        let mut place = |i: usize, r: &Record| if r.unfetched_object().is_some() { None } else { place(i, r) };
        for (group, first) in paths.chunks(READ_MANY_IN_FLIGHT).zip((0..).step_by(READ_MANY_IN_FLIGHT)) {
            self.read_group(group, first, &mut place, &mut out);
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
        // A path that does not normalize fails alone; the others are sent, in
        // requests of the files each daemon holds.
        let mut found: Vec<Option<Result<WholeFile>>> = Vec::with_capacity(paths.len());
        let mut by_daemon: BTreeMap<u32, Vec<(usize, String)>> = BTreeMap::new();
        for (i, p) in paths.iter().enumerate() {
            match self.norm(p) {
                Ok(p) => {
                    // Held under a grant (this process's or the node cache's): no
                    // request for it.
                    if let Some(held) = self.held_whole(&p, &mut |r| place(first + i, r)) {
                        found.push(Some(Ok(held)));
                        continue;
                    }
                    self.node_missed(&p, u64::MAX);
                    by_daemon.entry(self.md_daemon(&p)).or_default().push((i, p));
                    found.push(None);
                }
                Err(e) => found.push(Some(Err(e))),
            }
        }
        let mut members: Vec<Vec<usize>> = Vec::new();
        let mut calls: Vec<Call<'_>> = Vec::new();
        for (daemon, files) in by_daemon {
            for part in files.chunks(READ_MANY_ENTRIES_MAX) {
                members.push(part.iter().map(|(i, _)| *i).collect());
                let paths = part.iter().map(|(_, p)| p.clone()).collect();
                calls.push(Call { daemon, req: Request::ReadMany { paths }, bulk: Vec::new() });
            }
        }
        let dests = calls.iter().map(|_| None).collect();
        let mut placer = |k: usize, r: &Response, from: &mut dyn Read, len: usize| -> io::Result<bool> {
            let Response::Files(files) = r else { return Ok(false) };
            place_files(&members[k], files, from, len, &mut |i, rec| place(first + i, rec), &mut found)
        };
        let answers = self.transport.send_batch_placed(calls, dests, &mut [], Some(&mut placer));
        for (k, answer) in answers.into_iter().enumerate() {
            let files = match answer {
                Ok((Response::Files(files), Bulk::Placed(_))) => files,
                failed => {
                    let e = match failed {
                        Ok((r, _)) => unexpected(r),
                        Err(e) => e,
                    };
                    members[k].iter().for_each(|&i| found[i] = Some(Err(e)));
                    continue;
                }
            };
            for (&i, f) in members[k].iter().zip(files) {
                // What the placer placed is in already; the rest is decided here.
                found[i].get_or_insert(match f {
                    Entry::Found { record, .. } if record.unfetched_object().is_some() => Ok(WholeFile::Other(None)),
                    Entry::Found { record, .. } => Ok(WholeFile::Other(Some(record))),
                    Entry::Failed(e) => Err(Errno(e)),
                });
            }
        }
        out.extend(found.into_iter().map(|f| f.expect("every file answered")));
    }
}

/// Reads the inline data of a `read_many` reply's `files` (asked for the files
/// `members` of a group, in order) from `from`, `len` bytes in all, each file's
/// into the buffer `place` gives for it; a file `place` declines is read past and
/// opened the ordinary way. Checks the reply's layout before reading any of it.
fn place_files<'p>(
    members: &[usize],
    files: &[Entry],
    from: &mut dyn Read,
    len: usize,
    place: &mut dyn FnMut(usize, &Record) -> Option<&'p mut [u8]>,
    found: &mut [Option<Result<WholeFile>>],
) -> io::Result<bool> {
    let lens = files.iter().map(|f| match f {
        Entry::Found { inline_len: Some(n), .. } => *n as u64,
        _ => 0,
    });
    let fits = files.len() == members.len()
        && lens.sum::<u64>() == len as u64
        && files.iter().all(|f| match f {
            Entry::Found { record, inline_len: Some(n) } => holds_inline(record, *n as usize),
            _ => true,
        });
    if !fits {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "read_many reply does not match its request"));
    }
    for (&i, f) in members.iter().zip(files) {
        let Entry::Found { record, inline_len: Some(n) } = f else { continue };
        let n = *n as usize;
        match place(i, record) {
            Some(to) => {
                read_placed(from, to, n)?;
                found[i] = Some(Ok(WholeFile::Placed { record: record.clone(), len: n }));
            }
            None => {
                io::copy(&mut from.take(n as u64), &mut io::sink())?;
            }
        }
    }
    Ok(true)
}
