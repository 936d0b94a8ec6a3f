//! Permission checks on mode bits (DAC) where no kernel makes them: in the
//! process-wide front ends (the preload library, the C API, Python), for callers
//! other than root and the instance's owner (the owner of its hosts file, who runs
//! its daemons and can read every chunk file anyway: checking mode bits against it
//! would protect nothing, and cost its creates the deferral of inline.rs). A process
//! that switches to another user (a test suite run as root, a service) is checked.
//! A FUSE mount leaves them to the kernel (`default_permissions` for a shared mount)
//! and turns them off ([`ClientOptions::check_permissions`]).
//!
//! What is checked, as Linux does for a local file system:
//! * open: read and/or write permission on an existing file (O_TRUNC needs write);
//!   a file the call creates is the creator's whatever its mode;
//! * a new or removed name (create, mkdir, mknod, symlink, link, unlink, rmdir,
//!   rename): write and search permission on its directory, and in a sticky
//!   directory (S_ISVTX) a removed or replaced entry must be the caller's or the
//!   directory's;
//! * a directory renamed to another parent: write permission on it (its "..");
//! * chmod: the owner only (EPERM); truncate by path: write permission.
//!
//! Not checked: search permission on the directories above the parent (a path is
//! one request to the record's daemon, not a walk), and utimens (docs/SEMANTICS.md).
//! Cost: the parent's record, which a process holds under a grant after its first
//! change in a directory (grants.rs), so a create in a known directory costs a
//! lookup in memory; root callers pay nothing.
//!
//! Not for: chown's rules and access(2) (namespace.rs), which apply everywhere.
//!
//! [`ClientOptions::check_permissions`]: crate::ClientOptions::check_permissions

use crate::credentials::Credentials;
use crate::{Client, Errno, Result};
use gust_proto::{path, FileKind, Record};

pub(crate) const MAY_READ: u32 = 4;
pub(crate) const MAY_WRITE: u32 = 2;
pub(crate) const MAY_EXEC: u32 = 1;

/// Whether `who` has every permission of `want` (MAY_* bits) on `r`: the owner's,
/// the group's or the others' bits, whichever class `who` falls in. Root may read
/// and write anything, and execute what has any x bit (or search any directory).
pub(crate) fn allows(who: &Credentials, r: &Record, want: u32) -> bool {
    let granted = if who.is_root() {
        MAY_READ | MAY_WRITE | u32::from(r.mode & 0o111 != 0 || r.kind == FileKind::Dir)
    } else if who.uid == r.uid {
        (r.mode >> 6) & 0o7
    } else if who.in_group(r.gid) {
        (r.mode >> 3) & 0o7
    } else {
        r.mode & 0o7
    };
    want & !granted == 0
}

/// What open `flags` ask of an existing file.
pub(crate) fn open_wants(flags: i32) -> u32 {
    let acc = flags & libc::O_ACCMODE;
    let mut want = 0;
    if acc == libc::O_RDONLY || acc == libc::O_RDWR {
        want |= MAY_READ;
    }
    if acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0 {
        want |= MAY_WRITE;
    }
    want
}

/// Whether a call was checked against mode bits (its caller is neither root nor
/// the instance's owner, and the front end checks).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checked {
    No,
    Yes,
}

impl Client {
    /// The caller, if this call is checked: a front end that checks, a caller
    /// other than root.
    pub(crate) fn checked_caller(&self) -> Option<Credentials> {
        let owner = self.permissions_owner?;
        let uid = Credentials::owner().0;
        if uid == 0 || uid == owner {
            return None;
        }
        Some(Credentials::current())
    }

    /// Open of an existing file: EACCES unless the caller may as `flags` ask.
    pub(crate) fn may_open(&self, who: &Credentials, r: &Record, flags: i32) -> Result<()> {
        if allows(who, r, open_wants(flags)) {
            Ok(())
        } else {
            Err(Errno(libc::EACCES))
        }
    }

    /// A name is made or removed in the directory of `p`: write and search
    /// permission there. Returns the directory's record (for the sticky rule).
    pub(crate) fn may_change_dir_of(&self, who: &Credentials, p: &str) -> Result<Record> {
        let dir = self.get_record(path::parent(p))?;
        if dir.kind != FileKind::Dir {
            return Err(Errno(libc::ENOTDIR));
        }
        if !allows(who, &dir, MAY_WRITE | MAY_EXEC) {
            return Err(Errno(libc::EACCES));
        }
        Ok(dir)
    }

    /// The sticky rule: in a directory with S_ISVTX only the owner of an entry or of
    /// the directory removes, renames or replaces the entry.
    pub(crate) fn may_remove_from(&self, who: &Credentials, dir: &Record, entry: &Record) -> Result<()> {
        if dir.mode & libc::S_ISVTX != 0 && who.uid != dir.uid && who.uid != entry.uid {
            return Err(Errno(libc::EPERM));
        }
        Ok(())
    }

    /// Before a new name `p` is made (mkdir, mknod, symlink, link): EEXIST comes
    /// before EACCES, as on Linux.
    pub(crate) fn may_make(&self, p: &str) -> Result<()> {
        let Some(who) = self.checked_caller() else { return Ok(()) };
        match self.may_change_dir_of(&who, p) {
            Ok(_) => Ok(()),
            Err(e) => match self.get_stored_record(p) {
                Ok(_) => Err(Errno(libc::EEXIST)),
                Err(Errno(libc::ENOENT)) => Err(e),
                Err(other) => Err(other),
            },
        }
    }

