//! The two sides of a stage: walking the source (a local tree, or a GustFS tree in
//! one fan-out over the daemons), filtering it, finding what the destination
//! already holds complete (resuming), and the directories of the destination.

use crate::report::Failure;
use crate::{reason, Direction};
use globset::{Glob, GlobSet, GlobSetBuilder};
use gust_client::{local_kind, local_time_ns, path, Client, FindQuery, Kind, Record};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// One thing to stage: a directory, a file or a symlink, with its attributes as
/// the source has them.
#[derive(Clone, Debug)]
pub struct Item {
    pub kind: Kind,
    /// Full source path: local (in) or inside GustFS (out).
    pub src: String,
    /// Full destination path: inside GustFS (in) or local (out).
    pub dest: String,
    pub size: u64,
    pub mode: u32,
    pub mtime_ns: i64,
    pub atime_ns: i64,
    /// A symlink's target.
    pub target: String,
    /// The GustFS file id of a stage-out source (0 for stage-in).
    pub file_id: u128,
    /// Extended attributes: a stage-out source's, or what a stage-in gives the
    /// file (an object's metadata; object/metadata.rs).
    pub xattrs: Vec<(String, Vec<u8>)>,
}

impl Item {
    pub fn is_file(&self) -> bool {
        self.kind == Kind::File
    }
    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }
    pub fn is_symlink(&self) -> bool {
        self.kind == Kind::Symlink
    }
}

/// `--include` / `--exclude`: a pattern with a `/` matches the path relative to the
/// source root, one without matches the name. Excluded directories are not walked;
/// with includes, only matching files and symlinks are staged (directories are
/// always walked and created, so the tree's shape stays).
pub struct Filter {
    include_path: GlobSet,
    include_name: GlobSet,
    exclude_path: GlobSet,
    exclude_name: GlobSet,
    any_include: bool,
}

fn globs(patterns: &[String], with_slash: bool) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns.iter().filter(|p| p.contains('/') == with_slash) {
        let p = p.trim_start_matches('/');
        b.add(Glob::new(p).map_err(|e| format!("pattern {p}: {e}"))?);
    }
    b.build().map_err(|e| e.to_string())
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, String> {
        Ok(Filter {
            include_path: globs(include, true)?,
            include_name: globs(include, false)?,
            exclude_path: globs(exclude, true)?,
            exclude_name: globs(exclude, false)?,
            any_include: !include.is_empty(),
        })
    }

    fn excluded(&self, rel: &str, name: &str) -> bool {
        self.exclude_name.is_match(name) || self.exclude_path.is_match(rel)
    }

    fn included(&self, rel: &str, name: &str) -> bool {
        !self.any_include || self.include_name.is_match(name) || self.include_path.is_match(rel)
    }

    /// Whether an entry at `rel` (relative to the root, no leading `/`) is staged;
    /// directories only face the excludes.
    pub fn admits(&self, rel: &str, is_dir: bool) -> bool {
        if rel.is_empty() {
            return true; // the root itself
        }
        let name = rel.rsplit('/').next().unwrap_or(rel);
        !self.excluded(rel, name) && (is_dir || self.included(rel, name))
    }
}

/// `dest/name` where name is the last component of `src` (several sources).
pub fn join_name(dest: &str, src: &str, dir: Direction) -> String {
    let name = src.trim_end_matches('/').rsplit('/').next().unwrap_or(src);
    match dir {
        Direction::In => path::join(dest, name),
        Direction::Out => Path::new(dest).join(name).display().to_string(),
    }
}

