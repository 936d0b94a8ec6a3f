//! Hard links, the client's part (docs/DESIGN.md, "Hard links").
//!
//! A file gets a second name in three steps, each one request: the first link
//! makes a record of the file's attributes at its link path
//! (`gust_proto::path::link_path`, on the daemon that path hashes to) with link
//! count 2, marks the old name as a name of it (`mark_linked`), then creates the new
//! name; later links count up first (`link_count` +1), then create the name. An
//! unlink removes the name first, then counts down; at 0 the attributes record goes
//! and the client removes the chunks. A failure or a crash between two steps leaves
//! a count one too high (data kept, never lost); a failed create of the new name
//! counts down again.
//!
//! Reads of attributes follow a name to its link path (`get_record`, one more
//! request, for linked files only); a change of attributes asked of a name is
//! refused by its daemon with EREMOTE and sent again to the link path
//! (`call_md`). A descriptor learns its file's link path at open or at its first
//! EREMOTE (`OpenFile::linked_at`), and sends its size updates there.
//!
//! Not for: the store's side (gust-store, metadata/links.rs).

use crate::error::unexpected;
use crate::open_files::OpenFile;
use crate::{Client, Errno, Result};
use gust_proto::path::link_path;
use gust_proto::{now_ns, FileKind, Record, Request, Response};
use std::sync::OnceLock;

/// Test switch: `GUST_DEBUG_CRASH_IN_LINK=<step>` ends the process (abort) at that
/// step of a link or unlink (`after-link-path`, `after-mark`, `after-remove`), so a
/// test can check what a crash there leaves (tests/tests/links.rs).
fn crash_point(step: &str) {
    static AT: OnceLock<Option<String>> = OnceLock::new();
    if AT.get_or_init(|| std::env::var("GUST_DEBUG_CRASH_IN_LINK").ok()).as_deref() == Some(step) {
        std::process::abort();
    }
}

impl Client {
    pub(crate) fn link_impl(&self, old: &str, new: &str, follow: bool) -> Result<()> {
        self.listing.invalidate();
        let old = if follow { self.resolve(old)?.0 } else { self.norm(old)? };
        let new = self.norm(new)?;
        if old == "/" {
            return Err(Errno(libc::EPERM));
        }
        if new == "/" {
            return Err(Errno(libc::EEXIST));
        }
        // Always (a stat, for links only): git links objects into directories it
        // makes only when link says ENOENT.
        self.check_parent_always(&new)?;
        self.may_make(&new)?;
        let rec = self.get_stored_record(&old)?;
        match rec.kind {
            FileKind::Dir => return Err(Errno(libc::EPERM)),
            // Its target field holds the symlink's target (docs/SEMANTICS.md).
            FileKind::Symlink => return Err(Errno(libc::EPERM)),
            _ => {}
        }
        let link = match rec.linked_to() {
            Some(l) => {
                let l = l.to_string();
                self.link_count(&l, rec.file_id, 1)?;
                l
            }
            None => self.first_link(&old, &rec)?,
        };
        // A name holds no attributes of its own: they are the link path's.
        let name = Record { target: link.clone(), xattrs: Vec::new(), ..rec };
        let file_id = name.file_id;
        match self.call_md(&new, Request::Create { path: new.clone(), record: name, exclusive: true }) {
            Ok(_) => Ok(()),
            Err(e) => {
                // The count this link took back; if the other names went meanwhile,
                // the file's data goes with it.
                if let Ok(Some(gone)) = self.link_count(&link, file_id, -1) {
                    let _ = self.remove_chunks(&gone);
                }
                Err(e)
            }
        }
    }

    /// The first link of the file at `old`: its attributes move to its link path.
    fn first_link(&self, old: &str, rec: &Record) -> Result<String> {
        if rec.kind == FileKind::File && rec.size > 0 {
            // A small file's data beside its record moves to chunks: a linked file's
            // data is read by file id from any name.
            let (r, data) = self.stat_data(old)?;
            if let Some(d) = data {
                self.migrate_inline(old, &r, &d)?;
            }
        }
        let link = link_path(rec.file_id);
        let attrs = Record { nlink: 2, ctime_ns: now_ns(), target: String::new(), ..rec.clone() };
        match self.call_md(&link, Request::Create { path: link.clone(), record: attrs, exclusive: true }) {
            Ok(_) => {}
            // Another process linked it first (or a crash left the record: one count high).
            Err(Errno(libc::EEXIST)) => {
                self.link_count(&link, rec.file_id, 1)?;
            }
            Err(e) => return Err(e),
        }
        crash_point("after-link-path");
        let before = match self
            .call_md(old, Request::MarkLinked { path: old.to_string(), file_id: rec.file_id, link: link.clone() })
        {
            Ok(Response::Record(b)) => b,
            Ok(r) => return Err(unexpected(r)),
            Err(e) => {
                // The name is gone or another file's: this count was never a name's.
                // (Its data is the name's remover's to remove, or the name's still.)
                let _ = self.link_count(&link, rec.file_id, -1);
                return Err(e);
            }
        };
        crash_point("after-mark");
        // Writes that grew the file after its attributes were copied: the size
        // only grows, so sending the larger one again is enough.
        if before.size > rec.size && before.linked_to().is_none() {
            let req = Request::UpdateSize {
                path: link.clone(),
                file_id: rec.file_id,
                end: before.size,
                append_len: None,
                mtime_ns: before.mtime_ns,
            };
            self.call_md(&link, req)?;
        }
        Ok(link)
    }

    /// Changes the link count at `link`; the attributes record if it reached 0 and
    /// is gone (its chunks are the caller's to remove).
    fn link_count(&self, link: &str, file_id: u128, delta: i32) -> Result<Option<Record>> {
        let req = Request::LinkCount { path: link.to_string(), file_id, delta, ctime_ns: now_ns() };
        match self.call_md(link, req)? {
            Response::Record(_) => Ok(None),
            Response::Removed { record, .. } => Ok(Some(record)),
            r => Err(unexpected(r)),
        }
    }

    /// After the record of a name was removed (unlink, or replaced by a rename):
    /// the data goes with the file's last name.
    pub(crate) fn name_removed(&self, record: &Record, inline: bool) -> Result<()> {
        match record.linked_to() {
            Some(link) => {
                crash_point("after-remove");
                match self.link_count(link, record.file_id, -1)? {
                    Some(gone) => self.remove_chunks(&gone),
                    None => Ok(()),
                }
            }
            // A view's placeholder has no chunk (objects.rs).
            None if inline || record.unfetched_object().is_some() => Ok(()),
            None => self.remove_chunks(record),
        }
    }

    /// The link path of the linked file named `path` (a daemon answered EREMOTE).
    pub(crate) fn link_path_of(&self, path: &str) -> Result<String> {
        match self.get_stored_record(path)?.linked_to() {
            Some(l) => Ok(l.to_string()),
            // A name never stops being one; a record replaced meanwhile is another file.
            None => Err(Errno(libc::ESTALE)),
        }
    }

    /// A descriptor's daemon said its file is linked (EREMOTE): it learns where the
    /// attributes are. Returns that path.
    pub(crate) fn learn_link(&self, f: &OpenFile) -> Result<String> {
        if let Some(l) = f.linked_at.get() {
            return Ok(l.clone());
        }
        let l = self.link_path_of(&f.path())?;
        let _ = f.linked_at.set(l.clone());
        Ok(l)
    }
}
