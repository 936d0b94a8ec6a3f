//! The chunk store: for every file this daemon holds chunks of, one sparse local file
//! in which chunk `k` sits at offset `k * chunk_size`, which is simply the file
//! offset. Holes read as zeros; truncate is one `ftruncate`; unlink is one `unlink`.
//!
//! Local files are named by file id (hex) under `chunks/<first two hex digits>/`, so
//! no client-supplied path ever reaches the local file system.
//!
//! A declared capacity (`gust daemon --capacity`, for tests of capacity placement:
//! a test cannot make disks of different sizes) bounds the bytes the local files
//! occupy (allocated blocks, as `du` counts them; holes count nothing): a write
//! that needs more room than is left (the bytes of its spans that fall in holes or
//! past a local file's end) is refused whole with ENOSPC, as a full disk would
//! refuse it. An overwrite of bytes the store holds needs no room and is never
//! refused.

use gust_proto::Span;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::Res;

/// Bound on cached open local files; past it the cache is emptied (descriptors are
/// cheap to reopen, and the bound keeps a daemon under its RLIMIT_NOFILE).
const OPEN_FILES_MAX: usize = 2048;

pub struct ChunkStore {
    dir: PathBuf,
    open: Mutex<HashMap<u128, Arc<File>>>,
    quota: Option<Quota>,
    /// Cut read spans where only a hole follows (capacity placement's readers look
    /// for the rest on the chunk's next daemon); off, spans end at the local file's
    /// end only, without the SEEK_DATA calls.
    trim_holes: bool,
}

