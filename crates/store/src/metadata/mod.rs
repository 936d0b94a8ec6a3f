//! The metadata store: one RocksDB per daemon, one record per file, directory or
//! symlink.
//!
//! Key: `parent path | 0x00 | name`. Every direct child of a directory therefore sits
//! in one contiguous key range (`dir | 0x00 ...`), so listing costs O(children held
//! here), never O(subtree). Descendants at any depth are the ranges `dir | 0x00` and
//! `dir | '/'`. The root directory has no record; it always exists.
//!
//! Value (format 2, little endian), 68 bytes + target:
//!
//! ```text
//! 0  u8   format (2)        1  u8  kind          2  u32 mode       6  u64 size
//! 14 u128 file id           30 u32 nlink         34 i64 ctime_ns   42 i64 mtime_ns
//! 50 i64  atime_ns          58 u32 uid           62 u32 gid        66 u16 target len
//! 68 target bytes
//! ```
//!
//! Format 3 is format 2 followed by the record's extended attributes (only a record
//! that has some is written so): each `u8 name length | u16 value length | name |
//! value`, in name order, to the end of the value (gust_proto::xattr bounds them).
//!
//! Kinds: 1 file, 2 directory, 3 symlink, 4 FIFO, 5 socket, 6 block device, 7
//! character device (its `size` field holds the device number). Format 1 (before owners
//! were stored) is the same without uid and gid (target length at 58, target at 60);
//! it is still read, as owned by the daemon's user, who owned everything then.
//!
//! An empty value is a tombstone: a size merge that arrived after the record was
//! removed leaves one, and every reader treats it as absent.
//!
//! Size grows through the merge operator (operand: `0xF1 | u64 end | i64 mtime_ns`;
//! mtime and ctime become the larger of theirs and the operand's, as a write changes
//! both), so parallel writers never race a read-modify-write. A directory's link
//! count and times follow its subdirectories the same way (operand:
//! `0xF2 | i32 subdirectories delta | i64 time_ns`; nlink never below 2), so mkdir
//! and rmdir of siblings never race either. Operations that must read
//! before writing (exclusive create, append reservation, truncate, set-attr) hold a
//! striped lock on the key; merges need no lock.
//!
//! Operands per key are bounded. Every write adds one operand, and every lookup of the
//! key (the write path's own existence check, stat, the size of a read) applies all
//! operands not yet folded into a value. Left alone they pile up in the memtable until
//! a flush, and writing a file in n pieces costs O(n^2). RocksDB's
//! `max_successive_merges` folds them at insert time: once a key has
//! [`MERGE_OPERANDS_PER_KEY_MAX`] merges at its head in the memtable, the next merge
//! reads the key and inserts the merged value instead. A lookup then applies at most
//! that many operands, whatever the file's history (measured in docs/PERFORMANCE.md,
//! "Writes in many pieces").
//!
//! Modules: `merge` (the operands and the merge operator), `staged` (staging's
//! records), the store itself here; in the crate: `record` (the value layout and its
//! checks), `keys` (key layout and ranges).
//!
//! The data of a small file may live beside its record, in the column family
//! `inline` under the same key (see `inline.rs`): every operation here that removes
//! or replaces a record removes its inline data in the same write batch, and
//! truncate cuts it. Fences live in the column family `fences` (`fences.rs`).

use gust_proto::{FileKind, Record, DIR_ENTRY_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, SCAN_PAGE_BYTES_MAX};
use rocksdb::{BlockBasedOptions, ColumnFamilyDescriptor, MergeOperands, Options, WriteBatch, WriteOptions, DB};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

const LOCK_STRIPES: usize = 1024;
/// Write-ahead log a daemon keeps at most (see `MetadataStore::open`): two
/// memtables' worth.
pub const WAL_BYTES_MAX: u64 = 128 << 20;

/// One page of `scan_tree`: (path, record) pairs, the last key returned (to resume
/// after), and whether the scan is complete.
pub type TreePage = (Vec<(String, Record)>, Option<Vec<u8>>, bool);

mod batch;
mod links;
mod merge;
mod moved;
pub use moved::RawRecord;
mod staged;

use links::refuse_name_of_linked;
pub use links::LinkCount;

