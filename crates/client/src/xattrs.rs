//! Extended attributes (gust_proto::xattr; docs/DESIGN.md, "Extended attributes"):
//! getxattr, listxattr, setxattr and removexattr, by path (following a symlink at
//! the last component or not) and by descriptor.
//!
//! The attributes are part of the record, so a get or a list is a lookup: answered
//! from a grant this process holds, else one `stat`. A change is one `set_xattr` to
//! the record's daemon, which recalls other clients' grants first (as chmod does);
//! a name of a hard-linked file is sent on to its link path (routing.rs).
//!
//! Linux's rules for the `user.` namespace (fs/xattr.c, `xattr_permission`), the
//! one GustFS keeps: only files and directories carry attributes (elsewhere a get
//! is ENODATA, a set EPERM); a get needs read permission and a change write
//! permission on the file, and in a sticky directory only its owner changes them;
//! listing needs none. Other namespaces (`security.`, `system.`: SELinux labels,
//! POSIX ACLs; `trusted.`) are not supported: a get or set of such a name is
//! EOPNOTSUPP at once, without a lookup, so `ls -l`, which asks two of them per
//! file, learns after the first that this file system has no ACLs and asks no more
//! (docs/SEMANTICS.md).
//!
//! Not for: the bounds and the flags' meaning (gust_proto::xattr), the store of
//! them (gust-store, metadata/mod.rs).

use crate::error::unexpected;
use crate::permissions::{allows, MAY_READ, MAY_WRITE};
use crate::{Client, Errno, Result};
use gust_proto::{now_ns, xattr, FileKind, Record, Request, Response};

/// EOPNOTSUPP for a name outside the one namespace kept.
fn supported(name: &str) -> Result<()> {
    if name.starts_with(xattr::XATTR_USER_PREFIX) {
        Ok(())
    } else {
        Err(Errno(libc::EOPNOTSUPP))
    }
}

impl Client {
    /// The path and record whose attributes a call by `path` means. A view's or
    /// cache mode's entry whose object is not fetched yet, and that does not carry
    /// the object's properties (only views laid out or filtered by them do), is
    /// fetched first: its attributes are the object's (`user.s3.*`, objects.rs).
    fn xattr_record(&self, path: &str, follow: bool) -> Result<(String, Record)> {
        let (p, r) = if follow {
            self.resolve(path)?
        } else {
            let p = self.norm(path)?;
            let r = self.lookup(&p)?;
            (p, r)
        };
        let bare = r.xattrs.iter().all(|(n, _)| !n.starts_with(crate::objects::OBJECT_XATTR_PREFIX));
        if r.unfetched_object().is_none() || !bare {
            return Ok((p, r));
        }
        self.fetch_object(&p, &r)?;
        let r = self.get_record(&p)?;
        Ok((p, r))
    }

    fn may_read_xattrs(&self, r: &Record) -> Result<()> {
        match self.checked_caller() {
            Some(who) if !allows(&who, r, MAY_READ) => Err(Errno(libc::EACCES)),
            _ => Ok(()),
        }
    }

    fn get_xattr_of(&self, r: &Record, name: &str) -> Result<Vec<u8>> {
        if !matches!(r.kind, FileKind::File | FileKind::Dir) {
            return Err(Errno(libc::ENODATA));
        }
        self.may_read_xattrs(r)?;
        xattr::get(&r.xattrs, name).map(<[u8]>::to_vec).map_err(Errno)
    }

    /// getxattr (`follow`) and lgetxattr: the value of `name`.
    pub(crate) fn getxattr_impl(&self, path: &str, name: &str, follow: bool) -> Result<Vec<u8>> {
        supported(name)?;
        let (_, r) = self.xattr_record(path, follow)?;
        self.get_xattr_of(&r, name)
    }

    pub(crate) fn fgetxattr_impl(&self, fd: i32, name: &str) -> Result<Vec<u8>> {
        supported(name)?;
        let (_, r) = self.record_of_fd(fd)?;
        self.get_xattr_of(&r, name)
    }

    /// listxattr (`follow`) and llistxattr: the names, each followed by a NUL.
    pub(crate) fn listxattr_impl(&self, path: &str, follow: bool) -> Result<Vec<u8>> {
        let (_, r) = self.xattr_record(path, follow)?;
        Ok(xattr::list(&r.xattrs))
    }

    pub(crate) fn flistxattr_impl(&self, fd: i32) -> Result<Vec<u8>> {
        let (_, r) = self.record_of_fd(fd)?;
        Ok(xattr::list(&r.xattrs))
    }

    /// setxattr (`value` Some) and removexattr (None) of `name` with setxattr's
    /// `flags`, by path (`follow`: setxattr, else lsetxattr).
    pub(crate) fn setxattr_impl(
        &self,
        path: &str,
        name: &str,
        value: Option<&[u8]>,
        flags: u32,
        follow: bool,
    ) -> Result<()> {
        xattr::check_name(name).map_err(Errno)?;
        let (p, r) = self.xattr_record(path, follow)?;
        self.change_xattr(&p, &r, name, value, flags)
    }

    pub(crate) fn fsetxattr_impl(&self, fd: i32, name: &str, value: Option<&[u8]>, flags: u32) -> Result<()> {
        xattr::check_name(name).map_err(Errno)?;
        // A file created under a deferral is sent first: the change needs its record.
        self.settle_all();
        let (p, r) = self.record_of_fd(fd)?;
        self.change_xattr(&p, &r, name, value, flags)
    }

    fn change_xattr(&self, p: &str, r: &Record, name: &str, value: Option<&[u8]>, flags: u32) -> Result<()> {
        if !matches!(r.kind, FileKind::File | FileKind::Dir) {
            return Err(Errno(libc::EPERM));
        }
        if let Some(who) = self.checked_caller() {
            if r.kind == FileKind::Dir && r.mode & libc::S_ISVTX != 0 && who.uid != r.uid {
                return Err(Errno(libc::EPERM));
            }
            if !allows(&who, r, MAY_WRITE) {
                return Err(Errno(libc::EACCES));
            }
        }
        self.listing.invalidate();
        let req = Request::SetXattr {
            path: p.to_string(),
            name: name.to_string(),
            value: value.map(<[u8]>::to_vec),
            flags,
            ctime_ns: now_ns(),
        };
        match self.call_md(p, req)? {
            Response::Record(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
