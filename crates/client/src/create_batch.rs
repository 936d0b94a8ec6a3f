//! Batched deferred creates, under a directory's claim (claims.rs; the batch size
//! from `$GUST_CREATE_BATCH`, 64 by default, 0 off; see
//! [`Client::set_create_batch`]): the small files a process creates and closes are
//! sent to their metadata daemons many records to a request (`create_inline_batch`),
//! the client-side "bulk insertion" of IndexFS/BatchFS/DeltaFS.
//!
//! The last close of a create deferred under a claim (inline.rs) queues the record
//! and its data here and returns; the queue goes out, one request per metadata
//! daemon holding queued paths, when:
//! * it holds `entries_max` records or [`CREATE_BATCH_DATA_BYTES_MAX`] bytes of data,
//! * a close queues a create while the oldest queued one is older than
//!   [`CREATE_BATCH_INTERVAL`] (there is no timer thread: a process that stops
//!   creating holds its queue until its next file-system call, its exit, or the
//!   recall of its claim),
//! * this client makes any path operation (stat, open of an existing path, readdir,
//!   rename, unlink, mkdir, ...: `Client::norm`, via `settle_all`), or a deferred
//!   open of a path that is queued,
//! * a daemon recalls the claim (another process names the directory): the
//!   callback connection's thread sends it before answering,
//! * the process forks (the preload library's pthread_atfork handler), execs or
//!   exits (its exit handler); a child forked otherwise drops what it inherited,
//!   which its parent sends.
//!
//! So every process sees the files as if created at their open. A create is queued
//! only while the claim is held (checked under the claims' lock, which a recall
//! takes first); otherwise it is sent at its close. Sketch: a 4 KiB create costs ~30
//! µs of CPU as one request on the test machine; 64 of them in one request cost one
//! request's fixed part plus 64 RocksDB writes, and at most 1 MiB of data is held.
//!
//! Errors: a queued create that fails at the flush (ENOSPC from a full daemon,
//! EEXIST for an O_EXCL create whose path appeared meanwhile, a daemon down for
//! longer than the RPC timeout: deferred.rs sends a batch again to a daemon not
//! reached, and under a new layout) cannot be reported by its close, which has
//! returned. It is logged on stderr with its path
//! at once and kept, and the next `close` or `fsync` of any descriptor of this
//! client returns its errno, once (as a page cache reports a write-back error at the
//! next fsync). A non-exclusive create whose path exists by then is no error: its
//! data is written into what is there, as the open would have done.
//!
//! Not for: the deferral itself (inline.rs), chunked files.

use crate::fork_local::ForkLocal;
use crate::inline::Pending;
use crate::rpc::Call;
use crate::{Client, Errno, Result};
use gust_proto::{Record, Request, Response, CREATE_BATCH_ENTRIES_MAX};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a queued create waits while the process keeps creating files: long next
/// to a create (~30 µs), short next to anything a person or a job step waits for.
pub const CREATE_BATCH_INTERVAL: Duration = Duration::from_millis(50);
/// Data held in the queue at most before it is sent.
pub const CREATE_BATCH_DATA_BYTES_MAX: usize = 1 << 20;
/// Records per flush when `$GUST_CREATE_BATCH` is set without a number.
pub const CREATE_BATCH_ENTRIES_DEFAULT: usize = 64;

/// One closed create not yet sent.
struct Queued {
    path: String,
    record: Record,
    data: Vec<u8>,
    exclusive: bool,
    flags: i32,
    mode: u32,
}

#[derive(Default)]
struct Queue {
    items: Vec<Queued>,
    paths: HashSet<String>,
    data_bytes: usize,
    oldest: Option<Instant>,
}

/// The queue, its bound and the failures not reported yet.
#[derive(Default)]
pub(crate) struct CreateBatch {
    /// Records per flush; 0: batching off (every create is sent at its close).
    entries_max: AtomicUsize,
    queue: ForkLocal<Queue>,
    /// `queue.items.len()`, read without the lock on every path operation.
    queued: AtomicUsize,
    failed: Mutex<Vec<(String, Errno)>>,
    failed_count: AtomicUsize,
    /// Rounds in which a deferred batch went again (deferred.rs), creates and
    /// removes: `Client::deferred_resends`.
    pub(crate) resends: AtomicUsize,
}

