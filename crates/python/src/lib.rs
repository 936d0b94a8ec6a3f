//! `gustfs._native`: the GustFS client core for Python.
//!
//! One class, `Client`, whose methods are the client core's calls with Python types:
//! paths as `str`, data as any object with the buffer protocol (bytes, bytearray,
//! memoryview, numpy arrays), results as ints, bytes and tuples, failures as
//! `OSError` with the errno, so CPython picks the subclass (`FileNotFoundError`,
//! `IsADirectoryError`, ...). The pure-Python package `gustfs` (python/gustfs)
//! builds the user-facing API on it: file objects on `io.RawIOBase`, `stat_result`,
//! `scandir`, `walk`, `rmtree`, and the fsspec file system.
//!
//! Not for: semantics. Everything a call means is decided by the client core
//! ([`gust_client::Client`]); this layer only converts types, maps paths and errors,
//! and releases the GIL around every call into the core, so that threads of one
//! Python process overlap their RPCs.
//!
//! Copies: reads into a caller's buffer (`readinto`, `preadinto`) and writes from
//! one (`write`, `pwrite`) hand the buffer's memory to the core as a slice, so the
//! bytes go straight between the socket and the caller's object. `read` builds its
//! `bytes` in place; only a short read at the end of a file copies (limited-API
//! `bytes` cannot shrink). `readall` reads a file of 1 MiB or more, and a small
//! file whose data came with its open (inline), straight into its `bytes`; other
//! files take one copy, which is cheaper than the round trip it saves (see
//! `readall_bytes`).
//!
//! Fork: a `Client` stays usable in a child after `os.fork` (multiprocessing
//! workers): the core's transport drops the parent's pooled connections in the
//! child and opens its own; the open-file table is inherited, as descriptors are.

use gust_client::{Client as Core, ClientOptions, Errno, Kind, Record, Stat, WholeFile};
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::path::Path;
use std::sync::Arc;

/// Bytes `readall` asks for beyond the size it expects: its read must come back
/// short to prove the end of the file, without a second round trip.
const READALL_SLACK_BYTES: usize = 1;
/// From this size on, `readall` reads into the result directly (see readall_bytes).
const READALL_EXACT_BYTES_MIN: usize = 1 << 20;
/// First buffer of `readall` when the size is unknown or the file grew meanwhile;
/// doubled per round up to the core's transfer window.
const READALL_STEP_BYTES_MIN: usize = 64 << 10;
const READALL_STEP_BYTES_MAX: usize = 16 << 20;

/// The process umask, read once, at the first create (reading it means setting it,
/// so it is not read per call; the preload library does the same). Creates apply it
/// as the kernel would for os.open and os.mkdir.
fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        // SAFETY: umask has no preconditions; the old value is put back at once.
        unsafe {
            let m = libc::umask(0o022);
            libc::umask(m);
            m as u32
        }
    })
}

/// Text of an errno, as `os.strerror` gives it.
fn strerror(e: i32) -> String {
    let mut buf = [0 as libc::c_char; 128];
    // SAFETY: the buffer is valid for its length; the XSI strerror_r (what the libc
    // crate binds on Linux) always NUL-terminates what it writes.
    let rc = unsafe { libc::strerror_r(e, buf.as_mut_ptr(), buf.len()) };
    if rc != 0 {
        return format!("Unknown error {e}");
    }
    // SAFETY: NUL-terminated above.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

/// The client core, shared by the Python object and every call in flight.
#[pyclass(frozen, module = "gustfs._native")]
pub struct Client {
    core: Arc<Core>,
    hosts_file: String,
}

impl Client {
    /// An `OSError(errno, strerror, filename)`; CPython turns it into the subclass
    /// for that errno. EIO names the daemon that failed, as the C API does.
    fn err(&self, e: Errno, subject: &str) -> PyErr {
        PyOSError::new_err((e.0, self.message(e), subject.to_string()))
    }

    fn err2(&self, e: Errno, a: &str, b: &str) -> PyErr {
        PyOSError::new_err((e.0, self.message(e), a.to_string(), py_none_i32(), b.to_string()))
    }

    fn err_fd(&self, e: Errno) -> PyErr {
        PyOSError::new_err((e.0, self.message(e)))
    }

    fn message(&self, e: Errno) -> String {
        let mut m = strerror(e.0);
        if e.0 == libc::EIO {
            if let Some(t) = self.core.last_transport_error() {
                m.push_str(&format!(" ({t})"));
            }
        }
        m
    }

    /// A caller's path inside the file system: a path under the instance's mount
    /// directory loses that prefix; a relative path is taken from the root (GustFS
    /// has no working directory).
    fn map(&self, p: &str) -> PyResult<String> {
        if p.is_empty() {
            return Err(PyOSError::new_err((libc::ENOENT, strerror(libc::ENOENT), p.to_string())));
        }
        if !p.starts_with('/') {
            return Ok(format!("/{p}"));
        }
        Ok(self.core.internal_path(p).unwrap_or_else(|| p.to_string()))
    }
}

/// `None` in the winerror slot of OSError's five-argument form.
fn py_none_i32() -> Option<i32> {
    None
}

/// Kind of an entry as one letter: "f" file, "d" directory, "l" symlink, "p" FIFO,
/// "s" socket.
fn kind_letter(k: Kind) -> &'static str {
    match k {
        Kind::File => "f",
        Kind::Dir => "d",
        Kind::Symlink => "l",
        Kind::Fifo => "p",
        Kind::Socket => "s",
        Kind::BlockDevice => "b",
        Kind::CharDevice => "c",
    }
}

