//! Extended attributes (docs/DESIGN.md, "Extended attributes"): the `user.*`
//! attributes of a file or directory are part of its record, as ext4 keeps them in
//! the inode. They travel wherever the record does (a rename, a directory's rename,
//! a hard link's attributes record, a move to a new layout, a replica), a client
//! holding a grant on the record answers getxattr and listxattr from its memory, and
//! a change is one request that recalls the grants first, as chmod is.
//!
//! Bounds, so that a record stays as small as the pages that carry it assume: names
//! of at most [`XATTR_NAME_BYTES_MAX`], all of a file's attributes at most
//! [`XATTRS_BYTES_MAX`] counted as their encoding is ([`XATTR_ENTRY_OVERHEAD_BYTES`]
//! plus name plus value each, ext4's one-block bound), and only on records without
//! a target (files and directories; a hard-linked file's attributes record), so a
//! record's target or its attributes, never both, stay under `PATH_ARG_BYTES_MAX`.
//!
//! Pure: the errnos are Linux's for the same cases (setxattr(2)).

/// A record's attributes: (full name, value), sorted by name, names unique.
pub type Xattrs = Vec<(String, Vec<u8>)>;

/// The one namespace GustFS keeps (as tmpfs and most network file systems outside
/// ACLs): `security.*`, `system.*` and `trusted.*` are not supported.
pub const XATTR_USER_PREFIX: &str = "user.";
/// Longest name, prefix included (XATTR_NAME_MAX).
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest value Linux passes through setxattr (XATTR_SIZE_MAX); larger is E2BIG.
pub const XATTR_VALUE_BYTES_MAX: usize = 65536;
/// Bytes counted per attribute besides its name and value: the two lengths of its
/// encoding (u64 each).
pub const XATTR_ENTRY_OVERHEAD_BYTES: usize = 16;
/// Bound on all of one record's attributes, counted per entry as
/// `XATTR_ENTRY_OVERHEAD_BYTES` + name + value: one 4 KiB block, ext4's bound
/// (a setxattr past it is ENOSPC, as on ext4). Object stores' user metadata (2 KiB
/// on S3) fits.
pub const XATTRS_BYTES_MAX: usize = 4096;
const _: () = assert!(XATTRS_BYTES_MAX <= crate::PATH_ARG_BYTES_MAX);

/// setxattr's flags (XATTR_CREATE, XATTR_REPLACE): fail if it exists, fail unless
/// it does.
pub const XATTR_CREATE: u32 = 1;
pub const XATTR_REPLACE: u32 = 2;

/// Bytes `xattrs` count against [`XATTRS_BYTES_MAX`] (and add to a record's
/// encoding besides the vector's length).
pub fn bytes(xattrs: &[(String, Vec<u8>)]) -> usize {
    xattrs.iter().map(|(n, v)| XATTR_ENTRY_OVERHEAD_BYTES + n.len() + v.len()).sum()
}

/// Whether `name` may be set: ERANGE for an empty or too long name, EOPNOTSUPP
/// outside `user.`, EINVAL for `user.` alone (Linux's answers).
pub fn check_name(name: &str) -> Result<(), i32> {
    if name.is_empty() || name.len() > XATTR_NAME_BYTES_MAX {
        return Err(libc::ERANGE);
    }
    match name.strip_prefix(XATTR_USER_PREFIX) {
        None => Err(libc::EOPNOTSUPP),
        Some("") => Err(libc::EINVAL),
        Some(_) if name.contains('\0') => Err(libc::EINVAL),
        Some(_) => Ok(()),
    }
}

/// The value of `name`: ENODATA if absent.
pub fn get<'a>(xattrs: &'a [(String, Vec<u8>)], name: &str) -> Result<&'a [u8], i32> {
    match xattrs.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
        Ok(i) => Ok(&xattrs[i].1),
        Err(_) => Err(libc::ENODATA),
    }
}

/// listxattr's answer: every name followed by a NUL.
pub fn list(xattrs: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xattrs.iter().map(|(n, _)| n.len() + 1).sum());
    for (n, _) in xattrs {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
    }
    out
}

