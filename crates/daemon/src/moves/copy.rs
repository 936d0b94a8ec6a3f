//! The `copy` step (every client's request answered `MOVING`): bring every
//! daemon the new layout places something of this daemon's on up to date, then
//! delete it here.
//!
//! 1. Records: each one the layout places elsewhere is sent (`move_in`) unless
//!    the first pass sent the same bytes to the same daemon; what the first pass
//!    sent and is gone here is dropped there (`move_drop`).
//! 2. Chunks: a file the first pass read and nothing changed since is skipped;
//!    any other file's chunks placed elsewhere are sent (`write`; those of zeros
//!    are not, and dropped there if the first pass sent them).
//! 3. The intent log goes: every daemon now holds what it will serve.
//! 4. What left is deleted here: records by key, chunks punched (a file left
//!    empty is removed at `adopt`).
//!
//! Nothing is deleted here before step 3, so a copy cut off (this daemon
//! killed) and started again finds what is left and does the same; with no
//! first pass (a shrink, a change of placement, a restart that lost it) steps
//! 1-2 send everything.
//!
//! Not for: the first pass (precopy.rs), the steps' order (mod.rs).

use super::sent::{self, Sent};
use super::{errno_text, lock, Peers};
use crate::state::State;
use gust_placement::Distributor;
use gust_proto::{MovedRecord, Request, Span};
use gust_store::metadata::RawRecord;
use std::collections::BTreeMap;
use std::time::Instant;
use tracing::info;

/// Records per `move_in` request, and the body bytes at which one is sent sooner.
pub(super) const RECORDS_PER_REQUEST: usize = 512;
const RECORD_BYTES_PER_REQUEST: usize = 256 << 10;
const INLINE_BYTES_PER_REQUEST: usize = 4 << 20;

/// The copy of this daemon's part under `dist` (the new layout), given what a
/// first pass sent.
pub(super) fn copy(
    state: &State,
    dist: &dyn Distributor,
    hosts: &gust_hosts::HostsFile,
    mut sent: Sent,
) -> Result<(), String> {
    let started = Instant::now();
    let mut peers = Peers::new(hosts, &state.secret);
    let chunk = hosts.chunk_size_bytes;
    let moved = update_records(state, dist, &mut peers, &mut sent)?;
    update_chunks(state, dist, &mut peers, chunk, &mut sent)?;
    drop_left(&mut peers, sent)?;
    let log = sent::log_path(&state.rootdir);
    if let Err(e) = std::fs::remove_file(&log) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(format!("cannot remove {}: {e}", log.display()));
        }
    }
    for keys in moved.chunks(RECORDS_PER_REQUEST) {
        state.metadata.delete_raw(keys).map_err(errno_text)?;
    }
    punch_chunks(state, dist, chunk)?;
    let p = lock(&state.moves.progress).clone();
    info!(
        records = p.records,
        chunks = p.chunks,
        bytes = p.bytes,
        ms = started.elapsed().as_millis() as u64,
        "move: this daemon's part is copied"
    );
    Ok(())
}

/// Records looked at per page of a walk.
pub(super) const PAGE: usize = 2048;

/// Every record `dist` places elsewhere, there as it is here; their keys.
fn update_records(
    state: &State,
    dist: &dyn Distributor,
    peers: &mut Peers,
    sent: &mut Sent,
) -> Result<Vec<Vec<u8>>, String> {
    let me = state.daemon_id;
    let leaves = |k: &[u8]| destination(dist, k).is_some_and(|to| to != me);
    let mut moved = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (page, last) = state.metadata.raw_page_where(after.as_deref(), PAGE, leaves).map_err(errno_text)?;
        let Some(last) = last else { break };
        after = Some(last);
        let mut leaving: BTreeMap<u32, Vec<RawRecord>> = BTreeMap::new();
        for rec in page {
            let Some(to) = destination(dist, &rec.0) else { continue };
            moved.push(rec.0.clone());
            match sent.records.get(&rec.0) {
                Some(&(t, h)) if t == to => {
                    sent.records.remove(&rec.0);
                    if h == sent::record_hash(&rec.1, rec.2.as_deref()) {
                        continue; // there already
                    }
                }
                // Sent elsewhere (another layout): dropped there by `drop_left`.
                _ => {}
            }
            leaving.entry(to).or_default().push(rec);
        }
        for (to, recs) in leaving {
            for part in batches(&recs) {
                send_records(state, peers, to, part)?;
            }
        }
    }
    Ok(moved)
}

/// The daemon `dist` places the record of store key `key` on (None: a key that
/// names no path, which stays).
pub(super) fn destination(dist: &dyn Distributor, key: &[u8]) -> Option<u32> {
    match gust_store::keys::path_of(key) {
        Some(path) => Some(dist.locate_metadata(&path)),
        None => {
            tracing::warn!("move: a record key that names no path stays here");
            None
        }
    }
}