/// The fields of `os.stat_result` that GustFS has, in its order: mode, ino, dev,
/// nlink, uid, gid, size, atime_ns, mtime_ns, ctime_ns, blksize, blocks.
type StatTuple = (u32, u64, u64, u32, u32, u32, u64, i64, i64, i64, u64, u64);

/// (f_bsize, f_frsize, f_blocks, f_bfree, f_bavail, f_files, f_ffree, f_favail,
/// f_flag, f_namemax): os.statvfs_result's fields in its order, but f_fsid.
type StatVfsTuple = (u64, u64, u64, u64, u64, u64, u64, u64, u64, u64);

fn stat_tuple(s: &Stat) -> StatTuple {
    (
        s.st_mode(),
        s.ino,
        gust_client::GUST_DEV,
        s.nlink,
        s.uid,
        s.gid,
        s.size,
        s.atime_ns,
        s.mtime_ns,
        s.ctime_ns,
        s.blksize,
        s.blocks,
    )
}

/// A caller's buffer as raw parts, checked: C-contiguous, and writable if asked.
fn buffer_parts(buf: &PyUntypedBuffer, writable: bool) -> PyResult<(usize, usize)> {
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err("GustFS needs a contiguous buffer"));
    }
    if writable && buf.readonly() {
        return Err(PyBufferError::new_err("buffer is read-only; readinto needs a writable one"));
    }
    Ok((buf.buf_ptr() as usize, buf.len_bytes()))
}

#[pymethods]
impl Client {
    /// Connects to the instance of `hosts_file`, or of `$GUST_HOSTS_FILE` when None.
    /// One RPC (stat of "/"), so a stopped instance fails here, not at first I/O.
    #[new]
    #[pyo3(signature = (hosts_file=None))]
    fn new(py: Python<'_>, hosts_file: Option<String>) -> PyResult<Self> {
        let path = match hosts_file {
            Some(p) => p,
            None => match std::env::var("GUST_HOSTS_FILE") {
                Ok(p) if !p.is_empty() => p,
                _ => {
                    return Err(PyOSError::new_err((
                        libc::EINVAL,
                        "GUST_HOSTS_FILE is not set: run `eval \"$(gust env)\"` or pass hosts_file",
                    )))
                }
            },
        };
        let p2 = path.clone();
        let core = py.detach(move || Core::open_instance(Path::new(&p2), ClientOptions::from_env()));
        let core = core.map_err(|msg| {
            // As in the C API: the errno is the file's own where it is the cause.
            let errno = match std::fs::metadata(&path) {
                Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
                Ok(m) if m.is_dir() => libc::EISDIR,
                Ok(_) => libc::EINVAL,
            };
            // The core's io::Error text ends in " (os error N)"; the errno says that.
            let msg = msg.replace(&format!(" (os error {errno})"), "");
            let msg = if msg.contains(&path) { msg } else { format!("hosts file {path}: {msg}") };
            PyOSError::new_err((errno, msg, path.clone()))
        })?;
        let c = Client { core: Arc::new(core), hosts_file: path.clone() };
        // What open descriptors hold back goes out at exit (gust-client's exit.rs).
        gust_client::settle_at_exit(&c.core);
        let core = c.core.clone();
        py.detach(move || core.stat("/")).map_err(|e| {
            PyOSError::new_err((
                e.0,
                format!("hosts file {path}: instance not reachable: {}", c.message(e)),
                path.clone(),
            ))
        })?;
        Ok(c)
    }

    #[getter]
    fn hosts_file(&self) -> &str {
        &self.hosts_file
    }

    /// The path prefix front ends serve from GustFS ("/gustfs"); paths under it
    /// are accepted everywhere and mean the path without it.
    #[getter]
    fn mountdir(&self) -> &str {
        &self.core.hosts().mountdir
    }