/// Sets (`value` Some) or removes (None) attribute `name` with setxattr's `flags`:
/// EINVAL for unknown flags or both; EEXIST (XATTR_CREATE) or ENODATA
/// (XATTR_REPLACE, or removing) for the name's presence; E2BIG for a value past
/// XATTR_SIZE_MAX; ENOSPC when the record's attributes would pass
/// [`XATTRS_BYTES_MAX`]. On an error `xattrs` is unchanged.
pub fn apply(xattrs: &mut Xattrs, name: &str, value: Option<&[u8]>, flags: u32) -> Result<(), i32> {
    if flags & !(XATTR_CREATE | XATTR_REPLACE) != 0 || flags == XATTR_CREATE | XATTR_REPLACE {
        return Err(libc::EINVAL);
    }
    check_name(name)?;
    let at = xattrs.binary_search_by(|(n, _)| n.as_str().cmp(name));
    let Some(value) = value else {
        let i = at.map_err(|_| libc::ENODATA)?;
        xattrs.remove(i);
        return Ok(());
    };
    if value.len() > XATTR_VALUE_BYTES_MAX {
        return Err(libc::E2BIG);
    }
    match at {
        Ok(_) if flags & XATTR_CREATE != 0 => return Err(libc::EEXIST),
        Err(_) if flags & XATTR_REPLACE != 0 => return Err(libc::ENODATA),
        _ => {}
    }
    let old = match at {
        Ok(i) => XATTR_ENTRY_OVERHEAD_BYTES + name.len() + xattrs[i].1.len(),
        Err(_) => 0,
    };
    if bytes(xattrs) - old + XATTR_ENTRY_OVERHEAD_BYTES + name.len() + value.len() > XATTRS_BYTES_MAX {
        return Err(libc::ENOSPC);
    }
    match at {
        Ok(i) => xattrs[i].1 = value.to_vec(),
        Err(i) => xattrs.insert(i, (name.to_string(), value.to_vec())),
    }
    Ok(())
}

/// Whether `xattrs` is a well-formed set (what a record from the wire or the disk
/// must hold): valid names, sorted and unique, within [`XATTRS_BYTES_MAX`].
pub fn is_valid(xattrs: &[(String, Vec<u8>)]) -> bool {
    xattrs.iter().all(|(n, _)| check_name(n).is_ok())
        && xattrs.windows(2).all(|w| w[0].0 < w[1].0)
        && bytes(xattrs) <= XATTRS_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replace_remove_follow_the_flags() {
        let mut x = Xattrs::new();
        assert_eq!(apply(&mut x, "user.b", Some(b"2"), XATTR_REPLACE), Err(libc::ENODATA));
        apply(&mut x, "user.b", Some(b"2"), XATTR_CREATE).unwrap();
        apply(&mut x, "user.a", Some(b"1"), 0).unwrap();
        assert_eq!(apply(&mut x, "user.a", Some(b"x"), XATTR_CREATE), Err(libc::EEXIST));
        apply(&mut x, "user.a", Some(b"one"), XATTR_REPLACE).unwrap();
        assert_eq!(x, vec![("user.a".into(), b"one".to_vec()), ("user.b".into(), b"2".to_vec())]);
        assert_eq!(get(&x, "user.a"), Ok(&b"one"[..]));
        assert_eq!(get(&x, "user.c"), Err(libc::ENODATA));
        assert_eq!(list(&x), b"user.a\0user.b\0");
        apply(&mut x, "user.a", None, 0).unwrap();
        assert_eq!(apply(&mut x, "user.a", None, 0), Err(libc::ENODATA));
        assert_eq!(x.len(), 1);
        assert!(is_valid(&x));
    }

    #[test]
    fn names_outside_user_and_bad_flags_are_refused() {
        let mut x = Xattrs::new();
        assert_eq!(apply(&mut x, "security.selinux", Some(b""), 0), Err(libc::EOPNOTSUPP));
        assert_eq!(apply(&mut x, "trusted.a", Some(b""), 0), Err(libc::EOPNOTSUPP));
        assert_eq!(apply(&mut x, "user.", Some(b""), 0), Err(libc::EINVAL));
        assert_eq!(apply(&mut x, "", Some(b""), 0), Err(libc::ERANGE));
        assert_eq!(apply(&mut x, &format!("user.{}", "n".repeat(251)), Some(b""), 0), Err(libc::ERANGE));
        assert_eq!(apply(&mut x, "user.a", Some(b""), 3), Err(libc::EINVAL));
        assert_eq!(apply(&mut x, "user.a", Some(b""), 4), Err(libc::EINVAL));
        assert!(x.is_empty());
    }

    #[test]
    fn the_bound_counts_every_entry_and_a_replacement_once() {
        let mut x = Xattrs::new();
        // One value filling the bound exactly, then replaced by one as large.
        let fill = XATTRS_BYTES_MAX - XATTR_ENTRY_OVERHEAD_BYTES - "user.big".len();
        apply(&mut x, "user.big", Some(&vec![7; fill]), 0).unwrap();
        apply(&mut x, "user.big", Some(&vec![8; fill]), 0).unwrap();
        assert_eq!(bytes(&x), XATTRS_BYTES_MAX);
        assert_eq!(apply(&mut x, "user.big", Some(&vec![9; fill + 1]), 0), Err(libc::ENOSPC));
        assert_eq!(apply(&mut x, "user.c", Some(b""), 0), Err(libc::ENOSPC));
        assert_eq!(apply(&mut x, "user.c", Some(&vec![0; XATTR_VALUE_BYTES_MAX + 1]), 0), Err(libc::E2BIG));
        assert_eq!(x[0].1, vec![8; fill]);
        assert!(is_valid(&x));
        x.push(("user.a".into(), Vec::new()));
        assert!(!is_valid(&x), "unsorted and over the bound");
    }
}
