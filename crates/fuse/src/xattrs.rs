//! GETXATTR, LISTXATTR, SETXATTR and REMOVEXATTR: the client core's extended
//! attributes (gust-client xattrs.rs) of the inode's path, never following a
//! symlink (the kernel resolved the path). Permission checks are the kernel's
//! (`default_permissions`) or none, as for every request here.

use super::*;

/// What a GETXATTR or LISTXATTR of `size` bytes answers for `value`: its length
/// when asked for the length (size 0), the bytes when they fit, else ERANGE.
fn reply_sized(reply: ReplyXattr, size: u32, value: Result<Vec<u8>, Errno>) {
    match value {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() <= size as usize => reply.data(&v),
        Ok(_) => reply.error(FErrno::ERANGE),
        Err(e) => reply.error(fe(e)),
    }
}

impl GustFs {
    pub(crate) fn xattr_get(&self, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = (|| {
            // A name that is not UTF-8 cannot have been set.
            let name = name.to_str().ok_or(Errno(libc::ENODATA))?;
            self.client.getxattr(&self.path(ino)?, name, false)
        })();
        reply_sized(reply, size, r)
    }

    pub(crate) fn xattr_list(&self, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_sized(reply, size, self.path(ino).and_then(|p| self.client.listxattr(&p, false)))
    }

    /// SETXATTR (`value` Some) and REMOVEXATTR (None).
    pub(crate) fn xattr_set(&self, ino: INodeNo, name: &OsStr, value: Option<&[u8]>, flags: i32, reply: ReplyEmpty) {
        let r = (|| {
            self.ro()?;
            let name = name.to_str().ok_or(Errno(libc::EINVAL))?;
            let path = self.path(ino)?;
            match value {
                Some(v) => self.client.setxattr(&path, name, v, flags as u32, false),
                None => self.client.removexattr(&path, name, false),
            }
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(fe(e)),
        }
    }
}
