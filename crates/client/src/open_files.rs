//! The open-file table: descriptor numbers of this client and the open file
//! descriptions behind them; `open`, `open_known`, `dup`, `close`.
//!
//! One allocator ([`FdTable::insert`]) hands out every descriptor, whether `open` or
//! `dup` asks, so the bound [`OPEN_FILES_MAX`] holds for both and numbers wrap the
//! same way.
//!
//! Not for: reading and writing through a descriptor (data.rs), kernel descriptor
//! numbers (the preload library maps its own onto these).

use crate::stat::Stat;
use crate::{Client, Errno, Result};
use gust_proto::{path, FileKind, Request, Response};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Bound on the open-file table of one client. An entry costs about 100 bytes plus
/// its path, so a full table is under 10 MiB for paths of typical length.
pub const OPEN_FILES_MAX: usize = 65_536;
/// The first descriptor number handed out (0..2 look like the standard streams).
const FD_FIRST: i32 = 3;

/// One open file description; shared by descriptors made with `dup`.
pub(crate) struct OpenFile {
    /// Current path: rename through this client rewrites it (see `FdTable::retarget`).
    pub(crate) path: RwLock<String>,
    pub(crate) file_id: u128,
    pub(crate) kind: FileKind,
    pub(crate) flags: i32,
    pub(crate) offset: Mutex<u64>,
    /// The mode to set at the first write: the file's without its set-id bits, when
    /// a caller without privilege opened for writing a file that has them (Linux
    /// clears them on such a write; see `Client::open_stat`).
    pub(crate) clear_set_id: Mutex<Option<u32>>,
    /// Data was written through this description: its last close is reported to
    /// the path's daemon (IN_CLOSE_WRITE of `gust events`).
    pub(crate) written: AtomicBool,
}

impl OpenFile {
    fn new(path: String, file_id: u128, kind: FileKind, flags: i32) -> OpenFile {
        OpenFile {
            path: RwLock::new(path),
            file_id,
            kind,
            flags,
            offset: Mutex::new(0),
            clear_set_id: Mutex::new(None),
            written: AtomicBool::new(false),
        }
    }

    pub(crate) fn path(&self) -> String {
        self.path.read().unwrap().clone()
    }
}

/// Descriptor number -> open file description, at most `capacity` entries.
pub(crate) struct FdTable {
    files: RwLock<HashMap<i32, Arc<OpenFile>>>,
    next_fd: Mutex<i32>,
    capacity: usize,
}

impl FdTable {
    pub(crate) fn new(capacity: usize) -> FdTable {
        FdTable { files: RwLock::new(HashMap::new()), next_fd: Mutex::new(FD_FIRST), capacity }
    }

    /// The one descriptor allocator: the first free number after the last one handed
    /// out, wrapping to `FD_FIRST` before i32::MAX; EMFILE when the table is full.
    fn insert(&self, f: Arc<OpenFile>) -> Result<i32> {
        let mut files = self.files.write().unwrap();
        if files.len() >= self.capacity {
            return Err(Errno(libc::EMFILE));
        }
        let following = |fd: i32| if fd >= i32::MAX - 1 { FD_FIRST } else { fd + 1 };
        let mut next = self.next_fd.lock().unwrap();
        // The table has a free number, so this ends within `capacity` steps.
        while files.contains_key(&*next) {
            *next = following(*next);
        }
        let fd = *next;
        *next = following(fd);
        files.insert(fd, f);
        Ok(fd)
    }

    pub(crate) fn get(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.files.read().unwrap().get(&fd).cloned().ok_or(Errno(libc::EBADF))
    }

    fn remove(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.files.write().unwrap().remove(&fd).ok_or(Errno(libc::EBADF))
    }