impl CreateBatch {
    /// From `$GUST_CREATE_BATCH` (see [`batch_entries_from_env`]).
    pub(crate) fn from_env() -> CreateBatch {
        let b = CreateBatch::default();
        let n = batch_entries_from_env("GUST_CREATE_BATCH", CREATE_BATCH_ENTRIES_DEFAULT, CREATE_BATCH_ENTRIES_MAX);
        b.entries_max.store(n, Ordering::Relaxed);
        b
    }
}

/// A batch size from the environment variable `var`: unset is `default`; empty or 0
/// is off (0); 1 or any non-number is `default`; N is N, at most `max`.
pub(crate) fn batch_entries_from_env(var: &str, default: usize, max: usize) -> usize {
    let n = match std::env::var(var) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(0) => 0,
            Ok(1) => default,
            Ok(n) => n,
            Err(_) if v.trim().is_empty() => 0,
            Err(_) => default,
        },
    };
    n.min(max)
}

impl Client {
    /// Batches deferred creates, `entries_max` records per request (0: off; at most
    /// CREATE_BATCH_ENTRIES_MAX). Front ends set it from $GUST_CREATE_BATCH.
    pub fn set_create_batch(&self, entries_max: usize) {
        self.creates.entries_max.store(entries_max.min(CREATE_BATCH_ENTRIES_MAX), Ordering::Relaxed);
    }

    /// Sends what this client holds back for others: deferred creates of open
    /// descriptors (as ordinary files: parent and child may both write through
    /// them, and a create kept in both would be sent twice, the second truncating
    /// what the first wrote), buffered writes and sizes, queued creates (the
    /// preload library before a fork: the child must see its parent's files and
    /// data). Failures surface as after any flush.
    pub fn send_before_fork(&self) {
        self.settle_all()
    }

    /// Whether a last close should queue its create instead of sending it.
    pub(crate) fn batching_creates(&self) -> bool {
        self.creates.entries_max.load(Ordering::Relaxed) > 0 && !self.ending()
    }

    /// Queues the create of `path` with its data (a last close), if this process
    /// still holds the claim on its directory (claims.rs: the claim's recall sends
    /// the queue); otherwise gives `p` back, to be sent at once. Sends the queue if
    /// it is full or its oldest entry is due. Failures of that send surface through
    /// `take_create_error` (the front-end close calls it).
    pub(crate) fn queue_create(
        &self,
        path: &str,
        record: Record,
        flags: i32,
        p: Pending,
    ) -> std::result::Result<(), Box<Pending>> {
        let mut p = Some(p);
        let due = self.while_claimed(path, || self.queue_claimed(path, record, flags, p.take().expect("once")));
        match due {
            None => Err(Box::new(p.take().expect("not queued"))),
            Some(due) => {
                if due {
                    self.flush_creates();
                }
                Ok(())
            }
        }
    }

    /// Puts the create in the queue (the claim is held); whether the queue is due.
    fn queue_claimed(&self, path: &str, record: Record, flags: i32, p: Pending) -> bool {
        let path = path.to_string();
        let (data, exclusive, mode) = p.into_parts();
        self.creates.queue.with(|q| {
            let now = Instant::now();
            q.data_bytes += data.len();
            q.paths.insert(path.clone());
            q.items.push(Queued { path, record, data, exclusive, flags, mode });
            let oldest = *q.oldest.get_or_insert(now);
            self.creates.queued.store(q.items.len(), Ordering::Release);
            q.items.len() >= self.creates.entries_max.load(Ordering::Relaxed).max(1)
                || q.data_bytes >= CREATE_BATCH_DATA_BYTES_MAX
                || now.duration_since(oldest) >= CREATE_BATCH_INTERVAL
        })
    }

    /// Whether anything is deferred and not sent yet: creates open or queued,
    /// unlinks queued.
    pub(crate) fn queued_anything(&self) -> bool {
        self.creates.queued.load(Ordering::Acquire) > 0 || self.removes_queued() || !self.pending.is_empty()
    }

    /// Whether `path` is queued (a deferred open of it sends the queue first, so
    /// that the daemons see the creates in the order this process made them).
    pub(crate) fn create_queued(&self, path: &str) -> bool {
        self.creates.queued.load(Ordering::Acquire) > 0 && self.creates.queue.with(|q| q.paths.contains(path))
    }

