//! Reads: one round per window, in which the size lookup (or the size a grant holds)
//! and every daemon's chunk read go out together, so a read costs one round trip
//! however many daemons hold its chunks; chunk bytes land in the caller's buffer
//! straight from the sockets, or from a local file a daemon of this node handed over.
//!
//! Not for: reads of many whole files at once (read_many.rs).

use super::TRANSFER_WINDOW_BYTES;
use crate::error::unexpected;
use crate::open_files::OpenFile;
use crate::routing::Placed;
use crate::rpc::Call;
use crate::{Client, Errno, Result};
use gust_placement::Distributor;
use gust_proto::{FileKind, Record, Request, Response, Span};

/// A window's chunk spans split by who serves them: read from a local file a daemon
/// handed over (with their outcome), or asked of a daemon.
struct Sources {
    local: Vec<(Vec<Placed>, Result<Vec<u32>>)>,
    remote: Vec<(u32, Vec<Placed>)>,
}

impl Client {
    pub(crate) fn read_impl(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        let f = self.file(fd)?;
        let mut off = f.offset.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.read_file(&f, buf, *off)?;
        *off += n as u64;
        Ok(n)
    }

    pub(crate) fn pread_impl(&self, fd: i32, buf: &mut [u8], offset: u64) -> Result<usize> {
        let f = self.file(fd)?;
        self.read_file(&f, buf, offset)
    }

