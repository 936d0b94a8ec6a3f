//! What staging requests carry: the daemons themselves copy a file's chunks between
//! the shared file system and their chunk stores (`gust stage`), so staging bandwidth
//! grows with the node count, and metadata travels in batches (one request per
//! daemon per batch, not one per file).
//!
//! A path outside GustFS ("external") is an absolute path on the node's view of the
//! shared file system; the daemon opens it with its own (the instance owner's)
//! rights, as the client process of the same user would.

use crate::msg::{Record, Span};
use crate::PATH_BYTES_MAX;
use serde::{Deserialize, Serialize};

/// Bound on the entries or items of one staging request.
pub const STAGE_BATCH_ENTRIES_MAX: usize = 1024;
/// Bound on the counted bytes of one staging request's entries or items (paths,
/// symlink targets and external paths, plus `STAGE_ENTRY_OVERHEAD_BYTES` and
/// `STAGE_SPAN_BYTES` per span each): a batch at its bound fits a frame body.
pub const STAGE_BATCH_BYTES_MAX: usize = 512 * 1024;
/// Bytes counted per entry or item besides its strings and spans (a record's
/// encoding is 84 bytes plus its two strings).
pub const STAGE_ENTRY_OVERHEAD_BYTES: usize = 128;
/// Bytes counted per span (its encoding: offset u64, len u32).
pub const STAGE_SPAN_BYTES: usize = 12;
/// Bound on the file bytes one pull, push or hash request moves: a worker copies at
/// most this much per request (about 30-100 ms), so staging shares a daemon fairly
/// with the job's own requests.
pub const STAGE_REQUEST_BYTES_MAX: u64 = 64 << 20;

const _: () = assert!(
    STAGE_BATCH_BYTES_MAX + STAGE_ENTRY_OVERHEAD_BYTES + 3 * PATH_BYTES_MAX + 64 <= crate::BODY_BYTES_MAX as usize
);

/// One record to create from a file of the shared file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageEntry {
    pub path: String,
    pub record: Record,
    /// For a file of at most `INLINE_BYTES_MAX` bytes: the external file the daemon
    /// reads its data from (the record's size must match), so a small file is staged
    /// in this one request. None for a directory, a symlink, or a file whose chunks
    /// follow (created with size 0 and committed by `StageCommit` once they are in,
    /// so a file that is not complete never shows its final size).
    pub source: Option<String>,
    /// Replace a non-directory already at `path` (its record is returned so the
    /// client removes its chunks); without it, EEXIST.
    pub replace: bool,
}

/// Spans of one file's chunks held (or to be held) by the daemon asked, and the
/// external file they are copied from (pull) or to (push). Offsets are file offsets
/// in both files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageChunks {
    pub file_id: u128,
    pub external: String,
    pub spans: Vec<Span>,
}

/// A file whose data is inline at the daemon asked, to be written to `dest` (created
/// or replaced whole, with the record's mode and times) if the record at `path` is
/// still `file_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageExport {
    pub path: String,
    pub file_id: u128,
    pub dest: String,
}

/// A staged-in file whose chunks are all in: its record gets its size and times if
/// it is still `file_id` (ESTALE otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageCommit {
    pub path: String,
    pub file_id: u128,
    pub size: u64,
    pub mtime_ns: i64,
    pub atime_ns: i64,
}

/// What a hash request reads: the daemon's chunks of a file, the inline data of a
/// record, or an external file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HashSource {
    Chunks(u128),
    Inline(String),
    External(String),
}

/// Hash these spans of `source` (xxh3-64 of each span's bytes; chunk holes and a
/// daemon's short local file read as zeros up to the span's length, an external
/// file's end cuts the span short).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageHash {
    pub source: HashSource,
    pub spans: Vec<Span>,
}

/// The outcome of one entry or item: `errno` 0 on success; `bytes` copied or
/// written; for a create that replaced a file, that file's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageOutcome {
    pub errno: i32,
    pub bytes: u64,
    pub replaced: Option<Record>,
}

impl StageOutcome {
    pub fn ok(bytes: u64) -> Self {
        StageOutcome { errno: 0, bytes, replaced: None }
    }
    pub fn err(errno: i32) -> Self {
        StageOutcome { errno, bytes: 0, replaced: None }
    }
}

/// The hashes of one hash item (one per span), or its errno.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanHashes {
    pub errno: i32,
    pub hashes: Vec<u64>,
}

/// What a daemon served reads of since it started: a file id and its chunk ranges
/// (first, last inclusive; an inline file counts as chunk 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadLogEntry {
    pub file_id: u128,
    pub chunks: Vec<(u64, u64)>,
}

/// Bound on the entries of one read-log page.
pub const READ_LOG_PAGE_ENTRIES_MAX: u32 = 4096;
/// Bound on the chunk ranges kept per file: past it, neighbouring ranges merge
/// (the log may then name chunks that were not read, never miss one that was).
pub const READ_LOG_RANGES_PER_FILE_MAX: usize = 64;

/// Counted bytes of a staging entry or item's strings, as a batch adds them up.
pub fn entry_bytes(strings: &[&str], spans: usize) -> usize {
    STAGE_ENTRY_OVERHEAD_BYTES + strings.iter().map(|s| s.len()).sum::<usize>() + spans * STAGE_SPAN_BYTES
}
