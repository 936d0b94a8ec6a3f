//! Fences on disk: the column family `fences` of the metadata store, one key per
//! daemon fenced here (its id, u32 big endian), empty value, written with a synced
//! WAL so that a fence outlives this daemon's crash (docs/DESIGN.md, "Fencing").
//!
//! Not for: what a fence means for heartbeats and leases (gust-daemon, fence.rs).

use crate::metadata::MetadataStore;
use crate::Res;
use rocksdb::{ColumnFamily, Options, WriteOptions};

/// Name of the column family holding fences: key the fenced daemon's id (u32 big
/// endian), empty value.
pub const FENCES_CF: &str = "fences";

pub fn family_options() -> Options {
    Options::default()
}

impl MetadataStore {
    fn fences_cf(&self) -> &ColumnFamily {
        self.db.cf_handle(FENCES_CF).expect("the fences family is opened with the store")
    }

    /// The daemons fenced here.
    pub fn fences(&self) -> Res<Vec<u32>> {
        let mut v = Vec::new();
        for kv in self.db.iterator_cf(self.fences_cf(), rocksdb::IteratorMode::Start) {
            let (k, _) = kv.map_err(Self::db_err)?;
            if let Ok(b) = <[u8; 4]>::try_from(&k[..]) {
                v.push(u32::from_be_bytes(b));
            }
        }
        Ok(v)
    }

    /// Records (`fenced`) or forgets a fence, durably: the WAL is synced, so a fence
    /// survives this daemon's node crashing right after the client was told.
    pub fn set_fence(&self, daemon: u32, fenced: bool) -> Res<()> {
        let mut o = WriteOptions::default();
        o.set_sync(true);
        let k = daemon.to_be_bytes();
        let r = if fenced {
            self.db.put_cf_opt(self.fences_cf(), k, [], &o)
        } else {
            self.db.delete_cf_opt(self.fences_cf(), k, &o)
        };
        r.map_err(Self::db_err)
    }
}
