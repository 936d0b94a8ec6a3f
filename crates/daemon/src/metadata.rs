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
//! Kinds: 1 file, 2 directory, 3 symlink, 4 FIFO, 5 socket. Format 1 (before owners
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
//! The data of a small file may live beside its record, in the column family
//! `inline` under the same key (see `inline.rs`): every operation here that removes
//! or replaces a record removes its inline data in the same write batch, and
//! truncate cuts it.

use gust_proto::{FileKind, Record, DIR_ENTRY_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, SCAN_PAGE_BYTES_MAX};
use rocksdb::{BlockBasedOptions, ColumnFamilyDescriptor, MergeOperands, Options, WriteBatch, WriteOptions, DB};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub const VALUE_FORMAT: u8 = 2;
const VALUE_FIXED_BYTES: usize = 68;
/// Format 1: no uid and gid (read only).
const VALUE_FORMAT_1: u8 = 1;
const VALUE_FIXED_BYTES_1: usize = 60;
const MERGE_GROW: u8 = 0xF1;
const MERGE_OPERAND_BYTES: usize = 17;
const MERGE_DIR: u8 = 0xF2;
const MERGE_DIR_OPERAND_BYTES: usize = 13;
const LOCK_STRIPES: usize = 1024;
/// Bound on unfolded size operands per key in the memtable. A lookup applies at most
/// this many; one merge in this many costs an extra read of the key (a memtable hit
/// right after the previous fold). 16 keeps both below a microsecond: the fold reads
/// back at most 16 fixed 17-byte operands.
pub const MERGE_OPERANDS_PER_KEY_MAX: usize = 16;

/// One page of `scan_tree`: (path, record) pairs, the last key returned (to resume
/// after), and whether the scan is complete.
pub type TreePage = (Vec<(String, Record)>, Option<Vec<u8>>, bool);

/// errno-valued result used throughout the daemon.
pub type Res<T> = Result<T, i32>;

pub fn encode_record(r: &Record) -> Vec<u8> {
    let t = r.target.as_bytes();
    assert!(t.len() <= u16::MAX as usize, "symlink target bounded by PATH_BYTES_MAX");
    let mut v = Vec::with_capacity(VALUE_FIXED_BYTES + t.len());
    v.push(VALUE_FORMAT);
    v.push(r.kind as u8);
    v.extend_from_slice(&r.mode.to_le_bytes());
    v.extend_from_slice(&r.size.to_le_bytes());
    v.extend_from_slice(&r.file_id.to_le_bytes());
    v.extend_from_slice(&r.nlink.to_le_bytes());
    v.extend_from_slice(&r.ctime_ns.to_le_bytes());
    v.extend_from_slice(&r.mtime_ns.to_le_bytes());
    v.extend_from_slice(&r.atime_ns.to_le_bytes());
    v.extend_from_slice(&r.uid.to_le_bytes());
    v.extend_from_slice(&r.gid.to_le_bytes());
    v.extend_from_slice(&(t.len() as u16).to_le_bytes());
    v.extend_from_slice(t);
    debug_assert_eq!(decode_record(&v).as_ref(), Some(r));
    v
}

