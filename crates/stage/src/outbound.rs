//! Stage-out by the daemons.
//!
//! * A small file's data is inline in its record: its metadata daemon writes it to
//!   the shared file system itself (batches of files per daemon), under a temporary
//!   name renamed over the destination once complete.
//! * A larger file is created here under a temporary name beside its destination
//!   and sized; every daemon writes the chunks it holds into it at their offsets
//!   (push batches of at most 64 MiB); once all are in, it gets its mode and times
//!   and is renamed to its name. A file that failed leaves no file under its name.
//! * Symlinks are made here.

use crate::batch::{drive, Batcher};
use crate::report::Failure;
use crate::tree::set_times_local;
use crate::{reason, Job, Moved};
use gust_client::stage_types::{entry_bytes, StageExport};
use gust_client::{Kind, INLINE_BYTES_MAX};
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The temporary name a file is written under, beside its destination.
pub(crate) fn partial_name(dest: &str) -> String {
    let p = Path::new(dest);
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = p.parent().map(|d| d.display().to_string()).unwrap_or_default();
    if name.len() + 12 <= 255 {
        format!("{dir}/.{name}.gust-stage")
    } else {
        format!("{dir}/.gust-stage-{:016x}", twox_hash::XxHash3_64::oneshot(name.as_bytes()))
    }
}

pub(crate) fn copy(job: Job) -> Moved {
    let Job { c, o, items, todo, existing, progress, throttle, .. } = job;
    let failures = Mutex::new(Vec::new());
    let staged = Mutex::new(Vec::new());
    let fail = |i: usize, why: String| {
        failures.lock().unwrap_or_else(|e| e.into_inner()).push(Failure { path: items[i].src.clone(), reason: why })
    };
    let done = |i: usize| staged.lock().unwrap_or_else(|e| e.into_inner()).push(i);
    let n = c.daemon_count();

    let mut exports = Batcher::with_data_max(n, throttle.piece_max());
    let mut chunked = Vec::new();
    for &i in todo {
        let it = &items[i];
        if it.is_dir() {
            continue;
        }
        if existing.get(&it.dest) == Some(Kind::Dir) {
            fail(i, format!("{} is a directory", it.dest));
            continue;
        }
        if it.is_symlink() {
            let _ = fs::remove_file(&it.dest);
            match std::os::unix::fs::symlink(&it.target, &it.dest) {
                Ok(()) => {
                    let _ = set_times_local(&it.dest, it.atime_ns, it.mtime_ns);
                    done(i)
                }
                Err(e) => fail(i, e.to_string()),
            }
        } else if it.size <= INLINE_BYTES_MAX as u64 {
            let counted = entry_bytes(&[&it.src, &it.dest], 0);
            let e = StageExport { path: it.src.clone(), file_id: it.file_id, dest: it.dest.clone() };
            exports.push(c.metadata_daemon(&it.src), i, e, counted, 0, 0);
        } else {
            chunked.push(i);
        }
    }
    // Small files: written by their metadata daemons; a small file that is not
    // inline (written in chunks) goes the chunked way.
    let not_inline = Mutex::new(Vec::new());
    drive(exports.finish(), o.jobs, |d, batch| {
        throttle.admit(batch.owners.iter().map(|&i| items[i].size).sum());
        match c.stage_export(d, batch.entries) {
            Ok(outs) => {
                for (&i, out) in batch.owners.iter().zip(outs) {
                    match out.errno {
                        0 => {
                            done(i);
                            progress.add(1, items[i].size);
                        }
                        libc::EINVAL => not_inline.lock().unwrap_or_else(|e| e.into_inner()).push(i),
                        e => {
                            fail(i, reason(e));
                            progress.add(1, items[i].size);
                        }
                    }
                }
            }
            Err(e) => batch.owners.iter().for_each(|&i| {
                fail(i, format!("daemon {d}: {}", reason(e.0)));
                progress.add(1, items[i].size);
            }),
        }
    });
    chunked.extend(not_inline.into_inner().unwrap_or_else(|e| e.into_inner()));

    // Larger files: created and sized here, filled by the daemons.
    let mut pushes = Batcher::with_data_max(n, throttle.piece_max());
    let mut files = Vec::new(); // (item, temporary name)
    let mut pieces_left: Vec<AtomicUsize> = Vec::new();
    for i in chunked {
        let it = &items[i];
        let tmp = partial_name(&it.dest);
        let made = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|f| f.set_len(it.size));
        if let Err(e) = made {
            fail(i, format!("{tmp}: {e}"));
            let _ = fs::remove_file(&tmp);
            progress.add(1, it.size);
            continue;
        }
        let k = files.len();
        let pieces = pushes.push_file(c, k, it.file_id, it.size, &tmp, throttle.piece_max());
        files.push((i, tmp));
        pieces_left.push(AtomicUsize::new(pieces));
    }
    let failed: Vec<AtomicBool> = files.iter().map(|_| AtomicBool::new(false)).collect();
    drive(pushes.finish(), o.jobs, |d, batch| {
        let wanted: Vec<u64> = batch.entries.iter().map(|e| e.spans.iter().map(|s| s.len as u64).sum()).collect();
        throttle.admit(wanted.iter().sum());
        let outcomes = c.stage_push(d, batch.entries);
        for (j, &k) in batch.owners.iter().enumerate() {
            let (i, tmp) = &files[k];
            let bad = match &outcomes {
                Err(e) => Some(format!("daemon {d}: {}", reason(e.0))),
                Ok(outs) if outs[j].errno != 0 => Some(format!("daemon {d}: {}", reason(outs[j].errno))),
                Ok(_) => None,
            };
            progress.add(0, wanted[j]);
            if let Some(why) = bad {
                if !failed[k].swap(true, Ordering::Relaxed) {
                    fail(*i, why);
                }
            }
            if pieces_left[k].fetch_sub(1, Ordering::AcqRel) == 1 {
                progress.add(1, 0);
                let it = &items[*i];
                if failed[k].load(Ordering::Relaxed) {
                    let _ = fs::remove_file(tmp);
                    continue;
                }
                let r = fs::set_permissions(tmp, fs::Permissions::from_mode(it.mode))
                    .and_then(|_| set_times_local(tmp, it.atime_ns, it.mtime_ns))
                    .and_then(|_| fs::rename(tmp, &it.dest));
                match r {
                    Ok(()) => done(*i),
                    Err(e) => {
                        let _ = fs::remove_file(tmp);
                        fail(*i, format!("{}: {e}", it.dest));
                    }
                }
            }
        }
    });
    Moved {
        staged: staged.into_inner().unwrap_or_else(|e| e.into_inner()),
        failures: failures.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}
