//! Keys of the metadata store: `parent | 0x00 | name`, so a directory's children are
//! one key range, and the ranges that hold a directory's children and descendants.
//! Pure: no RocksDB.

pub fn key_of(path: &str) -> Vec<u8> {
    debug_assert!(path.starts_with('/') && path != "/");
    let slash = path.rfind('/').expect("validated paths start with '/'");
    let parent = if slash == 0 { "/" } else { &path[..slash] };
    let mut k = Vec::with_capacity(path.len() + 1);
    k.extend_from_slice(parent.as_bytes());
    k.push(0);
    k.extend_from_slice(&path.as_bytes()[slash + 1..]);
    k
}

/// `key_of` for a batch that may name the root, which has no record: its key is
/// empty, a key no record has (the batch answers the root itself).
#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
pub(crate) fn key_or_root(path: &str) -> Vec<u8> {
    if path == "/" {
        Vec::new()
    } else {
        key_of(path)
    }
}

pub fn path_of(key: &[u8]) -> Option<String> {
    let z = key.iter().position(|&b| b == 0)?;
    let parent = std::str::from_utf8(&key[..z]).ok()?;
    let name = std::str::from_utf8(&key[z + 1..]).ok()?;
    Some(if parent == "/" { format!("/{name}") } else { format!("{parent}/{name}") })
}

#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
pub(crate) fn children_prefix(dir: &str) -> Vec<u8> {
    let mut p = dir.as_bytes().to_vec();
    p.push(0);
    p
}

/// Smallest key greater than every key with prefix `p`.
#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
pub(crate) fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut e = p.to_vec();
    while let Some(last) = e.pop() {
        if last < 0xFF {
            e.push(last + 1);
            return e;
        }
    }
    vec![0xFF; p.len() + 1]
}
