//! `create_inline_batch`: a client's deferred creates of small files, many records
//! with their data in one request (the client's create_batch.rs). Each entry is
//! created as `create_inline` would, and gets its own outcome: one existing path
//! fails that entry (EEXIST), not the batch. The entries are written in one RocksDB
//! write (gust-store's metadata/batch.rs).
//!
//! Not for: staged creates from external files (stage.rs).

use crate::state::State;
use gust_proto::path::validate as validate_path;
use gust_proto::{Record, Response, StageOutcome, CREATE_BATCH_ENTRIES_MAX, INLINE_BYTES_MAX};
use gust_store::Res;
use std::sync::atomic::Ordering;

/// Checks the whole request first (entry count, sizes against the bulk section), so
/// that a malformed batch creates nothing; then creates entry by entry.
pub(crate) fn create(state: &State, entries: Vec<(String, Record)>, bulk_in: &[u8]) -> Res<Response> {
    if entries.len() > CREATE_BATCH_ENTRIES_MAX {
        return Err(libc::EINVAL);
    }
    let mut total = 0u64;
    for (_, r) in &entries {
        if r.size > INLINE_BYTES_MAX as u64 || !r.target.is_empty() || r.check().is_err() {
            return Err(libc::EINVAL);
        }
        total += r.size;
    }
    if total != bulk_in.len() as u64 {
        return Err(libc::EINVAL);
    }
    let mut at = 0usize;
    let mut valid = Vec::with_capacity(entries.len());
    let mut parts: Vec<(&str, &Record, &[u8])> = Vec::with_capacity(entries.len());
    for (path, rec) in &entries {
        let data = &bulk_in[at..at + rec.size as usize];
        at += data.len();
        let ok = validate_path(path);
        if ok.is_ok() {
            parts.push((path, rec, data));
        }
        valid.push(ok);
    }
    // One write for the entries with valid paths, each its own outcome.
    let mut made = state.metadata.create_inline_many(&parts).into_iter().zip(parts.iter());
    let outcomes = valid
        .into_iter()
        .map(|v| match v {
            Err(e) => StageOutcome::err(e),
            Ok(()) => match made.next().expect("one outcome per valid entry") {
                (Ok(()), (path, rec, data)) => {
                    state.events.record_created_and_closed(path, rec.file_id);
                    state.metrics.bytes_written.fetch_add(data.len() as u64, Ordering::Relaxed);
                    StageOutcome::ok(data.len() as u64)
                }
                (Err(e), _) => StageOutcome::err(e),
            },
        })
        .collect();
    Ok(Response::Staged(outcomes))
}
