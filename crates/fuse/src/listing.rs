//! Listings: READDIR and READDIRPLUS replies filled from the client's directory
//! streams, one kernel buffer at a time.

use super::*;

impl GustFs {
    /// One READDIR or READDIRPLUS reply. `emit(next offset, name, kind, path)` adds
    /// an entry (`path` None for "." and ".."), true when the reply is full. With
    /// `plus` the listing fetches attributes, which the client keeps for the stats
    /// READDIRPLUS answers with.
    pub(crate) fn do_readdir(
        &self,
        d: &DirHandle,
        offset: u64,
        plus: bool,
        mut emit: impl FnMut(u64, &str, Kind, Option<&str>) -> Emitted,
    ) -> Result<(), Errno> {
        let open = |p: &str| if plus { self.client.opendir_plus(p) } else { self.client.opendir(p) };
        let mut s = d.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = s.failed.take() {
            return Err(e);
        }
        if offset != s.pos {
            // A seek (rewinddir, seekdir): start over and skip. Bounded by the
            // directory size; sequential listings never come here.
            s.stream = None;
            s.pending = None;
            s.pos = offset.min(2);
            if offset > 2 {
                let mut st = open(&d.path)?;
                while s.pos < offset {
                    match st.next() {
                        None => break,
                        Some(Err(e)) => return Err(e),
                        Some(Ok(_)) => s.pos += 1,
                    }
                }
                s.stream = Some(st);
            }
        }
        let mut added = 0usize;
        loop {
            let pos = s.pos;
            if pos < 2 {
                let name = if pos == 0 { "." } else { ".." };
                if emit(pos + 1, name, Kind::Dir, None) == Emitted::Full {
                    break;
                }
                s.pos += 1;
                added += 1;
                if s.pos == 2 && s.stream.is_none() {
                    s.stream = Some(open(&d.path)?);
                }
                continue;
            }
            let e = match s.pending.take() {
                Some(e) => e,
                None => match s.stream.as_mut().and_then(|st| st.next()) {
                    None => {
                        s.ended_with = s.stream.as_ref().and_then(|st| st.listing_id());
                        break;
                    }
                    Some(Ok(e)) => e,
                    Some(Err(e)) => {
                        if added == 0 {
                            return Err(e);
                        }
                        s.failed = Some(e);
                        break;
                    }
                },
            };
            let path = join(&d.path, &e.name);
            match emit(pos + 1, &e.name, e.kind, Some(&path)) {
                Emitted::Full => {
                    s.pending = Some(e);
                    break;
                }
                Emitted::Added => added += 1,
                Emitted::Skipped => {}
            }
            s.pos += 1;
        }
        Ok(())
    }

    /// READDIRPLUS's entry for `path`: its attributes (from the listing, see
    /// gust-client listing.rs), added to the reply and, once added, counted as a
    /// lookup the kernel holds (it will FORGET it); in `kept` if the kernel may
    /// keep them (coherence.rs).
    pub(crate) fn emit_plus(
        &self,
        reply: &mut ReplyDirectoryPlus,
        next: u64,
        name: &str,
        dir: &DirHandle,
        path: Option<&str>,
        kept: &mut Vec<String>,
    ) -> Emitted {
        let Some(path) = path else {
            // The directory's own attributes came without a grant.
            let ttl = if self.client.grants_on() { Duration::ZERO } else { self.opts.entry_timeout };
            // "." and "..": the kernel takes no reference on them; any attributes do.
            let ino = name_ino(&format!("{}/{name}", dir.path));
            let dir = &dir.stat;
            return if reply.add(INodeNo(ino), next, name, &ttl, &self.attr(ino, dir), Generation(0)) {
                Emitted::Full
            } else {
                Emitted::Added
            };
        };
        let Ok(st) = self.client.lstat(path) else { return Emitted::Skipped };
        // The daemons grant a listing's records (gust-daemon grants.rs,
        // `grant_listed`); the kernel keeps those only (coherence.rs).
        let told = self.for_kernel(path, st);
        let (st, ttl) = (told.st, told.attr.min(told.entry));
        let ino = self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_path
            .get(path)
            .copied()
            .unwrap_or_else(|| Self::ino_of(path, &st));
        if reply.add(INodeNo(ino), next, name, &ttl, &self.attr(ino, &st), Generation(0)) {
            return Emitted::Full;
        }
        self.remember(path, &st, ttl);
        if !ttl.is_zero() {
            kept.push(path.to_string());
        }
        Emitted::Added
    }
}
