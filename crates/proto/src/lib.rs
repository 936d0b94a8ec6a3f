//! The GustFS wire protocol: frame layout, messages and the connection handshake.
//!
//! This crate knows bytes, not policy: it encodes and decodes frames, bounds every
//! length before allocating, and performs the mutual HMAC-SHA256 challenge. It does
//! not know what a daemon does with a request or how a client picks a daemon.
//! The format is written down byte by byte in docs/PROTOCOL.md; keep the two in step.

pub mod frame;
pub mod handshake;
pub mod msg;

pub use frame::{read_frame, write_frame, Frame, FrameError, Header};
pub use msg::*;

/// Protocol version carried in every frame header and in the handshake. Bump it on
/// any change of the encoding and record the change in docs/PROTOCOL.md ("Version
/// history"); the golden-bytes tests in `msg` fail until then.
pub const PROTOCOL_VERSION: u16 = 2;
/// Magic at the start of every frame header: "GUST" little endian.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"GUST");
/// Largest serialized message body. Paths are at most 4 KiB and readdir pages are
/// bounded by `READDIR_PAGE_BYTES_MAX`, so 1 MiB leaves ample room.
pub const BODY_BYTES_MAX: u32 = 1 << 20;
/// Largest bulk (file data) section in one frame. Clients split larger transfers.
pub const BULK_BYTES_MAX: u32 = 32 << 20;
/// Largest path accepted anywhere (PATH_MAX on Linux).
pub const PATH_BYTES_MAX: usize = 4096;
/// Largest single path component (NAME_MAX on Linux).
pub const NAME_BYTES_MAX: usize = 255;
/// Bounds on a readdir page: entries and approximate encoded bytes.
pub const READDIR_PAGE_ENTRIES_MAX: u32 = 4096;
pub const READDIR_PAGE_BYTES_MAX: usize = 512 * 1024;
/// Bound on the spans in one read or write request.
pub const SPANS_PER_REQUEST_MAX: usize = 4096;
