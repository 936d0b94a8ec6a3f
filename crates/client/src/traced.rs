//! The traced entry points: each public operation records one trace record (path
//! or file, offset, size, latency, daemon, result) when its tracepoint is on
//! (gust-trace; `GUST_TRACE=write,read` for a client process), around the
//! operation its concept module implements (`*_impl`). While a tracepoint is off a
//! call costs one relaxed load and a branch more than the operation itself.
//!
//! The daemon recorded is the one that holds the path's metadata record, or for a
//! read or write the one that holds its first chunk.
//!
//! Not for: what the operations do (their modules); the record format (gust-trace).

use crate::{normalize, Client, DirStream, Errno, Result, Stat, StatFs, WholeFile};
use gust_placement::Distributor;
use gust_proto::FileKind;
use gust_proto::Record;
use gust_trace::registry::{self as tp, Tracepoint};
use gust_trace::Record as TraceRecord;

/// Writes this process's buffered trace records to its trace file (before an
/// exec, which runs no atexit handler; exit does it by itself).
pub fn flush_trace() {
    gust_trace::flush();
}

/// Whether `p` is already in normal form (absolute, no empty, `.` or `..`
/// component, no trailing slash), as front ends hand paths over: a record then
/// costs no normalization (an allocation) to find the path's daemon.
fn looks_normal(p: &str) -> bool {
    p == "/"
        || (p.starts_with('/')
            && !p.ends_with('/')
            && !p.contains("//")
            && !p.contains("/./")
            && !p.contains("/../")
            && !p.ends_with("/.")
            && !p.ends_with("/.."))
}

/// The bytes a whole-file read put in the caller's buffer.
fn placed_bytes(w: &WholeFile) -> u64 {
    match w {
        WholeFile::Placed { len, .. } => *len as u64,
        WholeFile::Other(_) => 0,
    }
}

fn result_code<T>(r: &Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(Errno(e)) => -e,
    }
}

impl Client {
    /// Runs `f`, an operation on `path`, recording it at `tp` if on.
    #[inline(always)]
    fn on_path<T>(
        &self,
        tp: &'static Tracepoint,
        path: &str,
        arg: u64,
        f: impl FnMut() -> Result<T>,
        size: impl FnOnce(&T) -> u64,
    ) -> Result<T> {
        let Some(t) = gust_trace::start(tp) else { return self.rerouted(f) };
        let r = self.rerouted(f);
        let daemon = if looks_normal(path) {
            Some(self.md_daemon(path))
        } else {
            normalize(path).ok().map(|p| self.md_daemon(&p))
        };
        t.finish(TraceRecord {
            daemon,
            result: result_code(&r),
            arg,
            size: r.as_ref().map_or(0, size),
            path: path.to_string(),
            ..Default::default()
        });
        r
    }

    /// Runs `f`, an operation on descriptor `fd` at `offset` (the descriptor's own
    /// offset if `None`), recording it at `tp` if on.
    #[inline(always)]
    fn on_fd<T>(
        &self,
        tp: &'static Tracepoint,
        fd: i32,
        offset: Option<u64>,
        f: impl FnMut() -> Result<T>,
        size: impl FnOnce(&T) -> u64,
    ) -> Result<T> {
        let Some(t) = gust_trace::start(tp) else { return self.rerouted(f) };
        let file = self.files.get(fd).ok();
        let offset =
            offset.or_else(|| file.as_ref().map(|f| *f.offset.lock().unwrap_or_else(|e| e.into_inner()))).unwrap_or(0);
        let r = self.rerouted(f);
        let size = r.as_ref().map_or(0, size);
        let (path, file_id, daemon) = match &file {
            Some(f) => {
                let (path, id) = (f.path(), f.file_id_if_known().unwrap_or(0));
                let daemon = if size > 0 && f.kind == FileKind::File && id != 0 {
                    self.dist.locate_chunk(id, offset / self.chunk_size)
                } else {
                    self.md_daemon(&path)
                };
                (path, id, Some(daemon))
            }
            None => (String::new(), 0, None),
        };
        t.finish(TraceRecord {
            daemon,
            result: result_code(&r),
            arg: fd as u64,
            offset,
            size,
            file_id,
            path,
            ..Default::default()
        });
        r
    }

