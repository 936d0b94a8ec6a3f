//! `remove_batch`: a client's unlinks deferred under a claim (the client's
//! remove_batch.rs), many paths in one request. Each path is removed on its own,
//! exactly as `remove` of a non-directory would, and gets its own outcome: a missing
//! path fails that entry (ENOENT), not the batch.
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
    let outcomes = paths
        .iter()
        .map(|path| match validate_path(path).and_then(|_| state.metadata.remove(path, false)) {
            Ok((record, inline)) => {
                state.events.record(EventKind::Delete, path, record.file_id, record.kind == FileKind::Dir);
                RemoveOutcome::Removed { record, inline }
            }
            Err(e) => RemoveOutcome::Failed(e),
        })
        .collect();
    Ok(Response::RemovedBatch(outcomes))
}
