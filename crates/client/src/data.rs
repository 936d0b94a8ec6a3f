//! The data path: read, write, seek, truncate and sync through descriptors, window by
//! window, one request per daemon per window.
//!
//! A read or write window (at most `TRANSFER_WINDOW_BYTES`) groups its chunk spans
//! per daemon and pipelines one request per daemon plus, for a write, the size update
//! (for a read, the size lookup): one round trip whatever the number of daemons.
//!
//! Not for: where chunks live (routing.rs), descriptors (open_files.rs).

use crate::error::unexpected;
use crate::open_files::OpenFile;
use crate::routing::Placed;
use crate::rpc::Call;
use crate::{namespace::now_ns, Client, Errno, Result};
use gust_placement::Distributor;
use gust_proto::{FileKind, Request, Response, Span};
use std::sync::Arc;

/// Bytes per daemon request in one round of a large read or write. Keeps frames far
/// under BULK_BYTES_MAX and bounds the memory a transfer pins.
const TRANSFER_WINDOW_BYTES: u64 = 16 << 20;

impl Client {
    pub(crate) fn read_impl(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        let f = self.file(fd)?;
        let mut off = f.offset.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.read_file(&f, buf, *off)?;
        *off += n as u64;
        Ok(n)
    }

    pub(crate) fn pread_impl(&self, fd: i32, buf: &mut [u8], offset: u64) -> Result<usize> {
        let f = self.file(fd)?;
        self.read_file(&f, buf, offset)
    }

    pub(crate) fn write_impl(&self, fd: i32, buf: &[u8]) -> Result<usize> {
        let f = self.file_unsettled(fd)?;
        if let Some(n) = self.write_pending(&f, buf, None)? {
            return Ok(n);
        }
        let mut off = f.offset.lock().unwrap_or_else(|e| e.into_inner());
        if f.flags & libc::O_APPEND == 0 {
            if let Some(n) = self.write_behind(&f, buf, *off)? {
                *off += n as u64;
                return Ok(n);
            }
        }
        let (at, n) = self.write_file(&f, buf, Some(*off), Some(&f))?;
        *off = at + n as u64;
        drop(off);
        self.sync_if_asked(&f)?;
        Ok(n)
    }

