//! `--verify`: every selected file's source and destination are read again and
//! compared by checksum (xxh3-64 per span), end to end. The daemons read both sides
//! of the spans they hold (the chunks or inline data, and the file on the shared
//! file system), so verifying also grows with the node count. A file that differs
//! is reported and undone (a staged-in file goes back to size 0, a staged-out file
//! is removed), so a rerun copies it again.

use crate::batch::{cut_spans, drive, Batcher};
use crate::report::Failure;
use crate::tree::{records_under, Item};
use crate::{reason, Direction};
use gust_client::stage_types::{entry_bytes, HashSource, StageHash, STAGE_REQUEST_BYTES_MAX};
use gust_client::{Client, Span, INLINE_BYTES_MAX};
use std::collections::HashSet;
use std::sync::Mutex;

/// One file to compare: its GustFS path and id, its external path, its size.
struct Target {
    item: usize,
    path: String,
    file_id: u128,
    external: String,
    size: u64,
}

/// Compares the files `which` of `items`; returns how many were compared and the
/// failures (mismatches and files that could not be read).
pub(crate) fn check(c: &Client, dir: Direction, items: &[Item], which: &[usize]) -> (u64, Vec<Failure>) {
    let records = match dir {
        Direction::In => records_under(c, items),
        Direction::Out => Default::default(),
    };
    let mut failures = Vec::new();
    let mut targets = Vec::new();
    for &i in which {
        let it = &items[i];
        let t = match dir {
            Direction::In => match records.get(&it.dest) {
                Some(r) => Target {
                    item: i,
                    path: it.dest.clone(),
                    file_id: r.file_id,
                    external: it.src.clone(),
                    size: r.size,
                },
                None => {
                    failures.push(Failure {
                        path: it.src.clone(),
                        reason: format!("{} is missing after staging", it.dest),
                    });
                    continue;
                }
            },
            Direction::Out => {
                Target { item: i, path: it.src.clone(), file_id: it.file_id, external: it.dest.clone(), size: it.size }
            }
        };
        if t.size != it.size {
            failures.push(Failure { path: it.src.clone(), reason: "sizes differ after staging".into() });
            continue;
        }
        targets.push(t);
    }
    let bad: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    let note = |k: usize, why: String| bad.lock().unwrap_or_else(|e| e.into_inner()).push((k, why));
    let n = c.daemon_count();

    // Small files: inline data against the external file, at the metadata daemon.
    let mut inline = Batcher::new(n);
    let mut chunked = Vec::new();
    for (k, t) in targets.iter().enumerate() {
        if t.size <= INLINE_BYTES_MAX as u64 {
            let spans = vec![Span { offset: 0, len: t.size as u32 }];
            let pair = [
                StageHash { source: HashSource::Inline(t.path.clone()), spans: spans.clone() },
                StageHash { source: HashSource::External(t.external.clone()), spans },
            ];
            let counted = entry_bytes(&[&t.path, &t.external], 2);
            inline.push(c.metadata_daemon(&t.path), k, pair, counted, 2 * t.size, 2);
        } else {
            chunked.push(k);
        }
    }
    let not_inline = Mutex::new(Vec::new());
    drive(inline.finish(), 2, |d, batch| {
        let items: Vec<StageHash> = batch.entries.into_iter().flatten().collect();
        match c.stage_hash(d, items) {
            Ok(h) => {
                for (j, &k) in batch.owners.iter().enumerate() {
                    let (a, b) = (&h[2 * j], &h[2 * j + 1]);
                    if a.errno == libc::EINVAL {
                        not_inline.lock().unwrap_or_else(|e| e.into_inner()).push(k);
                    } else if a.errno != 0 || b.errno != 0 {
                        note(k, reason(if a.errno != 0 { a.errno } else { b.errno }));
                    } else if a.hashes != b.hashes {
                        note(k, "checksum mismatch: source and destination differ".into());
                    }
                }
            }
            Err(e) => batch.owners.iter().for_each(|&k| note(k, format!("daemon {d}: {}", reason(e.0)))),
        }
    });
    chunked.extend(not_inline.into_inner().unwrap_or_else(|e| e.into_inner()));

    // Larger files: each daemon hashes its chunks and the same spans of the
    // external file.
    let mut pieces = Batcher::new(n);
    for &k in &chunked {
        let t = &targets[k];
        for (d, spans) in c.chunk_spans_by_daemon(t.file_id, t.size) {
            for piece in cut_spans(&spans, STAGE_REQUEST_BYTES_MAX / 2) {
                let data: u64 = piece.iter().map(|s| s.len as u64).sum();
                let counted = entry_bytes(&[&t.external], 2 * piece.len());
                let spans_n = 2 * piece.len();
                let pair = [
                    StageHash { source: HashSource::Chunks(t.file_id), spans: piece.clone() },
                    StageHash { source: HashSource::External(t.external.clone()), spans: piece },
                ];
                pieces.push(d, k, pair, counted, 2 * data, spans_n);
            }
        }
    }
    drive(pieces.finish(), 2, |d, batch| {
        let items: Vec<StageHash> = batch.entries.into_iter().flatten().collect();
        match c.stage_hash(d, items) {
            Ok(h) => {
                for (j, &k) in batch.owners.iter().enumerate() {
                    let (a, b) = (&h[2 * j], &h[2 * j + 1]);
                    if a.errno != 0 || b.errno != 0 {
                        note(k, format!("daemon {d}: {}", reason(if a.errno != 0 { a.errno } else { b.errno })));
                    } else if a.hashes != b.hashes {
                        note(k, "checksum mismatch: source and destination differ".into());
                    }
                }
            }
            Err(e) => batch.owners.iter().for_each(|&k| note(k, format!("daemon {d}: {}", reason(e.0)))),
        }
    });

    let mut seen = HashSet::new();
    for (k, why) in bad.into_inner().unwrap_or_else(|e| e.into_inner()) {
        if !seen.insert(k) {
            continue;
        }
        let t = &targets[k];
        // Undo, so that no one (and no rerun) takes the copy for complete.
        match dir {
            Direction::In => {
                let _ = c.truncate(&t.path, 0);
            }
            Direction::Out => {
                let _ = std::fs::remove_file(&t.external);
            }
        }
        failures.push(Failure { path: items[t.item].src.clone(), reason: why });
    }
    (targets.len() as u64, failures)
}