    #[getter]
    fn daemon_count(&self) -> u32 {
        self.core.daemon_count()
    }

    #[getter]
    fn chunk_size(&self) -> u64 {
        self.core.chunk_size_bytes()
    }

    /// Lookups this process answered from the node cache (tests, benchmarks).
    #[getter]
    fn node_cache_hits(&self) -> u64 {
        self.core.node_cache_hits()
    }

    /// The path inside the file system that `path` names.
    fn internal_path(&self, path: &str) -> PyResult<String> {
        let p = self.map(path)?;
        gust_client::normalize(&p).map_err(|e| self.err(e, path))
    }

    // ----- descriptors --------------------------------------------------------------

    /// Opens `path` with os.O_* `flags`; returns (descriptor, size at open, kind
    /// letter). A create applies the umask to `mode`, as os.open does.
    #[pyo3(signature = (path, flags, mode=0o666))]
    fn open(&self, py: Python<'_>, path: &str, flags: i32, mode: u32) -> PyResult<(i32, u64, &'static str)> {
        let p = self.map(path)?;
        let core = &self.core;
        let mode = if flags & libc::O_CREAT != 0 { mode & !umask() & 0o7777 } else { mode };
        let (fd, st) = py.detach(|| core.open_stat(&p, flags, mode)).map_err(|e| self.err(e, path))?;
        Ok((fd, st.size, kind_letter(st.kind)))
    }

    fn close(&self, py: Python<'_>, fd: i32) -> PyResult<()> {
        // No RPC (the open-file table only), but it takes the table's lock, which
        // is never to be waited for while holding the GIL.
        let core = &self.core;
        py.detach(|| core.close(fd)).map_err(|e| self.err_fd(e))
    }

    fn dup(&self, py: Python<'_>, fd: i32) -> PyResult<i32> {
        let core = &self.core;
        py.detach(|| core.dup(fd)).map_err(|e| self.err_fd(e))
    }

