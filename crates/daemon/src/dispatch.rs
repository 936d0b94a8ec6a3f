//! Request dispatch: one request in, one reply out, whatever connection it came on.
//!
//! Checks what a peer sent (paths, spans, batch sizes) before anything reaches a
//! store; a malformed request gets an errno, never a panic. Connection handling,
//! framing and the handshake live in `server`; counters in `metrics`, which `handle`
//! feeds with each request's latency, errno and directory.

use crate::grants::{Grant, Holder};
use crate::state::State;
use gust_proto::find::{glob_literal_prefix, glob_match};
use gust_proto::frame::{REPLY_CLAIMED, REPLY_GRANTED, REPLY_LEASED, REPLY_LISTED};
use gust_proto::path::validate as validate_path;
use gust_proto::{
    DirEntry, EventKind, FileKind, Reply, Request, Response, Span, WhileRecovering, EVENTS_PAGE_ENTRIES_MAX,
    FIND_PATTERN_BYTES_MAX, FIND_SCAN_PAGE_KEYS_MAX, INLINE_BYTES_MAX, PATH_ARG_BYTES_MAX, PATH_BYTES_MAX,
    READDIR_PAGE_BYTES_MAX, READDIR_PAGE_ENTRIES_MAX, READ_LOG_PAGE_ENTRIES_MAX, SCAN_PAGE_BYTES_MAX,
    SCAN_PAGE_ENTRIES_MAX, SPANS_PER_REQUEST_MAX,
};
use gust_store::metadata::{LinkCount, NameFilter};
use gust_store::Res;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn validate_spans(spans: &[Span], bulk_len: Option<usize>) -> Res<usize> {
    if spans.len() > SPANS_PER_REQUEST_MAX {
        return Err(libc::EINVAL);
    }
    let mut total = 0usize;
    for s in spans {
        s.offset.checked_add(s.len as u64).filter(|e| *e <= i64::MAX as u64).ok_or(libc::EFBIG)?;
        total = total.checked_add(s.len as usize).ok_or(libc::EINVAL)?;
    }
    if total > gust_proto::BULK_BYTES_MAX as usize {
        return Err(libc::EINVAL);
    }
    if let Some(b) = bulk_len {
        if b != total {
            return Err(libc::EINVAL);
        }
    }
    Ok(total)
}

/// A reply's bulk bytes: in the caller's buffer (`bulk_out` of `handle`), or a
/// value RocksDB holds pinned (inline data), sent from where it lies.
pub enum BulkOut<'s> {
    Buffer,
    Pinned(gust_store::inline::PinnedData<'s>),
    /// Values pinned in RocksDB, sent one after the other (read_many.rs).
    PinnedBatch(gust_store::inline::PinnedBatch<'s>),
}

impl BulkOut<'_> {
    /// The reply's bulk bytes in order, given the caller's buffer (`bulk_out`).
    pub fn parts<'a>(&'a self, buffer: &'a [u8]) -> Vec<&'a [u8]> {
        match self {
            BulkOut::Buffer if buffer.is_empty() => Vec::new(),
            BulkOut::Buffer => vec![buffer],
            BulkOut::Pinned(d) => vec![&d[..]],
            BulkOut::PinnedBatch(b) => b.values().collect(),
        }
    }

    /// Copies the bulk bytes into `buffer` (for callers that send from one buffer).
    fn into_buffer(self, buffer: &mut Vec<u8>) {
        match self {
            BulkOut::Buffer => {}
            BulkOut::Pinned(d) => buffer.extend_from_slice(&d),
            BulkOut::PinnedBatch(b) => b.values().for_each(|d| buffer.extend_from_slice(d)),
        }
    }
}

/// Whether `reply` is one that carries bulk bytes (the others carry none, whatever
/// a handler left in its buffer).
pub fn carries_bulk(reply: &Reply) -> bool {
    matches!(reply, Ok(Response::Data { .. } | Response::RecordData { .. } | Response::Files(_)))
}

