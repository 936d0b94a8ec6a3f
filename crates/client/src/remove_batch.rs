//! Batched deferred unlinks, under a directory's claim (claims.rs; the batch size
//! from `$GUST_REMOVE_BATCH`, 64 by default, 0 off): the small files a process
//! removes from a directory it claims are sent to their metadata daemons many paths
//! to a request (`remove_batch`), as create_batch.rs sends its creates.
//!
//! An unlink is deferred when this process holds the claim on the directory at the
//! daemon of the name, holds a grant on the name's record (so it knows, without
//! asking, that the name exists and is not a directory: the answer the unlink
//! gives), is not checked against mode bits (permissions.rs), has the file open on
//! no descriptor, and the file is small (at most `INLINE_BYTES_MAX`: the space a
//! queued remove holds back is bounded) and not hard-linked. Otherwise the unlink is
//! sent at once, as before.
//!
//! Nobody can tell: under the claim, any other process's request naming the
//! directory at that daemon recalls the claim first, and the recall sends the queue
//! before it is answered. This process sees its own unlinks at once: a second
//! unlink of a queued path gives ENOENT, and every other path operation sends the
//! queue first (`Client::settle_all`, and `get_stored_record` for the lookups that
//! do not settle). The queue goes out, one request per metadata daemon, when:
//! * it holds `entries_max` paths or [`REMOVE_BATCH_BYTES_MAX`] bytes of files,
//! * an unlink queues a path while the oldest queued one is older than
//!   [`crate::create_batch::CREATE_BATCH_INTERVAL`] (no timer thread, as for creates),
//! * this process makes any other path operation, forks, execs or exits, or a daemon
//!   recalls the claim.
//!
//! Errors: a queued remove that fails when sent cannot be reported by its unlink,
//! which has returned. A daemon that cannot be reached, or that answers `MOVED`, is
//! sent the remove again (deferred.rs); what still fails is logged with its path and
//! reported by the next `close` or `fsync`, as a failed queued create is
//! (create_batch.rs).
//!
//! Not for: directories (rmdir is never deferred), renames.

use crate::create_batch::{batch_entries_from_env, CREATE_BATCH_INTERVAL};
use crate::fork_local::ForkLocal;
use crate::rpc::Call;
use crate::{Client, Errno};
use gust_proto::{FileKind, RemoveKind, RemoveOutcome, Request, Response, INLINE_BYTES_MAX, REMOVE_BATCH_ENTRIES_MAX};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Bytes of files whose removes may be queued at once before the queue is sent: the
/// space deferral holds back from the daemons.
pub const REMOVE_BATCH_BYTES_MAX: u64 = 4 << 20;
/// Paths per flush when `$GUST_REMOVE_BATCH` is unset or set without a number.
pub const REMOVE_BATCH_ENTRIES_DEFAULT: usize = 64;

#[derive(Default)]
struct Queue {
    paths: Vec<String>,
    queued: HashSet<String>,
    bytes: u64,
    oldest: Option<Instant>,
}

/// The queue and its bound.
#[derive(Default)]
pub(crate) struct RemoveBatch {
    /// Paths per flush; 0: deferral off.
    entries_max: AtomicUsize,
    queue: ForkLocal<Queue>,
    /// `queue.paths.len()`, read without the lock on every path operation.
    count: AtomicUsize,
}

impl RemoveBatch {
    pub(crate) fn from_env() -> RemoveBatch {
        let n = batch_entries_from_env("GUST_REMOVE_BATCH", REMOVE_BATCH_ENTRIES_DEFAULT, REMOVE_BATCH_ENTRIES_MAX);
        RemoveBatch { entries_max: AtomicUsize::new(n), ..RemoveBatch::default() }
    }
}

impl Client {
    /// Batches deferred unlinks, `entries_max` paths per request (0: off; at most
    /// REMOVE_BATCH_ENTRIES_MAX).
    pub fn set_remove_batch(&self, entries_max: usize) {
        self.removes.entries_max.store(entries_max.min(REMOVE_BATCH_ENTRIES_MAX), Ordering::Relaxed);
    }

    /// Whether any unlink is queued.
    pub(crate) fn removes_queued(&self) -> bool {
        self.removes.count.load(Ordering::Acquire) > 0
    }

    /// Whether `p` (normalized) is queued for removal: it is gone for this process.
    pub(crate) fn remove_queued(&self, p: &str) -> bool {
        self.removes.count.load(Ordering::Acquire) > 0 && self.removes.queue.with(|q| q.queued.contains(p))
    }