    /// Descriptors open on `old` (or below it) follow its rename to `new`, as POSIX
    /// descriptors follow the file. Other processes' descriptors keep the old path
    /// and get ENOENT or ESTALE (docs/SEMANTICS.md).
    pub(crate) fn retarget(&self, old: &str, new: &str) {
        for f in self.files.read().unwrap().values() {
            let mut p = f.path.write().unwrap();
            if let Some(moved) = path::rebase(&p, old, new) {
                *p = moved;
            }
        }
    }
}

impl Client {
    /// Opens (and with O_CREAT creates) a file. Costs one RPC for an existing file or
    /// for a create, plus one for O_TRUNC of a non-empty file.
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> Result<i32> {
        self.open_stat(path, flags, mode).map(|(fd, _)| fd)
    }

    /// `open` that also returns the attributes it fetched anyway, saving a front end
    /// (FUSE create, preload open+fstat) one `fstat` RPC.
    pub fn open_stat(&self, path: &str, flags: i32, mode: u32) -> Result<(i32, Stat)> {
        let mut p = crate::normalize(path)?;
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        let mut hops = 0;
        let rec = loop {
            let r = if flags & libc::O_CREAT != 0 {
                if p == "/" {
                    return Err(Errno(if flags & libc::O_EXCL != 0 { libc::EEXIST } else { libc::EISDIR }));
                }
                self.check_parent(&p)?;
                let req = Request::Create {
                    path: p.clone(),
                    record: Self::new_record(FileKind::File, mode, String::new()),
                    exclusive: flags & libc::O_EXCL != 0,
                };
                match self.call_md(&p, req)? {
                    Response::Record(r) => r,
                    r => return Err(crate::error::unexpected(r)),
                }
            } else {
                self.get_record(&p)?
            };
            if r.kind != FileKind::Symlink {
                break r;
            }
            if flags & libc::O_NOFOLLOW != 0 {
                return Err(Errno(libc::ELOOP));
            }
            hops += 1;
            if hops > crate::namespace::SYMLINK_HOPS_MAX {
                return Err(Errno(libc::ELOOP));
            }
            p = self.link_target_path(&p, &r.target)?;
        };
        if flags & libc::O_DIRECTORY != 0 && rec.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if matches!(rec.kind, FileKind::Fifo | FileKind::Socket) {
            // A pipe or socket lives in one node's kernel; only the FUSE mount (whose
            // kernel opens them itself) gives one. ENXIO is a socket's open(2) errno.
            return Err(Errno(libc::ENXIO));
        }
        if rec.kind == FileKind::Dir && (writable || flags & libc::O_CREAT != 0) {
            return Err(Errno(libc::EISDIR));
        }
        let mut rec = rec;
        if flags & libc::O_TRUNC != 0 && writable && rec.kind == FileKind::File && rec.size > 0 {
            self.truncate_resolved(&p, 0)?;
            rec.size = 0;
        }
        let st = Stat::from_record(&rec, self.chunk_size);
        let file = OpenFile::new(p, rec.file_id, rec.kind, flags);
        if writable && rec.kind == FileKind::File && !crate::Credentials::is_root_caller() {
            // Linux's should_remove_suid: S_ISUID always, S_ISGID with group execute.
            let mut kill = rec.mode & libc::S_ISUID;
            if rec.mode & libc::S_IXGRP != 0 {
                kill |= rec.mode & libc::S_ISGID;
            }
            if kill != 0 {
                *file.clear_set_id.lock().unwrap() = Some(rec.mode & !kill);
            }
        }
        let fd = self.files.insert(Arc::new(file))?;
        Ok((fd, st))
    }

