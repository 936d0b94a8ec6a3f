//! A view's directory as its maintainer changes it, whatever the source: paths
//! below it, the directories known to exist (made parents first, removed when an
//! entry leaves them empty or no entry needs them), and one `find` of what it
//! holds.
//!
//! Not for: what the entries are (sync.rs: placeholders of objects; links.rs: hard
//! links to GustFS files).

use gust_client::{Client, Errno, Kind, Record};
use gust_proto::FindQuery;
use std::collections::{BTreeSet, HashMap};

pub(crate) fn errno_text(what: &str, e: Errno) -> String {
    format!("{what}: {}", std::io::Error::from_raw_os_error(e.0))
}

/// The record of `p`, or None if there is nothing there.
pub(crate) fn lookup(c: &Client, p: &str) -> Result<Option<Record>, String> {
    match c.lstat_record(p) {
        Ok(r) => Ok(Some(r)),
        Err(Errno(libc::ENOENT)) | Err(Errno(libc::ENOTDIR)) => Ok(None),
        Err(e) => Err(errno_text(p, e)),
    }
}

pub(crate) struct Tree {
    /// The view's directory ("" for the root "/").
    dir: String,
    /// Directories known to exist (paths below `dir`, "" for `dir`).
    dirs: BTreeSet<String>,
    /// Where each source item's entry is: the item (an object's key below the
    /// prefix, a file's path below the source) → its path below the directory
    /// (they differ under a layout). Made by a resync, kept by events.
    placed: HashMap<String, String>,
}

impl Tree {
    pub(crate) fn new(dir: &str) -> Tree {
        let dir = if dir == "/" { String::new() } else { dir.trim_end_matches('/').to_string() };
        Tree { dir, dirs: BTreeSet::new(), placed: HashMap::new() }
    }

    /// Forgets every item's place (a resync places them again).
    pub(crate) fn forget_places(&mut self) {
        self.placed.clear();
    }

    /// Notes that `item`'s entry is at `rel`.
    pub(crate) fn place(&mut self, item: &str, rel: &str) {
        self.placed.insert(item.to_string(), rel.to_string());
    }

    /// The first step of one item's change: its entry leaves where it was unless
    /// it is wanted there still (`now`: where it belongs now, None if it goes).
    /// Returns whether the item had an entry.
    pub(crate) fn leave_old_place(&mut self, c: &Client, item: &str, now: Option<&str>) -> Result<bool, String> {
        let Some(old) = self.placed.get(item).cloned() else { return Ok(false) };
        if now != Some(old.as_str()) {
            self.remove(c, &old)?;
            self.placed.remove(item);
        }
        Ok(true)
    }

    /// The last step: the item's entry is at `rel` if `there`, else nowhere.
    /// Returns the change of the entry count, given whether it `had` one.
    pub(crate) fn settle(&mut self, item: &str, rel: &str, there: bool, had: bool) -> i64 {
        if there {
            self.place(item, rel);
        } else {
            self.placed.remove(item);
        }
        i64::from(there) - i64::from(had)
    }

    /// The path of `rel` below the directory.
    pub(crate) fn path_of(&self, rel: &str) -> String {
        match (self.dir.is_empty(), rel.is_empty()) {
            (true, true) => "/".to_string(),
            (false, true) => self.dir.clone(),
            _ => format!("{}/{rel}", self.dir),
        }
    }

    /// Every entry below the directory, by relative path, as `find` gives it (a
    /// hard-linked file's attributes); the directories among them become known.
    pub(crate) fn load(&mut self, c: &Client) -> Result<HashMap<String, Record>, String> {
        let root = self.path_of("");
        let base = format!("{}/", self.dir);
        let mut have = HashMap::new();
        c.find(&root, &FindQuery::default(), |p, r| {
            if let Some(rel) = p.strip_prefix(&base) {
                have.insert(rel.to_string(), r.clone());
            }
        })
        .map_err(|e| errno_text(&root, e))?;
        self.dirs = have.iter().filter(|(_, r)| r.kind == Kind::Dir).map(|(p, _)| p.clone()).collect();
        self.dirs.insert(String::new());
        Ok(have)
    }

    /// Makes the directories of `rel` not known to exist, parents first.
    pub(crate) fn make_parents(&mut self, c: &Client, rel: &str) -> Result<(), String> {
        let mut upto = 0;
        while let Some(i) = rel[upto..].find('/') {
            let d = &rel[..upto + i];
            if !self.dirs.contains(d) {
                match c.mkdir(&self.path_of(d), 0o755) {
                    Ok(()) | Err(Errno(libc::EEXIST)) => {}
                    Err(e) => return Err(errno_text(&self.path_of(d), e)),
                }
                self.dirs.insert(d.to_string());
            }
            upto += i + 1;
        }
        Ok(())
    }

    /// Takes entry `rel` away (false if it was not there), and the directories it
    /// leaves empty.
    pub(crate) fn remove(&mut self, c: &Client, rel: &str) -> Result<bool, String> {
        let gone = match c.unlink(&self.path_of(rel)) {
            Ok(()) => true,
            Err(Errno(libc::ENOENT)) => false,
            Err(e) => return Err(errno_text(&self.path_of(rel), e)),
        };
        let mut d = rel;
        while let Some(i) = d.rfind('/') {
            d = &d[..i];
            if c.rmdir(&self.path_of(d)).is_err() {
                break;
            }
            self.dirs.remove(d);
        }
        Ok(gone)
    }

    /// Removes the directories no entry of `wanted` lies in, deepest first.
    pub(crate) fn prune<'w>(&mut self, c: &Client, wanted: impl Iterator<Item = &'w String>) {
        let mut used: BTreeSet<&str> = BTreeSet::new();
        for rel in wanted {
            let mut d = rel.as_str();
            while let Some(i) = d.rfind('/') {
                d = &d[..i];
                if !used.insert(d) {
                    break;
                }
            }
        }
        let mut unused: Vec<String> =
            self.dirs.iter().filter(|d| !d.is_empty() && !used.contains(d.as_str())).cloned().collect();
        unused.sort_by_key(|d| std::cmp::Reverse(d.matches('/').count()));
        for d in unused {
            if c.rmdir(&self.path_of(&d)).is_ok() {
                self.dirs.remove(&d);
            }
        }
    }
}