use crate::keys::*;
use crate::record::{decode_checked, decode_record, encode_record, root_record};
use crate::Res;
pub use merge::MERGE_OPERANDS_PER_KEY_MAX;
use merge::*;

pub struct MetadataStore {
    pub(crate) db: DB,
    pub(crate) write_opts: WriteOptions,
    locks: Vec<Mutex<()>>,
    /// Operands applied by full merges (lookups, folds, compactions) since open: the
    /// cost that must not grow with a file's number of writes.
    merge_operands_applied: Arc<AtomicU64>,
}

/// Which names a tree scan keeps (`scan_tree_where`): those `keep` accepts, every
/// one of which starts with `prefix` (empty: no promise).
pub struct NameFilter<'a, F: Fn(&[u8]) -> bool> {
    pub prefix: &'a [u8],
    pub keep: F,
}

impl NameFilter<'static, fn(&[u8]) -> bool> {
    /// Every name.
    pub const ALL: Self = NameFilter { prefix: b"", keep: |_| true };
}

impl MetadataStore {
    pub fn open(dir: &Path) -> Result<Self, String> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let merge_operands_applied = Arc::new(AtomicU64::new(0));
        let counter = merge_operands_applied.clone();
        opts.set_merge_operator(
            "gust_size_max",
            move |key: &[u8], existing: Option<&[u8]>, ops: &MergeOperands| {
                counter.fetch_add(ops.len() as u64, Ordering::Relaxed);
                full_merge(key, existing, ops)
            },
            partial_merge,
        );
        // Safe with concurrent memtable writes: RocksDB turns them off for a write
        // group that holds a merge (db_impl_write.cc), and this fold needs them off.
        opts.set_max_successive_merges(MERGE_OPERANDS_PER_KEY_MAX);
        opts.increase_parallelism(2);
        opts.set_write_buffer_size(64 << 20);
        // A write-ahead log file is kept until every family with writes in it has
        // flushed them. Small files' data fills the inline family's memtable fast,
        // the records' family (a few hundred bytes per file) slowly: by default
        // (4 x the write buffers) a daemon that created and removed 240,000 files of
        // 4 KiB held 274 MB of logs, which on tmpfs is the node's memory. Past this
        // total, RocksDB flushes the family holding the oldest log instead.
        opts.set_max_total_wal_size(WAL_BYTES_MAX);
        // Table files are read through mmap: a lookup's block is the page cache's
        // memory, not a pread copy of it (on tmpfs or a warm SSD, most of the cost of
        // serving inline data of 100 KiB; docs/PERFORMANCE.md, data loader).
        opts.set_allow_mmap_reads(true);
        let mut bb = BlockBasedOptions::default();
        bb.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&bb);
        // The default family (records, with the size merge) is named explicitly with
        // these options: left out, RocksDB would open it with default options.
        let families = vec![
            ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, opts.clone()),
            ColumnFamilyDescriptor::new(crate::inline::INLINE_CF, crate::inline::family_options()),
            ColumnFamilyDescriptor::new(crate::fences::FENCES_CF, crate::fences::family_options()),
        ];
        let db = DB::open_cf_descriptors(&opts, dir, families)
            .map_err(|e| format!("cannot open RocksDB at {}: {e}", dir.display()))?;
        // WAL on, no sync per write: an acknowledged write is in the OS page cache and
        // survives the daemon being killed; fsync syncs the WAL for node crashes.
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(false);
        Ok(MetadataStore {
            db,
            write_opts,
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            merge_operands_applied,
        })
    }

    /// Size operands applied by full merges since the store was opened.
    pub fn merge_operands_applied(&self) -> u64 {
        self.merge_operands_applied.load(Ordering::Relaxed)
    }

    pub(crate) fn lock(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        let h = twox_hash::XxHash3_64::oneshot(key) as usize % LOCK_STRIPES;
        self.locks[h].lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn db_err(e: rocksdb::Error) -> i32 {
        tracing::error!("RocksDB error: {e}");
        if e.to_string().contains("No space") {
            libc::ENOSPC
        } else {
            libc::EIO
        }
    }

    /// The family of the records (RocksDB's default family).
    pub(crate) fn records_cf(&self) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME).expect("the default family is always open")
    }

    pub(crate) fn get_key(&self, key: &[u8]) -> Res<Option<Record>> {
        match self.db.get_pinned(key).map_err(Self::db_err)? {
            Some(v) => decode_checked(key, &v),
            None => Ok(None),
        }
    }

    fn put_key(&self, key: &[u8], r: &Record) -> Res<()> {
        self.db.put_opt(key, encode_record(r), &self.write_opts).map_err(Self::db_err)
    }

    pub fn get(&self, path: &str) -> Res<Option<Record>> {
        if path == "/" {
            return Ok(Some(root_record()));
        }
        self.get_key(&key_of(path))
    }

    pub fn create(&self, path: &str, rec: &Record, exclusive: bool) -> Res<Record> {
        if path == "/" {
            return Err(libc::EEXIST);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        if let Some(existing) = self.get_key(&key)? {
            if exclusive {
                return Err(libc::EEXIST);
            }
            return Ok(existing);
        }
        self.put_key(&key, rec)?;
        Ok(rec.clone())
    }

    /// Removes the record at `path` and its inline data; returns the record and
    /// whether the file's data was inline (then it has no chunks: `Response::Removed`).
    pub fn remove(&self, path: &str, want_dir: bool) -> Res<(Record, bool)> {
        if path == "/" {
            return Err(libc::EBUSY);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        match (want_dir, rec.kind == FileKind::Dir) {
            (true, false) => return Err(libc::ENOTDIR),
            (false, true) => return Err(libc::EISDIR),
            _ => {}
        }
        let inline = rec.kind == FileKind::File && rec.size > 0 && self.has_inline(&key)?;
        let mut b = WriteBatch::default();
        b.delete(&key);
        b.delete_cf(self.inline_cf(), &key);
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok((rec, inline))
    }

    /// Grows the size to at least `end`; with `append_len`, reserves bytes at the end
    /// and returns their offset.
    pub fn update_size(&self, path: &str, file_id: u128, end: u64, append_len: Option<u64>, mtime_ns: i64) -> Res<u64> {
        if path == "/" {
            return Err(libc::EISDIR);
        }
        let key = key_of(path);
        match append_len {
            None => {
                // An existence check (a memtable or bloom-filtered lookup), not a
                // read-modify-write: the size change itself is still a merge.
                let rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
                if rec.file_id != file_id {
                    return Err(libc::ESTALE);
                }
                refuse_name_of_linked(&rec)?;
                self.db.merge_opt(&key, grow_operand(end, mtime_ns), &self.write_opts).map_err(Self::db_err)?;
                Ok(end)
            }
            Some(len) => {
                // Appenders serialize on the key's lock so each sees the others'
                // reservations; plain writers' merges stay lock-free and commute.
                let _g = self.lock(&key);
                let rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
                if rec.file_id != file_id {
                    return Err(libc::ESTALE);
                }
                refuse_name_of_linked(&rec)?;
                let offset = rec.size;
                let new_end = offset.checked_add(len).ok_or(libc::EFBIG)?;
                self.db.merge_opt(&key, grow_operand(new_end, mtime_ns), &self.write_opts).map_err(Self::db_err)?;
                Ok(offset)
            }
        }
    }

    /// A subdirectory of `dir` was made, removed or moved: its link count changes by
    /// `subdirs_delta` and its times become at least `time_ns`, as a merge (siblings'
    /// mkdirs never race). The root has no record; its count is not kept.
    pub fn dir_changed(&self, dir: &str, subdirs_delta: i32, time_ns: i64) -> Res<()> {
        if dir == "/" {
            return Ok(());
        }
        let key = key_of(dir);
        let rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        if rec.kind != FileKind::Dir {
            return Err(libc::ENOTDIR);
        }
        self.db.merge_opt(&key, dir_operand(subdirs_delta, time_ns), &self.write_opts).map_err(Self::db_err)
    }

    pub fn truncate(&self, path: &str, size: u64, mtime_ns: i64) -> Res<Record> {
        if path == "/" {
            return Err(libc::EISDIR);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let old = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        if old.kind == FileKind::Dir {
            return Err(libc::EISDIR);
        }
        refuse_name_of_linked(&old)?;
        if old.kind != FileKind::File {
            return Err(libc::EINVAL);
        }
        let mut new = old.clone();
        new.size = size;
        new.mtime_ns = mtime_ns;
        new.ctime_ns = mtime_ns;
        let mut b = WriteBatch::default();
        b.put(&key, encode_record(&new));
        self.cut_inline(&mut b, &key, size)?;
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok(old)
    }

    pub fn set_attr(
        &self,
        path: &str,
        mode: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        ctime: i64,
    ) -> Res<Record> {
        if path == "/" {
            // The root's attributes are fixed; accept the call as a no-op.
            return Ok(root_record());
        }
        self.update(path, |rec| {
            if let Some(m) = mode {
                rec.mode = m & 0o7777;
            }
            if let Some(a) = atime {
                rec.atime_ns = a;
            }
            if let Some(m) = mtime {
                rec.mtime_ns = m;
            }
            rec.ctime_ns = ctime;
            Ok(())
        })
    }

    /// Changes the attributes of the record at `path` under its key's lock (a name
    /// of a linked file refuses: links.rs); returns the record after.
    fn update(&self, path: &str, change: impl FnOnce(&mut Record) -> Res<()>) -> Res<Record> {
        let key = key_of(path);
        let _g = self.lock(&key);
        let mut rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
        refuse_name_of_linked(&rec)?;
        change(&mut rec)?;
        self.put_key(&key, &rec)?;
        Ok(rec)
    }

    /// chown: sets the owner and/or group. On a non-directory it clears S_ISUID, and
    /// S_ISGID if the group may execute (Linux's rule; S_ISGID without group execute
    /// marks mandatory locking and stays).
    pub fn set_owner(&self, path: &str, uid: Option<u32>, gid: Option<u32>, ctime: i64) -> Res<Record> {
        if path == "/" {
            // The root's attributes are fixed; accept the call as a no-op.
            return Ok(root_record());
        }
        self.update(path, |rec| {
            if let Some(u) = uid {
                rec.uid = u;
            }
            if let Some(g) = gid {
                rec.gid = g;
            }
            // Linux clears them on every chown of a non-directory, even chown(f, -1, -1).
            if rec.kind != FileKind::Dir {
                rec.mode &= !libc::S_ISUID;
                if rec.mode & libc::S_IXGRP != 0 {
                    rec.mode &= !libc::S_ISGID;
                }
            }
            rec.ctime_ns = ctime;
            Ok(())
        })
    }

    /// setxattr (`value` Some) or removexattr (None) of attribute `name` with
    /// setxattr's `flags`, setting ctime (gust_proto::xattr). EPERM for a record
    /// that is not a file or directory; EOPNOTSUPP for the root, whose attributes
    /// are fixed.
    pub fn set_xattr(&self, path: &str, name: &str, value: Option<&[u8]>, flags: u32, ctime: i64) -> Res<Record> {
        if path == "/" {
            return Err(libc::EOPNOTSUPP);
        }
        self.update(path, |rec| {
            if !matches!(rec.kind, FileKind::File | FileKind::Dir) {
                return Err(libc::EPERM);
            }
            gust_proto::xattr::apply(&mut rec.xattrs, name, value, flags)?;
            rec.ctime_ns = ctime;
            Ok(())
        })
    }

    /// Puts a full record (rename's target). Without `replace`, EEXIST if present.
    /// With it, a file may replace a non-directory and a directory may replace a
    /// directory (the caller checked it is empty).
    pub fn put_record(&self, path: &str, rec: &Record, replace: bool) -> Res<Option<Record>> {
        if path == "/" {
            return Err(libc::EBUSY);
        }
        let key = key_of(path);
        let _g = self.lock(&key);
        let old = self.get_key(&key)?;
        if let Some(o) = &old {
            if !replace {
                return Err(libc::EEXIST);
            }
            match (rec.kind == FileKind::Dir, o.kind == FileKind::Dir) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                _ => {}
            }
        }
        // The data inline at this key, if any, belonged to the record replaced.
        let mut b = WriteBatch::default();
        b.put(&key, encode_record(rec));
        b.delete_cf(self.inline_cf(), &key);
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok(old)
    }

    pub fn read_dir(
        &self,
        dir: &str,
        after: Option<&str>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Res<(Vec<(String, FileKind)>, bool)> {
        let (page, done) = self.read_dir_plus(dir, after, max_entries, max_bytes, false)?;
        Ok((page.into_iter().map(|(n, r)| (n, r.kind)).collect(), done))
    }

    /// One page of the direct children of `dir` with their records. Bytes count as
    /// readdir's (name + DIR_ENTRY_OVERHEAD_BYTES) or, `with_records`, as a record
    /// page's (name + target + RECORD_OVERHEAD_BYTES), so either page fits a frame.
    pub fn read_dir_plus(
        &self,
        dir: &str,
        after: Option<&str>,
        max_entries: usize,
        max_bytes: usize,
        with_records: bool,
    ) -> Res<(Vec<(String, Record)>, bool)> {
        let prefix = children_prefix(dir);
        let mut start = prefix.clone();
        if let Some(a) = after {
            start.extend_from_slice(a.as_bytes());
            start.push(0); // strictly after `a`
        }
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_iterate_upper_bound(prefix_end(&prefix));
        let it = self.db.iterator_opt(rocksdb::IteratorMode::From(&start, rocksdb::Direction::Forward), ro);
        let mut out = Vec::new();
        let mut bytes = 0;
        for item in it {
            let (k, v) = item.map_err(Self::db_err)?;
            let Some(rec) = decode_checked(&k, &v)? else { continue };
            if out.len() >= max_entries || bytes >= max_bytes {
                return Ok((out, false));
            }
            let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
            bytes += name.len()
                + if with_records { rec.payload_bytes() + RECORD_OVERHEAD_BYTES } else { DIR_ENTRY_OVERHEAD_BYTES };
            out.push((name, rec));
        }
        Ok((out, true))
    }

    pub fn has_children(&self, dir: &str) -> Res<bool> {
        let (page, _) = self.read_dir(dir, None, 1, usize::MAX)?;
        Ok(!page.is_empty())
    }

    /// All descendants of `dir` held here, in key order, one page at a time: at most
    /// `max_entries` records and about `SCAN_PAGE_BYTES_MAX` bytes (see gust_proto).
    pub fn scan_tree(&self, dir: &str, after: Option<&[u8]>, max_entries: usize) -> Res<TreePage> {
        self.scan_tree_where(dir, after, max_entries, usize::MAX, NameFilter::ALL, |_| true)
    }

    /// The descendants of `dir` held here whose last path component passes
    /// `names` and whose record passes `keep`, one page at a time: as `scan_tree`,
    /// and besides the page stops after `max_keys` keys examined (matching or not),
    /// with `last_key` the last one examined, so a query that matches little still
    /// answers in bounded time. The name is judged on the key alone, before the
    /// record is decoded, and the record before the path is built: a key that fails
    /// costs no allocation (a raw iterator lends the key and value in place).
    /// Every name `names.keep` accepts must start with `names.prefix` (a glob's
    /// literal prefix; empty: no promise): the scan then seeks past the names of each
    /// directory that cannot match instead of stepping over them, so `-name 'f1*'`
    /// costs a few seeks per directory, not a step per key. A seek counts as one key
    /// examined.
    pub fn scan_tree_where(
        &self,
        dir: &str,
        after: Option<&[u8]>,
        max_entries: usize,
        max_keys: usize,
        names: NameFilter<impl Fn(&[u8]) -> bool>,
        keep: impl Fn(&Record) -> bool,
    ) -> Res<TreePage> {
        let NameFilter { prefix: name_prefix, keep: keep_name } = names;
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut examined = 0;
        // The last key examined, copied into one reused buffer (the raw iterator's
        // key is gone once it moves on).
        let mut last: Vec<u8> = Vec::new();
        let mut any = false;
        let mut target: Vec<u8> = Vec::new();
        for (lo, hi) in tree_ranges(dir) {
            let Some(start) = resume_point(after, &lo, &hi) else { continue };
            let mut ro = rocksdb::ReadOptions::default();
            ro.set_iterate_upper_bound(hi.clone());
            let mut it = self.db.raw_iterator_opt(ro);
            it.seek(&start);
            while let Some(k) = it.key() {
                if out.len() >= max_entries || bytes >= SCAN_PAGE_BYTES_MAX || examined >= max_keys {
                    return Ok((out, any.then_some(last), false));
                }
                examined += 1;
                last.clear();
                last.extend_from_slice(k);
                any = true;
                let z = k.iter().position(|&b| b == 0).unwrap_or(k.len());
                let name = k.get(z + 1..).unwrap_or_default();
                if !name_prefix.is_empty() && !name.starts_with(name_prefix) {
                    seek_target(&mut target, &k[..z], name, name_prefix);
                    it.seek(&target);
                    continue;
                }
                if keep_name(name) {
                    if let Some(rec) = decode_checked(k, it.value().unwrap_or_default())?.filter(|r| keep(r)) {
                        if let Some(p) = path_of(k) {
                            bytes += p.len() + rec.payload_bytes() + RECORD_OVERHEAD_BYTES;
                            out.push((p, rec));
                        }
                    }
                }
                it.next();
            }
            it.status().map_err(Self::db_err)?;
        }
        Ok((out, any.then_some(last), true))
    }

    /// Puts records that must all be new, atomically (one write batch). The keys'
    /// locks are taken in sorted stripe order, so concurrent batches cannot deadlock.
    pub fn put_records(&self, records: &[(String, Record)]) -> Res<()> {
        let keys: Vec<Vec<u8>> = records.iter().map(|(p, _)| if p == "/" { Vec::new() } else { key_of(p) }).collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(libc::EEXIST);
        }
        let _guards = self.lock_stripes(&keys);
        let mut b = WriteBatch::default();
        for (k, (_, r)) in keys.iter().zip(records) {
            if self.get_key(k)?.is_some() {
                return Err(libc::EEXIST);
            }
            b.put(k, encode_record(r));
        }
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)
    }

    pub fn remove_records(&self, paths: &[String]) -> Res<()> {
        let mut b = WriteBatch::default();
        for p in paths {
            if p != "/" {
                let k = key_of(p);
                b.delete(&k);
                b.delete_cf(self.inline_cf(), &k);
            }
        }
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)
    }

    pub fn sync(&self) -> Res<()> {
        self.db.flush_wal(true).map_err(Self::db_err)
    }

    /// Bytes of the store: its SST files and memtables (RocksDB's own accounting).
    pub fn size_bytes(&self) -> u64 {
        let prop = |n: &str| self.db.property_int_value(n).ok().flatten().unwrap_or(0);
        prop("rocksdb.total-sst-files-size") + prop("rocksdb.cur-size-all-mem-tables")
    }

    pub fn estimate_records(&self) -> u64 {
        self.db.property_int_value("rocksdb.estimate-num-keys").ok().flatten().unwrap_or(0)
    }
}

