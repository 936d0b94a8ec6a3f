//! A view's entries against its store: a full resync (the store's listing against
//! the view's records, in one `find` fan-out) and the change of one object (an
//! event). Both only ever make the view's records say what the store says: a
//! placeholder per matching object (its `s3://BUCKET/KEY#ETAG`, size and time), a
//! directory per key prefix in use. An entry whose object has the ETag it was made
//! or fetched from (`user.s3.etag`) is left alone, fetched or not.
//!
//! Not for: fetching (gust-client's objects.rs), when to resync (follow.rs).

use crate::tree::{errno_text, lookup, Tree};
use crate::{entry_of, matches, Definition};
use gust_client::{placeholder_target, split_placeholder_target, Client, Errno, Kind, Record};
use gust_objstore::{Object, Store};
use gust_proto::stage::{StageEntry, STAGE_BATCH_BYTES_MAX, STAGE_BATCH_ENTRIES_MAX, STAGE_ENTRY_OVERHEAD_BYTES};
use gust_proto::FindQuery;
use std::collections::{BTreeMap, HashMap};

/// What a resync found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries the view has now.
    pub objects: u64,
    /// Objects whose key cannot be a path, or that a directory of the view hides
    /// (keys `a` and `a/b`).
    pub skipped: u64,
    /// Entries made or remade, and taken away.
    pub made: u64,
    pub removed: u64,
}

/// One view's entries, as its maintainer changes them.
pub struct View<'a> {
    c: &'a Client,
    def: Definition,
    bucket: String,
    prefix: String,
    tree: Tree,
}

/// The ETag an entry was made (a placeholder) or fetched (`user.s3.etag`) from.
fn etag_of(r: &Record) -> Option<String> {
    if let Some(t) = r.unfetched_object() {
        return Some(split_placeholder_target(t).1.to_string());
    }
    let e = gust_proto::xattr::get(&r.xattrs, gust_client::ETAG_XATTR).ok()?;
    Some(String::from_utf8_lossy(e).into_owned())
}

