//! Requests on a file's bytes: chunk writes, reads, truncation, removal and fsync,
//! and the reads of whole small files (stat with data, `read_many`).

use super::*;
use gust_proto::CorruptRange;

/// Bound on the bytes one `scrub` request reads (a page answers within a second
/// or two on a slow disk, far inside any RPC timeout).
const SCRUB_PAGE_BYTES_MAX: u64 = 256 << 20;

pub(super) fn serve(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    let md = &state.metadata;
    match req {
        r @ (Request::Write { .. }
        | Request::WriteSwap { .. }
        | Request::XorChunks { .. }
        | Request::RepairBlocks { .. }) => write(state, r, bulk_in, bulk_out),
        Request::Scrub { after, max_bytes } => {
            // A file whose local file a client holds is passed over (its reads
            // verify it); the others are kept from being handed out while verified.
            let hold =
                |id| state.grants.hold_data_unless_held(id).map(|c| crate::grants::EndOnDrop(&state.grants, Some(c)));
            let p = {
                let _idle = crate::qos::IdleIo::new();
                state.chunks.scrub_held(after, max_bytes.clamp(1, SCRUB_PAGE_BYTES_MAX), hold)?
            };
            // Its bytes are known once read: a bandwidth limit (qos.rs) holds the
            // answer back instead, which paces `gust scrub`'s next page the same.
            state.qos.pace(p.bytes);
            let corrupt = p.corrupt.into_iter().map(|(file_id, offset, len)| CorruptRange { file_id, offset, len });
            Ok(Response::Scrubbed { files: p.files, bytes: p.bytes, corrupt: corrupt.collect(), next: p.next })
        }
        Request::Read { file_id, spans } => {
            validate_spans(&spans, None)?;
            let mut sums = Vec::new();
            let span_lens = state.chunks.read_summed(file_id, &spans, bulk_out, &mut sums)?;
            state.read_log.note(file_id, spans.iter().map(|s| (s.offset, s.offset + s.len as u64)));
            state.metrics.bytes_read.fetch_add(bulk_out.len() as u64, Ordering::Relaxed);
            Ok(Response::Data { span_lens, sums })
        }
        Request::TruncateChunks { file_id, size } => state.chunks.truncate(file_id, size).map(|_| Response::Ok),
        Request::RemoveChunks { file_id } => state.chunks.remove(file_id).map(|_| Response::Ok),
        Request::Fsync { file_id } => {
            if let Some(f) = file_id {
                state.chunks.sync(f)?;
            }
            md.sync().map(|_| Response::Ok)
        }
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
        other => misrouted(&other),
    }
}

/// The requests that write chunk bytes: writes, erasure codes' read-modify-writes
/// (chunks/rmw.rs in gust-store) and repairs of corrupt blocks from a copy.
fn write(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    match req {
        Request::Write { file_id, spans, sums } => {
            validate_spans(&spans, Some(bulk_in.len()))?;
            let n = state.chunks.write_checked(file_id, &spans, bulk_in, &sums).inspect_err(|&e| {
                if e == libc::EBADMSG {
                    tracing::warn!(
                        "daemon {}: a write of file {file_id:032x} arrived with bytes that do not match the \
                         writer's checksums (corrupted on the way): nothing written, EBADMSG",
                        state.daemon_id
                    );
                }
            })?;
            state.metrics.bytes_written.fetch_add(n, Ordering::Relaxed);
            Ok(Response::Written(n))
        }
        // Erasure codes (docs/DESIGN.md, "Erasure codes"): a data cell's write that
        // answers what it replaced, and a parity cell's change.
        Request::WriteSwap { file_id, spans, sums } => {
            validate_spans(&spans, Some(bulk_in.len()))?;
            let mut old_sums = Vec::new();
            let span_lens = state.chunks.swap(file_id, &spans, (bulk_in, &sums), bulk_out, &mut old_sums)?;
            state.metrics.bytes_written.fetch_add(bulk_in.len() as u64, Ordering::Relaxed);
            Ok(Response::Data { span_lens, sums: old_sums })
        }
        Request::XorChunks { file_id, spans, sums } => {
            validate_spans(&spans, Some(bulk_in.len()))?;
            let n = state.chunks.xor(file_id, &spans, bulk_in, &sums)?;
            state.metrics.bytes_written.fetch_add(n, Ordering::Relaxed);
            Ok(Response::Written(n))
        }
        Request::RepairBlocks { file_id, spans } => {
            validate_spans(&spans, Some(bulk_in.len()))?;
            state.chunks.repair(file_id, &spans, bulk_in).map(Response::Written)
        }
        other => misrouted(&other),
    }
}
