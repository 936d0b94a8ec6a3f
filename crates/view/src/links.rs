//! A view of a GustFS directory (`gust view add NAME /gustfs/DIR [predicates]`):
//! every file below DIR that the predicates match is a hard link in the view,
//! named by its path below DIR. A link is the file itself (its data, size and
//! times, read and written where they are), so nothing is copied and `ls -l` of
//! the view shows the files as they are. GustFS's own event logs keep it current
//! (follow.rs): a file made, closed after writing, renamed, touched or removed
//! below DIR is looked at again; a directory removed or renamed, or events lost,
//! bring a resync.
//!
//! Not for: views of object stores (sync.rs).

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
}

impl<'a> LinkView<'a> {
    pub fn new(c: &'a Client, def: &Definition) -> Result<LinkView<'a>, String> {
        let src = def.gust_dir().ok_or_else(|| format!("{}: not a GustFS directory", def.source))?;
        Ok(LinkView {
            c,
            query: def.query.clone(),
            src: src.trim_end_matches('/').to_string(),
            tree: Tree::new(&def.dir()),
        })
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

    /// Links source file `rel` into the view (in place of whatever is there);
    /// false if the source is gone meanwhile.
    fn link(&mut self, rel: &str) -> Result<bool, String> {
        self.tree.make_parents(self.c, rel)?;
        let (from, to) = (format!("{}/{rel}", self.src), self.tree.path_of(rel));
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
        let mut want: HashMap<String, u128> = HashMap::new();
        self.c
            .find(&self.src, &q, |p, r| {
                if let Some(rel) = p.strip_prefix(&base) {
                    if Self::wanted(&q, p, r) {
                        want.insert(rel.to_string(), r.file_id);
                    }
                }
            })
            .map_err(|e| errno_text(&self.src, e))?;
        let have = self.tree.load(self.c)?;
        let mut counts = Counts::default();
        for (rel, r) in &have {
            let keep = match r.kind {
                Kind::Dir => true,
                _ => want.get(rel) == Some(&r.file_id),
            };
            if !keep && self.tree.remove(self.c, rel)? {
                counts.removed += 1;
            }
        }
        self.tree.prune(self.c, want.keys());
        for (rel, id) in &want {
            if have.get(rel).is_some_and(|r| r.kind == Kind::File && r.file_id == *id) {
                counts.objects += 1;
            } else if self.link(rel)? {
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
        let to = self.tree.path_of(&rel);
        let had = lookup(self.c, &to)?;
        let had_file = had.as_ref().is_some_and(|r| r.kind == Kind::File);
        let now = lookup(self.c, p)?;
        match now {
            Some(r) if Self::wanted(&self.query(), p, &r) => {
                if had.is_some_and(|h| h.kind == Kind::File && h.file_id == r.file_id) {
                    return Ok(0);
                }
                Ok(if self.link(&rel)? && !had_file { 1 } else { 0 })
            }
            _ if had_file => Ok(if self.tree.remove(self.c, &rel)? { -1 } else { 0 }),
            _ => Ok(0),
        }
    }
}