impl<'a> View<'a> {
    pub fn new(c: &'a Client, def: &Definition) -> Result<View<'a>, String> {
        let (bucket, prefix) = def.object_source()?;
        Ok(View { c, def: def.clone(), bucket, prefix, tree: Tree::new(&def.dir()) })
    }

    /// The objects of `source` (`s3://BUCKET/PREFIX`) under GustFS directory `dir`
    /// ("/" for cache mode of a store), all of them.
    pub fn at(c: &'a Client, dir: &str, source: &str) -> Result<View<'a>, String> {
        let def = Definition {
            name: String::new(),
            source: source.to_string(),
            expression: Vec::new(),
            query: FindQuery::default(),
            events: None,
            resync_secs: 0,
        };
        let (bucket, prefix) = def.object_source()?;
        Ok(View { c, def, bucket, prefix, tree: Tree::new(dir) })
    }

    /// The bucket and key prefix the view shows.
    pub fn source(&self) -> (&str, &str) {
        (&self.bucket, &self.prefix)
    }

    /// The placeholder of object `o`.
    fn placeholder(&self, o: &Object) -> Record {
        let target = placeholder_target(&self.bucket, &o.key, &o.etag);
        Client::staged_record(Kind::File, 0o444, o.size, o.mtime_ns, o.mtime_ns, target)
    }

    /// Makes or remakes the placeholders `todo` (path below the view, object), in
    /// batches per metadata daemon; what a remade entry held is freed. Returns the
    /// entries made and those a directory hides.
    fn make(&mut self, todo: Vec<(String, &Object)>, replace: bool) -> Result<(u64, u64), String> {
        for (rel, _) in &todo {
            self.tree.make_parents(self.c, rel)?;
        }
        let mut per: HashMap<u32, Vec<Vec<StageEntry>>> = HashMap::new();
        let mut bytes: HashMap<u32, usize> = HashMap::new();
        for (rel, o) in &todo {
            let path = self.tree.path_of(rel);
            let record = self.placeholder(o);
            let counted = STAGE_ENTRY_OVERHEAD_BYTES + path.len() + record.target.len();
            let d = self.c.metadata_daemon(&path);
            let batches = per.entry(d).or_default();
            let b = bytes.entry(d).or_default();
            if batches.last().is_none_or(|l| l.len() == STAGE_BATCH_ENTRIES_MAX || *b + counted > STAGE_BATCH_BYTES_MAX)
            {
                batches.push(Vec::new());
                *b = 0;
            }
            *b += counted;
            batches.last_mut().expect("a batch").push(StageEntry { path, record, source: None, replace });
        }
        let (mut made, mut hidden) = (0, 0);
        for (d, batches) in per {
            for batch in batches {
                let paths: Vec<String> = batch.iter().map(|e| e.path.clone()).collect();
                let outcomes = self.c.stage_create(d, batch).map_err(|e| errno_text(&format!("daemon {d}"), e))?;
                for (out, path) in outcomes.into_iter().zip(paths) {
                    match out.errno {
                        0 => made += 1,
                        // A key that is also a prefix of others: the directory wins.
                        // (Cache mode of a store: a file GustFS holds wins too.)
                        libc::EISDIR => hidden += 1,
                        libc::EEXIST if !replace => hidden += 1,
                        // A file where a key's directory would be.
                        libc::ENOTDIR => hidden += 1,
                        e => return Err(errno_text(&path, Errno(e))),
                    }
                    if let Some(old) = out.replaced.filter(|o| o.kind == Kind::File && o.unfetched_object().is_none()) {
                        let _ = self.c.remove_file_chunks(&old);
                    }
                }
            }
        }
        Ok((made, hidden))
    }

    /// Makes the view say what the store's listing says.
    pub fn resync(&mut self, store: &Store) -> Result<Counts, String> {
        let listing = store.list(&self.prefix).map_err(|e| format!("s3://{}/{}: {e}", self.bucket, self.prefix))?;
        let mut counts = Counts::default();
        let mut want: BTreeMap<String, &Object> = BTreeMap::new();
        for o in &listing {
            match entry_of(&self.prefix, &o.key) {
                Some(rel) => {
                    if matches(&self.def.query, &self.tree.path_of(&rel), o.size, o.mtime_ns) {
                        want.insert(rel, o);
                    }
                }
                None if o.key.ends_with('/') => {} // a directory marker
                None => counts.skipped += 1,
            }
        }
        // What the view holds now.
        let have: HashMap<String, (Kind, Option<String>)> =
            self.tree.load(self.c)?.into_iter().map(|(rel, r)| (rel, (r.kind, etag_of(&r)))).collect();
        let stale: Vec<String> = have
            .iter()
            .filter(|(rel, (k, _))| match k {
                Kind::Dir => false,
                Kind::File => !want.contains_key(rel.as_str()),
                _ => true,
            })
            .map(|(rel, _)| rel.clone())
            .collect();
        for rel in &stale {
            if self.tree.remove(self.c, rel)? {
                counts.removed += 1;
            }
        }
        self.tree.prune(self.c, want.keys());
        let todo: Vec<(String, &Object)> = want
            .iter()
            .filter(|(rel, o)| match have.get(rel.as_str()) {
                Some((Kind::File, Some(etag))) => *etag != o.etag,
                _ => true,
            })
            .map(|(rel, o)| (rel.clone(), *o))
            .collect();
        let (made, hidden) = self.make(todo, true)?;
        counts.made = made;
        counts.skipped += hidden;
        counts.objects = want.len() as u64 - hidden;
        Ok(counts)
    }

    /// Cache mode of a store: a placeholder for every object whose path GustFS does
    /// not hold; nothing is removed or replaced (the job's files win).
    pub fn fill(&mut self, store: &Store) -> Result<Counts, String> {
        let listing = store.list(&self.prefix).map_err(|e| format!("s3://{}/{}: {e}", self.bucket, self.prefix))?;
        let mut counts = Counts::default();
        let have = self.tree.load(self.c)?;
        let mut todo = Vec::new();
        for o in &listing {
            match entry_of(&self.prefix, &o.key) {
                Some(rel) if have.contains_key(&rel) => counts.skipped += 1,
                Some(rel) => todo.push((rel, o)),
                None if o.key.ends_with('/') => {}
                None => counts.skipped += 1,
            }
        }
        let (made, hidden) = self.make(todo, false)?;
        counts.made = made;
        counts.objects = made;
        counts.skipped += hidden;
        Ok(counts)
    }

    /// Applies one object's change: `Some` (made or changed) or `None` (gone).
    /// Returns the change of the view's entry count (-1, 0 or 1).
    pub fn apply(&mut self, key: &str, object: Option<&Object>) -> Result<i64, String> {
        let Some(rel) = entry_of(&self.prefix, key) else { return Ok(0) };
        let path = self.tree.path_of(&rel);
        let had = lookup(self.c, &path)?;
        let had_file = had.as_ref().is_some_and(|r| r.kind == Kind::File);
        match object {
            Some(o) if matches(&self.def.query, &path, o.size, o.mtime_ns) => {
                if had.as_ref().is_some_and(|r| r.kind == Kind::File && etag_of(r).as_deref() == Some(&o.etag)) {
                    return Ok(0);
                }
                let (made, _) = self.make(vec![(rel, o)], true)?;
                Ok(if made == 1 && !had_file { 1 } else { 0 })
            }
            _ if had_file => Ok(if self.tree.remove(self.c, &rel)? { -1 } else { 0 }),
            _ => Ok(0),
        }
    }
}
