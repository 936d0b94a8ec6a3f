//! The merge operator: size operands (a write's end and mtime) and directory
//! operands (a subdirectory made or removed), folded into a record without a read.

use super::*;

pub(crate) const MERGE_GROW: u8 = 0xF1;
pub(crate) const MERGE_OPERAND_BYTES: usize = 17;
pub(crate) const MERGE_DIR: u8 = 0xF2;
pub(crate) const MERGE_DIR_OPERAND_BYTES: usize = 13;
/// Bound on unfolded size operands per key in the memtable. A lookup applies at most
/// this many; one merge in this many costs an extra read of the key (a memtable hit
/// right after the previous fold). 16 keeps both below a microsecond: the fold reads
/// back at most 16 fixed 17-byte operands.
pub const MERGE_OPERANDS_PER_KEY_MAX: usize = 16;

pub(crate) fn grow_operand(end: u64, mtime_ns: i64) -> [u8; MERGE_OPERAND_BYTES] {
    let mut o = [0u8; MERGE_OPERAND_BYTES];
    o[0] = MERGE_GROW;
    o[1..9].copy_from_slice(&end.to_le_bytes());
    o[9..17].copy_from_slice(&mtime_ns.to_le_bytes());
    o
}

pub(crate) fn parse_operand(o: &[u8]) -> Option<(u64, i64)> {
    if o.len() != MERGE_OPERAND_BYTES || o[0] != MERGE_GROW {
        return None;
    }
    Some((u64::from_le_bytes(o[1..9].try_into().unwrap()), i64::from_le_bytes(o[9..17].try_into().unwrap())))
}

pub(crate) fn dir_operand(subdirs_delta: i32, time_ns: i64) -> [u8; MERGE_DIR_OPERAND_BYTES] {
    let mut o = [0u8; MERGE_DIR_OPERAND_BYTES];
    o[0] = MERGE_DIR;
    o[1..5].copy_from_slice(&subdirs_delta.to_le_bytes());
    o[5..13].copy_from_slice(&time_ns.to_le_bytes());
    o
}

pub(crate) fn parse_dir_operand(o: &[u8]) -> Option<(i32, i64)> {
    if o.len() != MERGE_DIR_OPERAND_BYTES || o[0] != MERGE_DIR {
        return None;
    }
    Some((i32::from_le_bytes(o[1..5].try_into().unwrap()), i64::from_le_bytes(o[5..13].try_into().unwrap())))
}

pub(crate) fn full_merge(_key: &[u8], existing: Option<&[u8]>, ops: &MergeOperands) -> Option<Vec<u8>> {
    let Some(mut rec) = existing.and_then(decode_record) else {
        // The record was removed (or never existed): stay absent, never resurrect.
        return Some(Vec::new());
    };
    for o in ops.iter() {
        if let Some((end, mtime)) = parse_operand(o) {
            rec.size = rec.size.max(end);
            rec.mtime_ns = rec.mtime_ns.max(mtime);
            rec.ctime_ns = rec.ctime_ns.max(mtime);
        } else if let Some((delta, time)) = parse_dir_operand(o) {
            if rec.kind == FileKind::Dir {
                rec.nlink = (rec.nlink as i64 + delta as i64).clamp(2, u32::MAX as i64) as u32;
                rec.mtime_ns = rec.mtime_ns.max(time);
                rec.ctime_ns = rec.ctime_ns.max(time);
            }
        }
    }
    Some(encode_record(&rec))
}

/// Folds size operands into one; a mix with directory operands stays unfolded
/// (RocksDB keeps the operands and the full merge applies them in order).
pub(crate) fn partial_merge(_key: &[u8], _existing: Option<&[u8]>, ops: &MergeOperands) -> Option<Vec<u8>> {
    let mut end = 0u64;
    let mut mtime = i64::MIN;
    for o in ops.iter() {
        let (e, m) = parse_operand(o)?;
        end = end.max(e);
        mtime = mtime.max(m);
    }
    Some(grow_operand(end, mtime).to_vec())
}
