//! Object user metadata as extended attributes: the metadata `NAME: VALUE` of an
//! object (`x-amz-meta-NAME` on the wire) is the attribute `user.s3.meta.NAME` of
//! the file it is staged in to, and a file's `user.s3.meta.*` attributes become the
//! metadata of the object it is staged out to. So a job reads and sets an object's
//! metadata with getfattr and setfattr (or os.getxattr), and a stage-out of the
//! staged-in tree gives the objects back their metadata.
//!
//! A stage-in asks each object's metadata with one HEAD request (listings do not
//! carry it), `8 × --jobs` at a time; `--no-metadata` skips them. What does not
//! fit a file's 4 KiB of attributes (S3 allows 2 KiB of metadata, so only many
//! short entries can pass it) is left out and counted in the summary's failures.
//! On the way out, an attribute whose name or value a header cannot carry (not
//! printable ASCII) is left out.

use super::{Job, Plan};
use crate::report::Failure;
use gust_objstore::{Metadata, Store};
use gust_proto::xattr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The attributes' prefix.
pub(crate) const PREFIX: &str = gust_client::META_XATTR_PREFIX;

/// The attributes of a file staged in from an object with `meta`, and how many
/// entries did not fit.
pub(crate) use gust_client::xattrs_of;

/// The metadata of an object staged out from a file with `xattrs`.
pub(crate) fn metadata_of(xattrs: &[(String, Vec<u8>)]) -> Metadata {
    xattrs
        .iter()
        .filter_map(|(n, v)| {
            let name = n.strip_prefix(PREFIX)?;
            let name_ok = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            let value = std::str::from_utf8(v).ok()?;
            let value_ok = value.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
            (name_ok && value_ok).then(|| (name.to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect()
}

/// Fills the attributes of the files `todo` names from their objects' metadata,
/// `threads` HEAD requests at a time. Returns `todo` without the files whose
/// metadata could not be read, which are failures.
pub(crate) fn fetch(
    store: &Store,
    plan: &mut Plan,
    todo: Vec<usize>,
    threads: usize,
    failures: &mut Vec<Failure>,
) -> Vec<usize> {
    let files: Vec<usize> = todo.iter().copied().filter(|&i| plan.items[i].is_file()).collect();
    let next = AtomicUsize::new(0);
    let got: Mutex<Vec<(usize, Result<Metadata, String>)>> = Mutex::new(Vec::with_capacity(files.len()));
    std::thread::scope(|s| {
        for _ in 0..threads.min(files.len()) {
            s.spawn(|| {
                while let Some(&i) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let m = store.metadata(&plan.keys[i]).map_err(|e| format!("its metadata: {e}"));
                    got.lock().unwrap_or_else(|e| e.into_inner()).push((i, m));
                }
            });
        }
    });
    let mut failed = std::collections::HashSet::new();
    for (i, m) in got.into_inner().unwrap_or_else(|e| e.into_inner()) {
        match m {
            Ok(meta) => {
                let (x, left_out) = xattrs_of(&meta);
                if left_out > 0 {
                    failures.push(Failure {
                        path: plan.items[i].src.clone(),
                        reason: format!(
                            "{left_out} metadata entries left out: past the {} bytes of a file's extended attributes",
                            xattr::XATTRS_BYTES_MAX
                        ),
                    });
                }
                plan.items[i].xattrs = x;
            }
            Err(why) => {
                failures.push(Failure { path: plan.items[i].src.clone(), reason: why });
                failed.insert(i);
            }
        }
    }
    todo.into_iter().filter(|i| !failed.contains(i)).collect()
}

/// Sets the attributes of a file staged in through this process (`--via client`).
pub(crate) fn set(job: &Job, i: usize) -> Result<(), String> {
    let it = &job.plan.items[i];
    for (name, value) in &it.xattrs {
        job.c.setxattr(&it.dest, name, value, 0, true).map_err(|e| format!("{}: {name}: {e}", it.dest))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_maps_to_attributes_and_back() {
        let meta: Metadata = vec![("owner".into(), "ana".into()), ("run-id".into(), "7".into())];
        let (x, left_out) = xattrs_of(&meta);
        assert_eq!(left_out, 0);
        assert_eq!(
            x,
            vec![("user.s3.meta.owner".into(), b"ana".to_vec()), ("user.s3.meta.run-id".into(), b"7".to_vec())]
        );
        let mut more = x.clone();
        more.push(("user.other".into(), b"x".to_vec()));
        more.push(("user.s3.meta.bin".into(), vec![0, 1]));
        more.push(("user.s3.meta.bad name".into(), b"x".to_vec()));
        assert_eq!(metadata_of(&more), meta);
    }

    #[test]
    fn entries_past_the_bound_are_counted() {
        let meta: Metadata = (0..300).map(|i| (format!("k{i:03}"), "v".to_string())).collect();
        let (x, left_out) = xattrs_of(&meta);
        assert!(left_out > 0 && x.len() + left_out == 300);
        assert!(xattr::bytes(&x) <= xattr::XATTRS_BYTES_MAX);
    }
}
