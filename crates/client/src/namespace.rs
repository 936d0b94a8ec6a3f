//! Namespace operations: lookups that follow symlinks, stat, access, mkdir, rmdir,
//! unlink, symlink, readlink, chmod, utimens. Each is one request to the daemon that
//! holds the record, plus the chunk removals of an unlinked file.
//!
//! Not for: rename (rename.rs), listings (readdir.rs), descriptors (open_files.rs).

use crate::error::unexpected;
use crate::stat::Stat;
use crate::{normalize, Client, Errno, Result};
use gust_proto::{path, FileKind, Record, RemoveKind, Request, Response, PATH_BYTES_MAX};

/// Symlinks followed before ELOOP (Linux's limit).
pub(crate) const SYMLINK_HOPS_MAX: u32 = 40;

pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

fn new_file_id() -> u128 {
    use rand::Rng;
    loop {
        // The OS generator, not the thread-local one: deferred creates may be
        // settled at process exit, after thread-locals are gone (inline.rs).
        let id: u128 = rand::rngs::OsRng.gen();
        if id != 0 {
            return id;
        }
    }
}

impl Client {
    pub(crate) fn get_record(&self, path: &str) -> Result<Record> {
        match self.call_md(path, Request::Stat { path: path.to_string() })? {
            Response::Record(r) => Ok(r),
            r => Err(unexpected(r)),
        }
    }

    /// Follows symlinks at the final component. Returns the resolved path and record.
    pub(crate) fn resolve(&self, path: &str) -> Result<(String, Record)> {
        let mut p = self.norm(path)?;
        for _ in 0..=SYMLINK_HOPS_MAX {
            let r = self.get_record(&p)?;
            if r.kind != FileKind::Symlink {
                return Ok((p, r));
            }
            p = self.link_target_path(&p, &r.target)?;
        }
        Err(Errno(libc::ELOOP))
    }

    pub(crate) fn link_target_path(&self, link: &str, target: &str) -> Result<String> {
        if target.starts_with('/') {
            // An absolute target inside the mount directory maps into the file
            // system; other absolute targets are outside GustFS.
            self.internal_path(target).ok_or(Errno(libc::EXDEV))
        } else {
            normalize(&path::join(path::parent(link), target))
        }
    }

    pub(crate) fn check_parent(&self, path: &str) -> Result<()> {
        if !self.hosts.check_parent || path == "/" {
            return Ok(());
        }
        let (_, r) = self.resolve(path::parent(path))?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        Ok(())
    }

    pub(crate) fn new_record(kind: FileKind, mode: u32, target: String) -> Record {
        let t = now_ns();
        Record {
            kind,
            mode: mode & 0o7777,
            size: 0,
            file_id: new_file_id(),
            nlink: if kind == FileKind::Dir { 2 } else { 1 },
            ctime_ns: t,
            mtime_ns: t,
            atime_ns: t,
            target,
        }
    }

    /// Follows a symlink at the last component. Answered from a recent listing when
    /// it returned this entry (listing.rs).
    pub fn stat(&self, path: &str) -> Result<Stat> {
        let p = self.norm(path)?;
        if let Some(r) = self.listing.get(&p).filter(|r| r.kind != FileKind::Symlink) {
            return Ok(Stat::from_record(&r, self.chunk_size));
        }
        let (_, r) = self.resolve(&p)?;
        Ok(Stat::from_record(&r, self.chunk_size))
    }

    /// Answered from a recent listing when it returned this entry (listing.rs).
    pub fn lstat(&self, path: &str) -> Result<Stat> {
        let p = self.norm(path)?;
        if let Some(r) = self.listing.get(&p) {
            return Ok(Stat::from_record(&r, self.chunk_size));
        }
        Ok(Stat::from_record(&self.get_record(&p)?, self.chunk_size))
    }

    pub fn fstat(&self, fd: i32) -> Result<Stat> {
        let f = self.file(fd)?;
        let r = self.get_record(&f.path())?;
        Ok(Stat::from_record(&r, self.chunk_size))
    }

