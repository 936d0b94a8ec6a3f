//! Many records changed in one RocksDB write: a client's deferred creates of small
//! files (`create_inline_batch`) and unlinks (`remove_batch`). Each entry is checked
//! on its own and gets its own outcome, exactly as `create_inline` or `remove` would
//! give it; the entries that pass are written together, one WAL record and one
//! memtable insertion group instead of one per entry. The stripes of all keys are
//! locked first, in sorted order (as `put_records` does), so no change of one of
//! them interleaves and concurrent batches cannot deadlock.

use super::{MetadataStore, LOCK_STRIPES};
use crate::keys::{key_of, key_or_root};
use crate::record::encode_record;
use crate::Res;
use gust_proto::{FileKind, Record, INLINE_BYTES_MAX};
use rocksdb::WriteBatch;
use std::collections::HashSet;
use std::sync::MutexGuard;

impl MetadataStore {
    /// Locks the stripes of `keys`, each once, in sorted order.
    pub(crate) fn lock_stripes(&self, keys: &[Vec<u8>]) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> =
            keys.iter().map(|k| twox_hash::XxHash3_64::oneshot(k) as usize % LOCK_STRIPES).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes.iter().map(|&i| self.locks[i].lock().unwrap_or_else(|e| e.into_inner())).collect()
    }

    /// `create_inline` of every entry (path, record, data): per entry, Ok or its
    /// errno (EEXIST for a path present, or made by an earlier entry). If the write
    /// itself fails, every entry that passed gets its errno.
    pub fn create_inline_many(&self, entries: &[(&str, &Record, &[u8])]) -> Vec<Res<()>> {
        let keys: Vec<Vec<u8>> = entries.iter().map(|(p, _, _)| key_of(p)).collect();
        let _guards = self.lock_stripes(&keys);
        let mut b = WriteBatch::default();
        let mut made = HashSet::new();
        let mut out: Vec<Res<()>> = entries
            .iter()
            .zip(&keys)
            .map(|(&(path, rec, data), key)| {
                if path == "/" {
                    return Err(libc::EEXIST);
                }
                if rec.kind != FileKind::File || data.len() > INLINE_BYTES_MAX || rec.size != data.len() as u64 {
                    return Err(libc::EINVAL);
                }
                if made.contains(key) || self.get_key(key)?.is_some() {
                    return Err(libc::EEXIST);
                }
                b.put(key, encode_record(rec));
                if data.is_empty() {
                    b.delete_cf(self.inline_cf(), key);
                } else {
                    b.put_cf(self.inline_cf(), key, data);
                }
                made.insert(key.clone());
                Ok(())
            })
            .collect();
        self.write_or_fail_all(b, &mut out);
        out
    }

    /// `remove` of every path, none a directory: per path, the record as it was and
    /// whether its data was inline, or its errno (ENOENT for a path absent, or
    /// removed by an earlier entry; EISDIR; EBUSY for "/").
    pub fn remove_many(&self, paths: &[&str]) -> Vec<Res<(Record, bool)>> {
        let keys: Vec<Vec<u8>> = paths.iter().map(|p| key_or_root(p)).collect();
        let _guards = self.lock_stripes(&keys);
        let mut b = WriteBatch::default();
        let mut gone = HashSet::new();
        let mut out: Vec<Res<(Record, bool)>> = paths
            .iter()
            .zip(&keys)
            .map(|(&path, key)| {
                if path == "/" {
                    return Err(libc::EBUSY);
                }
                if gone.contains(key) {
                    return Err(libc::ENOENT);
                }
                let rec = self.get_key(key)?.ok_or(libc::ENOENT)?;
                if rec.kind == FileKind::Dir {
                    return Err(libc::EISDIR);
                }
                let inline = rec.kind == FileKind::File && rec.size > 0 && self.has_inline(key)?;
                b.delete(key);
                b.delete_cf(self.inline_cf(), key);
                gone.insert(key.clone());
                Ok((rec, inline))
            })
            .collect();
        self.write_or_fail_all(b, &mut out);
        out
    }

    /// Writes `b`; if that fails, every Ok in `out` becomes the write's errno.
    fn write_or_fail_all<T>(&self, b: WriteBatch, out: &mut [Res<T>]) {
        if b.is_empty() {
            return;
        }
        if let Err(e) = self.db.write_opt(b, &self.write_opts).map_err(Self::db_err) {
            for o in out.iter_mut().filter(|o| o.is_ok()) {
                *o = Err(e);
            }
        }
    }
}
