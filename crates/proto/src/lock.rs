//! What lock requests carry (`lock`, `lock_test`, `lock_cancel`, `lock_granted`):
//! file locks kept by a file's metadata daemon (docs/DESIGN.md, "Locks").
//!
//! A lock belongs to an owner: a client process (`client`, its random id) and a
//! number the client chooses within it (`owner`: the process itself for POSIX
//! record locks, an open file description for OFD and flock locks, the kernel's
//! lock owner through FUSE). A range is `start..end`, end exclusive, with
//! `LOCK_END_EOF` (u64::MAX) standing for "to the end of the file, however long".
//!
//! Not for: the rules of conflicts, splits and waits (gust-daemon's locks.rs), how a
//! front end maps fcntl and flock onto these (gust-client's locks.rs).

use serde::{Deserialize, Serialize};

/// The end of a range that runs to the end of the file, whatever its size (an
/// fcntl lock with `l_len` 0, every flock lock).
pub const LOCK_END_EOF: u64 = u64::MAX;

/// The family a lock belongs to. POSIX and OFD locks are byte-range locks that
/// conflict with each other (between different owners); flock locks are whole-file
/// locks of a space of their own, as on Linux: they never conflict with the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockKind {
    /// fcntl F_SETLK/F_SETLKW/F_GETLK: owner = a process; deadlocks between such
    /// owners are detected (EDEADLK).
    Posix,
    /// fcntl F_OFD_*: owner = an open file description.
    Ofd,
    /// flock(2): owner = an open file description; whole file only.
    Flock,
}

impl LockKind {
    /// Whether locks of this kind live in the byte-range space (POSIX and OFD)
    /// rather than flock's.
    pub fn byte_range(self) -> bool {
        !matches!(self, LockKind::Flock)
    }
}

/// What a lock request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LockMode {
    /// F_UNLCK, LOCK_UN: release the owner's locks on the range.
    Unlock,
    /// F_RDLCK, LOCK_SH: shared with other readers.
    Read,
    /// F_WRLCK, LOCK_EX: exclusive.
    Write,
}

/// A lock that conflicts with what a `lock_test` asked about (F_GETLK's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    /// Read or Write.
    pub mode: LockMode,
    pub start: u64,
    /// Exclusive; `LOCK_END_EOF` for "to the end of the file".
    pub end: u64,
    /// The holder's process id as its client gave it (-1 for an OFD lock), on its
    /// node: only meaningful to a reader who knows which node.
    pub pid: i32,
}

/// Whether `start..end` is a range a lock may have: not empty. A flock lock must
/// cover the whole file. The daemon answers anything else with EINVAL.
pub fn lock_range_valid(kind: LockKind, start: u64, end: u64) -> bool {
    match kind {
        LockKind::Flock => start == 0 && end == LOCK_END_EOF,
        LockKind::Posix | LockKind::Ofd => start < end,
    }
}
