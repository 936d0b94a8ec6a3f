//! The GustFS wire protocol: frame layout, messages and the connection handshake.
//!
//! This crate knows bytes, not policy: it encodes and decodes frames, bounds every
//! length before allocating, and performs the mutual HMAC-SHA256 challenge. It does
//! not know what a daemon does with a request or how a client picks a daemon.
//! The format is written down byte by byte in docs/PROTOCOL.md; keep the two in step.

pub mod errno;
pub mod find;
pub mod frame;
pub mod handshake;
pub mod lock;
pub mod msg;
pub mod path;
pub mod short_circuit;
pub mod stage;
pub mod sums;
pub mod xattr;

pub use find::{Cmp, FindQuery, FIND_PATTERN_BYTES_MAX};
pub use frame::{read_frame, write_frame, Frame, FrameError, Header};
pub use lock::*;
pub use msg::*;
pub use stage::*;

/// Now, as the times of records carry it: nanoseconds since the Unix epoch by the
/// wall clock (0 before 1970, where a clock is that wrong).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Protocol version carried in every frame header and in the handshake. Bump it on
/// any change of the encoding and record the change in docs/PROTOCOL.md ("Version
/// history"); the golden-bytes tests in `msg` fail until then.
pub const PROTOCOL_VERSION: u16 = 22;
/// Magic at the start of every frame header: "GUST" little endian.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"GUST");
/// Largest serialized message body. Paths are at most 4 KiB and readdir pages are
/// bounded by `READDIR_PAGE_BYTES_MAX`, so 1 MiB leaves ample room.
pub const BODY_BYTES_MAX: u32 = 1 << 20;
/// Largest bulk (file data) section in one frame. Clients split larger transfers.
pub const BULK_BYTES_MAX: u32 = 32 << 20;
/// Largest path inside the file system. Twice Linux's PATH_MAX: the kernel bounds
/// each path a program hands over, not the depth of a tree (a FUSE mount sees one
/// name at a time; the preload library joins a relative path to its working
/// directory), so a path of PATH_MAX below the mount point's own directories must
/// still fit (docs/SEMANTICS.md, "Long paths").
pub const PATH_BYTES_MAX: usize = 8192;
/// Largest path a program hands over in one argument, NUL included (PATH_MAX on
/// Linux): the bound on a symlink's target.
pub const PATH_ARG_BYTES_MAX: usize = 4096;
/// Largest single path component (NAME_MAX on Linux).
pub const NAME_BYTES_MAX: usize = 255;
/// Bound on the spans in one read or write request.
pub const SPANS_PER_REQUEST_MAX: usize = 4096;

/// A daemon's chunk store keeps a checksum per block of this many bytes of each
/// local file, and verifies it on every read (gust-store, sums.rs). A read that
/// meets a block whose bytes no longer match is answered `EUCLEAN` (the kernel's
/// EFSCORRUPTED); a client repairing it from a copy rewrites whole blocks.
pub const SUM_BLOCK_BYTES: usize = 4096;
/// Largest file whose data a metadata daemon keeps beside its record ("inline"):
/// such a file is created with its data in one request and opened with it in one.
/// A file that grows past it moves to chunks. Why this size: docs/DESIGN.md, "Small
/// files inline" (a value costs RocksDB a memtable copy and a WAL append; reading a
/// file of up to this size in one round trip instead of two is what a data loader's
/// image-sized samples, ~100 KiB, need; docs/PERFORMANCE.md measures 16 against 256).
pub const INLINE_BYTES_MAX: usize = 256 << 10;
/// Most entries in one `create_inline_batch` request. With paths of at most
/// `PATH_BYTES_MAX` the body stays under `BODY_BYTES_MAX`.
pub const CREATE_BATCH_ENTRIES_MAX: usize = 120;
const _: () = assert!(CREATE_BATCH_ENTRIES_MAX * (PATH_BYTES_MAX + 256) <= BODY_BYTES_MAX as usize);
/// Most paths in one `remove_batch` request. The request body (paths of at most
/// `PATH_BYTES_MAX`) and the reply body (records with symlink targets of at most
/// that) stay under `BODY_BYTES_MAX`.
pub const REMOVE_BATCH_ENTRIES_MAX: usize = 120;
const _: () =
    assert!(REMOVE_BATCH_ENTRIES_MAX * (PATH_BYTES_MAX + RECORD_OVERHEAD_BYTES + 16) <= BODY_BYTES_MAX as usize);
/// Most paths in one `read_many` request. The request body (paths of at most
/// `PATH_BYTES_MAX`), the reply body (records with symlink targets of at most that)
/// and the reply's bulk (inline data of at most `INLINE_BYTES_MAX` each) stay under
/// their frame bounds.
pub const READ_MANY_ENTRIES_MAX: usize = 64;
const _: () = assert!(READ_MANY_ENTRIES_MAX * (PATH_BYTES_MAX + RECORD_OVERHEAD_BYTES + 16) <= BODY_BYTES_MAX as usize);
const _: () = assert!(READ_MANY_ENTRIES_MAX * INLINE_BYTES_MAX <= BULK_BYTES_MAX as usize);

// ----- pages --------------------------------------------------------------------------
//
// Listings and directory renames move many names; they travel in pages, each bounded
// by a count and by bytes, so that a page of the longest names still fits one frame
// body (asserted below) and a page of short names is not a frame per name. The byte
// counts are what a daemon adds up per entry while filling a page and what a client
// adds up while cutting a batch: the name or path (and target) plus a fixed overhead
// at least as large as its encoding's (pinned by a test in msg.rs). A page stops at
// the first entry at or past its byte bound, so it may hold one entry more.