    /// Up to `n` bytes from the descriptor's offset.
    fn read<'py>(&self, py: Python<'py>, fd: i32, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        self.read_at(py, fd, n, None)
    }

    /// Up to `n` bytes at `offset`; the descriptor's offset is unchanged.
    fn pread<'py>(&self, py: Python<'py>, fd: i32, n: usize, offset: u64) -> PyResult<Bound<'py, PyBytes>> {
        self.read_at(py, fd, n, Some(offset))
    }

    /// Reads into `buf` (any writable contiguous buffer) from the descriptor's
    /// offset, straight from the sockets into its memory; returns the byte count.
    fn readinto(&self, py: Python<'_>, fd: i32, buf: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.read_into(py, fd, buf, None)
    }

    fn preadinto(&self, py: Python<'_>, fd: i32, buf: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        self.read_into(py, fd, buf, Some(offset))
    }

    /// Everything from the descriptor's offset to the end of the file. `expected`
    /// is the size the caller believes remains (from open or fstat). See
    /// `readall_bytes` for how few round trips and copies that takes.
    #[pyo3(signature = (fd, expected=None))]
    fn readall<'py>(&self, py: Python<'py>, fd: i32, expected: Option<u64>) -> PyResult<Bound<'py, PyBytes>> {
        readall_bytes(py, &self.core, fd, expected, &|e| self.err_fd(e))
    }

    /// Writes all of `data` (any contiguous buffer) at the descriptor's offset,
    /// straight from its memory; returns the byte count.
    fn write(&self, py: Python<'_>, fd: i32, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.write_from(py, fd, data, None)
    }

    fn pwrite(&self, py: Python<'_>, fd: i32, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        self.write_from(py, fd, data, Some(offset))
    }

    /// os.SEEK_SET/CUR/END; returns the new offset. SEEK_END costs one RPC.
    fn lseek(&self, py: Python<'_>, fd: i32, offset: i64, whence: i32) -> PyResult<u64> {
        let core = &self.core;
        py.detach(|| core.lseek(fd, offset, whence)).map_err(|e| self.err_fd(e))
    }

    fn fstat(&self, py: Python<'_>, fd: i32) -> PyResult<StatTuple> {
        let core = &self.core;
        py.detach(|| core.fstat(fd)).map(|s| stat_tuple(&s)).map_err(|e| self.err_fd(e))
    }

    fn ftruncate(&self, py: Python<'_>, fd: i32, size: u64) -> PyResult<()> {
        let core = &self.core;
        py.detach(|| core.ftruncate(fd, size)).map_err(|e| self.err_fd(e))
    }

    fn fsync(&self, py: Python<'_>, fd: i32) -> PyResult<()> {
        let core = &self.core;
        py.detach(|| core.fsync(fd)).map_err(|e| self.err_fd(e))
    }

    /// (path inside the file system, open flags) of a descriptor.
    fn fd_info(&self, py: Python<'_>, fd: i32) -> PyResult<(String, i32)> {
        let core = &self.core;
        py.detach(|| core.fd_info(fd)).map_err(|e| self.err_fd(e))
    }

    // ----- whole files ----------------------------------------------------------------

    /// The whole content of `path` in one call: `read_bytes`, and fsspec's
    /// `cat_file`. A file whose data is inline (up to INLINE_BYTES_MAX bytes) is one
    /// request, its data read from the socket straight into the `bytes` object
    /// returned (made, under the GIL for a moment, when the record says its size);
    /// any other file is opened with the record that request brought (no second
    /// lookup) and read to its end: one more round trip.
    fn read_file<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyBytes>> {
        let p = self.map(path)?;
        match self.read_whole(py, path, &p)? {
            Ok((data, _)) => Ok(data),
            Err(rec) => self.read_opened(py, path, &p, rec),
        }
    }

    /// The whole content of each file of `paths`, in order: a list whose entries
    /// are bytes, or the OSError that reading that file alone would raise (one
    /// file's failure does not fail the others). The requests of a batch are all
    /// sent before any reply is read (the core's `read_many_into`): the inline
    /// files of a batch cost one request each, their wake-ups and system calls
    /// shared; other files are then opened and read one by one, as `read_file`.
    fn read_files<'py>(&self, py: Python<'py>, paths: Vec<String>) -> PyResult<Bound<'py, PyList>> {
        let mapped: Vec<PyResult<String>> = paths.iter().map(|p| self.map(p)).collect();
        // Paths that do not map fail alone; the others go to the core.
        let asked: Vec<usize> = (0..paths.len()).filter(|&i| mapped[i].is_ok()).collect();
        let internal: Vec<&str> = asked.iter().map(|&i| mapped[i].as_ref().expect("asked").as_str()).collect();
        let mut made: Vec<Option<Py<PyBytes>>> = (0..asked.len()).map(|_| None).collect();
        let core = &self.core;
        let found = py.detach(|| {
            core.read_many_into(&internal, &mut |k: usize, rec: &Record| {
                // SAFETY: `made` keeps the object past the read; whole_file fills the rest.
                let (b, data) = unsafe { unset_bytes(rec.size) }?;
                made[k] = Some(b);
                Some(data)
            })
        });
        let mut found = found.into_iter().zip(made);
        let out = PyList::empty(py);
        for (path, p) in paths.iter().zip(mapped) {
            let one = p.and_then(|p| {
                let (f, made) = found.next().expect("an answer per asked path");
                match self.whole_file(py, path, f, made)? {
                    Ok((data, _)) => Ok(data),
                    Err(rec) => self.read_opened(py, path, &p, rec),
                }
            });
            match one {
                Ok(b) => out.append(b)?,
                Err(e) => out.append(e.into_value(py))?,
            }
        }
        Ok(out)
    }

    /// Opens `path` read-only for a file object (`gustfs.open(path, "rb")`):
    /// (data, descriptor, size, kind letter, stat fields). An inline file comes with
    /// its whole content as a bytes object (one request, read straight into it) and
    /// no descriptor (-1): the file object serves reads from the data, which is the
    /// file as of the open, as the core does for such a file. Anything else gets a
    /// descriptor as `open` gives one (no data, no stat fields).
    #[allow(clippy::type_complexity)]
    fn open_read<'py>(
        &self,
        py: Python<'py>,
        path: &str,
    ) -> PyResult<(Option<Bound<'py, PyBytes>>, i32, u64, &'static str, Option<StatTuple>)> {
        let p = self.map(path)?;
        let core = &self.core;
        match self.read_whole(py, path, &p)? {
            Ok((data, rec)) => {
                let st = Stat::from_record(&rec, core.chunk_size_bytes());
                Ok((Some(data), -1, rec.size, "f", Some(stat_tuple(&st))))
            }
            Err(Some(r)) if r.kind == Kind::File => {
                let fd = py.detach(|| core.open_known(&p, libc::O_RDONLY, r.file_id, Kind::File));
                Ok((None, fd.map_err(|e| self.err(e, path))?, r.size, "f", None))
            }
            Err(_) => {
                let (fd, st) = py.detach(|| core.open_stat(&p, libc::O_RDONLY, 0)).map_err(|e| self.err(e, path))?;
                Ok((None, fd, st.size, kind_letter(st.kind), None))
            }
        }
    }

    /// Creates or replaces the file at `path` with `data` (any contiguous buffer):
    /// open, write and close in one call, through the core's deferred create, so a
    /// file of up to `INLINE_BYTES_MAX` bytes made this way is one request and is
    /// stored with its record (read back by `open` in one request, too). Errors of
    /// the create (EISDIR, ENOENT of the directory, ...) come from the close here.
    #[pyo3(signature = (path, data, mode=0o666))]
    fn write_file(&self, py: Python<'_>, path: &str, data: &Bound<'_, PyAny>, mode: u32) -> PyResult<usize> {
        let p = self.map(path)?;
        let view = PyUntypedBuffer::get(data)?;
        let (ptr, len) = buffer_parts(&view, false)?;
        let core = &self.core;
        let mode = mode & !umask() & 0o7777;
        let r = py.detach(move || {
            // SAFETY: as in read_into; only read here, while `view` holds the buffer.
            let b = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            let fd = core.open_deferred_whole(&p, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, mode)?;
            let mut done = 0;
            let mut r = Ok(());
            while done < b.len() {
                match core.write(fd, &b[done..]) {
                    Ok(n) => done += n,
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            }
            let closed = core.close(fd);
            r.and(closed).map(|()| done)
        });
        drop(view);
        r.map_err(|e| self.err(e, path))
    }

    // ----- namespace --------------------------------------------------------------------

    /// `os.stat`/`os.lstat` fields (see StatTuple); `follow_symlinks` as in os.stat.
    #[pyo3(signature = (path, follow_symlinks=true))]
    fn stat(&self, py: Python<'_>, path: &str, follow_symlinks: bool) -> PyResult<StatTuple> {
        let p = self.map(path)?;
        let core = &self.core;
        let r = py.detach(|| if follow_symlinks { core.stat(&p) } else { core.lstat(&p) });
        r.map(|s| stat_tuple(&s)).map_err(|e| self.err(e, path))
    }

    /// os.access: True if `mode` (os.F_OK, R_OK, W_OK, X_OK) is granted.
    fn access(&self, py: Python<'_>, path: &str, mode: i32) -> PyResult<bool> {
        let p = self.map(path)?;
        let core = &self.core;
        match py.detach(|| core.access(&p, mode)) {
            Ok(()) => Ok(true),
            Err(Errno(libc::EACCES)) | Err(Errno(libc::ENOENT)) | Err(Errno(libc::ENOTDIR)) => Ok(false),
            Err(e) => Err(self.err(e, path)),
        }
    }

    /// Entries of a directory as (name, kind letter) pairs, unordered (the listing
    /// merges all daemons), without "." and "..".
    fn scandir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<(String, &'static str)>> {
        let p = self.map(path)?;
        let core = &self.core;
        let entries = py.detach(|| core.read_dir(&p)).map_err(|e| self.err(e, path))?;
        Ok(entries.into_iter().map(|e| (e.name, kind_letter(e.kind))).collect())
    }

    fn listdir(&self, py: Python<'_>, path: &str) -> PyResult<Vec<String>> {
        let p = self.map(path)?;
        let core = &self.core;
        let entries = py.detach(|| core.read_dir(&p)).map_err(|e| self.err(e, path))?;
        Ok(entries.into_iter().map(|e| e.name).collect())
    }

    #[pyo3(signature = (path, mode=0o777))]
    fn mkdir(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        let mode = mode & !umask() & 0o7777;
        py.detach(|| core.mkdir(&p, mode)).map_err(|e| self.err(e, path))
    }

    fn rmdir(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        py.detach(|| core.rmdir(&p)).map_err(|e| self.err(e, path))
    }

    fn unlink(&self, py: Python<'_>, path: &str) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        py.detach(|| core.unlink(&p)).map_err(|e| self.err(e, path))
    }

    /// POSIX rename: replaces an existing target (a directory only if empty).
    fn rename(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let (a, b) = (self.map(src)?, self.map(dst)?);
        let core = &self.core;
        py.detach(|| core.rename(&a, &b)).map_err(|e| self.err2(e, src, dst))
    }

    /// A hard link: `dst` becomes another name of the file at `src` (os.link).
    fn link(&self, py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
        let (a, b) = (self.map(src)?, self.map(dst)?);
        let core = &self.core;
        py.detach(|| core.link(&a, &b)).map_err(|e| self.err2(e, src, dst))
    }

    fn truncate(&self, py: Python<'_>, path: &str, size: u64) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        py.detach(|| core.truncate(&p, size)).map_err(|e| self.err(e, path))
    }

    /// Creates `link` pointing at `target`. An absolute target is a path inside
    /// GustFS, like every path of this module; it is stored under the mount
    /// directory ("/gustfs/a"), which is what the client core follows and what
    /// programs using the preload library or a FUSE mount see. Relative targets
    /// are stored as given.
    fn symlink(&self, py: Python<'_>, target: &str, link: &str) -> PyResult<()> {
        let l = self.map(link)?;
        let mountdir = self.core.hosts().mountdir.trim_end_matches('/');
        let stored = if target.starts_with('/') && !mountdir.is_empty() && self.core.internal_path(target).is_none() {
            format!("{mountdir}{target}")
        } else {
            target.to_string()
        };
        let core = &self.core;
        py.detach(|| core.symlink(&stored, &l)).map_err(|e| self.err2(e, target, link))
    }

    /// The target of a symlink; an absolute target under the mount directory comes
    /// back as the path inside GustFS (the inverse of `symlink`).
    fn readlink(&self, py: Python<'_>, path: &str) -> PyResult<String> {
        let p = self.map(path)?;
        let core = &self.core;
        let t = py.detach(|| core.readlink(&p)).map_err(|e| self.err(e, path))?;
        if t.starts_with('/') && !self.core.hosts().mountdir.trim_end_matches('/').is_empty() {
            if let Some(inner) = self.core.internal_path(&t) {
                return Ok(inner);
            }
        }
        Ok(t)
    }

    fn chmod(&self, py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        py.detach(|| core.chmod(&p, mode)).map_err(|e| self.err(e, path))
    }

    /// The value of extended attribute `name` (os.getxattr).
    fn getxattr<'py>(&self, py: Python<'py>, path: &str, name: &str, follow: bool) -> PyResult<Bound<'py, PyBytes>> {
        let p = self.map(path)?;
        let core = &self.core;
        let v = py.detach(|| core.getxattr(&p, name, follow)).map_err(|e| self.err(e, path))?;
        Ok(PyBytes::new(py, &v))
    }

    /// The names of the extended attributes (os.listxattr).
    fn listxattr(&self, py: Python<'_>, path: &str, follow: bool) -> PyResult<Vec<String>> {
        let p = self.map(path)?;
        let core = &self.core;
        let v = py.detach(|| core.listxattr(&p, follow)).map_err(|e| self.err(e, path))?;
        Ok(v.split(|b| *b == 0).filter(|n| !n.is_empty()).map(|n| String::from_utf8_lossy(n).into_owned()).collect())
    }

    /// Sets (`value` given) or removes extended attribute `name` (os.setxattr with
    /// its flags, os.removexattr).
    fn setxattr(
        &self,
        py: Python<'_>,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
        flags: u32,
        follow: bool,
    ) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        py.detach(|| match value {
            Some(v) => core.setxattr(&p, name, v, flags, follow),
            None => core.removexattr(&p, name, follow),
        })
        .map_err(|e| self.err(e, path))
    }

    /// Sets times in nanoseconds since the epoch; None leaves one as it is.
    #[pyo3(signature = (path, atime_ns, mtime_ns, follow_symlinks=true))]
    fn utime(
        &self,
        py: Python<'_>,
        path: &str,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
        follow_symlinks: bool,
    ) -> PyResult<()> {
        let p = self.map(path)?;
        let core = &self.core;
        py.detach(|| core.utimens(&p, atime_ns, mtime_ns, follow_symlinks)).map_err(|e| self.err(e, path))
    }

    /// The fields of os.statvfs_result but f_fsid (see StatVfsTuple).
    fn statvfs(&self, py: Python<'_>) -> PyResult<StatVfsTuple> {
        let core = &self.core;
        let s = py.detach(|| core.statfs()).map_err(|e| self.err(e, "/"))?;
        let v = s.to_libc_statvfs();
        Ok((
            v.f_bsize,
            v.f_frsize,
            v.f_blocks,
            v.f_bfree,
            v.f_bavail,
            v.f_files,
            v.f_ffree,
            v.f_favail,
            v.f_flag,
            v.f_namemax,
        ))
    }
}

