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

use crate::keys::{key_of, key_or_root};
use crate::metadata::MetadataStore;
use crate::record::{decode_checked, encode_record, root_record};
use crate::Res;
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
    // Lookups here are seeks (an iterator pins the value; see get_with_data_pinned),
    // and a seek uses no bloom filter unless the family has a prefix extractor: then
    // it skips every table and memtable whose filter rules its prefix out. The whole
    // key is the prefix (a seek here wants one key, never a range), so each lookup
    // reads one table instead of one per level and per L0 file (a data loader's
    // daemon with 7 tables in 3 levels: docs/PERFORMANCE.md, fifth round). Tables
    // written before this had no filter and are read as before.
    bb.set_bloom_filter(10.0, false);
    o.set_block_based_table_factory(&bb);
    o.set_prefix_extractor(rocksdb::SliceTransform::create_noop());
    o.set_memtable_prefix_bloom_ratio(0.02);
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

/// A file of a batch: its record, and whether it has inline data in the batch.
pub type FoundFile = (Record, bool);

/// Inline data of a batch of files where RocksDB holds it (see
/// `get_many_with_data_pinned`): one iterator whose pinned blocks and memtables hold
/// every value of the batch, valid and unchanged by later writes while this lives.
pub struct PinnedBatch<'a> {
    /// Where each file's value lies, in request order (None: no inline data). Raw,
    /// because they borrow from `it`, which lives beside them.
    values: Vec<Option<(*const u8, usize)>>,
    it: Option<DBRawIteratorWithThreadMode<'a, DB>>,
}

impl PinnedBatch<'_> {
    /// The inline data of the batch's files that have some, in request order.
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        debug_assert!(self.it.is_some() || self.values.iter().all(Option::is_none));
        self.values.iter().flatten().map(|&(ptr, len)| {
            // SAFETY: `ptr..ptr+len` was the iterator's value after one of its seeks.
            // With `pin_data` RocksDB keeps every block an iterator has loaded, and
            // the memtables it reads, until the iterator is dropped (ReadOptions::
            // pin_data; DBIter releases pinned data on Seek only without it), and a
            // plain value (kTypeValue) is a slice of that block or memtable entry,
            // not of a buffer of the iterator's own: only merged, wide-column and
            // blob values are, and the inline family has none (no merge operator,
            // no blob files; its values are put by this file alone). `self.it`
            // lives as long as `self`, which this borrow cannot outlive.
            unsafe { std::slice::from_raw_parts(ptr, len) }
        })
    }
}