/// Sends records (with their inline data) to daemon `to` (`move_in`).
pub(super) fn send_records(state: &State, peers: &mut Peers, to: u32, part: &[RawRecord]) -> Result<(), String> {
    let mut bulk = Vec::new();
    let records = part
        .iter()
        .map(|(k, v, inline)| {
            if let Some(d) = inline {
                bulk.extend_from_slice(d);
            }
            MovedRecord { key: k.clone(), value: v.clone(), inline_len: inline.as_ref().map(|d| d.len() as u32) }
        })
        .collect();
    peers.call(to, &Request::MoveIn { records }, &bulk)?;
    lock(&state.moves.progress).records += part.len() as u64;
    Ok(())
}

/// Every chunk `dist` places elsewhere of a file that changed since the first
/// pass (or that it did not read), there as it is here.
fn update_chunks(
    state: &State,
    dist: &dyn Distributor,
    peers: &mut Peers,
    chunk: u64,
    sent: &mut Sent,
) -> Result<(), String> {
    let mut after: Option<u128> = None;
    let mut buf = Vec::new();
    loop {
        let ids = state.chunks.file_ids(after, 256);
        let Some(&last) = ids.last() else { break };
        after = Some(last);
        for id in ids {
            let before = sent.chunks.remove(&id).unwrap_or_default();
            if !sent.changed(id) {
                continue; // what the first pass sent is what is here
            }
            update_file(state, dist, peers, chunk, id, &before, &mut buf)?;
        }
    }
    Ok(())
}

/// One file's chunks placed elsewhere, sent (those of zeros dropped there if
/// `before`, what the first pass sent of it, has them).
fn update_file(
    state: &State,
    dist: &dyn Distributor,
    peers: &mut Peers,
    chunk: u64,
    id: u128,
    before: &[(u64, u32, u32)],
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let me = state.daemon_id;
    let len = state.chunks.local_len(id).map_err(errno_text)?.unwrap_or(0);
    let mut stale: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
    for k in 0..len.div_ceil(chunk) {
        let to = dist.locate_chunk(id, k);
        if to == me {
            continue;
        }
        let span = Span { offset: k * chunk, len: (len - k * chunk).min(chunk) as u32 };
        let was = before.iter().find(|b| b.0 == span.offset && b.2 == to).map_or(0, |b| b.1);
        let n = send_chunk(state, peers, id, span, to, was, buf)?;
        if was > n {
            // Shorter (or zeros) now: the rest there goes.
            stale.entry(to).or_default().push(Span { offset: span.offset + n as u64, len: was - n });
        }
    }
    // What was sent and lies past the end here now, or went to another daemon.
    for &(offset, was, to) in before {
        let k = offset / chunk;
        if offset >= len || dist.locate_chunk(id, k) != to {
            stale.entry(to).or_default().push(Span { offset, len: was });
        }
    }
    for (to, spans) in stale {
        peers.call(to, &Request::MoveDrop { keys: vec![], file_id: id, spans: block_aligned(spans) }, &[])?;
    }
    Ok(())
}

/// Sends `span` of file `id` to daemon `to` unless it is all zeros; the bytes
/// written there (0 for zeros: a hole there reads the same). When `was` bytes
/// were sent before and fewer are here now, zeros follow up to the end of their
/// checksum block (or `was`), so that what is left to drop there starts on one.
pub(super) fn send_chunk(
    state: &State,
    peers: &mut Peers,
    id: u128,
    span: Span,
    to: u32,
    was: u32,
    buf: &mut Vec<u8>,
) -> Result<u32, String> {
    let n = read_chunk(state, id, span, buf)?;
    if n == 0 {
        return Ok(0);
    }
    let block = gust_store::sums::SUM_BLOCK_BYTES as u32;
    let len = if was > n { was.min(n.next_multiple_of(block)) } else { n };
    buf.resize(len as usize, 0);
    buf[n as usize..].fill(0);
    write_chunk(state, peers, id, span.offset, to, buf)?;
    Ok(len)
}

/// The bytes of `span` of file `id` here, into `buf`: how many (0 if all are
/// zeros).
pub(super) fn read_chunk(state: &State, id: u128, span: Span, buf: &mut Vec<u8>) -> Result<u32, String> {
    let got = state.chunks.read(id, &[span], buf).map_err(errno_text)?;
    let n = got.first().copied().unwrap_or(0) as usize;
    buf.truncate(n);
    Ok(if buf.iter().any(|b| *b != 0) { n as u32 } else { 0 })
}

/// Writes `bytes` at `offset` of file `id` on daemon `to`.
pub(super) fn write_chunk(
    state: &State,
    peers: &mut Peers,
    id: u128,
    offset: u64,
    to: u32,
    bytes: &[u8],
) -> Result<(), String> {
    let write = Request::Write { file_id: id, spans: vec![Span { offset, len: bytes.len() as u32 }], sums: vec![] };
    peers.call(to, &write, bytes)?;
    let mut p = lock(&state.moves.progress);
    p.chunks += 1;
    p.bytes += bytes.len() as u64;
    Ok(())
}

