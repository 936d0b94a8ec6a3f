//! Rename of files and directories.
//!
//! A file's rename moves its one record; its chunks are keyed by file id and stay
//! where they are. A directory's rename moves the record of every descendant (records
//! are keyed by path), in two phases: phase one writes all new records (undone on
//! failure, so nothing changes), phase two removes the old ones. Only a daemon
//! failing during phase two can leave both trees visible, and then the caller gets
//! EIO and `last_transport_error` names the daemon.
//!
//! Bound: a directory rename moves at most [`RENAME_DIR_RECORDS_MAX`] descendant
//! records of at most [`RENAME_DIR_BYTES_MAX`] counted bytes; a larger subtree is
//! refused with EXDEV before anything changes. EXDEV is what a rename that cannot be
//! done in place returns on Linux (across mounts; overlayfs for a merged directory),
//! and what `mv`, `shutil.move` and friends answer by copying and removing, which
//! works here file by file. Why this size: the client holds the subtree's records a
//! few times over while moving them (old and new paths, per-daemon groups), so the
//! bound on bytes (32 MiB) keeps that at some tens of MiB inside the application's
//! process; 65,536 records are 16 scan pages and 64 record batches per phase, well
//! under a second on one node; and phase two, the window in which a failure leaves
//! both trees, stays as short.
//!
//! Not for: keeping other clients' descriptors on the renamed files (they get ENOENT
//! or ESTALE; docs/SEMANTICS.md).

use crate::error::unexpected;
use crate::namespace::now_ns;
use crate::{normalize, Client, Errno, Result};
use gust_proto::{
    path, FileKind, Record, RemoveKind, Request, Response, RECORD_OVERHEAD_BYTES, SCAN_PAGE_BYTES_MAX,
    SCAN_PAGE_ENTRIES_MAX,
};
use std::collections::BTreeMap;

/// Bound on the descendant records one directory rename moves (see the module doc).
pub const RENAME_DIR_RECORDS_MAX: usize = 16 * SCAN_PAGE_ENTRIES_MAX as usize;
/// Bound on the bytes of those records, counted as scan pages count them (path,
/// target and `RECORD_OVERHEAD_BYTES` each): 512 bytes a record on average at the
/// bound on records.
pub const RENAME_DIR_BYTES_MAX: usize = 64 * SCAN_PAGE_BYTES_MAX;
/// Records (or paths) per PutRecords or RemoveRecords request, unless their bytes cut
/// the batch first.
const RECORDS_PER_BATCH: usize = 1024;
const _: () = assert!(RECORDS_PER_BATCH <= SCAN_PAGE_ENTRIES_MAX as usize);

/// Bytes a (path, record) counts in a scan page or a batch.
fn record_bytes(path: &str, r: &Record) -> usize {
    path.len() + r.payload_bytes() + RECORD_OVERHEAD_BYTES
}

/// Cuts `items` into request-sized batches: at most `RECORDS_PER_BATCH` items, and a
/// batch ends after the item that reaches `SCAN_PAGE_BYTES_MAX` counted bytes, as a
/// daemon ends a scan page, so every batch fits one frame (asserted in gust_proto).
fn batches<T>(items: &[T], bytes: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let (mut start, mut sum) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        if i - start >= RECORDS_PER_BATCH || sum >= SCAN_PAGE_BYTES_MAX {
            out.push(&items[start..i]);
            (start, sum) = (i, 0);
        }
        sum += bytes(item);
    }
    if start < items.len() {
        out.push(&items[start..]);
    }
    out
}

impl Client {
    pub(crate) fn rename_impl(&self, old: &str, new: &str) -> Result<()> {
        self.listing.invalidate();
        let old = self.norm(old)?;
        let new = normalize(new)?;
        if old == "/" || new == "/" {
            return Err(Errno(libc::EBUSY));
        }
        // With its inline data, if any: that stays at the old key's daemon, so it
        // moves to chunks before the record moves (inline.rs).
        // As stored: a name of a linked file moves as a name (links.rs).
        let (r, inline) = self.stat_data_stored(&old)?;
        if old == new {
            return Ok(());
        }
        if let Some(who) = self.checked_caller() {
            self.may_rename(&who, &old, &r, &new)?;
        }
        if let Some(data) = inline {
            self.migrate_inline(&old, &r, &data)?;
        }
        if r.kind == FileKind::Dir {
            if path::is_below(&new, &old) {
                return Err(Errno(libc::EINVAL));
            }
            let replaced_dir = self.rename_dir(&old, &new, r)?;
            // Link counts and times of the parents: the old one lost a subdirectory,
            // the new one gained one (unless it replaced an empty one).
            let (from, to) = (path::parent(&old), path::parent(&new));
            let gained = if replaced_dir { 0 } else { 1 };
            if from == to {
                self.dir_changed(from, gained - 1);
            } else {
                self.dir_changed(from, -1);
                self.dir_changed(to, gained);
            }
        } else {
            self.rename_file(&old, &new, r)?;
        }
        self.files.retarget(&old, &new);
        Ok(())
    }

    fn rename_file(&self, old: &str, new: &str, r: Record) -> Result<()> {
        let (old, new) = (old.to_string(), new.to_string());
        self.check_parent(&new)?;
        if r.linked_to().is_some() {
            // Two names of one file: rename does nothing (POSIX).
            match self.get_stored_record(&new) {
                Ok(t) if t.linked_to() == r.linked_to() => return Ok(()),
                _ => {}
            }
        }
        let mut moved = r.clone();
        moved.ctime_ns = now_ns();
        let replaced =
            match self.call_md(&new, Request::PutRecord { path: new.clone(), record: moved, replace: true })? {
                Response::MaybeRecord(x) => x,
                r => return Err(unexpected(r)),
            };
        // Remove the old name. Should this fail, both names exist and the error says so.
        self.transport.call(self.md_daemon(&old), Request::Remove { path: old, kind: RemoveKind::Moved })?;
        if let Some(rep) = replaced {
            if rep.file_id != r.file_id {
                // Its data may be inline, then the put dropped it with the record.
                self.name_removed(&rep, false)?;
            }
        }
        Ok(())
    }

