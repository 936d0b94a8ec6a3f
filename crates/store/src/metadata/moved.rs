//! Records that leave this daemon for another when the layout changes (`gust
//! expand`, `gust shrink`; gust-daemon's moves/): read in key order as stored,
//! each with its inline data; put on their new daemon as given; deleted here once
//! it has them. Values are copied as RocksDB returns them (merges applied), so a
//! record arrives as it is, whatever its history of size merges.

use super::MetadataStore;
use crate::Res;
use rocksdb::WriteBatch;

/// A record as stored: key, value, inline data if any.
pub type RawRecord = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);
/// A record to put: key, value, inline data if any.
pub type RawRecordRef<'a> = (&'a [u8], &'a [u8], Option<&'a [u8]>);

impl MetadataStore {
    /// Up to `max` records after key `after` (from the first if None), in key
    /// order, with their inline data.
    pub fn raw_page(&self, after: Option<&[u8]>, max: usize) -> Res<Vec<RawRecord>> {
        Ok(self.raw_page_where(after, max, |_| true)?.0)
    }

    /// `raw_page` of the records `want` chooses by key (their inline data read
    /// only for those), and the last key looked at, to go on after: None when no
    /// record is left after `after`. Up to `max` records are looked at.
    pub fn raw_page_where(
        &self,
        after: Option<&[u8]>,
        max: usize,
        mut want: impl FnMut(&[u8]) -> bool,
    ) -> Res<(Vec<RawRecord>, Option<Vec<u8>>)> {
        let start = after.map(|a| {
            let mut k = a.to_vec();
            k.push(0);
            k
        });
        let mode = match &start {
            Some(k) => rocksdb::IteratorMode::From(k, rocksdb::Direction::Forward),
            None => rocksdb::IteratorMode::Start,
        };
        let (mut out, mut last, mut seen) = (Vec::new(), None, 0);
        for item in self.db.iterator_cf(self.records_cf(), mode) {
            let (k, v) = item.map_err(Self::db_err)?;
            if want(&k) {
                let inline = self.db.get_cf(self.inline_cf(), &k).map_err(Self::db_err)?;
                out.push((k.to_vec(), v.to_vec(), inline));
            }
            last = Some(k.to_vec());
            seen += 1;
            if seen >= max {
                break;
            }
        }
        Ok((out, last))
    }

    /// Puts records as given (replacing what is under their keys), atomically.
    pub fn put_raw(&self, records: &[RawRecordRef<'_>]) -> Res<()> {
        let keys: Vec<Vec<u8>> = records.iter().map(|(k, _, _)| k.to_vec()).collect();
        if keys.iter().any(|k| k.is_empty() || !k.contains(&0)) {
            return Err(libc::EINVAL);
        }
        let _guards = self.lock_stripes(&keys);
        let mut b = WriteBatch::default();
        for (k, v, inline) in records {
            if v.is_empty() {
                return Err(libc::EINVAL);
            }
            crate::record::decode_checked(k, v)?;
            b.put(k, v);
            match inline {
                Some(d) => b.put_cf(self.inline_cf(), k, d),
                None => b.delete_cf(self.inline_cf(), k),
            }
        }
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)
    }

    /// Deletes records (and their inline data) by key, atomically.
    pub fn delete_raw(&self, keys: &[Vec<u8>]) -> Res<()> {
        let _guards = self.lock_stripes(keys);
        let mut b = WriteBatch::default();
        for k in keys {
            b.delete(k);
            b.delete_cf(self.inline_cf(), k);
        }
        self.db.write_opt(b, &self.write_opts).map_err(Self::db_err)
    }
}
