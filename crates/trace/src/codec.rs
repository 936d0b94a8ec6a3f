//! The trace file format, byte by byte (docs/DESIGN.md, "Trace files", says the
//! same in prose).
//!
//! ```text
//! file    = header block*
//! header  = "GUSTTRCE" version:u16 header_len:u32 header_body     (little-endian)
//! header_body = pid:u32 base_ns:u64 role_len:u16 role tp_count:u16
//!               (tp_id:u16 name_len:u8 name)*
//! block   = "TBLK" tid:u32 count:u32 payload_len:u32 crc:u32 payload
//!           (crc: CRC-32 of tid, count, payload_len and payload)
//! payload = record*      (exactly `count` of them, exactly `payload_len` bytes)
//! record  = tp:v dt_ns:v dur_ns:v daemon+1:v result:zz arg:v offset:v size:v
//!           file_id:v path_len:v path
//! ```
//!
//! `v` is an unsigned LEB128 varint (u128 for file_id), `zz` a zigzag varint.
//! `dt_ns` is the record's start, wall clock, in nanoseconds after `base_ns` (the
//! file's opening, ns since the Unix epoch), so records of several processes on one
//! node line up; `dur_ns` comes from the monotonic clock. `daemon+1` is 0 when no
//! daemon is involved. A record is 12-40 bytes plus its path.
//!
//! Every length is bounded before anything is allocated (`BLOCK_PAYLOAD_BYTES_MAX`,
//! `PATH_BYTES_MAX`, the header's), and every block carries a CRC-32, so a corrupt
//! or truncated file is reported as such, with its byte offset, never a panic.

use std::fmt;

pub const MAGIC: &[u8; 8] = b"GUSTTRCE";
pub const VERSION: u16 = 1;
pub const BLOCK_MAGIC: &[u8; 4] = b"TBLK";
/// Bytes of a block's fixed part (magic, tid, count, payload length, crc).
pub const BLOCK_HEAD_BYTES: usize = 20;
/// A writer flushes a thread's buffer once it holds this much.
pub const BLOCK_FLUSH_BYTES: usize = 64 * 1024;
/// Largest payload a reader accepts (a flush threshold plus one largest record).
pub const BLOCK_PAYLOAD_BYTES_MAX: usize = 1 << 20;
/// Longest path recorded (longer ones are cut: a trace is not a backup).
pub const PATH_BYTES_MAX: usize = 4096;
/// Largest header a reader accepts.
pub const HEADER_BYTES_MAX: usize = 64 * 1024;

/// One traced call, as a writer is given it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub tp: u16,
    /// Start, ns since the Unix epoch (wall clock).
    pub ts_ns: u64,
    pub dur_ns: u64,
    /// The daemon that served it (client: the daemon of the record or first chunk).
    pub daemon: Option<u32>,
    /// 0, or a negative errno.
    pub result: i32,
    /// Tracepoint-specific: open flags; a daemon's request op code.
    pub arg: u64,
    pub offset: u64,
    /// Bytes transferred (read, write) or asked for (truncate).
    pub size: u64,
    /// 0 when not known.
    pub file_id: u128,
    pub path: String,
}

/// The header of a trace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub pid: u32,
    pub base_ns: u64,
    /// `client` or `daemon N`.
    pub role: String,
    /// (id, name) of every tracepoint the writer knew.
    pub tracepoints: Vec<(u16, String)>,
}

/// Why a trace file could not be read: what, and at which byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.what)
    }
}

fn err<T>(offset: usize, what: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError { offset, what: what.into() })
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u128) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn zigzag(v: i32) -> u128 {
    ((v << 1) ^ (v >> 31)) as u32 as u128
}

