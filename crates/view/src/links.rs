//! A view of a GustFS directory (`gust view add NAME /gustfs/DIR [predicates]`):
//! every file below DIR that the predicates match is a hard link in the view,
//! named by its path below DIR. A link is the file itself (its data, size and
//! times, read and written where they are), so nothing is copied and `ls -l` of
//! the view shows the files as they are. GustFS's own event logs keep it current
//! (follow.rs): a file made, closed after writing, renamed, touched or removed
//! below DIR is looked at again; a directory removed or renamed, or events lost,
//! bring a resync.
//!
//! Under a layout (`--layout user.project`), an entry sits below directories of
//! its file's attribute values (layout.rs); setting the attribute moves it.
//!
//! Not for: views of object stores (sync.rs).

use crate::layout::{self, Level};
use crate::sync::Counts;
use crate::tree::{errno_text, lookup, Tree};
use crate::Definition;
use gust_client::{Client, Errno, Kind, Record};
use gust_proto::FindQuery;
use std::collections::HashMap;

pub struct LinkView<'a> {
    c: &'a Client,
    query: FindQuery,
    /// The source directory (an internal path).
    src: String,
    tree: Tree,
    levels: Vec<Level>,
    /// The path below the source of each file in the view, by file id: a linked
    /// file's attributes change at its link path (`//links/ID`), not below the
    /// source.
    by_id: HashMap<u128, String>,
}

impl<'a> LinkView<'a> {
    pub fn new(c: &'a Client, def: &Definition) -> Result<LinkView<'a>, String> {
        let src = def.gust_dir().ok_or_else(|| format!("{}: not a GustFS directory", def.source))?;
        Ok(LinkView {
            c,
            query: def.query.clone(),
            src: src.trim_end_matches('/').to_string(),
            tree: Tree::new(&def.dir()),
            levels: layout::parse(&def.layout)?,
            by_id: HashMap::new(),
        })
    }

    /// The source path of the file whose link path `p` is, if the view holds it.
    pub fn source_of_link(&self, p: &str) -> Option<String> {
        if !gust_proto::path::is_link_path(p) {
            return None;
        }
        let id = u128::from_str_radix(&p[gust_proto::path::LINKS_DIR.len() + 1..], 16).ok()?;
        self.by_id.get(&id).map(|rel| format!("{}/{rel}", self.src))
    }

    /// The source directory.
    pub fn source(&self) -> &str {
        &self.src
    }

    fn query(&self) -> FindQuery {
        FindQuery { now_ns: gust_proto::now_ns(), ..self.query.clone() }
    }

    fn wanted(q: &FindQuery, p: &str, r: &Record) -> bool {
        r.kind == Kind::File && q.matches(p, r)
    }

    /// The path below the view of source file `rel` with record `r`.
    fn entry(&self, rel: &str, r: &Record) -> String {
        layout::path(&self.levels, rel, r.mtime_ns, &r.xattrs)
    }

    /// Links source file `rel` into the view at `at` (in place of whatever is
    /// there); false if the source is gone meanwhile.
    fn link(&mut self, rel: &str, at: &str) -> Result<bool, String> {
        self.tree.make_parents(self.c, at)?;
        let (from, to) = (format!("{}/{rel}", self.src), self.tree.path_of(at));
        for _ in 0..2 {
            match self.c.link(&from, &to) {
                Ok(()) => return Ok(true),
                Err(Errno(libc::ENOENT)) => return Ok(false),
                Err(Errno(libc::EEXIST)) => match self.c.unlink(&to) {
                    Ok(()) | Err(Errno(libc::ENOENT)) => {}
                    Err(e) => return Err(errno_text(&to, e)),
                },
                Err(e) => return Err(errno_text(&to, e)),
            }
        }
        Err(errno_text(&to, Errno(libc::EEXIST)))
    }

    /// Makes the view say what the source directory holds.
    pub fn resync(&mut self) -> Result<Counts, String> {
        let q = self.query();
        let base = format!("{}/", self.src);
        let mut found: Vec<(String, Record)> = Vec::new();
        self.c
            .find(&self.src, &q, |p, r| {
                if let Some(rel) = p.strip_prefix(&base) {
                    if Self::wanted(&q, p, r) {
                        found.push((rel.to_string(), r.clone()));
                    }
                }
            })
            .map_err(|e| errno_text(&self.src, e))?;
        // By path below the view: the source's path and file id.
        let mut want: HashMap<String, (String, u128)> = HashMap::new();
        self.tree.forget_places();
        self.by_id.clear();
        for (rel, r) in found {
            let at = self.entry(&rel, &r);
            self.tree.place(&rel, &at);
            self.by_id.insert(r.file_id, rel.clone());
            want.insert(at, (rel, r.file_id));
        }
        let have = self.tree.load(self.c)?;
        let mut counts = Counts::default();
        for (at, r) in &have {
            let keep = match r.kind {
                Kind::Dir => true,
                _ => want.get(at).map(|w| w.1) == Some(r.file_id),
            };
            if !keep && self.tree.remove(self.c, at)? {
                counts.removed += 1;
            }
        }
        self.tree.prune(self.c, want.keys());
        for (at, (rel, id)) in &want {
            if have.get(at).is_some_and(|r| r.kind == Kind::File && r.file_id == *id) {
                counts.objects += 1;
            } else if self.link(rel, at)? {
                counts.made += 1;
                counts.objects += 1;
            }
        }
        Ok(counts)
    }

    /// Looks again at source path `p` (an event named it). Returns the change of
    /// the view's entry count (-1, 0 or 1).
    pub fn apply(&mut self, p: &str) -> Result<i64, String> {
        let Some(rel) = p.strip_prefix(&format!("{}/", self.src)).map(str::to_string) else { return Ok(0) };
        let now = lookup(self.c, p)?.filter(|r| Self::wanted(&self.query(), p, r));
        let at = now.as_ref().map(|r| self.entry(&rel, r));
        let had = self.tree.leave_old_place(self.c, &rel, at.as_deref())?;
        let (Some(r), Some(at)) = (now, at) else { return Ok(-i64::from(had)) };
        let found = lookup(self.c, &self.tree.path_of(&at))?;
        let there = found.is_some_and(|h| h.kind == Kind::File && h.file_id == r.file_id) || self.link(&rel, &at)?;
        if there {
            self.by_id.insert(r.file_id, rel.clone());
        }
        Ok(self.tree.settle(&rel, &at, there, had))
    }
}