impl MetadataStore {
    /// `get_with_data_pinned` for a batch of (valid) paths, in their order: the
    /// records by one multi-get, the data by one iterator, seeking the batch's keys
    /// in order (read_many.rs). Against one lookup and one iterator per file it
    /// saves an iterator's setup per file (a merging iterator over every memtable
    /// and table) and shares the record lookups' setup. The second element of each
    /// found file is whether it has inline data in the batch.
    pub fn get_many_with_data_pinned(&self, paths: &[&str]) -> (Vec<Res<Option<FoundFile>>>, PinnedBatch<'_>) {
        let keys: Vec<Vec<u8>> = paths.iter().map(|p| key_or_root(p)).collect();
        let records: Vec<Res<Option<Record>>> = self
            .db
            .batched_multi_get_cf(self.records_cf(), &keys, false)
            .into_iter()
            .zip(paths.iter().zip(&keys))
            .map(|(got, (path, key))| match got {
                _ if *path == "/" => Ok(Some(root_record())),
                Ok(Some(v)) => decode_checked(key, &v),
                Ok(None) => Ok(None),
                Err(e) => Err(Self::db_err(e)),
            })
            .collect();
        let mut batch = PinnedBatch { values: vec![None; paths.len()], it: None };
        let mut files: Vec<usize> = (0..paths.len())
            .filter(|&i| paths[i] != "/" && matches!(&records[i], Ok(Some(r)) if r.kind == FileKind::File))
            .collect();
        let mut failed = vec![None; paths.len()];
        if !files.is_empty() {
            // As in get_with_data_pinned: no checksum pass over file data.
            let mut ro = rocksdb::ReadOptions::default();
            ro.set_verify_checksums(false);
            ro.set_pin_data(true);
            let it = batch.it.insert(self.db.raw_iterator_cf_opt(self.inline_cf(), ro));
            // In key order: neighbouring keys share index blocks and table files.
            files.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
            for i in files {
                it.seek(&keys[i]);
                if !it.valid() || it.key() != Some(&keys[i][..]) {
                    if let Err(e) = it.status() {
                        failed[i] = Some(Self::db_err(e));
                    }
                    continue;
                }
                let v = it.value().unwrap_or_default();
                if v.len() > INLINE_BYTES_MAX {
                    tracing::error!("inline data of {} is {} bytes, past the bound", paths[i], v.len());
                    failed[i] = Some(libc::EIO);
                    continue;
                }
                batch.values[i] = Some((v.as_ptr(), v.len()));
            }
        }
        let found = records
            .into_iter()
            .zip(failed)
            .zip(&batch.values)
            .map(|((rec, failed), value)| match failed {
                Some(e) => Err(e),
                None => rec.map(|r| r.map(|r| (r, value.is_some()))),
            })
            .collect();
        (found, batch)
    }

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
    /// it: a reply is written to the socket from there (gust-daemon dispatch/mod.rs), with no copy
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
        let Some(it) = self.seek_inline(&key_of(path))? else { return Ok(Some((rec, None))) };
        let len = it.value().map_or(0, |v| v.len());
        // Pair check of create_inline's bound: what is stored was bounded there.
        if len > INLINE_BYTES_MAX {
            tracing::error!("inline data of {path} is {len} bytes, past the bound");
            return Err(libc::EIO);
        }
        Ok(Some((rec, Some(PinnedData { it }))))
    }

    /// An iterator over the inline family standing on `key`'s value, whose bytes it
    /// pins (`get_with_data_pinned`); None if `key` has no inline data.
    fn seek_inline(&self, key: &[u8]) -> Res<Option<DBRawIteratorWithThreadMode<'_, DB>>> {
        // No block checksum pass over the data (up to INLINE_BYTES_MAX bytes per read,
        // ~6% of a daemon's CPU serving a data loader): chunk data has none either.
        // Records keep theirs (`get`).
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_verify_checksums(false);
        ro.set_pin_data(true);
        // Nothing past this key is of interest: the iterator stops at it.
        let mut upper = key.to_vec();
        upper.push(0);
        ro.set_iterate_upper_bound(upper);
        let mut it = self.db.raw_iterator_cf_opt(self.inline_cf(), ro);
        it.seek(key);
        if !it.valid() || it.key() != Some(key) {
            it.status().map_err(Self::db_err)?;
            return Ok(None);
        }
        Ok(Some(it))
    }

    /// Whether `key` has inline data (remove's answer), without copying it out.
    pub(crate) fn has_inline(&self, key: &[u8]) -> Res<bool> {
        Ok(self.seek_inline(key)?.is_some())
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
            xattrs: Vec::new(),
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
        assert!(s.remove("/b", false).unwrap().1, "a remove says the data was inline");
        s.create("/b", &file(0, 12), true).unwrap();
        assert_eq!(s.get_with_data("/b").unwrap().unwrap().1, None, "a new file at the path starts without data");
        s.create("/n", &file(0, 16), true).unwrap();
        s.update_size("/n", 16, 4096, None, 5).unwrap();
        assert!(!s.remove("/n", false).unwrap().1, "a file in chunks was not inline");
        s.create_inline("/m", &file(3, 15), b"abc").unwrap();
        s.drop_inline("/m", 15).unwrap();
        assert!(!s.remove("/m", false).unwrap().1, "data moved to chunks is not inline");
        assert_eq!(s.drop_inline("/m", 15), Err(libc::ENOENT), "a drop after the remove tells its client");
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

    /// A batch answers what one lookup per file answers, whatever table or memtable
    /// holds each file (the whole-key prefix bloom must not hide any), in request
    /// order; and its values stay what they were while it lives, through
    /// overwrites, removal, flushes and compaction underneath it.
    #[test]
    fn a_batch_reads_what_single_lookups_read_and_stays_pinned() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        let flush = |s: &MetadataStore| {
            s.db.flush_cf(s.inline_cf()).unwrap();
            s.db.flush().unwrap();
        };
        // Spread over three tables and the memtable.
        for (i, name) in ["/t1", "/t2", "/t3", "/m"].iter().enumerate() {
            let data = vec![b'a' + i as u8; 1000 * (i + 1)];
            s.create_inline(name, &file(data.len() as u64, i as u128 + 1), &data).unwrap();
            if *name != "/m" {
                flush(&s);
            }
        }
        s.create("/chunked", &file(1 << 20, 50), true).unwrap();
        let mut dir = file(0, 51);
        dir.kind = FileKind::Dir;
        s.create("/dir", &dir, true).unwrap();
        let paths = ["/m", "/missing", "/t2", "/", "/chunked", "/t1", "/dir", "/t3", "/t1"];
        let (found, batch) = s.get_many_with_data_pinned(&paths);
        let mut values = batch.values();
        for (path, got) in paths.iter().zip(&found) {
            let single = s.get_with_data(path).unwrap();
            match (got, single) {
                (Ok(Some((rec, true))), Some((want_rec, Some(want)))) => {
                    assert_eq!(rec, &want_rec, "{path}");
                    assert_eq!(values.next(), Some(&want[..]), "{path}");
                }
                (Ok(Some((rec, false))), Some((want_rec, None))) => assert_eq!(rec, &want_rec, "{path}"),
                (Ok(None), None) => {}
                (got, single) => panic!("{path}: batch {got:?}, single {single:?}"),
            }
        }
        assert_eq!(values.next(), None, "a value per file with data, no more");
        drop(values);
        let before: Vec<Vec<u8>> = batch.values().map(<[u8]>::to_vec).collect();
        assert_eq!(before.len(), 5);
        // Change everything underneath the batch.
        for name in ["/t1", "/t2", "/t3", "/m"] {
            s.remove(name, false).unwrap();
            s.create_inline(name, &file(3, 99), b"new").unwrap();
        }
        flush(&s);
        s.db.compact_range_cf(s.inline_cf(), None::<&[u8]>, None::<&[u8]>);
        let after: Vec<Vec<u8>> = batch.values().map(<[u8]>::to_vec).collect();
        assert_eq!(after, before, "pinned values outlive the writes, flushes and compaction after them");
        drop(batch);
        let (found, batch) = s.get_many_with_data_pinned(&["/t2"]);
        assert!(matches!(&found[0], Ok(Some((r, true))) if r.size == 3));
        assert_eq!(batch.values().collect::<Vec<_>>(), vec![&b"new"[..]]);
    }
}
