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
//! Held under a grant (docs/DESIGN.md, "Size holds"): the first write whose size
//! stays here sends it at once with `hold_size`, which registers a grant on the
//! file's size key at its metadata daemon (the callback connection to that daemon
//! is opened for it if need be). From then on the writes' sizes stay here until
//! that daemon recalls the key, which it does before any other client looks at the
//! record (stat, open, a small file's data) or changes it otherwise than by growing
//! it: the recall's answer carries the sizes, and the daemon applies them first. So
//! another process sees every returned write's size, as on a local file system,
//! while a writer nobody watches sends one size per file. The last close of the
//! description sends the size with the hold's end.
//!
//! Without a grant (grants off: `GUST_GRANTS=0`, copies, the node proxy, cache
//! mode; no callback connection; a hold that failed) the size
//! is batched as before: other clients see it only from the flush, at most the
//! interval after a write that is followed by another write, at close or fsync
//! otherwise (docs/SEMANTICS.md). A write through a descriptor whose path was
//! removed or replaced reports ENOENT or ESTALE at the flush instead of at the
//! write. O_APPEND writes (which reserve their offset at the metadata daemon) and
//! O_SYNC/O_DSYNC writes are not cached.
//!
//! Not for: data (io/), deferred creates (inline.rs).

use crate::open_files::{FileSet, OpenFile};
use crate::{namespace::now_ns, Client, Result};
use gust_proto::{HeldSize, Request, Response};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
    /// What `sending` sends: a recall meanwhile gives it up too (the update may
    /// reach the daemon after the recall's answer).
    in_flight: Option<DirtySize>,
    /// A hold asked for through this descriptor failed (its path was removed or
    /// replaced, a daemon failed): its sizes are batched without one, and the
    /// error is its flush's, as before holds.
    unheld: bool,
}

/// The sizes this process holds back: which paths it holds under a grant, and
/// every descriptor with an unsent size. Shared with the callback connections'
/// reader threads, which give sizes up at a recall (grants.rs, `SizeHolder`).
#[derive(Default)]
pub(crate) struct SizeHolds {
    /// Path → its metadata daemon, for the fork generation noted (a child holds
    /// nothing of its parent's: its callback connections are its own).
    held: Mutex<(u64, HashMap<String, u32>)>,
    /// Descriptors with an unsent size (or one on its way).
    pub(crate) files: FileSet,
}

impl SizeHolds {
    fn held(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<String, u32>)> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let generation = crate::rpc::fork_generation();
        if h.0 != generation {
            *h = (generation, HashMap::new());
        }
        h
    }
}

impl crate::grants::SizeHolder for SizeHolds {
    fn give_up(&self, daemon: u32, path: &str) -> Vec<HeldSize> {
        let mut held = self.held();
        if held.1.get(path) == Some(&daemon) {
            held.1.remove(path);
        }
        let mut sizes = Vec::new();
        for f in self.files.snapshot() {
            let Some(file_id) = f.file_id_if_known() else { continue };
            if f.attrs_path() != path {
                continue;
            }
            let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
            let size = |d: DirtySize| HeldSize { path: path.to_string(), file_id, end: d.end, mtime_ns: d.mtime_ns };
            if let Some(d) = slot.dirty.take() {
                sizes.push(size(d));
            }
            if let Some(d) = slot.in_flight {
                sizes.push(size(d));
            }
        }
        sizes
    }

    fn lost(&self, daemon: u32) {
        self.held().1.retain(|_, d| *d != daemon);
    }
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
    /// reached `end`. Under a hold (module doc) nothing is sent; without one, a
    /// hold is asked for with this size; where none can be had, the size is sent if
    /// the oldest unsent one is older than the interval.
    pub(crate) fn cache_size(&self, f: &Arc<OpenFile>, end: u64) -> Result<()> {
        let path = f.attrs_path();
        let daemon = self.md_daemon(&path);
        let unheld = f.size.lock().unwrap_or_else(|e| e.into_inner()).unheld;
        if unheld || !self.can_hold_sizes(daemon) {
            return self.cache_size_unheld(f, end);
        }
        // Before the lock: a lease found over ends the holds of its daemon, under
        // that lock (`SizeHolder::lost`).
        let leased = self.transport.grants.lease(daemon).is_some();
        {
            let mut held = self.sizes.held();
            self.note_dirty(f, end);
            if leased && held.1.get(&path) == Some(&daemon) {
                return Ok(());
            }
            // Noted before the request: a recall that overtakes its reply must
            // find the path (and the size on its way) here.
            held.1.insert(path.clone(), daemon);
        }
        let asked = self.send_size(f, Some(true));
        if asked != Ok(true) {
            let mut held = self.sizes.held();
            if held.1.get(&path) == Some(&daemon) {
                held.1.remove(&path);
            }
        }
        match asked {
            Err(_) => {
                // Not the write's error (its data is in place): the size waits for
                // a flush, which reports it (ENOENT, ESTALE), as without holds.
                f.size.lock().unwrap_or_else(|e| e.into_inner()).unheld = true;
                self.note_dirty(f, end);
                Ok(())
            }
            // Refused (another client's look of the path under way, a bound):
            // what another thread deferred meanwhile, under the hold this thread
            // had noted, goes now.
            Ok(false) => self.flush_size(f),
            Ok(true) => Ok(()),
        }
    }

