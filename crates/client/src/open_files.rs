//! The open-file table: descriptor numbers of this client and the open file
//! descriptions behind them; `open`, `open_known`, `dup`, `close`.
//!
//! One allocator ([`FdTable::insert`]) hands out every descriptor, whether `open` or
//! `dup` asks, so the bound [`OPEN_FILES_MAX`] holds for both and numbers wrap the
//! same way.
//!
//! Not for: reading and writing through a descriptor (io/), kernel descriptor
//! numbers (the preload library maps its own onto these).

use crate::stat::Stat;
use crate::{Client, Errno, Result};
use gust_proto::{path, FileKind, Record, Request, Response};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};

/// Bound on the open-file table of one client. An entry costs about 100 bytes plus
/// its path, so a full table is under 10 MiB for paths of typical length.
pub const OPEN_FILES_MAX: usize = 65_536;
/// The first descriptor number handed out (0..2 look like the standard streams).
const FD_FIRST: i32 = 3;

/// One open file description; shared by descriptors made with `dup`.
pub(crate) struct OpenFile {
    /// Current path: rename through this client rewrites it (see `FdTable::retarget`).
    pub(crate) path: RwLock<String>,
    /// Set at open, or for a deferred create when it is settled (inline.rs); every
    /// operation but write and close settles first, so it is set when read.
    id: OnceLock<u128>,
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
    /// A create not yet sent (inline.rs): the data written so far, kept here.
    pub(crate) pending: Mutex<Option<Box<crate::inline::Pending>>>,
    /// What settling a deferred create failed with, reported by close.
    pub(crate) settle_error: Mutex<Option<Errno>>,
    /// A read-only descriptor of an inline file: (size, data) as of its open.
    pub(crate) snapshot: Option<(u64, Vec<u8>)>,
    /// The size its writes reached, not yet sent (size_cache.rs).
    pub(crate) size: Mutex<crate::size_cache::SizeSlot>,
    /// Signalled when a send of `size` ends.
    pub(crate) size_sent: Condvar,
    /// Adjacent writes not sent yet (io/write.rs, opt-in).
    pub(crate) write_buffer: Mutex<Option<crate::io::WriteBuffer>>,
    /// The link path of a hard-linked file, where its size and attributes live
    /// (links.rs): set at open, or when a daemon first says the file was linked.
    pub(crate) linked_at: OnceLock<String>,
    /// The owner of this description's OFD and flock locks (locks.rs).
    pub(crate) lock_owner: u64,
    /// Reads and writes of chunk data through this description (up to
    /// `short_circuit::ASK_AFTER`: from then on a daemon of this node is asked to
    /// hand its local file over).
    pub(crate) transfers: std::sync::atomic::AtomicU32,
    /// Descriptors in the table naming this description (dups share it): its last
    /// close is when this reaches 0. Not `Arc::strong_count`, which other threads'
    /// passing references (a settle's or a size flush's snapshot of the waiting
    /// files, a call in flight) raise: a close that met one left its deferred
    /// create to that thread and returned before the file was there.
    descriptors: AtomicUsize,
}

impl OpenFile {
    pub(crate) fn new(path: String, file_id: u128, kind: FileKind, flags: i32) -> OpenFile {
        let f = OpenFile::unsettled(path, kind, flags, None);
        f.id.set(file_id).expect("a new cell");
        f
    }

    pub(crate) fn unsettled(
        path: String,
        kind: FileKind,
        flags: i32,
        pending: Option<Box<crate::inline::Pending>>,
    ) -> OpenFile {
        OpenFile {
            path: RwLock::new(path),
            id: OnceLock::new(),
            kind,
            flags,
            offset: Mutex::new(0),
            transfers: std::sync::atomic::AtomicU32::new(0),
            descriptors: AtomicUsize::new(0),
            pending: Mutex::new(pending),
            settle_error: Mutex::new(None),
            snapshot: None,
            size: Mutex::default(),
            size_sent: Condvar::new(),
            write_buffer: Mutex::new(None),
            clear_set_id: Mutex::new(None),
            written: AtomicBool::new(false),
            linked_at: OnceLock::new(),
            lock_owner: crate::locks::next_description_owner(),
        }
    }