/// The buffer of a bytes object, writable: only for one just made and not yet
/// shared (bytes are immutable once anyone else can see them).
/// A new bytes object of `size` bytes whose contents are unset, and its buffer for
/// a read to fill; None if Python is out of memory (the caller's ordinary path then
/// reports it). Takes the GIL for a moment.
///
/// # Safety
/// The caller keeps the object alive while it uses the buffer, and fills the
/// buffer before anyone else sees the object (the data, then zeros past it:
/// `whole_file`).
unsafe fn unset_bytes<'b>(size: u64) -> Option<(Py<PyBytes>, &'b mut [u8])> {
    let size = isize::try_from(size).ok()?;
    Python::attach(|py| {
        // SAFETY: with a NULL source, PyBytes_FromStringAndSize returns a new bytes
        // object of `size` bytes whose contents are unset.
        let obj = unsafe { pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size) };
        if obj.is_null() {
            let _ = PyErr::take(py);
            return None;
        }
        // SAFETY: a new reference to a bytes object (checked non-null).
        let b: Bound<'_, PyBytes> = unsafe { Bound::from_owned_ptr(py, obj).cast_into_unchecked() };
        // SAFETY: the object's buffer of `size` bytes stays put while the returned
        // reference to the object lives; callers keep it past the read into it.
        let data = unsafe { std::slice::from_raw_parts_mut(bytes_buffer(&b), size as usize) };
        Some((b.unbind(), data))
    })
}