    /// Records `end` as `f`'s unsent size.
    fn note_dirty(&self, f: &Arc<OpenFile>, end: u64) -> bool {
        let now = Instant::now();
        let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
        match slot.dirty.as_mut() {
            Some(x) => {
                x.end = x.end.max(end);
                x.mtime_ns = x.mtime_ns.max(now_ns());
                now.duration_since(x.since) >= SIZE_FLUSH_INTERVAL
            }
            None => {
                slot.dirty = Some(DirtySize { end, mtime_ns: now_ns(), since: now });
                self.sizes.files.insert(f);
                false
            }
        }
    }

    /// `cache_size` without a hold: batched, sent after the interval.
    fn cache_size_unheld(&self, f: &Arc<OpenFile>, end: u64) -> Result<()> {
        let due = self.note_dirty(f, end);
        // An exit that began while this write ran may have flushed before the
        // size above was recorded: nothing may stay behind it.
        if due || self.ending() {
            self.flush_size(f)?;
        }
        Ok(())
    }

    /// Whether this process may hold sizes of `daemon`'s records: grants are on
    /// and its callback connection is up (opened now if it may be; the reply to
    /// `hold_size` starts the lease). A lease that ran out ends the holds there
    /// (grants.rs, `usable`): the daemon may have taken them back without a recall.
    fn can_hold_sizes(&self, daemon: u32) -> bool {
        let g = &self.transport.grants;
        if !g.on() || self.ending() {
            return false;
        }
        if g.link_up(daemon) {
            return true;
        }
        let Some(ep) = self.transport.callback_endpoint(daemon).filter(|_| g.link_due(daemon)) else {
            return false;
        };
        g.open_link(daemon, &ep, self.transport.secret(), self.transport.timeout())
    }

    /// Sends the unsent size of `f`, if any (the hold on its path, if any, stays).
    pub(crate) fn flush_size(&self, f: &OpenFile) -> Result<()> {
        self.send_size(f, None).map(|_| ())
    }

    /// `flush_size` at the last close of `f`'s description: the hold on its path
    /// ends with it, unless another description of the path has a size unsent.
    fn flush_size_closing(&self, f: &OpenFile) -> Result<()> {
        let path = f.attrs_path();
        let release = {
            let mut held = self.sizes.held();
            let others = self.sizes.files.snapshot().iter().any(|o| !std::ptr::eq(&**o, f) && o.attrs_path() == path);
            !others && held.1.remove(&path).is_some()
        };
        self.send_size(f, release.then_some(false)).map(|_| ())
    }

    /// Sends the unsent size of `f`, if any: as `update_size`, or with `hold` as
    /// `hold_size` (true: asks to hold the path's size from now on; false: ends
    /// the hold). Whether the daemon granted the hold. A send of another thread of
    /// this process is waited for first, and the descriptor leaves the registry
    /// only when nothing is unsent or on its way, so that a concurrent
    /// `flush_all_sizes` (a read of another thread) waits for the update instead
    /// of reading the old size.
    fn send_size(&self, f: &OpenFile, hold: Option<bool>) -> Result<bool> {
        let generation = crate::rpc::fork_generation();
        let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
        while slot.sending == Some(generation) {
            slot = f.size_sent.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        let Some(d) = slot.dirty.take() else {
            if slot.sending.take().is_some() {
                // The parent's send, which a thread of the parent makes.
                self.sizes.files.remove(f);
            }
            return Ok(false);
        };
        slot.sending = Some(generation);
        slot.in_flight = Some(d);
        drop(slot);
        let path = f.attrs_path();
        let req = match hold {
            None => Request::UpdateSize {
                path: path.clone(),
                file_id: f.file_id(),
                end: d.end,
                append_len: None,
                mtime_ns: d.mtime_ns,
            },
            Some(hold) => {
                Request::HoldSize { path: path.clone(), file_id: f.file_id(), end: d.end, mtime_ns: d.mtime_ns, hold }
            }
        };
        let r = match self.call_md(&path, req) {
            Ok(Response::Offset(_)) => Ok(hold == Some(true) && crate::grants::last_granted()),
            Ok(r) => Err(crate::error::unexpected(r)),
            Err(e) => Err(e),
        };
        // Sent or failed: either way not sent again (a failure is reported).
        let mut slot = f.size.lock().unwrap_or_else(|e| e.into_inner());
        slot.sending = None;
        slot.in_flight = None;
        if slot.dirty.is_none() {
            self.sizes.files.remove(f);
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

    /// Sends what `f` holds back: its write-behind buffer (io/write.rs), then its
    /// size.
    pub(crate) fn flush_descriptor(&self, f: &Arc<OpenFile>) -> Result<()> {
        let data = self.flush_write_buffer(f);
        data.and(self.flush_size(f))
    }

    /// `flush_descriptor` at the last close of `f`'s description.
    pub(crate) fn flush_descriptor_closing(&self, f: &Arc<OpenFile>) -> Result<()> {
        let data = self.flush_write_buffer(f);
        data.and(self.flush_size_closing(f))
    }

    /// Sends every unsent size of this client (before a read or a path operation).
    /// Errors stay with their descriptors' next use.
    pub(crate) fn flush_all_sizes(&self) {
        // Data first: a buffered write's size is cached when it is sent.
        self.flush_all_write_buffers();
        for f in self.sizes.files.snapshot() {
            if let Err(e) = self.flush_size(&f) {
                *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        }
    }
}
