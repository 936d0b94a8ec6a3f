//! The data path: read, write, seek, truncate and sync through descriptors, window by
//! window, one request per daemon per window.
//!
//! A call goes down, never back up: the front door (traced.rs) calls `read_impl` or
//! `write_impl` here, which keep or send what the descriptor buffers (read.rs,
//! write.rs), hand chunk spans to chunks.rs, and chunks.rs to the transport
//! (rpc.rs). What a write may leave in the client's memory lives in the open file
//! that owns it (open_files.rs): a deferred create's data (inline.rs), the
//! write-behind buffer (write.rs) and the size not sent yet (size_cache.rs).
//!
//! * read.rs: a read window's size lookup and chunk reads in one round trip.
//! * write.rs: the write-behind buffer, the append reservation, and a write window's
//!   chunk writes with its size update in one round trip.
//! * chunks.rs: where a window's chunk spans go (the local file a daemon of this
//!   node handed over, or a request to each daemon; spilling on full daemons).
//! * Here: seek, truncate and sync, which send no data.
//!
//! Not for: where chunks live (routing.rs), descriptors (open_files.rs).

mod chunks;
mod read;
mod write;

pub(crate) use chunks::remainders;
pub(crate) use write::{bytes_from_env, WriteBuffer};

use crate::error::unexpected;
use crate::open_files::OpenFile;
use crate::{namespace::now_ns, Client, Errno, Result};
use gust_proto::{FileKind, Request, Response};

/// Bytes per daemon request in one round of a large read or write. Keeps frames far
/// under BULK_BYTES_MAX and bounds the memory a transfer pins.
const TRANSFER_WINDOW_BYTES: u64 = 16 << 20;

impl Client {
    pub(crate) fn lseek_impl(&self, fd: i32, offset: i64, whence: i32) -> Result<u64> {
        // A deferred create stays deferred: its size is what was written so far
        // (stdio and Python's buffered files ask where they are right after an open).
        let f = self.files.get(fd)?;
        let pending = self.pending_record(&f);
        let f = if pending.is_some() { f } else { self.file(fd)? };
        let mut off = f.offset.lock().unwrap_or_else(|e| e.into_inner());
        let size = || -> Result<u64> {
            match &pending {
                Some(r) => Ok(r.size),
                None => Ok(self.get_record(&f.path())?.size),
            }
        };
        let new: i64 = match whence {
            libc::SEEK_SET => offset,
            libc::SEEK_CUR => (*off as i64).checked_add(offset).ok_or(Errno(libc::EOVERFLOW))?,
            libc::SEEK_END => (size()? as i64).checked_add(offset).ok_or(Errno(libc::EOVERFLOW))?,
            // The whole file counts as data (allowed by POSIX; Linux does the same on
            // file systems without hole tracking).
            libc::SEEK_DATA => {
                let s = size()?;
                if offset < 0 || offset as u64 >= s {
                    return Err(Errno(libc::ENXIO));
                }
                offset
            }
            libc::SEEK_HOLE => {
                let s = size()?;
                if offset < 0 || offset as u64 >= s {
                    return Err(Errno(libc::ENXIO));
                }
                s as i64
            }
            _ => return Err(Errno(libc::EINVAL)),
        };
        if new < 0 {
            return Err(Errno(libc::EINVAL));
        }
        *off = new as u64;
        Ok(new as u64)
    }

    /// Sets the size of the file at resolved path `p`; chunks past the new end are
    /// cut on the daemons that can hold them.
    pub(crate) fn truncate_resolved(&self, p: &str, size: u64) -> Result<()> {
        self.listing.invalidate();
        if size > i64::MAX as u64 {
            return Err(Errno(libc::EFBIG));
        }
        let old = match self.call_md(p, Request::Truncate { path: p.to_string(), size, mtime_ns: now_ns() })? {
            Response::Record(r) => r,
            r => return Err(unexpected(r)),
        };
        self.call_chunk_daemons(old.file_id, size, old.size, None, || Request::TruncateChunks {
            file_id: old.file_id,
            size,
        })
    }

    pub(crate) fn truncate_impl(&self, path: &str, size: u64) -> Result<()> {
        let (p, r) = self.resolve(path)?;
        if r.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        self.may_truncate(&r)?;
        self.truncate_resolved(&p, size)
    }

    pub(crate) fn ftruncate_impl(&self, fd: i32, size: u64) -> Result<()> {
        let f = self.file(fd)?;
        if f.kind == FileKind::Dir {
            return Err(Errno(libc::EISDIR));
        }
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Errno(libc::EINVAL));
        }
        self.truncate_resolved(&f.attrs_path(), size)
    }

    /// Makes the file's data and the metadata log durable on every daemon involved.
    pub(crate) fn fsync_impl(&self, fd: i32) -> Result<()> {
        let f = self.file(fd)?;
        self.sync_file(&f)
    }

    fn sync_file(&self, f: &OpenFile) -> Result<()> {
        let path = f.attrs_path();
        let r = self.get_record(&path)?;
        let md = self.md_daemon(&path);
        self.call_chunk_daemons(f.file_id(), 0, r.size, Some(md), || Request::Fsync { file_id: Some(f.file_id()) })
    }
}
