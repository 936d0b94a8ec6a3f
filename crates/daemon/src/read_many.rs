//! `read_many`: the `stat_data` of a batch of files in one request (a data loader's
//! batch, gust-client's read_many.rs). Per file the answer is what `stat_data`
//! gives, each file failing on its own; the inline data of the batch goes out in one
//! reply, each file's bytes written to the socket from where RocksDB holds them
//! (inline.rs `get_many_with_data_pinned`: the records by one multi-get, the data
//! by one iterator for the batch), the whole reply in one vectored write.
//!
//! What it saves against one `stat_data` per file is everything a request costs
//! besides its lookup and its bytes: a wake-up, a receive and a send, a frame to
//! parse and one to build, the counters, a RocksDB iterator's setup.
//!
//! Not for: one file (dispatch/mod.rs `stat_data`), chunk data.

use crate::dispatch::{out_of_service, BulkOut};
use crate::state::State;
use gust_proto::path::validate as validate_path;
use gust_proto::{Reply, Response, WholeFile, READ_MANY_ENTRIES_MAX};
use std::sync::atomic::Ordering;

/// Serves `read_many`: the reply, and the pinned inline data of its files in order.
pub fn serve<'s>(state: &'s State, paths: &[String]) -> (Reply, BulkOut<'s>) {
    if out_of_service(state) {
        return (Err(libc::EHOSTDOWN), BulkOut::Buffer);
    }
    if paths.len() > READ_MANY_ENTRIES_MAX {
        return (Err(libc::EINVAL), BulkOut::Buffer);
    }
    let checked: Vec<Result<(), i32>> = paths.iter().map(|p| validate_path(p)).collect();
    let valid: Vec<&str> = paths.iter().zip(&checked).filter(|(_, c)| c.is_ok()).map(|(p, _)| p.as_str()).collect();
    let (found, batch) = state.metadata.get_many_with_data_pinned(&valid);
    let mut inline = batch.values();
    let mut found = found.into_iter();
    let mut bytes = 0u64;
    let files = checked
        .into_iter()
        .map(|c| match c.and_then(|()| found.next().expect("one answer per valid path")) {
            Ok(Some((record, true))) => {
                let len = inline.next().expect("a value per file with inline data").len();
                state.read_log.note(record.file_id, [(0, record.size)]);
                bytes += len as u64;
                // At most INLINE_BYTES_MAX (inline.rs), which fits.
                WholeFile::Found { record, inline_len: Some(len as u32) }
            }
            Ok(Some((record, false))) => WholeFile::Found { record, inline_len: None },
            Ok(None) => WholeFile::Failed(libc::ENOENT),
            Err(e) => WholeFile::Failed(e),
        })
        .collect();
    drop(inline);
    state.metrics.bytes_read.fetch_add(bytes, Ordering::Relaxed);
    (Ok(Response::Files(files)), BulkOut::PinnedBatch(batch))
}
