//! Hard links in the store (docs/DESIGN.md, "Hard links"). A linked file's
//! attributes live in one record at its link path (`gust_proto::path::link_path`,
//! on the daemon that path hashes to); each of its names is a record whose
//! `target` is that path. The names' other fields are not kept current, so every
//! change of attributes asked of a name is refused with `EREMOTE` ("the object is
//! remote"): the client sends it again to the link path. A file never linked pays
//! one comparison of the target's length.

use super::MetadataStore;
use crate::keys::key_of;
use crate::record::encode_record;
use crate::Res;
use gust_proto::{FileKind, Record};
use rocksdb::WriteBatch;

/// What `link_count` did.
#[derive(Debug, PartialEq, Eq)]
pub enum LinkCount {
    /// The record after the change.
    Counted(Record),
    /// The count reached 0: the record is gone (this is it, before).
    Removed(Record),
}

/// Refuses a change of attributes asked of a name of a linked file.
pub(crate) fn refuse_name_of_linked(rec: &Record) -> Res<()> {
    match rec.linked_to() {
        Some(_) => Err(libc::EREMOTE),
        None => Ok(()),
    }
}

impl MetadataStore {
    /// Changes the link count of the attributes record at `path` by `delta` and
    /// sets its ctime; removes the record when the count reaches 0.
    pub fn link_count(&self, path: &str, file_id: u128, delta: i32, ctime_ns: i64) -> Res<LinkCount> {
        if !gust_proto::path::is_link_path(path) {
            return Err(libc::EINVAL);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let mut rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        if rec.file_id != file_id {
            return Err(libc::ESTALE);
        }
        let n = i64::from(rec.nlink) + i64::from(delta);
        if n <= 0 {
            let mut b = WriteBatch::default();
            b.delete(&key);
            b.delete_cf(self.inline_cf(), &key);
            self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
            return Ok(LinkCount::Removed(rec));
        }
        rec.nlink = u32::try_from(n).map_err(|_| libc::EMLINK)?;
        rec.ctime_ns = ctime_ns;
        self.db.put_opt(&key, encode_record(&rec), &self.write_opts).map_err(Self::db_err)?;
        Ok(LinkCount::Counted(rec))
    }

    /// Makes the record at `path` a name of the linked file whose attributes are at
    /// `link`. Answers the record before.
    pub fn mark_linked(&self, path: &str, file_id: u128, link: &str) -> Res<Record> {
        if !gust_proto::path::is_link_path(link) || path == "/" {
            return Err(libc::EINVAL);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        if matches!(rec.kind, FileKind::Dir | FileKind::Symlink) {
            return Err(libc::EPERM);
        }
        if rec.file_id != file_id {
            return Err(libc::ESTALE);
        }
        match rec.linked_to() {
            Some(l) if l == link => return Ok(rec),
            Some(_) => return Err(libc::EEXIST),
            None => {}
        }
        // The attributes, extended ones too, are the link path's from now on.
        let named = Record { target: link.to_string(), xattrs: Vec::new(), ..rec.clone() };
        let mut b = WriteBatch::default();
        b.put(&key, encode_record(&named));
        // A linked file's data is in chunks (the client moved it there first).
        b.delete_cf(self.inline_cf(), &key);
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok(rec)
    }
}