    /// `open` that also returns the attributes it fetched anyway, saving a front end
    /// (FUSE create, preload open+fstat) one `fstat` RPC.
    pub fn open_stat(&self, path: &str, flags: i32, mode: u32) -> Result<(i32, Stat)> {
        self.on_path(&tp::OPEN, path, flags as u64, || self.open_stat_impl(path, flags, mode), |_| 0)
    }

    /// Opens a file whose record the caller fetched recently (see `open_known_impl`).
    pub fn open_known(&self, path: &str, flags: i32, file_id: u128, kind: FileKind) -> Result<i32> {
        self.on_path(&tp::OPEN, path, flags as u64, || self.open_known_impl(path, flags, file_id, kind), |_| 0)
    }

    /// `open` with the create of a small file deferred to its close (inline.rs),
    /// where this process holds the claim on the directory (claims.rs); otherwise
    /// an ordinary open.
    pub fn open_deferred(&self, path: &str, flags: i32, mode: u32) -> Result<i32> {
        self.on_path(&tp::OPEN, path, flags as u64, || self.open_deferred_impl(path, flags, mode, false), |_| 0)
    }

    /// `open_deferred` for a caller that writes and closes the descriptor within
    /// the same call (Python's `write_bytes`): nobody can see the file between the
    /// open and the close, so the create is deferred with or without a claim.
    pub fn open_deferred_whole(&self, path: &str, flags: i32, mode: u32) -> Result<i32> {
        self.on_path(&tp::OPEN, path, flags as u64, || self.open_deferred_impl(path, flags, mode, true), |_| 0)
    }

    /// Closes a descriptor (see `close_impl`: a deferred create is sent now).
    pub fn close(&self, fd: i32) -> Result<()> {
        // A batched create that failed since is reported here (create_batch.rs).
        self.on_fd(&tp::CLOSE, fd, None, || self.close_impl(fd).and_then(|_| self.take_create_error()), |_| 0)
    }

