//! A view's entries (gust-view, `gust view add`): a file under `/.views/NAME` that
//! stands for an object is stored as a placeholder (`Record::unfetched_object`:
//! the object's `s3://BUCKET/KEY#ETAG` as its target, the listing's size and time,
//! a file id of its own with no chunk). The first open fetches it: one HEAD of the
//! object (its current size, ETag and user metadata), then the staging requests
//! of cache mode (`fetch_from`) with a presigned URL pinned to that ETag, so every
//! daemon copies its chunks of one version. The file then carries the object's
//! ETag (`user.s3.etag`), metadata (`user.s3.meta.*`) and tags (`user.s3.tag.*`,
//! one more request when the HEAD counts any), and is GustFS's file.
//!
//! The endpoint and credentials are this process's (the AWS variables and files,
//! gust_objstore::Config), loaded at the first fetch.
//!
//! Not for: making or updating placeholders (gust-view), staging (gust-stage).

use crate::cache::Fetched;
use crate::{Client, Errno, Result};
use gust_objstore::{Config, ObjectUrl, Properties, Store};
use gust_proto::xattr::{self, Xattrs};
use gust_proto::{FileKind, Record};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::warn;

/// The prefix of every attribute that comes from an object.
pub const OBJECT_XATTR_PREFIX: &str = "user.s3.";
/// The attribute that holds the ETag of the object a file was fetched from.
pub const ETAG_XATTR: &str = "user.s3.etag";
/// The prefix of the attributes that hold an object's user metadata.
pub const META_XATTR_PREFIX: &str = "user.s3.meta.";
/// The prefix of the attributes that hold an object's tags.
pub const TAG_XATTR_PREFIX: &str = "user.s3.tag.";
/// How long an open waits for another process's fetch of the same object.
const FETCH_WAIT: Duration = Duration::from_secs(120);

/// The target of a placeholder of `bucket`'s `key` with `etag`.
pub fn placeholder_target(bucket: &str, key: &str, etag: &str) -> String {
    format!("s3://{bucket}/{key}#{etag}")
}

/// The object URL and ETag a placeholder's target names.
pub fn split_placeholder_target(t: &str) -> (&str, &str) {
    t.rsplit_once('#').unwrap_or((t, ""))
}

/// The attributes of a file from an object with `props` (`user.s3.meta.NAME` of
/// its metadata, `user.s3.tag.KEY` of its tags), and how many entries did not
/// fit a file's attributes.
pub fn xattrs_of(props: &Properties) -> (Xattrs, usize) {
    let mut x = Xattrs::new();
    let mut left_out = 0;
    let entries =
        props.meta.iter().map(|e| (META_XATTR_PREFIX, e)).chain(props.tags.iter().map(|e| (TAG_XATTR_PREFIX, e)));
    for (prefix, (name, value)) in entries {
        if xattr::apply(&mut x, &format!("{prefix}{name}"), Some(value.as_bytes()), 0).is_err() {
            left_out += 1;
        }
    }
    (x, left_out)
}

/// The properties of an object staged out from a file with `xattrs`: its
/// `user.s3.meta.*` and `user.s3.tag.*` attributes. A metadata entry whose name
/// or value a header cannot carry (not printable ASCII) is left out, and so are a
/// tag S3 would refuse (`tag_ok`) and tags past S3's ten: the object's bytes must
/// not fail for an attribute.
pub fn properties_of(xattrs: &[(String, Vec<u8>)]) -> Properties {
    let mut p = Properties::default();
    for (n, v) in xattrs {
        let Ok(value) = std::str::from_utf8(v) else { continue };
        if let Some(name) = n.strip_prefix(META_XATTR_PREFIX) {
            let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            let value_ok = value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
            if name_ok && value_ok {
                p.meta.push((name.to_ascii_lowercase(), value.trim().to_string()));
            }
        } else if let Some(key) = n.strip_prefix(TAG_XATTR_PREFIX) {
            if gust_objstore::properties::tag_ok(key, value) && p.tags.len() < gust_objstore::properties::TAGS_MAX {
                p.tags.push((key.to_string(), value.to_string()));
            }
        }
    }
    p.meta.sort();
    p.tags.sort();
    p
}

