//! Request dispatch: one request in, one reply out, whatever connection it came on.
//!
//! Checks what a peer sent (paths, spans, batch sizes) before anything reaches a
//! store; a malformed request gets an errno, never a panic. Connection handling,
//! framing and the handshake live in `server`; counters in `metrics`.

use crate::metadata::Res;
use crate::state::State;
use gust_proto::path::validate as validate_path;
use gust_proto::{
    DirEntry, Reply, Request, Response, Span, INLINE_BYTES_MAX, PATH_BYTES_MAX, READDIR_PAGE_BYTES_MAX,
    READDIR_PAGE_ENTRIES_MAX, SCAN_PAGE_ENTRIES_MAX, SPANS_PER_REQUEST_MAX,
};
use std::sync::atomic::Ordering;
use std::time::Duration;

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

pub fn handle(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    let md = &state.metadata;
    match req {
        Request::Ping => Ok(Response::Ok),
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
            if record.target.len() > PATH_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            md.create(&path, &record, exclusive).map(Response::Record)
        }
        Request::Stat { path } => {
            validate_path(&path)?;
            md.get(&path)?.map(Response::Record).ok_or(libc::ENOENT)
        }
        Request::Remove { path, kind } => {
            validate_path(&path)?;
            md.remove(&path, kind == gust_proto::RemoveKind::Dir).map(Response::Record)
        }
        Request::UpdateSize { path, file_id, end, append_len, mtime_ns } => {
            validate_path(&path)?;
            md.update_size(&path, file_id, end, append_len, mtime_ns).map(Response::Offset)
        }
        Request::Truncate { path, size, mtime_ns } => {
            validate_path(&path)?;
            md.truncate(&path, size, mtime_ns).map(Response::Record)
        }
        Request::SetAttr { path, mode, atime_ns, mtime_ns, ctime_ns } => {
            validate_path(&path)?;
            md.set_attr(&path, mode, atime_ns, mtime_ns, ctime_ns).map(Response::Record)
        }
        Request::PutRecord { path, record, replace } => {
            validate_path(&path)?;
            if record.target.len() > PATH_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            md.put_record(&path, &record, replace).map(Response::MaybeRecord)
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
                if r.target.len() > PATH_BYTES_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
            }
            md.put_records(&records).map(|_| Response::Ok)
        }
        Request::RemoveRecords { paths } => {
            if paths.len() > SCAN_PAGE_ENTRIES_MAX as usize {
                return Err(libc::EINVAL);
            }
            for p in &paths {
                validate_path(p)?;
            }
            md.remove_records(&paths).map(|_| Response::Ok)
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
            let c = std::ffi::CString::new(state.rootdir.as_os_str().as_encoded_bytes()).map_err(|_| libc::EINVAL)?;
            // SAFETY: statvfs writes into a zeroed struct we own; the path is NUL-terminated.
            let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(c.as_ptr(), &mut sv) } != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            let f = sv.f_frsize;
            Ok(Response::StatFs {
                total_bytes: sv.f_blocks * f,
                free_bytes: sv.f_bfree * f,
                avail_bytes: sv.f_bavail * f,
                files: md.estimate_records(),
            })
        }
        Request::Stats => Ok(Response::Stats(state.metrics.snapshot(state.daemon_id))),
        Request::CreateInline { path, record } => {
            validate_path(&path)?;
            if bulk_in.len() > INLINE_BYTES_MAX || !record.target.is_empty() {
                return Err(libc::EINVAL);
            }
            let r = md.create_inline(&path, &record, bulk_in)?;
            state.metrics.bytes_written.fetch_add(bulk_in.len() as u64, Ordering::Relaxed);
            Ok(Response::Record(r))
        }
        Request::StatData { path } => {
            validate_path(&path)?;
            let (record, data) = md.get_with_data(&path)?.ok_or(libc::ENOENT)?;
            let inline = data.is_some();
            if let Some(d) = data {
                state.metrics.bytes_read.fetch_add(d.len() as u64, Ordering::Relaxed);
                *bulk_out = d;
            }
            Ok(Response::RecordData { record, inline })
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
    }
}