/// Decodes a stored value. `None` for a tombstone or a value this build cannot read
/// (the caller reports EIO for the latter; see `decode_checked`).
pub fn decode_record(v: &[u8]) -> Option<Record> {
    let (fixed, owner) = match v.first() {
        Some(&VALUE_FORMAT) => (VALUE_FIXED_BYTES, None),
        Some(&VALUE_FORMAT_1) => (VALUE_FIXED_BYTES_1, Some(daemon_owner())),
        _ => return None,
    };
    if v.len() < fixed {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(v[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(v[o..o + 8].try_into().unwrap());
    let kind = match v[1] {
        1 => FileKind::File,
        2 => FileKind::Dir,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        _ => return None,
    };
    let tlen = u16::from_le_bytes([v[fixed - 2], v[fixed - 1]]) as usize;
    if v.len() != fixed + tlen {
        return None;
    }
    let (uid, gid) = owner.unwrap_or_else(|| (u32_at(58), u32_at(62)));
    Some(Record {
        kind,
        mode: u32_at(2),
        size: u64_at(6),
        file_id: u128::from_le_bytes(v[14..30].try_into().unwrap()),
        nlink: u32_at(30),
        ctime_ns: u64_at(34) as i64,
        mtime_ns: u64_at(42) as i64,
        atime_ns: u64_at(50) as i64,
        target: String::from_utf8(v[fixed..].to_vec()).ok()?,
        uid,
        gid,
    })
}

/// The daemon's effective uid and gid: the owner of the root directory and of
/// records written before owners were stored.
pub fn daemon_owner() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Absent (tombstone) is `Ok(None)`; an unreadable value is EIO with a log line.
fn decode_checked(key: &[u8], v: &[u8]) -> Res<Option<Record>> {
    if v.is_empty() {
        return Ok(None);
    }
    match decode_record(v) {
        Some(r) => Ok(Some(r)),
        None => {
            tracing::error!("corrupt metadata record for key {:?} ({} bytes)", String::from_utf8_lossy(key), v.len());
            Err(libc::EIO)
        }
    }
}

fn grow_operand(end: u64, mtime_ns: i64) -> [u8; MERGE_OPERAND_BYTES] {
    let mut o = [0u8; MERGE_OPERAND_BYTES];
    o[0] = MERGE_GROW;
    o[1..9].copy_from_slice(&end.to_le_bytes());
    o[9..17].copy_from_slice(&mtime_ns.to_le_bytes());
    o
}

fn parse_operand(o: &[u8]) -> Option<(u64, i64)> {
    if o.len() != MERGE_OPERAND_BYTES || o[0] != MERGE_GROW {
        return None;
    }
    Some((u64::from_le_bytes(o[1..9].try_into().unwrap()), i64::from_le_bytes(o[9..17].try_into().unwrap())))
}

fn dir_operand(subdirs_delta: i32, time_ns: i64) -> [u8; MERGE_DIR_OPERAND_BYTES] {
    let mut o = [0u8; MERGE_DIR_OPERAND_BYTES];
    o[0] = MERGE_DIR;
    o[1..5].copy_from_slice(&subdirs_delta.to_le_bytes());
    o[5..13].copy_from_slice(&time_ns.to_le_bytes());
    o
}

fn parse_dir_operand(o: &[u8]) -> Option<(i32, i64)> {
    if o.len() != MERGE_DIR_OPERAND_BYTES || o[0] != MERGE_DIR {
        return None;
    }
    Some((i32::from_le_bytes(o[1..5].try_into().unwrap()), i64::from_le_bytes(o[5..13].try_into().unwrap())))
}

fn full_merge(_key: &[u8], existing: Option<&[u8]>, ops: &MergeOperands) -> Option<Vec<u8>> {
    let Some(mut rec) = existing.and_then(decode_record) else {
        // The record was removed (or never existed): stay absent, never resurrect.
        return Some(Vec::new());
    };
    for o in ops.iter() {
        if let Some((end, mtime)) = parse_operand(o) {
            rec.size = rec.size.max(end);
            rec.mtime_ns = rec.mtime_ns.max(mtime);
            rec.ctime_ns = rec.ctime_ns.max(mtime);
        } else if let Some((delta, time)) = parse_dir_operand(o) {
            if rec.kind == FileKind::Dir {
                rec.nlink = (rec.nlink as i64 + delta as i64).clamp(2, u32::MAX as i64) as u32;
                rec.mtime_ns = rec.mtime_ns.max(time);
                rec.ctime_ns = rec.ctime_ns.max(time);
            }
        }
    }
    Some(encode_record(&rec))
}

/// Folds size operands into one; a mix with directory operands stays unfolded
/// (RocksDB keeps the operands and the full merge applies them in order).
fn partial_merge(_key: &[u8], _existing: Option<&[u8]>, ops: &MergeOperands) -> Option<Vec<u8>> {
    let mut end = 0u64;
    let mut mtime = i64::MIN;
    for o in ops.iter() {
        let (e, m) = parse_operand(o)?;
        end = end.max(e);
        mtime = mtime.max(m);
    }
    Some(grow_operand(end, mtime).to_vec())
}

pub fn key_of(path: &str) -> Vec<u8> {
    debug_assert!(path.starts_with('/') && path != "/");
    let slash = path.rfind('/').expect("validated paths start with '/'");
    let parent = if slash == 0 { "/" } else { &path[..slash] };
    let mut k = Vec::with_capacity(path.len() + 1);
    k.extend_from_slice(parent.as_bytes());
    k.push(0);
    k.extend_from_slice(&path.as_bytes()[slash + 1..]);
    k
}

pub fn path_of(key: &[u8]) -> Option<String> {
    let z = key.iter().position(|&b| b == 0)?;
    let parent = std::str::from_utf8(&key[..z]).ok()?;
    let name = std::str::from_utf8(&key[z + 1..]).ok()?;
    Some(if parent == "/" { format!("/{name}") } else { format!("{parent}/{name}") })
}

fn children_prefix(dir: &str) -> Vec<u8> {
    let mut p = dir.as_bytes().to_vec();
    p.push(0);
    p
}

/// Smallest key greater than every key with prefix `p`.
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut e = p.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xFF {
            e.push(last + 1);
            return e;
        }
    }
    vec![0xFF; p.len() + 1]
}

pub fn root_record() -> Record {
    let (uid, gid) = daemon_owner();
    Record {
        kind: FileKind::Dir,
        mode: 0o777,
        size: 0,
        file_id: 0,
        nlink: 2,
        ctime_ns: 0,
        mtime_ns: 0,
        atime_ns: 0,
        target: String::new(),
        uid,
        gid,
    }
}

pub struct MetadataStore {
    pub(crate) db: DB,
    pub(crate) write_opts: WriteOptions,
    locks: Vec<Mutex<()>>,
    /// Operands applied by full merges (lookups, folds, compactions) since open: the
    /// cost that must not grow with a file's number of writes.
    merge_operands_applied: Arc<AtomicU64>,
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
        let mut bb = BlockBasedOptions::default();
        bb.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&bb);
        // The default family (records, with the size merge) is named explicitly with
        // these options: left out, RocksDB would open it with default options.
        let families = vec![
            ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, opts.clone()),
            ColumnFamilyDescriptor::new(crate::inline::INLINE_CF, crate::inline::family_options()),
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
        let h = xxhash_rust::xxh3::xxh3_64(key) as usize % LOCK_STRIPES;
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

    pub fn remove(&self, path: &str, want_dir: bool) -> Res<Record> {
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
        let mut b = WriteBatch::default();
        b.delete(&key);
        b.delete_cf(self.inline_cf(), &key);
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)?;
        Ok(rec)
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
        let key = key_of(path);
        let _g = self.lock(&key);
        let mut rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
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
        let key = key_of(path);
        let _g = self.lock(&key);
        let mut rec = self.get_key(&key)?.ok_or(libc::ENOENT)?;
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
        self.put_key(&key, &rec)?;
        Ok(rec)
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
                + if with_records { rec.target.len() + RECORD_OVERHEAD_BYTES } else { DIR_ENTRY_OVERHEAD_BYTES };
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
        self.scan_tree_where(dir, after, max_entries, usize::MAX, |_| true, |_, _| true)
    }

    /// The descendants of `dir` held here for which `keep(path, record)` holds, one
    /// page at a time: as `scan_tree`, and besides the page stops after `max_keys`
    /// keys examined (matching or not), with `last_key` the last one examined, so a
    /// query that matches little still answers in bounded time. `keep_name` sees the
    /// last path component first, before the record is decoded and the path built.
    pub fn scan_tree_where(
        &self,
        dir: &str,
        after: Option<&[u8]>,
        max_entries: usize,
        max_keys: usize,
        keep_name: impl Fn(&[u8]) -> bool,
        keep: impl Fn(&str, &Record) -> bool,
    ) -> Res<TreePage> {
        // Ranges: `dir\0...` (direct children) then `dir/...` (deeper), since 0x00 < '/'.
        // For the root every key is a descendant.
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = if dir == "/" {
            vec![(Vec::new(), vec![0xFF; 8])]
        } else {
            let a = children_prefix(dir);
            let mut b = dir.as_bytes().to_vec();
            b.push(b'/');
            vec![(a.clone(), prefix_end(&a)), (b.clone(), prefix_end(&b))]
        };
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut examined = 0;
        let mut last: Option<Vec<u8>> = None;
        for (lo, hi) in ranges {
            let start = match after {
                Some(a) if a >= lo.as_slice() => {
                    if a >= hi.as_slice() {
                        continue;
                    }
                    let mut s = a.to_vec();
                    s.push(0);
                    s
                }
                _ => lo.clone(),
            };
            let mut ro = rocksdb::ReadOptions::default();
            ro.set_iterate_upper_bound(hi.clone());
            for item in self.db.iterator_opt(rocksdb::IteratorMode::From(&start, rocksdb::Direction::Forward), ro) {
                let (k, v) = item.map_err(Self::db_err)?;
                if out.len() >= max_entries || bytes >= SCAN_PAGE_BYTES_MAX || examined >= max_keys {
                    return Ok((out, last, false));
                }
                examined += 1;
                last = Some(k.to_vec());
                let name = k.iter().position(|&b| b == 0).map(|z| &k[z + 1..]).unwrap_or_default();
                if !keep_name(name) {
                    continue;
                }
                let Some(rec) = decode_checked(&k, &v)? else { continue };
                let Some(p) = path_of(&k) else { continue };
                if !keep(&p, &rec) {
                    continue;
                }
                bytes += p.len() + rec.target.len() + RECORD_OVERHEAD_BYTES;
                out.push((p, rec));
            }
        }
        Ok((out, last, true))
    }

    /// Puts records that must all be new, atomically (one write batch). The keys'
    /// locks are taken in sorted stripe order, so concurrent batches cannot deadlock.
    pub fn put_records(&self, records: &[(String, Record)]) -> Res<()> {
        let keys: Vec<Vec<u8>> = records.iter().map(|(p, _)| if p == "/" { Vec::new() } else { key_of(p) }).collect();
        if keys.iter().any(|k| k.is_empty()) {
            return Err(libc::EEXIST);
        }
        let mut stripes: Vec<usize> =
            keys.iter().map(|k| xxhash_rust::xxh3::xxh3_64(k) as usize % LOCK_STRIPES).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _guards: Vec<_> =
            stripes.iter().map(|&i| self.locks[i].lock().unwrap_or_else(|e| e.into_inner())).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: FileKind) -> Record {
        Record {
            kind,
            mode: 0o644,
            size: 0,
            file_id: 7,
            nlink: 1,
            ctime_ns: 1,
            mtime_ns: 1,
            atime_ns: 1,
            target: String::new(),
            uid: 1000,
            gid: 100,
        }
    }

    #[test]
    fn record_encoding_roundtrip_and_rejects_garbage() {
        let mut r = rec(FileKind::Symlink);
        r.target = "../x/y".into();
        assert_eq!(decode_record(&encode_record(&r)), Some(r));
        assert_eq!(decode_record(&[1, 2, 3]), None);
        let mut bad = encode_record(&rec(FileKind::File));
        bad[0] = 9;
        assert_eq!(decode_record(&bad), None);
        for kind in [FileKind::Fifo, FileKind::Socket] {
            assert_eq!(decode_record(&encode_record(&rec(kind))), Some(rec(kind)));
        }
    }

    /// A format-1 value (written before owners were stored) reads as the daemon
    /// user's, and is rewritten as format 2 by the next change.
    #[test]
    fn format_1_values_still_read() {
        let mut r = rec(FileKind::Symlink);
        r.target = "t".into();
        let v2 = encode_record(&r);
        let mut v1 = vec![VALUE_FORMAT_1];
        v1.extend_from_slice(&v2[1..58]);
        v1.extend_from_slice(&v2[66..]);
        let (uid, gid) = daemon_owner();
        assert_eq!(decode_record(&v1), Some(Record { uid, gid, ..r }));
        assert_eq!(decode_record(&v1[..v1.len() - 1]), None);
    }

    #[test]
    fn dir_changed_counts_subdirectories_and_moves_times() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        let mut dir = rec(FileKind::Dir);
        dir.nlink = 2;
        s.create("/d", &dir, true).unwrap();
        s.create("/f", &rec(FileKind::File), true).unwrap();
        for t in 0..5 {
            s.dir_changed("/d", 1, 10 + t).unwrap();
        }
        // An older time never moves the times back.
        s.dir_changed("/d", -1, 3).unwrap();
        let r = s.get("/d").unwrap().unwrap();
        assert_eq!((r.nlink, r.mtime_ns, r.ctime_ns), (6, 14, 14));
        for _ in 0..10 {
            s.dir_changed("/d", -1, 20).unwrap();
        }
        assert_eq!(s.get("/d").unwrap().unwrap().nlink, 2, "never below 2");
        s.db.flush().unwrap();
        s.dir_changed("/d", 1, 21).unwrap();
        assert_eq!(s.get("/d").unwrap().unwrap().nlink, 3);
        assert_eq!(s.dir_changed("/f", 1, 1), Err(libc::ENOTDIR));
        assert_eq!(s.dir_changed("/nope", 1, 1), Err(libc::ENOENT));
        assert_eq!(s.dir_changed("/", 1, 1), Ok(()));
        // Removed between the check and the merge: stays removed.
        s.remove("/d", true).unwrap();
        s.db.merge(key_of("/d"), dir_operand(1, 5)).unwrap();
        assert_eq!(s.get("/d").unwrap(), None);
    }

    #[test]
    fn set_owner_clears_set_id_bits_of_files_only() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        let mut f = rec(FileKind::File);
        f.mode = 0o6755;
        s.create("/f", &f, true).unwrap();
        let mut lock = rec(FileKind::File);
        lock.mode = 0o2644; // S_ISGID without group execute: kept
        s.create("/l", &lock, true).unwrap();
        let mut dir = rec(FileKind::Dir);
        dir.mode = 0o2775;
        s.create("/d", &dir, true).unwrap();
        let r = s.set_owner("/f", Some(5), None, 9).unwrap();
        assert_eq!((r.uid, r.gid, r.mode, r.ctime_ns), (5, 100, 0o755, 9));
        assert_eq!(s.set_owner("/l", None, Some(6), 9).unwrap().mode, 0o2644);
        assert_eq!(s.set_owner("/d", Some(5), Some(6), 9).unwrap().mode, 0o2775);
        assert_eq!(s.get("/f").unwrap().unwrap().uid, 5);
        assert_eq!(s.set_owner("/nope", Some(1), None, 9), Err(libc::ENOENT));
    }

    #[test]
    fn mutated_values_never_panic_the_decoder() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut r = rec(FileKind::Symlink);
        r.target = "target".into();
        let enc = encode_record(&r);
        for _ in 0..50_000 {
            let mut m = enc.clone();
            match rng.gen_range(0..3) {
                0 => {
                    let i = rng.gen_range(0..m.len());
                    m[i] = rng.gen();
                }
                1 => m.truncate(rng.gen_range(0..m.len())),
                _ => m.push(rng.gen()),
            }
            if let Some(d) = decode_record(&m) {
                // Whatever decodes in the current format must re-encode to the same
                // bytes (a format-1 value re-encodes as format 2).
                if m[0] == VALUE_FORMAT {
                    assert_eq!(encode_record(&d), m);
                }
            }
        }
    }

    #[test]
    fn keys_group_children_and_roundtrip() {
        assert_eq!(key_of("/a"), b"/\0a");
        assert_eq!(key_of("/a/b"), b"/a\0b");
        assert_eq!(path_of(&key_of("/a/b/c")).unwrap(), "/a/b/c");
        assert_eq!(path_of(&key_of("/x")).unwrap(), "/x");
    }

    #[test]
    fn merge_grows_size_and_never_resurrects() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        s.create("/f", &rec(FileKind::File), true).unwrap();
        s.update_size("/f", 7, 100, None, 5).unwrap();
        s.update_size("/f", 7, 50, None, 6).unwrap();
        assert_eq!(s.get("/f").unwrap().unwrap().size, 100);
        assert_eq!(s.update_size("/f", 7, 0, Some(10), 7).unwrap(), 100);
        assert_eq!(s.get("/f").unwrap().unwrap().size, 110);
        assert_eq!(s.update_size("/f", 8, 500, None, 8), Err(libc::ESTALE));
        s.remove("/f", false).unwrap();
        assert_eq!(s.update_size("/f", 7, 500, None, 8), Err(libc::ENOENT));
        // A merge racing the removal (checked before, merged after) leaves a
        // tombstone, never a resurrected record.
        s.db.merge(key_of("/f"), grow_operand(500, 9)).unwrap();
        assert_eq!(s.get("/f").unwrap(), None);
        // A new file at the same path starts clean.
        s.create("/f", &rec(FileKind::File), true).unwrap();
        assert_eq!(s.get("/f").unwrap().unwrap().size, 0);
    }

    /// The cost of a lookup must not grow with the number of writes before it: a stat
    /// after 10,000 size updates applies at most MERGE_OPERANDS_PER_KEY_MAX operands,
    /// whether the record is still in the memtable or was flushed before the writes.
    #[test]
    fn lookups_apply_a_bounded_number_of_size_operands() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        let writes = 10_000u64;
        for (path, flush_first) in [("/hot", false), ("/flushed", true)] {
            s.create(path, &rec(FileKind::File), true).unwrap();
            if flush_first {
                s.db.flush().unwrap();
            }
            for i in 0..writes {
                s.update_size(path, 7, (i + 1) * 100, None, i as i64).unwrap();
            }
            for _ in 0..3 {
                let before = s.merge_operands_applied();
                let r = s.get(path).unwrap().unwrap();
                let applied = s.merge_operands_applied() - before;
                assert_eq!(r.size, writes * 100, "{path}");
                assert_eq!(r.mtime_ns, writes as i64 - 1, "{path}");
                assert!(
                    applied <= MERGE_OPERANDS_PER_KEY_MAX as u64,
                    "{path}: a lookup applied {applied} operands after {writes} writes"
                );
            }
        }
        // Folding must not break the size semantics: max of all ends, truncate exact.
        s.update_size("/hot", 7, 5, None, 1).unwrap();
        assert_eq!(s.get("/hot").unwrap().unwrap().size, writes * 100);
        s.truncate("/hot", 10, 2).unwrap();
        for i in 0..100 {
            s.update_size("/hot", 7, 3 + i % 5, None, 3).unwrap();
        }
        assert_eq!(s.get("/hot").unwrap().unwrap().size, 10);
    }

    #[test]
    fn readdir_pages_and_scan_tree() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        s.create("/d", &rec(FileKind::Dir), true).unwrap();
        for i in 0..25 {
            s.create(&format!("/d/f{i:02}"), &rec(FileKind::File), true).unwrap();
        }
        s.create("/d/f00/deep", &rec(FileKind::File), true).unwrap();
        s.create("/dd", &rec(FileKind::File), true).unwrap();
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let (page, done) = s.read_dir("/d", after.as_deref(), 10, usize::MAX).unwrap();
            after = page.last().map(|e| e.0.clone());
            all.extend(page);
            if done {
                break;
            }
        }
        assert_eq!(all.len(), 25);
        let mut tree = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (page, last, done) = s.scan_tree("/d", after.as_deref(), 7).unwrap();
            tree.extend(page.into_iter().map(|p| p.0));
            after = last.or(after);
            if done {
                break;
            }
        }
        assert_eq!(tree.len(), 26);
        assert!(tree.contains(&"/d/f00/deep".to_string()));
        assert!(!tree.contains(&"/dd".to_string()));
        assert!(s.has_children("/d").unwrap());
        assert!(!s.has_children("/dd").unwrap());
    }

    /// Listing pages with records stop at their byte bound too: a page of 4096 long
    /// names with records fits one reply body; every entry comes once, with its record.
    #[test]
    fn read_dir_plus_pages_are_bounded_and_complete() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        s.create("/d", &rec(FileKind::Dir), true).unwrap();
        let n = 3_000;
        for i in 0..n {
            let mut r = rec(FileKind::File);
            r.size = i;
            s.create(&format!("/d/{i:04}{}", "x".repeat(250)), &r, true).unwrap();
        }
        let (mut seen, mut pages) = (0u64, 0);
        let mut after: Option<String> = None;
        loop {
            let max = gust_proto::READDIR_PAGE_ENTRIES_MAX as usize;
            let (page, done) =
                s.read_dir_plus("/d", after.as_deref(), max, gust_proto::READDIR_PAGE_BYTES_MAX, true).unwrap();
            let reply: gust_proto::Reply = Ok(gust_proto::Response::DirPagePlus { entries: page.clone(), done });
            assert!(gust_proto::encode(&reply).len() <= gust_proto::BODY_BYTES_MAX as usize);
            for (name, r) in &page {
                assert_eq!(r.size, name[..4].parse::<u64>().unwrap(), "{name}: its own record");
            }
            seen += page.len() as u64;
            pages += 1;
            after = page.last().map(|e| e.0.clone());
            if done {
                break;
            }
        }
        assert_eq!(seen, n);
        assert!(pages > 1, "{n} entries of ~350 counted bytes take more than one page");
    }

    /// Scan pages of long paths stop at their byte bound, so each page fits a frame
    /// (a page of 4096 paths of 1 KiB would be 4 MiB).
    #[test]
    fn scan_tree_pages_are_bounded_in_bytes() {
        let d = tempfile::tempdir().unwrap();
        let s = MetadataStore::open(d.path()).unwrap();
        let dir = format!("/{}", "d".repeat(250));
        s.create(&dir, &rec(FileKind::Dir), true).unwrap();
        let n = 1_200;
        for i in 0..n {
            s.create(&format!("{dir}/{i:04}{}", "x".repeat(240)), &rec(FileKind::File), true).unwrap();
        }
        let (mut seen, mut pages) = (0, 0);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (page, last, done) =
                s.scan_tree(&dir, after.as_deref(), gust_proto::SCAN_PAGE_ENTRIES_MAX as usize).unwrap();
            let bytes: usize = page.iter().map(|(p, r)| p.len() + r.target.len() + RECORD_OVERHEAD_BYTES).sum();
            let longest = page.iter().map(|(p, r)| p.len() + r.target.len() + RECORD_OVERHEAD_BYTES).max();
            assert!(bytes < SCAN_PAGE_BYTES_MAX + longest.unwrap_or(0), "page of {bytes} bytes");
            assert!(gust_proto::encode(&page).len() <= gust_proto::BODY_BYTES_MAX as usize);
            seen += page.len();
            pages += 1;
            after = last.or(after);
            if done {
                break;
            }
        }
        assert_eq!(seen, n);
        assert!(pages > 1, "{n} records of ~600 bytes take more than one page");
    }
}
