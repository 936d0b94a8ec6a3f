//! Small files inline: deferred creates, data that travels with the record, and the
//! move of such data to chunks when a file is written through them.
//!
//! A small file's data may live beside its record on the metadata daemon (daemon
//! `inline.rs`). Three paths use that:
//! * Create. [`Client::open_deferred`] (the preload library's open with O_CREAT),
//!   where this process holds the claim on the directory (claims.rs; otherwise it
//!   is an ordinary open that creates the file), sends nothing: writes within the
//!   first `INLINE_BYTES_MAX` bytes (or fewer,
//!   from $GUST_INLINE_BYTES_MAX), each at or
//!   before the end of what was written so far, are kept in the descriptor, and close
//!   sends the record with the data (`create_inline`): create + write + close of a
//!   small file is one request. Anything else on the descriptor (fstat, read, lseek,
//!   fsync, a write past the bound or past the end, ...) and any path operation of
//!   this client settle it first, so this client sees the file as if created at open;
//!   such a settle, with the descriptor still open for writing, creates an ordinary
//!   chunked file (create and chunk writes), as only a last close may go inline.
//!   Other clients see it from their first request that names the directory on:
//!   it recalls the claim, which settles it (docs/SEMANTICS.md). If the path exists
//!   by then, an O_EXCL create fails there (EEXIST from close), and any other open
//!   becomes an ordinary open of what is there, written the ordinary way.
//! * Open. An open fetches the record with `stat_data`, which brings inline data
//!   along: a read-only descriptor then reads from it without a request (the file as
//!   of the open); a writable one first copies it to chunks and drops it
//!   ([`Client::migrate_inline`]), so that all writes go through chunks as before.
//! * Read. The size lookup of every read is a `stat_data` too, so a descriptor that
//!   did not get the data at open still reads inline data correctly.
//!
//! Not for: chunk I/O (io/), descriptor bookkeeping (open_files.rs).

use crate::error::unexpected;
use crate::namespace::now_ns;
use crate::open_files::OpenFile;
use crate::rpc::{Bulk, Call};
use crate::{normalize, Client, Errno, Result};
use gust_proto::{FileKind, Record, Request, Response};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

/// Files of a directory rename's subtree asked about inline data per batch.
const STAT_DATA_BATCH: usize = 64;

/// A create not yet sent: the record it will create and the data written so far
/// (from offset 0, without holes; at most `INLINE_BYTES_MAX` bytes).
pub(crate) struct Pending {
    record: Record,
    data: Vec<u8>,
    exclusive: bool,
    mode: u32,
}

/// The record of a `stat_data` reply whose `len` bulk bytes are a regular file's
/// inline data (at most its size): the replies a whole-file read places.
pub(crate) fn inline_file(r: &Response, len: usize) -> Option<&Record> {
    match r {
        Response::RecordData { record, inline: true } if holds_inline(record, len) => Some(record),
        _ => None,
    }
}

/// Whether `len` bytes of inline data can be `record`'s: a regular file's, at most
/// its size (a whole-file read places them, read_many.rs too).
pub(crate) fn holds_inline(record: &Record, len: usize) -> bool {
    record.kind == FileKind::File && len as u64 <= record.size
}

/// What [`Client::read_whole_into`] found at a path.
#[derive(Debug)]
pub enum WholeFile {
    /// A file with its data inline: the data is in the caller's buffer, `len` bytes
    /// of it (the rest of `record.size` reads as zeros, see the module doc).
    Placed { record: Record, len: usize },
    /// Anything else (a file in chunks, a directory, a symlink, or an instance whose
    /// reads this path does not serve: replicas, cache mode): the record if one was
    /// fetched; the caller opens and reads the ordinary way.
    Other(Option<Record>),
}

impl Pending {
    /// (data, exclusive, mode): what a batched create keeps (create_batch.rs).
    pub(crate) fn into_parts(self) -> (Vec<u8>, bool, u32) {
        (self.data, self.exclusive, self.mode)
    }
}

/// Copies what a read of `buf.len()` bytes at `offset` returns from a file of `size`
/// bytes whose first `data.len()` bytes are `data` (the rest zeros).
pub(crate) fn read_inline(size: u64, data: &[u8], buf: &mut [u8], offset: u64) -> usize {
    if offset >= size {
        return 0;
    }
    let n = (buf.len() as u64).min(size - offset) as usize;
    let from = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
    let have = (data.len() - from).min(n);
    buf[..have].copy_from_slice(&data[from..from + have]);
    buf[have..n].fill(0);
    n
}

