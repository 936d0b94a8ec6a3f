//! Small files inline: the data of a file of at most `INLINE_BYTES_MAX` bytes kept by
//! the metadata daemon beside the file's record, so that creating it with its data
//! is one request and opening it with its data is one.
//!
//! Where: the column family `inline`, under the record's own key. Not inside the
//! record value: a stat, a listing page or a directory scan then never reads or
//! carries file data, and the record format stays what every other reader knows.
//! Same key, not the file id: every removal or replacement of a record (metadata.rs)
//! drops the data at its key in the same write batch, so inline data never outlives
//! its record, and a lookup of both is two point reads of one key.
//!
//! A file is inline from its creation by `create_inline` until a client writes it
//! through chunks: a client opening it for writing first copies the data to chunks
//! and then sends `drop_inline` (gust-client, `inline.rs`). The stored bytes may be
//! shorter than the record's size (after a truncate that grew the file); the rest
//! reads as zeros.
//!
//! Not for: deciding when a file is small (the client does), chunk data (chunks.rs).

use crate::metadata::{encode_record, key_of, MetadataStore, Res};
use gust_proto::{FileKind, Record, INLINE_BYTES_MAX};
use rocksdb::{ColumnFamily, DBRawIteratorWithThreadMode, Options, WriteBatch, DB};

/// Name of the column family holding inline data.
pub const INLINE_CF: &str = "inline";

/// Options of the inline family: values of up to INLINE_BYTES_MAX, read by point lookups.
pub fn family_options() -> Options {
    let mut o = Options::default();
    o.set_write_buffer_size(64 << 20);
    // File data: what a burst buffer holds (images, compressed arrays, model
    // shards) rarely compresses, and trying costs CPU at every flush and compaction.
    o.set_compression_type(rocksdb::DBCompressionType::None);
    // No block cache: with the tables mmap'd (metadata/mod.rs), a lookup's block is
    // used where it lies in the page cache; a block cache would copy every block of
    // up to INLINE_BYTES_MAX into its own memory first, and a data set read once
    // per epoch never hits it anyway.
    let mut bb = rocksdb::BlockBasedOptions::default();
    bb.disable_cache();
    o.set_block_based_table_factory(&bb);
    o
}

/// Inline data where RocksDB holds it (see `get_with_data_pinned`): valid, and
/// unchanged by later writes, while this lives.
pub struct PinnedData<'a> {
    it: DBRawIteratorWithThreadMode<'a, DB>,
}

impl std::ops::Deref for PinnedData<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.it.value().expect("positioned on the value (checked when made)")
    }
}

impl MetadataStore {
    pub(crate) fn inline_cf(&self) -> &ColumnFamily {
        self.db.cf_handle(INLINE_CF).expect("the inline family is opened with the store")
    }

