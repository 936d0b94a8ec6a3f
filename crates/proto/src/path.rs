//! Path rules: what a path inside GustFS is, shared by the client (which normalizes
//! what it is given), the daemon (which refuses what is not normalized) and the front
//! ends (which build paths from directory entries).
//!
//! A path inside the file system is absolute and normalized: "/" or "/a/b", no empty,
//! "." or ".." component, no trailing slash, no NUL, at most [`PATH_BYTES_MAX`] bytes,
//! each component at most [`NAME_BYTES_MAX`] bytes. Errors are errno values (Linux
//! numbering), as on the wire.
//!
//! Not for: mount directories and working directories (front ends map those onto
//! paths inside the file system), symlinks (the client resolves them), keys of the
//! metadata store (the daemon's).

use crate::{NAME_BYTES_MAX, PATH_BYTES_MAX};

/// Checks one path component (a directory entry's name).
pub fn check_name(name: &str) -> Result<(), i32> {
    if name.contains('/') || name.contains('\0') {
        return Err(libc::EINVAL);
    }
    check_component(name)
}

/// The rule for a component taken from a path split at '/' whose NULs were already
/// refused (so the per-request checks scan each byte once).
#[inline]
fn check_component(c: &str) -> Result<(), i32> {
    if c.is_empty() || c == "." || c == ".." {
        return Err(libc::EINVAL);
    }
    if c.len() > NAME_BYTES_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(())
}

/// Lexically normalizes an absolute path: collapses "//" and ".", resolves "..".
/// Relative paths are EINVAL here; front ends resolve them against their cwd.
/// (Inline: on every client call, so compiled where it is used, as before it moved here.)
#[inline]
pub fn normalize(path: &str) -> Result<String, i32> {
    if !path.starts_with('/') {
        return Err(libc::EINVAL);
    }
    if path.len() > PATH_BYTES_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if path.contains('\0') {
        return Err(libc::EINVAL);
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => {
                if c.len() > NAME_BYTES_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
                parts.push(c)
            }
        }
    }
    if parts.is_empty() {
        return Ok("/".into());
    }
    let mut out = String::with_capacity(path.len());
    for p in parts {
        out.push('/');
        out.push_str(p);
    }
    Ok(out)
}

/// Checks that a path is already normalized (what a daemon accepts from a peer), or
/// is the path of a hard-linked file's attributes ([`link_path`]).
#[inline]
pub fn validate(path: &str) -> Result<(), i32> {
    if path.len() > PATH_BYTES_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if !path.starts_with('/') || path.contains('\0') {
        return Err(libc::EINVAL);
    }
    if path == "/" || is_link_path(path) {
        return Ok(());
    }
    path[1..].split('/').try_for_each(check_component)
}

/// The parent of a normalized path ("/" for "/" itself).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Where the attributes of a hard-linked file live (its size, mode, owner, times
/// and link count: the inode, in CephFS's words), keyed by its file id. Each name
/// of the file is a record of the file's kind whose `target` is this path. It
/// starts with "//", which no normalized path does, so no user path can name it,
/// no directory lists it (the store's key of its parent is `//links`), and every
/// request by path works on it unchanged (docs/DESIGN.md, "Hard links").
pub fn link_path(file_id: u128) -> String {
    format!("{LINKS_DIR}/{file_id:032x}")
}

/// The parent of every [`link_path`].
pub const LINKS_DIR: &str = "//links";

/// The directory of the views of object stores (gust-view): a picture of a store,
/// not the job's data, so a stage-out of "/" leaves it out.
pub const VIEWS_DIR: &str = "/.views";

