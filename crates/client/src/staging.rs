//! Staging primitives (`gust stage`, the gust-stage crate): where a path's record and
//! a file's chunks live, and the batch requests that make daemons copy their own
//! chunks between the shared file system and their stores. The planning (what to
//! copy, in which batches, resuming, verifying) is gust-stage's; this module only
//! speaks for the client core's routing.
//!
//! Not for: copying through this process (io/ does that for every front end).

use crate::error::unexpected;
use crate::routing::join_adjacent;
use crate::{Client, Result};
use gust_proto::{
    FileKind, ReadLogEntry, Record, Request, Response, Span, SpanHashes, StageChunks, StageCommit, StageEntry,
    StageExport, StageHash, StageOutcome, READ_LOG_PAGE_ENTRIES_MAX,
};
use std::collections::BTreeMap;

/// One page of a daemon's read log: files (by id) with the byte ranges read, whether
/// that was all, and how many files the daemon had no room to log.
pub struct ReadLogPage {
    pub entries: Vec<ReadLogEntry>,
    pub done: bool,
    pub dropped: u64,
}

impl Client {
    /// The daemon that holds the record of `path` (an internal path).
    pub fn metadata_daemon(&self, path: &str) -> u32 {
        self.md_daemon(path)
    }

    /// The whole of a file of `size` bytes as spans per daemon that holds them (one
    /// span per run of consecutive chunks on one daemon; offsets are file offsets).
    pub fn chunk_spans_by_daemon(&self, file_id: u128, size: u64) -> BTreeMap<u32, Vec<Span>> {
        self.spans_by_daemon(file_id, 0, size).into_iter().map(|(d, spans)| (d, join_adjacent(spans))).collect()
    }

    /// A new record for a staged file or symlink, owned by the caller, with a fresh
    /// file id and the given attributes.
    pub fn staged_record(kind: FileKind, mode: u32, size: u64, mtime_ns: i64, atime_ns: i64, target: String) -> Record {
        let mut r = Client::new_record(kind, mode, target);
        // Staged data is for every node: wide-striped, whatever the placement.
        r.file_id = gust_placement::local::file_id(r.file_id, None).max(1);
        r.size = size;
        r.mtime_ns = mtime_ns;
        r.atime_ns = atime_ns;
        r
    }

    fn staged(&self, daemon: u32, req: Request, n: usize) -> Result<Vec<StageOutcome>> {
        match self.transport.call(daemon, req)? {
            Response::Staged(v) if v.len() == n => Ok(v),
            r => Err(unexpected(r)),
        }
    }

    /// Creates records on `daemon` (each entry's path must be one it holds).
    pub fn stage_create(&self, daemon: u32, entries: Vec<StageEntry>) -> Result<Vec<StageOutcome>> {
        let n = entries.len();
        self.staged(daemon, Request::StageCreate { entries }, n)
    }

    /// Makes `daemon` copy spans of external files into its chunks.
    pub fn stage_pull(&self, daemon: u32, items: Vec<StageChunks>) -> Result<Vec<StageOutcome>> {
        let n = items.len();
        self.staged(daemon, Request::StagePull { items }, n)
    }

    /// Makes `daemon` write spans of its chunks into external files.
    pub fn stage_push(&self, daemon: u32, items: Vec<StageChunks>) -> Result<Vec<StageOutcome>> {
        let n = items.len();
        self.staged(daemon, Request::StagePush { items }, n)
    }

    /// Makes `daemon` write inline files (whose records it holds) to external files.
    pub fn stage_export(&self, daemon: u32, items: Vec<StageExport>) -> Result<Vec<StageOutcome>> {
        let n = items.len();
        self.staged(daemon, Request::StageExportFiles { items }, n)
    }

    /// Gives staged-in files (records on `daemon`) their size and times.
    pub fn stage_commit(&self, daemon: u32, items: Vec<StageCommit>) -> Result<Vec<StageOutcome>> {
        let n = items.len();
        self.staged(daemon, Request::StageCommitFiles { items }, n)
    }

    /// Hashes of spans of chunks, inline data or external files, read by `daemon`.
    pub fn stage_hash(&self, daemon: u32, items: Vec<StageHash>) -> Result<Vec<SpanHashes>> {
        let n = items.len();
        match self.transport.call(daemon, Request::StageHashSpans { items })? {
            Response::Hashes(v) if v.len() == n => Ok(v),
            r => Err(unexpected(r)),
        }
    }

    /// One page of `daemon`'s read log, file ids > `after`.
    pub fn read_log_page(&self, daemon: u32, after: Option<u128>) -> Result<ReadLogPage> {
        match self.transport.call(daemon, Request::ReadLog { after, max_entries: READ_LOG_PAGE_ENTRIES_MAX })? {
            Response::ReadLog { entries, done, dropped } => Ok(ReadLogPage { entries, done, dropped }),
            r => Err(unexpected(r)),
        }
    }

    /// Removes the chunks of a file a staging create replaced.
    pub fn remove_file_chunks(&self, r: &Record) -> Result<()> {
        self.remove_chunks(r)
    }
}