    /// Queues the unlink of `p` (normalized, queued creates already sent, by a
    /// caller not checked against mode bits) if it may be deferred (see the module
    /// doc): `true` when queued, and the unlink is done as far as this process can
    /// tell.
    pub(crate) fn unlink_deferred(&self, p: &str) -> bool {
        let max = self.removes.entries_max.load(Ordering::Relaxed);
        if max == 0 || self.ending() || self.transport.grants.claims().len() == 0 {
            return false;
        }
        let Some((r, _)) = self.held_record(p, false) else { return false };
        if r.kind == FileKind::Dir
            || r.linked_to().is_some()
            || r.size > INLINE_BYTES_MAX as u64
            || self.files.is_open(p)
        {
            return false;
        }
        // Forgotten first: no later lookup of this process may find the record here.
        self.transport.grants.changing(&Request::Remove { path: p.to_string(), kind: RemoveKind::NotDir });
        let due = self.while_claimed(p, || {
            self.removes.queue.with(|q| {
                let now = Instant::now();
                q.paths.push(p.to_string());
                q.queued.insert(p.to_string());
                q.bytes += r.size;
                let oldest = *q.oldest.get_or_insert(now);
                self.removes.count.store(q.paths.len(), Ordering::Release);
                q.paths.len() >= max
                    || q.bytes >= REMOVE_BATCH_BYTES_MAX
                    || now.duration_since(oldest) >= CREATE_BATCH_INTERVAL
            })
        });
        match due {
            None => false,
            Some(due) => {
                if due {
                    self.flush_removes();
                }
                true
            }
        }
    }

    /// Sends every queued remove: one `remove_batch` per metadata daemon (more for
    /// more than REMOVE_BATCH_ENTRIES_MAX paths), all in flight together, then each
    /// removed file's chunks where it had any. Failures are logged and kept for the
    /// next close or fsync.
    pub(crate) fn flush_removes(&self) {
        // After another thread's flush landed (flight.rs): what it took is applied.
        let Some(_flying) = self.flight.take_off_for(&self.removes.count) else { return };
        let taken = self.removes.queue.take_and(|| self.removes.count.store(0, Ordering::Release));
        // None: inherited from the parent, which sends them.
        let Some(Queue { paths, .. }) = taken else { return };
        crate::deferred::send_in_rounds(self, paths, |paths, resend| self.send_removes(paths, resend));
    }

    /// One round of `flush_removes`: `paths` to their metadata daemons. Returns
    /// those that go again (deferred.rs).
    fn send_removes(&self, paths: Vec<String>, resend: &mut crate::deferred::Resend) -> Vec<String> {
        let mut by_daemon: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for p in paths {
            by_daemon.entry(self.md_daemon(&p)).or_default().push(p);
        }
        let groups: Vec<(u32, Vec<String>)> = by_daemon
            .into_iter()
            .flat_map(|(d, ps)| ps.chunks(REMOVE_BATCH_ENTRIES_MAX).map(|c| (d, c.to_vec())).collect::<Vec<_>>())
            .collect();
        let calls = groups
            .iter()
            .map(|(d, ps)| Call { daemon: *d, req: Request::RemoveBatch { paths: ps.clone() }, bulk: Vec::new() })
            .collect();
        let answers = self.transport.batch(calls);
        let mut again = Vec::new();
        for ((_, ps), answer) in groups.into_iter().zip(answers) {
            let outcomes: Vec<RemoveOutcome> = match answer {
                Ok((Response::RemovedBatch(outs), _)) if outs.len() == ps.len() => outs,
                Ok(_) => vec![RemoveOutcome::Failed(libc::EIO); ps.len()],
                Err(e) if resend.goes_again(self, e) => {
                    again.extend(ps);
                    continue;
                }
                Err(Errno(e)) => vec![RemoveOutcome::Failed(e); ps.len()],
            };
            for (p, out) in ps.into_iter().zip(outcomes) {
                let r = match out {
                    RemoveOutcome::Removed { record, inline } => self.name_removed(&record, inline),
                    // Sent again: removed by the first send, whose answer was lost.
                    RemoveOutcome::Failed(libc::ENOENT) if resend.again => Ok(()),
                    RemoveOutcome::Failed(e) => Err(Errno(e)),
                };
                if let Err(e) = r {
                    self.deferred_failed("remove", p, e);
                }
            }
        }
        again
    }
}
