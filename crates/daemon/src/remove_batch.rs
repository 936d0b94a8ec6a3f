//! `remove_batch`: a client's unlinks deferred under a claim (the client's
//! remove_batch.rs), many paths in one request. Each path is removed as `remove` of
//! a non-directory would, and gets its own outcome: a missing path fails that entry
//! (ENOENT), not the batch. The removals are one RocksDB write (gust-store's
//! metadata/batch.rs).
//!
//! Not for: a directory rename's second phase (`remove_records`), which removes
//! records whatever they are and answers nothing per path.

use crate::state::State;
use gust_proto::path::validate as validate_path;
use gust_proto::{EventKind, FileKind, RemoveOutcome, Response, REMOVE_BATCH_ENTRIES_MAX};
use gust_store::Res;

/// Checks the count first, so that an oversized batch removes nothing; then removes
/// path by path.
pub(crate) fn remove(state: &State, paths: Vec<String>) -> Res<Response> {
    if paths.len() > REMOVE_BATCH_ENTRIES_MAX {
        return Err(libc::EINVAL);
    }
    let valid: Vec<_> = paths.iter().map(|p| validate_path(p)).collect();
    let checked: Vec<&str> = paths.iter().zip(&valid).filter(|(_, v)| v.is_ok()).map(|(p, _)| p.as_str()).collect();
    // One write for the valid paths, each its own outcome.
    let mut removed = state.metadata.remove_many(&checked).into_iter().zip(checked.iter());
    let outcomes = valid
        .into_iter()
        .map(|v| match v {
            Err(e) => RemoveOutcome::Failed(e),
            Ok(()) => match removed.next().expect("one outcome per valid path") {
                (Ok((record, inline)), path) => {
                    state.events.record(EventKind::Delete, path, record.file_id, record.kind == FileKind::Dir);
                    RemoveOutcome::Removed { record, inline }
                }
                (Err(e), _) => RemoveOutcome::Failed(e),
            },
        })
        .collect();
    Ok(Response::RemovedBatch(outcomes))
}
