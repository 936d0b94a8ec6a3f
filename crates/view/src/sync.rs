//! A view's entries against its store: a full resync (the store's listing against
//! the view's records, in one `find` fan-out) and the change of one object (an
//! event). Both only ever make the view's records say what the store says: a
//! placeholder per matching object (its `s3://BUCKET/KEY#ETAG`, size and time), a
//! directory per key prefix in use. An entry whose object has the ETag it was made
//! or fetched from (`user.s3.etag`) is left alone, fetched or not.
//!
//! Not for: fetching (gust-client's objects.rs), when to resync (follow.rs).

use crate::layout::{self, Level};
use crate::tree::{errno_text, lookup, Tree};
use crate::{entry_of, matches, Definition};
use gust_client::{placeholder_target, split_placeholder_target, xattrs_of, Client, Errno, Kind, Record};
use gust_objstore::{Object, Properties, Store};
use gust_proto::stage::{StageEntry, STAGE_BATCH_BYTES_MAX, STAGE_BATCH_ENTRIES_MAX, STAGE_ENTRY_OVERHEAD_BYTES};
use gust_proto::xattr::Xattrs;
use gust_proto::FindQuery;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Properties requests in flight during a resync of a view that needs them.
const PROPERTY_THREADS: usize = 16;

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
    levels: Vec<Level>,
    /// Entries carry their objects' properties (`user.s3.meta.*`, `user.s3.tag.*`):
    /// the layout or the predicates look at them.
    with_properties: bool,
}

/// The ETag an entry was made (a placeholder) or fetched (`user.s3.etag`) from.
fn etag_of(r: &Record) -> Option<String> {
    if let Some(t) = r.unfetched_object() {
        return Some(split_placeholder_target(t).1.to_string());
    }
    let e = gust_proto::xattr::get(&r.xattrs, gust_client::ETAG_XATTR).ok()?;
    Some(String::from_utf8_lossy(e).into_owned())
}

/// The object properties among a record's attributes.
fn properties_in(x: &Xattrs) -> Xattrs {
    x.iter()
        .filter(|(n, _)| n.starts_with(gust_client::META_XATTR_PREFIX) || n.starts_with(gust_client::TAG_XATTR_PREFIX))
        .cloned()
        .collect()
}

/// `rel` without its first `n` components (an entry's key below the prefix, from
/// its path below a view of `n` layout levels).
fn strip_levels(rel: &str, n: usize) -> Option<&str> {
    let mut rest = rel;
    for _ in 0..n {
        rest = rest.split_once('/')?.1;
    }
    Some(rest)
}

impl<'a> View<'a> {
    pub fn new(c: &'a Client, def: &Definition) -> Result<View<'a>, String> {
        let (bucket, prefix) = def.object_source()?;
        let levels = layout::parse(&def.layout)?;
        Ok(View {
            c,
            def: def.clone(),
            bucket,
            prefix,
            tree: Tree::new(&def.dir()),
            with_properties: def.uses_attributes(),
            levels,
        })
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
            layout: Vec::new(),
        };
        let (bucket, prefix) = def.object_source()?;
        Ok(View { c, def, bucket, prefix, tree: Tree::new(dir), levels: Vec::new(), with_properties: false })
    }

    /// The bucket and key prefix the view shows.
    pub fn source(&self) -> (&str, &str) {
        (&self.bucket, &self.prefix)
    }

    /// The placeholder of object `o` with attributes `x`.
    fn placeholder(&self, o: &Object, x: &Xattrs) -> Record {
        let target = placeholder_target(&self.bucket, &o.key, &o.etag);
        let mut r = Client::staged_record(Kind::File, 0o444, o.size, o.mtime_ns, o.mtime_ns, target);
        r.xattrs = x.clone();
        r
    }

    /// The path below the view of the entry of object `o` (key `key_rel` below the
    /// prefix) with attributes `x`, if the view's predicates match it.
    fn wanted(&self, key_rel: &str, o: &Object, x: &Xattrs) -> Option<String> {
        let rel = layout::path(&self.levels, key_rel, o.mtime_ns, x);
        matches(&self.def.query, &self.tree.path_of(&rel), o.size, o.mtime_ns, x).then_some(rel)
    }

