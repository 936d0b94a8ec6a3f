//! Messages carried in frame bodies, encoded with bincode (fixed-width integers,
//! little endian, with a size limit equal to the frame's bounded body length).
//!
//! Every request is declared once, in the `requests!` list below: its op code, its
//! name (in logs and `gust status`), its fields and whether a client may send it
//! again after a lost connection. The enum, `Request::op`, `op_name`,
//! `Request::is_idempotent`, `OPS` and the body codec are generated from that list,
//! so they cannot disagree. A request body is its op code (u32), then its fields in
//! declaration order; the op code is written in the list, so the order of the list
//! does not matter (protocol version 2; see docs/PROTOCOL.md, "Version history").
//! Golden-bytes tests at the end of this file pin the encoding of every message.

use crate::find::FindQuery;
use crate::frame::FrameError;
use crate::lock::{LockInfo, LockKind, LockMode};
use crate::stage::{
    ReadLogEntry, SpanHashes, StageChunks, StageCommit, StageEntry, StageExport, StageHash, StageOutcome,
};
use serde::{Deserialize, Serialize};

/// What a metadata record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum FileKind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    /// A named pipe (mkfifo): a record only; opening one through the FUSE mount gives
    /// a pipe local to the node, as on any network file system.
    Fifo = 4,
    /// A Unix socket's name (bind, mknod S_IFSOCK): a record only, as for a FIFO.
    Socket = 5,
    /// A block device node (mknod S_IFBLK): a record whose `size` field holds the
    /// device number (st_rdev; its size is 0). Never opened: the mount is nodev.
    BlockDevice = 6,
    /// A character device node (mknod S_IFCHR), as a block device's.
    CharDevice = 7,
}

impl FileKind {
    /// A device node: its record's `size` is the device number (st_rdev).
    pub fn is_device(self) -> bool {
        matches!(self, FileKind::BlockDevice | FileKind::CharDevice)
    }
}

/// A metadata record ("metadentry") as it travels on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub kind: FileKind,
    /// Permission bits only (no S_IFMT bits); the kind says the type.
    pub mode: u32,
    pub size: u64,
    /// 128-bit id fixed at creation; chunks are keyed by it, so rename moves no data.
    pub file_id: u128,
    pub nlink: u32,
    pub ctime_ns: i64,
    pub mtime_ns: i64,
    pub atime_ns: i64,
    /// Target of a symlink; empty otherwise.
    pub target: String,
    /// Owner, set from the creator's effective ids and changed by `set_owner`.
    pub uid: u32,
    pub gid: u32,
    /// Extended attributes (`user.*`), sorted by name; only on a record without a
    /// target (crate::xattr).
    pub xattrs: crate::xattr::Xattrs,
}

impl Record {
    /// Whether a record from the wire may be stored: ENAMETOOLONG for a target of
    /// PATH_MAX bytes or more, EINVAL for attributes that are malformed, past their
    /// bound, or on a record of another kind than a file or directory, or with a
    /// target other than a view placeholder's object (crate::xattr).
    pub fn check(&self) -> Result<(), i32> {
        if self.target.len() >= crate::PATH_ARG_BYTES_MAX {
            return Err(libc::ENAMETOOLONG);
        }
        if self.xattrs.is_empty() {
            return Ok(());
        }
        // Attributes belong to files and directories, not to a hard link's other
        // names (their target leads to them); a view's placeholder carries its
        // object's properties beside its target.
        let own = self.target.is_empty() || self.unfetched_object().is_some();
        let bare = own && matches!(self.kind, FileKind::File | FileKind::Dir);
        if bare && crate::xattr::is_valid(&self.xattrs) {
            Ok(())
        } else {
            Err(libc::EINVAL)
        }
    }

    /// Bytes a record counts in a page besides `RECORD_OVERHEAD_BYTES`: its target
    /// and its attributes (both only in a view's placeholder, whose target is under
    /// `PATH_ARG_BYTES_MAX` and attributes under `XATTRS_BYTES_MAX`: together under
    /// `PATH_BYTES_MAX`, the bound the page sizes assume).
    pub fn payload_bytes(&self) -> usize {
        self.target.len() + crate::xattr::bytes(&self.xattrs)
    }

    /// The object (`s3://BUCKET/KEY#ETAG`) a view's entry stands for until its
    /// first open fetches it, if this record is such a placeholder: a file whose
    /// target names an object (a file's target is otherwise empty or a link path).
    /// Its file id is a random one like any file's, so inode numbers stay distinct;
    /// no chunk of it exists.
    pub fn unfetched_object(&self) -> Option<&str> {
        (self.kind == FileKind::File && self.target.starts_with("s3://")).then_some(self.target.as_str())
    }

    /// The path of the attributes of a hard-linked file, if this record is one of
    /// its names ([`crate::path::link_path`]).
    pub fn linked_to(&self) -> Option<&str> {
        (self.kind != FileKind::Symlink && self.kind != FileKind::Dir && crate::path::is_link_path(&self.target))
            .then_some(self.target.as_str())
    }
}

/// One byte range of one file on one daemon. Offsets are file offsets, which are
/// also offsets in the daemon's sparse local file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub offset: u64,
    pub len: u32,
}

/// The steps of a move to a new layout, in the order the coordinator sends them
/// to every daemon (docs/DESIGN.md, "Growing and shrinking").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveStep {
    /// Take back every grant and claim, and give none until the move ends.
    Prepare,
    /// Refuse clients' requests (`errno::MOVING`) once those under way ended.
    Freeze,
    /// Start sending what the new layout places elsewhere to its new daemons.
    Copy,
    /// Where this daemon's part stands (nothing changes).
    Status,
    /// Serve the new layout (the hosts file says it, no longer moving).
    Adopt,
    /// Serve the old layout again (before any `copy`).
    Abort,
    /// Before `prepare`, while the old layout is served: send the joining daemons
    /// (those past `placed` in the hosts file) what the layout over every listed
    /// daemon places on them, and note what changes here meanwhile; `copy` then
    /// sends only that (docs/DESIGN.md, "Growing and shrinking").
    Precopy,
}

/// Where a daemon's part in a move stands (the answer to `move`): the last step it
/// took and for which generation, what its copy sent so far (records, chunks,
/// bytes of chunk data), whether the copy is over, and the error that stopped it
/// (empty: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveProgress {
    pub step: MoveStep,
    pub generation: u32,
    pub records: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub done: bool,
    pub error: String,
}

/// A record moved between daemons (`move_in`): its store key and value, and the
/// length of its inline data in the request's bulk (None: it has none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MovedRecord {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub inline_len: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoveKind {
    /// unlink: anything but a directory (EISDIR).
    NotDir,
    /// rmdir: only a directory (ENOTDIR). The caller checked emptiness.
    Dir,
    /// The old name of a file a rename just put under its new name: removed as
    /// `NotDir`, recorded as IN_MOVED_FROM (not IN_DELETE) in the event log, so a
    /// watcher sees both halves of the move whatever it read before.
    Moved,
}

/// Where a request goes in a replicated instance (the client's replica policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copies {
    /// Every live member of the addressed daemon's replica group (a change).
    All,
    /// The first live member, then the next on failure (a read of one copy).
    First,
    /// The addressed daemon itself (questions about that daemon, listings merged
    /// from every daemon, daemon-to-daemon requests).
    Addressed,
}

/// Whether a daemon out of service (recovering, or fenced without a lease) answers
/// a request: questions about the daemon itself, not the file system's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhileRecovering {
    Serves,
    /// Answered with EHOSTDOWN.
    Refuses,
}

/// The daemon tracepoint a request records (gust-trace's `md_read`, `md_update`,
/// `chunk_read`, `chunk_write`, `chunk_other`): one per request that reaches a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceClass {
    MdRead,
    MdUpdate,
    ChunkRead,
    ChunkWrite,
    ChunkOther,
    Untraced,
}

/// One row of the request table: every fact about an op that is not a field.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts {
    pub op: u16,
    pub name: &'static str,
    /// The `idempotent(...)` condition as written: "true", "false" or an expression
    /// of the fields (docs/PROTOCOL.md's "resend" column says the same).
    pub resend: &'static str,
    pub copies: Copies,
    pub while_recovering: WhileRecovering,
    pub trace: TraceClass,
}

/// Declares every request once. Each entry is
/// `op_code OP_CONST "name" Variant { fields } idempotent(condition) copies(C)
/// recovering(R) trace(T) [dir(expression)]`. The conditions may read the fields
/// (bound by reference). `idempotent` says whether a daemon applying the request
/// twice gives the same result as applying it once: only then may a client send it
/// again on a new connection after the old one died without any reply byte.
/// `copies` is where it goes with replicas ([`Copies`]), `recovering` whether a
/// daemon out of service answers it ([`WhileRecovering`]), `trace` its daemon
/// tracepoint ([`TraceClass`]), `dir` the directory whose activity it counts
/// toward (the daemon's busiest-directories table; none if absent).
/// Generates the enum, the `OP_*` constants, `op`, `name`, `is_idempotent`,
/// `copies`, `while_recovering`, `trace_class`, `dir`, `OPS`, `REQUEST_FACTS`,
/// `op_name`, `OP_MAX`, the body encoding (`Serialize`: op code as u32, then the
/// fields) and `decode_request` (the header's op code picks the fields to decode).
/// Every fact is written in every entry: a new request must say each of them.
macro_rules! requests {
    ($(
        $(#[$doc:meta])*
        $op:literal $const:ident $name:literal $variant:ident $({ $($field:ident : $ty:ty),* $(,)? })?
            idempotent($idem:expr) copies($copies:ident) recovering($rec:ident) trace($class:ident)
            $(dir($dir:expr))?
    ),* $(,)?) => {
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Request {
            $(
                $(#[$doc])*
                $variant $({ $($field: $ty),* })?,
            )*
        }

        /// Every request op as (code, name), in code order.
        pub const OPS: &[(u16, &str)] = &[$(($op, $name)),*];

        $(
            #[doc = concat!("Op code of `", $name, "`.")]
            pub const $const: u16 = $op;
        )*

        /// Every request's facts, in code order (docs/PROTOCOL.md's table is checked
        /// against it).
        pub const REQUEST_FACTS: &[RequestFacts] = &[$(RequestFacts {
            op: $op,
            name: $name,
            resend: stringify!($idem),
            copies: Copies::$copies,
            while_recovering: WhileRecovering::$rec,
            trace: TraceClass::$class,
        }),*];

        // Op codes are unique, nonzero and leave the response bit free; names unique.
        const _: () = {
            let mut i = 0;
            while i < OPS.len() {
                assert!(OPS[i].0 != 0 && OPS[i].0 < crate::frame::REPLY_CLAIMED, "op code out of range");
                let mut j = i + 1;
                while j < OPS.len() {
                    assert!(OPS[i].0 != OPS[j].0, "duplicate op code");
                    assert!(!const_str_eq(OPS[i].1, OPS[j].1), "duplicate op name");
                    j += 1;
                }
                i += 1;
            }
        };

        impl Request {
            /// Op code carried in the frame header; the daemon refuses unknown codes
            /// before decoding the body and counts requests per op.
            pub fn op(&self) -> u16 {
                match self {
                    $(Request::$variant { .. } => $op,)*
                }
            }

            /// The op's name, as logs and `gust status` show it.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Request::$variant { .. } => $name,)*
                }
            }

            /// Whether applying this request twice gives the same result as once, so
            /// that a client may send it again when a connection died before any byte
            /// of the reply came.
            #[allow(unused_variables)]
            pub fn is_idempotent(&self) -> bool {
                match self {
                    $(Request::$variant $({ $($field),* })? => $idem,)*
                }
            }

            /// Where this request goes in a replicated instance.
            pub fn copies(&self) -> Copies {
                match self {
                    $(Request::$variant { .. } => Copies::$copies,)*
                }
            }

            /// Whether a daemon out of service answers this request.
            pub fn while_recovering(&self) -> WhileRecovering {
                match self {
                    $(Request::$variant { .. } => WhileRecovering::$rec,)*
                }
            }

            /// The daemon tracepoint this request records.
            pub fn trace_class(&self) -> TraceClass {
                match self {
                    $(Request::$variant { .. } => TraceClass::$class,)*
                }
            }

            /// The directory whose activity this request counts toward, if any.
            #[allow(unused_variables)]
            pub fn dir(&self) -> Option<&str> {
                match self {
                    $(Request::$variant $({ $($field),* })? => {
                        let d: Option<&str> = None;
                        $(let d: Option<&str> = $dir;)?
                        d
                    })*
                }
            }
        }

        /// The name of an op code ("?" for an unknown one).
        pub fn op_name(op: u16) -> &'static str {
            match op {
                $($op => $name,)*
                _ => "?",
            }
        }

        /// The body of a request frame: the op code as u32, then the fields in
        /// declaration order.
        impl Serialize for Request {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(Request::$variant $({ $($field),* })? => ($op as u32, ($($($field,)*)?)).serialize(s),)*
                }
            }
        }

        /// Decodes a request body; its op code must be the header's.
        pub fn decode_request(op: u16, body: &[u8]) -> Result<Request, FrameError> {
            if op_name(op) == "?" {
                return Err(FrameError::UnknownOp(op));
            }
            let Some((tag, fields)) = body.split_first_chunk::<4>() else {
                return Err(FrameError::Decode(format!("body of {} bytes has no op code", body.len())));
            };
            let tag = u32::from_le_bytes(*tag);
            if tag != op as u32 {
                return Err(FrameError::Decode(format!("body is op {tag} but header says {op}")));
            }
            match op {
                $($op => {
                    let ($($($field,)*)?): ($($($ty,)*)?) = decode(fields)?;
                    Ok(Request::$variant $({ $($field),* })?)
                })*
                _ => unreachable!("known op {op}"),
            }
        }
    };
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