/// The file id of a record that stands for a file of the shared file system in
/// cache mode, not fetched yet (never stored; a view's placeholders are told by
/// their target instead, `Record::unfetched_object`). Never a real id: real ids
/// are random and this one is reserved.
pub const UNFETCHED_FILE_ID: u128 = u128::MAX;

/// Bound on the entries of one readdir page.
pub const READDIR_PAGE_ENTRIES_MAX: u32 = 4096;
/// Bound on the counted bytes of one readdir page (names + `DIR_ENTRY_OVERHEAD_BYTES` each).
pub const READDIR_PAGE_BYTES_MAX: usize = 512 * 1024;
/// Bytes counted per readdir entry besides its name: its encoding adds 12 (name
/// length u64, kind u32).
pub const DIR_ENTRY_OVERHEAD_BYTES: usize = 16;
/// Bound on the records of one scan_tree page, and on the records or paths of one
/// PutRecords or RemoveRecords request (the pages of a directory rename).
pub const SCAN_PAGE_ENTRIES_MAX: u32 = 4096;
/// Bound on the keys one find request examines before it answers (a page of matches
/// or not): about 10 ms of scanning, so a selective query never holds a worker long.
pub const FIND_SCAN_PAGE_KEYS_MAX: u32 = 65536;
/// Bound on the counted bytes of one scan_tree page or record batch (path +
/// `Record::payload_bytes` (its target or its attributes) + `RECORD_OVERHEAD_BYTES`
/// each).
pub const SCAN_PAGE_BYTES_MAX: usize = 512 * 1024;
/// Bytes counted per (path, record) besides the path and its payload (target or
/// attributes): its encoding adds 92 (two string lengths, kind, mode, size, file
/// id, nlink, three times, uid, gid, the attributes' count).
pub const RECORD_OVERHEAD_BYTES: usize = 96;
/// Encoded bytes of a reply around its page: Result and Response tags, the vector
/// length, `done`, and for a scan page its last key (at most a path and a separator).
const PAGE_ENVELOPE_BYTES_MAX: usize = 64 + PATH_BYTES_MAX + 1;

// A page at its byte bound plus the one entry that crosses it, of the longest name or
// path and target, fits a frame body. (The count bound alone would not do: 4096
// names of 255 bytes encode to 1.04 MiB, 4096 records of long paths to 32 MiB.)
const _: () = assert!(
    READDIR_PAGE_BYTES_MAX + NAME_BYTES_MAX + DIR_ENTRY_OVERHEAD_BYTES + PAGE_ENVELOPE_BYTES_MAX
        <= BODY_BYTES_MAX as usize
);
const _: () = assert!(
    SCAN_PAGE_BYTES_MAX + 2 * PATH_BYTES_MAX + RECORD_OVERHEAD_BYTES + PAGE_ENVELOPE_BYTES_MAX
        <= BODY_BYTES_MAX as usize
);
const _: () = assert!(DIR_ENTRY_OVERHEAD_BYTES >= 12 && RECORD_OVERHEAD_BYTES >= 92);
// A path holds at least one name.
const _: () = assert!(NAME_BYTES_MAX < PATH_BYTES_MAX);

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed overheads the page bounds count are at least what the encoding adds
    /// to a name, or to a path and a target (the other half of the asserts above).
    #[test]
    fn page_overheads_cover_the_encoding() {
        let e = DirEntry { name: "n".repeat(NAME_BYTES_MAX), kind: FileKind::Dir };
        assert!(encode(&e).len() <= e.name.len() + DIR_ENTRY_OVERHEAD_BYTES);
        let r = Record {
            kind: FileKind::Symlink,
            mode: 0o777,
            size: u64::MAX,
            file_id: u128::MAX,
            nlink: u32::MAX,
            ctime_ns: i64::MIN,
            mtime_ns: i64::MIN,
            atime_ns: i64::MIN,
            target: "t".repeat(PATH_BYTES_MAX),
            uid: u32::MAX,
            gid: u32::MAX,
            xattrs: Vec::new(),
        };
        let p = "/".repeat(PATH_BYTES_MAX);
        assert!(encode(&(p.clone(), r.clone())).len() <= p.len() + r.payload_bytes() + RECORD_OVERHEAD_BYTES);
        // A file with attributes at their bound, of the shortest names (the most
        // entries): the payload counts their encoding.
        let mut x = Vec::new();
        loop {
            let name = format!("user.{:03}", x.len());
            if xattr::bytes(&x) + xattr::XATTR_ENTRY_OVERHEAD_BYTES + name.len() > xattr::XATTRS_BYTES_MAX {
                break;
            }
            x.push((name, Vec::new()));
        }
        let f = Record { kind: FileKind::File, target: String::new(), xattrs: x, ..r.clone() };
        assert_eq!(f.check(), Ok(()));
        assert!(encode(&(p.clone(), f.clone())).len() <= p.len() + f.payload_bytes() + RECORD_OVERHEAD_BYTES);
        assert!(f.payload_bytes() <= PATH_BYTES_MAX && r.payload_bytes() <= PATH_BYTES_MAX);
        // A whole page at the bound, and the envelope around it.
        let n = SCAN_PAGE_BYTES_MAX / (2 * PATH_BYTES_MAX + RECORD_OVERHEAD_BYTES) + 1;
        let page: Reply = Ok(Response::Tree {
            records: vec![(p.clone(), r); n],
            last_key: Some(vec![0xFF; PATH_BYTES_MAX + 1]),
            done: false,
        });
        assert!(encode(&page).len() <= BODY_BYTES_MAX as usize);
    }
}