/// A declared capacity and the bytes counted against it (allocated blocks). Writes
/// hold the lock from the room check to the block count after the write, so two
/// writers never both take the last free bytes.
struct Quota {
    capacity_bytes: u64,
    used_bytes: Mutex<u64>,
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
        Ok(ChunkStore { dir: dir.to_path_buf(), open: Mutex::new(HashMap::new()), quota: None, trim_holes: true })
    }

    /// Whether reads cut spans where only a hole follows (on by default; a daemon
    /// of a wide-striped instance turns it off, its readers need not know).
    pub fn set_trim_holes(&mut self, on: bool) {
        self.trim_holes = on;
    }

    /// Bounds the store to `capacity_bytes` of allocated blocks (counting what is
    /// already there).
    pub fn declare_capacity(&mut self, capacity_bytes: u64) {
        let used = self.disk_usage_bytes();
        self.quota = Some(Quota { capacity_bytes, used_bytes: Mutex::new(used) });
    }

    /// (declared capacity, bytes counted against it), if a capacity was declared.
    pub fn declared(&self) -> Option<(u64, u64)> {
        self.quota.as_ref().map(|q| (q.capacity_bytes, *q.used_bytes.lock().unwrap_or_else(|e| e.into_inner())))
    }

    fn walk(&self, size: impl Fn(&fs::Metadata) -> u64) -> u64 {
        let mut bytes = 0;
        for i in 0..256 {
            let Ok(rd) = fs::read_dir(self.dir.join(format!("{i:02x}"))) else { continue };
            for e in rd.flatten() {
                if let Ok(m) = e.metadata() {
                    bytes += size(&m);
                }
            }
        }
        bytes
    }

    /// Bytes the local files occupy on disk (allocated blocks, so holes count
    /// nothing). A walk over every local file: for metrics, not the request path.
    pub fn disk_usage_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.walk(|m| m.blocks() * 512)
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
        let Some(q) = &self.quota else { return Self::write_spans(&f, spans, data) };
        let mut used = q.used_bytes.lock().unwrap_or_else(|e| e.into_inner());
        let m = f.metadata().map_err(errno)?;
        let need: u64 = spans.iter().map(|s| hole_bytes(&f, s.offset, s.offset + s.len as u64, m.len())).sum();
        if need > 0 && *used + need > q.capacity_bytes {
            return Err(libc::ENOSPC);
        }
        let r = Self::write_spans(&f, spans, data);
        let after = f.metadata().map(|a| allocated(&a)).unwrap_or(allocated(&m) + need);
        *used = (*used + after).saturating_sub(allocated(&m));
        r
    }

    fn write_spans(f: &File, spans: &[Span], data: &[u8]) -> Res<u64> {
        let mut pos = 0usize;
        for s in spans {
            let len = s.len as usize;
            f.write_all_at(&data[pos..pos + len], s.offset).map_err(errno)?;
            pos += len;
        }
        Ok(pos as u64)
    }

    /// Reads spans into `out` (cleared first) and returns how many bytes of each span
    /// it holds: a span is cut short where the local file ends, or where only a hole
    /// follows inside it (the caller reads the rest as zeros). Holes between data
    /// come back as zeros. The cut tells a client of capacity placement that the
    /// rest of the span may have spilled to the chunk's next daemon.
    pub fn read(&self, file_id: u128, spans: &[Span], out: &mut Vec<u8>) -> Res<Vec<u32>> {
        out.clear();
        let Some(f) = self.file(file_id, false)? else { return Ok(vec![0; spans.len()]) };
        let m = f.metadata().map_err(errno)?;
        let local_len = m.len();
        // A file with as many bytes allocated as it is long has no hole: no need to
        // look for one (SEEK_HOLE walks the rest of the file on tmpfs, which made
        // every read of a large local file cost its length).
        let trim = self.trim_holes && allocated(&m) < local_len;
        let mut lens = Vec::with_capacity(spans.len());
        for s in spans {
            let end = (s.offset + s.len as u64).min(local_len);
            let end = if trim { data_end(&f, s.offset, end) } else { end };
            let want = end.saturating_sub(s.offset) as usize;
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
        let mut used = self.quota.as_ref().map(|q| q.used_bytes.lock().unwrap_or_else(|e| e.into_inner()));
        let m = f.metadata().map_err(errno)?;
        if m.len() > size {
            f.set_len(size).map_err(errno)?;
            if let Some(u) = used.as_deref_mut() {
                let after = f.metadata().map(|a| allocated(&a)).unwrap_or(0);
                *u = u.saturating_sub(allocated(&m).saturating_sub(after));
            }
        }
        Ok(())
    }

    pub fn remove(&self, file_id: u128) -> Res<()> {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(&file_id);
        let mut used = self.quota.as_ref().map(|q| q.used_bytes.lock().unwrap_or_else(|e| e.into_inner()));
        let len = fs::metadata(self.path(file_id)).map(|m| allocated(&m)).unwrap_or(0);
        match fs::remove_file(self.path(file_id)) {
            Ok(()) => {
                if let Some(u) = used.as_deref_mut() {
                    *u = u.saturating_sub(len);
                }
                Ok(())
            }
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

/// Bytes a local file occupies on disk.
fn allocated(m: &fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.blocks() * 512
}

/// Bytes of `start..end` that a write would newly allocate: those past the local
/// file's length `len` and those in holes before it.
fn hole_bytes(f: &File, start: u64, end: u64, len: u64) -> u64 {
    let past = end.saturating_sub(len.max(start));
    let inside_end = end.min(len);
    let mut held = 0;
    let mut pos = start;
    while pos < inside_end {
        let (d, h) = match next_data(f, pos) {
            Some(d) if d < inside_end => (d, next_hole(f, d).unwrap_or(inside_end).min(inside_end)),
            _ => break,
        };
        held += h - d;
        pos = h;
    }
    past + inside_end.saturating_sub(start) - held
}

/// SEEK_DATA from `pos`: the next offset holding data, None if none follows (a
/// file system without SEEK_DATA reports every offset as data).
fn next_data(f: &File, pos: u64) -> Option<u64> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: lseek on a descriptor we own.
    let d = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, libc::SEEK_DATA) };
    if d >= 0 {
        return Some(d as u64);
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::ENXIO) => None,
        _ => Some(pos),
    }
}

