//! Staging on the daemon (`gust stage`): the daemon copies the chunks it holds
//! between its chunk store and files of the shared file system, and creates and
//! commits staged records in batches. The client plans (which daemon holds which
//! spans, which files need copying); a daemon only copies what it is told, so
//! staging needs no daemon-to-daemon traffic.
//!
//! Every request is bounded (entries, counted bytes, file bytes moved) and each
//! entry or item gets its own outcome: one unreadable file fails that file, not the
//! batch. An external path is absolute and opened with the daemon's own rights, the
//! instance owner's, which the authenticated client has anyway.
//!
//! A stage-in from an object store names presigned object URLs instead of paths
//! (gust_objstore::presigned): the daemon reads the ranges of its chunks, and small
//! objects whole, with HTTP GETs, and never holds the store's credentials.

use crate::state::State;
use gust_objstore::presigned;
use gust_proto::path::validate as validate_path;
use gust_proto::{
    entry_bytes, EventKind, FileKind, HashSource, Response, Span, SpanHashes, StageChunks, StageCommit, StageEntry,
    StageExport, StageHash, StageOutcome, INLINE_BYTES_MAX, PATH_BYTES_MAX, SPANS_PER_REQUEST_MAX,
    STAGE_BATCH_BYTES_MAX, STAGE_BATCH_ENTRIES_MAX, STAGE_REQUEST_BYTES_MAX,
};
use gust_store::Res;
use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::Ordering;

/// Size of the copy buffer of each worker thread (when the kernel cannot copy).
const COPY_BUFFER_BYTES: usize = 1 << 20;

