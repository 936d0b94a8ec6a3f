//! Object properties as extended attributes: the metadata `NAME: VALUE` of an
//! object (`x-amz-meta-NAME` on the wire) is the attribute `user.s3.meta.NAME` of
//! the file it is staged in to, and its tag `KEY=VALUE` the attribute
//! `user.s3.tag.KEY`; a file's `user.s3.meta.*` and `user.s3.tag.*` attributes
//! become the metadata and tags of the object it is staged out to. So a job reads
//! and sets an object's properties with getfattr and setfattr (or os.getxattr),
//! and a stage-out of the staged-in tree gives the objects back their properties.
//!
//! A stage-in asks each object's properties with one HEAD request (listings do not
//! carry them), and the tags with a second one when the HEAD counts any, `8 ×
//! --jobs` at a time; `--no-metadata` skips them. What does not fit a file's 4 KiB
//! of attributes (S3 allows 2 KiB of metadata and ten tags of 384 bytes, so only
//! many short entries can pass it) is left out and counted in the summary's
//! failures. On the way out, a metadata entry whose name or value a header cannot
//! carry (not printable ASCII) is left out.
//!
//! A file whose properties changed and not its bytes (`setfattr` on a staged-out
//! file: `gust stage out --follow` sees an attribute change) has them written back
//! alone by [`write_back`].

use super::{Job, Plan};
use crate::report::Failure;
use gust_objstore::{Properties, Store};
use gust_proto::xattr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The attributes of a file staged in from an object with `props`, and how many
/// entries did not fit.
pub(crate) use gust_client::xattrs_of;

/// The properties of an object staged out from a file with `xattrs`.
pub(crate) use gust_client::properties_of;

/// Fills the attributes of the files `todo` names from their objects' properties,
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
    let got: Mutex<Vec<(usize, Result<Properties, String>)>> = Mutex::new(Vec::with_capacity(files.len()));
    std::thread::scope(|s| {
        for _ in 0..threads.min(files.len()) {
            s.spawn(|| {
                while let Some(&i) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let m = store.properties(&plan.keys[i]).map_err(|e| format!("its metadata: {e}"));
                    got.lock().unwrap_or_else(|e| e.into_inner()).push((i, m));
                }
            });
        }
    });
    let mut failed = std::collections::HashSet::new();
    for (i, m) in got.into_inner().unwrap_or_else(|e| e.into_inner()) {
        match m {
            Ok(props) => {
                let (x, left_out) = xattrs_of(&props);
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

/// Writes back the properties of the objects of `items` (files whose bytes are up
/// to date in the store) where the files' attributes say otherwise: the metadata
/// by a copy of the object onto itself (only while it is the version listed), the
/// tags by a tagging request. `8 × --jobs` objects at a time. Returns how many
/// objects were changed; what failed is in `failures`.
pub(crate) fn write_back(job: &Job, items: &[usize], failures: &mut Vec<Failure>) -> u64 {
    let (store, plan) = (job.store, job.plan);
    let next = AtomicUsize::new(0);
    let changed = AtomicUsize::new(0);
    let failed: Mutex<Vec<Failure>> = Mutex::new(Vec::new());
    let one = |i: usize| -> Result<bool, String> {
        let (it, key) = (&plan.items[i], &plan.keys[i]);
        let want = properties_of(&it.xattrs);
        let head = store.head(key).map_err(|e| e.to_string())?;
        let tags = if head.tag_count > 0 { store.tags(key).map_err(|e| format!("its tags: {e}"))? } else { Vec::new() };
        let mut changed = false;
        if head.meta != want.meta {
            store.replace_metadata(key, &head.etag, &want.meta).map_err(|e| format!("its metadata: {e}"))?;
            changed = true;
        }
        if tags != want.tags {
            store.put_tags(key, &want.tags).map_err(|e| format!("its tags: {e}"))?;
            changed = true;
        }
        Ok(changed)
    };
    std::thread::scope(|s| {
        for _ in 0..job.threads().min(items.len()) {
            s.spawn(|| {
                while let Some(&i) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
                    match one(i) {
                        Ok(true) => {
                            changed.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(false) => {}
                        Err(why) => failed.lock().unwrap_or_else(|e| e.into_inner()).push(Failure {
                            path: plan.items[i].src.clone(),
                            reason: format!("{}: properties not written back: {why}", plan.items[i].dest),
                        }),
                    }
                }
            });
        }
    });
    failures.extend(failed.into_inner().unwrap_or_else(|e| e.into_inner()));
    changed.into_inner() as u64
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
    fn properties_map_to_attributes_and_back() {
        let props = Properties {
            meta: vec![("owner".into(), "ana".into()), ("run-id".into(), "7".into())],
            tags: vec![("project".into(), "Ψ one".into())],
        };
        let (x, left_out) = xattrs_of(&props);
        assert_eq!(left_out, 0);
        assert_eq!(
            x,
            vec![
                ("user.s3.meta.owner".into(), b"ana".to_vec()),
                ("user.s3.meta.run-id".into(), b"7".to_vec()),
                ("user.s3.tag.project".into(), "Ψ one".as_bytes().to_vec()),
            ]
        );
        let mut more = x.clone();
        more.push(("user.other".into(), b"x".to_vec()));
        more.push(("user.s3.meta.bin".into(), vec![0, 1]));
        more.push(("user.s3.meta.bad name".into(), b"x".to_vec()));
        assert_eq!(properties_of(&more), props, "tags may be any UTF-8, metadata printable ASCII");
    }

    #[test]
    fn entries_past_the_bound_are_counted() {
        let meta: Vec<(String, String)> = (0..300).map(|i| (format!("k{i:03}"), "v".to_string())).collect();
        let (x, left_out) = xattrs_of(&Properties { meta, tags: Vec::new() });
        assert!(left_out > 0 && x.len() + left_out == 300);
        assert!(xattr::bytes(&x) <= xattr::XATTRS_BYTES_MAX);
        let many: Vec<(String, Vec<u8>)> = (0..12).map(|i| (format!("user.s3.tag.t{i:02}"), b"v".to_vec())).collect();
        assert_eq!(properties_of(&many).tags.len(), 10, "S3 takes ten tags");
        let refused = vec![("user.s3.tag.bad".to_string(), b"a&b".to_vec())];
        assert_eq!(properties_of(&refused).tags, Vec::new(), "a tag S3 refuses stays behind, the bytes go");
    }
}
