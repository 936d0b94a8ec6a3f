//! The chunk store: for every file this daemon holds chunks of, one sparse local file
//! in which chunk `k` sits at offset `k * chunk_size`, which is simply the file
//! offset. Holes read as zeros; truncate is one `ftruncate`; unlink is one `unlink`.
//!
//! Local files are named by file id (hex) under `chunks/<first two hex digits>/`, so
//! no client-supplied path ever reaches the local file system. Beside each, its
//! checksums (`<id>.sum`, sums.rs): every read is verified against them, and a
//! block whose bytes no longer match is never served (EUCLEAN).
//!
//! A declared capacity (`gust daemon --capacity`, for tests of capacity placement:
//! a test cannot make disks of different sizes) bounds the bytes the local files
//! occupy (allocated blocks, as `du` counts them; holes count nothing): a write
//! that needs more room than is left (the bytes of its spans that fall in holes or
//! past a local file's end) is refused whole with ENOSPC, as a full disk would
//! refuse it. An overwrite of bytes the store holds needs no room and is never
//! refused.

pub use crate::chunk_file::Local;
use crate::chunk_file::{whole_block_sums, Access};
use crate::sums;
use gust_proto::Span;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::Res;

mod rmw;

/// Bound on cached open local files; past it the cache is emptied (descriptors are
/// cheap to reopen, and the bound keeps a daemon under its RLIMIT_NOFILE).
const OPEN_FILES_MAX: usize = 2048;

pub struct ChunkStore {
    dir: PathBuf,
    open: Mutex<HashMap<u128, Arc<Local>>>,
    /// How the local files are read and written with their sums (chunk_file.rs).
    access: Access,
    quota: Option<Quota>,
    /// Files whose bytes may have changed since `track_changes` began (a move's
    /// first pass, gust-daemon's moves: what it sent of them is sent again).
    changes: Changes,
}

/// The ids of local files changed while tracking is on. A change is noted after
/// it is made, so a reader that starts after tracking began either sees the
/// change or finds the file noted.
/// Past this many, the changes are not told apart any more: every file counts
/// as changed (a move whose coordinator went away leaves tracking on until the
/// next move, and the set must not grow without bound meanwhile).
const CHANGES_MAX: usize = 1 << 20;

#[derive(Default)]
struct Changes {
    on: AtomicBool,
    /// None: more than `CHANGES_MAX` noted.
    ids: Mutex<Option<HashSet<u128>>>,
}

impl Changes {
    fn note(&self, id: u128) {
        if self.on.load(Ordering::SeqCst) {
            let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(set) = ids.as_mut() {
                set.insert(id);
                if set.len() > CHANGES_MAX {
                    *ids = None;
                }
            }
        }
    }
}

/// A declared capacity and the bytes counted against it (allocated blocks). Writes
/// hold the lock from the room check to the block count after the write, so two
/// writers never both take the last free bytes.
struct Quota {
    capacity_bytes: u64,
    used_bytes: Mutex<u64>,
}

