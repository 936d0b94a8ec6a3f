//! `--verify` of an object stage: each file's GustFS bytes are read again and their
//! S3 ETag computed (gust_objstore::etag), then compared with the object's: the one
//! the listing gave (stage-in, and stage-out's skipped files) or the one the store
//! answered the upload with. A multipart ETag is computed with the part size the
//! store reports for part 1, or else with each part size common clients use that
//! gives the right number of parts. A file that differs is reported and undone (a
//! staged-in file goes back to size 0, an uploaded object is deleted), so a rerun
//! copies it again.

use super::copy::{part_bytes, read_at};
use super::Job;
use crate::report::Failure;
use crate::Direction;
use gust_objstore::etag::{part_size_candidates, parts_of, EtagHasher};
use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes read per request while hashing.
const READ_BYTES: u64 = 8 << 20;

pub(crate) fn check(job: &Job, which: &[usize], uploaded: &HashMap<usize, String>) -> (u64, Vec<Failure>) {
    let queue = Mutex::new(which.to_vec());
    let failures = Mutex::new(Vec::new());
    let checked = Mutex::new(0u64);
    std::thread::scope(|s| {
        for _ in 0..job.threads() {
            s.spawn(|| loop {
                let Some(i) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else { break };
                let it = &job.plan.items[i];
                let etag = uploaded.get(&i).unwrap_or(&job.plan.etags[i]);
                match check_one(job, i, etag) {
                    Ok(()) => *checked.lock().unwrap_or_else(|e| e.into_inner()) += 1,
                    Err(why) => {
                        let _ = match job.o.direction {
                            Direction::In => job.c.truncate(&it.dest, 0).map_err(|e| e.to_string()),
                            Direction::Out => job.store.delete(&job.plan.keys[i]).map_err(|e| e.to_string()),
                        };
                        failures
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Failure { path: it.src.clone(), reason: why });
                    }
                }
            });
        }
    });
    (checked.into_inner().unwrap_or(0), failures.into_inner().unwrap_or_else(|e| e.into_inner()))
}

fn check_one(job: &Job, i: usize, etag: &str) -> Result<(), String> {
    let it = &job.plan.items[i];
    let gust_path = match job.o.direction {
        Direction::In => &it.dest,
        Direction::Out => &it.src,
    };
    let sizes = match parts_of(etag) {
        Some(0) => vec![0],
        Some(n) => {
            let mut c = Vec::new();
            if let Some(p) = job.store.first_part_size(&job.plan.keys[i]) {
                c.push(p);
            }
            c.push(part_bytes(it.size));
            c.extend(part_size_candidates(it.size, n));
            c.sort_unstable();
            c.dedup();
            c.retain(|&p| p > 0 && it.size.div_ceil(p).max(1) == n);
            c
        }
        None => {
            return Err(format!(
                "cannot be checked: its ETag {etag:?} is not an MD5 (an object encrypted with SSE-KMS or SSE-C?)"
            ))
        }
    };
    if sizes.is_empty() {
        return Err(format!(
            "cannot be checked: no part size gives the {} parts of its ETag",
            parts_of(etag).unwrap_or(0)
        ));
    }
    let mut hashers: Vec<EtagHasher> = sizes.iter().map(|&p| EtagHasher::new(p)).collect();
    let mut offset = 0;
    while offset < it.size {
        let len = READ_BYTES.min(it.size - offset);
        let data = read_at(job.c, gust_path, offset, len)?;
        hashers.iter_mut().for_each(|h| h.update(&data));
        offset += len;
    }
    let ours: Vec<String> = hashers.into_iter().map(|h| h.finish()).collect();
    if ours.iter().any(|e| e == etag) {
        Ok(())
    } else {
        Err(format!("differs from the object: ETag {etag}, GustFS's bytes give {}", ours[0]))
    }
}