    /// Creates a file record with its data; EEXIST if the path exists.
    pub fn create_inline(&self, path: &str, rec: &Record, data: &[u8]) -> Res<Record> {
        if path == "/" {
            return Err(libc::EEXIST);
        }
        if rec.kind != FileKind::File || data.len() > INLINE_BYTES_MAX || rec.size != data.len() as u64 {
            return Err(libc::EINVAL);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        if self.get_key(&key)?.is_some() {
            return Err(libc::EEXIST);
        }
        let mut b = WriteBatch::default();
        b.put(&key, encode_record(rec));
        if data.is_empty() {
            // An empty file needs no data entry; it is an ordinary empty file.
            b.delete_cf(self.inline_cf(), &key);
        } else {
            b.put_cf(self.inline_cf(), &key, data);
        }
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok(rec.clone())
    }

    /// The record of `path` and its inline data, if it has any.
    pub fn get_with_data(&self, path: &str) -> Res<Option<(Record, Option<Vec<u8>>)>> {
        Ok(self.get_with_data_pinned(path)?.map(|(rec, d)| (rec, d.map(|d| d.to_vec()))))
    }

    /// The record of `path` and its inline data, if it has any, where RocksDB holds
    /// it: a reply is written to the socket from there (dispatch.rs), with no copy
    /// into a buffer first. A point `get` would copy: RocksDB pins a value only
    /// from its block cache, which this family has none of (see family_options), so
    /// a value from an mmap'd table or the memtable is copied into the result (16%
    /// of a daemon's CPU serving a data loader of ~100 KiB files, after our own copy
    /// of it was gone). An iterator with `pin_data` keeps the block or the memtable
    /// it points into alive instead, and its value is the stored bytes themselves.
    pub fn get_with_data_pinned(&self, path: &str) -> Res<Option<(Record, Option<PinnedData<'_>>)>> {
        let Some(rec) = self.get(path)? else { return Ok(None) };
        if path == "/" || rec.kind != FileKind::File {
            return Ok(Some((rec, None)));
        }
        let key = key_of(path);
        // No block checksum pass over the data (up to INLINE_BYTES_MAX bytes per read,
        // ~6% of a daemon's CPU serving a data loader): chunk data has none either.
        // Records keep theirs (get above).
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_verify_checksums(false);
        ro.set_pin_data(true);
        // Nothing past this key is of interest: the iterator stops at it.
        let mut upper = key.clone();
        upper.push(0);
        ro.set_iterate_upper_bound(upper);
        let mut it = self.db.raw_iterator_cf_opt(self.inline_cf(), ro);
        it.seek(&key);
        if !it.valid() || it.key() != Some(&key[..]) {
            it.status().map_err(Self::db_err)?;
            return Ok(Some((rec, None)));
        }
        let len = it.value().map_or(0, |v| v.len());
        // Pair check of create_inline's bound: what is stored was bounded there.
        if len > INLINE_BYTES_MAX {
            tracing::error!("inline data of {path} is {len} bytes, past the bound");
            return Err(libc::EIO);
        }
        Ok(Some((rec, Some(PinnedData { it }))))
    }

    /// Drops the inline data of `path` if its record is still `file_id`.
    pub fn drop_inline(&self, path: &str, file_id: u128) -> Res<()> {
        if path == "/" {
            return Err(libc::EISDIR);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        if rec.file_id != file_id {
            return Err(libc::ESTALE);
        }
        self.db.delete_cf_opt(self.inline_cf(), &key, &self.write_opts).map_err(Self::db_err)
    }

    /// Adds to `b` what a truncate to `size` does to the inline data at `key` (the
    /// caller holds the key's lock): cut to `size`, dropped at 0.
    pub(crate) fn cut_inline(&self, b: &mut WriteBatch, key: &[u8], size: u64) -> Res<()> {
        let Some(d) = self.db.get_cf(self.inline_cf(), key).map_err(Self::db_err)? else { return Ok(()) };
        if size == 0 {
            b.delete_cf(self.inline_cf(), key);
        } else if (size as usize) < d.len() {
            b.put_cf(self.inline_cf(), key, &d[..size as usize]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: u64, id: u128) -> Record {
        Record {
            kind: FileKind::File,
            mode: 0o644,
            size,
            file_id: id,
            nlink: 1,
            ctime_ns: 1,
            mtime_ns: 1,
            atime_ns: 1,
            target: String::new(),
            uid: 0,
            gid: 0,
        }
    }

    /// Inline data lives and dies with its record: create, read back, truncate cuts
    /// it, rename-over and unlink drop it, drop_inline checks the file id.
    #[test]
    fn inline_data_follows_its_record() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        s.create_inline("/f", &file(5, 7), b"hello").unwrap();
        assert_eq!(s.create_inline("/f", &file(1, 8), b"x"), Err(libc::EEXIST));
        assert_eq!(s.create_inline("/g", &file(9, 8), b"x"), Err(libc::EINVAL), "size must be the data's");
        let big = vec![1u8; INLINE_BYTES_MAX + 1];
        assert_eq!(s.create_inline("/g", &file(big.len() as u64, 8), &big), Err(libc::EINVAL));
        let (r, data) = s.get_with_data("/f").unwrap().unwrap();
        assert_eq!((r.size, data.as_deref()), (5, Some(&b"hello"[..])));
        // Stat stays the record alone.
        assert_eq!(s.get("/f").unwrap().unwrap().size, 5);
        s.truncate("/f", 2, 3).unwrap();
        assert_eq!(s.get_with_data("/f").unwrap().unwrap().1.as_deref(), Some(&b"he"[..]));
        s.truncate("/f", 100, 4).unwrap();
        let (r, data) = s.get_with_data("/f").unwrap().unwrap();
        assert_eq!((r.size, data.as_deref()), (100, Some(&b"he"[..])), "growth reads as zeros past the data");
        assert_eq!(s.drop_inline("/f", 8), Err(libc::ESTALE));
        s.drop_inline("/f", 7).unwrap();
        assert_eq!(s.get_with_data("/f").unwrap().unwrap().1, None);
        // Replacing a record (rename over it) drops its data; so does unlink.
        s.create_inline("/a", &file(3, 9), b"abc").unwrap();
        s.put_record("/a", &file(0, 10), true).unwrap();
        assert_eq!(s.get_with_data("/a").unwrap().unwrap().1, None);
        s.create_inline("/b", &file(3, 11), b"abc").unwrap();
        s.remove("/b", false).unwrap();
        s.create("/b", &file(0, 12), true).unwrap();
        assert_eq!(s.get_with_data("/b").unwrap().unwrap().1, None, "a new file at the path starts without data");
        s.create_inline("/c", &file(3, 13), b"abc").unwrap();
        s.remove_records(&["/c".to_string()]).unwrap();
        assert_eq!(s.get_with_data("/c").unwrap(), None);
        // Listings never see the inline family.
        let (page, _) = s.read_dir("/", None, 100, usize::MAX).unwrap();
        assert_eq!(page.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(), vec!["a", "b", "f"]);
        // Empty data makes an ordinary empty file.
        s.create_inline("/e", &file(0, 14), b"").unwrap();
        assert_eq!(s.get_with_data("/e").unwrap().unwrap().1, None);
    }
}
