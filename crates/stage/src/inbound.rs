//! Stage-in by the daemons.
//!
//! 1. Records are created in batches, one request per metadata daemon per batch.
//!    A small file (at most `INLINE_BYTES_MAX`) is complete right there: its daemon
//!    reads it from the shared file system into the record. A larger file's record
//!    starts at size 0.
//! 2. Every daemon copies the chunks of large files it holds straight from the
//!    shared file system into its chunk store (pull batches of at most 64 MiB).
//! 3. A file whose chunks are all in is committed: its record gets its size and
//!    times (batched per metadata daemon). A file that failed keeps size 0, so a
//!    rerun copies it again and no reader takes it for complete.

use crate::batch::{drive, Batcher};
use crate::report::Failure;
use crate::tree::Item;
use crate::{reason, Job, Moved};
use gust_client::stage_types::{entry_bytes, StageCommit, StageEntry, STAGE_BATCH_BYTES_MAX};
use gust_client::{now_ns, Client, Kind, INLINE_BYTES_MAX};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Commits gathered per metadata daemon before they are sent.
const COMMIT_BATCH: usize = 512;

struct Shared<'a> {
    items: &'a [Item],
    failures: Mutex<Vec<Failure>>,
    staged: Mutex<Vec<usize>>,
}

impl Shared<'_> {
    fn fail(&self, i: usize, why: String) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Failure { path: self.items[i].src.clone(), reason: why });
    }
    fn staged(&self, i: usize) {
        self.staged.lock().unwrap_or_else(|e| e.into_inner()).push(i);
    }
}

