//! Writes: what a descriptor may keep (a deferred create's data, inline.rs; the
//! write-behind buffer, here), then one round per window in which every daemon's
//! chunk write and the size update go out together (chunks.rs), or the size stays
//! with the descriptor (size_cache.rs).
//!
//! Write-behind (opt-in: `$GUST_WRITE_BEHIND`, see [`Client::set_write_behind`]):
//! adjacent writes through one descriptor are gathered in a bounded buffer of the
//! descriptor and sent as one chunk write, as a page cache would.
//!
//! Every write through a descriptor is otherwise one synchronous chunk-write request:
//! 4 processes writing 8 KiB transfers to one file cost a request (~30 µs of CPU on
//! the test machine, client and daemon together) per 8 KiB. Gathered up to a chunk
//! (512 KiB by default), 64 such writes cost one request and 64 memory copies.
//!
//! A write (not O_APPEND, O_SYNC or O_DSYNC) is kept if it starts where the
//! descriptor's buffer ends (or the buffer is empty) and fits; the buffer is sent:
//! * when it is full (the write that fills it sends it) or a write does not follow
//!   it (the buffer goes first, the new write starts a new one),
//! * at the first write 100 ms or more after the buffer's first one
//!   ([`crate::size_cache::SIZE_FLUSH_INTERVAL`]; there is no timer thread),
//! * at close, fsync, and any other use of the descriptor (read, fstat, lseek,
//!   ftruncate, ...: `Client::file`), any read or path operation of this client
//!   (`flush_all_sizes`, which sends buffers before sizes), before fork (preload),
//!   exec and exit.
//!
//! So this process reads its own writes, through any descriptor; another process
//! sees them from the flush (docs/SEMANTICS.md: the weaker consistency is why it is
//! opt-in). A flush that fails (ENOSPC, a lost daemon, a removed file) is reported
//! by the next use of the descriptor, its fsync or its close, as a page cache
//! reports write-back errors; the write that was buffered had returned its length.
//!
//! Not for: sizes (size_cache.rs), deferred creates (inline.rs).

use super::TRANSFER_WINDOW_BYTES;
use crate::error::unexpected;
use crate::open_files::OpenFile;
use crate::size_cache::SIZE_FLUSH_INTERVAL;
use crate::{namespace::now_ns, Client, Errno, Result};
use gust_proto::{FileKind, Request, Response};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Largest buffer a descriptor may gather ($GUST_WRITE_BEHIND in bytes is capped
/// here): the data path's window, so a flush is one round of requests.
pub(crate) const WRITE_BEHIND_BYTES_MAX: usize = 16 << 20;

/// Adjacent writes of one descriptor not sent yet: `data` goes at `offset`.
pub(crate) struct WriteBuffer {
    offset: u64,
    data: Vec<u8>,
    since: Instant,
}

/// The buffer size from `$GUST_WRITE_BEHIND`: unset, empty or 0 is off; 1 or a
/// non-number is one chunk; N > 1 is N bytes (at most WRITE_BEHIND_BYTES_MAX).
pub(crate) fn bytes_from_env(chunk_size: u64) -> usize {
    match std::env::var("GUST_WRITE_BEHIND") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(0) => 0,
            Ok(1) | Err(_) => chunk_size as usize,
            Ok(n) => n,
        },
        _ => 0,
    }
    .min(WRITE_BEHIND_BYTES_MAX)
}

impl Client {
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

    /// O_SYNC and O_DSYNC: a write returns only once it is durable.
    fn sync_if_asked(&self, f: &OpenFile) -> Result<()> {
        if f.flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            self.sync_file(f)?;
        }
        Ok(())
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
    fn write_file(
        &self,
        f: &OpenFile,
        buf: &[u8],
        offset: Option<u64>,
        cache: Option<&Arc<OpenFile>>,
    ) -> Result<(u64, usize)> {
        Self::check_writable(f)?;
        if !buf.is_empty() {
            f.written.store(true, Ordering::Relaxed);
        }
        self.listing.invalidate();
        // One snapshot of the path for the whole write: a rename through this
        // client meanwhile cannot split its requests between two names. (Of a
        // hard-linked file, its link path: links.rs.)
        let mut path = f.attrs_path();
        let append = f.flags & libc::O_APPEND != 0;
        let start = match offset {
            Some(o) if !append => o,
            _ => self.reserve_append(f, &mut path, buf.len() as u64)?,
        };
        if buf.is_empty() {
            return Ok((start, 0));
        }
        start.checked_add(buf.len() as u64).filter(|e| *e <= i64::MAX as u64).ok_or(Errno(libc::EFBIG))?;
        let cached = cache.filter(|_| self.caches_size(f));
        let mut done = 0usize;
        while done < buf.len() {
            let window = ((buf.len() - done) as u64).min(TRANSFER_WINDOW_BYTES) as usize;
            let at = start + done as u64;
            // The size update travels with the data, unless an append's reservation
            // set it or the descriptor keeps it.
            let with_size = !append && cached.is_none();
            self.write_window(f, &mut path, at, &buf[done..done + window], with_size)?;
            if let Some(a) = cached {
                self.cache_size(a, at + window as u64)?;
            }
            done += window;
        }
        self.clear_set_id(f, &path);
        Ok((start, done))
    }