    /// The errno of the oldest failed queued create not reported yet (then forgotten).
    pub(crate) fn take_create_error(&self) -> Result<()> {
        if self.creates.failed_count.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let mut failed = self.creates.failed.lock().unwrap_or_else(|e| e.into_inner());
        self.creates.failed_count.store(0, Ordering::Release);
        let first = failed.drain(..).next();
        match first {
            Some((_, e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Sends every queued create: one `create_inline_batch` per metadata daemon, all
    /// in flight together, once any other thread's flush has landed (flight.rs).
    /// Failures are logged and kept for `take_create_error`.
    pub(crate) fn flush_creates(&self) {
        // After another thread's flush landed (flight.rs): what it took is applied.
        let Some(_flying) = self.flight.take_off_for(&self.creates.queued) else { return };
        let taken = self.creates.queue.take_and(|| self.creates.queued.store(0, Ordering::Release));
        // None: inherited from the parent, which sends them.
        let Some(Queue { items, .. }) = taken else { return };
        if items.is_empty() {
            return;
        }
        crate::deferred::send_in_rounds(self, items, |items, resend| self.send_creates(items, resend));
    }

    /// One round of `flush_creates`: `items` to their metadata daemons, one
    /// request per daemon, in the order they were queued. Returns those that go
    /// again (deferred.rs).
    fn send_creates(&self, items: Vec<Queued>, resend: &mut crate::deferred::Resend) -> Vec<Queued> {
        let mut by_daemon: BTreeMap<u32, Vec<Queued>> = BTreeMap::new();
        for it in items {
            by_daemon.entry(self.md_daemon(&it.path)).or_default().push(it);
        }
        let groups: Vec<(u32, Vec<Queued>)> = by_daemon.into_iter().collect();
        let calls = groups
            .iter()
            .map(|(d, group)| Call {
                daemon: *d,
                req: Request::CreateInlineBatch {
                    entries: group.iter().map(|it| (it.path.clone(), it.record.clone())).collect(),
                },
                bulk: group.iter().map(|it| it.data.as_slice()).collect(),
            })
            .collect();
        let tickets: Vec<_> = groups.iter().map(|(d, _)| self.lookup_ticket(*d)).collect();
        let answers = self.transport.batch(calls);
        let mut again = Vec::new();
        for (i, ((daemon, group), answer)) in groups.into_iter().zip(answers).enumerate() {
            let errnos: Vec<i32> = match answer {
                Ok((Response::Staged(outs), _)) if outs.len() == group.len() => outs.iter().map(|o| o.errno).collect(),
                Ok(_) => vec![libc::EIO; group.len()],
                Err(e) if resend.goes_again(self, e) => {
                    again.extend(group);
                    continue;
                }
                Err(Errno(e)) => vec![e; group.len()],
            };
            // Granted (all of them made): this process knows them, data and all.
            if crate::grants::batch_flags(i) & gust_proto::frame::REPLY_GRANTED != 0 {
                for it in &group {
                    let data = (!it.data.is_empty()).then_some(&it.data[..]);
                    self.granted_created(tickets[i], daemon, &it.path, &it.record, data);
                }
            }
            for (it, errno) in group.into_iter().zip(errnos) {
                let r = match errno {
                    0 => Ok(()),
                    // Sent again: made by the first send, whose answer was lost.
                    libc::EEXIST if resend.again && self.made_by(&it) => Ok(()),
                    libc::EEXIST if !it.exclusive => self.create_over_existing(&it),
                    e => Err(Errno(e)),
                };
                if let Err(e) = r {
                    self.deferred_failed("create", it.path, e);
                }
            }
        }
        again
    }

    /// Whether the file at `it`'s path is the one `it` creates.
    fn made_by(&self, it: &Queued) -> bool {
        self.get_stored_record(&it.path).is_ok_and(|r| r.file_id == it.record.file_id)
    }

    /// A queued non-exclusive create found its path taken: what its open would have
    /// done then, an open of what is there and the data written into it.
    fn create_over_existing(&self, it: &Queued) -> Result<()> {
        let (fd, _, _) = self.open_resolved(&it.path, it.flags, it.mode)?;
        let f = self.file_unsettled(fd)?;
        let r = if it.data.is_empty() { Ok(()) } else { self.write_data(&f, &it.data, 0) };
        drop(f);
        r.and(self.close_impl(fd))
    }

    /// A queued change (`what`: create, remove) of `path` failed when sent: logged now,
    /// and its errno kept for the next close or fsync (`take_create_error`).
    pub(crate) fn deferred_failed(&self, what: &str, path: String, e: Errno) {
        let why = std::io::Error::from_raw_os_error(e.0);
        eprintln!("gust: the {what} of {path} (deferred, sent in a batch) failed: {why}");
        self.creates.failed.lock().unwrap_or_else(|e| e.into_inner()).push((path, e));
        self.creates.failed_count.fetch_add(1, Ordering::Release);
    }
}