pub(crate) fn errno(e: io::Error) -> i32 {
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
        Ok(ChunkStore {
            dir: dir.to_path_buf(),
            open: Mutex::new(HashMap::new()),
            access: Access::new("chunk store".into(), 0, true),
            quota: None,
            changes: Changes::default(),
        })
    }

    /// Names the store in its log lines ("daemon 3") and gives the chunk size, so
    /// that a corrupt block's line names its chunk.
    pub fn set_identity(&mut self, label: String, chunk_bytes: u64) {
        self.access.label = label;
        self.access.chunk_bytes = chunk_bytes;
    }

    /// Whether reads cut spans where only a hole follows (on by default; a daemon
    /// of a wide-striped instance turns it off, its readers need not know). Set
    /// again when the placement changes while the daemon runs.
    pub fn set_trim_holes(&self, on: bool) {
        self.access.set_trim_holes(on);
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
            // The sums are the store's overhead (8 bytes per 4 KiB), not file data.
            for e in rd.flatten().filter(|e| !e.file_name().to_string_lossy().ends_with(SUM_SUFFIX)) {
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

    fn sum_path(&self, file_id: u128) -> PathBuf {
        let mut p = self.path(file_id).into_os_string();
        p.push(SUM_SUFFIX);
        PathBuf::from(p)
    }

    fn file(&self, file_id: u128, create: bool) -> Res<Option<Arc<Local>>> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = open.get(&file_id) {
            return Ok(Some(f.clone()));
        }
        let opts = || {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(create).mode(0o600);
            o
        };
        let data = match opts().open(self.path(file_id)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(errno(e)),
        };
        // Created with its data file: a local file of an older build has none (its
        // blocks read as unsummed until written again).
        let sums = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.sum_path(file_id));
        let f = Arc::new(Local { data, sums: sums.map_err(errno)? });
        if open.len() >= OPEN_FILES_MAX {
            open.clear();
        }
        open.insert(file_id, f.clone());
        Ok(Some(f))
    }

    /// The local file of `file_id` (created if `create`; None if absent otherwise),
    /// for staging, which copies between it and an external file at equal offsets.
    /// A copy into it is followed by [`ChunkStore::sum_spans`], a copy out of it
    /// preceded by [`ChunkStore::verify_spans`].
    pub fn local_file(&self, file_id: u128, create: bool) -> Res<Option<Arc<Local>>> {
        let f = self.file(file_id, create);
        if create {
            // Written through the descriptor from now on, out of the store's sight.
            self.changes.note(file_id);
        }
        f
    }

    /// Starts noting which local files change (writes, truncates, removals, files
    /// handed out to be written), forgetting any noted before.
    pub fn track_changes(&self) {
        *self.changes.ids.lock().unwrap_or_else(|e| e.into_inner()) = Some(HashSet::new());
        self.changes.on.store(true, Ordering::SeqCst);
    }

    /// Stops noting changes; the files noted since `track_changes` (None: too
    /// many to tell apart, any file may have changed).
    pub fn take_changes(&self) -> Option<HashSet<u128>> {
        self.changes.on.store(false, Ordering::SeqCst);
        self.changes.ids.lock().unwrap_or_else(|e| e.into_inner()).replace(HashSet::new())
    }

    pub fn write(&self, file_id: u128, spans: &[Span], data: &[u8]) -> Res<u64> {
        self.write_checked(file_id, spans, data, &[])
    }

    /// `write`, with the writer's sums of the pieces of `data` (gust-proto's
    /// `sums::piece_sums`; empty: unchecked). Nothing is written if a piece does
    /// not match its sum (EBADMSG: the bytes were corrupted on their way here), or
    /// if the sums do not count the pieces (EINVAL).
    pub fn write_checked(&self, file_id: u128, spans: &[Span], data: &[u8], given: &[u64]) -> Res<u64> {
        let r = self.write_unnoted(file_id, spans, data, given);
        self.changes.note(file_id);
        r
    }

    fn write_unnoted(&self, file_id: u128, spans: &[Span], data: &[u8], given: &[u64]) -> Res<u64> {
        // Whole blocks' sums, computed (and checked against `given`) before anything
        // is written, and stored after.
        let whole = whole_block_sums(spans, data, given)?;
        let f = self.file(file_id, true)?.expect("create=true always yields a file");
        let (_regions, m) = self.access.lock_write(&f, file_id, spans)?;
        let Some(q) = &self.quota else {
            return self.access.write_summed(&f, file_id, spans, data, m.len(), whole);
        };
        let mut used = q.used_bytes.lock().unwrap_or_else(|e| e.into_inner());
        let need: u64 = spans.iter().map(|s| hole_bytes(&f.data, s.offset, s.offset + s.len as u64, m.len())).sum();
        if need > 0 && *used + need > q.capacity_bytes {
            return Err(libc::ENOSPC);
        }
        let r = self.access.write_summed(&f, file_id, spans, data, m.len(), whole);
        let after = f.data.metadata().map(|a| allocated(&a)).unwrap_or(allocated(&m) + need);
        *used = (*used + after).saturating_sub(allocated(&m));
        r
    }

    /// Rewrites, from a copy's bytes (`data`, the spans' bytes one after the
    /// other), the blocks of `spans` that are corrupt here: only those whose
    /// bytes do not match their sum, and not `POISONED` ones (the copy's bytes may
    /// predate the write that poisoned them). A block the copy's spans do not
    /// cover whole is left. Returns how many blocks were rewritten.
    pub fn repair(&self, file_id: u128, spans: &[Span], data: &[u8]) -> Res<u64> {
        let r = self.repair_unnoted(file_id, spans, data);
        self.changes.note(file_id);
        r
    }

    fn repair_unnoted(&self, file_id: u128, spans: &[Span], data: &[u8]) -> Res<u64> {
        let Some(f) = self.file(file_id, false)? else { return Ok(0) };
        let ranges = || spans.iter().filter(|s| s.len > 0).map(|s| (s.offset, s.offset + s.len as u64));
        let _regions = self.access.regions().lock(file_id, ranges());
        let len = f.data.metadata().map_err(errno)?.len();
        let mut fixed = BTreeMap::new();
        let mut buf = Vec::new();
        let mut pos = 0usize;
        for s in spans {
            let (start, end) = (s.offset, s.offset + s.len as u64);
            let bytes = &data[pos..pos + s.len as usize];
            pos += s.len as usize;
            if s.len == 0 || start >= len {
                continue;
            }
            let (first, last) = sums::blocks(start, end.min(len));
            let stored = sums::read_sums(&f.sums, first, last).map_err(errno)?;
            for (blk, &want) in (first..=last).zip(&stored) {
                let (bs, be) = sums::block_range(blk, len);
                if want == 0 || want == sums::POISONED || bs < start || be > end {
                    continue;
                }
                sums::read_block(&f.data, blk, len, &mut buf).map_err(errno)?;
                if sums::sum_of(&buf) == want {
                    continue;
                }
                let good = &bytes[(bs - start) as usize..(be - start) as usize];
                f.data.write_all_at(good, bs).map_err(errno)?;
                fixed.insert(blk, sums::sum_of(good));
            }
        }
        self.access.store_sums(&f, &fixed)?;
        if let (Some(first), Some(last)) = (fixed.keys().next(), fixed.keys().last()) {
            tracing::warn!(
                "{}: {} corrupt block(s) of file {file_id:032x} rewritten from a copy (blocks {first}-{last})",
                self.access.label,
                fixed.len()
            );
        }
        Ok(fixed.len() as u64)
    }

    /// Verifies the local files after `after` (in file id order) against their
    /// sums, until about `max_bytes` were read (at least one file): `gust scrub`'s
    /// page. Corrupt blocks are logged as reads log them.
    pub fn scrub(&self, after: Option<u128>, max_bytes: u64) -> Res<ScrubPage> {
        self.scrub_held(after, max_bytes, |_| Some(()))
    }

    /// `scrub`, verifying a file only while `hold(file id)` is held; a file for
    /// which it gives None is passed over (a client holds its local file and
    /// verifies what it reads: short-circuit I/O).
    pub fn scrub_held<G>(
        &self,
        after: Option<u128>,
        max_bytes: u64,
        hold: impl Fn(u128) -> Option<G>,
    ) -> Res<ScrubPage> {
        let mut page = ScrubPage { files: 0, bytes: 0, corrupt: Vec::new(), next: None };
        let first_dir = after.map_or(0, |a| (a >> 120) as usize);
        for dir in first_dir..256 {
            for id in self.ids_in(dir, after) {
                let Some(held) = hold(id) else { continue };
                let Some(f) = self.file(id, false)? else { continue };
                let (bytes, bad) = self.verify_file(&f, id)?;
                drop(held);
                page.files += 1;
                page.bytes += bytes;
                page.corrupt.extend(bad.into_iter().map(|(offset, len)| (id, offset, len)));
                if page.bytes >= max_bytes {
                    page.next = Some(id);
                    return Ok(page);
                }
            }
        }
        Ok(page)
    }

    /// The ids of the local files of directory `dir` (their first byte), after
    /// `after`, in order.
    fn ids_in(&self, dir: usize, after: Option<u128>) -> Vec<u128> {
        let Ok(rd) = fs::read_dir(self.dir.join(format!("{dir:02x}"))) else { return Vec::new() };
        let mut ids: Vec<u128> = rd
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                (name.len() == 32).then(|| u128::from_str_radix(name, 16).ok()).flatten()
            })
            .filter(|id| after.is_none_or(|a| *id > a))
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Up to about `max` ids of local files after `after`, in order (a move's walk
    /// over every local file: gust-daemon's moves/).
    pub fn file_ids(&self, after: Option<u128>, max: usize) -> Vec<u128> {
        let mut out = Vec::new();
        for dir in after.map_or(0, |a| (a >> 120) as usize)..256 {
            out.extend(self.ids_in(dir, after));
            if out.len() >= max {
                break;
            }
        }
        out
    }

    /// The length of the local file of `file_id` (None if there is none).
    pub fn local_len(&self, file_id: u128) -> Res<Option<u64>> {
        match self.file(file_id, false)? {
            Some(f) => Ok(Some(f.data.metadata().map_err(errno)?.len())),
            None => Ok(None),
        }
    }

    /// Makes `offset..offset + len` of the local file a hole (its blocks unsummed):
    /// chunk data that moved to another daemon. Block-aligned ranges only.
    pub fn punch(&self, file_id: u128, offset: u64, len: u64) -> Res<()> {
        let b = sums::SUM_BLOCK_BYTES as u64;
        if !offset.is_multiple_of(b) || len == 0 {
            return Err(libc::EINVAL);
        }
        let Some(f) = self.file(file_id, false)? else { return Ok(()) };
        let _regions = self.access.regions().lock(file_id, std::iter::once((offset, offset + len)));
        let before = f.data.metadata().map_err(errno)?;
        let end = (offset + len).min(before.len());
        if end <= offset {
            return Ok(());
        }
        // SAFETY: fallocate on a descriptor we own, with a range inside the file.
        let rc = unsafe {
            libc::fallocate(
                f.data.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                (end - offset) as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        let (first, last) = (offset / b, (end - 1) / b);
        sums::write_sums(&f.sums, first, &vec![0u64; (last - first + 1) as usize]).map_err(errno)?;
        if let Some(q) = &self.quota {
            let after = f.data.metadata().map(|a| allocated(&a)).unwrap_or(0);
            let mut u = q.used_bytes.lock().unwrap_or_else(|e| e.into_inner());
            *u = u.saturating_sub(allocated(&before).saturating_sub(after));
        }
        Ok(())
    }

    /// Reads a whole local file in pieces of a region and verifies them: its
    /// length and its corrupt ranges (offset, length).
    fn verify_file(&self, f: &Local, file_id: u128) -> Res<(u64, Vec<(u64, u64)>)> {
        let len = f.data.metadata().map_err(errno)?.len();
        let mut bad = Vec::new();
        let (mut buf, mut tmp) = (Vec::new(), Vec::new());
        let mut pos = 0;
        while pos < len {
            let n = sums::REGION_BYTES.min(len - pos);
            buf.clear();
            buf.resize(n as usize, 0);
            sums::read_full(&f.data, &mut buf, pos).map_err(errno)?;
            if let Some((first, last)) = self.access.corrupt_blocks(f, file_id, pos, &mut buf, &mut tmp, "a scrub")? {
                let b = sums::SUM_BLOCK_BYTES as u64;
                let end = ((last + 1) * b).min(len);
                bad.push((first * b, end - first * b));
            }
            pos += n;
        }
        Ok((len, bad))
    }

    /// Sums the blocks of `spans` again from the local file's bytes (after
    /// staging copied into it).
    pub fn sum_spans(&self, file_id: u128, spans: &[Span]) -> Res<()> {
        // Staging copied into the file: changed.
        self.changes.note(file_id);
        let Some(f) = self.file(file_id, false)? else { return Ok(()) };
        let ranges = || spans.iter().filter(|s| s.len > 0).map(|s| (s.offset, s.offset + s.len as u64));
        let _regions = self.access.regions().lock(file_id, ranges());
        let len = f.data.metadata().map_err(errno)?.len();
        let mut new_sums = BTreeMap::new();
        let mut buf = Vec::new();
        for (start, end) in ranges() {
            if start >= len {
                continue;
            }
            let (first, last) = sums::blocks(start, end.min(len));
            for blk in first..=last {
                sums::read_block(&f.data, blk, len, &mut buf).map_err(errno)?;
                new_sums.insert(blk, sums::sum_of(&buf));
            }
        }
        self.access.store_sums(&f, &new_sums)
    }

    /// Verifies the blocks of `spans` (before staging copies out of the local
    /// file): EUCLEAN if one does not match its sum.
    pub fn verify_spans(&self, file_id: u128, spans: &[Span]) -> Res<()> {
        let mut out = Vec::new();
        self.read(file_id, spans, &mut out).map(|_| ())
    }

    /// Reads spans into `out` (cleared first) and returns how many bytes of each span
    /// it holds: a span is cut short where the local file ends, or where only a hole
    /// follows inside it (the caller reads the rest as zeros). Holes between data
    /// come back as zeros. The cut tells a client of capacity placement that the
    /// rest of the span may have spilled to the chunk's next daemon.
    ///
    /// Every block a span touches is verified against its sum; one that does not
    /// match fails the read with EUCLEAN (and a log line naming the file, chunk and
    /// bytes): it is never served.
    pub fn read(&self, file_id: u128, spans: &[Span], out: &mut Vec<u8>) -> Res<Vec<u32>> {
        self.read_summed(file_id, spans, out, &mut Vec::new())
    }

    /// `read`, with the sums of the pieces of the bytes it returns in `pieces`
    /// (cleared first; gust-proto's `sums::pieces`): what a `read` request's answer
    /// carries for the client to check.
    pub fn read_summed(
        &self,
        file_id: u128,
        spans: &[Span],
        out: &mut Vec<u8>,
        pieces: &mut Vec<u64>,
    ) -> Res<Vec<u32>> {
        out.clear();
        pieces.clear();
        let Some(f) = self.file(file_id, false)? else { return Ok(vec![0; spans.len()]) };
        self.access.read(&f, file_id, spans, out, pieces)
    }

    /// Whether this store bounds its bytes (a declared capacity): then only its own
    /// writes may add any, and no client is handed a local file to write.
    pub fn has_quota(&self) -> bool {
        self.quota.is_some()
    }

    /// Shortens the local file to `size` (never lengthens it: the rest reads as a
    /// hole anyway), its sums with it; the new last block is summed again if its
    /// old bytes matched.
    pub fn truncate(&self, file_id: u128, size: u64) -> Res<()> {
        let r = self.truncate_unnoted(file_id, size);
        self.changes.note(file_id);
        r
    }

    fn truncate_unnoted(&self, file_id: u128, size: u64) -> Res<()> {
        let Some(f) = self.file(file_id, false)? else { return Ok(()) };
        let _regions = self.access.regions().lock_all();
        let mut used = self.quota.as_ref().map(|q| q.used_bytes.lock().unwrap_or_else(|e| e.into_inner()));
        let m = f.data.metadata().map_err(errno)?;
        if m.len() > size {
            let b = sums::SUM_BLOCK_BYTES as u64;
            let mut buf = Vec::new();
            let tail =
                !size.is_multiple_of(b) && self.access.block_matches(&f, file_id, size / b, m.len(), &mut buf)?;
            f.data.set_len(size).map_err(errno)?;
            f.sums.set_len(size.div_ceil(b) * sums::SUM_BYTES).map_err(errno)?;
            if tail {
                sums::read_block(&f.data, size / b, size, &mut buf).map_err(errno)?;
                sums::write_sums(&f.sums, size / b, &[sums::sum_of(&buf)]).map_err(errno)?;
            }
            let f = &f.data;
            if let Some(u) = used.as_deref_mut() {
                let after = f.metadata().map(|a| allocated(&a)).unwrap_or(0);
                *u = u.saturating_sub(allocated(&m).saturating_sub(after));
            }
        }
        Ok(())
    }

    /// Removes the local file of `file_id` if none of its bytes is allocated (every
    /// chunk punched): the end of a move, when nothing else writes. Whether it was.
    pub fn remove_if_empty(&self, file_id: u128) -> Res<bool> {
        let Some(f) = self.file(file_id, false)? else { return Ok(false) };
        if allocated(&f.data.metadata().map_err(errno)?) > 0 {
            return Ok(false);
        }
        drop(f);
        self.remove(file_id).map(|()| true)
    }

    pub fn remove(&self, file_id: u128) -> Res<()> {
        let r = self.remove_unnoted(file_id);
        self.changes.note(file_id);
        r
    }

    fn remove_unnoted(&self, file_id: u128) -> Res<()> {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(&file_id);
        let mut used = self.quota.as_ref().map(|q| q.used_bytes.lock().unwrap_or_else(|e| e.into_inner()));
        let len = fs::metadata(self.path(file_id)).map(|m| allocated(&m)).unwrap_or(0);
        let _ = fs::remove_file(self.sum_path(file_id));
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
                f.data.sync_data().map_err(errno)?;
                f.sums.sync_data().map_err(errno)?;
                let dir = self.path(file_id);
                let dir = dir.parent().expect("chunk files live in a subdirectory");
                File::open(dir).and_then(|d| d.sync_all()).map_err(errno)
            }
            None => Ok(()),
        }
    }
}

