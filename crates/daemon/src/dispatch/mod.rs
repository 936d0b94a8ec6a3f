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
    FIND_PATTERN_BYTES_MAX, FIND_SCAN_PAGE_KEYS_MAX, INLINE_BYTES_MAX, PATH_BYTES_MAX, READDIR_PAGE_BYTES_MAX,
    READDIR_PAGE_ENTRIES_MAX, READ_LOG_PAGE_ENTRIES_MAX, SCAN_PAGE_BYTES_MAX, SCAN_PAGE_ENTRIES_MAX,
    SPANS_PER_REQUEST_MAX,
};
use gust_store::metadata::{LinkCount, NameFilter};
use gust_store::Res;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod attrs;
mod control;
mod data;
mod listing;
mod offers;
mod records;

use offers::Offers;

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
    // A bandwidth limit (qos.rs) holds a transfer back before it takes anything
    // (a grant's recall, a region lock) that others would wait on.
    if let Some(n) = paced_bytes(&req, bulk_in) {
        state.qos.pace(n);
    }
    let traced = crate::trace::start(&req);
    let mut change = state.grants.begin_change(&req, caller.map(|h| h.id));
    if let Some(c) = change.as_mut() {
        apply_held_sizes(state, c.take_sizes());
    }
    // A look at a record takes back the sizes other clients hold back on it
    // (`hold_size`) first: it sees every write that returned.
    look_at_held_sizes(state, &req, caller.map(|h| h.id));
    let removes = matches!(req, Request::Remove { .. } | Request::RemoveRecords { .. } | Request::RemoveBatch { .. });
    let hold = match &req {
        Request::HoldSize { path, hold, .. } => Some((path.clone(), *hold)),
        _ => None,
    };
    let offers = caller.map(|h| Offers::before(state, &req, h));
    let (reply, out) = match req {
        Request::StatData { path } => stat_data(state, &path),
        Request::ReadMany { paths } => crate::read_many::serve(state, &paths),
        req => (serve(state, req, bulk_in, bulk_out), BulkOut::Buffer),
    };
    if let Some(c) = change {
        state.grants.end_change(c, removes && reply.is_ok());
    }
    let mut flags = match (offers, caller) {
        (Some(o), Some(h)) => o.after(state, &reply, h),
        _ => 0,
    };
    if let (Some((path, hold)), Some(h)) = (hold, caller) {
        flags |= hold_size(state, &path, hold && reply.is_ok(), h);
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

/// Registers (`hold`) or ends `h`'s hold on `path`'s size (docs/DESIGN.md, "Size
/// holds"): the reply says `REPLY_GRANTED` when `h` holds it now. Registered after
/// the size was applied, so a look that recalls it finds that size applied.
fn hold_size(state: &State, path: &str, hold: bool, h: &Holder) -> u16 {
    let key = gust_proto::path::size_key(path);
    if !hold {
        state.grants.ungrant(&key, h);
        return 0;
    }
    match state.grants.grant(&key, h) {
        crate::grants::Grant::No => 0,
        _ => REPLY_GRANTED,
    }
}

/// Applies sizes that recalled holders gave up, as their own `update_size`s would
/// have: merges, so their order among other writers' does not matter. A path gone
/// or now another file's (ENOENT, ESTALE) takes nothing, as the holder's own
/// update would have been refused.
pub(crate) fn apply_held_sizes(state: &State, sizes: Vec<gust_proto::HeldSize>) {
    for s in sizes {
        if validate_path(&s.path).is_ok() {
            let _ = state.metadata.update_size(&s.path, s.file_id, s.end, None, s.mtime_ns);
        }
    }
}

/// Before a request reads records (a stat, a read of a small file's data): the
/// sizes other clients hold back on them come back and are applied.
fn look_at_held_sizes(state: &State, req: &Request, caller: Option<u64>) {
    let paths: Vec<&str> = match req {
        Request::Stat { path } | Request::StatData { path } => vec![path.as_str()],
        Request::ReadMany { paths } => paths.iter().map(String::as_str).collect(),
        _ => return,
    };
    if let Some(mut c) = state.grants.begin_look(&paths, caller) {
        apply_held_sizes(state, c.take_sizes());
        state.grants.end_change(c, false);
    }
}

/// The bytes of chunk data `req` moves, which a bandwidth limit paces: chunk
/// writes, reads and repairs, and the chunks staging copies in or out. Metadata
/// and inline files are not paced.
fn paced_bytes(req: &Request, bulk_in: &[u8]) -> Option<u64> {
    let spans = |s: &[gust_proto::Span]| s.iter().map(|s| s.len as u64).sum::<u64>();
    match req {
        Request::Write { .. }
        | Request::WriteSwap { .. }
        | Request::XorChunks { .. }
        | Request::RepairBlocks { .. } => Some(bulk_in.len() as u64),
        Request::Read { spans: s, .. } => Some(spans(s)),
        Request::StagePull { items } | Request::StagePush { items } => {
            Some(items.iter().map(|i| spans(&i.spans)).sum())
        }
        _ => None,
    }
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

/// Serves `req` by its class (control.rs, records.rs, attrs.rs, listing.rs, data.rs; batches,
/// staging and locks in their own modules).
fn serve(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    if req.while_recovering() == WhileRecovering::Refuses && out_of_service(state) {
        // Restarted after a crash, or fenced, in a replicated instance: its copies
        // may miss writes its peers took meanwhile; clients read and write the other
        // copies until `gust repair`. Without a lease (cut off from its peers, or
        // frozen) it may have been fenced without knowing yet (docs/DESIGN.md,
        // "Replicas" and "Fencing").
        return Err(libc::EHOSTDOWN);
    }
    route(state, req, bulk_in, bulk_out)
}

/// Hands `req` to the server of its class, or serves it (batches, staging, locks,
/// moves). Every request is named here: a new one does not compile until routed.
fn route(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    match req {
        r @ (Request::Ping
        | Request::Heartbeat { .. }
        | Request::Fence { .. }
        | Request::Unfence { .. }
        | Request::Shutdown { .. }
        | Request::StatFs
        | Request::Stats
        | Request::Metrics
        | Request::Events { .. }
        | Request::ReadLog { .. }
        | Request::Trace { .. }
        | Request::Tune { .. }) => control::serve(state, r),
        r @ (Request::UpdateSize { .. }
        | Request::HoldSize { .. }
        | Request::Truncate { .. }
        | Request::SetAttr { .. }
        | Request::SetOwner { .. }
        | Request::SetXattr { .. }
        | Request::LinkCount { .. }
        | Request::MarkLinked { .. }
        | Request::DirChanged { .. }) => attrs::serve(state, r),
        r @ (Request::Create { .. }
        | Request::Stat { .. }
        | Request::Remove { .. }
        | Request::PutRecord { .. }
        | Request::PutRecords { .. }
        | Request::RemoveRecords { .. }
        | Request::CloseWrite { .. }
        | Request::CreateInline { .. }
        | Request::DropInline { .. }) => records::serve(state, r, bulk_in),
        r @ (Request::ReadDir { .. }
        | Request::HasChildren { .. }
        | Request::ScanTree { .. }
        | Request::Find { .. }
        | Request::ReadDirPlus { .. }) => listing::serve(state, r),
        r @ (Request::Write { .. }
        | Request::WriteSwap { .. }
        | Request::XorChunks { .. }
        | Request::RepairBlocks { .. }
        | Request::Scrub { .. }
        | Request::Read { .. }
        | Request::TruncateChunks { .. }
        | Request::RemoveChunks { .. }
        | Request::Fsync { .. }
        | Request::StatData { .. }
        | Request::ReadMany { .. }) => data::serve(state, r, bulk_in, bulk_out),
        Request::CreateInlineBatch { entries } => crate::create_batch::create(state, entries, bulk_in),
        Request::RemoveBatch { paths } => crate::remove_batch::remove(state, paths),
        Request::StageCreate { entries } => crate::stage::create(state, entries),
        Request::StagePull { items } => crate::stage::copy(state, items, true),
        Request::StagePush { items } => crate::stage::copy(state, items, false),
        Request::StageExportFiles { items } => crate::stage::export(state, items),
        Request::StageHashSpans { items } => crate::stage::hash(state, items),
        Request::StageCommitFiles { items } => crate::stage::commit(state, items),
        // The session serves forwards and `multiplex` itself (proxy/), these only where it could not.
        Request::Multiplex => Ok(Response::Ok),
        Request::Forward { .. } => Err(libc::EPROTO),
        Request::Lock { .. } | Request::LockTest { .. } | Request::LockCancel { .. } => state.locks.serve(req),
        Request::Move { step, generation } => crate::moves::serve(state, step, generation),
        Request::PutHosts { text } => crate::moves::put_hosts(state, &text),
        r @ (Request::MoveIn { .. } | Request::MoveDrop { .. }) => crate::moves::serve_in(state, r, bulk_in),
        // A session serves `hello` and `callback` itself (server/session.rs), meaningless over a
        // forward or a multiplexed link; recalls and lock grants go to clients.
        Request::Hello { .. } | Request::Callback { .. } | Request::Recall { .. } | Request::LockGranted { .. } => {
            Err(libc::EPROTO)
        }
    }
}

/// A request `serve` gave to a class that does not serve it: a bug of this file,
/// answered as a protocol error rather than a crash.
fn misrouted(req: &Request) -> Reply {
    tracing::error!("request {} reached the wrong class of requests", req.name());
    Err(libc::EPROTO)
}