requests! {
    1 OP_PING "ping" Ping idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Create a record. With `exclusive`, EEXIST if present; without, return the
    /// existing record (open with O_CREAT on an existing file costs one RPC).
    2 OP_CREATE "create" Create { path: String, record: Record, exclusive: bool } idempotent(!exclusive) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    3 OP_STAT "stat" Stat { path: String } idempotent(true) copies(First) recovering(Refuses) trace(MdRead) dir(Some(crate::path::parent(path))),
    /// Answered with `Removed`. A second try would fail with ENOENT (or remove what
    /// replaced it).
    4 OP_REMOVE "remove" Remove { path: String, kind: RemoveKind } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// Grow the size to at least `end` (a merge, never a read-modify-write).
    /// With `append_len`, atomically reserve `append_len` bytes at the current end
    /// and return the reserved offset (O_APPEND). ENOENT if the path is gone,
    /// ESTALE if it now names another file than `file_id`, so a write through a
    /// stale descriptor fails instead of growing the wrong file. An append
    /// reservation applied twice reserves twice.
    5 OP_UPDATE_SIZE "update_size" UpdateSize { path: String, file_id: u128, end: u64, append_len: Option<u64>, mtime_ns: i64 }
        idempotent(append_len.is_none()) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// Set the size exactly; returns the record as it was before.
    6 OP_TRUNCATE "truncate" Truncate { path: String, size: u64, mtime_ns: i64 } idempotent(true) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    7 OP_SET_ATTR "set_attr" SetAttr { path: String, mode: Option<u32>, atime_ns: Option<i64>, mtime_ns: Option<i64>, ctime_ns: i64 }
        idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// Put a full record (rename). `replace`: overwrite a non-directory or an empty
    /// directory target of a compatible kind; returns the replaced record.
    8 OP_PUT_RECORD "put_record" PutRecord { path: String, record: Record, replace: bool } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// One page of the direct children of `dir` held by this daemon, names > `after`.
    9 OP_READDIR "readdir" ReadDir { dir: String, after: Option<String>, max_entries: u32 } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdRead) dir(Some(dir.as_str())),
    /// Whether this daemon holds any direct child of `dir` (rmdir's emptiness check).
    10 OP_HAS_CHILDREN "has_children" HasChildren { dir: String } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdRead) dir(Some(dir.as_str())),
    /// One page of all descendant records of `dir` held by this daemon, keys > `after`.
    11 OP_SCAN_TREE "scan_tree" ScanTree { dir: String, after: Option<Vec<u8>>, max_entries: u32 } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdRead),
    /// Remove these records if present (directory rename's second phase).
    12 OP_REMOVE_RECORDS "remove_records" RemoveRecords { paths: Vec<String> } idempotent(true) copies(All) recovering(Refuses) trace(MdUpdate),
    /// Write the bulk section: spans in order, their bytes concatenated.
    13 OP_WRITE "write" Write { file_id: u128, spans: Vec<Span>, sums: Vec<u64> } idempotent(true) copies(All) recovering(Refuses) trace(ChunkWrite),
    /// Read spans; the response bulk holds their bytes concatenated (holes as zeros).
    14 OP_READ "read" Read { file_id: u128, spans: Vec<Span> } idempotent(true) copies(First) recovering(Refuses) trace(ChunkRead),
    /// Cut this daemon's local file of `file_id` to `size` bytes if longer.
    15 OP_TRUNCATE_CHUNKS "truncate_chunks" TruncateChunks { file_id: u128, size: u64 } idempotent(true) copies(All) recovering(Refuses) trace(ChunkOther),
    16 OP_REMOVE_CHUNKS "remove_chunks" RemoveChunks { file_id: u128 } idempotent(true) copies(All) recovering(Refuses) trace(ChunkOther),
    /// Make chunks of `file_id` (if given) and the metadata log durable.
    17 OP_FSYNC "fsync" Fsync { file_id: Option<u128> } idempotent(true) copies(All) recovering(Refuses) trace(ChunkOther),
    18 OP_STATFS "statfs" StatFs idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    19 OP_STATS "stats" Stats idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Put records that must not exist yet, all or none (directory rename's first
    /// phase). EEXIST if any is present, so a second try fails.
    20 OP_PUT_RECORDS "put_records" PutRecords { records: Vec<(String, Record)> } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate),
    /// Stop this daemon (`gust stop`, whatever launched it). Unless `keep`, it
    /// removes its root directory after stopping. Answered before it stops; a second
    /// one finds the daemon gone or stopping, which is what the first asked for.
    21 OP_SHUTDOWN "shutdown" Shutdown { keep: bool } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Create a file record with its data inline (the bulk section, at most
    /// INLINE_BYTES_MAX bytes; `record.size` is its length). EEXIST if the path
    /// exists, whatever it is, so a client that deferred an open(O_CREAT) decides
    /// itself what an existing file means. A second try would find its own record.
    22 OP_CREATE_INLINE "create_inline" CreateInline { path: String, record: Record } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate),
    /// The record of `path` and, if the file's data is inline, that data (reply
    /// `RecordData`, data in the bulk section): an open or a read in one request.
    23 OP_STAT_DATA "stat_data" StatData { path: String } idempotent(true) copies(First) recovering(Refuses) trace(MdRead),
    /// Forget the inline data of `path` if the record there is still `file_id` (the
    /// client wrote it to chunks first): the file is then an ordinary chunked file.
    /// ENOENT if the path is gone, ESTALE if it names another file: the file was
    /// removed meanwhile, and its remover, who saw inline data, left the chunks just
    /// written to the client that wrote them (see `Response::Removed`).
    24 OP_DROP_INLINE "drop_inline" DropInline { path: String, file_id: u128 } idempotent(true) copies(All) recovering(Refuses) trace(MdUpdate),
    /// `readdir` with each entry's record (`DirPagePlus`): a listing and the stats
    /// that follow it (`ls -l`, READDIRPLUS) in one request per daemon per page.
    25 OP_READDIR_PLUS "readdir_plus" ReadDirPlus { dir: String, after: Option<String>, max_entries: u32 } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdRead),
    /// Create many file records with their data inline, each on its own exactly as
    /// `create_inline` would (a client's batched deferred creates): the bulk section
    /// holds the entries' data in order, `record.size` bytes each. Answered with one
    /// `StageOutcome` per entry, in order (`Staged`; `bytes` is the data stored, the
    /// errno EEXIST if the path exists). EINVAL for the whole request if it has more
    /// than `CREATE_BATCH_ENTRIES_MAX` entries or the sizes do not add up to the bulk
    /// section. A second try finds its own records (EEXIST).
    26 OP_CREATE_INLINE_BATCH "create_inline_batch" CreateInlineBatch { entries: Vec<(String, Record)> } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate),
    /// `stat_data` of many files at once (a data loader's batch): answered with
    /// `Files`, one `WholeFile` per path in order, each file failing on its own; the
    /// inline data of the files that have it follows in the bulk section, in order,
    /// `inline_len` bytes each. EINVAL for the whole request past
    /// `READ_MANY_ENTRIES_MAX` paths.
    27 OP_READ_MANY "read_many" ReadMany { paths: Vec<String> } idempotent(true) copies(First) recovering(Refuses) trace(MdRead),
    /// chown: set the owner and/or group (the client checked the caller may). On a
    /// non-directory it clears S_ISUID, and S_ISGID when the group may execute, as
    /// Linux does (even when both ids are `None`). Returns the record after it.
    30 OP_SET_OWNER "set_owner" SetOwner { path: String, uid: Option<u32>, gid: Option<u32>, ctime_ns: i64 } idempotent(true) copies(All) recovering(Refuses) trace(MdUpdate),
    /// A subdirectory of directory `path` was made (+1) or removed (-1), or moved in
    /// or out: its link count changes by `subdirs_delta` (a merge, never below 2) and
    /// its mtime and ctime become at least `time_ns`. ENOENT if it is gone, ENOTDIR
    /// if it is not a directory. Applied twice, a nonzero delta counts twice.
    31 OP_DIR_CHANGED "dir_changed" DirChanged { path: String, subdirs_delta: i32, time_ns: i64 } idempotent(*subdirs_delta == 0) copies(All) recovering(Refuses) trace(MdUpdate),
    /// Daemon to daemon, in replicated instances only: daemon `from` asks a peer (a
    /// daemon it shares a replica group with) whether it may go on serving. Answered
    /// with `Response::Lease`: `fenced` true if a client fenced `from` on this peer
    /// (it missed changes), which then stops serving until repaired. Changes nothing.
    32 OP_HEARTBEAT "heartbeat" Heartbeat { from: u32 } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// A client skipped `daemon` for a change: this peer records the fence (in its
    /// metadata store, so it outlives a restart) and answers `daemon`'s heartbeats
    /// with `fenced` from now on. Answered with `Response::Fenced`: how long the lease
    /// this peer last granted `daemon` may still run. EINVAL for an id outside the
    /// instance or this daemon's own.
    33 OP_FENCE "fence" Fence { daemon: u32 } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// `gust repair` rebuilt `daemon`: forget its fence. Answered with `Ok`.
    34 OP_UNFENCE "unfence" Unfence { daemon: u32 } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Everything the daemon counts and knows about its stores (`gust status`,
    /// `gust stop --stats`, the Prometheus page): answered with `Response::Metrics`.
    38 OP_METRICS "metrics" Metrics idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// One page of the descendants of `dir` held by this daemon that match `query`,
    /// keys > `after`: answered with `Response::Tree`. A page holds at most
    /// `max_entries` records and stops after `FIND_SCAN_PAGE_KEYS_MAX` keys examined,
    /// so a selective query returns short (even empty) pages with `done` false and a
    /// `last_key` to go on from, never one long request.
    39 OP_FIND "find" Find { dir: String, query: FindQuery, after: Option<Vec<u8>>, max_entries: u32 } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdRead),
    /// A client closed a descriptor of `path` through which it wrote: recorded as
    /// IN_CLOSE_WRITE in the event log of the path's metadata daemon. Changes nothing
    /// else; sent again it records a second close, which a watcher tolerates.
    40 OP_CLOSE_WRITE "close_write" CloseWrite { path: String } idempotent(true) copies(First) recovering(Refuses) trace(Untraced) dir(Some(crate::path::parent(path))),
    /// Events of this daemon's log with sequence numbers > `after_seq` whose path
    /// starts with `prefix` (a path prefix: "/a" matches "/a" and "/a/...", not
    /// "/ab"): answered with `Response::Events`.
    41 OP_EVENTS "events" Events { after_seq: u64, prefix: String, max_entries: u32 } idempotent(true) copies(Addressed) recovering(Refuses) trace(Untraced),
    /// Create these records (`gust stage in`), each on its own: answered with one
    /// `StageOutcome` per entry, in order (`Staged`). Small files get their data
    /// from their external source here. A second try finds its own records (EEXIST).
    42 OP_STAGE_CREATE "stage_create" StageCreate { entries: Vec<StageEntry> } idempotent(false) copies(All) recovering(Refuses) trace(Untraced),
    /// Copy each item's spans from its external file into this daemon's chunks of
    /// the file (`Staged`; `bytes` short of the spans' total if the external file
    /// ended early).
    43 OP_STAGE_PULL "stage_pull" StagePull { items: Vec<StageChunks> } idempotent(true) copies(All) recovering(Refuses) trace(Untraced),
    /// Write each item's spans of this daemon's chunks into its external file, which
    /// must exist (`Staged`; holes are not written: the file was sized by its creator).
    44 OP_STAGE_PUSH "stage_push" StagePush { items: Vec<StageChunks> } idempotent(true) copies(First) recovering(Refuses) trace(Untraced),
    /// Write inline files to external files (`Staged`).
    45 OP_STAGE_EXPORT "stage_export" StageExportFiles { items: Vec<StageExport> } idempotent(true) copies(First) recovering(Refuses) trace(Untraced),
    /// Hash spans of chunks, inline data or external files (`Hashes`): `--verify`.
    46 OP_STAGE_HASH "stage_hash" StageHashSpans { items: Vec<StageHash> } idempotent(true) copies(First) recovering(Refuses) trace(Untraced),
    /// Give staged-in files their size and times once their chunks are in (`Staged`).
    47 OP_STAGE_COMMIT "stage_commit" StageCommitFiles { items: Vec<StageCommit> } idempotent(true) copies(All) recovering(Refuses) trace(Untraced),
    /// One page of what this daemon served reads of (`ReadLog`), file ids > `after`.
    48 OP_READ_LOG "read_log" ReadLog { after: Option<u128>, max_entries: u32 } idempotent(true) copies(Addressed) recovering(Refuses) trace(Untraced),
    /// The node proxy (docs/DESIGN.md, "The node proxy"): the receiving daemon sends
    /// request `op` with body `body` and this frame's bulk to daemon `target` on
    /// one of its multiplexed connections, and answers with that daemon's reply
    /// body and bulk as they came (the reply frame's op is this op's). EHOSTUNREACH
    /// when `target` cannot be reached or does not answer within `timeout_ms`
    /// (daemons never answer it themselves), also for a target the hosts file does
    /// not list; EPROTO for an inner request that does not decode or is itself a
    /// forward or multiplex; EINVAL for a target that is the receiving daemon.
    49 OP_FORWARD "forward" Forward { target: u32, op: u16, timeout_ms: u32, body: Vec<u8> }
        idempotent(decode_request(*op, body).is_ok_and(|r| r.is_idempotent())) copies(Addressed) recovering(Refuses) trace(Untraced),
    /// Sent first on a daemon-to-daemon connection of the node proxy: from now on
    /// the receiving daemon may answer this connection's requests out of order
    /// (each by its request id), serving them in parallel. Answered with `Ok`.
    50 OP_MULTIPLEX "multiplex" Multiplex idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Switch this daemon's tracepoints named by `names` (comma-separated names or
    /// groups of gust-trace's registry, or `all`) on or off. With `dir`, trace files
    /// go to that directory on the daemon's node from now on (else to the one given
    /// at start). Off flushes what the daemon buffered. EINVAL for an unknown name,
    /// for `on` without any directory, or for names or a dir over `PATH_BYTES_MAX`;
    /// the errno of creating the directory if that fails. Answered with `Ok`.
    /// Sent first on each connection of a client that takes grants (docs/DESIGN.md,
    /// "Grants"): the requests that follow on this connection come from client
    /// process `client` (a random id per process). The only request never answered:
    /// it costs no round trip. Grants go only to clients whose `callback` connection
    /// is open; a change by `client` itself recalls nothing from it.
    51 OP_HELLO "hello" Hello { client: u64 } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Sent first on the connection a client keeps open for the daemon's calls: the
    /// daemon sends `recall` requests on it from now on, and the client only answers
    /// them. Answered with `Ok`. Any further request from the client ends it.
    /// `claims`: the client takes claims on directories (`REPLY_CLAIMED`) and
    /// settles what it deferred under one when it is recalled. `shared`: what it
    /// caches serves other processes (a node cache's holder), so the end of this
    /// connection, however it comes, leaves its grants until its lease is over.
    52 OP_CALLBACK "callback" Callback { client: u64, claims: bool, shared: bool } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Daemon to client, on its `callback` connection: forget the cached records of
    /// `paths` (another client is about to change them). Answered with `Ok` once
    /// they are forgotten; until then the change waits (at most the client's lease).
    53 OP_RECALL "recall" Recall { paths: Vec<String> } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Takes, changes or releases (`mode` Unlock) a lock of file `file_id` for owner
    /// (`client`, `owner`) on `start..end` (docs/DESIGN.md, "Locks"; `lock.rs`). `pid`
    /// is what a `lock_test` of another owner reports. Answered `Ok` once held (or
    /// released). A conflict answers EAGAIN, unless `wait` names a token: then the
    /// request is queued and answered `Queued` at once, and the daemon sends
    /// `lock_granted` with that token on the client's `callback` connection when it
    /// holds the lock. EDEADLK: a POSIX wait that would close a cycle of waiting
    /// owners on this daemon. ENOLCK: the table is full. ENOTCONN: the client has
    /// no callback connection (locks end with it; it opens one and asks again). EINVAL: an empty range, a flock
    /// range that is not the whole file, `wait` with Unlock. Sent again it gives the
    /// same locks (a queued wait with the same token replaces the first).
    54 OP_LOCK "lock" Lock { file_id: u128, client: u64, owner: u64, pid: i32, kind: LockKind, mode: LockMode, start: u64, end: u64, wait: Option<u64> }
        idempotent(true) copies(Addressed) recovering(Refuses) trace(MdUpdate),
    /// F_GETLK: a lock of another owner that conflicts with `mode` (Read or Write)
    /// on `start..end` (`LockHeld`). EINVAL for Unlock, flock or an empty range.
    55 OP_LOCK_TEST "lock_test" LockTest { file_id: u128, client: u64, owner: u64, kind: LockKind, mode: LockMode, start: u64, end: u64 }
        idempotent(true) copies(Addressed) recovering(Refuses) trace(MdRead),
    /// Gives up the queued wait `token` of `client` (a signal interrupted it):
    /// `Bool(true)` if it was waiting and is gone, `Bool(false)` if it is not waiting
    /// (granted or failed already: its `lock_granted` is on its way).
    56 OP_LOCK_CANCEL "lock_cancel" LockCancel { client: u64, token: u64 } idempotent(true) copies(Addressed) recovering(Refuses) trace(Untraced),
    /// Daemon to client, on its `callback` connection: the queued wait `token` ended,
    /// with the lock held (`errno` 0) or failed (ENOLCK: no room to hold it).
    /// Answered `Ok`; the daemon does not wait for the answer.
    57 OP_LOCK_GRANTED "lock_granted" LockGranted { token: u64, errno: i32 } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    58 OP_TRACE "trace" Trace { on: bool, names: String, dir: Option<String> } idempotent(true) copies(Addressed) recovering(Refuses) trace(Untraced),
    /// Hard links (docs/DESIGN.md, "Hard links"): changes the link count of the
    /// attributes record at `path` (a [`crate::path::link_path`]) of file `file_id`
    /// by `delta` and sets its ctime. Answers the record after, or `Removed` (the
    /// record, not inline) when the count reached 0 and the record is gone: the
    /// caller then removes the chunks.
    60 OP_LINK_COUNT "link_count" LinkCount { path: String, file_id: u128, delta: i32, ctime_ns: i64 } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate),
    /// Makes the record at `path` of file `file_id` a name of a hard-linked file: its
    /// `target` becomes `link`. Answers the record before (already a name of `link`:
    /// unchanged). ESTALE if the record is of another file, EPERM for a directory or
    /// symlink, EEXIST if it is a name of another link path.
    61 OP_MARK_LINKED "mark_linked" MarkLinked { path: String, file_id: u128, link: String } idempotent(true) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// Remove these records, none a directory, each on its own as `remove` would
    /// (`RemovedBatch`: one outcome per path, in order): a client's unlinks deferred
    /// under a claim (docs/DESIGN.md, "Claims"). At most
    /// [`crate::REMOVE_BATCH_ENTRIES_MAX`] paths (EINVAL). A second try finds its
    /// paths gone (ENOENT each).
    62 OP_REMOVE_BATCH "remove_batch" RemoveBatch { paths: Vec<String> } idempotent(false) copies(All) recovering(Refuses) trace(MdUpdate),
    /// Rewrite, from a copy's bytes (the bulk, the spans' bytes one after the
    /// other), the blocks of the spans that are corrupt on this daemon (their
    /// bytes do not match their checksums; docs/DESIGN.md, "Checksums"); other
    /// blocks are left as they are. Answers `Written` with the blocks rewritten.
    63 OP_REPAIR_BLOCKS "repair_blocks" RepairBlocks { file_id: u128, spans: Vec<Span> } idempotent(true) copies(Addressed) recovering(Refuses) trace(ChunkWrite),
    /// Verify this daemon's local chunk files against their checksums, in file id
    /// order from the first after `after`, until about `max_bytes` were read (at
    /// least one file). Answers `Scrubbed`; `gust scrub` pages through every
    /// daemon with it.
    64 OP_SCRUB "scrub" Scrub { after: Option<u128>, max_bytes: u64 } idempotent(true) copies(Addressed) recovering(Refuses) trace(Untraced),
    /// Change how this daemon shares its node (`gust tune`; docs/DESIGN.md,
    /// "Sharing the node"): run its threads on the last `cpus` cores it was
    /// started on (0: all of them), at niceness `nice`, and pace its chunk reads,
    /// writes and staging to `max_bandwidth` bytes a second (0: no limit). None leaves a
    /// limit as it is. Answers `Tuned`, the limits it runs with after. EINVAL: more
    /// cores than it has, a niceness outside -20..19; EPERM: a lower niceness
    /// without the privilege.
    65 OP_TUNE "tune" Tune { cpus: Option<u32>, nice: Option<i32>, max_bandwidth: Option<u64> } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// `update_size` (without an append) that also says whether the caller goes on
    /// holding the file's size back (docs/DESIGN.md, "Size holds"): with `hold`, a
    /// client with a callback connection registers a grant on `size_key(path)`
    /// (the reply's `REPLY_GRANTED` says it took), and keeps the sizes of its later
    /// writes until this daemon recalls that key: any other client's look at the
    /// record or change of it recalls it first, and the recall's answer
    /// (`HeldSizes`) carries the sizes. Without `hold`, the caller's hold ends.
    66 OP_HOLD_SIZE "hold_size" HoldSize { path: String, file_id: u128, end: u64, mtime_ns: i64, hold: bool }
        idempotent(true) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// One step of a move of data to the layout of hosts file generation
    /// `generation` (`gust expand`, `gust shrink`; docs/DESIGN.md, "Growing and
    /// shrinking"), sent by the coordinating `gust` to every daemon. Answers
    /// `Moved`, where this daemon's part stands. EBUSY: a `freeze` while file locks
    /// are held here; ESTALE: the hosts file does not say that generation.
    67 OP_MOVE "move" Move { step: MoveStep, generation: u32 } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// Records another daemon moves to this one (its `copy` step): store keys and
    /// values as they are, each with its inline data (the bulk, in order, of the
    /// lengths given). Replaces what is there. Answers `Ok`.
    68 OP_MOVE_IN "move_in" MoveIn { records: Vec<MovedRecord> } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdUpdate),
    /// setxattr (`value` Some) or removexattr (None) of attribute `name` of the
    /// record at `path` with setxattr's `flags` (crate::xattr: XATTR_CREATE,
    /// XATTR_REPLACE), setting its ctime. Answers the record after. EREMOTE for a
    /// name of a linked file (sent again to its link path); EPERM for a record that
    /// is not a file or directory; EOPNOTSUPP for the root and for names outside
    /// `user.`; else `xattr::apply`'s errnos (EEXIST, ENODATA, ENOSPC, E2BIG,
    /// ERANGE, EINVAL). Sent again, a set sets the same value, a removal finds it
    /// gone (ENODATA), a create finds it (EEXIST).
    69 OP_SET_XATTR "set_xattr" SetXattr { path: String, name: String, value: Option<Vec<u8>>, flags: u32, ctime_ns: i64 }
        idempotent(value.is_some() && *flags & crate::xattr::XATTR_CREATE == 0) copies(All) recovering(Refuses) trace(MdUpdate) dir(Some(crate::path::parent(path))),
    /// What a move's first pass sent here (`precopy`) and its sender no longer
    /// holds: records by store key, and spans of file `file_id`'s chunks (made
    /// holes). Either may be empty. Answers `Ok`.
    70 OP_MOVE_DROP "move_drop" MoveDrop { keys: Vec<Vec<u8>>, file_id: u128, spans: Vec<Span> } idempotent(true) copies(Addressed) recovering(Refuses) trace(MdUpdate),
    /// The instance's hosts file as the coordinator of a move wrote it, for this
    /// daemon's node (each node keeps its own copy): stored if it is of the same
    /// instance, of this layout generation or a newer one, and lists this daemon
    /// as it is listed now. Answers `Ok`.
    71 OP_PUT_HOSTS "put_hosts" PutHosts { text: String } idempotent(true) copies(Addressed) recovering(Serves) trace(Untraced),
    /// A data cell's write in an erasure-coded instance: writes the spans as
    /// `write` does and answers `Data` with the bytes they replaced (cut where
    /// only a hole followed, as `read` answers), taken under the same locks, so
    /// that the writer can send each parity cell the change (`xor_chunks`). Not
    /// idempotent: sent again, it would answer its own bytes as the old ones.
    72 OP_WRITE_SWAP "write_swap" WriteSwap { file_id: u128, spans: Vec<Span>, sums: Vec<u64> } idempotent(false) copies(Addressed) recovering(Refuses) trace(ChunkWrite),
    /// A parity cell's update in an erasure-coded instance: XORs the bulk section
    /// (spans in order, bytes concatenated; `sums` as `write`'s, of the bulk) into
    /// the spans of this daemon's local file of `file_id` (holes count as zeros).
    /// XOR commutes, so concurrent updates of one cell land in any order. Answers
    /// `Written`. Not idempotent: sent twice, an update undoes itself.
    73 OP_XOR_CHUNKS "xor_chunks" XorChunks { file_id: u128, spans: Vec<Span>, sums: Vec<u64> } idempotent(false) copies(Addressed) recovering(Refuses) trace(ChunkWrite),
}

