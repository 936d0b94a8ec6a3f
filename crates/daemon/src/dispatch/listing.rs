//! Requests that list: a directory's children (with or without their records), a
//! tree's records, `gust find`'s filtered scan, rmdir's emptiness check.

use super::*;

pub(super) fn serve(state: &State, req: Request) -> Reply {
    let md = &state.metadata;
    match req {
        Request::ReadDir { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, READDIR_PAGE_ENTRIES_MAX) as usize;
            let (page, done) = md.read_dir(&dir, after.as_deref(), max, READDIR_PAGE_BYTES_MAX)?;
            Ok(Response::DirPage {
                entries: page.into_iter().map(|(name, kind)| DirEntry { name, kind }).collect(),
                done,
            })
        }
        Request::HasChildren { dir } => {
            validate_path(&dir)?;
            md.has_children(&dir).map(Response::Bool)
        }
        Request::ScanTree { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, SCAN_PAGE_ENTRIES_MAX) as usize;
            let (records, last_key, done) = md.scan_tree(&dir, after.as_deref(), max)?;
            Ok(Response::Tree { records, last_key, done })
        }
        Request::Find { dir, query, after, max_entries } => {
            validate_path(&dir)?;
            if query.name.as_ref().is_some_and(|n| n.len() > FIND_PATTERN_BYTES_MAX) {
                return Err(libc::EINVAL);
            }
            let max = max_entries.clamp(1, SCAN_PAGE_ENTRIES_MAX) as usize;
            let (records, last_key, done) = md.scan_tree_where(
                &dir,
                after.as_deref(),
                max,
                FIND_SCAN_PAGE_KEYS_MAX as usize,
                // -name first, on the key alone: most keys end there.
                NameFilter {
                    prefix: &query.name.as_ref().map(|g| glob_literal_prefix(g.as_bytes())).unwrap_or_default(),
                    keep: |name| query.name.as_ref().is_none_or(|g| glob_match(g.as_bytes(), name)),
                },
                // A name of a hard-linked file holds no attributes of the file's:
                // the client judges it on the file's (gust-client's find.rs).
                |r| query.matches_record(r) || (r.linked_to().is_some() && query.kind.is_none_or(|k| k == r.kind)),
            )?;
            Ok(Response::Tree { records, last_key, done })
        }
        Request::ReadDirPlus { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, READDIR_PAGE_ENTRIES_MAX) as usize;
            let (entries, done) = md.read_dir_plus(&dir, after.as_deref(), max, READDIR_PAGE_BYTES_MAX, true)?;
            Ok(Response::DirPagePlus { entries, done })
        }
        other => misrouted(&other),
    }
}