/// The key ranges holding the descendants of `dir`, each as (first key, end):
/// `dir\0...` (direct children) then `dir/...` (deeper), since 0x00 < '/'. For the
/// root every key is a descendant.
fn tree_ranges(dir: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    if dir == "/" {
        vec![(Vec::new(), vec![0xFF; 8])]
    } else {
        let a = children_prefix(dir);
        let mut b = dir.as_bytes().to_vec();
        b.push(b'/');
        vec![(a.clone(), prefix_end(&a)), (b.clone(), prefix_end(&b))]
    }
}

/// Where a scan of the range [`lo`, `hi`) starts: strictly after `after` if that
/// lies in it, at `lo` if before; None if the range is all at or before `after`.
fn resume_point(after: Option<&[u8]>, lo: &[u8], hi: &[u8]) -> Option<Vec<u8>> {
    match after {
        Some(a) if a >= lo => {
            if a >= hi {
                return None;
            }
            let mut s = a.to_vec();
            s.push(0);
            Some(s)
        }
        _ => Some(lo.to_vec()),
    }
}

/// Into `target`, the key a scan for names starting with `name_prefix` seeks to
/// from `name` in directory `parent` (a key's part before its 0 byte), which lacks
/// the prefix. Before the prefix: to the directory's first name with it. After it:
/// past the directory's names (`parent\x01`, its children's end).
fn seek_target(target: &mut Vec<u8>, parent: &[u8], name: &[u8], name_prefix: &[u8]) {
    target.clear();
    target.extend_from_slice(parent);
    if name < name_prefix {
        target.push(0);
        target.extend_from_slice(name_prefix);
    } else {
        target.push(1);
    }
}

#[cfg(test)]
mod tests;