/// This process's store of `bucket` (one per bucket, made at its first use).
fn store_of(bucket: &str) -> Result<Arc<Store>> {
    static CONFIG: OnceLock<std::result::Result<Config, String>> = OnceLock::new();
    static STORES: OnceLock<Mutex<HashMap<String, Arc<Store>>>> = OnceLock::new();
    let cfg = CONFIG.get_or_init(Config::from_env).as_ref().map_err(|e| {
        warn!("a view's object cannot be fetched: no object store setup ({e})");
        Errno(libc::EACCES)
    })?;
    let mut stores = STORES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = stores.get(bucket) {
        return Ok(s.clone());
    }
    let s = Arc::new(Store::open(cfg, bucket).map_err(|e| {
        warn!("a view's object cannot be fetched: {e}");
        Errno(libc::EINVAL)
    })?);
    stores.insert(bucket.to_string(), s.clone());
    Ok(s)
}

impl Client {
    /// Fetches the object placeholder `ph` of `p` stands for (or waits for another
    /// process's fetch of it). ENOENT if the object is gone.
    pub(crate) fn fetch_object(&self, p: &str, ph: &Record) -> Result<()> {
        let target = ph.unfetched_object().ok_or(Errno(libc::EINVAL))?;
        let (url, listed_etag) = split_placeholder_target(target);
        let Ok(Some(obj)) = ObjectUrl::parse(url) else { return Err(Errno(libc::EINVAL)) };
        let store = store_of(&obj.bucket)?;
        let head = store.head(&obj.key).map_err(|e| {
            if e.is_not_found() {
                Errno(libc::ENOENT)
            } else {
                warn!("{url}: {e}");
                Errno(if e.status == 403 { libc::EACCES } else { libc::EIO })
            }
        })?;
        // The listing's time has the store's full resolution, a HEAD's whole
        // seconds: the listing's is kept while the object is the one listed.
        let mtime_ns = if head.etag == listed_etag { ph.mtime_ns } else { head.mtime_ns };
        let want = Record { size: head.size, mtime_ns, atime_ns: mtime_ns, target: String::new(), ..ph.clone() };
        let tags = match head.tag_count {
            0 => Vec::new(),
            _ => store.tags(&obj.key).map_err(|e| {
                warn!("{url}: its tags: {e}");
                Errno(libc::EIO)
            })?,
        };
        let (mut x, left_out) = xattrs_of(&Properties { meta: head.meta, tags });
        if left_out > 0 {
            warn!("{url}: {left_out} metadata entries do not fit the file's attributes");
        }
        let _ = xattr::apply(&mut x, ETAG_XATTR, Some(head.etag.as_bytes()), 0);
        let ext = store.presign_get(&obj.key, &head.etag);
        // The placeholder's file id stays the file's (no chunk of it exists): its
        // inode number does not change under a FUSE mount or a `find -inum`.
        match self.fetch_from(p, &want, &ext, x, Some(ph.file_id))? {
            Fetched::Done => Ok(()),
            Fetched::Busy(r) if head.size > 0 => self.wait_object_fetched(p, r, &head.etag),
            Fetched::Busy(_) => Ok(()),
        }
    }

    /// Waits while `p` is another process's fetch in progress (a file of the
    /// object's ETag without its size yet; the object is not empty).
    fn wait_object_fetched(&self, p: &str, r: Record, etag: &str) -> Result<()> {
        self.wait_while_fetching(p, r, FETCH_WAIT, |r| {
            r.kind == FileKind::File
                && r.size == 0
                && xattr::get(&r.xattrs, ETAG_XATTR).is_ok_and(|e| e == etag.as_bytes())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_names_its_object_and_version() {
        let t = placeholder_target("b", "run/a#1.txt", "d41d8cd98f00b204e9800998ecf8427e-2");
        assert_eq!(split_placeholder_target(&t), ("s3://b/run/a#1.txt", "d41d8cd98f00b204e9800998ecf8427e-2"));
        // An ETag never holds '#': the last one splits, whatever the key holds.
        assert_eq!(split_placeholder_target("s3://b/k#"), ("s3://b/k", ""));
        let mut r = Client::staged_record(FileKind::File, 0o444, 3, 0, 0, t);
        assert!(r.unfetched_object().is_some());
        r.kind = FileKind::Symlink;
        assert!(r.unfetched_object().is_none(), "a symlink to s3://… is a symlink");
    }

    #[test]
    fn metadata_becomes_attributes_and_what_does_not_fit_is_counted() {
        let meta = vec![("owner".to_string(), "lab".to_string()), ("big".to_string(), "x".repeat(5000))];
        let tags = vec![("stage".to_string(), "raw".to_string())];
        let (x, left_out) = xattrs_of(&Properties { meta, tags });
        assert_eq!(left_out, 1);
        assert_eq!(xattr::get(&x, "user.s3.meta.owner"), Ok(&b"lab"[..]));
        assert_eq!(xattr::get(&x, "user.s3.tag.stage"), Ok(&b"raw"[..]));
    }
}