impl Request {
    /// Calls `f` with each path whose record this request may change (create,
    /// remove, size, attributes, data kept inline, a rename's steps, staging's
    /// creates and commits). A daemon recalls the grants on these paths before it
    /// applies the request, and a client forgets its own cached copies of them when
    /// it sends one and when the reply comes (docs/DESIGN.md, "Grants").
    pub fn changed_paths(&self, mut f: impl FnMut(&str)) {
        match self {
            Request::Create { path, .. }
            | Request::Remove { path, .. }
            | Request::UpdateSize { path, .. }
            | Request::HoldSize { path, .. }
            | Request::Truncate { path, .. }
            | Request::SetAttr { path, .. }
            | Request::PutRecord { path, .. }
            | Request::CreateInline { path, .. }
            | Request::DropInline { path, .. }
            | Request::SetOwner { path, .. }
            | Request::SetXattr { path, .. }
            | Request::DirChanged { path, .. }
            | Request::LinkCount { path, .. }
            | Request::MarkLinked { path, .. } => f(path),
            Request::RemoveRecords { paths } | Request::RemoveBatch { paths } => paths.iter().for_each(|p| f(p)),
            Request::PutRecords { records } => records.iter().for_each(|(p, _)| f(p)),
            Request::CreateInlineBatch { entries } => entries.iter().for_each(|(p, _)| f(p)),
            Request::StageCreate { entries } => entries.iter().for_each(|e| f(&e.path)),
            Request::StageCommitFiles { items } => items.iter().for_each(|i| f(&i.path)),
            _ => {}
        }
    }