/// A daemon that must not serve the file system's contents now: restarted after a
/// crash in a replicated instance, or without a lease from its peers (see `serve`).
pub(crate) fn out_of_service(state: &State) -> bool {
    state.recovering.load(Ordering::Relaxed) || !state.lease.holds_or_wait_first_round()
}

/// Serves one request and counts it: its latency, its errno if any, its directory.
/// Bulk bytes of the reply are in `bulk_out`, unless the returned BulkOut holds them.
pub fn handle<'s>(state: &'s State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> (Reply, BulkOut<'s>) {
    let (reply, out, _) = handle_for(state, None, req, bulk_in, bulk_out);
    (reply, out)
}

/// `handle` for a request of a client that said `hello` (`caller`): changes recall
/// other clients' grants first, and a stat, `stat_data` or create may grant the
/// caller its record (crate::grants). Returns the reply flags too
/// (`REPLY_GRANTED`, `REPLY_LEASED`).
pub fn handle_for<'s>(
    state: &'s State,
    caller: Option<&Holder>,
    req: Request,
    bulk_in: &[u8],
    bulk_out: &mut Vec<u8>,
) -> (Reply, BulkOut<'s>, u16) {
    let started = Instant::now();
    let op = req.op();
    if let Some(d) = req.dir() {
        state.metrics.dirs.note(d);
    }
    // A directory another client claims: its recall starts, and this request is
    // sent again once it is over (grants/claims.rs).
    if let Err(e) = state.grants.check_claims(&req, caller.map(|h| h.id)) {
        state.metrics.finish(op, started.elapsed(), Some(e));
        let flags = if caller.is_some_and(|h| h.leased()) { REPLY_LEASED } else { 0 };
        return (Err(e), BulkOut::Buffer, flags);
    }
    let traced = crate::trace::start(&req);
    let change = state.grants.begin_change(&req, caller.map(|h| h.id));
    // Creates the caller deferred (under claims): their records are granted too.
    let batch: Option<Vec<String>> = match (&req, caller) {
        (Request::CreateInlineBatch { entries }, Some(h)) if h.leased() => {
            Some(entries.iter().map(|(p, _)| p.clone()).collect())
        }
        _ => None,
    };
    // A create may bring its caller the claim on the directory (grants/claims.rs).
    let created = match (&req, caller) {
        (Request::Create { path, .. } | Request::CreateInline { path, .. }, Some(h)) if h.leased() => {
            Some(path.clone())
        }
        _ => None,
    };
    let removes = matches!(req, Request::Remove { .. } | Request::RemoveRecords { .. } | Request::RemoveBatch { .. });
    // Registered before the record is read: a change starting after the read finds it.
    let granted = match (&req, caller) {
        (
            Request::Stat { path }
            | Request::StatData { path }
            | Request::Create { path, .. }
            | Request::CreateInline { path, .. },
            Some(h),
        ) if validate_path(path).is_ok() => match state.grants.grant(path, h) {
            Grant::No => None,
            g => Some((path.clone(), g)),
        },
        _ => None,
    };
    // A listing's entries are granted after their records are read (grants.rs,
    // `grant_listed`): the directory's change count comes first.
    let listed = match (&req, caller) {
        (Request::ReadDirPlus { dir, .. }, Some(h)) if h.leased() => Some((dir.clone(), state.grants.dir_epoch(dir))),
        _ => None,
    };
    // A listing's first page: the directory's names here, granted before they are read.
    let names = match (&req, caller) {
        (Request::ReadDir { dir, after: None, .. } | Request::ReadDirPlus { dir, after: None, .. }, Some(h))
            if validate_path(dir).is_ok() =>
        {
            let key = gust_proto::path::listing_key(dir);
            match state.grants.grant(&key, h) {
                Grant::No => None,
                g => Some((key, g)),
            }
        }
        _ => None,
    };
    let (reply, out) = match req {
        Request::StatData { path } => stat_data(state, &path),
        Request::ReadMany { paths } => crate::read_many::serve(state, &paths),
        req => (serve(state, req, bulk_in, bulk_out), BulkOut::Buffer),
    };
    if let Some(c) = change {
        state.grants.end_change(c, removes && reply.is_ok());
    }
    let mut flags = 0;
    if let (Some((path, g)), Some(h)) = (granted, caller) {
        if reply.is_ok() {
            flags |= REPLY_GRANTED;
        } else if g == Grant::New {
            // Held before this request: the caller keeps what it cached under it.
            state.grants.ungrant(&path, h);
        }
    }
    if let (Some((key, g)), Some(h)) = (names, caller) {
        if reply.is_ok() {
            flags |= REPLY_LISTED;
        } else if g == Grant::New {
            state.grants.ungrant(&key, h);
        }
    }
    if let (Some((dir, epoch)), Some(h), Ok(Response::DirPagePlus { entries, .. })) = (listed, caller, &reply) {
        let paths: Vec<String> = entries.iter().map(|(name, _)| gust_proto::path::join(&dir, name)).collect();
        if state.grants.grant_listed(&dir, &paths, h, epoch) {
            flags |= REPLY_GRANTED;
        }
    }
    if let (Some(paths), Some(h), Ok(Response::Staged(outs))) = (batch, caller, &reply) {
        let made: Vec<String> = paths.into_iter().zip(outs).filter(|(_, o)| o.errno == 0).map(|(p, _)| p).collect();
        if made.len() == outs.len() && state.grants.grant_all(&made, h) {
            flags |= REPLY_GRANTED;
        }
    }
    if let (Some(path), Some(h), true) = (created, caller, reply.is_ok()) {
        let name = path.rsplit('/').next().unwrap_or_default();
        let only_name = |dir: &str| matches!(state.metadata.read_dir(dir, None, 2, usize::MAX), Ok((page, _)) if page.len() == 1 && page[0].0 == name);
        if state.grants.claim(&path, h, only_name) {
            flags |= REPLY_CLAIMED;
        }
    }
    if caller.is_some_and(|h| h.leased()) {
        flags |= REPLY_LEASED;
    }
    state.metrics.finish(op, started.elapsed(), reply.as_ref().err().copied());
    if let Some(t) = traced {
        let out_len = out.parts(bulk_out).iter().map(|p| p.len()).sum();
        t.finish(state, &reply, bulk_in.len(), out_len);
    }
    (reply, out, flags)
}