thread_local! {
    static COPY_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

fn os_errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// An external path: absolute, no NUL, at most PATH_MAX; or a presigned object
/// URL (stage-in from an object store) of at most as many bytes.
fn validate_external(p: &str) -> Res<()> {
    if p.len() > PATH_BYTES_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if !(p.starts_with('/') || presigned::is_url(p)) || p.contains('\0') {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Checks a batch's size bounds: entries and counted bytes.
fn check_batch(n: usize, bytes: usize) -> Res<()> {
    if n > STAGE_BATCH_ENTRIES_MAX || bytes > STAGE_BATCH_BYTES_MAX + STAGE_BATCH_BYTES_MAX / 2 {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Checks the spans of a pull, push or hash request: count, ranges and the bytes
/// they move in total.
fn check_spans<'a>(spans: impl Iterator<Item = &'a Span>) -> Res<()> {
    let mut count = 0usize;
    let mut total = 0u64;
    for s in spans {
        count += 1;
        s.offset.checked_add(s.len as u64).filter(|e| *e <= i64::MAX as u64).ok_or(libc::EFBIG)?;
        total += s.len as u64;
    }
    if count > SPANS_PER_REQUEST_MAX || total > STAGE_REQUEST_BYTES_MAX {
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// Copies `len` bytes at `offset` of `src` to the same offset of `dst`: by the
/// kernel (copy_file_range) where it can, else through a buffer. Returns the bytes
/// copied, fewer if `src` ends first.
fn copy_range(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<u64> {
    let mut done = 0u64;
    while done < len {
        let mut off_in = (offset + done) as libc::loff_t;
        let mut off_out = off_in;
        let want = (len - done).min(1 << 30) as usize;
        // SAFETY: both descriptors are open files we own; the offsets are ours.
        let n = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut off_in, dst.as_raw_fd(), &mut off_out, want, 0) };
        if n > 0 {
            done += n as u64;
            continue;
        }
        if n == 0 {
            return Ok(done);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Not between these two file systems (or not at all): copy by hand.
            Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP | libc::EBADF) => {
                return copy_buffered(src, dst, offset + done, len - done).map(|n| done + n)
            }
            _ => return Err(e),
        }
    }
    Ok(done)
}

fn copy_buffered(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<u64> {
    COPY_BUFFER.with(|b| {
        let mut buf = b.borrow_mut();
        if buf.len() < COPY_BUFFER_BYTES {
            buf.resize(COPY_BUFFER_BYTES, 0);
        }
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(COPY_BUFFER_BYTES as u64) as usize;
            let n = match src.read_at(&mut buf[..want], offset + done) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            dst.write_all_at(&buf[..n], offset + done)?;
            done += n as u64;
        }
        Ok(done)
    })
}

fn open_external(p: &str, write: bool) -> Res<File> {
    validate_external(p)?;
    let mut o = OpenOptions::new();
    if write {
        o.write(true);
    } else {
        o.read(true);
    }
    o.open(p).map_err(os_errno)
}

/// Reads a small external file whole: its bytes if it has exactly `size`, else
/// ENODATA (it changed since the client listed it).
fn read_small(p: &str, size: u64) -> Res<Vec<u8>> {
    if presigned::is_url(p) {
        validate_external(p)?;
        // One byte more than wanted: a longer object is a changed one.
        let data = presigned::read_range(p, 0, size + 1)?;
        return if data.len() as u64 == size { Ok(data) } else { Err(libc::ENODATA) };
    }
    let f = open_external(p, false)?;
    let mut data = Vec::with_capacity(size as usize);
    f.take(INLINE_BYTES_MAX as u64 + 1).read_to_end(&mut data).map_err(os_errno)?;
    if data.len() as u64 != size {
        return Err(libc::ENODATA);
    }
    Ok(data)
}

pub(crate) fn create(state: &State, entries: Vec<StageEntry>) -> Res<Response> {
    let bytes =
        entries.iter().map(|e| entry_bytes(&[&e.path, &e.record.target, e.source.as_deref().unwrap_or("")], 0)).sum();
    check_batch(entries.len(), bytes)?;
    let outcomes = entries.into_iter().map(|e| create_one(state, e).unwrap_or_else(StageOutcome::err)).collect();
    Ok(Response::Staged(outcomes))
}

fn create_one(state: &State, e: StageEntry) -> Res<StageOutcome> {
    validate_path(&e.path)?;
    e.record.check()?;
    let data = match &e.source {
        Some(src) => {
            if e.record.kind != FileKind::File || e.record.size > INLINE_BYTES_MAX as u64 {
                return Err(libc::EINVAL);
            }
            Some(read_small(src, e.record.size)?)
        }
        None => None,
    };
    let replaced = state.metadata.stage_create(&e.path, &e.record, data.as_deref(), e.replace)?;
    state.events.record(EventKind::Create, &e.path, e.record.file_id, false);
    let n = data.map_or(0, |d| d.len() as u64);
    state.metrics.bytes_written.fetch_add(n, Ordering::Relaxed);
    Ok(StageOutcome { errno: 0, bytes: n, replaced })
}

/// Pull (external -> chunks) or push (chunks -> external) of every item.
pub(crate) fn copy(state: &State, items: Vec<StageChunks>, pull: bool) -> Res<Response> {
    let bytes = items.iter().map(|i| entry_bytes(&[&i.external], i.spans.len())).sum();
    check_batch(items.len(), bytes)?;
    check_spans(items.iter().flat_map(|i| i.spans.iter()))?;
    let outcomes = items
        .into_iter()
        .map(|i| {
            let r = if pull { pull_one(state, &i) } else { push_one(state, &i) };
            r.map(StageOutcome::ok).unwrap_or_else(StageOutcome::err)
        })
        .collect();
    Ok(Response::Staged(outcomes))
}

/// Copies an item's spans from its external file (by the kernel) or from a
/// presigned object URL (one ranged GET per span; adjacent chunks were joined into
/// one span by the client) into this daemon's chunks of the file.
fn pull_one(state: &State, i: &StageChunks) -> Res<u64> {
    let file = if presigned::is_url(&i.external) {
        validate_external(&i.external)?;
        None
    } else {
        Some(open_external(&i.external, false)?)
    };
    let local = state.chunks.local_file(i.file_id, true)?.expect("create=true always yields a file");
    let mut total = 0;
    for s in &i.spans {
        let n = match &file {
            Some(src) => copy_range(src, &local.data, s.offset, s.len as u64).map_err(os_errno)?,
            None => {
                let data = presigned::read_range(&i.external, s.offset, s.len as u64)?;
                local.data.write_all_at(&data, s.offset).map_err(os_errno)?;
                data.len() as u64
            }
        };
        total += n;
        if n < s.len as u64 {
            break; // the source ended early: the client sees a short count
        }
    }
    // Summed after from what landed.
    state.chunks.sum_spans(i.file_id, &i.spans)?;
    state.metrics.bytes_written.fetch_add(total, Ordering::Relaxed);
    Ok(total)
}

fn push_one(state: &State, i: &StageChunks) -> Res<u64> {
    let dst = open_external(&i.external, true)?;
    let Some(local) = state.chunks.local_file(i.file_id, false)? else { return Ok(0) };
    // Nothing corrupt leaves for the parallel file system: the spans are verified
    // first (a read pass; the copy itself stays in the kernel).
    state.chunks.verify_spans(i.file_id, &i.spans)?;
    let local = &local.data;
    let local_len = local.metadata().map_err(os_errno)?.len();
    let mut total = 0;
    for s in &i.spans {
        // Past the local file's end the span is a hole: the destination, sized by
        // its creator, reads zeros there already.
        let len = (s.len as u64).min(local_len.saturating_sub(s.offset));
        if len > 0 {
            total += copy_range(local, &dst, s.offset, len).map_err(os_errno)?;
        }
    }
    state.metrics.bytes_read.fetch_add(total, Ordering::Relaxed);
    Ok(total)
}

pub(crate) fn export(state: &State, items: Vec<StageExport>) -> Res<Response> {
    let bytes = items.iter().map(|i| entry_bytes(&[&i.path, &i.dest], 0)).sum();
    check_batch(items.len(), bytes)?;
    let outcomes = items
        .into_iter()
        .map(|i| export_one(state, &i).map(StageOutcome::ok).unwrap_or_else(StageOutcome::err))
        .collect();
    Ok(Response::Staged(outcomes))
}

/// Writes an inline file to a temporary name beside `dest`, gives it the record's
/// mode and times, and renames it over `dest`: a reader of `dest` sees the old file
/// or the whole new one.
fn export_one(state: &State, i: &StageExport) -> Res<u64> {
    validate_path(&i.path)?;
    validate_external(&i.dest)?;
    let (rec, data) = state.metadata.get_with_data(&i.path)?.ok_or(libc::ENOENT)?;
    if rec.file_id != i.file_id {
        return Err(libc::ESTALE);
    }
    if rec.kind != FileKind::File {
        return Err(libc::EINVAL);
    }
    let data = data.unwrap_or_default();
    if data.is_empty() && rec.size > 0 {
        return Err(libc::EINVAL); // not inline: its chunks are pushed instead
    }
    let (dir, name) = i.dest.rsplit_once('/').ok_or(libc::EINVAL)?;
    let tmp = format!("{dir}/.{name}.gust-stage");
    let r = (|| -> io::Result<()> {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        f.write_all(&data)?;
        if (data.len() as u64) < rec.size {
            f.set_len(rec.size)?;
        }
        set_mode_and_times(&f, rec.mode, rec.atime_ns, rec.mtime_ns)?;
        std::fs::rename(&tmp, &i.dest)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(os_errno(e));
    }
    state.metrics.bytes_read.fetch_add(data.len() as u64, Ordering::Relaxed);
    Ok(rec.size)
}

/// fchmod and futimens of an open file (nanosecond times since the epoch).
pub fn set_mode_and_times(f: &File, mode: u32, atime_ns: i64, mtime_ns: i64) -> io::Result<()> {
    let fd = f.as_raw_fd();
    let ts = |ns: i64| libc::timespec { tv_sec: ns.div_euclid(1_000_000_000), tv_nsec: ns.rem_euclid(1_000_000_000) };
    let times = [ts(atime_ns), ts(mtime_ns)];
    // SAFETY: fd is open for as long as `f` lives; `times` is two valid timespecs.
    if unsafe { libc::fchmod(fd, (mode & 0o7777) as libc::mode_t) } != 0
        || unsafe { libc::futimens(fd, times.as_ptr()) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn hash(state: &State, items: Vec<StageHash>) -> Res<Response> {
    let bytes = items
        .iter()
        .map(|i| match &i.source {
            HashSource::Chunks(_) => entry_bytes(&[], i.spans.len()),
            HashSource::Inline(p) | HashSource::External(p) => entry_bytes(&[p], i.spans.len()),
        })
        .sum();
    check_batch(items.len(), bytes)?;
    check_spans(items.iter().flat_map(|i| i.spans.iter()))?;
    let results = items
        .iter()
        .map(|i| match hash_one(state, i) {
            Ok(hashes) => SpanHashes { errno: 0, hashes },
            Err(e) => SpanHashes { errno: e, hashes: Vec::new() },
        })
        .collect();
    Ok(Response::Hashes(results))
}

fn hash_one(state: &State, i: &StageHash) -> Res<Vec<u64>> {
    use twox_hash::XxHash3_64;
    let mut out = Vec::with_capacity(i.spans.len());
    match &i.source {
        HashSource::Chunks(file_id) => {
            let mut buf = Vec::new();
            for s in &i.spans {
                state.chunks.read(*file_id, std::slice::from_ref(s), &mut buf)?;
                buf.resize(s.len as usize, 0); // holes and a short local file are zeros
                out.push(XxHash3_64::oneshot(&buf));
            }
        }
        HashSource::Inline(path) => {
            validate_path(path)?;
            let (rec, data) = state.metadata.get_with_data(path)?.ok_or(libc::ENOENT)?;
            let mut data = match data {
                Some(d) => d,
                None if rec.size == 0 => Vec::new(),
                None => return Err(libc::EINVAL), // not inline: hash its chunks
            };
            data.resize(rec.size as usize, 0);
            for s in &i.spans {
                let start = (s.offset as usize).min(data.len());
                let end = (s.offset as usize).saturating_add(s.len as usize).min(data.len());
                out.push(XxHash3_64::oneshot(&data[start..end]));
            }
        }
        HashSource::External(p) => {
            let f = open_external(p, false)?;
            let mut buf = Vec::new();
            for s in &i.spans {
                buf.clear();
                buf.resize(s.len as usize, 0);
                let mut done = 0;
                while done < buf.len() {
                    match f.read_at(&mut buf[done..], s.offset + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(os_errno(e)),
                    }
                }
                buf.truncate(done);
                out.push(XxHash3_64::oneshot(&buf));
            }
        }
    }
    Ok(out)
}

pub(crate) fn commit(state: &State, items: Vec<StageCommit>) -> Res<Response> {
    let bytes = items.iter().map(|i| entry_bytes(&[&i.path], 0)).sum();
    check_batch(items.len(), bytes)?;
    let outcomes = items
        .into_iter()
        .map(|i| {
            let r = validate_path(&i.path)
                .and_then(|_| state.metadata.stage_commit(&i.path, i.file_id, i.size, i.mtime_ns, i.atime_ns));
            match r {
                Ok(rec) => {
                    state.events.record(EventKind::CloseWrite, &i.path, rec.file_id, false);
                    StageOutcome::ok(rec.size)
                }
                Err(e) => StageOutcome::err(e),
            }
        })
        .collect();
    Ok(Response::Staged(outcomes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gust_proto::Record;
    use gust_store::chunks::ChunkStore;
    use gust_store::metadata::MetadataStore;

    fn state(dir: &std::path::Path) -> State {
        let md = MetadataStore::open(&dir.join("metadata")).unwrap();
        let chunks = ChunkStore::open(&dir.join("chunks")).unwrap();
        State::new(0, dir.to_path_buf(), md, chunks, vec![0; 32], 1 << 20)
    }

    fn file(size: u64, file_id: u128) -> Record {
        Record {
            kind: FileKind::File,
            mode: 0o640,
            size,
            file_id,
            nlink: 1,
            ctime_ns: 1,
            mtime_ns: 2,
            atime_ns: 3,
            target: String::new(),
            uid: 0,
            gid: 0,
            xattrs: Vec::new(),
        }
    }

    fn outcomes(r: Res<Response>) -> Vec<StageOutcome> {
        match r {
            Ok(Response::Staged(v)) => v,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pull_push_and_hash_keep_bytes_and_report_short_sources() {
        let d = tempfile::tempdir().unwrap();
        let st = state(d.path());
        let src = d.path().join("src");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let src = src.to_str().unwrap().to_string();
        let spans = vec![Span { offset: 0, len: 100_000 }, Span { offset: 200_000, len: 100_000 }];
        let pull = StageChunks { file_id: 9, external: src.clone(), spans: spans.clone() };
        assert_eq!(outcomes(copy(&st, vec![pull.clone()], true)), vec![StageOutcome::ok(200_000)]);
        // Past the source's end the count comes back short.
        let long = StageChunks { spans: vec![Span { offset: 250_000, len: 100_000 }], ..pull.clone() };
        assert_eq!(outcomes(copy(&st, vec![long], true)), vec![StageOutcome::ok(50_000)]);
        // Push into a sized file: the spans held arrive, the hole stays zeros.
        let dst = d.path().join("dst");
        std::fs::File::create(&dst).unwrap().set_len(300_000).unwrap();
        let push = StageChunks { file_id: 9, external: dst.to_str().unwrap().into(), spans };
        assert_eq!(outcomes(copy(&st, vec![push], false)), vec![StageOutcome::ok(200_000)]);
        let got = std::fs::read(&dst).unwrap();
        assert_eq!(&got[..100_000], &data[..100_000]);
        assert!(got[100_000..200_000].iter().all(|&b| b == 0));
        assert_eq!(&got[200_000..], &data[200_000..]);
        // Hashes of chunks and of the source agree where the bytes do.
        let h = |source| StageHash {
            source,
            spans: vec![Span { offset: 0, len: 100_000 }, Span { offset: 100_000, len: 10 }],
        };
        let Ok(Response::Hashes(v)) = hash(&st, vec![h(HashSource::Chunks(9)), h(HashSource::External(src.clone()))])
        else {
            panic!()
        };
        assert_eq!(v[0].hashes[0], v[1].hashes[0]);
        assert_ne!(v[0].hashes[1], v[1].hashes[1], "a hole is not the source's bytes");
    }

    #[test]
    fn bad_items_fail_alone_and_bad_batches_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let st = state(d.path());
        let ok = d.path().join("ok");
        std::fs::write(&ok, b"abc").unwrap();
        let item = |external: &str| StageChunks {
            file_id: 1,
            external: external.into(),
            spans: vec![Span { offset: 0, len: 3 }],
        };
        let r =
            outcomes(copy(&st, vec![item("relative/path"), item("/no/such/file"), item(ok.to_str().unwrap())], true));
        assert_eq!(r.iter().map(|o| o.errno).collect::<Vec<_>>(), vec![libc::EINVAL, libc::ENOENT, 0]);
        // Too many bytes in one request, an overflowing span, too many entries.
        let big = StageChunks { spans: vec![Span { offset: 0, len: u32::MAX }], ..item("/x") };
        assert_eq!(copy(&st, vec![big], true).err(), Some(libc::EINVAL));
        let wrap = StageChunks { spans: vec![Span { offset: u64::MAX - 1, len: 2 }], ..item("/x") };
        assert_eq!(copy(&st, vec![wrap], true).err(), Some(libc::EFBIG));
        assert_eq!(copy(&st, vec![item("/x"); STAGE_BATCH_ENTRIES_MAX + 1], true).err(), Some(libc::EINVAL));

        // Creates: a small file's data from its source; a size that does not match
        // the source is ENODATA; a directory entry is refused; EEXIST unless replace.
        let entry = |path: &str, size, source: Option<&str>, replace| StageEntry {
            path: path.into(),
            record: file(size, 5),
            source: source.map(Into::into),
            replace,
        };
        let src = ok.to_str().unwrap();
        let mut dir = entry("/d", 0, None, false);
        dir.record.kind = FileKind::Dir;
        let r = outcomes(create(&st, vec![entry("/a", 3, Some(src), false), entry("/b", 4, Some(src), false), dir]));
        assert_eq!(r.iter().map(|o| o.errno).collect::<Vec<_>>(), vec![0, libc::ENODATA, libc::EINVAL]);
        assert_eq!(st.metadata.get_with_data("/a").unwrap().unwrap().1.as_deref(), Some(&b"abc"[..]));
        let r = outcomes(create(&st, vec![entry("/a", 3, Some(src), false), entry("/a", 0, None, true)]));
        assert_eq!(r[0].errno, libc::EEXIST);
        assert_eq!((r[1].errno, r[1].replaced.as_ref().map(|x| x.size)), (0, Some(3)));
        // Commit needs the same file; export needs inline data.
        let c = |id| StageCommit { path: "/a".into(), file_id: id, size: 10, mtime_ns: 4, atime_ns: 4 };
        let r = outcomes(commit(&st, vec![c(6), c(5)]));
        assert_eq!((r[0].errno, r[1].errno), (libc::ESTALE, 0));
        let dest = d.path().join("out").to_str().unwrap().to_string();
        let r = outcomes(export(&st, vec![StageExport { path: "/a".into(), file_id: 5, dest }]));
        assert_eq!(r[0].errno, libc::EINVAL, "size 10 with no inline data: not inline");
    }

    #[test]
    fn a_view_s_placeholder_is_taken_by_the_first_fetch_and_only_by_it() {
        let d = tempfile::tempdir().unwrap();
        let st = state(d.path());
        let mut ph = file(7, 8);
        ph.target = "s3://b/k#etag".into();
        assert!(ph.unfetched_object().is_some());
        let entry = |record: Record, replace| StageEntry { path: "/v".into(), record, source: None, replace };
        assert_eq!(outcomes(create(&st, vec![entry(ph.clone(), true)]))[0].errno, 0);
        // The first fetch (no replace) takes it and is told what it replaced; a
        // second one finds a real file there.
        let r = outcomes(create(&st, vec![entry(file(7, 9), false), entry(file(7, 10), false)]));
        assert_eq!((r[0].errno, r[0].replaced.as_ref().map(|x| x.file_id)), (0, Some(8)));
        assert_eq!(r[1].errno, libc::EEXIST);
        assert_eq!(st.metadata.get("/v").unwrap().unwrap().file_id, 9);
        // A file whose target is a link path is a name of a linked file, not one.
        let mut name = file(7, 8);
        name.target = gust_proto::path::link_path(8);
        assert!(name.unfetched_object().is_none());
    }
}
