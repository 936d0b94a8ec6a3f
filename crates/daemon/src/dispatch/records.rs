//! Requests that make, find and remove records, one path (or one batch of paths)
//! at a time: create, stat, remove, renames' puts, inline data, a writer's close.

use super::*;

/// Serves a request of this class (any other is `misrouted`).
pub(super) fn serve(state: &State, req: Request, bulk_in: &[u8]) -> Reply {
    let md = &state.metadata;
    match req {
        Request::Create { path, record, exclusive } => {
            validate_path(&path)?;
            record.check()?;
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
        Request::PutRecord { path, record, replace } => {
            validate_path(&path)?;
            record.check()?;
            let old = md.put_record(&path, &record, replace)?;
            state.events.record(EventKind::MovedTo, &path, record.file_id, record.kind == FileKind::Dir);
            Ok(Response::MaybeRecord(old))
        }
        Request::PutRecords { records } => put_records(state, &records),
        Request::RemoveRecords { paths } => remove_records(state, &paths),
        Request::CloseWrite { path } => {
            validate_path(&path)?;
            let file_id = if state.events.enabled() { md.get(&path)?.map(|r| r.file_id).unwrap_or(0) } else { 0 };
            state.events.record(EventKind::CloseWrite, &path, file_id, false);
            Ok(Response::Ok)
        }
        Request::CreateInline { path, record } => create_inline(state, &path, &record, bulk_in),
        Request::DropInline { path, file_id } => {
            validate_path(&path)?;
            md.drop_inline(&path, file_id).map(|_| Response::Ok)
        }
        other => misrouted(&other),
    }
}

/// `put_records`: records that must all be new, put in one batch (a directory
/// rename's destination side).
fn put_records(state: &State, records: &[(String, gust_proto::Record)]) -> Reply {
    if records.len() > SCAN_PAGE_ENTRIES_MAX as usize {
        return Err(libc::EINVAL);
    }
    for (p, r) in records {
        validate_path(p)?;
        r.check()?;
    }
    state.metadata.put_records(records)?;
    for (p, r) in records {
        state.events.record(EventKind::MovedTo, p, r.file_id, r.kind == FileKind::Dir);
    }
    Ok(Response::Ok)
}

/// `remove_records`: records removed in one batch.
fn remove_records(state: &State, paths: &[String]) -> Reply {
    if paths.len() > SCAN_PAGE_ENTRIES_MAX as usize {
        return Err(libc::EINVAL);
    }
    for p in paths {
        validate_path(p)?;
    }
    state.metadata.remove_records(paths)?;
    // Only a directory rename removes records in batches.
    for p in paths {
        state.events.record(EventKind::MovedFrom, p, 0, false);
    }
    Ok(Response::Ok)
}

/// `create_inline`: a new small file's record with its data (`bulk_in`) inline.
fn create_inline(state: &State, path: &str, record: &gust_proto::Record, bulk_in: &[u8]) -> Reply {
    validate_path(path)?;
    if bulk_in.len() > INLINE_BYTES_MAX || !record.target.is_empty() || record.check().is_err() {
        return Err(libc::EINVAL);
    }
    let r = state.metadata.create_inline(path, record, bulk_in)?;
    state.events.record_created_and_closed(path, r.file_id);
    state.metrics.bytes_written.fetch_add(bulk_in.len() as u64, Ordering::Relaxed);
    Ok(Response::Record(r))
}
