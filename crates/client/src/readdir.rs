//! Directory listings: streamed page by page from each daemon in turn, so a directory
//! of millions of entries never needs one large message or buffer; and the emptiness
//! check of rmdir and rename.
//!
//! Listings are assembled from all daemons and are eventually consistent (no
//! distributed locks; docs/SEMANTICS.md).
//!
//! Not for: recursive scans (rename.rs), FUSE or libc directory offsets (the front
//! ends keep their own positions).

use crate::error::unexpected;
use crate::rpc::Call;
use crate::{Client, Errno, Result};
use gust_proto::{DirEntry, FileKind, Request, Response, READDIR_PAGE_ENTRIES_MAX};
use std::collections::HashSet;

/// Entries requested per readdir page: as many as a daemon sends (it also stops a
/// page at READDIR_PAGE_BYTES_MAX).
const READDIR_PAGE_ENTRIES: u32 = READDIR_PAGE_ENTRIES_MAX;

impl Client {
    /// Opens a directory listing that pulls pages lazily, daemon by daemon, so a
    /// directory of millions of entries never needs one large message or buffer.
    pub(crate) fn opendir_impl(&self, path: &str) -> Result<DirStream<'_>> {
        let (p, r) = self.resolve(path)?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        let daemons = self.all_daemons();
        Ok(DirStream {
            client: self,
            dir: p,
            daemon: daemons.start,
            after: None,
            page: Vec::new(),
            done_daemon: false,
            plus: None,
            seen: self.hosts.cache_of.is_some().then(HashSet::new),
            cached: None,
        })
    }

    /// Every entry of a directory (convenience over `opendir`).
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.opendir(path)?.collect()
    }

    /// Whether any daemon holds a direct child of `dir` (one RPC per daemon, in parallel).
    pub(crate) fn dir_has_children(&self, dir: &str) -> Result<bool> {
        let mut any = false;
        let calls = self
            .all_daemons()
            .map(|d| Call { daemon: d, req: Request::HasChildren { dir: dir.to_string() }, bulk: Vec::new() })
            .collect();
        for (d, a) in self.all_daemons().zip(self.transport.batch(calls)) {
            match a {
                Ok((Response::Bool(b), _)) => any |= b,
                Ok((r, _)) => return Err(unexpected(r)),
                // A down daemon's records have copies on the others (replica.rs).
                Err(e) if self.skippable(d, e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(any)
    }
}

/// A streaming directory listing; see [`Client::opendir`] and
/// [`Client::opendir_plus`].
pub struct DirStream<'a> {
    client: &'a Client,
    dir: String,
    daemon: u32,
    after: Option<String>,
    page: Vec<DirEntry>,
    done_daemon: bool,
    /// With attributes (listing.rs): every daemon's resume point, None once done.
    plus: Option<Vec<(u32, Option<String>)>>,
    /// Cache mode (cache.rs): the names GustFS listed, then the shared file
    /// system's entries it did not.
    seen: Option<HashSet<String>>,
    cached: Option<std::vec::IntoIter<DirEntry>>,
}

impl<'a> DirStream<'a> {
    /// Turns a fresh stream into one that fetches records with the names.
    pub(crate) fn with_attributes(mut self, daemons: usize) -> DirStream<'a> {
        self.plus = Some((0..daemons as u32).map(|d| (d, None)).collect());
        self
    }

    /// Next pages with attributes, from up to LISTING_FANOUT_DAEMONS_MAX daemons
    /// at once; false when every daemon is done.
    fn refill_plus(&mut self) -> Result<bool> {
        let pending = self.plus.as_mut().expect("a listing with attributes");
        if pending.is_empty() {
            return Ok(false);
        }
        let ask: Vec<(u32, Option<String>)> =
            pending.iter().take(crate::listing::LISTING_FANOUT_DAEMONS_MAX).cloned().collect();
        let pages = self.client.listing_pages(&self.dir, &ask)?;
        let mut next = Vec::with_capacity(pending.len());
        for ((d, _), (entries, done, resume)) in ask.iter().zip(pages) {
            let last = resume.or_else(|| entries.last().map(|e| e.0.clone()));
            self.page.extend(entries.into_iter().map(|(name, r)| DirEntry { name, kind: r.kind }));
            if !(done || last.is_none()) {
                next.push((*d, last));
            }
        }
        // Daemons asked go to the back, so every daemon is asked in turn.
        let pending = self.plus.as_mut().expect("a listing with attributes");
        let rest: Vec<(u32, Option<String>)> = pending.drain(ask.len()..).collect();
        *pending = rest.into_iter().chain(next).collect();
        self.page.reverse();
        Ok(true)
    }
}

impl Iterator for DirStream<'_> {
    type Item = Result<DirEntry>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(c) = &mut self.cached {
                return c.next().map(Ok);
            }
            match self.next_in_gust() {
                Some(Ok(e)) => {
                    if let Some(seen) = &mut self.seen {
                        seen.insert(e.name.clone());
                    }
                    return Some(Ok(e));
                }
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    let seen = self.seen.take()?;
                    self.cached = Some(self.client.cached_entries(&self.dir, &seen).into_iter());
                }
            }
        }
    }
}

impl DirStream<'_> {
    /// The next entry GustFS holds.
    fn next_in_gust(&mut self) -> Option<Result<DirEntry>> {
        loop {
            if let Some(e) = self.page.pop() {
                return Some(Ok(e));
            }
            if self.plus.is_some() {
                match self.refill_plus() {
                    Ok(true) => continue,
                    Ok(false) => return None,
                    Err(e) => {
                        self.plus = Some(Vec::new());
                        return Some(Err(e));
                    }
                }
            }
            if self.done_daemon {
                self.daemon += 1;
                self.after = None;
                self.done_daemon = false;
            }
            if !self.client.all_daemons().contains(&self.daemon) {
                return None;
            }
            let req = Request::ReadDir {
                dir: self.dir.clone(),
                after: self.after.clone(),
                max_entries: READDIR_PAGE_ENTRIES,
            };
            match self.client.transport.call(self.daemon, req) {
                Ok(Response::DirPage { mut entries, done }) => {
                    self.after = entries.last().map(|e| e.name.clone());
                    self.done_daemon = done || entries.is_empty();
                    // With copies, each entry counts once (replica.rs).
                    let (client, d, dir) = (self.client, self.daemon, &self.dir);
                    entries.retain(|e| client.keeps_child(d, dir, &e.name));
                    entries.reverse();
                    self.page = entries;
                }
                Ok(r) => return Some(Err(unexpected(r))),
                Err(e) if self.client.skippable(self.daemon, e) => self.done_daemon = true,
                Err(e) => {
                    self.daemon = u32::MAX;
                    return Some(Err(e));
                }
            }
        }
    }
}
