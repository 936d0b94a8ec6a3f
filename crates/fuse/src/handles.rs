//! Open files and open directories: what a file handle or directory handle
//! number stands for.

use super::*;

/// One open file: a client descriptor (which follows renames made through this client).
pub(crate) struct Handle {
    pub(crate) client_flags: i32,
    pub(crate) fd: i32,
    /// Lock owners that locked through this handle and did not flush it since:
    /// its RELEASE ends their locks (locks.rs).
    pub(crate) lock_owners: Mutex<Vec<u64>>,
}

pub(crate) struct DirState {
    pub(crate) stream: Option<DirStream<'static>>,
    /// Position of the next entry to hand out ("." is 0, ".." is 1, then the stream).
    pub(crate) pos: u64,
    /// The entry that did not fit in the previous reply.
    pub(crate) pending: Option<DirEntry>,
    /// A listing error to report on the next call (the stream ends after an error).
    pub(crate) failed: Option<Errno>,
    /// The stream ended, serving (or keeping) this listing held under grants: the
    /// kernel's cache of the directory, filled by this pass, may be kept.
    pub(crate) ended_with: Option<u64>,
}

pub(crate) struct DirHandle {
    pub(crate) path: String,
    /// The directory's attributes at opendir ("." and ".." in READDIRPLUS).
    pub(crate) stat: Stat,
    pub(crate) state: Mutex<DirState>,
}

/// What adding one entry to a READDIR(PLUS) reply did.
#[derive(PartialEq, Eq)]
pub(crate) enum Emitted {
    Added,
    /// The reply is full; the entry goes first into the next one.
    Full,
    /// Gone since the listing (READDIRPLUS could not stat it): left out.
    Skipped,
}