impl Client {
    /// Normalizes a path for a path operation, after settling this client's deferred
    /// creates so that the operation sees them.
    pub(crate) fn norm(&self, p: &str) -> Result<String> {
        self.settle_all();
        self.flush_all_sizes();
        normalize(p)
    }

    /// `norm` for a deferred open: settles the descriptors' deferred creates but
    /// leaves the queue of batched ones (create_batch.rs) unless it holds this path,
    /// so that a create storm is not sent one create at a time.
    fn norm_for_deferred_open(&self, p: &str) -> Result<String> {
        self.settle_open_creates();
        self.flush_all_sizes();
        let p = normalize(p)?;
        if self.create_queued(&p) {
            self.flush_creates();
        }
        // A create after unlinks: the daemons see them in this process's order.
        self.flush_removes();
        Ok(p)
    }

    /// `norm` for an unlink: settles everything but the queue of deferred unlinks
    /// (remove_batch.rs), so that a remove storm is not sent one remove at a time.
    pub(crate) fn norm_for_unlink(&self, p: &str) -> Result<String> {
        self.settle_open_creates();
        self.flush_creates();
        normalize(p)
    }

    /// `open`, except that a create of a writable file is deferred until the file is
    /// closed or used otherwise than by writes (see the module doc): one request for
    /// create + write + close of a small file. With O_EXCL only when the client was
    /// told so by `set_defer_exclusive_create` (EEXIST then comes from close).
    pub(crate) fn open_deferred_impl(&self, path: &str, flags: i32, mode: u32, whole: bool) -> Result<i32> {
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        // Cache mode fetches an existing file of the shared file system first, which
        // a deferred create would not (cache.rs): opened at once there.
        let eligible = flags & libc::O_CREAT != 0
            && !self.ending()
            // Whether the caller may open an existing file is known only at the open
            // (permissions.rs): callers that are checked open at once.
            && self.checked_caller().is_none()
            && writable
            && self.hosts.cache_of.is_none()
            && flags & (libc::O_SYNC | libc::O_DSYNC | libc::O_DIRECTORY) == 0
            && (flags & libc::O_EXCL == 0 || self.defer_exclusive_create.load(Ordering::Relaxed));
        if !eligible {
            return self.open_stat_impl(path, flags, mode).map(|(fd, _)| fd);
        }
        let p = self.norm_for_deferred_open(path)?;
        if p == "/" {
            return self.open_stat_impl(path, flags, mode).map(|(fd, _)| fd);
        }
        self.check_parent(&p)?;
        let pending = Pending {
            record: Self::new_record(FileKind::File, mode, String::new()),
            data: Vec::new(),
            exclusive: flags & libc::O_EXCL != 0,
            mode,
        };
        let f = Arc::new(OpenFile::unsettled(p.clone(), FileKind::File, flags, Some(Box::new(pending))));
        // Deferred only under a claim on the directory (claims.rs), registered while
        // the claim is held so that its recall settles it; or for a caller that
        // closes within the same call.
        let deferred = whole || self.while_claimed(&p, || self.pending.insert(&f)).is_some();
        if !deferred {
            return self.open_stat_impl(path, flags, mode).map(|(fd, _)| fd);
        }
        if whole {
            self.pending.insert(&f);
        }
        match self.files.insert_file(f.clone()) {
            Ok(fd) => Ok(fd),
            Err(e) => {
                self.pending.remove(&f);
                Err(e)
            }
        }
    }