    /// A whole file's data into the caller's buffer, if inline (inline.rs). Traced
    /// as a read of `path` at offset 0 whose size is the bytes placed (0 for a file
    /// left to the ordinary path, whose reads are traced themselves).
    pub fn read_whole_into<'p>(
        &self,
        path: &str,
        place: &mut dyn FnMut(&Record) -> Option<&'p mut [u8]>,
    ) -> Result<WholeFile> {
        self.on_path(&tp::READ, path, 0, || self.read_whole_into_impl(path, place), placed_bytes)
    }

    /// The whole files of a batch (read_many.rs). Each file is traced as
    /// `read_whole_into` traces it, with the batch's latency: the requests of a
    /// batch are in flight together.
    pub fn read_many_into<'p>(
        &self,
        paths: &[&str],
        place: &mut dyn FnMut(usize, &Record) -> Option<&'p mut [u8]>,
    ) -> Vec<Result<WholeFile>> {
        if !tp::READ.on() {
            return self.read_many_into_impl(paths, place);
        }
        let timers: Vec<_> = paths.iter().map(|_| gust_trace::start(&tp::READ)).collect();
        let answers = self.read_many_into_impl(paths, place);
        for ((path, a), t) in paths.iter().zip(&answers).zip(timers) {
            let Some(t) = t else { continue };
            t.finish(TraceRecord {
                daemon: normalize(path).ok().map(|p| self.md_daemon(&p)),
                result: result_code(a),
                size: a.as_ref().map_or(0, placed_bytes),
                path: path.to_string(),
                ..Default::default()
            });
        }
        answers
    }

    pub fn read(&self, fd: i32, buf: &mut [u8]) -> Result<usize> {
        self.on_fd(&tp::READ, fd, None, || self.read_impl(fd, buf), |n| *n as u64)
    }

    pub fn pread(&self, fd: i32, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.on_fd(&tp::READ, fd, Some(offset), || self.pread_impl(fd, buf, offset), |n| *n as u64)
    }

    pub fn write(&self, fd: i32, buf: &[u8]) -> Result<usize> {
        self.on_fd(&tp::WRITE, fd, None, || self.write_impl(fd, buf), |n| *n as u64)
    }

    /// Writes at `offset`; on a descriptor opened with O_APPEND, Linux appends
    /// anyway, and so does this.
    pub fn pwrite(&self, fd: i32, buf: &[u8], offset: u64) -> Result<usize> {
        self.on_fd(&tp::WRITE, fd, Some(offset), || self.pwrite_impl(fd, buf, offset), |n| *n as u64)
    }

    /// Sets a file's size (the record's `size` is the new size).
    pub fn truncate(&self, path: &str, size: u64) -> Result<()> {
        self.on_path(&tp::TRUNCATE, path, size, || self.truncate_impl(path, size), |_| 0)
    }

    pub fn ftruncate(&self, fd: i32, size: u64) -> Result<()> {
        self.on_fd(&tp::TRUNCATE, fd, Some(size), || self.ftruncate_impl(fd, size), |_| 0)
    }

    /// Makes the file's data and the metadata log durable on every daemon involved.
    pub fn fsync(&self, fd: i32) -> Result<()> {
        // Batched creates are sent first and their failures reported here (create_batch.rs).
        self.flush_creates();
        self.on_fd(&tp::FSYNC, fd, None, || self.fsync_impl(fd).and_then(|_| self.take_create_error()), |_| 0)
    }

    /// Follows a symlink at the last component (see `stat_impl`).
    pub fn stat(&self, path: &str) -> Result<Stat> {
        self.on_path(&tp::STAT, path, 0, || self.stat_impl(path), |_| 0)
    }

    /// Does not follow a symlink at the last component (the record's arg is 1).
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        self.on_path(&tp::STAT, path, 1, || self.lstat_impl(path), |_| 0)
    }

    pub fn fstat(&self, fd: i32) -> Result<Stat> {
        self.on_fd(&tp::STAT, fd, Some(0), || self.fstat_impl(fd), |_| 0)
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.on_path(&tp::MKDIR, path, mode as u64, || self.mkdir_impl(path, mode), |_| 0)
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.on_path(&tp::RMDIR, path, 0, || self.rmdir_impl(path), |_| 0)
    }

    pub fn unlink(&self, path: &str) -> Result<()> {
        self.on_path(&tp::UNLINK, path, 0, || self.unlink_impl(path), |_| 0)
    }

    /// A hard link: `new` becomes another name of the file at `old` (links.rs).
    /// Recorded with the old path.
    pub fn link(&self, old: &str, new: &str) -> Result<()> {
        self.on_path(&tp::LINK, old, 0, || self.link_impl(old, new, false), |_| 0)
    }

    /// `link` of the file a symlink at `old` leads to (linkat's AT_SYMLINK_FOLLOW).
    pub fn link_following(&self, old: &str, new: &str) -> Result<()> {
        self.on_path(&tp::LINK, old, 0, || self.link_impl(old, new, true), |_| 0)
    }

    /// Recorded with the link's path.
    pub fn symlink(&self, target: &str, linkpath: &str) -> Result<()> {
        self.on_path(&tp::SYMLINK, linkpath, 0, || self.symlink_impl(target, linkpath), |_| 0)
    }

    /// Recorded with the old path.
    pub fn rename(&self, old: &str, new: &str) -> Result<()> {
        self.on_path(&tp::RENAME, old, 0, || self.rename_impl(old, new), |_| 0)
    }

    /// Opens a directory listing (recorded: the first page's request).
    pub fn opendir(&self, path: &str) -> Result<DirStream<'_>> {
        self.on_path(&tp::READDIR, path, 0, || self.opendir_impl(path), |_| 0)
    }

    pub fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        self.on_path(&tp::SETATTR, path, mode as u64, || self.chmod_impl(path, mode), |_| 0)
    }

    /// Sets times (`None`: unchanged); `follow` false for a symlink itself.
    pub fn utimens(&self, path: &str, atime_ns: Option<i64>, mtime_ns: Option<i64>, follow: bool) -> Result<()> {
        self.on_path(&tp::SETATTR, path, 0, || self.utimens_impl(path, atime_ns, mtime_ns, follow), |_| 0)
    }

    /// Recorded at the descriptor's offset before the seek, with size 0.
    pub fn lseek(&self, fd: i32, offset: i64, whence: i32) -> Result<u64> {
        self.on_fd(&tp::LSEEK, fd, None, || self.lseek_impl(fd, offset, whence), |_| 0)
    }

    /// Recorded with the target's length as its size.
    pub fn readlink(&self, path: &str) -> Result<String> {
        self.on_path(&tp::READLINK, path, 0, || self.readlink_impl(path), |t| t.len() as u64)
    }

    /// access(2) (see `access_impl`); `arg` is the mode asked about.
    pub fn access(&self, path: &str, mode: i32) -> Result<()> {
        self.on_path(&tp::ACCESS, path, mode as u64, || self.access_impl(path, mode), |_| 0)
    }

    /// Capacity summed over the daemons; recorded with the path "/" (every daemon
    /// answers, the record names the root's).
    pub fn statfs(&self) -> Result<StatFs> {
        self.on_path(&tp::STATFS, "/", 0, || self.statfs_impl(), |_| 0)
    }

    /// chown, lchown (`follow` false); see `chown_impl` for the rules.
    pub fn chown(&self, path: &str, uid: Option<u32>, gid: Option<u32>, follow: bool) -> Result<Stat> {
        self.on_path(&tp::SETATTR, path, 0, || self.chown_impl(path, uid, gid, follow), |_| 0)
    }

    /// getxattr, lgetxattr (`follow` false): the value of extended attribute
    /// `name` (xattrs.rs). Recorded with the value's length as its size.
    pub fn getxattr(&self, path: &str, name: &str, follow: bool) -> Result<Vec<u8>> {
        self.on_path(&tp::GETXATTR, path, 0, || self.getxattr_impl(path, name, follow), |v| v.len() as u64)
    }

    /// listxattr, llistxattr (`follow` false): the names, each followed by a NUL.
    pub fn listxattr(&self, path: &str, follow: bool) -> Result<Vec<u8>> {
        self.on_path(&tp::GETXATTR, path, 0, || self.listxattr_impl(path, follow), |v| v.len() as u64)
    }

    /// setxattr, lsetxattr (`follow` false) with setxattr's `flags`
    /// (`gust_proto::xattr::XATTR_CREATE`, `XATTR_REPLACE`); `arg` is the flags.
    pub fn setxattr(&self, path: &str, name: &str, value: &[u8], flags: u32, follow: bool) -> Result<()> {
        self.on_path(
            &tp::SETXATTR,
            path,
            flags as u64,
            || self.setxattr_impl(path, name, Some(value), flags, follow),
            |_| 0,
        )
    }

    /// removexattr, lremovexattr (`follow` false).
    pub fn removexattr(&self, path: &str, name: &str, follow: bool) -> Result<()> {
        self.on_path(&tp::SETXATTR, path, 0, || self.setxattr_impl(path, name, None, 0, follow), |_| 0)
    }

    pub fn fgetxattr(&self, fd: i32, name: &str) -> Result<Vec<u8>> {
        self.on_fd(&tp::GETXATTR, fd, None, || self.fgetxattr_impl(fd, name), |v| v.len() as u64)
    }

    pub fn flistxattr(&self, fd: i32) -> Result<Vec<u8>> {
        self.on_fd(&tp::GETXATTR, fd, None, || self.flistxattr_impl(fd), |v| v.len() as u64)
    }

    pub fn fsetxattr(&self, fd: i32, name: &str, value: &[u8], flags: u32) -> Result<()> {
        self.on_fd(&tp::SETXATTR, fd, None, || self.fsetxattr_impl(fd, name, Some(value), flags), |_| 0)
    }

    pub fn fremovexattr(&self, fd: i32, name: &str) -> Result<()> {
        self.on_fd(&tp::SETXATTR, fd, None, || self.fsetxattr_impl(fd, name, None, 0), |_| 0)
    }
}

impl Client {
    /// Switches daemon `daemon`'s tracepoints `names` on or off (`gust trace`), its
    /// trace files going to `dir` on its node if given. EINVAL: no daemon
    /// tracepoint named, or on without a directory.
    pub fn trace_daemon(&self, daemon: u32, on: bool, names: &str, dir: Option<&str>) -> Result<()> {
        let req = gust_proto::Request::Trace { on, names: names.to_string(), dir: dir.map(str::to_string) };
        match self.transport.call(daemon, req)? {
            gust_proto::Response::Ok => Ok(()),
            r => Err(crate::error::unexpected(r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::looks_normal;

    /// Paths in normal form are recognized as such, and anything normalization
    /// would change is not (so the recorded daemon is always the path's).
    #[test]
    fn normal_paths_are_recognized() {
        for p in ["/", "/a", "/a/b.c", "/a/..b", "/.x/y"] {
            assert!(looks_normal(p), "{p}");
            assert_eq!(crate::normalize(p).unwrap(), p);
        }
        for p in ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a/.", "/a/..", "/.", "/.."] {
            assert!(!looks_normal(p), "{p}");
        }
    }
}