    fn check_readable(f: &OpenFile) -> Result<()> {
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        if f.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(Errno(libc::EBADF));
        }
        Ok(())
    }

    fn read_file(&self, f: &OpenFile, buf: &mut [u8], offset: u64) -> Result<usize> {
        Self::check_readable(f)?;
        // Sizes this client's writes reached, through any descriptor, count.
        self.flush_all_sizes();
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some((size, data)) = &f.snapshot {
            // A small file opened read-only: its data came with the open.
            return Ok(crate::inline::read_inline(*size, data, buf, offset));
        }
        let mut done = 0usize;
        while done < buf.len() {
            let window = ((buf.len() - done) as u64).min(TRANSFER_WINDOW_BYTES) as usize;
            let n = self.read_window(f, &mut buf[done..done + window], offset + done as u64)?;
            done += n;
            if n < window {
                break;
            }
        }
        Ok(done)
    }

    /// One round: the size lookup and the chunk reads go out together, so a read
    /// costs one round trip however many daemons hold its chunks.
    fn read_window(&self, f: &OpenFile, buf: &mut [u8], offset: u64) -> Result<usize> {
        let len = buf.len() as u64;
        // Of a hard-linked file, the size is at its link path (links.rs).
        let path = f.attrs_path();
        // The size (and inline data) from a grant this process holds (grants.rs):
        // then only the chunk reads go out.
        let held = self.granted_record(&path, true).filter(|(r, _)| r.linked_to().is_none());
        if let Some((record, data)) = &held {
            if record.file_id != f.file_id() {
                return Err(Errno(libc::ESTALE));
            }
            if let Some(data) = data {
                return Ok(crate::inline::read_inline(record.size, data, buf, offset));
            }
        }
        let sources = self.read_local_first(f, buf, offset, len);
        let mut calls = Vec::new();
        let mut dests = Vec::new();
        if held.is_none() {
            // StatData, not Stat: a file with inline data answers with it (the chunk
            // reads then find nothing), for the same cost when it has none.
            calls.push(Call {
                daemon: self.md_daemon(&path),
                req: Request::StatData { path: path.clone() },
                bulk: Vec::new(),
            });
            dests.push(None);
        }
        for (d, spans) in &sources.remote {
            dests.push(Some(spans.iter().map(|(span, at)| (*at, span.len)).collect()));
            calls.push(Call {
                daemon: *d,
                req: Request::Read { file_id: f.file_id(), spans: spans.iter().map(|x| x.0).collect() },
                bulk: Vec::new(),
            });
        }
        // Chunk bytes land in `buf` straight from the sockets.
        let mut answers = self.transport.batch_into(calls, dests, buf).into_iter();
        let (size, inline) = match held {
            Some((record, _)) => (record.size, None),
            None => {
                let answered = self.size_answered(f, answers.next().expect("stat answer")?)?;
                self.node_missed(&path, answered.0);
                answered
            }
        };
        let spills = inline.is_none() && self.dist.spill_daemons() > 0;
        // Erasure-coded: spans whose daemon failed are rebuilt from their stripes (ec/).
        let mut failed = self.stripes().map(|_| Vec::new());
        let short = Self::short_spans(sources, answers, size, spills, failed.as_mut())?;
        if let Some(data) = inline {
            return Ok(crate::inline::read_inline(size, &data, buf, offset));
        }
        if let Some(failed) = failed.filter(|f| !f.is_empty()) {
            self.read_degraded(f.file_id(), &failed, buf)?;
        }
        if !short.is_empty() {
            self.read_spilled(f.file_id(), short, buf)?;
        }
        Ok(size.saturating_sub(offset).min(len) as usize)
    }

    /// The window's spans by daemon; what daemons of this node handed over is read
    /// here (short_circuit.rs), straight into `buf`.
    fn read_local_first(&self, f: &OpenFile, buf: &mut [u8], offset: u64, len: u64) -> Sources {
        let mut sources = Sources { local: Vec::new(), remote: Vec::new() };
        let ask = Self::may_ask(f);
        for (d, spans) in self.spans_by_daemon(f.file_id(), offset, len) {
            match self.read_handed(d, f.file_id(), &spans, buf, ask) {
                Some(r) => sources.local.push((spans, r)),
                None => sources.remote.push((d, spans)),
            }
        }
        sources
    }

    /// The file's size (and inline data) from the window's `stat_data` answer.
    fn size_answered(&self, f: &OpenFile, answer: (Response, Vec<u8>)) -> Result<(u64, Option<Vec<u8>>)> {
        match answer {
            // Linked since its open: the name's size is not kept (links.rs).
            (Response::RecordData { record, .. }, _) if record.linked_to().is_some() => {
                if record.file_id != f.file_id() {
                    return Err(Errno(libc::ESTALE));
                }
                let linked: Record = self.get_stored_record(&self.learn_link(f)?)?;
                Ok((linked.size, None))
            }
            (Response::RecordData { record, inline }, data) if record.file_id == f.file_id() => {
                Ok((record.size, inline.then_some(data)))
            }
            // The path now names another file (renamed or replaced by another process).
            (Response::RecordData { .. }, _) => Err(Errno(libc::ESTALE)),
            (r, _) => Err(unexpected(r)),
        }
    }

    /// Checks every chunk answer of a window; with `spills`, returns the parts
    /// inside the file (`size`) that a daemon did not hold, which may have spilled
    /// to the chunk's next daemons (chunks.rs). With `failed`, the spans inside
    /// the file whose daemon failed go there instead of failing the read.
    fn short_spans(
        sources: Sources,
        remote_answers: impl Iterator<Item = Result<(Response, Vec<u8>)>>,
        size: u64,
        spills: bool,
        mut failed: Option<&mut Vec<Placed>>,
    ) -> Result<Vec<Placed>> {
        let mut first_err = None;
        let mut short = Vec::new();
        let local = sources
            .local
            .into_iter()
            .map(|(spans, r)| (spans, r.map(|span_lens| (Response::Data { span_lens, sums: Vec::new() }, Vec::new()))));
        let remote = sources.remote.into_iter().map(|(_, spans)| spans).zip(remote_answers);
        for (spans, a) in local.chain(remote) {
            match a {
                Ok((Response::Data { span_lens, .. }, _)) => {
                    if spills {
                        short.extend(super::remainders(&spans, &span_lens).filter_map(|(s, at)| {
                            let inside = size.saturating_sub(s.offset).min(s.len as u64);
                            (inside > 0).then_some((Span { offset: s.offset, len: inside as u32 }, at))
                        }));
                    }
                }
                Ok((r, _)) => return Err(unexpected(r)),
                // Chunks past the end hold nothing to read: a dead daemon holding only
                // those does not fail a read with a buffer larger than the file.
                Err(e) if spans.iter().any(|(s, _)| s.offset < size) => match failed.as_deref_mut() {
                    Some(f) => f.extend(spans.iter().filter(|(s, _)| s.offset < size).copied()),
                    None => first_err = first_err.or(Some(e)),
                },
                Err(_) => {}
            }
        }
        first_err.map_or(Ok(short), Err)
    }

    /// Reads `spans` (with their places in `buf`) from the local file `daemon`
    /// handed this process, if it did (short_circuit.rs): how many bytes of each
    /// it holds, as a daemon answers. None: send a request. A block that fails its
    /// checksum here is read again through the daemon (which takes the file back
    /// first), so that the corruption is found, logged and answered where it is
    /// without short-circuit I/O.
    fn read_handed(
        &self,
        daemon: u32,
        file_id: u128,
        spans: &[Placed],
        buf: &mut [u8],
        ask: bool,
    ) -> Option<Result<Vec<u32>>> {
        let h = self.handed(daemon, file_id, ask)?;
        let access = &self.transport.grants.short_circuit()?.access;
        match h.with(|local| access.read_placed(local, file_id, spans, buf))? {
            Err(crate::integrity::CORRUPT) => None,
            r => Some(r.map_err(Errno)),
        }
    }
}