/// One page of a scrub: files and bytes verified, corrupt ranges (file id,
/// offset, length), and the last file verified if there may be more.
pub struct ScrubPage {
    pub files: u64,
    pub bytes: u64,
    pub corrupt: Vec<(u128, u64, u64)>,
    pub next: Option<u128>,
}

/// The suffix of a local file's sums beside it.
const SUM_SUFFIX: &str = ".sum";

/// Bytes a local file occupies on disk.
pub(crate) fn allocated(m: &fs::Metadata) -> u64 {
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
pub(crate) fn data_end(f: &File, start: u64, end: u64) -> u64 {
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

    /// A read's piece sums are those of the bytes it returns, cut at every 4 KiB of
    /// the file: whole blocks (their stored sums), unaligned ends, spans cut short
    /// by the file's end, and blocks the store keeps no sum of.
    #[test]
    fn a_read_sums_the_pieces_it_returns() {
        use gust_proto::sums::piece_sums;
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
        s.write(3, &[Span { offset: 0, len: data.len() as u32 }], &data).unwrap();
        let spans =
            [Span { offset: 100, len: 9000 }, Span { offset: 12_288, len: 4096 }, Span { offset: 19_000, len: 5000 }];
        let (mut out, mut pieces) = (Vec::new(), Vec::new());
        let lens = s.read_summed(3, &spans, &mut out, &mut pieces).unwrap();
        assert_eq!(lens, vec![9000, 4096, 1000]);
        let mut want = Vec::new();
        let mut at = 0;
        for (sp, n) in spans.iter().zip(&lens) {
            want.extend(piece_sums(sp.offset, &out[at..at + *n as usize]));
            at += *n as usize;
        }
        assert_eq!(pieces, want);
        assert_eq!(pieces.len(), 3 + 1 + 1);
        // Without a sidecar (a file written by a build without sums) the pieces are
        // summed all the same.
        std::fs::remove_file(s.sum_path(3)).unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        s.read_summed(3, &spans[..1], &mut out, &mut pieces).unwrap();
        assert_eq!(pieces, piece_sums(100, &out).collect::<Vec<_>>());
    }

    /// A chunk punched out (it moved to another daemon) reads as zeros without a
    /// checksum error, its neighbours keep their bytes, and the store lists the
    /// local file (a move's walk) with its length unchanged.
    /// Changes are noted only while tracking is on, by every way a local file
    /// changes (a write, a truncate, a removal, a file handed out to be written,
    /// staging's copy in), and reads are not changes.
    #[test]
    fn changes_are_noted_while_tracked() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let one = [Span { offset: 0, len: 1 }];
        s.write(1, &one, b"a").unwrap();
        s.track_changes();
        let mut out = Vec::new();
        s.read(1, &one, &mut out).unwrap();
        s.local_file(1, false).unwrap();
        assert!(s.take_changes().unwrap().is_empty(), "reads change nothing");
        s.write(2, &one, b"b").unwrap();
        assert!(s.take_changes().unwrap().is_empty(), "tracking stopped at take_changes");
        s.track_changes();
        s.write(3, &one, b"c").unwrap();
        s.truncate(4, 0).unwrap();
        s.remove(5).unwrap();
        s.local_file(6, true).unwrap();
        s.sum_spans(7, &one).unwrap();
        let mut got: Vec<u128> = s.take_changes().unwrap().into_iter().collect();
        got.sort_unstable();
        assert_eq!(got, vec![3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_punched_chunk_reads_as_a_hole_and_its_neighbours_stay() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let chunk = 16 << 10;
        let data: Vec<u8> = (0..3 * chunk).map(|i| (i % 251) as u8 + 1).collect();
        s.write(5, &[Span { offset: 0, len: data.len() as u32 }], &data).unwrap();
        s.write(9, &[Span { offset: 0, len: 1 }], b"x").unwrap();
        assert_eq!(s.file_ids(None, 10), vec![5, 9]);
        assert_eq!(s.file_ids(Some(5), 10), vec![9]);
        s.punch(5, chunk as u64, chunk as u64).unwrap();
        assert_eq!(s.local_len(5).unwrap(), Some(3 * chunk as u64));
        let mut out = Vec::new();
        s.read(5, &[Span { offset: 0, len: data.len() as u32 }], &mut out).unwrap();
        assert_eq!(&out[..chunk], &data[..chunk]);
        assert!(out[chunk..2 * chunk].iter().all(|b| *b == 0), "the punched chunk reads as zeros");
        assert_eq!(&out[2 * chunk..], &data[2 * chunk..]);
        // Written again (moved back), it reads back summed.
        s.write(5, &[Span { offset: chunk as u64, len: 10 }], &data[..10]).unwrap();
        s.read(5, &[Span { offset: chunk as u64, len: 10 }], &mut out).unwrap();
        assert_eq!(&out[..], &data[..10]);
        assert_eq!(s.punch(5, 1, 10), Err(libc::EINVAL), "block-aligned ranges only");
        assert_eq!(s.local_len(77).unwrap(), None);
        // A file is removed at a move's end only if nothing of it is left.
        assert_eq!(s.remove_if_empty(5), Ok(false), "chunks 0 and 2 are still here");
        s.punch(5, 0, 3 * chunk as u64).unwrap();
        assert_eq!(s.remove_if_empty(5), Ok(true));
        assert_eq!(s.local_len(5).unwrap(), None);
        assert_eq!(s.remove_if_empty(5), Ok(false), "no file: nothing removed");
        assert_eq!(s.file_ids(None, 10), vec![9]);
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

    /// Flips one bit of byte `at` of `file_id`'s local file, as a disk might.
    fn flip(s: &ChunkStore, file_id: u128, at: u64) {
        let f = OpenOptions::new().read(true).write(true).open(s.path(file_id)).unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    fn read(s: &ChunkStore, file_id: u128, offset: u64, len: u32) -> Res<Vec<u8>> {
        let mut out = Vec::new();
        s.read(file_id, &[Span { offset, len }], &mut out).map(|_| out)
    }

    /// A daemon killed after a write's data and before its sums: the earlier,
    /// acknowledged bytes of the block an append changed read back (unverified)
    /// instead of failing their check; a block that was corrupt before such a
    /// write still fails its reads. Without `unsum` the first read fails with
    /// EUCLEAN.
    #[test]
    fn a_write_cut_between_data_and_sums_leaves_earlier_bytes_readable() {
        use crate::chunk_file::CUT_BEFORE_SUMS;
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let first = bytes(6000, 3);
        s.write(9, &[Span { offset: 0, len: 6000 }], &first).unwrap();
        CUT_BEFORE_SUMS.with(|c| c.set(true));
        s.write(9, &[Span { offset: 6000, len: 1000 }], &bytes(1000, 4)).unwrap();
        CUT_BEFORE_SUMS.with(|c| c.set(false));
        let back = read(&s, 9, 0, 7000).unwrap();
        assert_eq!(&back[..6000], &first[..], "the acknowledged bytes read back");
        // Corrupt before a cut write into its block: still refused.
        s.write(10, &[Span { offset: 0, len: 6000 }], &first).unwrap();
        flip(&s, 10, 5000);
        CUT_BEFORE_SUMS.with(|c| c.set(true));
        s.write(10, &[Span { offset: 6000, len: 1000 }], &bytes(1000, 4)).unwrap();
        CUT_BEFORE_SUMS.with(|c| c.set(false));
        assert_eq!(read(&s, 10, 4096, 100), Err(libc::EUCLEAN));
    }

    /// A flipped bit is never served: a read of any range that touches its block
    /// fails with EUCLEAN, whole or in part; the other blocks read as written.
    #[test]
    fn a_flipped_bit_fails_every_read_of_its_block_and_no_other() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let data = bytes(5 * 4096 + 100, 1);
        s.write(1, &[Span { offset: 0, len: data.len() as u32 }], &data).unwrap();
        flip(&s, 1, 2 * 4096 + 7);
        assert_eq!(read(&s, 1, 0, data.len() as u32), Err(libc::EUCLEAN));
        assert_eq!(read(&s, 1, 2 * 4096 + 4000, 10), Err(libc::EUCLEAN), "a read inside the block");
        assert_eq!(read(&s, 1, 4096 + 4000, 200), Err(libc::EUCLEAN), "a read ending in the block");
        assert!(read(&s, 1, 0, 2 * 4096).unwrap() == data[..2 * 4096]);
        assert!(read(&s, 1, 3 * 4096 + 1, 2 * 4096).unwrap() == data[3 * 4096 + 1..5 * 4096 + 1]);
        // The last block is partial: summed up to the file's end.
        flip(&s, 1, 5 * 4096 + 99);
        assert_eq!(read(&s, 1, 5 * 4096 + 50, 10), Err(libc::EUCLEAN));
    }

    /// Writes of part of a block (unaligned, appends, a gap past the end) keep
    /// every block's sum right; truncation to the middle of a block too.
    #[test]
    fn partial_writes_appends_gaps_and_truncation_keep_sums_right() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let mut model = vec![0u8; 0];
        let mut put = |s: &ChunkStore, offset: usize, data: &[u8]| {
            s.write(3, &[Span { offset: offset as u64, len: data.len() as u32 }], data).unwrap();
            if model.len() < offset + data.len() {
                model.resize(offset + data.len(), 0);
            }
            model[offset..offset + data.len()].copy_from_slice(data);
            assert_eq!(read(s, 3, 0, 1 << 20).unwrap(), model, "after a write at {offset}");
            model.clone()
        };
        put(&s, 10, &bytes(100, 2));
        put(&s, 110, &bytes(5000, 3)); // an append across a block boundary
        put(&s, 3 * 4096 + 5, &bytes(7, 4)); // past the end: a gap of zeros
        put(&s, 4000, &bytes(200, 5)); // an overwrite straddling two blocks
        let m = put(&s, 0, &bytes(4096, 6)); // a whole block
        s.truncate(3, 4096 + 300).unwrap();
        assert_eq!(read(&s, 3, 0, 1 << 20).unwrap(), &m[..4096 + 300]);
        s.write(3, &[Span { offset: 9000, len: 3 }], b"end").unwrap();
        let mut want = m[..4096 + 300].to_vec();
        want.resize(9003, 0);
        want[9000..].copy_from_slice(b"end");
        assert_eq!(read(&s, 3, 0, 1 << 20).unwrap(), want, "a write past a truncated end");
    }

    /// A write of part of a corrupt block does not bless the damage: the block
    /// stays corrupt (poisoned), and a repair from a copy leaves it alone. A write
    /// of the whole block renews it.
    #[test]
    fn a_partial_write_to_a_corrupt_block_keeps_it_corrupt() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let data = bytes(3 * 4096, 7);
        s.write(4, &[Span { offset: 0, len: data.len() as u32 }], &data).unwrap();
        flip(&s, 4, 4096 + 1);
        s.write(4, &[Span { offset: 4096 + 100, len: 3 }], b"new").unwrap();
        assert_eq!(read(&s, 4, 4096, 10), Err(libc::EUCLEAN));
        assert_eq!(s.repair(4, &[Span { offset: 4096, len: 4096 }], &data[4096..8192]), Ok(0), "poisoned: left");
        assert_eq!(read(&s, 4, 4096, 10), Err(libc::EUCLEAN));
        s.write(4, &[Span { offset: 4096, len: 4096 }], &data[4096..8192]).unwrap();
        assert_eq!(read(&s, 4, 0, 3 * 4096).unwrap(), data);
    }

    /// A repair rewrites the corrupt blocks it is given whole, and only those: a
    /// good block keeps its bytes even if the copy's differ.
    #[test]
    fn a_repair_rewrites_only_corrupt_blocks() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let data = bytes(4 * 4096 + 10, 9);
        s.write(5, &[Span { offset: 0, len: data.len() as u32 }], &data).unwrap();
        flip(&s, 5, 2 * 4096);
        flip(&s, 5, 4 * 4096 + 3); // the partial last block
        let mut copy = data.clone();
        copy[0] ^= 0xff; // block 0 is good here: the copy's byte must not land
        let span = Span { offset: 0, len: copy.len() as u32 };
        assert_eq!(s.repair(5, &[span], &copy), Ok(2));
        assert_eq!(read(&s, 5, 0, 1 << 20).unwrap(), data);
        assert_eq!(s.repair(5, &[span], &copy), Ok(0), "nothing corrupt is left");
    }

    /// A write whose bytes do not match the writer's sums writes nothing
    /// (EBADMSG); sums that do not count its pieces are refused (EINVAL).
    #[test]
    fn a_write_whose_bytes_do_not_match_its_sums_writes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let data = bytes(10_000, 13);
        let span = [Span { offset: 3000, len: 10_000 }];
        let sums: Vec<u64> = gust_proto::sums::piece_sums(3000, &data).collect();
        assert_eq!(sums.len(), 4, "1096 + 4096 + 4096 + 712 bytes");
        let mut bad = data.clone();
        bad[5000] ^= 1;
        assert_eq!(s.write_checked(9, &span, &bad, &sums), Err(libc::EBADMSG));
        assert_eq!(read(&s, 9, 0, 1 << 20).unwrap(), b"", "nothing written");
        assert_eq!(s.write_checked(9, &span, &data, &sums[..3]), Err(libc::EINVAL));
        assert_eq!(s.write_checked(9, &span, &data, &[sums.clone(), vec![1]].concat()), Err(libc::EINVAL));
        assert_eq!(s.write_checked(9, &span, &data, &sums), Ok(10_000));
        assert!(read(&s, 9, 3000, 10_000).unwrap() == data);
    }

    /// Local files of a build without sums (no sidecar) read unverified, and are
    /// summed from their next writes on.
    #[test]
    fn files_without_sums_read_unverified() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let data = bytes(10_000, 11);
        s.write(6, &[Span { offset: 0, len: 10_000 }], &data).unwrap();
        s.open.lock().unwrap().clear();
        fs::remove_file(s.sum_path(6)).unwrap();
        flip(&s, 6, 5);
        let mut want = data.clone();
        want[5] ^= 0x10;
        assert_eq!(read(&s, 6, 0, 10_000).unwrap(), want, "no sums: served as it is");
        s.write(6, &[Span { offset: 0, len: 4096 }], &data[..4096]).unwrap();
        flip(&s, 6, 6);
        assert_eq!(read(&s, 6, 0, 10), Err(libc::EUCLEAN), "summed once written");
    }

    /// Writers of overlapping unaligned ranges of one file, and readers beside
    /// them: no read ever finds a block and its sum disagreeing.
    #[test]
    fn concurrent_writers_and_readers_never_see_a_false_mismatch() {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(ChunkStore::open(d.path()).unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let mut x = t * 7919 + 1;
                    for _ in 0..400 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let offset = (x >> 33) % (3 << 20);
                        let len = 1 + ((x >> 13) % 20_000) as u32;
                        if t % 2 == 0 {
                            s.write(8, &[Span { offset, len }], &bytes(len as usize, t as u8)).unwrap();
                        } else {
                            let r = read(&s, 8, offset, len);
                            assert!(r.is_ok(), "read {offset}+{len}: {r:?}");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(read(&s, 8, 0, 4 << 20).is_ok());
    }

    /// A scrub pages through every local file in id order and names the corrupt
    /// ranges; each file is verified whole.
    #[test]
    fn a_scrub_finds_every_corrupt_range_page_by_page() {
        let d = tempfile::tempdir().unwrap();
        let s = ChunkStore::open(d.path()).unwrap();
        let ids = [5u128, 1 << 121, 3 << 120, 77];
        for id in ids {
            s.write(id, &[Span { offset: 0, len: 20_000 }], &bytes(20_000, id as u8)).unwrap();
        }
        flip(&s, 77, 9000);
        flip(&s, 3 << 120, 19_999);
        let (mut after, mut seen, mut bad) = (None, Vec::new(), Vec::new());
        loop {
            let p = s.scrub(after, 30_000).unwrap();
            assert!(p.files <= 2, "about max_bytes a page");
            seen.push(p.files);
            bad.extend(p.corrupt);
            match p.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(seen.iter().sum::<u64>(), 4, "every file once: {seen:?}");
        bad.sort();
        assert_eq!(bad, vec![(77, 8192, 4096), (3 << 120, 16_384, 20_000 - 16_384)]);
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
