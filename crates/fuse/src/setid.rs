//! Dropping set-user-id and set-group-id bits on a write or truncate by an
//! unprivileged caller, which this mount does instead of the kernel.
//!
//! Why: left to the kernel, every write(2) to the mount first asks GETXATTR
//! `security.capability` (`file_remove_privs`; FUSE file systems may hold file
//! capabilities, and the kernel does not remember the answer), one more round trip
//! to this process per write. With `FUSE_HANDLE_KILLPRIV_V2` the kernel leaves the
//! bits to the file system and says when a caller lacks CAP_FSETID (a WRITE's
//! `FUSE_WRITE_KILL_SUIDGID`). This mount then drops them as Linux does
//! (`setattr_should_drop_suidgid`): S_ISUID always, S_ISGID when the group may
//! execute or the caller is not in the file's group. A truncate (SETATTR of the
//! size) or an open with O_TRUNC by a caller other than root drops them too; fuser
//! does not pass the kernel's flag for those, so uid 0 stands for CAP_FSETID. A
//! chown drops them in the daemon (set_owner), also a chown that changes no id,
//! which reaches this mount as a SETATTR of no attribute at all.
//!
//! What is read: the mode the kernel was last told (the inode table's `known`, the
//! attributes the kernel's own check would have used), so a write to a file
//! without set-id bits costs nothing more.

use super::*;

impl GustFs {
    /// Whether the inode's last known mode had bits a write drops (or none is known).
    fn may_have_setid(&self, ino: u64) -> bool {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        match t.nodes.get(&ino).and_then(|n| n.known) {
            Some(k) => k.kind == Kind::File && k.mode & (libc::S_ISUID | libc::S_ISGID) != 0,
            None => true,
        }
    }

    /// Drops the set-id bits of `path` that a change by the caller of `req` drops.
    pub(crate) fn drop_setid(&self, req: &Request, ino: u64, path: &str) -> Result<(), Errno> {
        if !self.may_have_setid(ino) {
            return Ok(());
        }
        self.drop_from(req, ino, path, &self.client.lstat(path)?)
    }

    /// `drop_setid` for a write that the kernel flagged.
    pub(crate) fn drop_setid_on_write(
        &self,
        req: &Request,
        ino: INodeNo,
        fd: i32,
        flags: WriteFlags,
    ) -> Result<(), Errno> {
        if !flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) || !self.may_have_setid(ino.0) {
            return Ok(());
        }
        self.drop_from(req, ino.0, &self.path(ino)?, &self.client.fstat(fd)?)
    }

    /// Drops what `st`, the attributes of inode `ino` at `path`, has to lose; the
    /// kernel forgets the inode's attributes after.
    fn drop_from(&self, req: &Request, ino: u64, path: &str, st: &Stat) -> Result<(), Errno> {
        match gust_client::setid_dropped(st.mode & 0o7777, caller_with_groups(req).in_group(st.gid)) {
            Some(m) if st.kind == Kind::File => {
                self.client.chmod(path, m)?;
                self.coherence.attrs_changed(ino);
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