/// Spans made to start on a checksum block (a punch's unit; the daemon there
/// punches whole blocks): a span's start is rounded up, as the bytes before it
/// in its first block are still the file's. What is left of a block reads as
/// it was written there, which `update_file` sent.
fn block_aligned(spans: Vec<Span>) -> Vec<Span> {
    let b = gust_store::sums::SUM_BLOCK_BYTES as u64;
    spans
        .into_iter()
        .filter_map(|s| {
            let start = s.offset.next_multiple_of(b);
            let end = s.offset + s.len as u64;
            (end > start).then(|| Span { offset: start, len: (end - start) as u32 })
        })
        .collect()
}

/// What the first pass sent that nothing here has any more: dropped there.
fn drop_left(peers: &mut Peers, sent: Sent) -> Result<(), String> {
    let mut keys: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
    for (key, (to, _)) in sent.records {
        keys.entry(to).or_default().push(key);
    }
    for (to, keys) in keys {
        for part in keys.chunks(RECORDS_PER_REQUEST) {
            peers.call(to, &Request::MoveDrop { keys: part.to_vec(), file_id: 0, spans: vec![] }, &[])?;
        }
    }
    for (id, spans) in sent.chunks {
        let mut by: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
        for (offset, len, to) in spans {
            by.entry(to).or_default().push(Span { offset, len });
        }
        for (to, spans) in by {
            peers.call(to, &Request::MoveDrop { keys: vec![], file_id: id, spans: block_aligned(spans) }, &[])?;
        }
    }
    Ok(())
}

/// Punches the chunks `dist` places elsewhere (they are there now), and notes
/// the files none stays of for removal at `adopt`.
fn punch_chunks(state: &State, dist: &dyn Distributor, chunk: u64) -> Result<(), String> {
    let me = state.daemon_id;
    let mut after: Option<u128> = None;
    loop {
        let ids = state.chunks.file_ids(after, 256);
        let Some(&last) = ids.last() else { break };
        after = Some(last);
        for id in ids {
            let Some(len) = state.chunks.local_len(id).map_err(errno_text)? else { continue };
            let mut kept = false;
            let mut punched = false;
            for k in 0..len.div_ceil(chunk) {
                if dist.locate_chunk(id, k) == me {
                    kept = true;
                    continue;
                }
                state.chunks.punch(id, k * chunk, (len - k * chunk).min(chunk)).map_err(errno_text)?;
                punched = true;
            }
            if punched && !kept {
                lock(&state.moves.emptied).push(id);
            }
        }
    }
    Ok(())
}

/// Records in requests of at most `RECORDS_PER_REQUEST` records, about
/// `RECORD_BYTES_PER_REQUEST` bytes of keys and values (the request's body) and
/// about `INLINE_BYTES_PER_REQUEST` of inline data (its bulk).
pub(super) fn batches(recs: &[RawRecord]) -> Vec<&[RawRecord]> {
    let mut out = Vec::new();
    let (mut start, mut body, mut bulk) = (0, 0, 0);
    for (i, r) in recs.iter().enumerate() {
        body += r.0.len() + r.1.len();
        bulk += r.2.as_ref().map_or(0, Vec::len);
        if i + 1 - start >= RECORDS_PER_REQUEST || body >= RECORD_BYTES_PER_REQUEST || bulk >= INLINE_BYTES_PER_REQUEST
        {
            out.push(&recs[start..=i]);
            (start, body, bulk) = (i + 1, 0, 0);
        }
    }
    if start < recs.len() {
        out.push(&recs[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batches of `move_in` keep to their bounds, inline data counted (it rides
    /// in the request's bulk), and cover every record once.
    #[test]
    fn batches_cover_every_record_within_bounds() {
        let inline = |i: usize| i.is_multiple_of(3).then(|| vec![7u8; gust_proto::INLINE_BYTES_MAX]);
        let recs: Vec<RawRecord> = (0..1300)
            .map(|i| (vec![b'/', 0, (i % 250) as u8], vec![0u8; if i % 7 == 0 { 3000 } else { 10 }], inline(i)))
            .collect();
        let parts = batches(&recs);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), recs.len());
        for p in &parts {
            assert!(p.len() <= RECORDS_PER_REQUEST);
            let body: usize = p.iter().map(|r| r.0.len() + r.1.len()).sum();
            let bulk: usize = p.iter().map(|r| r.2.as_ref().map_or(0, Vec::len)).sum();
            assert!(body < RECORD_BYTES_PER_REQUEST + 3100 && body < gust_proto::BODY_BYTES_MAX as usize, "{body}");
            assert!(bulk < INLINE_BYTES_PER_REQUEST + gust_proto::INLINE_BYTES_MAX, "{bulk}");
            assert!(bulk < gust_proto::BULK_BYTES_MAX as usize);
        }
    }

    /// Drops start on a block; what is left of a block is not dropped.
    #[test]
    fn drops_are_block_aligned() {
        let b = gust_store::sums::SUM_BLOCK_BYTES as u32;
        let got = block_aligned(vec![
            Span { offset: 0, len: 3 * b },
            Span { offset: 10, len: b },
            Span { offset: 10, len: 2 * b },
        ]);
        let want = [(0, 3 * b), (b as u64, 10), (b as u64, b + 10)].map(|(offset, len)| Span { offset, len });
        assert_eq!(got, want);
    }
}