    pub fn access(&self, path: &str, mode: i32) -> Result<()> {
        let st = self.stat(path)?;
        if mode == libc::F_OK {
            return Ok(());
        }
        // One user owns everything in an instance: check the owner bits. Root may
        // read and write anything, and execute what has any x bit.
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let m = st.mode;
        let ok = |bit: i32, owner_bit: u32| {
            mode & bit == 0
                || (if root {
                    bit != libc::X_OK || m & 0o111 != 0 || st.kind == FileKind::Dir
                } else {
                    m & owner_bit != 0
                })
        };
        if ok(libc::R_OK, 0o400) && ok(libc::W_OK, 0o200) && ok(libc::X_OK, 0o100) {
            Ok(())
        } else {
            Err(Errno(libc::EACCES))
        }
    }

    pub fn mkdir(&self, path: &str, mode: u32) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        self.check_parent(&p)?;
        let req = Request::Create {
            path: p.clone(),
            record: Self::new_record(FileKind::Dir, mode, String::new()),
            exclusive: true,
        };
        self.call_md(&p, req).map(|_| ())
    }

    pub fn rmdir(&self, path: &str) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno(libc::EBUSY));
        }
        let r = self.get_record(&p)?;
        if r.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if self.dir_has_children(&p)? {
            return Err(Errno(libc::ENOTEMPTY));
        }
        let d = self.md_daemon(&p);
        self.transport.call(d, Request::Remove { path: p, kind: RemoveKind::Dir }).map(|_| ())
    }

    /// Removes a file's chunks, asking only the daemons that can hold them.
    pub(crate) fn remove_chunks(&self, r: &Record) -> Result<()> {
        if r.kind != FileKind::File || r.size == 0 {
            return Ok(());
        }
        self.call_each(self.chunk_daemons(r.file_id, 0, r.size), |_| Request::RemoveChunks { file_id: r.file_id })?;
        Ok(())
    }

    /// Removes a file or symlink: one RPC for the record, plus one per daemon that
    /// holds its chunks (none for an empty file).
    pub fn unlink(&self, path: &str) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(path)?;
        if p == "/" {
            return Err(Errno(libc::EISDIR));
        }
        let d = self.md_daemon(&p);
        let r = match self.transport.call(d, Request::Remove { path: p, kind: RemoveKind::NotDir })? {
            Response::Record(r) => r,
            r => return Err(unexpected(r)),
        };
        self.remove_chunks(&r)
    }

    pub fn symlink(&self, target: &str, linkpath: &str) -> Result<()> {
        self.listing.invalidate();
        let p = self.norm(linkpath)?;
        if target.is_empty() {
            return Err(Errno(libc::ENOENT));
        }
        if target.len() > PATH_BYTES_MAX || target.contains('\0') {
            return Err(Errno(libc::ENAMETOOLONG));
        }
        if p == "/" {
            return Err(Errno(libc::EEXIST));
        }
        self.check_parent(&p)?;
        let req = Request::Create {
            path: p.clone(),
            record: Self::new_record(FileKind::Symlink, 0o777, target.to_string()),
            exclusive: true,
        };
        self.call_md(&p, req).map(|_| ())
    }

    pub fn readlink(&self, path: &str) -> Result<String> {
        let r = self.get_record(&self.norm(path)?)?;
        if r.kind != FileKind::Symlink {
            return Err(Errno(libc::EINVAL));
        }
        Ok(r.target)
    }

    fn set_attr(
        &self,
        path: &str,
        mode: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        follow: bool,
    ) -> Result<()> {
        self.listing.invalidate();
        let p = if follow { self.resolve(path)?.0 } else { self.norm(path)? };
        let req = Request::SetAttr { path: p.clone(), mode, atime_ns: atime, mtime_ns: mtime, ctime_ns: now_ns() };
        self.call_md(&p, req).map(|_| ())
    }

    pub fn chmod(&self, path: &str, mode: u32) -> Result<()> {
        self.set_attr(path, Some(mode), None, None, true)
    }

    /// Sets access and modification times (nanoseconds since the epoch); `None`
    /// leaves one unchanged.
    pub fn utimens(&self, path: &str, atime_ns: Option<i64>, mtime_ns: Option<i64>, follow: bool) -> Result<()> {
        self.set_attr(path, None, atime_ns, mtime_ns, follow)
    }
}
