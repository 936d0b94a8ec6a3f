//! The chunk store: for every file this daemon holds chunks of, one sparse local file
//! in which chunk `k` sits at offset `k * chunk_size`, which is simply the file
//! offset. Holes read as zeros; truncate is one `ftruncate`; unlink is one `unlink`.
//!
//! Local files are named by file id (hex) under `chunks/<first two hex digits>/`, so
//! no client-supplied path ever reaches the local file system.

use gust_proto::Span;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::metadata::Res;

/// Bound on cached open local files; past it the cache is emptied (descriptors are
/// cheap to reopen, and the bound keeps a daemon under its RLIMIT_NOFILE).
const OPEN_FILES_MAX: usize = 2048;

pub struct ChunkStore {
    dir: PathBuf,
    open: Mutex<HashMap<u128, Arc<File>>>,
}

fn errno(e: io::Error) -> i32 {
    let n = e.raw_os_error().unwrap_or(libc::EIO);
    // A full disk, a quota or a file too large is the client's to report; anything
    // else is the local file system failing under the store.
    if ![libc::ENOSPC, libc::EDQUOT, libc::EFBIG].contains(&n) {
        tracing::error!("chunk store: {e}");
    }
    n
}

impl ChunkStore {
    pub fn open(dir: &Path) -> io::Result<Self> {
        // Owner only, as everything in the root directory (the daemon's umask says so
        // too; the explicit modes keep the store private wherever it is opened).
        let mut b = fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(dir)?;
        for i in 0..256 {
            b.create(dir.join(format!("{i:02x}")))?;
        }
        Ok(ChunkStore { dir: dir.to_path_buf(), open: Mutex::new(HashMap::new()) })
    }

    /// Bytes the local files occupy on disk (allocated blocks, so holes count
    /// nothing). A walk over every local file: for metrics, not the request path.
    pub fn disk_usage_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let mut bytes = 0;
        for i in 0..256 {
            let Ok(rd) = fs::read_dir(self.dir.join(format!("{i:02x}"))) else { continue };
            for e in rd.flatten() {
                if let Ok(m) = e.metadata() {
                    bytes += m.blocks() * 512;
                }
            }
        }
        bytes
    }

    fn path(&self, file_id: u128) -> PathBuf {
        let h = format!("{file_id:032x}");
        self.dir.join(&h[..2]).join(h)
    }

    fn file(&self, file_id: u128, create: bool) -> Res<Option<Arc<File>>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = open.get(&file_id) {
            return Ok(Some(f.clone()));
        }
        let r = OpenOptions::new().read(true).write(true).create(create).mode(0o600).open(self.path(file_id));
        match r {
            Ok(f) => {
                if open.len() >= OPEN_FILES_MAX {
                    open.clear();
                }
                let f = Arc::new(f);
                open.insert(file_id, f.clone());
                Ok(Some(f))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }

    /// The local file of `file_id` (created if `create`; None if absent otherwise),
    /// for staging, which copies between it and an external file at equal offsets.
    pub fn local_file(&self, file_id: u128, create: bool) -> Res<Option<Arc<File>>> {
        self.file(file_id, create)
    }

    pub fn write(&self, file_id: u128, spans: &[Span], data: &[u8]) -> Res<u64> {
        let f = self.file(file_id, true)?.expect("create=true always yields a file");
        let mut pos = 0usize;
        for s in spans {
            let len = s.len as usize;
            f.write_all_at(&data[pos..pos + len], s.offset).map_err(errno)?;
            pos += len;
        }
        Ok(pos as u64)
    }

    /// Reads spans into `out` (cleared first) and returns how many bytes of each span
    /// it holds: a span is cut short where the local file ends (the caller reads the
    /// rest as zeros). Holes inside the local file come back as zeros.
    pub fn read(&self, file_id: u128, spans: &[Span], out: &mut Vec<u8>) -> Res<Vec<u32>> {
        out.clear();
        let Some(f) = self.file(file_id, false)? else { return Ok(vec![0; spans.len()]) };
        let local_len = f.metadata().map_err(errno)?.len();
        let mut lens = Vec::with_capacity(spans.len());
        for s in spans {
            let want = (s.len as u64).min(local_len.saturating_sub(s.offset)) as usize;
            let start = out.len();
            out.resize(start + want, 0);
            let buf = &mut out[start..];
            let mut done = 0;
            while done < buf.len() {
                match f.read_at(&mut buf[done..], s.offset + done as u64) {
                    Ok(0) => break, // shrunk concurrently: the rest stays zero
                    Ok(n) => done += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            lens.push(want as u32);
        }
        Ok(lens)
    }

    pub fn truncate(&self, file_id: u128, size: u64) -> Res<()> {
        let Some(f) = self.file(file_id, false)? else { return Ok(()) };
        let len = f.metadata().map_err(errno)?.len();
        if len > size {
            f.set_len(size).map_err(errno)?;
        }
        Ok(())
    }

    pub fn remove(&self, file_id: u128) -> Res<()> {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(&file_id);
        match fs::remove_file(self.path(file_id)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }

    /// Makes the file's chunks durable: its data (fdatasync) and its directory entry
    /// (fsync of the directory), so a node crash after fsync keeps a new file too.
    pub fn sync(&self, file_id: u128) -> Res<()> {
        match self.file(file_id, false)? {
            Some(f) => {
                f.sync_data().map_err(errno)?;
                let dir = self.path(file_id);
                let dir = dir.parent().expect("chunk files live in a subdirectory");
                File::open(dir).and_then(|d| d.sync_all()).map_err(errno)
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_write_read_truncate_remove() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let spans = [Span { offset: 10, len: 3 }, Span { offset: 1 << 20, len: 2 }];
        s.write(1, &spans, b"abcde").unwrap();
        let mut out = Vec::new();
        let lens = s.read(1, &[Span { offset: 8, len: 6 }, Span { offset: (1 << 20) + 1, len: 4 }], &mut out).unwrap();
        assert_eq!(lens, vec![6, 1]);
        assert_eq!(out, b"\0\0abc\0e");
        s.truncate(1, 11).unwrap();
        let lens = s.read(1, &[Span { offset: 10, len: 3 }], &mut out).unwrap();
        assert_eq!((lens, &out[..]), (vec![1], &b"a"[..]));
        s.remove(1).unwrap();
        let lens = s.read(1, &[Span { offset: 10, len: 1 }], &mut out).unwrap();
        assert_eq!(lens, vec![0]);
        s.remove(1).unwrap();
    }

    #[test]
    fn files_and_directories_are_the_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(&d.path().join("chunks")).unwrap();
        s.write(7, &[Span { offset: 0, len: 1 }], b"x").unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&d.path().join("chunks")), 0o700);
        assert_eq!(mode(s.path(7).parent().unwrap()), 0o700);
        assert_eq!(mode(&s.path(7)), 0o600);
    }
}
