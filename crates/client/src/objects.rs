//! A view's entries (gust-view, `gust view add`): a file under `/.views/NAME` that
//! stands for an object is stored as a placeholder (`Record::unfetched_object`:
//! the object's `s3://BUCKET/KEY#ETAG` as its target, the listing's size and time,
//! a file id of its own with no chunk). The first open fetches it: one HEAD of the
//! object (its current size, ETag and user metadata), then the staging requests
//! of cache mode (`fetch_from`) with a presigned URL pinned to that ETag, so every
//! daemon copies its chunks of one version. The file then carries the object's
//! ETag (`user.s3.etag`) and metadata (`user.s3.meta.*`), and is GustFS's file.
//!
//! The endpoint and credentials are this process's (the AWS variables and files,
//! gust_objstore::Config), loaded at the first fetch.
//!
//! Not for: making or updating placeholders (gust-view), staging (gust-stage).

use crate::cache::Fetched;
use crate::{Client, Errno, Result};
use gust_objstore::{Config, Metadata, ObjectUrl, Store};
use gust_proto::xattr::{self, Xattrs};
use gust_proto::{FileKind, Record};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::warn;

/// The attribute that holds the ETag of the object a file was fetched from.
pub const ETAG_XATTR: &str = "user.s3.etag";
/// The prefix of the attributes that hold an object's user metadata.
pub const META_XATTR_PREFIX: &str = "user.s3.meta.";
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

/// The attributes of a file from an object with `meta` (`user.s3.meta.NAME`), and
/// how many entries did not fit a file's attributes.
pub fn xattrs_of(meta: &Metadata) -> (Xattrs, usize) {
    let mut x = Xattrs::new();
    let mut left_out = 0;
    for (name, value) in meta {
        if xattr::apply(&mut x, &format!("{META_XATTR_PREFIX}{name}"), Some(value.as_bytes()), 0).is_err() {
            left_out += 1;
        }
    }
    (x, left_out)
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
        let (mut x, left_out) = xattrs_of(&head.meta);
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
    fn wait_object_fetched(&self, p: &str, mut r: Record, etag: &str) -> Result<()> {
        let started = Instant::now();
        loop {
            let fetching = r.kind == FileKind::File
                && r.size == 0
                && xattr::get(&r.xattrs, ETAG_XATTR).is_ok_and(|e| e == etag.as_bytes());
            if !fetching {
                return Ok(());
            }
            if started.elapsed() > FETCH_WAIT {
                return Err(Errno(libc::EIO));
            }
            std::thread::sleep(Duration::from_millis(20));
            r = self.get_record(p)?;
        }
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
        let (x, left_out) = xattrs_of(&meta);
        assert_eq!(left_out, 1);
        assert_eq!(xattr::get(&x, "user.s3.meta.owner"), Ok(&b"lab"[..]));
    }
}
