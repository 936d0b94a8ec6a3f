//! Directory listings: streamed page by page from each daemon in turn, so a directory
//! of millions of entries never needs one large message or buffer; and the emptiness
//! check of rmdir and rename.
//!
//! Listings are assembled from all daemons, page by page; a name made or removed
//! while a listing runs may or may not be in it, as POSIX allows for readdir. When
//! every daemon's first page came with a grant on the directory's names
//! (`REPLY_LISTED`), the names are kept and the next listing is answered from
//! memory until a daemon recalls them (grants.rs; docs/DESIGN.md, "Grants").
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
        let mut s = DirStream {
            client: self,
            dir: p,
            daemon: daemons.start,
            after: None,
            page: Vec::new(),
            done_daemon: false,
            plus: None,
            seen: self.hosts.cache_of.is_some().then(HashSet::new),
            cached: None,
            held: None,
            listed: vec![false; daemons.len()],
            collected: Some(Vec::new()),
            ticket: None,
            installed: None,
            layout_errors: true,
        };
        if let Some(l) = self.held_listing(&s.dir) {
            // Every daemon granted these names and none changed since: no request.
            s.page = l.entries.iter().rev().cloned().collect();
            s.daemon = daemons.end;
            s.held = Some(l);
            s.collected = None;
        } else {
            // Taken before the first page: a name changed meanwhile keeps the
            // listing from being kept (grants.rs).
            s.ticket = daemons.clone().filter_map(|d| self.lookup_ticket(d)).last();
        }
        Ok(s)
    }

    /// Every entry of a directory (convenience over `opendir`).
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.rerouted_reading(|| {
            let mut s = self.opendir(path)?;
            s.layout_errors = false;
            s.collect()
        })
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
    /// Served from this listing, held under grants (no request).
    held: Option<crate::grants::Listing>,
    /// Per daemon: its first page granted the directory's names (`REPLY_LISTED`).
    listed: Vec<bool>,
    /// What the daemons sent, to keep as the listing if they all granted it;
    /// None once past the bound or when nothing is to be kept.
    collected: Option<Vec<DirEntry>>,
    ticket: Option<crate::grants::Ticket>,
    /// The id of the listing this stream kept at its end, if it did.
    installed: Option<u64>,
    /// A page refused because the layout changed (`gust expand`, `gust shrink`;
    /// layout.rs) ends the stream with EIO, saying why: the entries given so far
    /// came from the old layout's daemons, and a stream cannot go on from them
    /// under another. `read_dir` reads the whole listing again instead.
    layout_errors: bool,
}

impl<'a> DirStream<'a> {
    /// Turns a fresh stream into one that fetches records with the names; one
    /// served from a listing stays so if this process holds a grant on every
    /// entry's record too (the stats that follow need no request either).
    pub(crate) fn with_attributes(mut self, daemons: usize) -> DirStream<'a> {
        if let Some(l) = &self.held {
            let g = &self.client.transport.grants;
            if l.entries.iter().all(|e| g.get(&gust_proto::path::join(&self.dir, &e.name), false).is_some()) {
                return self;
            }
            // Fetch after all, and keep what comes.
            self.held = None;
            self.page.clear();
            self.collected = Some(Vec::new());
            self.ticket = self.client.all_daemons().filter_map(|d| self.client.lookup_ticket(d)).last();
        }
        self.plus = Some((0..daemons as u32).map(|d| (d, None)).collect());
        self
    }

    /// The id of the listing this stream served from or kept at its end
    /// (`Client::listing_held`), if any.
    pub fn listing_id(&self) -> Option<u64> {
        self.held.as_ref().map(|l| l.id).or(self.installed)
    }

    fn collect(&mut self, entries: &[DirEntry]) {
        if let Some(c) = &mut self.collected {
            if c.len() + entries.len() > crate::grants::LISTING_ENTRIES_MAX {
                self.collected = None;
            } else {
                c.extend_from_slice(entries);
            }
        }
    }

    /// Every daemon is done: keep the listing if each granted its names.
    fn finished(&mut self) {
        let (Some(t), Some(entries)) = (self.ticket.take(), self.collected.take()) else { return };
        if self.listed.iter().all(|&l| l) {
            self.installed = self.client.transport.grants.install_listing(t, &self.dir, entries);
        }
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
        for ((d, after), (entries, done, resume, listed)) in ask.iter().zip(pages) {
            let last = resume.or_else(|| entries.last().map(|e| e.0.clone()));
            if after.is_none() {
                if let Some(l) = self.listed.get_mut(*d as usize) {
                    *l = listed;
                }
            }
            let page: Vec<DirEntry> = entries.into_iter().map(|(name, r)| DirEntry { name, kind: r.kind }).collect();
            self.collect(&page);
            self.page.extend(page);
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
                Some(Err(Errno(gust_proto::errno::MOVED))) if self.layout_errors => {
                    let _ = self.client.refresh_layout();
                    *self.client.transport.last_error_slot() = Some(
                        "the listing was cut by a change of the instance's layout (gust expand or shrink); list again"
                            .into(),
                    );
                    return Some(Err(Errno(libc::EIO)));
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
                    Ok(false) => {
                        self.finished();
                        return None;
                    }
                    Err(e) => {
                        self.plus = Some(Vec::new());
                        self.collected = None;
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
                self.finished();
                return None;
            }
            let first = self.after.is_none();
            let req = Request::ReadDir {
                dir: self.dir.clone(),
                after: self.after.clone(),
                max_entries: READDIR_PAGE_ENTRIES,
            };
            match self.client.transport.call(self.daemon, req) {
                Ok(Response::DirPage { mut entries, done }) => {
                    if first {
                        if let Some(l) = self.listed.get_mut(self.daemon as usize) {
                            *l = crate::grants::last_listed();
                        }
                    }
                    self.after = entries.last().map(|e| e.name.clone());
                    self.done_daemon = done || entries.is_empty();
                    // With copies, each entry counts once (replica.rs).
                    let (client, d, dir) = (self.client, self.daemon, &self.dir);
                    entries.retain(|e| client.keeps_child(d, dir, &e.name));
                    self.collect(&entries);
                    entries.reverse();
                    self.page = entries;
                }
                Ok(r) => return Some(Err(unexpected(r))),
                Err(e) if self.client.skippable(self.daemon, e) => {
                    // Its names are not all here: nothing is kept.
                    self.collected = None;
                    self.done_daemon = true
                }
                Err(e) => {
                    self.collected = None;
                    self.daemon = u32::MAX;
                    return Some(Err(e));
                }
            }
        }
    }
}