    pub(crate) fn path(&self) -> String {
        self.path.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Where the file's size and attributes live: its link path once linked, else
    /// its path.
    pub(crate) fn attrs_path(&self) -> String {
        self.linked_at.get().cloned().unwrap_or_else(|| self.path())
    }

    /// The file id. Only for settled descriptors (see `Client::file`).
    pub(crate) fn file_id(&self) -> u128 {
        *self.id.get().expect("descriptor settled before use")
    }

    /// The file id, `None` while a deferred create is not sent (for trace records).
    pub(crate) fn file_id_if_known(&self) -> Option<u128> {
        self.id.get().copied()
    }

    /// Fixes the file id of a deferred create once it is settled (first call wins).
    pub(crate) fn settle_id(&self, id: u128) {
        let _ = self.id.set(id);
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
        let mut files = self.files.write().unwrap_or_else(|e| e.into_inner());
        if files.len() >= self.capacity {
            return Err(Errno(libc::EMFILE));
        }
        let following = |fd: i32| if fd >= i32::MAX - 1 { FD_FIRST } else { fd + 1 };
        let mut next = self.next_fd.lock().unwrap_or_else(|e| e.into_inner());
        // The table has a free number, so this ends within `capacity` steps.
        while files.contains_key(&*next) {
            *next = following(*next);
        }
        let fd = *next;
        *next = following(fd);
        f.descriptors.fetch_add(1, Ordering::AcqRel);
        files.insert(fd, f);
        Ok(fd)
    }

    pub(crate) fn get(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.files.read().unwrap_or_else(|e| e.into_inner()).get(&fd).cloned().ok_or(Errno(libc::EBADF))
    }

    /// Takes descriptor `fd` out; with whether it was the description's last.
    fn remove(&self, fd: i32) -> Result<(Arc<OpenFile>, bool)> {
        let f = self.files.write().unwrap_or_else(|e| e.into_inner()).remove(&fd).ok_or(Errno(libc::EBADF))?;
        let last = f.descriptors.fetch_sub(1, Ordering::AcqRel) == 1;
        Ok((f, last))
    }

    pub(crate) fn insert_file(&self, f: Arc<OpenFile>) -> Result<i32> {
        self.insert(f)
    }

    /// Whether a descriptor is open on `p`.
    pub(crate) fn is_open(&self, p: &str) -> bool {
        self.files
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .any(|f| *f.path.read().unwrap_or_else(|e| e.into_inner()) == p)
    }

    /// Descriptors open on `old` (or below it) follow its rename to `new`, as POSIX
    /// descriptors follow the file. Other processes' descriptors keep the old path
    /// and get ENOENT or ESTALE (docs/SEMANTICS.md).
    pub(crate) fn retarget(&self, old: &str, new: &str) {
        for f in self.files.read().unwrap_or_else(|e| e.into_inner()).values() {
            let mut p = f.path.write().unwrap_or_else(|e| e.into_inner());
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
    pub(crate) fn open_stat_impl(&self, path: &str, flags: i32, mode: u32) -> Result<(i32, Stat)> {
        let (fd, st, _) = self.open_resolved(path, flags, mode)?;
        Ok((fd, st))
    }

    /// `open_stat`, also returning the path the descriptor names once symlinks were
    /// followed. An inline file (inline.rs) opened for writing is first moved to
    /// chunks; opened read-only, its data comes with the open and its reads need no
    /// request.
    pub(crate) fn open_resolved(&self, path: &str, flags: i32, mode: u32) -> Result<(i32, Stat, String)> {
        self.open_fetched(path, flags, mode, 0)
    }

    /// `open_resolved`, after `fetches` fetches of a view's placeholder at `path`
    /// (each fetch replaces the placeholder; a view that replaced it again
    /// meanwhile, its object changing, is fetched again, a bounded number of times).
    fn open_fetched(&self, path: &str, flags: i32, mode: u32, fetches: u32) -> Result<(i32, Stat, String)> {
        if flags & (libc::O_CREAT | libc::O_TRUNC) != 0 {
            self.listing.invalidate();
        }
        let writable = Self::opens_writable(flags);
        // Mode bits, where this client checks them (permissions.rs).
        let checked = self.checked_caller();
        let found = self.find_for_open(self.norm(path)?, flags, mode, checked.as_ref())?;
        let p = found.path;
        // A name of a hard-linked file: its attributes are at its link path (links.rs).
        let (mut rec, linked_at) = match found.record.linked_to() {
            Some(l) => {
                let l = l.to_string();
                (self.get_stored_record(&l)?, Some(l))
            }
            None => (found.record, None),
        };
        if flags & libc::O_DIRECTORY != 0 && rec.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if let Some(who) = &checked {
            // The creator may use what it just made, whatever its mode.
            if !found.created {
                self.may_open(who, &rec, flags)?;
            }
        }
        if rec.unfetched_object().is_some() {
            // A view's entry: its object is fetched, then the file is opened.
            if fetches == 3 {
                return Err(Errno(libc::EIO));
            }
            self.fetch_object(&p, &rec)?;
            return self.open_fetched(&p, flags & !(libc::O_CREAT | libc::O_EXCL), mode, fetches + 1);
        }
        Self::check_openable(&rec, flags)?;
        let truncating = flags & libc::O_TRUNC != 0 && writable && rec.kind == FileKind::File && rec.size > 0;
        if truncating {
            // A truncate to 0 drops inline data with the rest.
            self.truncate_resolved(&p, 0)?;
            rec.size = 0;
        } else if writable {
            if let Some(data) = &found.inline {
                self.migrate_inline(&p, &rec, data)?;
            }
        }
        let st = Stat::from_record(&rec, self.chunk_size);
        let mut file = OpenFile::new(p.clone(), rec.file_id, rec.kind, flags);
        if let Some(l) = linked_at {
            let _ = file.linked_at.set(l);
        }
        if !writable && !truncating {
            file.snapshot = found.inline.map(|d| (rec.size, d));
        }
        if writable && rec.kind == FileKind::File && !crate::Credentials::is_root_caller() {
            *file.clear_set_id.lock().unwrap_or_else(|e| e.into_inner()) = crate::setid_dropped(rec.mode, true);
        }
        let fd = self.files.insert(Arc::new(file))?;
        Ok((fd, st, p))
    }

    fn opens_writable(flags: i32) -> bool {
        let acc = flags & libc::O_ACCMODE;
        acc == libc::O_WRONLY || acc == libc::O_RDWR
    }

    /// The record an open finds (or creates) at `p`, following symlinks unless
    /// O_NOFOLLOW, with its inline data where the open needs it.
    fn find_for_open(
        &self,
        mut p: String,
        flags: i32,
        mode: u32,
        checked: Option<&crate::Credentials>,
    ) -> Result<Found> {
        let mut hops = 0;
        loop {
            if self.hosts.cache_of.is_some() && flags & libc::O_EXCL == 0 {
                self.fetch_if_cached(&p)?;
            }
            let found = if flags & libc::O_CREAT != 0 && self.may_create_at(checked, &p, flags)? {
                self.create_for_open(p, flags, mode)?
            } else {
                let (record, inline) = match self.stat_data_stored(&p) {
                    // A directory of the cached file system, not in GustFS.
                    Err(Errno(libc::ENOENT)) if self.hosts.cache_of.is_some() => (self.cached_record(&p)?, None),
                    r => r?,
                };
                Found { path: p, record, inline, created: false }
            };
            if found.record.kind != FileKind::Symlink {
                return Ok(found);
            }
            if flags & libc::O_NOFOLLOW != 0 {
                return Err(Errno(libc::ELOOP));
            }
            hops += 1;
            if hops > crate::namespace::SYMLINK_HOPS_MAX {
                return Err(Errno(libc::ELOOP));
            }
            p = self.link_target_path(&found.path, &found.record.target)?;
        }
    }

    /// Whether an open with O_CREAT may make the name: a caller who may not make
    /// names in the directory still opens an existing file (without O_EXCL), as on
    /// Linux.
    fn may_create_at(&self, checked: Option<&crate::Credentials>, p: &str, flags: i32) -> Result<bool> {
        let Some(who) = checked.filter(|_| p != "/") else {
            return Ok(true);
        };
        match self.may_change_dir_of(who, p) {
            Ok(_) => Ok(true),
            Err(e) => match self.get_record(p) {
                Ok(_) if flags & libc::O_EXCL != 0 => Err(Errno(libc::EEXIST)),
                Ok(_) => Ok(false),
                Err(Errno(libc::ENOENT)) => Err(e),
                Err(other) => Err(other),
            },
        }
    }

    /// An open's create request: the record made, or the one already there (with
    /// its inline data if a writer will have to move it to chunks).
    fn create_for_open(&self, p: String, flags: i32, mode: u32) -> Result<Found> {
        if p == "/" {
            return Err(Errno(if flags & libc::O_EXCL != 0 { libc::EEXIST } else { libc::EISDIR }));
        }
        self.check_parent(&p)?;
        let fresh = Self::new_record(FileKind::File, mode, String::new());
        let fresh_id = fresh.file_id;
        let req = Request::Create { path: p.clone(), record: fresh, exclusive: flags & libc::O_EXCL != 0 };
        let daemon = self.md_daemon(&p);
        let ticket = self.create_ticket(daemon);
        let r = match self.transport.call(daemon, req)? {
            Response::Record(r) => r,
            r => return Err(crate::error::unexpected(r)),
        };
        self.claim_answered(daemon, &p);
        self.lookup_answered(ticket, daemon, &p, &r, None);
        let created = r.file_id == fresh_id;
        // An existing file with data may hold it inline: writers move it, unless
        // they truncate it (which drops the data, in open_fetched).
        let truncates = flags & libc::O_TRUNC != 0;
        if !created
            && r.kind == FileKind::File
            && r.size > 0
            && Self::opens_writable(flags)
            && !truncates
            && r.linked_to().is_none()
        {
            let (record, inline) = self.stat_data_stored(&p)?;
            return Ok(Found { path: p, record, inline, created });
        }
        Ok(Found { path: p, record: r, inline: None, created })
    }

    /// What open(2) refuses by the kind of file it finds.
    fn check_openable(rec: &Record, flags: i32) -> Result<()> {
        if rec.kind.is_device() {
            // The mount is nodev (docs/SEMANTICS.md): what open(2) of a device node
            // gives there.
            return Err(Errno(libc::EACCES));
        }
        if matches!(rec.kind, FileKind::Fifo | FileKind::Socket) {
            // A pipe or socket lives in one node's kernel; only the FUSE mount (whose
            // kernel opens them itself) gives one. ENXIO is a socket's open(2) errno.
            return Err(Errno(libc::ENXIO));
        }
        if rec.kind == FileKind::Dir && (Self::opens_writable(flags) || flags & libc::O_CREAT != 0) {
            return Err(Errno(libc::EISDIR));
        }
        Ok(())
    }

    /// Opens a file whose record the caller fetched recently, without an RPC: for a
    /// FUSE mount, which may trust attributes within their timeout. If the path names
    /// another file by now, I/O through the descriptor fails with ESTALE, as for any
    /// descriptor whose path was replaced. O_CREAT and O_TRUNC need `open`.
    pub(crate) fn open_known_impl(&self, path: &str, flags: i32, file_id: u128, kind: FileKind) -> Result<i32> {
        let p = self.norm(path)?;
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
        if writable && kind == FileKind::File {
            // Its data may be inline; a writer moves it to chunks first (one request
            // to find out, the price of not knowing the size here).
            // If the path names another file by now, I/O reports ESTALE (below).
            match self.stat_data(&p) {
                Ok((r, Some(d))) if r.file_id == file_id => self.migrate_inline(&p, &r, &d)?,
                Ok(_) | Err(Errno(libc::ENOENT)) => {}
                Err(e) => return Err(e),
            }
        }
        self.files.insert(Arc::new(OpenFile::new(p, file_id, kind, flags)))
    }

    /// The open file of `fd`, a deferred create settled first (its error, if that
    /// fails, is this call's).
    pub(crate) fn file(&self, fd: i32) -> Result<Arc<OpenFile>> {
        let f = self.files.get(fd)?;
        self.settle(&f, false)?;
        // This client's writes through any descriptor count for this one's use.
        self.flush_descriptor(&f)?;
        self.flush_all_sizes();
        Ok(f)
    }

    /// Whether reads through `fd` are served from the data its open brought (a small
    /// file opened read-only, inline.rs) and so cost no request: a front end may then
    /// read exactly the size and probe the end with a second read for free.
    pub fn reads_from_open_data(&self, fd: i32) -> bool {
        self.files.get(fd).map(|f| f.snapshot.is_some()).unwrap_or(false)
    }

    /// The open file of `fd` as it is, deferred or not (write, close, dup).
    pub(crate) fn file_unsettled(&self, fd: i32) -> Result<Arc<OpenFile>> {
        self.files.get(fd)
    }

    /// Closes a descriptor. A deferred create is settled at its last close (one
    /// request for a small file, data included); its failure (EEXIST for O_EXCL, or
    /// what the open would have said) is close's error, the descriptor closed
    /// anyway. The last close of a description that wrote data costs one more RPC:
    /// the path's daemon records IN_CLOSE_WRITE for `gust events` (best effort).
    pub(crate) fn close_impl(&self, fd: i32) -> Result<()> {
        let (f, last) = self.files.remove(fd)?;
        let sized = if last { self.flush_descriptor_closing(&f) } else { self.flush_descriptor(&f) };
        // A dup of it may still write: then only the last close settles (or a
        // path operation, or exit). A call in flight on another thread through
        // this descriptor finds the create settled and writes the ordinary way.
        // Any close ends the process's POSIX locks on the file; the last one the
        // description's OFD and flock locks (POSIX, flock(2)).
        self.release_locks_at_close(&f, last);
        if !last {
            return sized;
        }
        let r = sized.and(self.settle(&f, true));
        if f.transfers.load(Ordering::Relaxed) >= crate::short_circuit::ASK_AFTER {
            // Its local files go back to the descriptor table of the process
            // (an application's open files count against the same limit).
            self.forget_handed(f.file_id());
        }
        if r.is_ok() && f.written.load(Ordering::Relaxed) {
            let path = f.path();
            let _ = self.transport.call(self.md_daemon(&path), Request::CloseWrite { path });
        }
        r
    }

    /// A new descriptor sharing the open file description (offset, flags) of `fd`.
    pub fn dup(&self, fd: i32) -> Result<i32> {
        self.files.insert(self.file_unsettled(fd)?)
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

    /// The last close is the last descriptor's, whatever other references to the
    /// description exist (another thread's snapshot of the waiting files).
    #[test]
    fn last_close_counts_descriptors_not_references() {
        let t = FdTable::new(8);
        let f = file();
        let a = t.insert(f.clone()).unwrap();
        let b = t.insert(t.get(a).unwrap()).unwrap(); // a dup
        let passing = t.get(a).unwrap(); // as a snapshot holds one
        assert!(!t.remove(a).unwrap().1, "a dup is still open");
        assert!(t.remove(b).unwrap().1, "the last descriptor, with references left");
        assert!(Arc::strong_count(&passing) > 1);
    }

    /// Numbers wrap before i32::MAX back to the first one, skipping those in use.
    #[test]
    fn numbers_wrap_below_i32_max() {
        let t = FdTable::new(8);
        assert_eq!(t.insert(file()), Ok(3));
        *t.next_fd.lock().unwrap_or_else(|e| e.into_inner()) = i32::MAX - 2;
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

/// A set of this client's open files waiting for something (a deferred create, an
/// unsent size), with a count read without the lock, so the common case, an empty
/// set checked on every path operation, costs one atomic load.
#[derive(Default)]
pub(crate) struct FileSet {
    /// Keyed by the open file's address; weak, so a closed file never lingers.
    files: Mutex<HashMap<usize, Weak<OpenFile>>>,
    /// `files.len()`.
    count: AtomicUsize,
}

impl FileSet {
    fn key(f: &OpenFile) -> usize {
        f as *const OpenFile as usize
    }

    pub(crate) fn insert(&self, f: &Arc<OpenFile>) {
        if self.files.lock().unwrap_or_else(|e| e.into_inner()).insert(Self::key(f), Arc::downgrade(f)).is_none() {
            self.count.fetch_add(1, Ordering::Release);
        }
    }

    pub(crate) fn remove(&self, f: &OpenFile) {
        if self.files.lock().unwrap_or_else(|e| e.into_inner()).remove(&Self::key(f)).is_some() {
            self.count.fetch_sub(1, Ordering::Release);
        }
    }

    /// Whether no file is in the set (no lock taken).
    pub(crate) fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// The files still open, none if the set is empty (no lock taken then).
    pub(crate) fn snapshot(&self) -> Vec<Arc<OpenFile>> {
        if self.count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.files.lock().unwrap_or_else(|e| e.into_inner()).values().filter_map(Weak::upgrade).collect()
    }
}

/// What an open found at a path (after symlinks): its record, its inline data where
/// the open needs it, and whether this open created it.
struct Found {
    path: String,
    record: Record,
    inline: Option<Vec<u8>>,
    created: bool,
}
