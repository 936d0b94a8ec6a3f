//! `gust find`: a query evaluated by every daemon on its own records, in parallel.
//!
//! Each daemon scans the descendants of the starting directory that it holds (one
//! range scan of its metadata store, no directory walk and no per-entry round trip)
//! and returns the matches in pages; one thread per daemon pulls its pages, and the
//! caller consumes them as they arrive, so output starts at once and memory is
//! bounded by `PAGES_IN_FLIGHT` pages whatever the tree's size. Results come in no
//! particular order (GNU find's order is its walk's). Like a listing, the result is
//! eventually consistent with concurrent changes (docs/SEMANTICS.md).
//!
//! Not for: the starting directory itself (the caller evaluates it, with the name it
//! was given), printing.

use crate::error::unexpected;
use crate::{Client, Errno, Result};
use gust_proto::{FindQuery, Record, Request, Response, SCAN_PAGE_ENTRIES_MAX};
use std::sync::mpsc;

/// Pages buffered between the daemons' threads and the consumer, per daemon.
const PAGES_IN_FLIGHT: usize = 2;

type Page = Result<Vec<(String, Record)>>;

impl Client {
    /// The metadata record of `path` itself (a symlink is not followed), as the
    /// daemons evaluate find's predicates on it.
    pub fn lstat_record(&self, path: &str) -> Result<Record> {
        self.get_record(&crate::normalize(path)?)
    }

    /// Calls `each(path, record)` for every descendant of directory `dir` (an
    /// internal path, not followed if a symlink) that matches `query`, as pages
    /// arrive from the daemons. `dir` itself is not included. A name of a
    /// hard-linked file comes with the file's attributes (one more request each),
    /// and matches if they do: its name's record holds none of them, so the daemons
    /// pass every name of a linked file that `-name` and `-type` admit.
    pub fn find(&self, dir: &str, query: &FindQuery, mut each: impl FnMut(&str, &Record)) -> Result<()> {
        let mut failed = None;
        self.find_stored(dir, query, |p, r| {
            if failed.is_some() || p.starts_with(gust_proto::path::LINKS_DIR) {
                return;
            }
            match r.linked_to() {
                None => each(p, r),
                Some(link) => match self.get_stored_record(link) {
                    Ok(attrs) if query.matches_record(&attrs) => each(p, &attrs),
                    Ok(_) => {}
                    // Unlinked meanwhile: as a listing that missed it.
                    Err(Errno(libc::ENOENT)) => {}
                    Err(e) => failed = Some(e),
                },
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// `find` of the records as stored: names of hard-linked files as names, and
    /// below "/" also the linked files' attributes records (`gust repair` copies
    /// every record a daemon holds).
    pub fn find_stored(&self, dir: &str, query: &FindQuery, mut each: impl FnMut(&str, &Record)) -> Result<()> {
        // What this process deferred goes first: it finds its own creates and not its unlinks.
        let dir = self.norm(dir)?;
        let n = self.daemon_count() as usize;
        // With copies, who counts each record is decided once, before any page.
        let down = self.down_now();
        let down = &down;
        std::thread::scope(|scope| {
            let (tx, rx) = mpsc::sync_channel::<Page>(PAGES_IN_FLIGHT * n.max(1));
            for d in self.all_daemons().filter(|&d| !down[d as usize]) {
                let tx = tx.clone();
                let dir = dir.clone();
                scope.spawn(move || {
                    let mut after = None;
                    loop {
                        let req = Request::Find {
                            dir: dir.clone(),
                            query: query.clone(),
                            after: after.take(),
                            max_entries: SCAN_PAGE_ENTRIES_MAX,
                        };
                        let page = match self.transport.call(d, req) {
                            Ok(Response::Tree { mut records, last_key, done }) => {
                                if !done && last_key.is_none() {
                                    Err(Errno(libc::EIO)) // no progress: a daemon bug, not a loop
                                } else {
                                    after = last_key;
                                    // With copies, each record counts once (replica.rs).
                                    records.retain(|(p, _)| self.keeps_given(d, p, down));
                                    Ok((records, done))
                                }
                            }
                            Ok(r) => Err(unexpected(r)),
                            // A daemon that was serving when the listing began
                            // and is not now: the others passed over its records,
                            // so the listing fails rather than miss them.
                            Err(e) => Err(e),
                        };
                        match page {
                            Ok((records, done)) => {
                                if (!records.is_empty() && tx.send(Ok(records)).is_err()) || done {
                                    return;
                                }
                            }
                            Err(e) => {
                                let _ = tx.send(Err(e));
                                return;
                            }
                        }
                    }
                });
            }
            drop(tx);
            // On an error, dropping the receiver ends the other threads at their next page.
            for page in rx {
                for (p, r) in page? {
                    each(&p, &r);
                }
            }
            Ok(())
        })
    }
}