/// SEEK_HOLE from `pos` (a file's end counts as a hole).
fn next_hole(f: &File, pos: u64) -> Option<u64> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: lseek on a descriptor we own.
    let h = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, libc::SEEK_HOLE) };
    (h >= 0).then_some(h as u64)
}

/// Where the data in `start..end` of `f` ends: `end`, unless only a hole follows
/// some point (SEEK_DATA finds no data at or past it before `end`). A file system
/// without SEEK_DATA counts everything up to `end` as data, as before.
fn data_end(f: &File, start: u64, end: u64) -> u64 {
    let (mut pos, mut last) = (start, start);
    while pos < end {
        match next_data(f, pos) {
            Some(d) if d < end => {
                let h = next_hole(f, d).unwrap_or(end);
                last = h.min(end);
                pos = h.max(d + 1);
            }
            _ => break,
        }
    }
    last
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
        // Holes inside a block of data read as zeros (a hole is a whole block).
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

    /// A declared capacity refuses writes that need more room than is left (in
    /// allocated blocks), never overwrites, and counts truncate and remove back.
    #[test]
    fn declared_capacity_refuses_growth_only() {
        let d = tempfile::tempdir().unwrap();
        let mut s = ChunkStore::open(d.path()).unwrap();
        let b = 4096u64;
        s.write(1, &[Span { offset: 0, len: b as u32 }], &[1; 4096]).unwrap();
        s.declare_capacity(4 * b);
        let used = |s: &ChunkStore| s.declared().unwrap().1;
        assert_eq!(used(&s), b);
        // Two blocks far apart in one sparse file: holes cost nothing.
        s.write(2, &[Span { offset: 0, len: 4096 }, Span { offset: 100 * b, len: 4096 }], &[2; 8192]).unwrap();
        assert_eq!(used(&s), 3 * b);
        assert_eq!(s.write(2, &[Span { offset: 50 * b, len: 8192 }], &[3; 8192]), Err(libc::ENOSPC));
        assert_eq!(s.write(3, &[Span { offset: 0, len: 8192 }], &[3; 8192]), Err(libc::ENOSPC));
        assert_eq!(used(&s), 3 * b, "a refused write takes nothing");
        // Overwrites of held bytes need no room, even when full.
        s.write(2, &[Span { offset: 50 * b, len: 4096 }], &[4; 4096]).unwrap();
        assert_eq!(used(&s), 4 * b);
        s.write(2, &[Span { offset: 100 * b + 10, len: 3 }], b"xyz").unwrap();
        let mut out = Vec::new();
        s.read(2, &[Span { offset: 100 * b + 8, len: 6 }], &mut out).unwrap();
        assert_eq!(out, [2, 2, b'x', b'y', b'z', 2]);
        s.truncate(2, 51 * b).unwrap();
        assert_eq!(used(&s), 3 * b);
        s.remove(1).unwrap();
        assert_eq!(used(&s), 2 * b);
        // Counted from what is on disk when declared again (a restart).
        s.declare_capacity(4 * b);
        assert_eq!(used(&s), 2 * b);
    }

    /// A span whose tail is a hole is cut where its data ends; a span of holes only
    /// reads as nothing held.
    #[test]
    fn reads_stop_at_trailing_holes() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let mb = 1u64 << 20;
        s.write(5, &[Span { offset: 0, len: 4096 }, Span { offset: 4 * mb, len: 4096 }], &[7u8; 8192]).unwrap();
        let mut out = Vec::new();
        let lens = s
            .read(5, &[Span { offset: 0, len: mb as u32 }, Span { offset: 2 * mb, len: mb as u32 }], &mut out)
            .unwrap();
        assert_eq!(lens, vec![4096, 0]);
        let lens = s.read(5, &[Span { offset: 4 * mb, len: 8192 }], &mut out).unwrap();
        assert_eq!(lens, vec![4096]);
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
