//! Cache mode (`gust start --cache-of DIR`): the namespace mirrors a directory of the
//! shared (parallel) file system. A path GustFS does not hold is looked up there:
//! stat and listings come from the shared file system until a file is first
//! opened; the first open fetches the whole file into GustFS (the daemons copy the
//! chunks they hold, as `gust stage in` does), and from then on GustFS's copy is the
//! file. Writes go to GustFS; the write-back of changed files is the `gust stage out
//! --follow` process that `gust start --cache-of` runs (docs/SEMANTICS.md, "Cache
//! mode").
//!
//! Not for: writing back (gust-stage's follow), the planning of large stages.

use crate::error::unexpected;
use crate::{Client, Errno, Result};
use gust_proto::{
    FileKind, Record, Request, Response, StageChunks, StageCommit, StageEntry, INLINE_BYTES_MAX,
    STAGE_REQUEST_BYTES_MAX,
};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

pub use gust_proto::UNFETCHED_FILE_ID;

/// How a fetch ended: done by this process, or taken by another one first (its
/// record as it stood).
pub(crate) enum Fetched {
    Done,
    Busy(Record),
}

/// How long an open waits for another process's fetch of the same file.
const FETCH_WAIT: Duration = Duration::from_secs(60);

/// Nanoseconds since the epoch from a local file's seconds and nanoseconds.
pub fn local_time_ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// The kind of a local file GustFS can hold (a directory, file or symlink); None for
/// a FIFO, socket or device, which have no data to stage or fetch.
pub fn local_kind(ft: &std::fs::FileType) -> Option<FileKind> {
    if ft.is_dir() {
        Some(FileKind::Dir)
    } else if ft.is_file() {
        Some(FileKind::File)
    } else if ft.is_symlink() {
        Some(FileKind::Symlink)
    } else {
        None
    }
}

impl Client {
    /// The shared file system's path behind an internal path, in cache mode.
    pub fn cached_source(&self, p: &str) -> Option<String> {
        let base = self.hosts.cache_of.as_deref()?;
        Some(if p == "/" { base.to_string() } else { format!("{}{p}", base.trim_end_matches('/')) })
    }

