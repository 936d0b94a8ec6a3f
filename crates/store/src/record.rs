//! The record value: its byte layout (format 2, format 1 still read; the table is in
//! metadata/mod.rs), the check that turns an unreadable value into EIO, and the root
//! directory's record. Pure: no RocksDB, so the fuzz target `record` covers it.

use crate::Res;
use gust_proto::{FileKind, Record};

pub const VALUE_FORMAT: u8 = 2;
pub const VALUE_FIXED_BYTES: usize = 68;
/// Format 1: no uid and gid (read only).
pub const VALUE_FORMAT_1: u8 = 1;
pub const VALUE_FIXED_BYTES_1: usize = 60;

pub fn encode_record(r: &Record) -> Vec<u8> {
    let t = r.target.as_bytes();
    assert!(t.len() <= u16::MAX as usize, "symlink target bounded by PATH_BYTES_MAX");
    let mut v = Vec::with_capacity(VALUE_FIXED_BYTES + t.len());
    v.push(VALUE_FORMAT);
    v.push(r.kind as u8);
    v.extend_from_slice(&r.mode.to_le_bytes());
    v.extend_from_slice(&r.size.to_le_bytes());
    v.extend_from_slice(&r.file_id.to_le_bytes());
    v.extend_from_slice(&r.nlink.to_le_bytes());
    v.extend_from_slice(&r.ctime_ns.to_le_bytes());
    v.extend_from_slice(&r.mtime_ns.to_le_bytes());
    v.extend_from_slice(&r.atime_ns.to_le_bytes());
    v.extend_from_slice(&r.uid.to_le_bytes());
    v.extend_from_slice(&r.gid.to_le_bytes());
    v.extend_from_slice(&(t.len() as u16).to_le_bytes());
    v.extend_from_slice(t);
    debug_assert_eq!(decode_record(&v).as_ref(), Some(r));
    v
}

/// Decodes a stored value. `None` for a tombstone or a value this build cannot read
/// (the caller reports EIO for the latter; see `decode_checked`).
pub fn decode_record(v: &[u8]) -> Option<Record> {
    let (fixed, owner) = match v.first() {
        Some(&VALUE_FORMAT) => (VALUE_FIXED_BYTES, None),
        Some(&VALUE_FORMAT_1) => (VALUE_FIXED_BYTES_1, Some(daemon_owner())),
        _ => return None,
    };
    if v.len() < fixed {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(v[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(v[o..o + 8].try_into().unwrap());
    let kind = match v[1] {
        1 => FileKind::File,
        2 => FileKind::Dir,
        3 => FileKind::Symlink,
        4 => FileKind::Fifo,
        5 => FileKind::Socket,
        6 => FileKind::BlockDevice,
        7 => FileKind::CharDevice,
        _ => return None,
    };
    let tlen = u16::from_le_bytes([v[fixed - 2], v[fixed - 1]]) as usize;
    if v.len() != fixed + tlen {
        return None;
    }
    let (uid, gid) = owner.unwrap_or_else(|| (u32_at(58), u32_at(62)));
    Some(Record {
        kind,
        mode: u32_at(2),
        size: u64_at(6),
        file_id: u128::from_le_bytes(v[14..30].try_into().unwrap()),
        nlink: u32_at(30),
        ctime_ns: u64_at(34) as i64,
        mtime_ns: u64_at(42) as i64,
        atime_ns: u64_at(50) as i64,
        target: String::from_utf8(v[fixed..].to_vec()).ok()?,
        uid,
        gid,
    })
}

/// The daemon's effective uid and gid: the owner of the root directory and of
/// records written before owners were stored.
pub fn daemon_owner() -> (u32, u32) {
    // SAFETY: geteuid/getegid have no preconditions.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Absent (tombstone) is `Ok(None)`; an unreadable value is EIO with a log line.
pub fn decode_checked(key: &[u8], v: &[u8]) -> Res<Option<Record>> {
    if v.is_empty() {
        return Ok(None);
    }
    match decode_record(v) {
        Some(r) => Ok(Some(r)),
        None => {
            tracing::error!("corrupt metadata record for key {:?} ({} bytes)", String::from_utf8_lossy(key), v.len());
            Err(libc::EIO)
        }
    }
}

pub fn root_record() -> Record {
    let (uid, gid) = daemon_owner();
    Record {
        kind: FileKind::Dir,
        mode: 0o777,
        size: 0,
        file_id: 0,
        nlink: 2,
        ctime_ns: 0,
        mtime_ns: 0,
        atime_ns: 0,
        target: String::new(),
        uid,
        gid,
    }
}