    /// Opens a file whose record the caller fetched recently, without an RPC: for a
    /// FUSE mount, which may trust attributes within their timeout. If the path names
    /// another file by now, I/O through the descriptor fails with ESTALE, as for any
    /// descriptor whose path was replaced. O_CREAT and O_TRUNC need `open`.
    pub fn open_known(&self, path: &str, flags: i32, file_id: u128, kind: FileKind) -> Result<i32> {
        let p = crate::normalize(path)?;
        if flags & (libc::O_CREAT | libc::O_TRUNC) != 0 || kind == FileKind::Symlink {
            return Err(Errno(libc::EINVAL));
        }
        let acc = flags & libc::O_ACCMODE;
        let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
        if flags & libc::O_DIRECTORY != 0 && kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if kind == FileKind::Dir && writable {
            return Err(Errno(libc::EISDIR));
        }
        self.files.insert(Arc::new(OpenFile::new(p, file_id, kind, flags)))
    }

    pub(crate) fn file(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.files.get(fd)
    }

    /// Releases a descriptor. The last close of a description that wrote data
    /// costs one RPC: the path's daemon records IN_CLOSE_WRITE for `gust events`
    /// (best effort: the close succeeds whatever that daemon answers).
    pub fn close(&self, fd: i32) -> Result<()> {
        let f = self.files.remove(fd)?;
        if f.written.load(Ordering::Relaxed) && Arc::strong_count(&f) == 1 {
            let path = f.path();
            let _ = self.transport.call(self.md_daemon(&path), Request::CloseWrite { path });
        }
        Ok(())
    }

    /// A new descriptor sharing the open file description (offset, flags) of `fd`.
    pub fn dup(&self, fd: i32) -> Result<i32> {
        self.files.insert(self.file(fd)?)
    }

    /// Path (inside the file system) and open flags of a descriptor.
    pub fn fd_info(&self, fd: i32) -> Result<(String, i32)> {
        let f = self.file(fd)?;
        Ok((f.path(), f.flags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Arc<OpenFile> {
        Arc::new(OpenFile::new("/f".into(), 1, FileKind::File, libc::O_RDONLY))
    }

    /// Opens and dups draw from one bound: a full table refuses both with EMFILE, and
    /// a closed descriptor makes room for either.
    #[test]
    fn one_bound_for_open_and_dup() {
        let t = FdTable::new(4);
        let fds: Vec<i32> = (0..4).map(|_| t.insert(file()).unwrap()).collect();
        assert_eq!(fds, vec![3, 4, 5, 6]);
        assert_eq!(t.insert(file()), Err(Errno(libc::EMFILE)));
        assert_eq!(t.insert(t.get(3).unwrap()), Err(Errno(libc::EMFILE)), "dup past the bound");
        t.remove(4).unwrap();
        assert_eq!(t.insert(t.get(3).unwrap()), Ok(7), "a closed descriptor makes room");
        assert!(Arc::ptr_eq(&t.get(3).unwrap(), &t.get(7).unwrap()), "a dup shares the description");
        assert_eq!(t.insert(file()), Err(Errno(libc::EMFILE)));
        assert_eq!(t.remove(9).err(), Some(Errno(libc::EBADF)));
        assert_eq!(t.get(9).err(), Some(Errno(libc::EBADF)));
    }

    /// Numbers wrap before i32::MAX back to the first one, skipping those in use.
    #[test]
    fn numbers_wrap_below_i32_max() {
        let t = FdTable::new(8);
        assert_eq!(t.insert(file()), Ok(3));
        *t.next_fd.lock().unwrap() = i32::MAX - 2;
        assert_eq!(t.insert(file()), Ok(i32::MAX - 2));
        assert_eq!(t.insert(file()), Ok(i32::MAX - 1));
        assert_eq!(t.insert(file()), Ok(4), "3 is in use");
    }

    #[test]
    fn rename_moves_descriptors_below_it() {
        let t = FdTable::new(8);
        for p in ["/a", "/a/b", "/ab", "/c"] {
            t.insert(Arc::new(OpenFile::new(p.into(), 1, FileKind::File, 0))).unwrap();
        }
        t.retarget("/a", "/z");
        let paths: Vec<String> = (3..7).map(|fd| t.get(fd).unwrap().path()).collect();
        assert_eq!(paths, vec!["/z", "/z/b", "/ab", "/c"]);
    }
}
