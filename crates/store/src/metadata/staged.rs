//! Records of staging (`gust stage in`): created in batches with a file's small data
//! in the same write, and committed (size and times) once a large file's chunks
//! are in, so a file whose copy did not finish never shows its final size.

use super::{encode_record, key_of, MetadataStore, Res};
use gust_proto::{FileKind, Record, INLINE_BYTES_MAX};
use rocksdb::WriteBatch;

impl MetadataStore {
    /// Creates the record of a staged file or symlink, with `data` inline if given.
    /// An existing non-directory is replaced if `replace` or if it is a view's
    /// unfetched placeholder (and returned), else EEXIST; a directory is never replaced (EISDIR), nor created here (EINVAL:
    /// mkdir also counts the parent's links).
    pub fn stage_create(&self, path: &str, rec: &Record, data: Option<&[u8]>, replace: bool) -> Res<Option<Record>> {
        if path == "/" {
            return Err(libc::EEXIST);
        }
        if rec.kind == FileKind::Dir {
            return Err(libc::EINVAL);
        }
        if let Some(d) = data {
            if rec.kind != FileKind::File || d.len() > INLINE_BYTES_MAX || rec.size != d.len() as u64 {
                return Err(libc::EINVAL);
            }
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let old = self.get_key(&key)?;
        if let Some(o) = &old {
            if o.kind == FileKind::Dir {
                return Err(libc::EISDIR);
            }
            // A view's placeholder is taken by the first fetch of its object.
            if !replace && o.unfetched_object().is_none() {
                return Err(libc::EEXIST);
            }
        }
        let mut b = WriteBatch::default();
        b.put(&key, encode_record(rec));
        match data {
            Some(d) if !d.is_empty() => b.put_cf(self.inline_cf(), &key, d),
            _ => b.delete_cf(self.inline_cf(), &key),
        }
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok(old)
    }

    /// Gives a staged-in file its size and times if its record is still `file_id`
    /// (ESTALE if another file took the path, ENOENT if it is gone).
    pub fn stage_commit(&self, path: &str, file_id: u128, size: u64, mtime_ns: i64, atime_ns: i64) -> Res<Record> {
        let key = key_of(path);
        let _g = self.lock(&key);
        let mut rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        if rec.file_id != file_id {
            return Err(libc::ESTALE);
        }
        if rec.kind != FileKind::File {
            return Err(libc::EINVAL);
        }
        rec.size = size;
        rec.mtime_ns = mtime_ns;
        rec.atime_ns = atime_ns;
        self.put_key(&key, &rec)?;
        Ok(rec)
    }
}
