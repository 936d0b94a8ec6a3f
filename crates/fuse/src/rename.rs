//! Rename: the client core's rename, then the inode table's paths (the renamed
//! entry and every remembered descendant) and hidden open files.

use super::*;

impl GustFs {
    pub(crate) fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        self.ro()?;
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno(libc::EINVAL));
        }
        let old = child(&self.path(parent)?, name)?;
        let new = child(&self.path(newparent)?, newname)?;
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            match self.client.lstat(&new) {
                Ok(_) => return Err(Errno(libc::EEXIST)),
                Err(Errno(libc::ENOENT)) => {}
                Err(e) => return Err(e),
            }
        }
        if old == new {
            return Ok(());
        }
        // A replaced target that is still open keeps its data under a hidden name.
        if let Some(ino) = self.open_ino(&new) {
            if let Ok(st) = self.client.lstat(&new) {
                if st.kind == Kind::File {
                    self.hide(ino, &new)?;
                }
            }
        }
        self.negative.added(&new);
        self.client.rename(&old, &new)?;
        self.negative.removed(&old);
        // Rebase the renamed entry and every remembered descendant (the client core
        // moves its open descriptors itself).
        {
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            t.forget_path(&new);
            let prefix = format!("{old}/");
            let mut affected: Vec<(String, u64)> = Vec::new();
            if let Some(&ino) = t.by_path.get(&old) {
                affected.push((old.clone(), ino));
            }
            // '/' + 1 == '0': the range holds exactly the paths under `old/`.
            let end = format!("{old}0");
            for (p, &ino) in t.by_path.range(prefix.clone()..end) {
                affected.push((p.clone(), ino));
            }
            for (p, _) in &affected {
                t.by_path.remove(p);
            }
            for (p, ino) in affected {
                let np = rebase(&p, &old, &new).expect("the old path or below it");
                if let Some(n) = t.nodes.get_mut(&ino) {
                    n.path = np.clone();
                }
                t.by_path.insert(np, ino);
            }
        }
        Ok(())
    }
}
