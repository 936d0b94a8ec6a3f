//! The daemon's tracepoints (gust-trace): one record per request that reaches the
//! metadata store (`md_read`, `md_update`) or the chunk store (`chunk_read`,
//! `chunk_write`, `chunk_other`), with its path or file id, offset, bytes, service
//! time and result; and the Trace request that switches them (`gust trace on|off`).
//!
//! A request whose tracepoint is off costs a match on its op and one relaxed load.
//!
//! Not for: counters (metrics.rs, always on); the record format (gust-trace).

use crate::state::State;
use gust_proto::{Reply, Request, TraceClass, PATH_BYTES_MAX};
use gust_store::Res;
use gust_trace::registry::{self as tp, Tracepoint};
use gust_trace::{Record, Timer};
use std::path::Path;

/// The tracepoint of a request, if it reaches a store (the request table's
/// `trace(...)` fact).
fn tracepoint_of(req: &Request) -> Option<&'static Tracepoint> {
    Some(match req.trace_class() {
        TraceClass::MdRead => &tp::MD_READ,
        TraceClass::MdUpdate => &tp::MD_UPDATE,
        TraceClass::ChunkRead => &tp::CHUNK_READ,
        TraceClass::ChunkWrite => &tp::CHUNK_WRITE,
        TraceClass::ChunkOther => &tp::CHUNK_OTHER,
        TraceClass::Untraced => return None,
    })
}

/// A request being traced: its timer and what it was about.
pub struct Traced {
    timer: Timer,
    record: Record,
}

/// Starts tracing `req` if its tracepoint is on.
#[inline(always)]
pub fn start(req: &Request) -> Option<Traced> {
    let timer = gust_trace::start(tracepoint_of(req)?)?;
    let mut record = Record { arg: req.op() as u64, ..Default::default() };
    match req {
        Request::Create { path, .. }
        | Request::CreateInline { path, .. }
        | Request::Stat { path }
        | Request::StatData { path }
        | Request::Remove { path, .. }
        | Request::Truncate { path, .. }
        | Request::SetAttr { path, .. }
        | Request::SetOwner { path, .. }
        | Request::SetXattr { path, .. }
        | Request::DirChanged { path, .. }
        | Request::PutRecord { path, .. } => record.path = path.clone(),
        Request::UpdateSize { path, file_id, end, .. } => {
            record.path = path.clone();
            record.file_id = *file_id;
            record.offset = *end;
        }
        Request::DropInline { path, file_id } => {
            record.path = path.clone();
            record.file_id = *file_id;
        }
        Request::ReadDir { dir, .. }
        | Request::ReadDirPlus { dir, .. }
        | Request::HasChildren { dir }
        | Request::ScanTree { dir, .. }
        | Request::Find { dir, .. } => record.path = dir.clone(),
        Request::PutRecords { records } => record.size = records.len() as u64,
        Request::RemoveRecords { paths } => record.size = paths.len() as u64,
        // One record per request: its first path and how many it removes.
        Request::RemoveBatch { paths } => {
            record.path = paths.first().cloned().unwrap_or_default();
            record.size = paths.len() as u64;
        }
        // One record per request: its first path and how many it asked for.
        Request::ReadMany { paths } => {
            record.path = paths.first().cloned().unwrap_or_default();
            record.size = paths.len() as u64;
        }
        Request::Read { file_id, spans }
        | Request::Write { file_id, spans, .. }
        | Request::WriteSwap { file_id, spans, .. }
        | Request::XorChunks { file_id, spans, .. }
        | Request::RepairBlocks { file_id, spans } => {
            record.file_id = *file_id;
            record.offset = spans.first().map_or(0, |s| s.offset);
        }
        Request::TruncateChunks { file_id, size } => {
            record.file_id = *file_id;
            record.offset = *size;
        }
        Request::RemoveChunks { file_id } | Request::Fsync { file_id: Some(file_id) } => record.file_id = *file_id,
        Request::Lock { file_id, start, end, .. } | Request::LockTest { file_id, start, end, .. } => {
            record.file_id = *file_id;
            record.offset = *start;
            record.size = end.saturating_sub(*start);
        }
        _ => {}
    }
    Some(Traced { timer, record })
}

impl Traced {
    /// Records the request with its reply; chunk requests with the bytes they moved.
    pub fn finish(mut self, state: &State, reply: &Reply, bulk_in: usize, bulk_out: usize) {
        self.record.daemon = Some(state.daemon_id);
        self.record.result = reply.as_ref().err().map_or(0, |e| -e);
        match self.timer.tracepoint().id {
            id if id == tp::CHUNK_WRITE.id => self.record.size = bulk_in as u64,
            id if id == tp::CHUNK_READ.id => self.record.size = bulk_out as u64,
            _ => {}
        }
        self.timer.finish(self.record);
    }
}

/// Serves a Trace request: points this process's trace files at `dir` if given,
/// then switches the daemon tracepoints `names` names.
pub fn control(state: &State, on: bool, names: &str, dir: Option<&str>) -> Res<()> {
    if names.len() > PATH_BYTES_MAX || dir.is_some_and(|d| d.len() > PATH_BYTES_MAX || d.is_empty()) {
        return Err(libc::EINVAL);
    }
    let selected = tp::select(names).map_err(|_| libc::EINVAL)?;
    let ours: Vec<&str> = selected.iter().filter(|t| t.groups.contains(&"daemon")).map(|t| t.name).collect();
    if ours.is_empty() {
        return Err(libc::EINVAL);
    }
    if let Some(d) = dir {
        set_output(state, Path::new(d))?;
    }
    if on && gust_trace::output_dir().is_none() {
        return Err(libc::EINVAL);
    }
    tp::switch(&ours.join(","), on).map_err(|_| libc::EINVAL)?;
    tracing::info!("daemon {}: tracepoints {} {}", state.daemon_id, ours.join(","), if on { "on" } else { "off" });
    if !on {
        gust_trace::flush();
    }
    Ok(())
}

/// Sends this daemon's trace records to `dir` (created if missing).
pub fn set_output(state: &State, dir: &Path) -> Res<()> {
    gust_trace::set_output(dir, &format!("daemon {}", state.daemon_id))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}
