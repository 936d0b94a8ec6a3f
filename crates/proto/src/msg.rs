//! Messages carried in frame bodies, encoded with bincode (fixed-width integers,
//! little endian, with a size limit equal to the frame's bounded body length).

use crate::frame::FrameError;
use serde::{Deserialize, Serialize};

/// What a metadata record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[repr(u8)]
pub enum FileKind {
    File = 1,
    Dir = 2,
    Symlink = 3,
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
}

/// One byte range of one file on one daemon. Offsets are file offsets, which are
/// also offsets in the daemon's sparse local file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub offset: u64,
    pub len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoveKind {
    /// unlink: anything but a directory (EISDIR).
    NotDir,
    /// rmdir: only a directory (ENOTDIR). The caller checked emptiness.
    Dir,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    Ping,
    /// Create a record. With `exclusive`, EEXIST if present; without, return the
    /// existing record (open with O_CREAT on an existing file costs one RPC).
    Create {
        path: String,
        record: Record,
        exclusive: bool,
    },
    Stat {
        path: String,
    },
    Remove {
        path: String,
        kind: RemoveKind,
    },
    /// Grow the size to at least `end` (a merge, never a read-modify-write).
    /// With `append_len`, atomically reserve `append_len` bytes at the current end
    /// and return the reserved offset (O_APPEND). ENOENT if the path is gone,
    /// ESTALE if it now names another file than `file_id`, so a write through a
    /// stale descriptor fails instead of growing the wrong file.
    UpdateSize {
        path: String,
        file_id: u128,
        end: u64,
        append_len: Option<u64>,
        mtime_ns: i64,
    },
    /// Set the size exactly; returns the record as it was before.
    Truncate {
        path: String,
        size: u64,
        mtime_ns: i64,
    },
    SetAttr {
        path: String,
        mode: Option<u32>,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
        ctime_ns: i64,
    },
    /// Put a full record (rename). `replace`: overwrite a non-directory or an empty
    /// directory target of a compatible kind; returns the replaced record.
    PutRecord {
        path: String,
        record: Record,
        replace: bool,
    },
    /// One page of the direct children of `dir` held by this daemon, names > `after`.
    ReadDir {
        dir: String,
        after: Option<String>,
        max_entries: u32,
    },
    /// Whether this daemon holds any direct child of `dir` (rmdir's emptiness check).
    HasChildren {
        dir: String,
    },
    /// One page of all descendant records of `dir` held by this daemon, keys > `after`.
    ScanTree {
        dir: String,
        after: Option<Vec<u8>>,
        max_entries: u32,
    },
    /// Put records that must not exist yet, all or none (directory rename's first
    /// phase). EEXIST if any is present.
    PutRecords {
        records: Vec<(String, Record)>,
    },
    /// Remove these records if present (directory rename's second phase).
    RemoveRecords {
        paths: Vec<String>,
    },
    /// Write the bulk section: spans in order, their bytes concatenated.
    Write {
        file_id: u128,
        spans: Vec<Span>,
    },
    /// Read spans; the response bulk holds their bytes concatenated (holes as zeros).
    Read {
        file_id: u128,
        spans: Vec<Span>,
    },
    /// Cut this daemon's local file of `file_id` to `size` bytes if longer.
    TruncateChunks {
        file_id: u128,
        size: u64,
    },
    RemoveChunks {
        file_id: u128,
    },
    /// Make chunks of `file_id` (if given) and the metadata log durable.
    Fsync {
        file_id: Option<u128>,
    },
    StatFs,
    Stats,
    /// Stop this daemon (`gust stop`, whatever launched it). Unless `keep`, it
    /// removes its root directory after stopping. Answered before it stops.
    Shutdown {
        keep: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStats {
    pub daemon_id: u32,
    pub uptime_ms: u64,
    /// Requests served, indexed by op code.
    pub ops: Vec<(String, u64)>,
    pub connections_open: u64,
    pub frames_refused: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    Record(Record),
    MaybeRecord(Option<Record>),
    Offset(u64),
    DirPage {
        entries: Vec<DirEntry>,
        done: bool,
    },
    Bool(bool),
    Tree {
        records: Vec<(String, Record)>,
        last_key: Option<Vec<u8>>,
        done: bool,
    },
    Written(u64),
    /// Data follows in the bulk section: for each requested span, `span_lens[i]`
    /// bytes (fewer than asked where the daemon's local file ends; the client fills
    /// the rest with zeros, so holes and short chunks never cross the wire).
    Data {
        span_lens: Vec<u32>,
    },
    StatFs {
        total_bytes: u64,
        free_bytes: u64,
        avail_bytes: u64,
        files: u64,
    },
    Stats(DaemonStats),
}

/// A reply: a response or an errno value (Linux numbering).
pub type Reply = Result<Response, i32>;

impl Request {
    /// Op code carried in the frame header; the daemon refuses unknown codes before
    /// decoding the body and counts requests per op.
    pub fn op(&self) -> u16 {
        match self {
            Request::Ping => 1,
            Request::Create { .. } => 2,
            Request::Stat { .. } => 3,
            Request::Remove { .. } => 4,
            Request::UpdateSize { .. } => 5,
            Request::Truncate { .. } => 6,
            Request::SetAttr { .. } => 7,
            Request::PutRecord { .. } => 8,
            Request::ReadDir { .. } => 9,
            Request::HasChildren { .. } => 10,
            Request::ScanTree { .. } => 11,
            Request::RemoveRecords { .. } => 12,
            Request::Write { .. } => 13,
            Request::Read { .. } => 14,
            Request::TruncateChunks { .. } => 15,
            Request::RemoveChunks { .. } => 16,
            Request::Fsync { .. } => 17,
            Request::StatFs => 18,
            Request::Stats => 19,
            Request::PutRecords { .. } => 20,
            Request::Shutdown { .. } => 21,
        }
    }
}

/// Highest op code; codes are 1..=OP_MAX.
pub const OP_MAX: u16 = 21;

pub fn op_name(op: u16) -> &'static str {
    const NAMES: [&str; OP_MAX as usize + 1] = [
        "?",
        "ping",
        "create",
        "stat",
        "remove",
        "update_size",
        "truncate",
        "set_attr",
        "put_record",
        "readdir",
        "has_children",
        "scan_tree",
        "remove_records",
        "write",
        "read",
        "truncate_chunks",
        "remove_chunks",
        "fsync",
        "statfs",
        "stats",
        "put_records",
        "shutdown",
    ];
    NAMES.get(op as usize).copied().unwrap_or("?")
}

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

/// Decodes a request body and checks it against the header's op code.
pub fn decode_request(op: u16, body: &[u8]) -> Result<Request, FrameError> {
    if op == 0 || op > OP_MAX {
        return Err(FrameError::UnknownOp(op));
    }
    let req: Request = decode(body)?;
    if req.op() != op {
        return Err(FrameError::Decode(format!("body is op {} but header says {}", req.op(), op)));
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_roundtrip_and_op_check() {
        let r = Request::Stat { path: "/a/b".into() };
        let b = encode(&r);
        assert_eq!(decode_request(r.op(), &b).unwrap(), r);
        assert!(decode_request(2, &b).is_err());
        assert!(matches!(decode_request(999, &b), Err(FrameError::UnknownOp(999))));
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
        let rec = Record {
            kind: FileKind::File,
            mode: 0o644,
            size: 1,
            file_id: 9,
            nlink: 1,
            ctime_ns: 1,
            mtime_ns: 2,
            atime_ns: 3,
            target: "t".into(),
        };
        let samples = vec![
            Request::Ping,
            Request::Create { path: "/a/b".into(), record: rec.clone(), exclusive: true },
            Request::UpdateSize { path: "/a".into(), file_id: 3, end: 10, append_len: Some(4), mtime_ns: 5 },
            Request::ReadDir { dir: "/".into(), after: Some("x".into()), max_entries: 10 },
            Request::ScanTree { dir: "/d".into(), after: Some(vec![1, 2]), max_entries: 5 },
            Request::PutRecords { records: vec![("/x".into(), rec.clone())] },
            Request::Write { file_id: 1, spans: vec![Span { offset: 0, len: 4 }] },
            Request::SetAttr { path: "/a".into(), mode: Some(1), atime_ns: None, mtime_ns: Some(2), ctime_ns: 3 },
        ];
        for s in &samples {
            let enc = encode(s);
            assert_eq!(&decode_request(s.op(), &enc).unwrap(), s);
            for _ in 0..2_000 {
                let mut m = enc.clone();
                match rng.gen_range(0..3) {
                    0 => {
                        let i = rng.gen_range(0..m.len());
                        m[i] ^= 1 << rng.gen_range(0..8);
                    }
                    1 => m.truncate(rng.gen_range(0..m.len())),
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
