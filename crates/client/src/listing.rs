//! Listings with attributes: `readdir_plus` pages (each entry with its record), asked
//! of the daemons in parallel, and a short-lived cache that serves the stat calls
//! that follow a listing (`ls -l`, `find -size`, `os.scandir` + stat) from what it
//! returned instead of one request per entry.
//!
//! The cache holds what this client's listings returned for at most
//! [`LISTING_ATTRS_TTL`], and forgets everything when this client changes anything
//! (write, truncate, create, remove, rename, chmod, utimens). Changes by other clients
//! within that time are not seen by a stat of this one (docs/SEMANTICS.md). Bounded
//! at [`LISTING_ATTRS_ENTRIES_MAX`] entries, about 200 bytes each; when full, the
//! directories listed first make room, whole (a walk has stat'ed them by then).
//!
//! Not for: listings without attributes (readdir.rs), open descriptors (fstat always
//! asks the daemon).

use crate::error::unexpected;
use crate::readdir::DirStream;
use crate::{Client, Result};
use gust_proto::{path, DirEntry, Record, Request, Response};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long after its directory's last listed page an entry's attributes answer a
/// stat: long enough for `ls -l` of a few hundred thousand entries to stat them all
/// after reading the listing, short next to how long a job's files change under a
/// listing of them.
pub const LISTING_ATTRS_TTL: Duration = Duration::from_secs(2);
/// Bound on the cached entries (about 50 MiB at the bound for 60-byte paths).
pub const LISTING_ATTRS_ENTRIES_MAX: usize = 262_144;
/// Daemons asked for a page at once by one listing: the memory one refill takes is
/// at most this many pages.
pub(crate) const LISTING_FANOUT_DAEMONS_MAX: usize = 16;

/// The cache's maps: one lookup per stat that follows a listing (`ls -l` of
/// 100,000 entries makes 100,000), and one insert per entry listed. std's SipHash
/// was 6% of such an `ls -l` under the preload library (docs/PERFORMANCE.md, issue
/// 14's third round); aHash is several times faster on short keys.
type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<ahash::AHasher>>;

/// One daemon's page of a listing with attributes, and whether that daemon is done.
/// A daemon's page: its entries, whether it is done, and where to resume when that
/// is not its last entry (entries another daemon's copy counts for are left out).
/// A daemon's page: entries, whether the daemon is done, where to resume, and
/// whether it granted the directory's names (`REPLY_LISTED`, first pages only).
pub(crate) type ListingPage = (Vec<(String, Record)>, bool, Option<String>, bool);

#[derive(Default)]
pub(crate) struct ListingAttrs {
    /// Bumped by every change this client makes, once the cache was ever filled.
    generation: AtomicU64,
    filled: AtomicBool,
    map: Mutex<AttrMap>,
}

#[derive(Default)]
struct AttrMap {
    generation: u64,
    /// Listed directories by path: when their latest page came (an entry answers
    /// stats until LISTING_ATTRS_TTL after its directory's last page, so the first
    /// entries of a long listing do not expire before the listing ends) and their
    /// entries by name.
    dirs: FastMap<String, DirAttrs>,
    /// Directories in the order they were first listed: when the cache is full, the
    /// oldest directory's entries make room (a tree walk has stat'ed them by then).
    order: VecDeque<String>,
    /// Entries over all directories, each directory counting as one more (so that
    /// empty directories are bounded too).
    entries: usize,
}

struct DirAttrs {
    listed: Instant,
    entries: FastMap<String, Record>,
}