    /// A write on a deferred create: kept in the descriptor if it fits (returns the
    /// bytes written); otherwise the create is settled, as an ordinary chunked file,
    /// and `None` says to write the ordinary way. `offset` is None for write(2).
    pub(crate) fn write_pending(&self, f: &OpenFile, buf: &[u8], offset: Option<u64>) -> Result<Option<usize>> {
        let mut slot = f.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = slot.as_mut() else {
            if let Some(e) = *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) {
                return Err(e);
            }
            return Ok(None);
        };
        let mut fd_offset =
            if offset.is_none() { Some(f.offset.lock().unwrap_or_else(|e| e.into_inner())) } else { None };
        let at = if f.flags & libc::O_APPEND != 0 {
            p.data.len() as u64
        } else {
            offset.or(fd_offset.as_deref().copied()).expect("an offset or the descriptor's")
        };
        let end = at.saturating_add(buf.len() as u64);
        // An ending process holds nothing back (exit.rs): a create another thread
        // kept pending through the exit hook goes out with this write.
        if !self.ending() && at <= p.data.len() as u64 && end <= self.inline_bytes_max as u64 {
            let (at, end) = (at as usize, end as usize);
            if p.data.len() < end {
                p.data.resize(end, 0);
            }
            p.data[at..end].copy_from_slice(buf);
            if let Some(o) = fd_offset.as_deref_mut() {
                *o = end as u64;
            }
            return Ok(Some(buf.len()));
        }
        drop(fd_offset);
        self.settle_locked(f, &mut slot, false)?;
        Ok(None)
    }

    /// Settles `f` if it is a deferred create; the error of a settle that failed
    /// before, if any. `last_close`: nothing can write through `f` any more, so the
    /// data may go inline; otherwise the file is created as an ordinary chunked one,
    /// since later writes through the descriptor go to chunks.
    pub(crate) fn settle(&self, f: &OpenFile, last_close: bool) -> Result<()> {
        let mut slot = f.pending.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            self.settle_locked(f, &mut slot, last_close)?;
        }
        drop(slot);
        match *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Settles every deferred create of this client (before a path operation or an
    /// exec). Creates being written by another thread right now are left to it.
    /// Errors stay with their descriptors.
    pub fn settle_all(&self) {
        self.settle_open_creates();
        self.flush_creates();
        self.flush_removes();
    }

    /// `settle_open_creates`, waiting for a descriptor another thread is writing
    /// through (a recall: everything deferred must be out before its answer).
    pub(crate) fn settle_open_creates_waiting(&self) {
        for f in self.pending.snapshot() {
            let mut slot = f.pending.lock().unwrap_or_else(|e| e.into_inner());
            if slot.is_some() {
                let _ = self.settle_locked(&f, &mut slot, false);
            }
        }
    }

    /// Settles the deferred creates of open descriptors (not the batched queue), as
    /// ordinary chunked files: their descriptors stay open (see `settle`).
    fn settle_open_creates(&self) {
        self.flush_all_sizes();
        for f in self.pending.snapshot() {
            if let Ok(mut slot) = f.pending.try_lock() {
                if slot.is_some() {
                    let _ = self.settle_locked(&f, &mut slot, false);
                }
            }
        }
    }

    /// Sends the deferred create in `slot`: with its data inline if `inline_ok`,
    /// otherwise (or if the path exists) as an ordinary open and writes.
    fn settle_locked(
        &self,
        f: &OpenFile,
        slot: &mut MutexGuard<'_, Option<Box<Pending>>>,
        inline_ok: bool,
    ) -> Result<()> {
        let p = slot.take().expect("a deferred create");
        self.pending.remove(f);
        let template_id = p.record.file_id;
        let r = self.materialize(f, *p, inline_ok);
        if let Err(e) = r {
            // Later I/O on the descriptor reports this error (settle, write_pending).
            f.settle_id(template_id);
            *f.settle_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        }
        r
    }

    /// The attributes of a descriptor whose create is deferred, as its daemon will
    /// have them: the record the create sends, with the bytes written so far (their
    /// times now; the close sets them again). An fstat right after the open (Python's
    /// `open` makes one) is answered here instead of sending the create at once.
    pub(crate) fn pending_record(&self, f: &OpenFile) -> Option<Record> {
        let slot = f.pending.lock().unwrap_or_else(|e| e.into_inner());
        let p = slot.as_ref()?;
        let mut rec = p.record.clone();
        rec.size = p.data.len() as u64;
        if !p.data.is_empty() {
            let t = now_ns();
            (rec.mtime_ns, rec.ctime_ns) = (t, t);
        }
        Some(rec)
    }

    fn materialize(&self, f: &OpenFile, mut p: Pending, inline_ok: bool) -> Result<()> {
        let path = f.path();
        self.listing.invalidate();
        if inline_ok {
            let mut rec = p.record.clone();
            rec.size = p.data.len() as u64;
            let t = now_ns();
            (rec.mtime_ns, rec.ctime_ns) = (t, t);
            if self.batching_creates() {
                let id = rec.file_id;
                p = match self.queue_create(&path, rec.clone(), f.flags, p) {
                    Ok(()) => {
                        f.settle_id(id);
                        return Ok(());
                    }
                    // The claim is gone: sent now.
                    Err(back) => *back,
                };
            }
            let daemon = self.md_daemon(&path);
            let ticket = self.create_ticket(daemon);
            let call =
                Call { daemon, req: Request::CreateInline { path: path.clone(), record: rec }, bulk: vec![&p.data] };
            match self.transport.batch(vec![call]).pop().expect("one answer") {
                Ok((Response::Record(r), _)) => {
                    self.claim_answered(daemon, &path);
                    // This process knows the data it just created.
                    let data = (!p.data.is_empty()).then_some(&p.data[..]);
                    self.lookup_answered(ticket, daemon, &path, &r, Some(data));
                    f.settle_id(r.file_id);
                    return Ok(());
                }
                Ok((r, _)) => return Err(unexpected(r)),
                // Something is there: what the open would have found. An exclusive
                // create fails; any other becomes an open of it below.
                Err(Errno(libc::EEXIST)) if !p.exclusive => {}
                Err(e) => return Err(e),
            }
        }
        let (fd, _, resolved) = self.open_resolved(&path, f.flags, p.mode)?;
        let opened = self.file_unsettled(fd)?;
        let _ = self.close_impl(fd);
        f.settle_id(opened.file_id());
        if resolved != path {
            *f.path.write().unwrap_or_else(|e| e.into_inner()) = resolved;
        }
        if !p.data.is_empty() {
            self.write_data(f, &p.data, 0)?;
        }
        Ok(())
    }

    /// The attributes of a path and its inline data if it has any (a name of a
    /// hard-linked file is followed to its link path: links.rs; its data is never
    /// inline).
    pub fn stat_data(&self, p: &str) -> Result<(Record, Option<Vec<u8>>)> {
        let (r, data) = self.stat_data_stored(p)?;
        match r.linked_to() {
            None => Ok((r, data)),
            Some(link) => Ok((self.get_stored_record(link)?, None)),
        }
    }

    /// The record of a path as stored and its inline data if it has any: from a
    /// grant this process holds (grants.rs), else one request, which may bring a
    /// grant.
    pub(crate) fn stat_data_stored(&self, p: &str) -> Result<(Record, Option<Vec<u8>>)> {
        if let Some((r, data)) = self.granted_record(p, true) {
            return Ok((r, data.map(|d| d.to_vec())));
        }
        let daemon = self.md_daemon(p);
        let ticket = self.lookup_ticket(daemon);
        let call = Call { daemon, req: Request::StatData { path: p.to_string() }, bulk: Vec::new() };
        match self.transport.batch(vec![call]).pop().expect("one answer")? {
            (Response::RecordData { record, inline }, data) => {
                self.lookup_answered(ticket, daemon, p, &record, Some(inline.then_some(&data[..])));
                self.node_missed(p, record.size);
                Ok((record, inline.then_some(data)))
            }
            (r, _) => Err(unexpected(r)),
        }
    }

    /// What `read_whole_into` gives for `p` (normalized) from a grant this process
    /// holds or the node cache, with no request; None if neither has it.
    pub(crate) fn held_whole<'p>(
        &self,
        p: &str,
        place: &mut dyn FnMut(&Record) -> Option<&'p mut [u8]>,
    ) -> Option<WholeFile> {
        let (record, data) = self.granted_record(p, true)?;
        if record.linked_to().is_some() || record.unfetched_object().is_some() {
            return Some(WholeFile::Other(None));
        }
        Some(match data {
            Some(data) => match place(&record) {
                Some(buf) if buf.len() >= data.len() => {
                    buf[..data.len()].copy_from_slice(&data);
                    WholeFile::Placed { len: data.len(), record }
                }
                _ => WholeFile::Other(Some(record)),
            },
            None => WholeFile::Other(Some(record)),
        })
    }

    /// The whole content of a small file in one request, read from the connection
    /// straight into the buffer `place` returns for the file's record (at least
    /// `record.size` bytes; called at most once, when the record arrived and the
    /// data follows it): no intermediate buffer, no copy. What a front end's "read
    /// this file" (Python's `read_bytes`) uses; anything but an inline file comes
    /// back as [`WholeFile::Other`] for the ordinary open and read.
    pub(crate) fn read_whole_into_impl<'p>(
        &self,
        path: &str,
        place: &mut dyn FnMut(&Record) -> Option<&'p mut [u8]>,
    ) -> Result<WholeFile> {
        let p = self.norm(path)?;
        // Replicas route reads to a live copy (replica.rs), cache mode may fetch the
        // file first (cache.rs): both keep the ordinary path.
        if self.transport.replicas > 1 || self.hosts.cache_of.is_some() {
            return Ok(WholeFile::Other(None));
        }
        // Held under a grant (this process's or the node cache's): no request.
        if let Some(held) = self.held_whole(&p, place) {
            return Ok(held);
        }
        let call = Call { daemon: self.md_daemon(&p), req: Request::StatData { path: p.clone() }, bulk: Vec::new() };
        // A view's placeholder has no data yet: the ordinary path fetches it.
        let mut placer = |r: &Response, len: usize| {
            inline_file(r, len).filter(|r| r.unfetched_object().is_none()).and_then(&mut *place)
        };
        let answer = self.transport.call_placed(call, &mut placer)?;
        if let (Response::RecordData { record, .. }, _) = &answer {
            self.node_missed(&p, record.size);
        }
        match answer {
            (Response::RecordData { record, .. }, Bulk::Placed(len)) => Ok(WholeFile::Placed { record, len }),
            // A name of a linked file: its attributes are elsewhere (links.rs).
            (Response::RecordData { record, .. }, Bulk::Vec(_))
                if record.linked_to().is_some() || record.unfetched_object().is_some() =>
            {
                Ok(WholeFile::Other(None))
            }
            (Response::RecordData { record, .. }, Bulk::Vec(_)) => Ok(WholeFile::Other(Some(record))),
            (r, _) => Err(unexpected(r)),
        }
    }

    /// Moves a file's inline data to chunks: writes it through chunks, then drops it
    /// on the metadata daemon (readers meanwhile read the same bytes either way).
    /// If the drop finds the file removed (ENOENT) or replaced (ESTALE) meanwhile,
    /// its remover saw inline data and asked no data daemon (`Response::Removed`):
    /// the chunks just written are this client's to remove.
    pub(crate) fn migrate_inline(&self, p: &str, rec: &Record, data: &[u8]) -> Result<()> {
        if !data.is_empty() {
            self.write_chunks(rec.file_id, 0, data, Vec::new(), false)?;
        }
        match self.call_md(p, Request::DropInline { path: p.to_string(), file_id: rec.file_id }) {
            Err(e @ Errno(libc::ENOENT | libc::ESTALE)) if !data.is_empty() => {
                let written = Record { size: data.len() as u64, ..rec.clone() };
                if let Err(re) = self.remove_chunks(&written) {
                    tracing::warn!("chunks of {p}, removed while its data moved to them, not removed: {re}");
                }
                Err(e)
            }
            r => r.map(|_| ()),
        }
    }

    /// Before a directory rename moves records: every file below with inline data
    /// moves it to chunks, since the data stays at the old key's daemon.
    pub(crate) fn migrate_subtree_inline(&self, desc: &[(String, Record)]) -> Result<()> {
        let files: Vec<&(String, Record)> =
            desc.iter().filter(|(_, r)| r.kind == FileKind::File && r.size > 0).collect();
        for batch in files.chunks(STAT_DATA_BATCH) {
            let calls = batch
                .iter()
                .map(|(p, _)| Call {
                    daemon: self.md_daemon(p),
                    req: Request::StatData { path: p.clone() },
                    bulk: Vec::new(),
                })
                .collect();
            for ((p, _), a) in batch.iter().zip(self.transport.batch(calls)) {
                match a? {
                    (Response::RecordData { record, inline: true }, data) => self.migrate_inline(p, &record, &data)?,
                    (Response::RecordData { .. }, _) => {}
                    (r, _) => return Err(unexpected(r)),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_reads_fill_zeros_past_the_data() {
        let mut b = [9u8; 8];
        assert_eq!(read_inline(10, b"abcd", &mut b, 2), 8);
        assert_eq!(&b, b"cd\0\0\0\0\0\0");
        assert_eq!(read_inline(10, b"abcd", &mut b, 9), 1);
        assert_eq!(read_inline(10, b"abcd", &mut b, 10), 0);
        assert_eq!(read_inline(3, b"abc", &mut b, 1), 2);
        assert_eq!(&b[..2], b"bc");
    }
}