    /// The properties of object `key` as attributes: `Ok(None)` if it is gone.
    fn properties_of(store: &Store, key: &str) -> Result<Option<Xattrs>, String> {
        match store.properties(key) {
            Ok(p) => Ok(Some(xattrs_of(&p).0)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(format!("s3://{}/{key}: its properties: {e}", store.bucket())),
        }
    }

    /// Makes or remakes the placeholders `todo` (path below the view, object, its
    /// attributes), in batches per metadata daemon; what a remade entry held is
    /// freed. Returns the entries made and those a directory hides.
    fn make(&mut self, todo: Vec<(String, &Object, Xattrs)>, replace: bool) -> Result<(u64, u64), String> {
        for (rel, _, _) in &todo {
            self.tree.make_parents(self.c, rel)?;
        }
        let mut per: HashMap<u32, Vec<Vec<StageEntry>>> = HashMap::new();
        let mut bytes: HashMap<u32, usize> = HashMap::new();
        for (rel, o, x) in &todo {
            let path = self.tree.path_of(rel);
            let record = self.placeholder(o, x);
            let counted = STAGE_ENTRY_OVERHEAD_BYTES
                + path.len()
                + record.target.len()
                + gust_proto::xattr::bytes(&record.xattrs);
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
        let mut objects: Vec<(String, &Object)> = Vec::new();
        for o in &listing {
            match entry_of(&self.prefix, &o.key) {
                Some(key_rel) => objects.push((key_rel, o)),
                None if o.key.ends_with('/') => {} // a directory marker
                None => counts.skipped += 1,
            }
        }
        // What the view holds now.
        let have = self.tree.load(self.c)?;
        let attrs = self.attributes(store, &objects, &have)?;
        let mut want: BTreeMap<String, (&Object, Xattrs)> = BTreeMap::new();
        self.tree.forget_places();
        for ((key_rel, o), x) in objects.iter().zip(attrs) {
            let Some(x) = x else { continue }; // gone since the listing
            if let Some(rel) = self.wanted(key_rel, o, &x) {
                self.tree.place(key_rel, &rel);
                want.insert(rel, (o, x));
            }
        }
        let stale: Vec<String> = have
            .iter()
            .filter(|(rel, r)| match r.kind {
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
        let todo: Vec<(String, &Object, Xattrs)> = want
            .iter()
            .filter(|(rel, (o, x))| match have.get(rel.as_str()) {
                Some(r) if r.kind == Kind::File => {
                    // Remade when its object changed, or (a placeholder) its
                    // properties did.
                    etag_of(r).as_deref() != Some(&o.etag)
                        || (r.unfetched_object().is_some() && properties_in(&r.xattrs) != *x)
                }
                _ => true,
            })
            .map(|(rel, (o, x))| (rel.clone(), *o, x.clone()))
            .collect();
        let (made, hidden) = self.make(todo, true)?;
        counts.made = made;
        counts.skipped += hidden;
        counts.objects = want.len() as u64 - hidden;
        Ok(counts)
    }

    /// The attributes each of `objects` (key below the prefix, object) gives its
    /// entry: none unless the view needs properties; then those of its entry in
    /// `have` if that entry is of the same version (ETag and time: a copy that
    /// replaced the metadata changes the time), else the store's (a HEAD, and a
    /// tagging request if it has tags), [`PROPERTY_THREADS`] at a time. `None` for
    /// an object gone since the listing.
    fn attributes(
        &self,
        store: &Store,
        objects: &[(String, &Object)],
        have: &HashMap<String, Record>,
    ) -> Result<Vec<Option<Xattrs>>, String> {
        if !self.with_properties {
            return Ok(vec![Some(Xattrs::new()); objects.len()]);
        }
        let levels = self.levels.len();
        let known: HashMap<&str, &Record> = have
            .iter()
            .filter(|(_, r)| r.kind == Kind::File)
            .filter_map(|(rel, r)| Some((strip_levels(rel, levels)?, r)))
            .collect();
        let mut out: Vec<Option<Xattrs>> = Vec::with_capacity(objects.len());
        let mut ask: Vec<usize> = Vec::new();
        for (i, (key_rel, o)) in objects.iter().enumerate() {
            match known.get(key_rel.as_str()) {
                Some(r) if etag_of(r).as_deref() == Some(&o.etag) && r.mtime_ns == o.mtime_ns => {
                    out.push(Some(properties_in(&r.xattrs)))
                }
                _ => {
                    out.push(None);
                    ask.push(i);
                }
            }
        }
        let next = AtomicUsize::new(0);
        type Got = Vec<(usize, Result<Option<Xattrs>, String>)>;
        let got: Mutex<Got> = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..PROPERTY_THREADS.min(ask.len()) {
                s.spawn(|| {
                    while let Some(&i) = ask.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let x = Self::properties_of(store, &objects[i].1.key);
                        got.lock().unwrap_or_else(|e| e.into_inner()).push((i, x));
                    }
                });
            }
        });
        for (i, x) in got.into_inner().unwrap_or_else(|e| e.into_inner()) {
            out[i] = x?;
        }
        Ok(out)
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
                Some(rel) => todo.push((rel, o, Xattrs::new())),
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

    /// Applies one object's change: `Some` (made or changed, with its properties
    /// if the event carried them) or `None` (gone). Returns the change of the
    /// view's entry count (-1, 0 or 1).
    pub fn apply(
        &mut self,
        store: &Store,
        key: &str,
        object: Option<(&Object, Option<&Properties>)>,
    ) -> Result<i64, String> {
        let Some(key_rel) = entry_of(&self.prefix, key) else { return Ok(0) };
        let now = match object {
            Some((o, props)) => {
                let x = match (self.with_properties, props) {
                    (false, _) => Some(Xattrs::new()),
                    (true, Some(p)) => Some(xattrs_of(p).0),
                    (true, None) => Self::properties_of(store, key)?,
                };
                x.and_then(|x| Some((self.wanted(&key_rel, o, &x)?, o, x)))
            }
            None => None,
        };
        let had = self.tree.leave_old_place(self.c, &key_rel, now.as_ref().map(|(rel, _, _)| rel.as_str()))?;
        let Some((rel, o, x)) = now else { return Ok(-i64::from(had)) };
        let found = lookup(self.c, &self.tree.path_of(&rel))?;
        let current = found.as_ref().is_some_and(|r| {
            r.kind == Kind::File
                && etag_of(r).as_deref() == Some(&o.etag)
                && (r.unfetched_object().is_none() || properties_in(&r.xattrs) == x)
        });
        let there = current || self.make(vec![(rel.clone(), o, x)], true)?.0 == 1;
        Ok(self.tree.settle(&key_rel, &rel, there, had))
    }
}
