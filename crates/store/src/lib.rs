//! What a GustFS daemon keeps on its node, under its root directory: the metadata
//! store (`metadata/`, one RocksDB: records, the inline data of small files, fences)
//! and the chunk store (`chunks/`, one sparse local file per file it holds chunks
//! of), with the on-disk record codec and key layout they are written in.
//!
//! * `record`: the record value, byte by byte (format 2; format 1 still read). Pure.
//! * `keys`: `parent | 0x00 | name`, and the key ranges of a directory. Pure.
//! * `metadata`: the store of records, its merge operator and staging's records.
//! * `inline`: small files' data beside their records (column family `inline`).
//! * `fences`: which daemons clients fenced here (column family `fences`).
//! * `chunks`: the chunk store.
//! * `sums`: checksums of the chunk store's blocks, verified on every read.
//! * `rebuild`: a daemon's stores emptied and filled again (`gust repair`).
//! * `root_lock`: one process at a time owns a root directory (daemon or repair).
//!
//! Every operation answers an errno ([`Res`]): the daemon sends it to the client as
//! is. The formats are documented where they are written (record.rs, keys.rs,
//! metadata/merge.rs, chunks.rs) and in docs/DESIGN.md; a change to any of them is a
//! change of the on-disk format, and needs a new format number.
//!
//! Without the `rocksdb` feature (on by default) only `record`, `keys` and `chunks`
//! build, for the fuzz targets (fuzz/), which must not compile RocksDB.
//!
//! Not for: requests, replies and who may ask what (gust-daemon), placement
//! (gust-placement), fencing policy and leases (gust-daemon, fence.rs and lease.rs).

pub mod chunk_file;
pub mod chunks;
#[cfg(feature = "rocksdb")]
pub mod fences;
#[cfg(feature = "rocksdb")]
pub mod inline;
pub mod keys;
#[cfg(feature = "rocksdb")]
pub mod metadata;
#[cfg(feature = "rocksdb")]
pub mod rebuild;
pub mod record;
pub mod root_lock;
pub mod sums;

/// errno-valued result of every store operation (and of the daemon's requests).
pub type Res<T> = Result<T, i32>;

/// The metadata store's directory under a daemon's root directory.
pub const METADATA_DIR: &str = "metadata";
/// The chunk store's directory under a daemon's root directory.
pub const CHUNKS_DIR: &str = "chunks";
