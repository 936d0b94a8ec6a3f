//! The record value: its byte layout (format 2, or 3 for a record with extended
//! attributes; format 1 still read; the table is in metadata/mod.rs), the check that
//! turns an unreadable value into EIO, and the root directory's record. Pure: no
//! RocksDB, so the fuzz target `record` covers it.

use crate::Res;
use gust_proto::{FileKind, Record};

pub const VALUE_FORMAT: u8 = 2;
pub const VALUE_FIXED_BYTES: usize = 68;
/// Format 2 followed by the record's extended attributes, each `u8 name length |
/// u16 value length | name | value`, in name order, to the end of the value. Written
/// only for a record that has attributes, so every other value stays format 2.
pub const VALUE_FORMAT_XATTRS: u8 = 3;
/// Format 1: no uid and gid (read only).
pub const VALUE_FORMAT_1: u8 = 1;
pub const VALUE_FIXED_BYTES_1: usize = 60;

pub fn encode_record(r: &Record) -> Vec<u8> {
    let t = r.target.as_bytes();
    assert!(t.len() <= u16::MAX as usize, "symlink target bounded by PATH_BYTES_MAX");
    let mut v = Vec::with_capacity(VALUE_FIXED_BYTES + t.len() + gust_proto::xattr::bytes(&r.xattrs));
    v.push(if r.xattrs.is_empty() { VALUE_FORMAT } else { VALUE_FORMAT_XATTRS });
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
    for (name, value) in &r.xattrs {
        // Bounded by gust_proto::xattr (255-byte names, 4 KiB in all).
        assert!(name.len() <= u8::MAX as usize && value.len() <= u16::MAX as usize, "attribute past its bounds");
        v.push(name.len() as u8);
        v.extend_from_slice(&(value.len() as u16).to_le_bytes());
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(value);
    }
    debug_assert_eq!(decode_record(&v).as_ref(), Some(r));
    v
}

/// Decodes a stored value. `None` for a tombstone or a value this build cannot read
/// (the caller reports EIO for the latter; see `decode_checked`).
pub fn decode_record(v: &[u8]) -> Option<Record> {
    let (fixed, owner) = match v.first() {
        Some(&VALUE_FORMAT) | Some(&VALUE_FORMAT_XATTRS) => (VALUE_FIXED_BYTES, None),
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
    let (target, xattrs) = if v[0] == VALUE_FORMAT_XATTRS {
        let rest = v.get(fixed + tlen..)?;
        (&v[fixed..fixed + tlen], decode_xattrs(rest)?)
    } else if v.len() == fixed + tlen {
        (&v[fixed..], Vec::new())
    } else {
        return None;
    };
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
        target: String::from_utf8(target.to_vec()).ok()?,
        uid,
        gid,
        xattrs,
    })
    .filter(|r| r.xattrs.is_empty() || r.check().is_ok())
}

/// The attributes section of a format-3 value: at least one entry (none is format
/// 2), each whole, valid and in order (gust_proto::xattr::is_valid).
fn decode_xattrs(mut rest: &[u8]) -> Option<gust_proto::xattr::Xattrs> {
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (&nlen, r) = rest.split_first()?;
        let vlen = u16::from_le_bytes(r.get(..2)?.try_into().unwrap()) as usize;
        let r = &r[2..];
        let name = std::str::from_utf8(r.get(..nlen as usize)?).ok()?.to_string();
        let value = r.get(nlen as usize..nlen as usize + vlen)?.to_vec();
        rest = &r[nlen as usize + vlen..];
        out.push((name, value));
    }
    (!out.is_empty() && gust_proto::xattr::is_valid(&out)).then_some(out)
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
        xattrs: Vec::new(),
    }
}
