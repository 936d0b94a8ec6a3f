//! A daemon's stores emptied and filled again from elsewhere: `gust repair` copies
//! into them, from the serving copies, every record and chunk the daemon holds a
//! copy of, while the daemon is stopped.
//!
//! [`Rebuild::start`] removes the metadata and chunk stores under the root directory
//! and opens them empty; records are put in batches of [`RECORDS_PER_BATCH`] (one
//! write batch each, every record new), a small file's record together with its
//! inline data, chunks where their offsets say; [`Rebuild::finish`] puts what is
//! left and syncs the metadata store's WAL. Only one process may hold the stores:
//! the caller holds the root directory's lock ([`RootLock`]) for as long as the
//! rebuild runs, so no daemon opens the stores meanwhile.
//!
//! Not for: deciding what the daemon must hold, or reading it from the other copies
//! (gust-cli, repair.rs).

use crate::chunks::ChunkStore;
use crate::metadata::MetadataStore;
use crate::root_lock::RootLock;
use crate::{Res, CHUNKS_DIR, METADATA_DIR};
use gust_proto::{Record, Span};
use std::path::Path;

/// Records put into the store per write batch.
pub const RECORDS_PER_BATCH: usize = 1024;

/// A daemon's stores being filled (`start`, `put_*`, `finish`).
pub struct Rebuild {
    metadata: MetadataStore,
    chunks: ChunkStore,
    batch: Vec<(String, Record)>,
    records: usize,
    chunk_bytes: u64,
    _root: RootLock,
}

impl Rebuild {
    /// Empties the stores under `rootdir` and opens them, holding `root` (the root
    /// directory's lock: no daemon serves from it) until `finish`. The error says
    /// what failed, in which root directory.
    pub fn start(rootdir: &Path, root: RootLock) -> Result<Rebuild, String> {
        let io = |what: &str, err: std::io::Error| format!("{what} in {}: {err}", rootdir.display());
        for sub in [METADATA_DIR, CHUNKS_DIR] {
            let p = rootdir.join(sub);
            if p.exists() {
                std::fs::remove_dir_all(&p).map_err(|err| io("cannot empty the old store", err))?;
            }
        }
        let metadata = MetadataStore::open(&rootdir.join(METADATA_DIR))?;
        let chunks =
            ChunkStore::open(&rootdir.join(CHUNKS_DIR)).map_err(|err| io("cannot create the chunk store", err))?;
        Ok(Rebuild { metadata, chunks, batch: Vec::new(), records: 0, chunk_bytes: 0, _root: root })
    }

    /// Puts the record of `path` (in the next write batch; at `finish` at the latest).
    /// EEXIST (when its batch is written) if the path already has one.
    pub fn put_record(&mut self, path: &str, rec: &Record) -> Res<()> {
        self.batch.push((path.to_string(), rec.clone()));
        if self.batch.len() == RECORDS_PER_BATCH {
            self.flush_records()?;
        }
        Ok(())
    }

    /// Puts a small file's record with its data, at once (`create_inline`).
    pub fn put_inline(&mut self, path: &str, rec: &Record, data: &[u8]) -> Res<()> {
        self.metadata.create_inline(path, rec, data)?;
        self.records += 1;
        Ok(())
    }

    /// Writes `data` at `offset` of the local file of `file_id` (a chunk, or the part
    /// of one that holds data).
    pub fn put_chunk(&mut self, file_id: u128, offset: u64, data: &[u8]) -> Res<()> {
        let len = u32::try_from(data.len()).map_err(|_| libc::EINVAL)?;
        self.chunks.write(file_id, &[Span { offset, len }], data)?;
        self.chunk_bytes += data.len() as u64;
        Ok(())
    }

    fn flush_records(&mut self) -> Res<()> {
        self.metadata.put_records(&self.batch)?;
        self.records += self.batch.len();
        self.batch.clear();
        Ok(())
    }

    /// Puts the records not yet written and syncs the metadata store's WAL; returns
    /// the records and chunk bytes put. The stores close when this returns.
    pub fn finish(mut self) -> Res<(usize, u64)> {
        self.flush_records()?;
        self.metadata.sync()?;
        Ok((self.records, self.chunk_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gust_proto::FileKind;

    fn file(size: u64, id: u128) -> Record {
        Record {
            kind: FileKind::File,
            mode: 0o644,
            size,
            file_id: id,
            nlink: 1,
            ctime_ns: 1,
            mtime_ns: 2,
            atime_ns: 3,
            target: String::new(),
            uid: 10,
            gid: 20,
            xattrs: Vec::new(),
        }
    }

    /// A rebuild starts from empty stores and leaves what it was given, readable by
    /// the stores a daemon opens; records past a batch are all written.
    #[test]
    fn a_rebuild_replaces_the_stores_with_what_it_was_given() {
        let d = tempfile::tempdir().unwrap();
        {
            let md = MetadataStore::open(&d.path().join(METADATA_DIR)).unwrap();
            md.create("/old", &file(0, 1), true).unwrap();
            let chunks = ChunkStore::open(&d.path().join(CHUNKS_DIR)).unwrap();
            chunks.write(1, &[Span { offset: 0, len: 3 }], b"old").unwrap();
        }
        let mut r = Rebuild::start(d.path(), RootLock::try_take(d.path()).unwrap().unwrap()).unwrap();
        let n = RECORDS_PER_BATCH + 3;
        for i in 0..n {
            r.put_record(&format!("/f{i}"), &file(4, 100 + i as u128)).unwrap();
        }
        r.put_inline("/small", &file(2, 7), b"hi").unwrap();
        r.put_chunk(100, 1 << 19, b"data").unwrap();
        assert_eq!(r.finish(), Ok((n + 1, 4)));

        let md = MetadataStore::open(&d.path().join(METADATA_DIR)).unwrap();
        assert_eq!(md.get("/old"), Ok(None), "the old store is gone");
        assert_eq!(md.get(&format!("/f{}", n - 1)).unwrap(), Some(file(4, 100 + n as u128 - 1)));
        assert_eq!(md.get_with_data("/small").unwrap(), Some((file(2, 7), Some(b"hi".to_vec()))));
        let chunks = ChunkStore::open(&d.path().join(CHUNKS_DIR)).unwrap();
        let mut out = Vec::new();
        assert_eq!(chunks.read(1, &[Span { offset: 0, len: 3 }], &mut out), Ok(vec![0]));
        assert_eq!(chunks.read(100, &[Span { offset: 1 << 19, len: 4 }], &mut out), Ok(vec![4]));
        assert_eq!(out, b"data");
    }
}