    /// O_APPEND: reserves `len` bytes at the end first, so two appenders never get
    /// the same offset; returns where they start.
    fn reserve_append(&self, f: &OpenFile, path: &mut String, len: u64) -> Result<u64> {
        let reserve = |path: &str| Request::UpdateSize {
            path: path.to_string(),
            file_id: f.file_id(),
            end: 0,
            append_len: Some(len),
            mtime_ns: now_ns(),
        };
        let answer = match self.transport.call(self.md_daemon(path), reserve(path)) {
            Err(Errno(libc::EREMOTE)) => {
                // Linked since its open (links.rs).
                *path = self.learn_link(f)?;
                self.transport.call(self.md_daemon(path), reserve(path))
            }
            r => r,
        };
        match answer? {
            Response::Offset(o) => Ok(o),
            r => Err(unexpected(r)),
        }
    }

    /// A write by a caller without privilege clears the set-id bits (once per open;
    /// best effort: the data is written whatever this answers).
    fn clear_set_id(&self, f: &OpenFile, path: &str) {
        let clear = f.clear_set_id.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mode) = clear {
            let req = Request::SetAttr {
                path: path.to_string(),
                mode: Some(mode),
                atime_ns: None,
                mtime_ns: None,
                ctime_ns: now_ns(),
            };
            let _ = self.call_md(path, req);
        }
    }

    /// Sets the size of write-behind buffers: gathers adjacent writes of each
    /// descriptor up to `bytes` (0: off; at most WRITE_BEHIND_BYTES_MAX). Front ends
    /// get it from $GUST_WRITE_BEHIND.
    pub fn set_write_behind(&self, bytes: usize) {
        self.write_behind_bytes.store(bytes.min(WRITE_BEHIND_BYTES_MAX), Ordering::Relaxed);
    }

    /// Keeps a write of `buf` at `at` through `f` in its buffer if write-behind is on
    /// and the write may be kept (returns its length); None: write it the ordinary
    /// way (the buffer, if any, was sent first). A failed earlier flush is reported
    /// here.
    fn write_behind(&self, f: &Arc<OpenFile>, buf: &[u8], at: u64) -> Result<Option<usize>> {
        let cap = self.write_behind_bytes.load(Ordering::Relaxed);
        if cap == 0 || self.ending() {
            return Ok(None);
        }
        Self::check_writable(f)?;
        if let Some(e) = *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(e);
        }
        let keep = f.flags & (libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC) == 0 && buf.len() < cap;
        let mut slot = f.write_buffer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = slot.as_ref() {
            let follows = b.offset + b.data.len() as u64 == at;
            let due = b.since.elapsed() >= SIZE_FLUSH_INTERVAL;
            if !keep || !follows || due || b.data.len() + buf.len() > cap {
                let b = slot.take().expect("a buffer");
                self.send_buffer(f, b)?;
            }
        }
        if !keep || buf.is_empty() {
            return Ok(None);
        }
        at.checked_add(buf.len() as u64).filter(|e| *e <= i64::MAX as u64).ok_or(Errno(libc::EFBIG))?;
        match slot.as_mut() {
            Some(b) => b.data.extend_from_slice(buf),
            None => {
                let mut data = Vec::with_capacity(cap);
                data.extend_from_slice(buf);
                *slot = Some(WriteBuffer { offset: at, data, since: Instant::now() });
                self.buffered.insert(f);
            }
        }
        if slot.as_ref().is_some_and(|b| b.data.len() >= cap) {
            let b = slot.take().expect("a buffer");
            self.send_buffer(f, b)?;
        }
        f.written.store(true, Ordering::Relaxed);
        Ok(Some(buf.len()))
    }

    /// Sends the buffer of `f`, if any (close, fsync, any other use of it).
    pub(crate) fn flush_write_buffer(&self, f: &Arc<OpenFile>) -> Result<()> {
        let mut slot = f.write_buffer.lock().unwrap_or_else(|e| e.into_inner());
        match slot.take() {
            Some(b) => self.send_buffer(f, b),
            None => Ok(()),
        }
    }

    /// Sends every buffer of this client (before a read or a path operation; the
    /// caller holds no buffer's lock). Errors stay with their descriptors.
    pub(crate) fn flush_all_write_buffers(&self) {
        for f in self.buffered.snapshot() {
            if let Err(e) = self.flush_write_buffer(&f) {
                *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
    }

    /// One chunk write (and the size cached as for any write); the caller holds the
    /// buffer's lock, so writes of other threads queue behind it in order.
    fn send_buffer(&self, f: &Arc<OpenFile>, b: WriteBuffer) -> Result<()> {
        self.buffered.remove(f);
        self.write_file(f, &b.data, Some(b.offset), Some(f)).map(|_| ())
    }
}