    /// Calls `f` with each file whose chunk data at the daemon this request reads
    /// or changes: a client handed that local file (short-circuit I/O) gives it
    /// back first, whoever asks.
    pub fn chunk_files(&self, mut f: impl FnMut(u128)) {
        match self {
            Request::Write { file_id, .. }
            | Request::WriteSwap { file_id, .. }
            | Request::XorChunks { file_id, .. }
            | Request::Read { file_id, .. }
            | Request::TruncateChunks { file_id, .. }
            | Request::RemoveChunks { file_id }
            | Request::RepairBlocks { file_id, .. } => f(*file_id),
            Request::StagePull { items } | Request::StagePush { items } => items.iter().for_each(|i| f(i.file_id)),
            Request::StageExportFiles { items } => items.iter().for_each(|i| f(i.file_id)),
            Request::StageHashSpans { items } => items.iter().for_each(|i| {
                if let crate::stage::HashSource::Chunks(id) = i.source {
                    f(id)
                }
            }),
            _ => {}
        }
    }

    /// The paths whose names this request makes or takes away (a subset of
    /// [`Request::changed_paths`]): their directories' listings change.
    pub fn names_changed(&self, mut f: impl FnMut(&str)) {
        match self {
            Request::Create { path, .. }
            | Request::Remove { path, .. }
            | Request::PutRecord { path, .. }
            | Request::CreateInline { path, .. } => f(path),
            Request::RemoveRecords { paths } | Request::RemoveBatch { paths } => paths.iter().for_each(|p| f(p)),
            Request::PutRecords { records } => records.iter().for_each(|(p, _)| f(p)),
            Request::CreateInlineBatch { entries } => entries.iter().for_each(|(p, _)| f(p)),
            Request::StageCreate { entries } => entries.iter().for_each(|e| f(&e.path)),
            _ => {}
        }
    }

    /// Calls `f` with each directory whose names this request reads or changes: the
    /// parent of every path it names, and a listed directory itself. A claim on one
    /// of them (docs/DESIGN.md, "Claims") is recalled before another client's
    /// request is served. A scan of a whole tree names its root in
    /// [`Request::subtree`] instead.
    pub fn dirs_named(&self, mut f: impl FnMut(&str)) {
        use crate::path::parent;
        match self {
            Request::Stat { path } | Request::StatData { path } | Request::CloseWrite { path } => f(parent(path)),
            Request::ReadMany { paths } => paths.iter().for_each(|p| f(parent(p))),
            Request::ReadDir { dir, .. } | Request::ReadDirPlus { dir, .. } | Request::HasChildren { dir } => f(dir),
            _ => {}
        }
        self.changed_paths(|p| f(parent(p)));
    }

    /// The root of the tree this request scans (`scan_tree`, `find`): every claim in
    /// it is recalled first.
    pub fn subtree(&self) -> Option<&str> {
        match self {
            Request::ScanTree { dir, .. } | Request::Find { dir, .. } => Some(dir),
            _ => None,
        }
    }

    /// The path of a change of attributes, which a daemon refuses with EREMOTE when
    /// the path is a name of a hard-linked file: the client sends it again with the
    /// path set to the file's link path (docs/DESIGN.md, "Hard links").
    pub fn attrs_path_mut(&mut self) -> Option<&mut String> {
        match self {
            Request::UpdateSize { path, .. }
            | Request::HoldSize { path, .. }
            | Request::Truncate { path, .. }
            | Request::SetAttr { path, .. }
            | Request::SetOwner { path, .. }
            | Request::SetXattr { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Whether this request changes any record ([`Request::changed_paths`]).
    pub fn changes_records(&self) -> bool {
        let mut any = false;
        self.changed_paths(|_| any = true);
        any
    }
}

/// Highest op code; codes are 1..=OP_MAX (arrays indexed by op code use it).
pub const OP_MAX: u16 = {
    let mut max = 0;
    let mut i = 0;
    while i < OPS.len() {
        if OPS[i].0 > max {
            max = OPS[i].0;
        }
        i += 1;
    }
    max
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStats {
    pub daemon_id: u32,
    pub uptime_ms: u64,
    /// Requests served per op, as (name, count), in op-code order (see `OPS`).
    pub ops: Vec<(String, u64)>,
    pub connections_open: u64,
    pub frames_refused: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
}

/// Upper bounds (inclusive, microseconds) of the latency histogram buckets; one more
/// bucket counts everything slower. Roughly 1-2.5-5 steps from a metadata request
/// served from memory (a few microseconds) to a second.
pub const LATENCY_BUCKET_BOUNDS_US: [u64; 13] =
    [2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000, 100_000, 1_000_000];

/// Bound on the directories a Metrics reply lists (the busiest first).
pub const BUSIEST_DIRS_MAX: usize = 64;

/// Requests of one op served by a daemon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpMetrics {
    pub name: String,
    pub count: u64,
    /// Requests answered with an errno.
    pub errors: u64,
    /// Sum of service times (request decoded to reply built), microseconds.
    pub latency_us_sum: u64,
    /// Requests per latency bucket (not cumulative): one per bound of
    /// `LATENCY_BUCKET_BOUNDS_US`, then one for slower ones.
    pub latency_buckets: Vec<u64>,
}

/// A daemon's counters and store sizes (the Metrics request).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonMetrics {
    pub daemon_id: u32,
    pub uptime_ms: u64,
    /// Where the daemon serves Prometheus text (`/metrics`); empty when off.
    pub metrics_addr: String,
    /// Every op, in op-code order, served or not.
    pub ops: Vec<OpMetrics>,
    /// Error replies by errno (Linux numbering), only errnos that occurred.
    pub errors: Vec<(i32, u64)>,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub connections_open: u64,
    pub frames_refused: u64,
    /// RocksDB's estimate of the records held.
    pub metadata_records: u64,
    /// Bytes of the metadata store (SST files and memtables).
    pub metadata_store_bytes: u64,
    /// Bytes the chunk store's local files occupy on disk.
    pub chunk_store_bytes: u64,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    /// Metadata requests per parent directory, busiest first, at most
    /// `BUSIEST_DIRS_MAX` (a bounded table: see the daemon's `dirs` module).
    pub busiest_dirs: Vec<(String, u64)>,
    /// Metadata requests of directories the bounded table had no room for.
    pub dirs_untracked: u64,
    /// Grants and claims (docs/DESIGN.md, "Grants" and "Claims").
    pub grants: GrantMetrics,
}

/// A daemon's grants and claims: what is held now and what happened since start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantMetrics {
    /// Grants on records and listings that clients hold now.
    pub held: u64,
    /// Grants given since start.
    pub given: u64,
    /// Recalls sent since start (of records, listings and claims).
    pub recalls: u64,
    /// Holders whose lease ran out before they answered a recall.
    pub expired: u64,
    /// Claims on directories held now.
    pub claims: u64,
    /// Claims granted since start.
    pub claims_given: u64,
    /// Claims recalled since start.
    pub claims_recalled: u64,
}

/// What happened to a path, in inotify's terms (`IN_*` names in `gust events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// IN_CREATE (with IN_ISDIR: mkdir).
    Create,
    /// IN_CLOSE_WRITE: a descriptor that wrote was closed.
    CloseWrite,
    /// IN_DELETE (with IN_ISDIR: rmdir).
    Delete,
    /// IN_MOVED_FROM: a record left this path (rename). A file rename's old path is
    /// a plain Delete at its daemon; `gust events` pairs it by file id.
    MovedFrom,
    /// IN_MOVED_TO: a record arrived at this path (rename).
    MovedTo,
    /// IN_ATTRIB: mode or times set.
    Attrib,
    /// IN_MODIFY: truncated.
    Modify,
}