/// Walks a local tree (not following symlinks) into `out`, with GustFS
/// destinations under `dest` (an internal path).
pub fn walk_local(
    c: &Client,
    src: &str,
    dest: &str,
    filter: &Filter,
    only: Option<&HashSet<String>>,
    out: &mut Vec<Item>,
) -> Result<(), String> {
    let root = std::path::absolute(src).map_err(|e| format!("{src}: {e}"))?;
    let dest = c.internal_path(dest).unwrap_or_else(|| dest.to_string());
    let m = fs::symlink_metadata(&root).map_err(|e| format!("{src}: {e}"))?;
    // (local path, GustFS path, path relative to the root, metadata)
    let mut stack = vec![(root, dest, String::new(), m)];
    while let Some((p, d, rel, m)) = stack.pop() {
        let src = p.to_str().ok_or_else(|| format!("{}: not a UTF-8 path", p.display()))?.to_string();
        let Some(kind) = local_kind(&m.file_type()) else { continue };
        if !filter.admits(&rel, kind == Kind::Dir) {
            continue;
        }
        if kind != Kind::Dir && only.is_some_and(|o| !o.contains(&d)) {
            continue;
        }
        let target = if kind == Kind::Symlink {
            fs::read_link(&p).map_err(|e| format!("{src}: {e}"))?.to_string_lossy().into_owned()
        } else {
            String::new()
        };
        out.push(Item {
            kind,
            src,
            dest: d.clone(),
            size: if kind == Kind::File { m.len() } else { 0 },
            mode: m.mode() & 0o7777,
            mtime_ns: local_time_ns(m.mtime(), m.mtime_nsec()),
            atime_ns: local_time_ns(m.atime(), m.atime_nsec()),
            target,
            file_id: 0,
            xattrs: Vec::new(),
        });
        if kind == Kind::Dir {
            let mut entries: Vec<_> = fs::read_dir(&p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok())
                .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path(), e.metadata().ok()?)))
                .collect();
            // Reverse name order on the stack: popped in name order.
            entries.sort_by(|a, b| b.0.cmp(&a.0));
            for (name, path, meta) in entries {
                let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
                stack.push((path, path::join(&d, &name), r, meta));
            }
        }
    }
    Ok(())
}

fn item_of_record(src: String, dest: String, r: &Record) -> Item {
    Item {
        kind: r.kind,
        src,
        dest,
        size: r.size,
        mode: r.mode & 0o7777,
        mtime_ns: r.mtime_ns,
        atime_ns: r.atime_ns,
        target: r.target.clone(),
        file_id: r.file_id,
        xattrs: r.xattrs.clone(),
    }
}

/// Walks a GustFS tree into `out`, with local destinations under `dest`: one
/// find fan-out over every daemon, then parents before children.
/// A view's entry not fetched yet (`r`, the record of `p`) is fetched first: an
/// open does it, and `r` becomes the fetched file's record.
fn fetched(c: &Client, p: &str, r: &mut Record) -> Result<(), String> {
    if r.unfetched_object().is_some() {
        let fd = c.open(p, libc::O_RDONLY, 0).map_err(|e| format!("{p}: {e}"))?;
        let _ = c.close(fd);
        *r = c.lstat_record(p).map_err(|e| format!("{p}: {e}"))?;
    }
    Ok(())
}