fn bytes_buffer(b: &Bound<'_, PyBytes>) -> *mut u8 {
    // SAFETY: `b` is a live bytes object; PyBytes_AsString cannot fail for one.
    unsafe { pyo3::ffi::PyBytes_AsString(b.as_ptr()) as *mut u8 }
}

/// Reads from the descriptor's offset to the end of the file, `expected` being the
/// size the caller believes remains.
///
/// Small files (under READALL_EXACT_BYTES_MIN): one read of `expected + 1` bytes
/// comes back short at the end of the file, which proves the end in the same round
/// trip; the price is one copy into the result (limited-API `bytes` cannot shrink),
/// which costs less than the second round trip a read of exactly `expected` bytes
/// would need (a 100 KiB copy is ~10 us, a round trip 30-60 us).
///
/// Large files: the read goes straight into the `bytes` object, then a second
/// read proves the end; for them the copy would cost more than the round trip,
/// and it would double the memory the read needs.
fn readall_bytes<'py>(
    py: Python<'py>,
    core: &Core,
    fd: i32,
    expected: Option<u64>,
    err: &dyn Fn(Errno) -> PyErr,
) -> PyResult<Bound<'py, PyBytes>> {
    // Exact reads: straight into the result, then a read past the end to prove it,
    // which for a large file is cheap next to the copy it saves, and for a small file
    // whose data came with the open costs no request at all.
    let exact = |e: u64| e >= READALL_EXACT_BYTES_MIN as u64 || (e > 0 && core.reads_from_open_data(fd));
    match expected {
        Some(e) if exact(e) && e <= isize::MAX as u64 => {
            let mut got = Ok(0usize);
            let full = PyBytes::new_with(py, e as usize, |b| {
                got = py.detach(|| core.read(fd, b));
                Ok(())
            })?;
            let got = got.map_err(err)?;
            if got < e as usize {
                return Ok(PyBytes::new(py, &full.as_bytes()[..got])); // shrank meanwhile
            }
            // The probe for the end: one byte, not a vector of READALL_STEP_BYTES_MIN
            // zeroed per file (a tenth of a loader worker's CPU went to that memset).
            let mut probe = [0u8; 1];
            let n = py.detach(|| core.read(fd, &mut probe)).map_err(err)?;
            if n == 0 {
                return Ok(full);
            }
            let mut rest = probe.to_vec();
            rest.extend(py.detach(|| read_to_end(core, fd, None)).map_err(err)?);
            let mut all = full.as_bytes().to_vec(); // grew meanwhile
            all.extend_from_slice(&rest);
            Ok(PyBytes::new(py, &all))
        }
        _ => {
            let data = py.detach(|| read_to_end(core, fd, expected)).map_err(err)?;
            Ok(PyBytes::new(py, &data))
        }
    }
}