    /// Every descendant record of `dir`, from every daemon; EXDEV past the bounds.
    fn collect_subtree(&self, dir: &str) -> Result<Vec<(String, Record)>> {
        let mut desc: Vec<(String, Record)> = Vec::new();
        let mut bytes = 0usize;
        for d in self.all_daemons() {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let req = Request::ScanTree {
                    dir: dir.to_string(),
                    after: after.clone(),
                    max_entries: SCAN_PAGE_ENTRIES_MAX,
                };
                let page = match self.transport.call(d, req) {
                    // A down daemon's records have copies on the others (replica.rs).
                    Err(e) if self.skippable(d, e) => break,
                    r => r?,
                };
                match page {
                    Response::Tree { mut records, last_key, done } => {
                        if !records.iter().all(|(p, _)| path::is_below(p, dir)) {
                            return Err(Errno(libc::EPROTO));
                        }
                        records.retain(|(p, _)| self.keeps(d, p));
                        bytes += records.iter().map(|(p, r)| record_bytes(p, r)).sum::<usize>();
                        desc.extend(records);
                        if desc.len() > RENAME_DIR_RECORDS_MAX || bytes > RENAME_DIR_BYTES_MAX {
                            return Err(Errno(libc::EXDEV));
                        }
                        if done {
                            break;
                        }
                        after = last_key.or(after);
                    }
                    r => return Err(unexpected(r)),
                }
            }
        }
        Ok(desc)
    }

    /// Renames a directory by moving every descendant record (see the module doc).
    /// Returns whether it replaced an (empty) directory.
    fn rename_dir(&self, old: &str, new: &str, dir_rec: Record) -> Result<bool> {
        match self.get_record(new) {
            Ok(t) if t.kind != FileKind::Dir => return Err(Errno(libc::ENOTDIR)),
            Ok(_) => {
                if self.dir_has_children(new)? {
                    return Err(Errno(libc::ENOTEMPTY));
                }
            }
            Err(Errno(libc::ENOENT)) => self.check_parent(new)?,
            Err(e) => return Err(e),
        }
        let desc = self.collect_subtree(old)?;
        self.migrate_subtree_inline(&desc)?;
        // Phase one: new records, grouped per owning daemon, in bounded batches.
        let mut moved_dir = dir_rec.clone();
        moved_dir.ctime_ns = now_ns();
        let replaced =
            match self.call_md(new, Request::PutRecord { path: new.to_string(), record: moved_dir, replace: true })? {
                Response::MaybeRecord(x) => x,
                r => return Err(unexpected(r)),
            };
        let mut groups: BTreeMap<u32, Vec<(String, Record)>> = BTreeMap::new();
        for (p, r) in &desc {
            let np = path::rebase(p, old, new).expect("collect_subtree returns descendants only");
            groups.entry(self.md_daemon(&np)).or_default().push((np, r.clone()));
        }
        let mut written: Vec<(u32, Vec<String>)> = Vec::new();
        let mut failure = None;
        'outer: for (d, recs) in &groups {
            for batch in batches(recs, |(p, r)| record_bytes(p, r)) {
                match self.transport.call(*d, Request::PutRecords { records: batch.to_vec() }) {
                    Ok(_) => written.push((*d, batch.iter().map(|x| x.0.clone()).collect())),
                    Err(e) => {
                        failure = Some(e);
                        break 'outer;
                    }
                }
            }
        }
        if let Some(e) = failure {
            for (d, paths) in written {
                let _ = self.transport.call(d, Request::RemoveRecords { paths });
            }
            let undo = match replaced {
                Some(t) => Request::PutRecord { path: new.to_string(), record: t, replace: true },
                None => Request::RemoveRecords { paths: vec![new.to_string()] },
            };
            let _ = self.call_md(new, undo);
            return Err(e);
        }
        // Phase two: remove the old records.
        let mut old_groups: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (p, _) in &desc {
            old_groups.entry(self.md_daemon(p)).or_default().push(p.clone());
        }
        for (d, paths) in old_groups {
            for batch in batches(&paths, |p| p.len() + RECORD_OVERHEAD_BYTES) {
                self.transport.call(d, Request::RemoveRecords { paths: batch.to_vec() })?;
            }
        }
        self.call_md(old, Request::RemoveRecords { paths: vec![old.to_string()] })?;
        Ok(replaced.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cut_by_count_and_by_bytes() {
        let short: Vec<usize> = vec![10; 2500];
        let b = batches(&short, |x| *x);
        assert_eq!(b.iter().map(|x| x.len()).collect::<Vec<_>>(), vec![1024, 1024, 452]);
        // 1000 items of 8 KiB: a batch ends at the item that reaches 512 KiB.
        let long: Vec<usize> = vec![8192; 1000];
        let b = batches(&long, |x| *x);
        assert!(b.iter().all(|x| x.len() == 64 || std::ptr::eq(*x, *b.last().unwrap())));
        assert_eq!(b.iter().map(|x| x.len()).sum::<usize>(), 1000);
        for x in &b {
            assert!(x.iter().sum::<usize>() < SCAN_PAGE_BYTES_MAX + 8192);
        }
        assert!(batches(&Vec::<usize>::new(), |x| *x).is_empty());
    }
}
