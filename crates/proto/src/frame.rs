//! Frame layout (all integers little endian):
//!
//! ```text
//! offset size field
//!      0    4 magic      "GUST"
//!      4    2 version    PROTOCOL_VERSION
//!      6    2 op         request op code; responses set bit 15
//!      8    8 request_id chosen by the client, echoed by the daemon
//!     16    4 body_len   <= BODY_BYTES_MAX, bincode-encoded message
//!     20    4 bulk_len   <= BULK_BYTES_MAX, raw file data
//!     24    4 generation the layout the client routed by (0: none, see below)
//!     28      body, then bulk
//! ```

use crate::{BODY_BYTES_MAX, BULK_BYTES_MAX, FRAME_MAGIC, PROTOCOL_VERSION};
use std::fmt;
use std::io::{self, Read, Write};

pub const HEADER_BYTES: usize = 28;
/// Bit set in `op` of every response frame.
pub const OP_RESPONSE_BIT: u16 = 0x8000;
/// Set in a response's `op` when the daemon granted the caller the right to cache
/// the record (and inline data) this reply carries, until it recalls it (only on
/// connections that said `hello`; docs/DESIGN.md, "Grants").
pub const REPLY_GRANTED: u16 = 0x4000;
/// Set in a response's `op` when the daemon holds the caller's `callback`
/// connection: the caller's grants from this daemon run on for one lease from the
/// time the request was sent.
pub const REPLY_LEASED: u16 = 0x2000;
/// Set in the reply to a listing's first page (`readdir`, `readdir_plus` without
/// `after`) when the daemon granted the caller the directory's names it holds,
/// until it recalls the directory's [`crate::path::listing_key`] (a name created
/// or removed there by another client).
pub const REPLY_LISTED: u16 = 0x1000;
/// Set in the reply to a create when the daemon granted the caller a *claim* on
/// the new file's directory: the right, alone, to make names there among those
/// this daemon holds, until it recalls the directory's [`crate::path::claim_key`]
/// (docs/DESIGN.md, "Claims"). Only for clients whose `callback` said they take
/// claims.
pub const REPLY_CLAIMED: u16 = 0x0800;
/// The flag bits a response's `op` may carry besides `OP_RESPONSE_BIT`; request op
/// codes stay below them.
pub const REPLY_FLAGS: u16 = REPLY_GRANTED | REPLY_LEASED | REPLY_LISTED | REPLY_CLAIMED;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub op: u16,
    pub request_id: u64,
    pub body_len: u32,
    pub bulk_len: u32,
    /// The generation of the hosts file's layout a client routed this request by
    /// (docs/DESIGN.md, "Growing and shrinking"): a daemon that moved to a newer
    /// layout answers `errno::MOVED` instead of serving it. 0 in replies and in
    /// requests that do not depend on placement (between daemons, tools).
    pub generation: u32,
}

impl Header {
    /// The header of a frame of this build's protocol version: op (with
    /// `OP_RESPONSE_BIT` for a reply), request id, and the body and bulk lengths.
    pub fn new(op: u16, request_id: u64, body_len: usize, bulk_len: usize) -> Header {
        Header {
            version: PROTOCOL_VERSION,
            op,
            request_id,
            body_len: body_len as u32,
            bulk_len: bulk_len as u32,
            generation: 0,
        }
    }

    /// The header of the reply to request `request_id` of op `op`.
    pub fn reply(op: u16, request_id: u64, body_len: usize, bulk_len: usize) -> Header {
        Header::new(op | OP_RESPONSE_BIT, request_id, body_len, bulk_len)
    }

    /// This header, saying the request was routed by layout `generation`.
    pub fn with_generation(mut self, generation: u32) -> Header {
        self.generation = generation;
        self
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        b[6..8].copy_from_slice(&self.op.to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.body_len.to_le_bytes());
        b[20..24].copy_from_slice(&self.bulk_len.to_le_bytes());
        b[24..28].copy_from_slice(&self.generation.to_le_bytes());
        b
    }

    /// Decodes and bounds-checks a header. Nothing is allocated from its lengths
    /// before this check passes.
    pub fn decode(b: &[u8; HEADER_BYTES]) -> Result<Header, FrameError> {
        let magic = u32::from_le_bytes(b[0..4].try_into().unwrap());
        if magic != FRAME_MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let h = Header {
            version: u16::from_le_bytes(b[4..6].try_into().unwrap()),
            op: u16::from_le_bytes(b[6..8].try_into().unwrap()),
            request_id: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            body_len: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            bulk_len: u32::from_le_bytes(b[20..24].try_into().unwrap()),
            generation: u32::from_le_bytes(b[24..28].try_into().unwrap()),
        };
        if h.version != PROTOCOL_VERSION {
            return Err(FrameError::BadVersion(h.version));
        }
        if h.body_len > BODY_BYTES_MAX {
            return Err(FrameError::TooLarge { what: "body", len: h.body_len as u64, max: BODY_BYTES_MAX as u64 });
        }
        if h.bulk_len > BULK_BYTES_MAX {
            return Err(FrameError::TooLarge { what: "bulk", len: h.bulk_len as u64, max: BULK_BYTES_MAX as u64 });
        }
        Ok(h)
    }
}