    /// The record a path of the shared file system would have, unfetched (a
    /// directory, file or symlink; ENOENT for anything else or nothing).
    pub(crate) fn cached_record(&self, p: &str) -> Result<Record> {
        let ext = self.cached_source(p).ok_or(Errno(libc::ENOENT))?;
        let m = std::fs::symlink_metadata(&ext).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let kind = local_kind(&m.file_type()).ok_or(Errno(libc::ENOENT))?;
        let target = if kind == FileKind::Symlink {
            let t = std::fs::read_link(&ext).map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
            t.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        Ok(Record {
            kind,
            mode: m.mode() & 0o7777,
            size: if kind == FileKind::File { m.len() } else { 0 },
            file_id: UNFETCHED_FILE_ID,
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            ctime_ns: local_time_ns(m.ctime(), m.ctime_nsec()),
            mtime_ns: local_time_ns(m.mtime(), m.mtime_nsec()),
            atime_ns: local_time_ns(m.atime(), m.atime_nsec()),
            target,
            uid: m.uid(),
            gid: m.gid(),
            xattrs: Vec::new(),
        })
    }

    /// Before an open in cache mode: if GustFS does not hold `p` but the shared
    /// file system has a file or symlink there, fetch it (once, whichever process
    /// comes first; the others wait for it).
    pub(crate) fn fetch_if_cached(&self, p: &str) -> Result<()> {
        if self.hosts.cache_of.is_none() {
            return Ok(());
        }
        match self.call_md(p, Request::Stat { path: p.to_string() }) {
            Ok(Response::Record(r)) => return self.wait_fetched(p, r),
            Ok(r) => return Err(unexpected(r)),
            Err(Errno(libc::ENOENT)) => {}
            Err(e) => return Err(e),
        }
        let Ok(want) = self.cached_record(p) else { return Ok(()) };
        if want.kind == FileKind::Dir {
            return Ok(()); // directories are listed from both sides, not fetched
        }
        let ext = self.cached_source(p).expect("cache mode");
        match self.fetch_from(p, &want, &ext, Vec::new(), None)? {
            Fetched::Done => Ok(()),
            Fetched::Busy(r) => self.wait_fetched(p, r),
        }
    }

    /// Makes `p` the file or symlink `want` describes (kind, mode, size, times, a
    /// symlink's target) with the data at `ext` (a path of the shared file system or
    /// a presigned object URL) and attributes `xattrs`: the staging requests, so
    /// the daemons copy the data and its bytes never cross the client. `p` must not
    /// exist, or be a view's unfetched placeholder; if another process took it
    /// first, its record is returned (`Busy`) for the caller to wait on. The file
    /// gets `file_id` if given (a placeholder's: its inode number stays), else a
    /// new one.
    pub(crate) fn fetch_from(
        &self,
        p: &str,
        want: &Record,
        ext: &str,
        xattrs: gust_proto::xattr::Xattrs,
        file_id: Option<u128>,
    ) -> Result<Fetched> {
        let small = want.kind != FileKind::File || want.size <= INLINE_BYTES_MAX as u64;
        let rec = Self::fetched_record(want, xattrs, file_id, small);
        let entry = StageEntry {
            path: p.to_string(),
            record: rec.clone(),
            source: (small && want.kind == FileKind::File).then(|| ext.to_string()),
            replace: false,
        };
        let out = match self.call_md(p, Request::StageCreate { entries: vec![entry] })? {
            Response::Staged(v) if v.len() == 1 => v.into_iter().next().expect("one outcome"),
            r => return Err(unexpected(r)),
        };
        match out.errno {
            0 => {}
            // Another process fetches it (or made a file there).
            libc::EEXIST => return Ok(Fetched::Busy(self.get_record(p)?)),
            e => return Err(Errno(e)),
        }
        if small {
            return Ok(Fetched::Done);
        }
        self.pull_chunks(rec.file_id, ext, want.size)?;
        let commit = StageCommit {
            path: p.to_string(),
            file_id: rec.file_id,
            size: want.size,
            mtime_ns: want.mtime_ns,
            atime_ns: want.atime_ns,
        };
        match self.call_md(p, Request::StageCommitFiles { items: vec![commit] })? {
            Response::Staged(v) if v.len() == 1 && v[0].errno == 0 => Ok(Fetched::Done),
            Response::Staged(v) if v.len() == 1 => Err(Errno(v[0].errno)),
            r => Err(unexpected(r)),
        }
    }

    /// The record a fetch creates: `want`'s kind, mode, times and target, with
    /// `xattrs`; its size only if `small` (the data comes with the create), else
    /// the commit sets it.
    fn fetched_record(want: &Record, xattrs: gust_proto::xattr::Xattrs, file_id: Option<u128>, small: bool) -> Record {
        let mut rec = Self::new_record(want.kind, want.mode, want.target.clone());
        if let Some(id) = file_id {
            rec.file_id = id;
        }
        rec.mtime_ns = want.mtime_ns;
        rec.atime_ns = want.atime_ns;
        rec.xattrs = xattrs;
        if small {
            rec.size = want.size;
        }
        rec
    }

    /// The daemons copy the chunks they hold of `size` bytes at `ext`, in parallel,
    /// in requests of at most STAGE_REQUEST_BYTES_MAX and 1,024 spans.
    fn pull_chunks(&self, file_id: u128, ext: &str, size: u64) -> Result<()> {
        let mut calls = Vec::new();
        for (d, spans) in self.spans_by_daemon(file_id, 0, size) {
            let mut piece = Vec::new();
            let mut bytes = 0u64;
            for (s, _) in spans {
                if bytes + s.len as u64 > STAGE_REQUEST_BYTES_MAX || piece.len() == 1024 {
                    calls.push((d, std::mem::take(&mut piece), bytes));
                    bytes = 0;
                }
                bytes += s.len as u64;
                piece.push(s);
            }
            calls.push((d, piece, bytes));
        }
        let reqs = calls
            .iter()
            .map(|(d, spans, _)| crate::rpc::Call {
                daemon: *d,
                req: Request::StagePull {
                    items: vec![StageChunks { file_id, external: ext.to_string(), spans: spans.clone() }],
                },
                bulk: Vec::new(),
            })
            .collect();
        for (resp, (_, _, want_bytes)) in self.call_all(reqs)?.into_iter().zip(&calls) {
            match resp {
                Response::Staged(v) if v.len() == 1 => {
                    if v[0].errno != 0 {
                        return Err(Errno(v[0].errno));
                    }
                    if v[0].bytes < *want_bytes {
                        return Err(Errno(libc::EIO)); // the shared file shrank meanwhile
                    }
                }
                r => return Err(unexpected(r)),
            }
        }
        Ok(())
    }

    /// Waits until a file another process is fetching has its size (its fetch
    /// committed), if the shared file system says it should have one.
    fn wait_fetched(&self, p: &str, r: Record) -> Result<()> {
        self.wait_while_fetching(p, r, FETCH_WAIT, |r| {
            let Ok(want) = self.cached_record(p) else { return false };
            // A fetch in progress shows size 0 and the shared file's mtime until its
            // commit; anything else is GustFS's own file now.
            r.kind == FileKind::File
                && r.size == 0
                && r.mtime_ns == want.mtime_ns
                && want.kind == FileKind::File
                && want.size > 0
        })
    }

    /// Waits, reading `p`'s record again every 20 ms, while `fetching` says another
    /// process's fetch of it is under way (`r`: the record seen first); EIO after
    /// `bound`.
    pub(crate) fn wait_while_fetching(
        &self,
        p: &str,
        mut r: Record,
        bound: Duration,
        fetching: impl Fn(&Record) -> bool,
    ) -> Result<()> {
        let started = Instant::now();
        while fetching(&r) {
            if started.elapsed() > bound {
                return Err(Errno(libc::EIO));
            }
            std::thread::sleep(Duration::from_millis(20));
            r = self.get_record(p)?;
        }
        Ok(())
    }

    /// The record of `p`: GustFS's, or in cache mode the shared file system's
    /// (unfetched) if GustFS has none.
    pub(crate) fn lookup(&self, p: &str) -> Result<Record> {
        match self.get_record(p) {
            Err(Errno(libc::ENOENT)) if self.hosts.cache_of.is_some() => self.cached_record(p),
            r => r,
        }
    }

    /// The entries of directory `dir` on the shared file system that are not in
    /// `seen` (GustFS's own), in cache mode; nothing if it has no such directory.
    pub(crate) fn cached_entries(
        &self,
        dir: &str,
        seen: &std::collections::HashSet<String>,
    ) -> Vec<gust_proto::DirEntry> {
        let Some(ext) = self.cached_source(dir) else { return Vec::new() };
        let Ok(rd) = std::fs::read_dir(&ext) else { return Vec::new() };
        let mut out: Vec<gust_proto::DirEntry> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let kind = local_kind(&e.file_type().ok()?)?;
                (!seen.contains(&name)).then_some(gust_proto::DirEntry { name, kind })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}