pub(crate) fn copy(job: Job) -> Moved {
    let Job { c, o, items, todo, existing, progress, throttle, .. } = job;
    let sh = Shared { items, failures: Mutex::new(Vec::new()), staged: Mutex::new(Vec::new()) };
    let n = c.daemon_count();
    let now = now_ns();

    // 1. Records.
    let mut creates = Batcher::with_data_max(n, throttle.piece_max());
    for &i in todo {
        let it = &items[i];
        if it.is_dir() {
            continue;
        }
        let replace = match existing.get(&it.dest) {
            Some(Kind::Dir) => {
                sh.fail(i, format!("{} is a directory in GustFS", it.dest));
                continue;
            }
            Some(_) => true,
            None => false,
        };
        let small = it.is_file() && it.size <= INLINE_BYTES_MAX as u64;
        let record = if it.is_file() && !small {
            Client::staged_record(Kind::File, it.mode, 0, now, now, String::new())
        } else {
            Client::staged_record(it.kind, it.mode, it.size, it.mtime_ns, it.atime_ns, it.target.clone())
        };
        let mut record = record;
        record.xattrs = it.xattrs.clone();
        let source = small.then(|| job.source(i).to_string());
        let counted = entry_bytes(&[&it.dest, &it.target, source.as_deref().unwrap_or("")], 0)
            + gust_proto::xattr::bytes(&it.xattrs);
        let entry = StageEntry { path: it.dest.clone(), record, source, replace };
        // A small file's bytes are read by the daemon in this request: they count
        // toward the request's bound on file bytes moved.
        let data = if small { it.size } else { 0 };
        creates.push(c.metadata_daemon(&it.dest), i, entry, counted, data, 0);
    }
    // Large files whose records are made: (item, file id).
    let large = Mutex::new(Vec::new());
    drive(creates.finish(), o.jobs, |d, batch| {
        let small_bytes = batch.entries.iter().filter(|e| e.source.is_some()).map(|e| e.record.size).sum();
        throttle.admit(small_bytes);
        let ids: Vec<u128> = batch.entries.iter().map(|e| e.record.file_id).collect();
        match c.stage_create(d, batch.entries) {
            Ok(outcomes) => {
                for ((&i, out), id) in batch.owners.iter().zip(outcomes).zip(ids) {
                    if out.errno != 0 {
                        sh.fail(i, reason(out.errno));
                        progress.add(1, items[i].size);
                        continue;
                    }
                    if let Some(old) = &out.replaced {
                        let _ = c.remove_file_chunks(old);
                    }
                    if items[i].is_file() && items[i].size > INLINE_BYTES_MAX as u64 {
                        large.lock().unwrap_or_else(|e| e.into_inner()).push((i, id));
                    } else {
                        sh.staged(i);
                        progress.add(1, items[i].size);
                    }
                }
            }
            Err(e) => {
                let why = format!("daemon {d}: {}", reason(e.0));
                for &i in &batch.owners {
                    sh.fail(i, why.clone());
                    progress.add(1, items[i].size);
                }
            }
        }
    });

    // 2. Chunks, 3. commits.
    let large = large.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut pulls = Batcher::with_data_max(n, throttle.piece_max());
    let mut pieces_left: Vec<AtomicUsize> = Vec::new();
    let mut failed: Vec<AtomicBool> = Vec::new();
    for (k, &(i, file_id)) in large.iter().enumerate() {
        let it = &items[i];
        let pieces = pulls.push_file(c, k, file_id, it.size, job.source(i), throttle.piece_max());
        pieces_left.push(AtomicUsize::new(pieces));
        failed.push(AtomicBool::new(false));
    }
    // Per metadata daemon: commits waiting, and their counted bytes.
    type Pending = (Vec<(usize, StageCommit)>, usize);
    let commits: Vec<Mutex<Pending>> = (0..n).map(|_| Mutex::new((Vec::new(), 0))).collect();
    let send_commits = |d: u32, batch: Vec<(usize, StageCommit)>| {
        let (owners, entries): (Vec<usize>, Vec<StageCommit>) = batch.into_iter().unzip();
        match c.stage_commit(d, entries) {
            Ok(outs) => {
                for (i, out) in owners.into_iter().zip(outs) {
                    if out.errno == 0 {
                        sh.staged(i);
                    } else {
                        sh.fail(i, reason(out.errno));
                    }
                }
            }
            Err(e) => owners.into_iter().for_each(|i| sh.fail(i, format!("daemon {d}: {}", reason(e.0)))),
        }
    };
    drive(pulls.finish(), o.jobs, |d, batch| {
        let wanted: Vec<u64> = batch.entries.iter().map(|e| e.spans.iter().map(|s| s.len as u64).sum()).collect();
        throttle.admit(wanted.iter().sum());
        let outcomes = c.stage_pull(d, batch.entries);
        for (j, &k) in batch.owners.iter().enumerate() {
            let (i, file_id) = large[k];
            let bad = match &outcomes {
                Err(e) => Some(format!("daemon {d}: {}", reason(e.0))),
                Ok(outs) if outs[j].errno != 0 => Some(format!("daemon {d}: {}", reason(outs[j].errno))),
                Ok(outs) if outs[j].bytes < wanted[j] => Some(reason(libc::ENODATA)),
                Ok(_) => None,
            };
            progress.add(0, wanted[j]);
            if let Some(why) = bad {
                if !failed[k].swap(true, Ordering::Relaxed) {
                    sh.fail(i, why);
                }
            }
            if pieces_left[k].fetch_sub(1, Ordering::AcqRel) == 1 {
                progress.add(1, 0);
                if failed[k].load(Ordering::Relaxed) {
                    continue;
                }
                let it = &items[i];
                let md = c.metadata_daemon(&it.dest);
                let commit = StageCommit {
                    path: it.dest.clone(),
                    file_id,
                    size: it.size,
                    mtime_ns: it.mtime_ns,
                    atime_ns: it.atime_ns,
                };
                let full = {
                    let mut q = commits[md as usize].lock().unwrap_or_else(|e| e.into_inner());
                    q.1 += entry_bytes(&[&commit.path], 0);
                    q.0.push((i, commit));
                    (q.0.len() >= COMMIT_BATCH || q.1 >= STAGE_BATCH_BYTES_MAX / 2).then(|| std::mem::take(&mut *q).0)
                };
                if let Some(b) = full {
                    send_commits(md, b);
                }
            }
        }
    });
    for (d, q) in commits.into_iter().enumerate() {
        let (q, _) = q.into_inner().unwrap_or_else(|e| e.into_inner());
        if !q.is_empty() {
            send_commits(d as u32, q);
        }
    }
    Moved {
        staged: sh.staged.into_inner().unwrap_or_else(|e| e.into_inner()),
        failures: sh.failures.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}