/// One decoded frame. `bulk` is read into a caller-provided buffer to reuse memory.
#[derive(Debug)]
pub struct Frame {
    pub header: Header,
    pub body: Vec<u8>,
}

#[derive(Debug)]
pub enum FrameError {
    Io(io::Error),
    /// The peer closed the connection cleanly between frames.
    Closed,
    BadMagic(u32),
    BadVersion(u16),
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
    },
    UnknownOp(u16),
    Decode(String),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "i/o error: {e}"),
            FrameError::Closed => write!(f, "connection closed by peer"),
            FrameError::BadMagic(m) => write!(f, "bad frame magic {m:#010x} (not a GustFS peer?)"),
            FrameError::BadVersion(v) => {
                write!(f, "protocol version {v} not supported (this side speaks {PROTOCOL_VERSION})")
            }
            FrameError::TooLarge { what, len, max } => {
                write!(f, "frame {what} of {len} bytes exceeds the limit of {max}")
            }
            FrameError::UnknownOp(op) => write!(f, "unknown op code {op}"),
            FrameError::Decode(e) => write!(f, "malformed message body: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Io(e)
    }
}

/// Reads one frame: header, body into `Frame::body`, bulk into `bulk` (resized).
pub fn read_frame<R: Read>(r: &mut R, bulk: &mut Vec<u8>) -> Result<Frame, FrameError> {
    let mut hb = [0u8; HEADER_BYTES];
    // Distinguish a clean close between frames from a truncated header.
    let mut got = 0;
    while got < HEADER_BYTES {
        match r.read(&mut hb[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => {
                return Err(FrameError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "truncated frame header")))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let header = Header::decode(&hb)?;
    let mut body = vec![0u8; header.body_len as usize];
    r.read_exact(&mut body)?;
    bulk.clear();
    bulk.resize(header.bulk_len as usize, 0);
    r.read_exact(bulk)?;
    Ok(Frame { header, body })
}

/// Writes one frame. Header and body go out in one write; bulk follows.
pub fn write_frame<W: Write>(w: &mut W, op: u16, request_id: u64, body: &[u8], bulk: &[u8]) -> io::Result<()> {
    assert!(body.len() <= BODY_BYTES_MAX as usize, "body exceeds BODY_BYTES_MAX");
    assert!(bulk.len() <= BULK_BYTES_MAX as usize, "bulk exceeds BULK_BYTES_MAX");
    let h = Header::new(op, request_id, body.len(), bulk.len());
    let mut buf = Vec::with_capacity(HEADER_BYTES + body.len() + if bulk.len() <= 64 * 1024 { bulk.len() } else { 0 });
    buf.extend_from_slice(&h.encode());
    buf.extend_from_slice(body);
    if bulk.len() <= 64 * 1024 {
        // Small payloads: one syscall for the whole frame.
        buf.extend_from_slice(bulk);
        w.write_all(&buf)?;
    } else {
        w.write_all(&buf)?;
        w.write_all(bulk)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut out = Vec::new();
        write_frame(&mut out, 7, 42, b"body", b"bulkbytes").unwrap();
        let mut bulk = Vec::new();
        let f = read_frame(&mut &out[..], &mut bulk).unwrap();
        assert_eq!(f.header.op, 7);
        assert_eq!(f.header.request_id, 42);
        assert_eq!(f.body, b"body");
        assert_eq!(bulk, b"bulkbytes");
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocation() {
        let h =
            Header { version: PROTOCOL_VERSION, op: 1, request_id: 1, body_len: u32::MAX, bulk_len: 0, generation: 0 };
        let enc = h.encode();
        assert!(matches!(Header::decode(&enc), Err(FrameError::TooLarge { what: "body", .. })));
        let h = Header { bulk_len: u32::MAX, body_len: 0, ..h };
        assert!(matches!(Header::decode(&h.encode()), Err(FrameError::TooLarge { what: "bulk", .. })));
    }

    #[test]
    fn bad_magic_and_version() {
        let mut enc =
            Header { version: PROTOCOL_VERSION, op: 1, request_id: 1, body_len: 0, bulk_len: 0, generation: 0 }
                .encode();
        enc[0] = b'X';
        assert!(matches!(Header::decode(&enc), Err(FrameError::BadMagic(_))));
        let enc = Header { version: 99, op: 1, request_id: 1, body_len: 0, bulk_len: 0, generation: 0 }.encode();
        assert!(matches!(Header::decode(&enc), Err(FrameError::BadVersion(99))));
    }

    #[test]
    fn truncated_frames() {
        let mut out = Vec::new();
        write_frame(&mut out, 7, 42, b"body", b"bulk").unwrap();
        let mut bulk = Vec::new();
        for cut in 1..out.len() {
            let r = read_frame(&mut &out[..cut], &mut bulk);
            assert!(matches!(r, Err(FrameError::Io(_))), "cut at {cut}");
        }
        assert!(matches!(read_frame(&mut &out[..0], &mut bulk), Err(FrameError::Closed)));
    }
}