/// Whether `path` is a [`link_path`] (exactly: the prefix and 32 lowercase hex digits).
pub fn is_link_path(path: &str) -> bool {
    path.len() == LINKS_DIR.len() + 33
        && path.starts_with(LINKS_DIR)
        && path.as_bytes()[LINKS_DIR.len()] == b'/'
        && path.as_bytes()[LINKS_DIR.len() + 1..].iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// The key of the grant on directory `dir`'s names (docs/DESIGN.md, "Grants",
/// listings): `dir` and a "/", which no normalized path ends with ("//" for the
/// root, which is no link path either).
pub fn listing_key(dir: &str) -> String {
    format!("{dir}/")
}

/// The directory whose names `key` is the grant on, if it is a [`listing_key`].
pub fn listing_dir(key: &str) -> Option<&str> {
    match key {
        "//" => Some("/"),
        k if k.len() > 2 && k.ends_with('/') => Some(&k[..k.len() - 1]),
        _ => None,
    }
}

/// The key of a claim on directory `dir`'s names (docs/DESIGN.md, "Claims"), as a
/// recall names it: "//claim" and `dir`, which no normalized path, listing key or
/// link path is.
pub fn claim_key(dir: &str) -> String {
    format!("{CLAIM_PREFIX}{dir}")
}

const CLAIM_PREFIX: &str = "//claim";

/// The directory a [`claim_key`] is the claim on.
pub fn claim_dir(key: &str) -> Option<&str> {
    key.strip_prefix(CLAIM_PREFIX).filter(|d| d.starts_with('/'))
}

/// The key of a grant on file `file_id`'s chunk data at one daemon (its local
/// file handed to a client: short-circuit I/O, docs/DESIGN.md): "//data/" and the
/// id in hex, which no normalized path, listing, claim or link key is.
pub fn data_key(file_id: u128) -> String {
    format!("{DATA_PREFIX}{file_id:032x}")
}

const DATA_PREFIX: &str = "//data/";

/// The file a [`data_key`] is the grant on.
pub fn data_file(key: &str) -> Option<u128> {
    let hex = key.strip_prefix(DATA_PREFIX)?;
    (hex.len() == 32).then(|| u128::from_str_radix(hex, 16).ok()).flatten()
}

/// The key of the grant by which a client holds back the size of `path`'s file
/// (`hold_size`, docs/DESIGN.md "Size holds"): "//size" and the path, which no
/// normalized path, listing, claim, data or link key is.
pub fn size_key(path: &str) -> String {
    format!("{SIZE_PREFIX}{path}")
}

const SIZE_PREFIX: &str = "//size";

/// The path a [`size_key`] holds the size of.
pub fn size_path(key: &str) -> Option<&str> {
    key.strip_prefix(SIZE_PREFIX).filter(|p| p.starts_with('/'))
}

/// `dir/name` for a normalized `dir`; `name` is not checked (see [`child`]).
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// `dir/name` for a name that must be one valid component.
pub fn child(dir: &str, name: &str) -> Result<String, i32> {
    check_name(name)?;
    Ok(join(dir, name))
}

/// Whether `path` lies strictly below directory `dir` (both normalized).
pub fn is_below(path: &str, dir: &str) -> bool {
    if dir == "/" {
        return path != "/";
    }
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// Where `path` is after `old` was renamed to `new`: `new` for `old` itself, the same
/// relative place under `new` for a path below `old`, `None` for any other path.
pub fn rebase(path: &str, old: &str, new: &str) -> Option<String> {
    debug_assert!(old != "/", "the root is never renamed");
    if path == old {
        Some(new.to_string())
    } else if is_below(path, old) {
        Some(format!("{new}{}", &path[old.len()..]))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_paths_are_valid_and_no_user_path_is_one() {
        let p = link_path(0xabc);
        assert_eq!(p, "//links/00000000000000000000000000000abc");
        assert!(is_link_path(&p));
        assert_eq!(validate(&p), Ok(()));
        assert_eq!(parent(&p), LINKS_DIR);
        assert!(!is_link_path("//links/0000000000000000000000000000abc"), "too short");
        for dir in ["/", "/d", "/a/b c"] {
            let k = listing_key(dir);
            assert_eq!(listing_dir(&k), Some(dir));
            assert!(validate(&k).is_err() && !is_link_path(&k), "{k} must name no record");
        }
        for not in ["/", "/d", "//links", &link_path(7)] {
            assert_eq!(listing_dir(not), None, "{not}");
        }
        assert!(!is_link_path("//links/00000000000000000000000000000ABC"), "upper case");
        assert_eq!(validate("//links/x"), Err(libc::EINVAL));
        assert_eq!(validate("//links"), Err(libc::EINVAL));
        // What a user may write normalizes to an ordinary path.
        assert_eq!(normalize(&p).unwrap(), "/links/00000000000000000000000000000abc");
    }

    #[test]
    fn normalize_paths() {
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("//a//b/").unwrap(), "/a/b");
        assert_eq!(normalize("/a/./b/../c").unwrap(), "/a/c");
        assert_eq!(normalize("/../..").unwrap(), "/");
        assert_eq!(normalize("a"), Err(libc::EINVAL));
        assert_eq!(normalize("/a\0b"), Err(libc::EINVAL));
        assert_eq!(normalize(&format!("/{}", "x".repeat(300))), Err(libc::ENAMETOOLONG));
        assert_eq!(normalize(&"/x".repeat(5000)), Err(libc::ENAMETOOLONG));
    }

    #[test]
    fn validation() {
        assert!(validate("/").is_ok());
        assert!(validate("/a/b").is_ok());
        for bad in ["", "a", "/a/", "//a", "/a/../b", "/./a", "/a\0b"] {
            assert_eq!(validate(bad), Err(libc::EINVAL), "{bad:?}");
        }
        assert_eq!(validate(&format!("/{}", "x".repeat(256))), Err(libc::ENAMETOOLONG));
        assert_eq!(validate(&"/x".repeat(5000)), Err(libc::ENAMETOOLONG));
        // A NUL anywhere is EINVAL even after an overlong component.
        assert_eq!(validate(&format!("/{}/a\0", "x".repeat(256))), Err(libc::EINVAL));
    }

    #[test]
    fn what_normalize_makes_validate_accepts() {
        for p in ["/", "//a//b/", "/a/./b/../c", "/../..", "/x/y/z/..", "/.hidden/..."] {
            let n = normalize(p).unwrap();
            assert_eq!(validate(&n), Ok(()), "{p:?} -> {n:?}");
            assert_eq!(normalize(&n).unwrap(), n, "normalizing is idempotent");
        }
    }

    #[test]
    fn names_parents_joins() {
        assert_eq!(parent("/"), "/");
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b"), "/a");
        assert_eq!(join("/", "x"), "/x");
        assert_eq!(join("/a", "x"), "/a/x");
        assert_eq!(child("/a", "x"), Ok("/a/x".into()));
        for bad in ["", ".", "..", "a/b", "a\0"] {
            assert_eq!(child("/a", bad), Err(libc::EINVAL), "{bad:?}");
        }
        assert_eq!(child("/", &"x".repeat(256)), Err(libc::ENAMETOOLONG));
        assert_eq!(check_name(&"x".repeat(255)), Ok(()));
    }

    #[test]
    fn below_and_rebase() {
        assert!(is_below("/a/b", "/a"));
        assert!(is_below("/a/b/c", "/a"));
        assert!(!is_below("/a", "/a"));
        assert!(!is_below("/ab", "/a"));
        assert!(is_below("/a", "/"));
        assert!(!is_below("/", "/"));
        assert_eq!(rebase("/a", "/a", "/z/y").as_deref(), Some("/z/y"));
        assert_eq!(rebase("/a/b/c", "/a", "/z").as_deref(), Some("/z/b/c"));
        assert_eq!(rebase("/ab", "/a", "/z"), None);
        assert_eq!(rebase("/b", "/a", "/z"), None);
    }
}
