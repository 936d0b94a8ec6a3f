//! Size cache: the size updates of a descriptor's writes, batched.
//!
//! Every write used to send a size update (`update_size`) to the file's metadata
//! daemon beside its chunk writes: for many processes writing one shared file, that
//! one daemon takes a request per write of every process (GekkoFS's paper measures
//! this as the wall for shared files). Here a write through a descriptor records the
//! end it reached in the descriptor and sends nothing; the largest end and latest
//! mtime go out in one `update_size` when:
//! * the descriptor is closed or fsync'ed,
//! * this client uses any descriptor otherwise than by a write (fstat, read, lseek,
//!   ftruncate: `Client::file`) or makes any path operation (stat of the file
//!   included): `flush_all_sizes`, a lock-free counter check when nothing is pending,
//! * a write finds its descriptor's oldest unsent end older than
//!   [`SIZE_FLUSH_INTERVAL`].
//!
//! Other clients see the data at once (the chunk writes are not delayed) but the
//! size, and so the data past the old end, only from the flush: at most the interval
//! after a write that is followed by another write, at close or fsync otherwise
//! (docs/SEMANTICS.md). A write through a descriptor whose path was removed or
//! replaced reports ENOENT or ESTALE at the flush instead of at the write. O_APPEND
//! writes (which reserve their offset at the metadata daemon) and O_SYNC/O_DSYNC
//! writes are not cached.
//!
//! Not for: data (data.rs), deferred creates (inline.rs).

use crate::open_files::OpenFile;
use crate::{namespace::now_ns, Client, Result};
use gust_proto::{Request, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a size update waits while writes keep coming: short next to how long a
/// reader polls a growing file, long next to a write (10,000 writes of 8 KiB share one
/// update at 100 MB/s).
pub const SIZE_FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// The unsent size of one descriptor: the largest end written, the latest mtime,
/// since when it waits.
#[derive(Clone, Copy)]
pub(crate) struct DirtySize {
    end: u64,
    mtime_ns: i64,
    since: Instant,
}

/// A descriptor's size (`OpenFile::size`): what waits to be sent, and whether a
/// thread is sending it now, with its process's fork generation (rpc.rs). The lock
/// is not held while the update is on the wire: a child forked meanwhile would
/// inherit it locked, and its first path operation would wait forever. A child
/// knows a send of its parent's by the generation and does not wait for it (the
/// parent makes it).
#[derive(Default)]
pub(crate) struct SizeSlot {
    dirty: Option<DirtySize>,
    sending: Option<u64>,
}

impl Client {
    /// Whether writes through `f` may leave their size to [`Client::cache_size`];
    /// otherwise each sends it with its data: O_APPEND writes (which reserve their
    /// offset at the metadata daemon), O_SYNC and O_DSYNC ones, and every write of
    /// an ending process (exit.rs).
    pub(crate) fn caches_size(&self, f: &OpenFile) -> bool {
        f.flags & (libc::O_APPEND | libc::O_SYNC | libc::O_DSYNC) == 0 && !self.ending()
    }

    /// Records that a write through `f` (one that [`Client::caches_size`] allows)
    /// reached `end`; sends the size if the oldest unsent one is older than the
    /// interval.
    pub(crate) fn cache_size(&self, f: &Arc<OpenFile>, end: u64) -> Result<()> {
        let now = Instant::now();
        let due = {
            let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
            match slot.dirty.as_mut() {
                Some(x) => {
                    x.end = x.end.max(end);
                    x.mtime_ns = x.mtime_ns.max(now_ns());
                    now.duration_since(x.since) >= SIZE_FLUSH_INTERVAL
                }
                None => {
                    slot.dirty = Some(DirtySize { end, mtime_ns: now_ns(), since: now });
                    self.dirty.insert(f);
                    false
                }
            }
        };
        // An exit that began while this write ran may have flushed before the
        // size above was recorded: nothing may stay behind it.
        if due || self.ending() {
            self.flush_size(f)?;
        }
        Ok(())
    }

    /// Sends the unsent size of `f`, if any. A send of another thread of this
    /// process is waited for first, and the descriptor leaves the registry only
    /// when nothing is unsent or on its way, so that a concurrent
    /// `flush_all_sizes` (a read of another thread) waits for the update instead
    /// of reading the old size.
    pub(crate) fn flush_size(&self, f: &OpenFile) -> Result<()> {
        let generation = crate::rpc::fork_generation();
        let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
        while slot.sending == Some(generation) {
            slot = f.size_sent.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        let Some(d) = slot.dirty.take() else {
            if slot.sending.take().is_some() {
                // The parent's send, which a thread of the parent makes.
                self.dirty.remove(f);
            }
            return Ok(());
        };
        slot.sending = Some(generation);
        drop(slot);
        let path = f.attrs_path();
        let req = Request::UpdateSize {
            path: path.clone(),
            file_id: f.file_id(),
            end: d.end,
            append_len: None,
            mtime_ns: d.mtime_ns,
        };
        let r = match self.call_md(&path, req) {
            Ok(Response::Offset(_)) => Ok(()),
            Ok(r) => Err(crate::error::unexpected(r)),
            Err(e) => Err(e),
        };
        // Sent or failed: either way not sent again (a failure is reported).
        let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
        slot.sending = None;
        if slot.dirty.is_none() {
            self.dirty.remove(f);
        }
        drop(slot);
        f.size_sent.notify_all();
        r
    }

    /// Sends the unsent size of descriptor `fd` (FUSE's flush, at every close(2)).
    pub fn flush(&self, fd: i32) -> Result<()> {
        let f = self.file_unsettled(fd)?;
        self.flush_descriptor(&f)
    }

    /// Sends what `f` holds back: its write-behind buffer (write_behind.rs), then its
    /// size.
    pub(crate) fn flush_descriptor(&self, f: &Arc<OpenFile>) -> Result<()> {
        let data = self.flush_write_buffer(f);
        data.and(self.flush_size(f))
    }

    /// Sends every unsent size of this client (before a read or a path operation).
    /// Errors stay with their descriptors' next use.
    pub(crate) fn flush_all_sizes(&self) {
        // Data first: a buffered write's size is cached when it is sent.
        self.flush_all_write_buffers();
        for f in self.dirty.snapshot() {
            if let Err(e) = self.flush_size(&f) {
                *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
    }
}