fn unzigzag(v: u32) -> i32 {
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

/// Appends one record to a block payload; `base_ns` is the file's.
pub fn encode_record(out: &mut Vec<u8>, r: &Record, base_ns: u64) {
    put_varint(out, r.tp as u128);
    put_varint(out, r.ts_ns.saturating_sub(base_ns) as u128);
    put_varint(out, r.dur_ns as u128);
    put_varint(out, r.daemon.map_or(0, |d| d as u128 + 1));
    put_varint(out, zigzag(r.result));
    put_varint(out, r.arg as u128);
    put_varint(out, r.offset as u128);
    put_varint(out, r.size as u128);
    put_varint(out, r.file_id);
    let mut cut = r.path.len().min(PATH_BYTES_MAX);
    while !r.path.is_char_boundary(cut) {
        cut -= 1;
    }
    put_varint(out, cut as u128);
    out.extend_from_slice(&r.path.as_bytes()[..cut]);
}

pub fn encode_header(h: &Header) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&h.pid.to_le_bytes());
    body.extend_from_slice(&h.base_ns.to_le_bytes());
    let role = &h.role.as_bytes()[..h.role.len().min(u16::MAX as usize)];
    body.extend_from_slice(&(role.len() as u16).to_le_bytes());
    body.extend_from_slice(role);
    body.extend_from_slice(&(h.tracepoints.len() as u16).to_le_bytes());
    for (id, name) in &h.tracepoints {
        body.extend_from_slice(&id.to_le_bytes());
        let n = &name.as_bytes()[..name.len().min(255)];
        body.push(n.len() as u8);
        body.extend_from_slice(n);
    }
    let mut out = Vec::with_capacity(14 + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The CRC-32 of a block: its tid, count and length fields, then its payload.
fn block_crc(fields: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(fields);
    h.update(payload);
    h.finalize()
}

/// A block around `payload` (records of thread `tid`).
pub fn encode_block(tid: u32, count: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(BLOCK_HEAD_BYTES + payload.len());
    out.extend_from_slice(BLOCK_MAGIC);
    out.extend_from_slice(&tid.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let crc = block_crc(&out[4..16], payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A cursor over bytes that reports where it ran short.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the file, for messages.
    base: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() - self.pos < n {
            return err(self.base + self.pos, format!("truncated: the data ends inside {what}"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u16(&mut self, what: &str) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    fn u32(&mut self, what: &str) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn varint(&mut self, what: &str, bits: u32) -> Result<u128, DecodeError> {
        let start = self.base + self.pos;
        let mut v: u128 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.take(1, what)?[0];
            let low = (b & 0x7f) as u128;
            // The bits this byte adds must fit: none past `bits`.
            if shift >= bits || (bits - shift < 7 && low >> (bits - shift) != 0) {
                return err(start, format!("corrupt: {what} does not fit in {bits} bits"));
            }
            v |= low << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
            shift += 7;
        }
    }
    fn v64(&mut self, what: &str) -> Result<u64, DecodeError> {
        Ok(self.varint(what, 64)? as u64)
    }
}

/// Decodes a header; returns it and its length in bytes.
pub fn decode_header(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
    let mut c = Cursor { buf, pos: 0, base: 0 };
    if c.take(8, "the magic number")? != MAGIC {
        return err(0, "not a GustFS trace file (no GUSTTRCE magic)");
    }
    let version = c.u16("the version")?;
    if version != VERSION {
        return err(8, format!("trace format version {version}; this gust reads version {VERSION}"));
    }
    let len = c.u32("the header length")? as usize;
    if len > HEADER_BYTES_MAX {
        return err(10, format!("corrupt: header length {len} exceeds {HEADER_BYTES_MAX}"));
    }
    let body = c.take(len, "the header")?;
    let mut h = Cursor { buf: body, pos: 0, base: 14 };
    let pid = h.u32("the pid")?;
    let base_ns = h.u64("the base time")?;
    let rlen = h.u16("the role")? as usize;
    let role = String::from_utf8_lossy(h.take(rlen, "the role")?).into_owned();
    let n = h.u16("the tracepoint table")? as usize;
    let mut tracepoints = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let id = h.u16("the tracepoint table")?;
        let nl = h.take(1, "the tracepoint table")?[0] as usize;
        tracepoints.push((id, String::from_utf8_lossy(h.take(nl, "the tracepoint table")?).into_owned()));
    }
    Ok((Header { pid, base_ns, role, tracepoints }, 14 + len))
}

/// Decodes every block after the header: (thread id, record) in file order.
pub fn decode_blocks(buf: &[u8], mut pos: usize, base_ns: u64) -> Result<Vec<(u32, Record)>, DecodeError> {
    let mut out = Vec::new();
    while pos < buf.len() {
        let mut c = Cursor { buf, pos, base: 0 };
        let head = c.take(BLOCK_HEAD_BYTES, "a block header");
        let head = match head {
            Ok(h) => h,
            Err(e) => {
                return err(
                    e.offset,
                    format!("truncated: the file ends inside a block header ({} records read before it)", out.len()),
                )
            }
        };
        if &head[..4] != BLOCK_MAGIC {
            return err(pos, "corrupt: no block starts here (bad block magic)");
        }
        let tid = u32::from_le_bytes(head[4..8].try_into().unwrap());
        let count = u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize;
        let len = u32::from_le_bytes(head[12..16].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(head[16..20].try_into().unwrap());
        if len > BLOCK_PAYLOAD_BYTES_MAX || count > len {
            return err(pos, format!("corrupt: block of {count} records in {len} bytes"));
        }
        let payload = match c.take(len, "a block") {
            Ok(p) => p,
            Err(_) => {
                return err(
                    pos,
                    format!(
                        "truncated: the file ends inside a block of {len} bytes ({} records read before it; \
                         was the process killed before it flushed?)",
                        out.len()
                    ),
                )
            }
        };
        if block_crc(&head[4..16], payload) != crc {
            return err(pos, "corrupt: block checksum mismatch");
        }
        let mut r = Cursor { buf: payload, pos: 0, base: pos + BLOCK_HEAD_BYTES };
        for _ in 0..count {
            out.push((tid, decode_record(&mut r, base_ns)?));
        }
        if r.pos != len {
            return err(pos, format!("corrupt: {} bytes after the block's {count} records", len - r.pos));
        }
        pos += BLOCK_HEAD_BYTES + len;
    }
    Ok(out)
}

fn decode_record(c: &mut Cursor<'_>, base_ns: u64) -> Result<Record, DecodeError> {
    let tp = c.varint("a tracepoint id", 16)? as u16;
    let ts_ns = base_ns.saturating_add(c.v64("a time")?);
    let dur_ns = c.v64("a duration")?;
    let daemon = match c.varint("a daemon", 33)? {
        0 => None,
        d => Some((d - 1) as u32),
    };
    let result = unzigzag(c.varint("a result", 32)? as u32);
    let arg = c.v64("an argument")?;
    let offset = c.v64("an offset")?;
    let size = c.v64("a size")?;
    let file_id = c.varint("a file id", 128)?;
    let at = c.base + c.pos;
    let plen = c.varint("a path length", 32)? as usize;
    if plen > PATH_BYTES_MAX {
        return err(at, format!("corrupt: path of {plen} bytes"));
    }
    let path = String::from_utf8_lossy(c.take(plen, "a path")?).into_owned();
    Ok(Record { tp, ts_ns, dur_ns, daemon, result, arg, offset, size, file_id, path })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            pid: 42,
            base_ns: 1_700_000_000_000_000_000,
            role: "client".into(),
            tracepoints: vec![(4, "write".into())],
        }
    }

    fn sample(i: u64) -> Record {
        Record {
            tp: 4,
            ts_ns: header().base_ns + 1000 * i,
            dur_ns: 12_345 + i,
            daemon: if i.is_multiple_of(2) { Some(i as u32) } else { None },
            result: if i == 3 { -libc::ENOENT } else { 0 },
            arg: libc::O_CREAT as u64,
            offset: i << 40,
            size: 4096 * i,
            file_id: u128::MAX - i as u128,
            path: format!("/dir/file-{i}-é"),
        }
    }

    fn file(records: &[Record]) -> Vec<u8> {
        let h = header();
        let mut out = encode_header(&h);
        for chunk in records.chunks(3) {
            let mut p = Vec::new();
            for r in chunk {
                encode_record(&mut p, r, h.base_ns);
            }
            out.extend(encode_block(7, chunk.len() as u32, &p));
        }
        out
    }

    #[test]
    fn records_round_trip_with_extreme_values() {
        let mut recs: Vec<Record> = (0..8).map(sample).collect();
        recs.push(Record {
            tp: u16::MAX,
            ts_ns: u64::MAX,
            dur_ns: u64::MAX,
            daemon: Some(u32::MAX),
            result: i32::MIN,
            arg: u64::MAX,
            offset: u64::MAX,
            size: u64::MAX,
            file_id: u128::MAX,
            path: String::new(),
        });
        let bytes = file(&recs);
        let (h, at) = decode_header(&bytes).unwrap();
        assert_eq!(h, header());
        let got: Vec<Record> = decode_blocks(&bytes, at, h.base_ns)
            .unwrap()
            .into_iter()
            .map(|(t, r)| {
                assert_eq!(t, 7);
                r
            })
            .collect();
        assert_eq!(got, recs);
    }

    #[test]
    fn small_records_are_compact() {
        let mut p = Vec::new();
        let r = Record {
            tp: 3,
            ts_ns: header().base_ns + 5_000_000,
            dur_ns: 40_000,
            daemon: Some(1),
            size: 4096,
            path: "/a".into(),
            ..Default::default()
        };
        encode_record(&mut p, &r, header().base_ns);
        assert!(p.len() <= 20, "{} bytes", p.len());
    }

    #[test]
    fn long_paths_are_cut_at_a_char_boundary() {
        let mut p = Vec::new();
        let r = Record { path: "é".repeat(PATH_BYTES_MAX), ..Default::default() };
        encode_record(&mut p, &r, 0);
        let mut c = Cursor { buf: &p, pos: 0, base: 0 };
        let back = decode_record(&mut c, 0).unwrap();
        assert_eq!(back.path.len(), PATH_BYTES_MAX);
        assert!(back.path.chars().all(|ch| ch == 'é'));
    }

    #[test]
    fn truncation_anywhere_is_an_error_never_a_panic() {
        let bytes = file(&(0..7).map(sample).collect::<Vec<_>>());
        for cut in 0..bytes.len() {
            let b = &bytes[..cut];
            let r = decode_header(b).and_then(|(h, at)| decode_blocks(b, at, h.base_ns));
            // A cut exactly between blocks is a shorter valid file.
            if let Err(e) = r {
                assert!(e.what.contains("truncated") || e.what.contains("GUSTTRCE"), "cut {cut}: {e}");
            }
        }
        let (h, at) = decode_header(&bytes).unwrap();
        let e = decode_blocks(&bytes[..bytes.len() - 1], at, h.base_ns).unwrap_err();
        assert!(e.what.starts_with("truncated: the file ends inside a block"), "{e}");
        assert!(e.what.contains("6 records read"), "{e}");
    }

    #[test]
    fn flipped_bits_are_reported_as_corrupt() {
        let bytes = file(&(0..7).map(sample).collect::<Vec<_>>());
        let (h, at) = decode_header(&bytes).unwrap();
        for i in at..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            if let Err(e) = decode_blocks(&b, at, h.base_ns) {
                assert!(e.what.contains("corrupt") || e.what.contains("truncated"), "byte {i}: {e}");
            } else {
                panic!("flipping byte {i} went unnoticed");
            }
        }
        let mut b = bytes.clone();
        b[at + BLOCK_HEAD_BYTES + 2] ^= 0xff;
        assert_eq!(decode_blocks(&b, at, h.base_ns).unwrap_err().what, "corrupt: block checksum mismatch");
        let mut v = bytes.clone();
        v[8] = 9;
        assert!(decode_header(&v).unwrap_err().what.contains("version 9"));
        assert!(decode_header(b"hello world, not a trace").unwrap_err().what.contains("not a GustFS trace"));
    }
}