/// A record and its inline data, if any (see `BulkOut`).
fn stat_data<'s>(state: &'s State, path: &str) -> (Reply, BulkOut<'s>) {
    if out_of_service(state) {
        return (Err(libc::EHOSTDOWN), BulkOut::Buffer); // as `serve`
    }
    let found = validate_path(path).and_then(|()| state.metadata.get_with_data_pinned(path));
    match found {
        Ok(Some((record, Some(data)))) => {
            state.read_log.note(record.file_id, [(0, record.size)]);
            state.metrics.bytes_read.fetch_add(data.len() as u64, Ordering::Relaxed);
            (Ok(Response::RecordData { record, inline: true }), BulkOut::Pinned(data))
        }
        Ok(Some((record, None))) => (Ok(Response::RecordData { record, inline: false }), BulkOut::Buffer),
        Ok(None) => (Err(libc::ENOENT), BulkOut::Buffer),
        Err(e) => (Err(e), BulkOut::Buffer),
    }
}

fn serve(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    let md = &state.metadata;
    if req.while_recovering() == WhileRecovering::Refuses && out_of_service(state) {
        // Restarted after a crash, or fenced, in a replicated instance: its copies
        // may miss writes its peers took meanwhile; clients read and write the other
        // copies until `gust repair`. Without a lease (cut off from its peers, or
        // frozen) it may have been fenced without knowing yet (docs/DESIGN.md,
        // "Replicas" and "Fencing").
        return Err(libc::EHOSTDOWN);
    }
    match req {
        Request::Ping => Ok(Response::Ok),
        Request::Heartbeat { from } => {
            if from == state.daemon_id {
                return Err(libc::EINVAL);
            }
            state.fences.heartbeat(from).map(|fenced| Response::Lease { fenced })
        }
        Request::Fence { daemon } => {
            if daemon == state.daemon_id || daemon as usize >= gust_hosts::DAEMONS_MAX {
                return Err(libc::EINVAL);
            }
            let left = state.fences.fence(md, daemon, crate::lease::LEASE)?;
            Ok(Response::Fenced { lease_left_ms: left.as_millis() as u64 })
        }
        Request::Unfence { daemon } => {
            if daemon as usize >= gust_hosts::DAEMONS_MAX {
                return Err(libc::EINVAL);
            }
            state.fences.unfence(md, daemon).map(|_| Response::Ok)
        }
        Request::Shutdown { keep } => {
            state.wipe_on_exit.store(!keep, Ordering::SeqCst);
            if keep {
                // Tells a node agent that the data stays on purpose (gust-launch).
                let _ = std::fs::write(state.rootdir.join(gust_hosts::KEPT_MARKER), b"");
            }
            // The main thread waits for SIGTERM (`wait_for_termination`); send it a
            // moment later so this reply leaves first.
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: signalling our own process.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            });
            Ok(Response::Ok)
        }
        Request::Create { path, record, exclusive } => {
            validate_path(&path)?;
            if record.target.len() >= PATH_ARG_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            let r = md.create(&path, &record, exclusive)?;
            // Without `exclusive` an existing record comes back: no creation then.
            if r == record {
                state.events.record(EventKind::Create, &path, r.file_id, r.kind == FileKind::Dir);
            }
            Ok(Response::Record(r))
        }
        Request::Stat { path } => {
            validate_path(&path)?;
            md.get(&path)?.map(Response::Record).ok_or(libc::ENOENT)
        }
        Request::Remove { path, kind } => {
            validate_path(&path)?;
            let (record, inline) = md.remove(&path, kind == gust_proto::RemoveKind::Dir)?;
            let event = if kind == gust_proto::RemoveKind::Moved { EventKind::MovedFrom } else { EventKind::Delete };
            state.events.record(event, &path, record.file_id, record.kind == FileKind::Dir);
            Ok(Response::Removed { record, inline })
        }
        Request::UpdateSize { path, file_id, end, append_len, mtime_ns } => {
            validate_path(&path)?;
            md.update_size(&path, file_id, end, append_len, mtime_ns).map(Response::Offset)
        }
        Request::Truncate { path, size, mtime_ns } => {
            validate_path(&path)?;
            let r = md.truncate(&path, size, mtime_ns)?;
            state.events.record(EventKind::Modify, &path, r.file_id, false);
            Ok(Response::Record(r))
        }
        Request::SetAttr { path, mode, atime_ns, mtime_ns, ctime_ns } => {
            validate_path(&path)?;
            let r = md.set_attr(&path, mode, atime_ns, mtime_ns, ctime_ns)?;
            state.events.record(EventKind::Attrib, &path, r.file_id, r.kind == FileKind::Dir);
            Ok(Response::Record(r))
        }
        Request::SetOwner { path, uid, gid, ctime_ns } => {
            validate_path(&path)?;
            md.set_owner(&path, uid, gid, ctime_ns).map(Response::Record)
        }
        Request::LinkCount { path, file_id, delta, ctime_ns } => {
            validate_path(&path)?;
            match md.link_count(&path, file_id, delta, ctime_ns)? {
                LinkCount::Counted(r) => Ok(Response::Record(r)),
                LinkCount::Removed(record) => Ok(Response::Removed { record, inline: false }),
            }
        }
        Request::MarkLinked { path, file_id, link } => {
            validate_path(&path)?;
            validate_path(&link)?;
            md.mark_linked(&path, file_id, &link).map(Response::Record)
        }
        Request::DirChanged { path, subdirs_delta, time_ns } => {
            validate_path(&path)?;
            md.dir_changed(&path, subdirs_delta, time_ns).map(|_| Response::Ok)
        }
        Request::PutRecord { path, record, replace } => {
            validate_path(&path)?;
            if record.target.len() >= PATH_ARG_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            let old = md.put_record(&path, &record, replace)?;
            state.events.record(EventKind::MovedTo, &path, record.file_id, record.kind == FileKind::Dir);
            Ok(Response::MaybeRecord(old))
        }
        Request::ReadDir { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, READDIR_PAGE_ENTRIES_MAX) as usize;
            let (page, done) = md.read_dir(&dir, after.as_deref(), max, READDIR_PAGE_BYTES_MAX)?;
            Ok(Response::DirPage {
                entries: page.into_iter().map(|(name, kind)| DirEntry { name, kind }).collect(),
                done,
            })
        }
        Request::HasChildren { dir } => {
            validate_path(&dir)?;
            md.has_children(&dir).map(Response::Bool)
        }
        Request::ScanTree { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, SCAN_PAGE_ENTRIES_MAX) as usize;
            let (records, last_key, done) = md.scan_tree(&dir, after.as_deref(), max)?;
            Ok(Response::Tree { records, last_key, done })
        }
        Request::PutRecords { records } => {
            if records.len() > SCAN_PAGE_ENTRIES_MAX as usize {
                return Err(libc::EINVAL);
            }
            for (p, r) in &records {
                validate_path(p)?;
                if r.target.len() >= PATH_ARG_BYTES_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
            }
            md.put_records(&records)?;
            for (p, r) in &records {
                state.events.record(EventKind::MovedTo, p, r.file_id, r.kind == FileKind::Dir);
            }
            Ok(Response::Ok)
        }
        Request::RemoveRecords { paths } => {
            if paths.len() > SCAN_PAGE_ENTRIES_MAX as usize {
                return Err(libc::EINVAL);
            }
            for p in &paths {
                validate_path(p)?;
            }
            md.remove_records(&paths)?;
            // Only a directory rename removes records in batches.
            for p in &paths {
                state.events.record(EventKind::MovedFrom, p, 0, false);
            }
            Ok(Response::Ok)
        }
        Request::Write { file_id, spans } => {
            validate_spans(&spans, Some(bulk_in.len()))?;
            let n = state.chunks.write(file_id, &spans, bulk_in)?;
            state.metrics.bytes_written.fetch_add(n, Ordering::Relaxed);
            Ok(Response::Written(n))
        }
        Request::Read { file_id, spans } => {
            validate_spans(&spans, None)?;
            let span_lens = state.chunks.read(file_id, &spans, bulk_out)?;
            state.read_log.note(file_id, spans.iter().map(|s| (s.offset, s.offset + s.len as u64)));
            state.metrics.bytes_read.fetch_add(bulk_out.len() as u64, Ordering::Relaxed);
            Ok(Response::Data { span_lens })
        }
        Request::TruncateChunks { file_id, size } => state.chunks.truncate(file_id, size).map(|_| Response::Ok),
        Request::RemoveChunks { file_id } => state.chunks.remove(file_id).map(|_| Response::Ok),
        Request::Fsync { file_id } => {
            if let Some(f) = file_id {
                state.chunks.sync(f)?;
            }
            md.sync().map(|_| Response::Ok)
        }
        Request::StatFs => {
            let (total_bytes, free_bytes, avail_bytes) = state.capacity()?;
            Ok(Response::StatFs { total_bytes, free_bytes, avail_bytes, files: md.estimate_records() })
        }
        Request::Stats => Ok(Response::Stats(state.metrics.snapshot(state.daemon_id))),
        Request::Metrics => Ok(Response::Metrics(crate::metrics::collect(state))),
        Request::CloseWrite { path } => {
            validate_path(&path)?;
            let file_id = if state.events.enabled() { md.get(&path)?.map(|r| r.file_id).unwrap_or(0) } else { 0 };
            state.events.record(EventKind::CloseWrite, &path, file_id, false);
            Ok(Response::Ok)
        }
        Request::Events { after_seq, prefix, max_entries } => {
            if prefix.len() > PATH_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            let max = max_entries.clamp(1, EVENTS_PAGE_ENTRIES_MAX) as usize;
            let (events, last_seq, first_seq, next_seq) = state.events.page(after_seq, &prefix, max);
            Ok(Response::Events { events, last_seq, first_seq, next_seq })
        }
        Request::Find { dir, query, after, max_entries } => {
            validate_path(&dir)?;
            if query.name.as_ref().is_some_and(|n| n.len() > FIND_PATTERN_BYTES_MAX) {
                return Err(libc::EINVAL);
            }
            let max = max_entries.clamp(1, SCAN_PAGE_ENTRIES_MAX) as usize;
            let (records, last_key, done) = md.scan_tree_where(
                &dir,
                after.as_deref(),
                max,
                FIND_SCAN_PAGE_KEYS_MAX as usize,
                // -name first, on the key alone: most keys end there.
                NameFilter {
                    prefix: &query.name.as_ref().map(|g| glob_literal_prefix(g.as_bytes())).unwrap_or_default(),
                    keep: |name| query.name.as_ref().is_none_or(|g| glob_match(g.as_bytes(), name)),
                },
                |r| query.matches_record(r),
            )?;
            Ok(Response::Tree { records, last_key, done })
        }
        Request::CreateInline { path, record } => {
            validate_path(&path)?;
            if bulk_in.len() > INLINE_BYTES_MAX || !record.target.is_empty() {
                return Err(libc::EINVAL);
            }
            let r = md.create_inline(&path, &record, bulk_in)?;
            state.events.record_created_and_closed(&path, r.file_id);
            state.metrics.bytes_written.fetch_add(bulk_in.len() as u64, Ordering::Relaxed);
            Ok(Response::Record(r))
        }
        Request::CreateInlineBatch { entries } => crate::create_batch::create(state, entries, bulk_in),
        Request::RemoveBatch { paths } => crate::remove_batch::remove(state, paths),
        // `handle` serves it without this copy; kept whole here for any other caller.
        Request::StatData { path } => {
            let (reply, out) = stat_data(state, &path);
            out.into_buffer(bulk_out);
            reply
        }
        Request::ReadMany { paths } => {
            let (reply, out) = crate::read_many::serve(state, &paths);
            out.into_buffer(bulk_out);
            reply
        }
        Request::ReadDirPlus { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, READDIR_PAGE_ENTRIES_MAX) as usize;
            let (entries, done) = md.read_dir_plus(&dir, after.as_deref(), max, READDIR_PAGE_BYTES_MAX, true)?;
            Ok(Response::DirPagePlus { entries, done })
        }
        Request::DropInline { path, file_id } => {
            validate_path(&path)?;
            md.drop_inline(&path, file_id).map(|_| Response::Ok)
        }
        Request::StageCreate { entries } => crate::stage::create(state, entries),
        Request::StagePull { items } => crate::stage::copy(state, items, true),
        Request::StagePush { items } => crate::stage::copy(state, items, false),
        Request::StageExportFiles { items } => crate::stage::export(state, items),
        Request::StageHashSpans { items } => crate::stage::hash(state, items),
        Request::StageCommitFiles { items } => crate::stage::commit(state, items),
        Request::ReadLog { after, max_entries } => {
            let max = max_entries.clamp(1, READ_LOG_PAGE_ENTRIES_MAX) as usize;
            let (entries, done, dropped) = state.read_log.page(after, max, SCAN_PAGE_BYTES_MAX);
            Ok(Response::ReadLog { entries, done, dropped })
        }
        Request::Trace { on, names, dir } => {
            crate::trace::control(state, on, &names, dir.as_deref()).map(|_| Response::Ok)
        }
        // The session hands forwards to the proxy and switches a connection to
        // multiplexed service itself (proxy/); here only where it could not.
        Request::Multiplex => Ok(Response::Ok),
        Request::Forward { .. } => Err(libc::EPROTO),
        Request::Lock { .. } | Request::LockTest { .. } | Request::LockCancel { .. } => state.locks.serve(req),
        // A session serves `hello` and `callback` itself (server/session.rs); over a
        // forward or a multiplexed link they mean nothing. Recalls and lock grants go
        // to clients.
        Request::Hello { .. } | Request::Callback { .. } | Request::Recall { .. } | Request::LockGranted { .. } => {
            Err(libc::EPROTO)
        }
    }
}