/// Reads from the descriptor's offset to the end of the file into a vector.
fn read_to_end(core: &Core, fd: i32, expected: Option<u64>) -> Result<Vec<u8>, Errno> {
    let mut want = match expected {
        Some(e) => (e as usize).saturating_add(READALL_SLACK_BYTES),
        None => READALL_STEP_BYTES_MIN,
    };
    let mut out: Vec<u8> = Vec::new();
    loop {
        let start = out.len();
        out.resize(start + want, 0);
        let n = core.read(fd, &mut out[start..])?;
        out.truncate(start + n);
        if n < want {
            return Ok(out);
        }
        want = (want * 2).clamp(READALL_STEP_BYTES_MIN, READALL_STEP_BYTES_MAX);
    }
}

impl Client {
    /// An inline file's content as a bytes object of its size, read from the socket
    /// straight into it (made, under the GIL for a moment, when the record says the
    /// size), with its record; otherwise the record if one was fetched (Err), for
    /// the ordinary open. A directory is EISDIR here, as opening one to read it is.
    #[allow(clippy::type_complexity)]
    fn read_whole<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        p: &str,
    ) -> PyResult<Result<(Bound<'py, PyBytes>, Record), Option<Record>>> {
        let core = &self.core;
        let mut made: Option<Py<PyBytes>> = None;
        let found = py.detach(|| {
            core.read_whole_into(p, &mut |rec: &Record| {
                // SAFETY: `made` keeps the object past the read; whole_file fills the rest.
                let (b, data) = unsafe { unset_bytes(rec.size) }?;
                made = Some(b);
                Some(data)
            })
        });
        self.whole_file(py, path, found, made)
    }

    /// What `read_whole` returns, from what `read_whole_into` (or one entry of
    /// `read_many_into`) found and the bytes object its placer made.
    #[allow(clippy::type_complexity)]
    fn whole_file<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        found: Result<WholeFile, Errno>,
        made: Option<Py<PyBytes>>,
    ) -> PyResult<Result<(Bound<'py, PyBytes>, Record), Option<Record>>> {
        match found.map_err(|e| self.err(e, path))? {
            WholeFile::Placed { record, len } => {
                let b = made.expect("the placer made the bytes").into_bound(py);
                if (len as u64) < record.size {
                    // Stored data shorter than the size (a truncate grew the file).
                    // SAFETY: the object is new and still only ours (unset_bytes).
                    unsafe { std::ptr::write_bytes(bytes_buffer(&b).add(len), 0, record.size as usize - len) };
                }
                Ok(Ok((b, record)))
            }
            WholeFile::Other(Some(rec)) if rec.kind == Kind::Dir => {
                Err(PyOSError::new_err((libc::EISDIR, strerror(libc::EISDIR), path.to_string())))
            }
            WholeFile::Other(rec) => Ok(Err(rec)),
        }
    }

    /// The rest of `read_file` for a file `read_whole` did not read: opened with the
    /// record it brought, if any (no second lookup), and read to its end.
    fn read_opened<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        p: &str,
        rec: Option<Record>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let core = &self.core;
        let (fd, size) = match rec {
            Some(r) if r.kind == Kind::File => {
                let fd = py.detach(|| core.open_known(p, libc::O_RDONLY, r.file_id, Kind::File));
                (fd.map_err(|e| self.err(e, path))?, r.size)
            }
            _ => {
                let (fd, st) = py.detach(|| core.open_stat(p, libc::O_RDONLY, 0)).map_err(|e| self.err(e, path))?;
                (fd, st.size)
            }
        };
        let r = readall_bytes(py, core, fd, Some(size), &|e| self.err(e, path));
        let _ = py.detach(|| core.close(fd));
        r
    }

    fn read_at<'py>(&self, py: Python<'py>, fd: i32, n: usize, at: Option<u64>) -> PyResult<Bound<'py, PyBytes>> {
        if n > isize::MAX as usize {
            return Err(PyValueError::new_err("read size too large"));
        }
        let core = &self.core;
        let mut got = 0usize;
        // The bytes object is the destination: no copy unless the read comes up short.
        let full = PyBytes::new_with(py, n, |b| {
            got = py
                .detach(|| match at {
                    None => core.read(fd, b),
                    Some(o) => core.pread(fd, b, o),
                })
                .map_err(|e| self.err_fd(e))?;
            Ok(())
        })?;
        if got == n {
            Ok(full)
        } else {
            Ok(PyBytes::new(py, &full.as_bytes()[..got]))
        }
    }

    fn read_into(&self, py: Python<'_>, fd: i32, buf: &Bound<'_, PyAny>, at: Option<u64>) -> PyResult<usize> {
        let view = PyUntypedBuffer::get(buf)?;
        let (ptr, len) = buffer_parts(&view, true)?;
        let core = &self.core;
        let r = py.detach(move || {
            // SAFETY: the buffer export (`view`) stays alive until after this closure
            // and pins the memory: an exporter such as bytearray refuses to resize
            // while exported. It is writable and C-contiguous (checked above).
            let b = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
            match at {
                None => core.read(fd, b),
                Some(o) => core.pread(fd, b, o),
            }
        });
        drop(view);
        r.map_err(|e| self.err_fd(e))
    }

    fn write_from(&self, py: Python<'_>, fd: i32, data: &Bound<'_, PyAny>, at: Option<u64>) -> PyResult<usize> {
        let view = PyUntypedBuffer::get(data)?;
        let (ptr, len) = buffer_parts(&view, false)?;
        let core = &self.core;
        let r = py.detach(move || {
            // SAFETY: as in read_into; only read here.
            let b = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            match at {
                None => core.write(fd, b),
                Some(o) => core.pwrite(fd, b, o),
            }
        });
        drop(view);
        r.map_err(|e| self.err_fd(e))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add("GUST_DEV", gust_client::GUST_DEV)?;
    Ok(())
}