pub fn walk_gust(
    c: &Client,
    src: &str,
    dest: &str,
    filter: &Filter,
    only: Option<&HashSet<String>>,
    out: &mut Vec<Item>,
) -> Result<(), String> {
    let root = c.internal_path(src).unwrap_or_else(|| src.to_string());
    let dest = std::path::absolute(dest).map_err(|e| format!("{dest}: {e}"))?.display().to_string();
    let mut rec = c.lstat_record(&root).map_err(|e| format!("{src}: {e}"))?;
    fetched(c, &root, &mut rec)?;
    if rec.kind != Kind::Dir {
        if matches!(rec.kind, Kind::File | Kind::Symlink) {
            out.push(item_of_record(root, dest, &rec));
        }
        return Ok(());
    }
    out.push(item_of_record(root.clone(), dest.clone(), &rec));
    let mut found = Vec::new();
    c.find(&root, &FindQuery::default(), |p, r| found.push((p.to_string(), r.clone())))
        .map_err(|e| format!("{src}: {e}"))?;
    // The views are a picture of object stores, not the job's data: a stage-out
    // of the whole namespace leaves them out (one of a view's directory copies it),
    // and so the placeholders of cache mode of a store (their objects are there).
    if root == "/" {
        let views = gust_client::path::VIEWS_DIR;
        found.retain(|(p, r)| !is_under(p, views) && p != views && r.unfetched_object().is_none());
    }
    for (p, r) in found.iter_mut() {
        fetched(c, p, r)?;
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let prefix = if root == "/" { 1 } else { root.len() + 1 };
    let mut pruned: Vec<String> = Vec::new();
    for (p, r) in found {
        let rel = &p[prefix..];
        if pruned.iter().any(|d| rel.starts_with(d.as_str()) && rel.as_bytes().get(d.len()) == Some(&b'/')) {
            continue;
        }
        if !matches!(r.kind, Kind::Dir | Kind::File | Kind::Symlink) {
            continue; // a FIFO or socket name has no data; its program is gone
        }
        if !filter.admits(rel, r.kind == Kind::Dir) {
            if r.kind == Kind::Dir {
                pruned.push(rel.to_string());
            }
            continue;
        }
        if r.kind != Kind::Dir && only.is_some_and(|o| !o.contains(&p)) {
            continue;
        }
        let d = Path::new(&dest).join(rel).display().to_string();
        out.push(item_of_record(p, d, &r));
    }
    Ok(())
}

/// Up to this many named files, a stage-out looks each up (with its directories)
/// instead of walking the whole source tree.
pub const NAMED_FILES_MAX: usize = 4096;

/// The items of a stage-out of only the files `only` below GustFS directory `src`:
/// each file's record and those of the directories between `src` and it (so they
/// are made with their modes), parents before children. One lookup per file and
/// directory, whatever the size of the tree.
pub fn named_gust(
    c: &Client,
    src: &str,
    dest: &str,
    filter: &Filter,
    only: &HashSet<String>,
    out: &mut Vec<Item>,
) -> Result<(), String> {
    let root = c.internal_path(src).unwrap_or_else(|| src.to_string());
    let dest = std::path::absolute(dest).map_err(|e| format!("{dest}: {e}"))?.display().to_string();
    let rec = c.lstat_record(&root).map_err(|e| format!("{src}: {e}"))?;
    if rec.kind != Kind::Dir {
        if only.contains(&root) && matches!(rec.kind, Kind::File | Kind::Symlink) {
            out.push(item_of_record(root, dest, &rec));
        }
        return Ok(());
    }
    let prefix = if root == "/" { 1 } else { root.len() + 1 };
    let views = gust_client::path::VIEWS_DIR;
    let mut paths: Vec<&String> =
        only.iter().filter(|p| is_under(p, &root) && !(root == "/" && is_under(p, views))).collect();
    paths.sort();
    let mut dirs_done: HashSet<String> = HashSet::new();
    out.push(item_of_record(root.clone(), dest.clone(), &rec));
    for p in paths {
        let rel = &p[prefix..];
        // The directories on the way, each once.
        let mut dirs = Vec::new();
        let mut d = path::parent(p);
        while d != root && d.len() > root.len() && !dirs_done.contains(d) {
            dirs.push(d.to_string());
            d = path::parent(d);
        }
        let mut pruned = false;
        for d in dirs.into_iter().rev() {
            let drel = &d[prefix..];
            if !filter.admits(drel, true) {
                pruned = true;
                break;
            }
            let Ok(r) = c.lstat_record(&d) else {
                pruned = true;
                break;
            };
            out.push(item_of_record(d.clone(), Path::new(&dest).join(drel).display().to_string(), &r));
            dirs_done.insert(d);
        }
        if pruned || !filter.admits(rel, false) {
            continue;
        }
        // Gone since it was named (removed after its close): nothing to copy.
        let Ok(mut r) = c.lstat_record(p) else { continue };
        // A placeholder below "/" is its store's object (cache mode of a store); a
        // view's entry whose object is gone meanwhile has nothing to copy either.
        if (root == "/" && r.unfetched_object().is_some()) || fetched(c, p, &mut r).is_err() {
            continue;
        }
        if matches!(r.kind, Kind::File | Kind::Symlink) {
            out.push(item_of_record(p.clone(), Path::new(&dest).join(rel).display().to_string(), &r));
        }
    }
    Ok(())
}

/// What the destination already holds: per destination path, (kind, size, mtime,
/// symlink target).
#[derive(Default)]
pub struct Existing {
    map: HashMap<String, (Kind, u64, i64, String)>,
}

impl Existing {
    /// A non-directory is complete if the destination has it with the same size and
    /// modification time (symlinks: the same target); a directory if it exists.
    pub fn is_complete(&self, i: &Item) -> bool {
        match self.map.get(&i.dest) {
            Some((k, size, mtime, target)) if *k == i.kind => match i.kind {
                Kind::Dir => true,
                Kind::Symlink => *target == i.target,
                _ => *size == i.size && *mtime == i.mtime_ns,
            },
            _ => false,
        }
    }

    /// Records what is at `dest` (an object store's listing).
    pub(crate) fn insert(&mut self, dest: String, kind: Kind, size: u64, mtime_ns: i64) {
        self.map.insert(dest, (kind, size, mtime_ns, String::new()));
    }

    /// Whether something (of any kind) is at the destination path.
    pub fn get(&self, dest: &str) -> Option<Kind> {
        self.map.get(dest).map(|e| e.0)
    }
}

/// The GustFS records under the destinations of a stage-in, by path: one find
/// fan-out per destination root (nothing for a root that does not exist yet).
pub fn records_under(c: &Client, items: &[Item]) -> HashMap<String, Record> {
    let mut out = HashMap::new();
    let dirs: HashSet<&str> = items.iter().filter(|i| i.is_dir()).map(|i| i.dest.as_str()).collect();
    let roots = items.iter().filter(|i| i.dest == "/" || !dirs.contains(path::parent(&i.dest)));
    for root in roots {
        let Ok(r) = c.lstat_record(&root.dest) else { continue };
        let is_dir = r.kind == Kind::Dir;
        out.insert(root.dest.clone(), r);
        if is_dir {
            let _ = c.find(&root.dest, &FindQuery::default(), |p, r| {
                out.insert(p.to_string(), r.clone());
            });
        }
    }
    out
}

/// What GustFS holds under the destinations of a stage-in.
pub fn existing_in_gust(c: &Client, items: &[Item]) -> Existing {
    let map = records_under(c, items).into_iter().map(|(p, r)| (p, (r.kind, r.size, r.mtime_ns, r.target))).collect();
    Existing { map }
}

pub fn is_under(p: &str, dir: &str) -> bool {
    p.len() > dir.len() && p.starts_with(dir) && (dir.ends_with('/') || p.as_bytes()[dir.len()] == b'/')
}

/// What the local destinations of a stage-out hold (one lstat each).
pub fn existing_local(items: &[Item]) -> Existing {
    let mut e = Existing::default();
    for i in items {
        let Ok(m) = fs::symlink_metadata(&i.dest) else { continue };
        // Anything else is in the way of whatever is staged there.
        let kind = local_kind(&m.file_type()).unwrap_or(Kind::Fifo);
        let target = if kind == Kind::Symlink {
            fs::read_link(&i.dest).map(|t| t.to_string_lossy().into_owned()).unwrap_or_default()
        } else {
            String::new()
        };
        e.map.insert(i.dest.clone(), (kind, m.len(), local_time_ns(m.mtime(), m.mtime_nsec()), target));
    }
    e
}

/// Creates the destination directories (parents first), private to the
/// owner until `finish_dirs`. Returns the directories (item indices) that exist,
/// and the destinations of those that could not be made (each in `failures`).
pub fn make_dirs(
    c: &Client,
    dir: Direction,
    items: &[Item],
    existing: &Existing,
    failures: &mut Vec<Failure>,
) -> (Vec<usize>, Vec<String>) {
    let mut made = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for (i, it) in items.iter().enumerate().filter(|(_, it)| it.is_dir()) {
        if failed.iter().any(|f| is_under(&it.dest, f)) {
            continue;
        }
        let exists = existing.get(&it.dest) == Some(Kind::Dir);
        let r = if exists {
            Ok(())
        } else {
            match dir {
                Direction::In => match c.mkdir(&it.dest, 0o700 | it.mode) {
                    Err(gust_client::Errno(libc::EEXIST)) if exists => Ok(()),
                    r => r.map_err(|e| reason(e.0)),
                },
                Direction::Out => create_local_dir(Path::new(&it.dest)).map_err(|e| e.to_string()),
            }
        };
        match r {
            Ok(()) => made.push(i),
            Err(why) => {
                failures.push(Failure {
                    path: it.src.clone(),
                    reason: format!("cannot create directory {}: {why}", it.dest),
                });
                failed.push(it.dest.clone());
            }
        }
    }
    (made, failed)
}

fn create_local_dir(dest: &Path) -> std::io::Result<()> {
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dest.is_dir() => {
            // Writable by the owner while it is filled; its own mode comes at the end.
            let m = fs::metadata(dest)?.permissions().mode();
            fs::set_permissions(dest, fs::Permissions::from_mode(m | 0o700))
        }
        r => r,
    }
}