impl ListingAttrs {
    /// This client changed something: what listings returned may be stale.
    pub(crate) fn invalidate(&self) {
        if self.filled.load(Ordering::Relaxed) {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Keeps a page of `dir` fetched when the generation was `asked_at`.
    pub(crate) fn insert(&self, asked_at: u64, dir: &str, entries: &[(String, Record)]) {
        let now = Instant::now();
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let g = self.generation();
        if g != asked_at {
            return; // this client changed something while the page was on its way
        }
        if m.generation != g {
            *m = AttrMap { generation: g, ..Default::default() };
        }
        // Room: whole directories go, oldest first, never the one being listed (a
        // directory larger than the bound keeps what fits).
        while m.entries + entries.len() + 1 > LISTING_ATTRS_ENTRIES_MAX {
            let Some(oldest) = m.order.front().filter(|d| d.as_str() != dir).cloned() else { break };
            m.order.pop_front();
            if let Some(gone) = m.dirs.remove(&oldest) {
                m.entries -= gone.entries.len() + 1;
            }
        }
        let room = LISTING_ATTRS_ENTRIES_MAX.saturating_sub(m.entries + 1);
        let AttrMap { dirs, order, entries: count, .. } = &mut *m;
        let d = dirs.entry(dir.to_string()).or_insert_with(|| {
            order.push_back(dir.to_string());
            *count += 1;
            DirAttrs { listed: now, entries: FastMap::default() }
        });
        d.listed = now;
        d.entries.reserve(entries.len().min(room));
        for (name, r) in entries.iter().take(room) {
            if d.entries.insert(name.clone(), r.clone()).is_none() {
                *count += 1;
            }
        }
        self.filled.store(true, Ordering::Relaxed);
    }

    /// The record a listing returned for `p`, if recent and nothing changed since.
    pub(crate) fn get(&self, p: &str) -> Option<Record> {
        if !self.filled.load(Ordering::Relaxed) {
            return None;
        }
        let m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if m.generation != self.generation() {
            return None;
        }
        let parent = path::parent(p);
        let d = m.dirs.get(parent)?;
        if d.listed.elapsed() >= LISTING_ATTRS_TTL {
            return None;
        }
        let name = p.get(parent.len()..)?.trim_start_matches('/');
        d.entries.get(name).cloned()
    }
}

impl Client {
    /// Opens a listing that fetches each entry's attributes with it: one request per
    /// daemon per page, up to `LISTING_FANOUT_DAEMONS_MAX` daemons at once; the stat
    /// calls of this client on the listed entries are then answered from them for a
    /// short while (see the module doc).
    pub fn opendir_plus(&self, path: &str) -> Result<DirStream<'_>> {
        let s = self.opendir(path)?;
        Ok(s.with_attributes(self.daemon_count() as usize))
    }

    /// Every entry of a directory with its attributes (convenience over
    /// `opendir_plus`; the stats come from the cache the listing filled).
    pub fn read_dir_plus(&self, path: &str) -> Result<Vec<(DirEntry, crate::Stat)>> {
        let dir = crate::normalize(path)?;
        let mut out = Vec::new();
        for e in self.opendir_plus(&dir)? {
            let e = e?;
            let p = path::join(&dir, &e.name);
            let st = match self.listing.get(&p) {
                Some(r) => crate::Stat::from_record(&r, self.chunk_size),
                None => self.lstat(&p)?,
            };
            out.push((e, st));
        }
        Ok(out)
    }

    /// Asks `daemons` (with their resume points) for the next page of `dir` with
    /// records, all at once; keeps the records in the cache. Returns, per daemon, the
    /// entries and whether that daemon is done.
    pub(crate) fn listing_pages(&self, dir: &str, daemons: &[(u32, Option<String>)]) -> Result<Vec<ListingPage>> {
        let asked_at = self.listing.generation();
        // A page may come granted (every record on it): kept as lookups' are.
        let tickets: Vec<_> = daemons.iter().map(|(d, _)| self.lookup_ticket(*d)).collect();
        let calls = daemons
            .iter()
            .map(|(d, after)| crate::rpc::Call {
                daemon: *d,
                req: Request::ReadDirPlus {
                    dir: dir.to_string(),
                    after: after.clone(),
                    max_entries: gust_proto::READDIR_PAGE_ENTRIES_MAX,
                },
                bulk: Vec::new(),
            })
            .collect();
        let mut out = Vec::with_capacity(daemons.len());
        let answers = self.transport.batch(calls);
        let flags: Vec<u16> = (0..answers.len()).map(crate::grants::batch_flags).collect();
        let granted: Vec<bool> = flags.iter().map(|f| f & gust_proto::frame::REPLY_GRANTED != 0).collect();
        for (i, ((d, _), a)) in daemons.iter().zip(answers).enumerate() {
            match a {
                Ok((Response::DirPagePlus { mut entries, done }, _)) => {
                    if granted[i] {
                        self.listing_granted(tickets[i], *d, dir, &entries);
                    }
                    let last = entries.last().cloned();
                    // With copies, each entry counts once (replica.rs); the last one
                    // stays the daemon's resume point even when another copy counts.
                    entries.retain(|(name, _)| self.keeps_child(*d, dir, name));
                    // Names of hard-linked files carry their attributes from elsewhere
                    // (links.rs): one more request each, for those only.
                    for (_, r) in entries.iter_mut() {
                        if let Some(link) = r.linked_to() {
                            *r = self.get_stored_record(link)?;
                        }
                    }
                    self.listing.insert(asked_at, dir, &entries);
                    let listed = flags[i] & gust_proto::frame::REPLY_LISTED != 0;
                    match last {
                        Some(l) if entries.last() != Some(&l) && !done => {
                            out.push((entries, false, Some(l.0), listed));
                        }
                        _ => out.push((entries, done, None, listed)),
                    }
                }
                Ok((r, _)) => return Err(unexpected(r)),
                // A down daemon's records have copies on the others.
                Err(e) if self.skippable(*d, e) => out.push((Vec::new(), true, None, false)),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gust_proto::FileKind;

    fn rec(size: u64) -> Record {
        Record {
            kind: FileKind::File,
            mode: 0o644,
            size,
            file_id: 1,
            nlink: 1,
            ctime_ns: 0,
            mtime_ns: 0,
            atime_ns: 0,
            target: String::new(),
            uid: 0,
            gid: 0,
            xattrs: Vec::new(),
        }
    }

    /// A walk of more entries than the bound (find over a large tree): each new
    /// directory's entries are served, making room by forgetting the directories
    /// listed first, and the count stays within the bound.
    #[test]
    fn a_walk_past_the_bound_keeps_the_latest_directories() {
        let a = ListingAttrs::default();
        let per_dir = 1000;
        let dirs = LISTING_ATTRS_ENTRIES_MAX / per_dir + 40;
        for d in 0..dirs {
            let page: Vec<(String, Record)> = (0..per_dir).map(|i| (format!("f{i}"), rec(i as u64))).collect();
            a.insert(0, &format!("/t/d{d}"), &page);
            assert_eq!(a.get(&format!("/t/d{d}/f7")).map(|r| r.size), Some(7), "directory {d} just listed");
            assert!(a.map.lock().unwrap_or_else(|e| e.into_inner()).entries <= LISTING_ATTRS_ENTRIES_MAX);
        }
        assert!(a.get("/t/d0/f7").is_none(), "the first directory made room");
        assert!(a.get(&format!("/t/d{}/f999", dirs - 2)).is_some());
        assert!(a.get("/t/d5/nothing").is_none() && a.get("/").is_none() && a.get("/t").is_none());
    }

    /// A change by this client, or a page asked for before it, leaves nothing to serve.
    #[test]
    fn a_change_forgets_and_a_page_from_before_it_is_dropped() {
        let a = ListingAttrs::default();
        a.insert(0, "/", &[("x".to_string(), rec(3))]);
        assert_eq!(a.get("/x").map(|r| r.size), Some(3));
        a.invalidate();
        assert!(a.get("/x").is_none());
        a.insert(0, "/", &[("y".to_string(), rec(4))]);
        assert!(a.get("/y").is_none(), "asked before the change");
        a.insert(a.generation(), "/", &[("y".to_string(), rec(4))]);
        assert_eq!(a.get("/y").map(|r| r.size), Some(4));
    }
}