    /// O_SYNC and O_DSYNC: a write returns only once it is durable.
    fn sync_if_asked(&self, f: &OpenFile) -> Result<()> {
        if f.flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            self.sync_file(f)?;
        }
        Ok(())
    }

    /// Writes at `offset`; on a descriptor opened with O_APPEND, Linux appends
    /// anyway, and so does this.
    pub(crate) fn pwrite_impl(&self, fd: i32, buf: &[u8], offset: u64) -> Result<usize> {
        let f = self.file_unsettled(fd)?;
        if let Some(n) = self.write_pending(&f, buf, Some(offset))? {
            return Ok(n);
        }
        if let Some(n) = self.write_behind(&f, buf, offset)? {
            return Ok(n);
        }
        let n = self.write_file(&f, buf, Some(offset), Some(&f)).map(|(_, n)| n)?;
        self.sync_if_asked(&f)?;
        Ok(n)
    }

    fn check_readable(f: &OpenFile) -> Result<()> {
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        if f.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(Errno(libc::EBADF));
        }
        Ok(())
    }

    fn read_file(&self, f: &OpenFile, buf: &mut [u8], offset: u64) -> Result<usize> {
        Self::check_readable(f)?;
        // Sizes this client's writes reached, through any descriptor, count.
        self.flush_all_sizes();
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some((size, data)) = &f.snapshot {
            // A small file opened read-only: its data came with the open.
            return Ok(crate::inline::read_inline(*size, data, buf, offset));
        }
        let mut done = 0usize;
        while done < buf.len() {
            let window = ((buf.len() - done) as u64).min(TRANSFER_WINDOW_BYTES) as usize;
            let n = self.read_window(f, &mut buf[done..done + window], offset + done as u64)?;
            done += n;
            if n < window {
                break;
            }
        }
        Ok(done)
    }

    /// One round: the size lookup and the chunk reads go out together, so a read
    /// costs one round trip however many daemons hold its chunks.
    fn read_window(&self, f: &OpenFile, buf: &mut [u8], offset: u64) -> Result<usize> {
        let len = buf.len() as u64;
        let placed = self.spans_by_daemon(f.file_id(), offset, len);
        // Of a hard-linked file, the size is at its link path (links.rs).
        let path = f.attrs_path();
        // The size (and inline data) from a grant this process holds (grants.rs):
        // then only the chunk reads go out.
        let held = self.granted_record(&path, true).filter(|(r, _)| r.linked_to().is_none());
        if let Some((record, data)) = &held {
            if record.file_id != f.file_id() {
                return Err(Errno(libc::ESTALE));
            }
            if let Some(data) = data {
                return Ok(crate::inline::read_inline(record.size, data, buf, offset));
            }
        }
        // What daemons of this node handed over is read here (short_circuit.rs),
        // straight into `buf`.
        let (mut local, mut per_daemon) = (Vec::new(), Vec::new());
        let ask = Self::may_ask(f);
        for (d, spans) in placed {
            match self.read_handed(d, f.file_id(), &spans, buf, ask) {
                Some(r) => local.push((spans, r)),
                None => per_daemon.push((d, spans)),
            }
        }
        let mut calls = Vec::new();
        let mut dests = Vec::new();
        if held.is_none() {
            // StatData, not Stat: a file with inline data answers with it (the chunk
            // reads then find nothing), for the same cost when it has none.
            calls.push(Call { daemon: self.md_daemon(&path), req: Request::StatData { path }, bulk: Vec::new() });
            dests.push(None);
        }
        for (d, spans) in &per_daemon {
            dests.push(Some(spans.iter().map(|(span, at)| (*at, span.len)).collect()));
            calls.push(Call {
                daemon: *d,
                req: Request::Read { file_id: f.file_id(), spans: spans.iter().map(|x| x.0).collect() },
                bulk: Vec::new(),
            });
        }
        // Chunk bytes land in `buf` straight from the sockets.
        let mut answers = self.transport.batch_into(calls, dests, buf).into_iter();
        let (size, inline) = match &held {
            Some((record, _)) => (record.size, None),
            None => match answers.next().expect("stat answer")? {
                // Linked since its open: the name's size is not kept (links.rs).
                (Response::RecordData { record, .. }, _) if record.linked_to().is_some() => {
                    if record.file_id != f.file_id() {
                        return Err(Errno(libc::ESTALE));
                    }
                    (self.get_stored_record(&self.learn_link(f)?)?.size, None)
                }
                (Response::RecordData { record, inline }, data) if record.file_id == f.file_id() => {
                    (record.size, inline.then_some(data))
                }
                // The path now names another file (renamed or replaced by another process).
                (Response::RecordData { .. }, _) => return Err(Errno(libc::ESTALE)),
                (r, _) => return Err(unexpected(r)),
            },
        };
        let mut first_err = None;
        let mut short = Vec::new();
        let spills = self.dist.spill_daemons() > 0 && inline.is_none();
        let local =
            local.into_iter().map(|(spans, r)| (spans, r.map(|span_lens| (Response::Data { span_lens }, Vec::new()))));
        let remote = per_daemon.into_iter().map(|(_, spans)| spans).zip(answers);
        for (spans, a) in local.chain(remote) {
            match a {
                Ok((Response::Data { span_lens }, _)) => {
                    if spills {
                        // Parts inside the file that this daemon does not hold may
                        // have spilled to the chunk's next daemons (spill.rs).
                        short.extend(crate::spill::remainders(&spans, &span_lens).filter_map(|(s, at)| {
                            let inside = size.saturating_sub(s.offset).min(s.len as u64);
                            (inside > 0).then_some((Span { offset: s.offset, len: inside as u32 }, at))
                        }));
                    }
                }
                Ok((r, _)) => return Err(unexpected(r)),
                // Chunks past the end hold nothing to read: a dead daemon holding only
                // those does not fail a read with a buffer larger than the file.
                Err(e) if spans.iter().any(|(s, _)| s.offset < size) => first_err = first_err.or(Some(e)),
                Err(_) => {}
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        if let Some(data) = inline {
            return Ok(crate::inline::read_inline(size, &data, buf, offset));
        }
        if !short.is_empty() {
            self.read_spilled(f.file_id(), short, buf)?;
        }
        Ok(size.saturating_sub(offset).min(len) as usize)
    }

    /// Reads `spans` (with their places in `buf`) from the local file `daemon`
    /// handed this process, if it did (short_circuit.rs): how many bytes of each
    /// it holds, as a daemon answers. None: send a request. A block that fails its
    /// checksum here is read again through the daemon (which takes the file back
    /// first), so that the corruption is found, logged and answered where it is
    /// without short-circuit I/O.
    fn read_handed(
        &self,
        daemon: u32,
        file_id: u128,
        spans: &[Placed],
        buf: &mut [u8],
        ask: bool,
    ) -> Option<Result<Vec<u32>>> {
        let h = self.handed(daemon, file_id, ask)?;
        let access = &self.transport.grants.short_circuit()?.access;
        match h.with(|local| access.read_placed(local, file_id, spans, buf))? {
            Err(crate::integrity::CORRUPT) => None,
            r => Some(r.map_err(Errno)),
        }
    }

    pub(crate) fn check_writable(f: &OpenFile) -> Result<()> {
        // Linux checks the access mode first: write(2) on a directory opened
        // read-only is EBADF.
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno(libc::EBADF));
        }
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        Ok(())
    }

    /// Writes `buf` at `offset` (or appends, for O_APPEND) through chunks: the data
    /// of a deferred create settled as an ordinary file (inline.rs).
    pub(crate) fn write_data(&self, f: &OpenFile, buf: &[u8], offset: u64) -> Result<()> {
        self.write_file(f, buf, Some(offset), None).map(|_| ())
    }

    /// Returns (offset written at, bytes written). With `cache`, the descriptor's
    /// size update is batched (size_cache.rs) where it can be.
    pub(crate) fn write_file(
        &self,
        f: &OpenFile,
        buf: &[u8],
        offset: Option<u64>,
        cache: Option<&Arc<OpenFile>>,
    ) -> Result<(u64, usize)> {
        Self::check_writable(f)?;
        if !buf.is_empty() {
            f.written.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.listing.invalidate();
        // One snapshot of the path for the whole write: a rename through this
        // client meanwhile cannot split its requests between two names. (Of a
        // hard-linked file, its link path: links.rs.)
        let mut path = f.attrs_path();
        let mut md = self.md_daemon(&path);
        let append = f.flags & libc::O_APPEND != 0;
        let cached = cache.filter(|_| self.caches_size(f));
        let start = if append {
            // Reserve the range first: two appenders never get the same offset.
            let reserve = |path: &str| Request::UpdateSize {
                path: path.to_string(),
                file_id: f.file_id(),
                end: 0,
                append_len: Some(buf.len() as u64),
                mtime_ns: now_ns(),
            };
            let answer = match self.transport.call(md, reserve(&path)) {
                Err(Errno(libc::EREMOTE)) => {
                    // Linked since its open (links.rs).
                    path = self.learn_link(f)?;
                    md = self.md_daemon(&path);
                    self.transport.call(md, reserve(&path))
                }
                r => r,
            };
            match answer? {
                Response::Offset(o) => o,
                r => return Err(unexpected(r)),
            }
        } else {
            offset.expect("non-append writes have an offset")
        };
        if buf.is_empty() {
            return Ok((start, 0));
        }
        start.checked_add(buf.len() as u64).filter(|e| *e <= i64::MAX as u64).ok_or(Errno(libc::EFBIG))?;
        let mut done = 0usize;
        while done < buf.len() {
            let window = ((buf.len() - done) as u64).min(TRANSFER_WINDOW_BYTES) as usize;
            let at = start + done as u64;
            let piece = &buf[done..done + window];
            let mut extra = Vec::new();
            if !append && cached.is_none() {
                // The size update travels with the data, not after it.
                extra.push(Call {
                    daemon: md,
                    req: Request::UpdateSize {
                        path: path.clone(),
                        file_id: f.file_id(),
                        end: at + window as u64,
                        append_len: None,
                        mtime_ns: now_ns(),
                    },
                    bulk: Vec::new(),
                });
            }
            match self.write_chunks(f.file_id(), at, piece, extra, Self::may_ask(f)) {
                // Only the size update can say so: the file was linked since its open
                // (links.rs). The data is written; the size goes to the link path.
                Err(Errno(libc::EREMOTE)) => {
                    path = self.learn_link(f)?;
                    md = self.md_daemon(&path);
                    let req = Request::UpdateSize {
                        path: path.clone(),
                        file_id: f.file_id(),
                        end: at + window as u64,
                        append_len: None,
                        mtime_ns: now_ns(),
                    };
                    self.transport.call(md, req)?;
                }
                r => r?,
            }
            if let Some(a) = cached {
                self.cache_size(a, at + window as u64)?;
            }
            done += window;
        }
        // A write by a caller without privilege clears the set-id bits (once per
        // open; best effort: the data is written whatever this answers).
        let clear = f.clear_set_id.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mode) = clear {
            let req = Request::SetAttr {
                path: path.clone(),
                mode: Some(mode),
                atime_ns: None,
                mtime_ns: None,
                ctime_ns: now_ns(),
            };
            let _ = self.call_md(&path, req);
        }
        Ok((start, done))
    }

    pub(crate) fn lseek_impl(&self, fd: i32, offset: i64, whence: i32) -> Result<u64> {
        // A deferred create stays deferred: its size is what was written so far
        // (stdio and Python's buffered files ask where they are right after an open).
        let f = self.files.get(fd)?;
        let pending = self.pending_record(&f);
        let f = if pending.is_some() { f } else { self.file(fd)? };
        let mut off = f.offset.lock().unwrap_or_else(|e| e.into_inner());
        let size = || -> Result<u64> {
            match &pending {
                Some(r) => Ok(r.size),
                None => Ok(self.get_record(&f.path())?.size),
            }
        };
        let new: i64 = match whence {
            libc::SEEK_SET => offset,
            libc::SEEK_CUR => (*off as i64).checked_add(offset).ok_or(Errno(libc::EOVERFLOW))?,
            libc::SEEK_END => (size()? as i64).checked_add(offset).ok_or(Errno(libc::EOVERFLOW))?,
            // The whole file counts as data (allowed by POSIX; Linux does the same on
            // file systems without hole tracking).
            libc::SEEK_DATA => {
                let s = size()?;
                if offset < 0 || offset as u64 >= s {
                    return Err(Errno(libc::ENXIO));
                }
                offset
            }
            libc::SEEK_HOLE => {
                let s = size()?;
                if offset < 0 || offset as u64 >= s {
                    return Err(Errno(libc::ENXIO));
                }
                s as i64
            }
            _ => return Err(Errno(libc::EINVAL)),
        };
        if new < 0 {
            return Err(Errno(libc::EINVAL));
        }
        *off = new as u64;
        Ok(new as u64)
    }

    /// Sets the size of the file at resolved path `p`; chunks past the new end are
    /// cut on the daemons that can hold them.
    pub(crate) fn truncate_resolved(&self, p: &str, size: u64) -> Result<()> {
        self.listing.invalidate();
        if size > i64::MAX as u64 {
            return Err(Errno(libc::EFBIG));
        }
        let old = match self.call_md(p, Request::Truncate { path: p.to_string(), size, mtime_ns: now_ns() })? {
            Response::Record(r) => r,
            r => return Err(unexpected(r)),
        };
        self.call_chunk_daemons(old.file_id, size, old.size, None, || Request::TruncateChunks {
            file_id: old.file_id,
            size,
        })
    }

    pub(crate) fn truncate_impl(&self, path: &str, size: u64) -> Result<()> {
        let (p, r) = self.resolve(path)?;
        if r.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        self.may_truncate(&r)?;
        self.truncate_resolved(&p, size)
    }

    pub(crate) fn ftruncate_impl(&self, fd: i32, size: u64) -> Result<()> {
        let f = self.file(fd)?;
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno(libc::EINVAL));
        }
        self.truncate_resolved(&f.attrs_path(), size)
    }

    /// Makes the file's data and the metadata log durable on every daemon involved.
    pub(crate) fn fsync_impl(&self, fd: i32) -> Result<()> {
        let f = self.file(fd)?;
        self.sync_file(&f)
    }

    fn sync_file(&self, f: &OpenFile) -> Result<()> {
        let path = f.attrs_path();
        let r = self.get_record(&path)?;
        let md = self.md_daemon(&path);
        self.call_chunk_daemons(f.file_id(), 0, r.size, Some(md), || Request::Fsync { file_id: Some(f.file_id()) })
    }
}