/// Gives the destination directories their modes and modification times, children
/// before parents (a read-only directory is filled first; setting a child's
/// attributes does not touch its parent's mtime).
pub fn finish_dirs(c: &Client, dir: Direction, items: &[Item], dirs: &[usize], failures: &mut Vec<Failure>) {
    for &i in dirs.iter().rev() {
        let it = &items[i];
        if dir == Direction::Out && it.src == "/" {
            continue; // GustFS's root has fixed attributes, not the destination's
        }
        let r = match dir {
            Direction::In => c
                .chmod(&it.dest, it.mode)
                .and_then(|_| c.utimens(&it.dest, Some(it.atime_ns), Some(it.mtime_ns), false))
                .map_err(|e| reason(e.0)),
            Direction::Out => fs::set_permissions(&it.dest, fs::Permissions::from_mode(it.mode))
                .and_then(|_| set_times_local(&it.dest, it.atime_ns, it.mtime_ns))
                .map_err(|e| e.to_string()),
        };
        if let Err(why) = r {
            failures.push(Failure {
                path: it.src.clone(),
                reason: format!("cannot set mode {:04o} and times of {}: {why}", it.mode, it.dest),
            });
        }
    }
}

/// utimensat of a local path (not following a symlink), nanoseconds since the epoch.
pub fn set_times_local(p: &str, atime_ns: i64, mtime_ns: i64) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let ts = |ns: i64| libc::timespec { tv_sec: ns.div_euclid(1_000_000_000), tv_nsec: ns.rem_euclid(1_000_000_000) };
    let times = [ts(atime_ns), ts(mtime_ns)];
    // SAFETY: a NUL-terminated path and two valid timespecs.
    if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_by_name_and_by_path() {
        let f = Filter::new(&["*.csv".into(), "keep/**".into()], &["tmp".into(), "logs/*.log".into()]).unwrap();
        assert!(f.admits("a/b.csv", false));
        assert!(!f.admits("a/b.txt", false), "not included");
        assert!(f.admits("keep/x/y.txt", false), "path include");
        assert!(!f.admits("a/tmp", true), "excluded directory by name");
        assert!(f.admits("a/other", true), "directories face the excludes only");
        assert!(!f.admits("logs/x.log", false));
        let none = Filter::new(&[], &[]).unwrap();
        assert!(none.admits("anything/at/all", false));
        assert!(Filter::new(&["[".into()], &[]).is_err(), "a bad pattern is an error");
    }

    #[test]
    fn under_is_by_component() {
        assert!(is_under("/a/b", "/a"));
        assert!(!is_under("/ab", "/a"));
        assert!(!is_under("/a", "/a"));
        assert!(is_under("/x", "/"));
    }
}