/// One entry of a daemon's event log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Per daemon, from 1, without gaps: a consumer's cursor.
    pub seq: u64,
    /// When the daemon recorded it (ns since the epoch, the daemon's clock).
    pub time_ns: i64,
    pub kind: EventKind,
    pub is_dir: bool,
    pub path: String,
    /// The record's file id (pairs a rename's two halves).
    pub file_id: u128,
}

/// Bound on the events of one Events reply, and on their counted bytes (path +
/// `EVENT_OVERHEAD_BYTES` each).
pub const EVENTS_PAGE_ENTRIES_MAX: u32 = 4096;
pub const EVENTS_PAGE_BYTES_MAX: usize = 512 * 1024;
/// Bytes counted per event besides its path: its encoding takes 53 (path length,
/// seq, time, kind, is_dir, file id).
pub const EVENT_OVERHEAD_BYTES: usize = 64;

/// Declares every response once, each with its tag: the enum (bincode encodes a
/// response with its variant tag, a u32, which is the declaration order, 0-based;
/// new variants go at the end only, and the tags written here must be that order),
/// `RESPONSES` (tag, name) and `Response::name`. The golden tests below pin every
/// tag's bytes; docs/PROTOCOL.md's table is checked against `RESPONSES`.
macro_rules! responses {
    ($(
        $(#[$doc:meta])*
        $tag:literal $variant:ident $(($($tty:ty),* $(,)?))? $({ $($field:ident : $fty:ty),* $(,)? })?
    ),* $(,)?) => {
        /// A daemon's answer (see `responses!`).
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Response {
            $(
                $(#[$doc])*
                $variant $(($($tty),*))? $({ $($field: $fty),* })?,
            )*
        }

        /// Every response as (tag, name), in tag order.
        pub const RESPONSES: &[(u32, &str)] = &[$(($tag, stringify!($variant))),*];

        // The tags written are the declaration order, which is what bincode sends.
        const _: () = {
            let mut i = 0;
            while i < RESPONSES.len() {
                assert!(RESPONSES[i].0 == i as u32, "response tags must be 0, 1, 2, ... in order");
                i += 1;
            }
        };

        impl Response {
            /// The response's name, as docs/PROTOCOL.md gives it.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Response::$variant { .. } => stringify!($variant),)*
                }
            }
        }
    };
}

responses! {
    0 Ok,
    1 Record(Record),
    2 MaybeRecord(Option<Record>),
    3 Offset(u64),
    4 DirPage {
        entries: Vec<DirEntry>,
        done: bool,
    },
    5 Bool(bool),
    6 Tree {
        records: Vec<(String, Record)>,
        last_key: Option<Vec<u8>>,
        done: bool,
    },
    7 Written(u64),
    /// Data follows in the bulk section: for each requested span, `span_lens[i]`
    /// bytes (fewer than asked where the daemon's local file ends; the client fills
    /// the rest with zeros, so holes and short chunks never cross the wire).
    /// `sums`: one per piece of those bytes (a span's bytes between two multiples
    /// of 4096, in order: `sums::pieces`), which the client checks (the bytes were
    /// not corrupted on their way); empty: unchecked.
    8 Data {
        span_lens: Vec<u32>,
        sums: Vec<u64>,
    },
    9 StatFs {
        total_bytes: u64,
        free_bytes: u64,
        avail_bytes: u64,
        files: u64,
    },
    10 Stats(DaemonStats),
    11 Metrics(DaemonMetrics),
    /// A page of the event log: the events, the last sequence number examined (the
    /// cursor to ask after next time), the oldest sequence number still held (events
    /// after the cursor but before it were dropped: the log is bounded) and the next
    /// sequence number to be given. `first_seq` = `next_seq` means an empty log.
    12 Events {
        events: Vec<Event>,
        last_seq: u64,
        first_seq: u64,
        next_seq: u64,
    },
    /// A record and, with `inline`, its file's inline data in the bulk section
    /// (which may be shorter than `record.size`: the rest reads as zeros).
    13 RecordData {
        record: Record,
        inline: bool,
    },
    /// A readdir page with each entry's record (name, record), in name order.
    14 DirPagePlus {
        entries: Vec<(String, Record)>,
        done: bool,
    },
    /// One outcome per entry or item of a staging request, in order.
    15 Staged(Vec<StageOutcome>),
    /// One result per item of a hash request, in order.
    16 Hashes(Vec<SpanHashes>),
    /// A page of the read log; `dropped` counts files the log had no room for
    /// (their reads are not in it).
    17 ReadLog {
        entries: Vec<ReadLogEntry>,
        done: bool,
        dropped: u64,
    },
    /// Answer to a heartbeat: whether the asking daemon is fenced.
    18 Lease {
        fenced: bool,
    },
    /// Answer to a fence: the longest the fenced daemon's lease from this peer may
    /// still run (0: it has none), in milliseconds of this peer's clock.
    19 Fenced {
        lease_left_ms: u64,
    },
    /// Answer to `read_many`: per path, its record and the length of its inline data
    /// in the bulk section, or its errno.
    20 Files(Vec<WholeFile>),
    /// Answer to `remove`: the record as it was, and whether the file's data was
    /// inline. A file whose data was inline has no chunks: a client moving inline
    /// data to chunks writes them before it drops the inline copy, and removes them
    /// itself if that drop finds the file gone (`drop_inline`). So the remover of
    /// such a file asks no data daemon.
    21 Removed {
        record: Record,
        inline: bool,
    },
    /// Answer to a `lock` that must wait: queued under its token; `lock_granted`
    /// follows on the client's callback connection.
    22 Queued,
    /// Answer to `lock_test`: a conflicting lock of another owner, or none.
    23 LockHeld(Option<LockInfo>),
    /// Answer to `remove_batch`: per path, in order, what `remove` would have
    /// answered.
    24 RemovedBatch(Vec<RemoveOutcome>),
    /// Answer to `scrub`: files and bytes verified, the corrupt ranges found, and
    /// the cursor of the next page (None: this daemon is done).
    25 Scrubbed {
        files: u64,
        bytes: u64,
        corrupt: Vec<CorruptRange>,
        next: Option<u128>,
    },
    /// Answer to `tune`: the cores the daemon's threads run on (a CPU list, as
    /// Linux writes one: "0-3,8"), their niceness, and the bandwidth limit in bytes
    /// a second (0: none).
    26 Tuned {
        cpus: String,
        nice: i32,
        max_bandwidth: u64,
    },
    /// Answer to a `recall` that took size holds back (`hold_size`): the sizes the
    /// client held, which the daemon applies before the request that recalled them.
    27 HeldSizes {
        sizes: Vec<HeldSize>,
    },
    /// Answer to `move`: where the daemon's part stands (`MoveProgress`).
    28 Moved(MoveProgress),
}

/// A size a client held back (`hold_size`), given up in a recall's answer: as an
/// `update_size` of `path`'s record for file `file_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldSize {
    pub path: String,
    pub file_id: u128,
    pub end: u64,
    pub mtime_ns: i64,
}

/// Bytes of a daemon's local file of `file_id` (at file offsets: chunk `k` sits at
/// `k * chunk_size`) whose blocks do not match their checksums.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorruptRange {
    pub file_id: u128,
    pub offset: u64,
    pub len: u64,
}

/// One path of a `remove_batch` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoveOutcome {
    /// As `Response::Removed`: the record as it was, and whether its data was inline.
    Removed { record: Record, inline: bool },
    /// The errno of this path alone (ENOENT, EISDIR, EINVAL for a malformed path, ...).
    Failed(i32),
}

/// One file of a `read_many` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WholeFile {
    /// The record, and with `inline_len` the length of the file's inline data in
    /// the bulk section (which may be shorter than `record.size`: the rest reads as
    /// zeros, as for `RecordData`). None: not inline (chunks, or not a file).
    Found { record: Record, inline_len: Option<u32> },
    /// The errno of this path alone (ENOENT, EINVAL for a malformed path, ...).
    Failed(i32),
}

/// A reply: a response or an errno value (Linux numbering).
pub type Reply = Result<Response, i32>;

fn codec() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_limit(crate::BODY_BYTES_MAX as u64)
        .with_fixint_encoding()
        .reject_trailing_bytes()
}

pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    use bincode::Options;
    codec().serialize(v).expect("messages are bounded and always encodable")
}

pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, FrameError> {
    use bincode::Options;
    codec().deserialize(b).map_err(|e| FrameError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiting write lock: the golden frames' sample and the grant test's.
    fn sample_lock() -> Request {
        Request::Lock {
            file_id: 7,
            client: 9,
            owner: 1,
            pid: 42,
            kind: LockKind::Posix,
            mode: LockMode::Write,
            start: 10,
            end: crate::LOCK_END_EOF,
            wait: Some(5),
        }
    }

    fn rec() -> Record {
        Record {
            kind: FileKind::File,
            mode: 0o644,
            size: 5,
            file_id: 7,
            nlink: 1,
            ctime_ns: 2,
            mtime_ns: 3,
            atime_ns: 4,
            target: String::new(),
            uid: 1000,
            gid: 100,
            xattrs: Vec::new(),
        }
    }

    /// `rec()` as encoded: kind u32, mode u32, size u64, file_id u128, nlink u32,
    /// ctime_ns, mtime_ns, atime_ns i64, target (u64 length + bytes), uid, gid u32,
    /// xattrs (u64 count, then name and value, each u64 length + bytes).
    const REC: &str = "00000000 a4010000 0500000000000000 07000000000000000000000000000000 01000000 \
                       0200000000000000 0300000000000000 0400000000000000 0000000000000000  e8030000 64000000 \
                       0000000000000000";

    fn link() -> Record {
        Record { kind: FileKind::Symlink, mode: 0o777, size: 1, file_id: 8, target: "t".into(), ..rec() }
    }

    const LINK: &str = "02000000 ff010000 0100000000000000 08000000000000000000000000000000 01000000 \
                        0200000000000000 0300000000000000 0400000000000000 0100000000000000 74  e8030000 64000000 \
                        0000000000000000";

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        assert!(digits.len().is_multiple_of(2), "odd hex: {s}");
        digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
    }

    fn show(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// One fixed example of every request and its exact body bytes (protocol 4): the
    /// op code (u32), then the fields.
    fn request_goldens() -> Vec<(Request, String)> {
        vec![
            (Request::Ping, "01000000".into()),
            (
                Request::Create { path: "/a".into(), record: rec(), exclusive: true },
                format!("02000000  0200000000000000 2f61  {REC}  01"),
            ),
            (Request::Stat { path: "/a".into() }, "03000000  0200000000000000 2f61".into()),
            (Request::Remove { path: "/a".into(), kind: RemoveKind::Dir }, "04000000  0200000000000000 2f61  01000000".into()),
            (
                Request::UpdateSize { path: "/a".into(), file_id: 7, end: 10, append_len: Some(4), mtime_ns: 5 },
                "05000000  0200000000000000 2f61  07000000000000000000000000000000  0a00000000000000  01 0400000000000000  \
                 0500000000000000"
                    .into(),
            ),
            (
                Request::Truncate { path: "/a".into(), size: 3, mtime_ns: 5 },
                "06000000  0200000000000000 2f61  0300000000000000  0500000000000000".into(),
            ),
            (
                Request::SetAttr {
                    path: "/a".into(),
                    mode: Some(0o600),
                    atime_ns: None,
                    mtime_ns: Some(6),
                    ctime_ns: 7,
                },
                "07000000  0200000000000000 2f61  01 80010000  00  01 0600000000000000  0700000000000000".into(),
            ),
            (
                Request::PutRecord { path: "/b".into(), record: link(), replace: false },
                format!("08000000  0200000000000000 2f62  {LINK}  00"),
            ),
            (
                Request::ReadDir { dir: "/".into(), after: Some("x".into()), max_entries: 16 },
                "09000000  0100000000000000 2f  01 0100000000000000 78  10000000".into(),
            ),
            (Request::HasChildren { dir: "/d".into() }, "0a000000  0200000000000000 2f64".into()),
            (
                Request::ScanTree { dir: "/d".into(), after: Some(vec![1, 2]), max_entries: 5 },
                "0b000000  0200000000000000 2f64  01 0200000000000000 0102  05000000".into(),
            ),
            (
                Request::RemoveRecords { paths: vec!["/a".into(), "/b".into()] },
                "0c000000  0200000000000000  0200000000000000 2f61  0200000000000000 2f62".into(),
            ),
            (
                Request::Write { file_id: 7, spans: vec![Span { offset: 0, len: 4 }], sums: vec![5] },
                "0d000000  07000000000000000000000000000000  0100000000000000  0000000000000000 04000000  \
                 0100000000000000 0500000000000000"
                    .into(),
            ),
            (
                Request::Read {
                    file_id: 7,
                    spans: vec![Span { offset: 512, len: 8 }, Span { offset: 1 << 19, len: 2 }],
                },
                "0e000000  07000000000000000000000000000000  0200000000000000  0002000000000000 08000000  \
                 0000080000000000 02000000"
                    .into(),
            ),
            (
                Request::TruncateChunks { file_id: 7, size: 100 },
                "0f000000  07000000000000000000000000000000  6400000000000000".into(),
            ),
            (Request::RemoveChunks { file_id: 7 }, "10000000  07000000000000000000000000000000".into()),
            (Request::Fsync { file_id: Some(7) }, "11000000  01 07000000000000000000000000000000".into()),
            (Request::StatFs, "12000000".into()),
            (Request::Stats, "13000000".into()),
            (
                Request::PutRecords { records: vec![("/x".into(), rec())] },
                format!("14000000  0100000000000000  0200000000000000 2f78  {REC}"),
            ),
            (Request::Shutdown { keep: true }, "15000000  01".into()),
            (
                Request::CreateInline { path: "/a".into(), record: rec() },
                format!("16000000  0200000000000000 2f61  {REC}"),
            ),
            (Request::StatData { path: "/a".into() }, "17000000  0200000000000000 2f61".into()),
            (
                Request::DropInline { path: "/a".into(), file_id: 7 },
                "18000000  0200000000000000 2f61  07000000000000000000000000000000".into(),
            ),
            (
                Request::ReadDirPlus { dir: "/".into(), after: None, max_entries: 16 },
                "19000000  0100000000000000 2f  00  10000000".into(),
            ),
            (
                Request::CreateInlineBatch { entries: vec![("/a".into(), rec())] },
                format!("1a000000  0100000000000000  0200000000000000 2f61  {REC}"),
            ),
            (
                Request::ReadMany { paths: vec!["/a".into(), "/b".into()] },
                "1b000000  0200000000000000  0200000000000000 2f61  0200000000000000 2f62".into(),
            ),
            (
                Request::SetOwner { path: "/a".into(), uid: None, gid: Some(100), ctime_ns: 7 },
                "1e000000  0200000000000000 2f61  00  01 64000000  0700000000000000".into(),
            ),
            (
                Request::DirChanged { path: "/d".into(), subdirs_delta: -1, time_ns: 9 },
                "1f000000  0200000000000000 2f64  ffffffff  0900000000000000".into(),
            ),
            (Request::Heartbeat { from: 3 }, "20000000  03000000".into()),
            (Request::Fence { daemon: 4 }, "21000000  04000000".into()),
            (Request::Unfence { daemon: 5 }, "22000000  05000000".into()),
            (Request::Metrics, "26000000".into()),
            (
                Request::Find {
                    dir: "/d".into(),
                    query: FindQuery {
                        name: Some("*.c".into()),
                        kind: Some(FileKind::File),
                        size: Some((crate::Cmp::More, 2, 1024)),
                        newer_than_ns: None,
                        mmin: Some((crate::Cmp::Less, 5)),
                        now_ns: 9,
                        xattrs: vec![("user.a".into(), Some("x*".into()))],
                    },
                    after: None,
                    max_entries: 7,
                },
                // dir; query: name, kind, size (Cmp u32, N, unit), newer, mmin, now,
                // xattrs; after; max_entries.
                "27000000  0200000000000000 2f64  01 0300000000000000 2a2e63  01 00000000  \
                 01 02000000 0200000000000000 0004000000000000  00  01 00000000 0500000000000000  \
                 0900000000000000  0100000000000000 0600000000000000 757365722e61 01 0200000000000000 782a  \
                 00  07000000"
                    .into(),
            ),
            (Request::CloseWrite { path: "/a".into() }, "28000000  0200000000000000 2f61".into()),
            (
                Request::Events { after_seq: 5, prefix: "/a".into(), max_entries: 7 },
                "29000000  0500000000000000  0200000000000000 2f61  07000000".into(),
            ),
            (
                Request::StageCreate {
                    entries: vec![StageEntry { path: "/a".into(), record: rec(), source: Some("/s".into()), replace: true }],
                },
                format!("2a000000  0100000000000000  0200000000000000 2f61  {REC}  01 0200000000000000 2f73  01"),
            ),
            (
                Request::StagePull {
                    items: vec![StageChunks { file_id: 7, external: "/s".into(), spans: vec![Span { offset: 1, len: 2 }] }],
                },
                "2b000000  0100000000000000  07000000000000000000000000000000  0200000000000000 2f73  \
                 0100000000000000  0100000000000000 02000000"
                    .into(),
            ),
            (
                Request::StagePush {
                    items: vec![StageChunks { file_id: 7, external: "/s".into(), spans: vec![Span { offset: 1, len: 2 }] }],
                },
                "2c000000  0100000000000000  07000000000000000000000000000000  0200000000000000 2f73  \
                 0100000000000000  0100000000000000 02000000"
                    .into(),
            ),
            (
                Request::StageExportFiles { items: vec![StageExport { path: "/a".into(), file_id: 7, dest: "/d".into() }] },
                "2d000000  0100000000000000  0200000000000000 2f61  07000000000000000000000000000000  \
                 0200000000000000 2f64"
                    .into(),
            ),
            (
                Request::StageHashSpans {
                    items: vec![StageHash {
                        source: crate::stage::HashSource::External("/s".into()),
                        spans: vec![Span { offset: 1, len: 2 }],
                    }],
                },
                "2e000000  0100000000000000  02000000 0200000000000000 2f73  0100000000000000  \
                 0100000000000000 02000000"
                    .into(),
            ),
            (
                Request::StageCommitFiles {
                    items: vec![StageCommit { path: "/a".into(), file_id: 7, size: 3, mtime_ns: 5, atime_ns: 6 }],
                },
                "2f000000  0100000000000000  0200000000000000 2f61  07000000000000000000000000000000  \
                 0300000000000000  0500000000000000  0600000000000000"
                    .into(),
            ),
            (
                Request::ReadLog { after: Some(7), max_entries: 9 },
                "30000000  01 07000000000000000000000000000000  09000000".into(),
            ),
            (
                Request::Forward { target: 2, op: 1, timeout_ms: 9, body: vec![1, 0, 0, 0] },
                "31000000  02000000  0100  09000000  0400000000000000 01000000".into(),
            ),
            (Request::Multiplex, "32000000".into()),
            (Request::Hello { client: 0x0807060504030201 }, "33000000  0102030405060708".into()),
            (Request::Callback { client: 9, claims: true, shared: false }, "34000000  0900000000000000 01 00".into()),
            (Request::Recall { paths: vec!["/a".into()] }, "35000000  0100000000000000 0200000000000000 2f61".into()),
            (
                sample_lock(),
                // file id, client, owner, pid, kind (u32: 0 posix), mode (u32: 2 write),
                // start, end (to the end of the file), wait token.
                "36000000  07000000000000000000000000000000  0900000000000000  0100000000000000  2a000000  \
                 00000000  02000000  0a00000000000000  ffffffffffffffff  01 0500000000000000"
                    .into(),
            ),
            (
                Request::LockTest {
                    file_id: 7,
                    client: 9,
                    owner: 1,
                    kind: LockKind::Ofd,
                    mode: LockMode::Read,
                    start: 0,
                    end: 4,
                },
                "37000000  07000000000000000000000000000000  0900000000000000  0100000000000000  01000000  \
                 01000000  0000000000000000  0400000000000000"
                    .into(),
            ),
            (Request::LockCancel { client: 9, token: 5 }, "38000000  0900000000000000  0500000000000000".into()),
            (Request::LockGranted { token: 5, errno: 0 }, "39000000  0500000000000000  00000000".into()),
            (
                Request::Trace { on: true, names: "md".into(), dir: Some("/t".into()) },
                "3a000000  01  0200000000000000 6d64  01 0200000000000000 2f74".into(),
            ),
            (
                Request::LinkCount { path: "/a".into(), file_id: 7, delta: -1, ctime_ns: 5 },
                "3c000000  0200000000000000 2f61  07000000000000000000000000000000  ffffffff  0500000000000000".into(),
            ),
            (
                Request::MarkLinked { path: "/a".into(), file_id: 7, link: "/b".into() },
                "3d000000  0200000000000000 2f61  07000000000000000000000000000000  0200000000000000 2f62".into(),
            ),
            (
                Request::RemoveBatch { paths: vec!["/a".into(), "/b".into()] },
                "3e000000  0200000000000000  0200000000000000 2f61  0200000000000000 2f62".into(),
            ),
            (
                Request::RepairBlocks { file_id: 7, spans: vec![Span { offset: 0, len: 4096 }] },
                "3f000000  07000000000000000000000000000000  0100000000000000 0000000000000000 00100000".into(),
            ),
            (
                Request::Scrub { after: Some(7), max_bytes: 4096 },
                "40000000  01 07000000000000000000000000000000  0010000000000000".into(),
            ),
            (
                Request::Tune { cpus: Some(1), nice: None, max_bandwidth: Some(4096) },
                "41000000  01 01000000  00  01 0010000000000000".into(),
            ),
            (
                Request::HoldSize { path: "/a".into(), file_id: 7, end: 10, mtime_ns: 5, hold: true },
                "42000000  0200000000000000 2f61  07000000000000000000000000000000  0a00000000000000  \
                 0500000000000000  01"
                    .into(),
            ),
            (Request::Move { step: MoveStep::Copy, generation: 2 }, "43000000  02000000  02000000".into()),
            (
                Request::MoveIn { records: vec![MovedRecord { key: vec![1], value: vec![2], inline_len: Some(3) }] },
                "44000000  0100000000000000  0100000000000000 01  0100000000000000 02  01 03000000".into(),
            ),
            (
                Request::SetXattr { path: "/a".into(), name: "user.a".into(), value: Some(b"v".to_vec()), flags: 1, ctime_ns: 7 },
                "45000000  0200000000000000 2f61  0600000000000000 757365722e61  01 0100000000000000 76  01000000  \
                 0700000000000000"
                    .into(),
            ),
            (
                Request::MoveDrop { keys: vec![vec![1]], file_id: 7, spans: vec![Span { offset: 0, len: 4096 }] },
                "46000000  0100000000000000 0100000000000000 01  07000000000000000000000000000000  \
                 0100000000000000 0000000000000000 00100000"
                    .into(),
            ),
            (Request::PutHosts { text: "x".into() }, "47000000  0100000000000000 78".into()),
            (
                Request::WriteSwap { file_id: 7, spans: vec![Span { offset: 0, len: 4 }], sums: vec![5] },
                "48000000  07000000000000000000000000000000  0100000000000000  0000000000000000 04000000  \
                 0100000000000000 0500000000000000"
                    .into(),
            ),
            (
                Request::XorChunks { file_id: 7, spans: vec![Span { offset: 0, len: 4 }], sums: vec![] },
                "49000000  07000000000000000000000000000000  0100000000000000  0000000000000000 04000000  \
                 0000000000000000"
                    .into(),
            ),
        ]
    }

    /// Any change of a request's encoding fails here: bump PROTOCOL_VERSION, record
    /// the change in docs/PROTOCOL.md's version history, then update the bytes.
    #[test]
    fn attributes_belong_to_files_directories_and_placeholders() {
        let x = vec![("user.s3.tag.project".to_string(), b"ocean".to_vec())];
        let file = Record {
            kind: FileKind::File,
            mode: 0o444,
            size: 1,
            file_id: 1,
            nlink: 1,
            ctime_ns: 0,
            mtime_ns: 0,
            atime_ns: 0,
            target: "s3://b/k#etag".into(),
            uid: 0,
            gid: 0,
            xattrs: x.clone(),
        };
        assert_eq!(file.check(), Ok(()), "a view's placeholder carries its object's properties");
        let link_name = Record { target: crate::path::link_path(7), ..file.clone() };
        assert_eq!(link_name.check(), Err(libc::EINVAL), "a hard link's other name has none of its own");
        let symlink = Record { kind: FileKind::Symlink, target: "s3://b/k".into(), ..file };
        assert_eq!(symlink.check(), Err(libc::EINVAL));
    }

    #[test]
    fn golden_request_bodies() {
        let goldens = request_goldens();
        for (req, want) in &goldens {
            let want = hex(want);
            let got = encode(req);
            assert_eq!(show(&got), show(&want), "encoding of op {} ({})", req.op(), req.name());
            assert_eq!(&decode_request(req.op(), &want).unwrap(), req, "decoding of op {}", req.op());
        }
        // Exactly one example per op, so a new request cannot go without one.
        let ops: Vec<u16> = goldens.iter().map(|(r, _)| r.op()).collect();
        assert_eq!(ops, OPS.iter().map(|o| o.0).collect::<Vec<_>>());
    }

    #[test]
    fn a_renames_remove_is_remove_kind_2() {
        let r = Request::Remove { path: "/a".into(), kind: RemoveKind::Moved };
        assert_eq!(show(&encode(&r)), show(&hex("04000000  0200000000000000 2f61  02000000")));
    }

    /// The op table as docs/PROTOCOL.md lists it; op codes never change meaning.
    #[test]
    fn op_codes_names_and_idempotency() {
        let table: Vec<(u16, &str, bool)> =
            request_goldens().iter().map(|(r, _)| (r.op(), r.name(), r.is_idempotent())).collect();
        assert_eq!(
            table,
            vec![
                (1, "ping", true),
                (2, "create", false),
                (3, "stat", true),
                (4, "remove", false),
                (5, "update_size", false),
                (6, "truncate", true),
                (7, "set_attr", false),
                (8, "put_record", false),
                (9, "readdir", true),
                (10, "has_children", true),
                (11, "scan_tree", true),
                (12, "remove_records", true),
                (13, "write", true),
                (14, "read", true),
                (15, "truncate_chunks", true),
                (16, "remove_chunks", true),
                (17, "fsync", true),
                (18, "statfs", true),
                (19, "stats", true),
                (20, "put_records", false),
                (21, "shutdown", true),
                (22, "create_inline", false),
                (23, "stat_data", true),
                (24, "drop_inline", true),
                (25, "readdir_plus", true),
                (26, "create_inline_batch", false),
                (27, "read_many", true),
                (30, "set_owner", true),
                (31, "dir_changed", false),
                (32, "heartbeat", true),
                (33, "fence", true),
                (34, "unfence", true),
                (38, "metrics", true),
                (39, "find", true),
                (40, "close_write", true),
                (41, "events", true),
                (42, "stage_create", false),
                (43, "stage_pull", true),
                (44, "stage_push", true),
                (45, "stage_export", true),
                (46, "stage_hash", true),
                (47, "stage_commit", true),
                (48, "read_log", true),
                (49, "forward", true),
                (50, "multiplex", true),
                (51, "hello", true),
                (52, "callback", true),
                (53, "recall", true),
                (54, "lock", true),
                (55, "lock_test", true),
                (56, "lock_cancel", true),
                (57, "lock_granted", true),
                (58, "trace", true),
                (60, "link_count", false),
                (61, "mark_linked", true),
                (62, "remove_batch", false),
                (63, "repair_blocks", true),
                (64, "scrub", true),
                (65, "tune", true),
                (66, "hold_size", true),
                (67, "move", true),
                (68, "move_in", true),
                (69, "set_xattr", false),
                (70, "move_drop", true),
                (71, "put_hosts", true),
                (72, "write_swap", false),
                (73, "xor_chunks", false),
            ]
        );
        for (code, name) in OPS {
            assert_eq!(op_name(*code), *name);
        }
        assert_eq!(op_name(0), "?");
        assert_eq!(op_name(OP_MAX + 1), "?");
        assert_eq!(OP_MAX, 73);
        // Conditional idempotency: an open(O_CREAT) without O_EXCL and a size merge
        // may be resent; an exclusive create and an append reservation may not.
        let create = |exclusive| Request::Create { path: "/a".into(), record: rec(), exclusive };
        assert!(create(false).is_idempotent() && !create(true).is_idempotent());
        let grow = |append_len| Request::UpdateSize { path: "/a".into(), file_id: 1, end: 1, append_len, mtime_ns: 0 };
        assert!(grow(None).is_idempotent() && !grow(Some(1)).is_idempotent());
        let changed = |subdirs_delta| Request::DirChanged { path: "/d".into(), subdirs_delta, time_ns: 0 };
        assert!(changed(0).is_idempotent() && !changed(1).is_idempotent());
    }

    /// One fixed example of every response, and an error, as reply bodies.
    #[test]
    fn golden_reply_bodies() {
        let ok = "00000000"; // Result::Ok
        let goldens: Vec<(Reply, String)> = vec![
            (Ok(Response::Ok), format!("{ok} 00000000")),
            (Ok(Response::Record(rec())), format!("{ok} 01000000  {REC}")),
            (Ok(Response::MaybeRecord(Some(link()))), format!("{ok} 02000000  01 {LINK}")),
            (Ok(Response::MaybeRecord(None)), format!("{ok} 02000000  00")),
            (Ok(Response::Offset(9)), format!("{ok} 03000000  0900000000000000")),
            (
                Ok(Response::DirPage { entries: vec![DirEntry { name: "f".into(), kind: FileKind::Dir }], done: true }),
                format!("{ok} 04000000  0100000000000000  0100000000000000 66 01000000  01"),
            ),
            (Ok(Response::Bool(true)), format!("{ok} 05000000  01")),
            (
                Ok(Response::Tree { records: vec![("/x".into(), rec())], last_key: Some(vec![9]), done: false }),
                format!("{ok} 06000000  0100000000000000  0200000000000000 2f78  {REC}  01 0100000000000000 09  00"),
            ),
            (Ok(Response::Written(4)), format!("{ok} 07000000  0400000000000000")),
            (
                Ok(Response::Data { span_lens: vec![8, 0], sums: vec![9] }),
                format!("{ok} 08000000  0200000000000000 08000000 00000000  0100000000000000 0900000000000000"),
            ),
            (
                Ok(Response::StatFs { total_bytes: 1, free_bytes: 2, avail_bytes: 3, files: 4 }),
                format!("{ok} 09000000  0100000000000000 0200000000000000 0300000000000000 0400000000000000"),
            ),
            (
                Ok(Response::Stats(DaemonStats {
                    daemon_id: 3,
                    uptime_ms: 5,
                    ops: vec![("ping".into(), 2)],
                    connections_open: 1,
                    frames_refused: 0,
                    bytes_written: 6,
                    bytes_read: 7,
                })),
                format!(
                    "{ok} 0a000000  03000000 0500000000000000  0100000000000000 0400000000000000 70696e67 \
                     0200000000000000  0100000000000000 0000000000000000 0600000000000000 0700000000000000"
                ),
            ),
            (
                Ok(Response::DirPage {
                    entries: vec![
                        DirEntry { name: "p".into(), kind: FileKind::Fifo },
                        DirEntry { name: "s".into(), kind: FileKind::Socket },
                    ],
                    done: false,
                }),
                format!(
                    "{ok} 04000000  0200000000000000  0100000000000000 70 03000000  0100000000000000 73 04000000  00"
                ),
            ),
            (
                Ok(Response::Metrics(DaemonMetrics {
                    daemon_id: 1,
                    uptime_ms: 2,
                    metrics_addr: String::new(),
                    ops: vec![OpMetrics {
                        name: "ping".into(),
                        count: 3,
                        errors: 1,
                        latency_us_sum: 4,
                        latency_buckets: vec![3],
                    }],
                    errors: vec![(2, 1)],
                    bytes_written: 5,
                    bytes_read: 6,
                    connections_open: 7,
                    frames_refused: 0,
                    metadata_records: 8,
                    metadata_store_bytes: 9,
                    chunk_store_bytes: 10,
                    capacity_bytes: 11,
                    free_bytes: 12,
                    avail_bytes: 13,
                    busiest_dirs: vec![("/".into(), 3)],
                    dirs_untracked: 0,
                    grants: GrantMetrics {
                        held: 14,
                        given: 15,
                        recalls: 16,
                        expired: 17,
                        claims: 18,
                        claims_given: 19,
                        claims_recalled: 20,
                    },
                })),
                format!(
                    "{ok} 0b000000  01000000 0200000000000000 0000000000000000  \
                     0100000000000000 0400000000000000 70696e67 0300000000000000 0100000000000000 \
                     0400000000000000 0100000000000000 0300000000000000  \
                     0100000000000000 02000000 0100000000000000  \
                     0500000000000000 0600000000000000 0700000000000000 0000000000000000 0800000000000000 \
                     0900000000000000 0a00000000000000 0b00000000000000 0c00000000000000 0d00000000000000  \
                     0100000000000000 0100000000000000 2f 0300000000000000  0000000000000000  \
                     0e00000000000000 0f00000000000000 1000000000000000 1100000000000000 \
                     1200000000000000 1300000000000000 1400000000000000"
                ),
            ),
            (
                Ok(Response::Events {
                    events: vec![Event {
                        seq: 3,
                        time_ns: 4,
                        kind: EventKind::CloseWrite,
                        is_dir: false,
                        path: "/a".into(),
                        file_id: 7,
                    }],
                    last_seq: 3,
                    first_seq: 2,
                    next_seq: 4,
                }),
                // events (seq, time, kind u32, is_dir, path, file id), last, first, next.
                format!(
                    "{ok} 0c000000  0100000000000000  0300000000000000 0400000000000000 01000000 00 \
                     0200000000000000 2f61 07000000000000000000000000000000  \
                     0300000000000000 0200000000000000 0400000000000000"
                ),
            ),
            (Ok(Response::RecordData { record: rec(), inline: true }), format!("{ok} 0d000000  {REC}  01")),
            (
                Ok(Response::DirPagePlus { entries: vec![("f".into(), rec())], done: true }),
                format!("{ok} 0e000000  0100000000000000  0100000000000000 66  {REC}  01"),
            ),
            (
                Ok(Response::Staged(vec![StageOutcome { errno: 0, bytes: 5, replaced: None }])),
                format!("{ok} 0f000000  0100000000000000  00000000  0500000000000000  00"),
            ),
            (
                Ok(Response::Hashes(vec![SpanHashes { errno: 0, hashes: vec![9] }])),
                format!("{ok} 10000000  0100000000000000  00000000  0100000000000000 0900000000000000"),
            ),
            (
                Ok(Response::ReadLog {
                    entries: vec![ReadLogEntry { file_id: 7, chunks: vec![(1, 2)] }],
                    done: true,
                    dropped: 0,
                }),
                format!(
                    "{ok} 11000000  0100000000000000  07000000000000000000000000000000  0100000000000000  \
                     0100000000000000 0200000000000000  01  0000000000000000"
                ),
            ),
            (Ok(Response::Lease { fenced: true }), format!("{ok} 12000000  01")),
            (Ok(Response::Fenced { lease_left_ms: 7 }), format!("{ok} 13000000  0700000000000000")),
            (
                Ok(Response::Files(vec![
                    WholeFile::Found { record: rec(), inline_len: Some(5) },
                    WholeFile::Found { record: rec(), inline_len: None },
                    WholeFile::Failed(2),
                ])),
                // count, then per file its tag (0 Found: record, Option<u32>; 1 Failed: errno).
                format!(
                    "{ok} 14000000  0300000000000000  00000000 {REC} 01 05000000  00000000 {REC} 00  \
                     01000000 02000000"
                ),
            ),
            (Ok(Response::Removed { record: rec(), inline: true }), format!("{ok} 15000000  {REC}  01")),
            (Ok(Response::Queued), format!("{ok} 16000000")),
            (
                Ok(Response::LockHeld(Some(LockInfo { mode: LockMode::Write, start: 1, end: 2, pid: -1 }))),
                // Some, mode (u32: 2 write), start, end, pid.
                format!("{ok} 17000000  01 02000000 0100000000000000 0200000000000000 ffffffff"),
            ),
            (Ok(Response::LockHeld(None)), format!("{ok} 17000000  00")),
            (
                Ok(Response::RemovedBatch(vec![
                    RemoveOutcome::Removed { record: rec(), inline: true },
                    RemoveOutcome::Failed(2),
                ])),
                // count, then per path its tag (0 Removed: record, inline; 1 Failed: errno).
                format!("{ok} 18000000  0200000000000000  00000000 {REC} 01  01000000 02000000"),
            ),
            (
                Ok(Response::Scrubbed {
                    files: 2,
                    bytes: 4096,
                    corrupt: vec![CorruptRange { file_id: 7, offset: 0, len: 4096 }],
                    next: Some(9),
                }),
                // files, bytes, count, (file_id, offset, len), Some(next).
                format!(
                    "{ok} 19000000  0200000000000000 0010000000000000  0100000000000000 \
                     07000000000000000000000000000000 0000000000000000 0010000000000000  \
                     01 09000000000000000000000000000000"
                ),
            ),
            (
                Ok(Response::Tuned { cpus: "1".into(), nice: 10, max_bandwidth: 0 }),
                // cpus (a string), nice, max_bandwidth.
                format!("{ok} 1a000000  0100000000000000 31  0a000000  0000000000000000"),
            ),
            (
                Ok(Response::HeldSizes {
                    sizes: vec![HeldSize { path: "/a".into(), file_id: 7, end: 10, mtime_ns: 5 }],
                }),
                // One size: path, file_id, end, mtime_ns.
                format!(
                    "{ok} 1b000000  0100000000000000  0200000000000000 2f61  \
                     07000000000000000000000000000000  0a00000000000000  0500000000000000"
                ),
            ),
            (
                Ok(Response::Moved(MoveProgress {
                    step: MoveStep::Status,
                    generation: 2,
                    records: 1,
                    chunks: 2,
                    bytes: 3,
                    done: true,
                    error: String::new(),
                })),
                // step, generation, records, chunks, bytes, done, error (a string).
                format!(
                    "{ok} 1c000000  03000000  02000000  0100000000000000  0200000000000000  \
                     0300000000000000  01  0000000000000000"
                ),
            ),
            (Err(2), "01000000 02000000".into()), // Result::Err, ENOENT
        ];
        for (reply, want) in &goldens {
            let want = hex(want);
            assert_eq!(show(&encode(reply)), show(&want), "encoding of {reply:?}");
            assert_eq!(&decode::<Reply>(&want).unwrap(), reply);
        }
    }

    /// Whole frames: header (magic, version, op, request id, lengths), body, bulk.
    /// The same bytes are in docs/PROTOCOL.md.
    #[test]
    fn golden_frames() {
        let mut out = Vec::new();
        crate::write_frame(&mut out, Request::Ping.op(), 1, &encode(&Request::Ping), &[]).unwrap();
        assert_eq!(show(&out), show(&hex("47555354 1600 0100 0100000000000000 04000000 00000000 00000000  01000000")));
        let mut out = Vec::new();
        let reply: Reply = Ok(Response::Ok);
        crate::write_frame(&mut out, Request::Ping.op() | crate::frame::OP_RESPONSE_BIT, 1, &encode(&reply), &[])
            .unwrap();
        assert_eq!(
            show(&out),
            show(&hex("47555354 1600 0180 0100000000000000 08000000 00000000 00000000  00000000 00000000"))
        );
        let req = Request::Write { file_id: 7, spans: vec![Span { offset: 0, len: 2 }], sums: vec![] };
        out.clear();
        crate::write_frame(&mut out, req.op(), 0x0102030405060708, &encode(&req), b"hi").unwrap();
        let want = hex("47555354 1600 0d00 0807060504030201 30000000 02000000 00000000  \
             0d000000 07000000000000000000000000000000 0100000000000000 0000000000000000 02000000 \
             0000000000000000  6869");
        assert_eq!(show(&out), show(&want));
        // A waiting lock, its `Queued` answer, and the daemon's `lock_granted` later.
        let req = sample_lock();
        out.clear();
        crate::write_frame(&mut out, req.op(), 3, &encode(&req), &[]).unwrap();
        let want = hex("47555354 1600 3600 0300000000000000 49000000 00000000 00000000  \
             36000000 07000000000000000000000000000000 0900000000000000 0100000000000000 2a000000 \
             00000000 02000000 0a00000000000000 ffffffffffffffff 01 0500000000000000");
        assert_eq!(show(&out), show(&want));
        out.clear();
        let reply: Reply = Ok(Response::Queued);
        crate::write_frame(&mut out, req.op() | crate::frame::OP_RESPONSE_BIT, 3, &encode(&reply), &[]).unwrap();
        assert_eq!(
            show(&out),
            show(&hex("47555354 1600 3680 0300000000000000 08000000 00000000 00000000  00000000 16000000"))
        );
        out.clear();
        let granted = Request::LockGranted { token: 5, errno: 0 };
        crate::write_frame(&mut out, granted.op(), 1, &encode(&granted), &[]).unwrap();
        let want =
            hex("47555354 1600 3900 0100000000000000 10000000 00000000 00000000  39000000 0500000000000000 00000000");
        assert_eq!(show(&out), show(&want));
    }

    #[test]
    fn request_roundtrip_and_op_check() {
        let r = Request::Stat { path: "/a/b".into() };
        let b = encode(&r);
        assert_eq!(decode_request(r.op(), &b).unwrap(), r);
        assert!(decode_request(2, &b).is_err());
        assert!(matches!(decode_request(999, &b), Err(FrameError::UnknownOp(999))));
        assert!(matches!(decode_request(0, &[]), Err(FrameError::UnknownOp(0))));
        // A body-less op refuses more than its op code; no body at all is refused.
        assert_eq!(decode_request(1, &[1, 0, 0, 0]).unwrap(), Request::Ping);
        assert!(decode_request(1, &[1, 0, 0, 0, 0]).is_err());
        assert!(decode_request(1, &[]).is_err());
    }

    #[test]
    fn garbage_bodies_never_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let len = rng.gen_range(0..64);
            let body: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let op = rng.gen_range(0..=OP_MAX + 1);
            let _ = decode_request(op, &body);
        }
        // Mutations of valid encodings of every request: flips, cuts, extensions.
        for (s, _) in &request_goldens() {
            let enc = encode(s);
            assert_eq!(&decode_request(s.op(), &enc).unwrap(), s);
            for _ in 0..2_000 {
                let mut m = enc.clone();
                match rng.gen_range(0..3) {
                    0 if !m.is_empty() => {
                        let i = rng.gen_range(0..m.len());
                        m[i] ^= 1 << rng.gen_range(0..8);
                    }
                    1 if !m.is_empty() => m.truncate(rng.gen_range(0..m.len())),
                    _ => m.extend((0..rng.gen_range(1..16)).map(|_| rng.gen::<u8>())),
                }
                let _ = decode_request(s.op(), &m);
                let _ = decode::<Reply>(&m);
            }
        }
        // A declared string length far past the body must fail, not allocate.
        let mut evil = encode(&Request::Stat { path: "x".into() });
        evil[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_request(3, &evil).is_err());
    }
}