    /// Before the name `p` is removed (unlink, rmdir): ENOENT comes before EACCES.
    pub(crate) fn may_unlink(&self, p: &str) -> Result<Checked> {
        let Some(who) = self.checked_caller() else { return Ok(Checked::No) };
        match self.may_remove(&who, p) {
            Err(e @ Errno(libc::EACCES)) => match self.get_stored_record(p) {
                Ok(_) => Err(e),
                Err(other) => Err(other),
            },
            r => r.map(|()| Checked::Yes),
        }
    }

    /// chmod by a checked caller: the owner only.
    pub(crate) fn may_chmod(&self, r: &Record) -> Result<()> {
        match self.checked_caller() {
            Some(who) if who.uid != r.uid => Err(Errno(libc::EPERM)),
            _ => Ok(()),
        }
    }

    /// truncate by path: write permission on the file.
    pub(crate) fn may_truncate(&self, r: &Record) -> Result<()> {
        match self.checked_caller() {
            Some(who) if !allows(&who, r, MAY_WRITE) => Err(Errno(libc::EACCES)),
            _ => Ok(()),
        }
    }

    /// unlink and rmdir of `p` by a checked caller: its directory, and the entry
    /// itself where the directory is sticky (one more lookup then).
    pub(crate) fn may_remove(&self, who: &Credentials, p: &str) -> Result<()> {
        let dir = self.may_change_dir_of(who, p)?;
        if dir.mode & libc::S_ISVTX != 0 && who.uid != dir.uid {
            let entry = self.get_stored_record(p)?;
            self.may_remove_from(who, &dir, &entry)?;
        }
        Ok(())
    }

    /// rename of `old` (record `r`) to `new` by a checked caller.
    pub(crate) fn may_rename(&self, who: &Credentials, old: &str, r: &Record, new: &str) -> Result<()> {
        let from = self.may_change_dir_of(who, old)?;
        self.may_remove_from(who, &from, r)?;
        let to = self.may_change_dir_of(who, new)?;
        if to.mode & libc::S_ISVTX != 0 && who.uid != to.uid {
            match self.get_stored_record(new) {
                Ok(target) => self.may_remove_from(who, &to, &target)?,
                Err(Errno(libc::ENOENT)) => {}
                Err(e) => return Err(e),
            }
        }
        if r.kind == FileKind::Dir && path::parent(old) != path::parent(new) && !allows(who, r, MAY_WRITE) {
            return Err(Errno(libc::EACCES));
        }
        Ok(())
    }
}

/// The mode without the set-id bits a change by an unprivileged caller drops, if
/// any (Linux's `setattr_should_drop_suidgid`): S_ISUID always, S_ISGID when the
/// group may execute or the caller (`in_group`) is not in the file's group. The
/// FUSE mount asks it per write; the client core, for descriptors, with
/// `in_group` true.
pub fn setid_dropped(mode: u32, in_group: bool) -> Option<u32> {
    let mut m = mode & !libc::S_ISUID;
    if mode & libc::S_IXGRP != 0 || !in_group {
        m &= !libc::S_ISGID;
    }
    (m != mode).then_some(m)
}

#[cfg(test)]
mod tests {
    #[test]
    fn set_group_id_without_group_execute_stays_for_the_group() {
        use super::setid_dropped as dropped;
        for in_group in [true, false] {
            assert_eq!(dropped(0o4755, in_group), Some(0o755));
            assert_eq!(dropped(0o6755, in_group), Some(0o755));
            assert_eq!(dropped(0o2755, in_group), Some(0o755));
            assert_eq!(dropped(0o644, in_group), None);
        }
        // S_ISGID without group execute marks mandatory locking: Linux keeps it for
        // a member of the file's group, and drops it for anyone else.
        assert_eq!(dropped(0o2644, true), None);
        assert_eq!(dropped(0o6644, true), Some(0o2644));
        assert_eq!(dropped(0o2644, false), Some(0o644));
        // As the client core asks for its descriptors (in_group true).
        assert_eq!(dropped(0o6745, true), Some(0o2745));
        assert_eq!(dropped(0o2745, true), None);
    }

    use super::*;

    fn rec(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Record {
        Record {
            kind,
            mode,
            size: 0,
            file_id: 1,
            nlink: 1,
            ctime_ns: 0,
            mtime_ns: 0,
            atime_ns: 0,
            target: String::new(),
            uid,
            gid,
            xattrs: Vec::new(),
        }
    }

    #[test]
    fn classes_and_root() {
        let who = Credentials { uid: 1000, gid: 100, groups: vec![200] };
        let f = |mode, uid, gid| rec(FileKind::File, mode, uid, gid);
        assert!(allows(&who, &f(0o600, 1000, 1), MAY_READ | MAY_WRITE));
        assert!(!allows(&who, &f(0o060, 1000, 100), MAY_READ), "the owner's bits decide for the owner");
        assert!(allows(&who, &f(0o060, 1, 200), MAY_READ | MAY_WRITE), "a supplementary group");
        assert!(!allows(&who, &f(0o604, 1, 300), MAY_WRITE));
        assert!(allows(&who, &f(0o604, 1, 300), MAY_READ));
        let root = Credentials { uid: 0, gid: 0, groups: vec![] };
        assert!(allows(&root, &f(0o000, 1, 1), MAY_READ | MAY_WRITE));
        assert!(!allows(&root, &f(0o600, 1, 1), MAY_EXEC), "root executes only what has an x bit");
        assert!(allows(&root, &rec(FileKind::Dir, 0o000, 1, 1), MAY_EXEC), "root searches any directory");
        assert_eq!(open_wants(libc::O_RDONLY | libc::O_TRUNC), MAY_READ | MAY_WRITE);
        assert_eq!(open_wants(libc::O_WRONLY), MAY_WRITE);
    }
}
