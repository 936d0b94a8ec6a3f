//! The per-process writer: records go to a buffer of the calling thread (no lock
//! shared between threads on the hot path), and a full buffer (64 KiB) goes to this
//! process's trace file as one block, in one `write`. `flush` writes every thread's
//! buffer; it runs at exit (atexit), when tracing is switched off and when the
//! output moves.
//!
//! One file per process: `<role>-<pid>.gtrace` (mode 0600) in the directory given
//! to [`set_output`]. A forked child writes its own file: its inherited buffers (the
//! parent's records) are dropped, the parent writes those.
//!
//! Bounds: one buffer per live thread, each flushed at `BLOCK_FLUSH_BYTES`, so a
//! process holds at most threads x (64 KiB + one record) of trace data in memory.

use crate::codec::{encode_block, encode_header, encode_record, Header, Record, BLOCK_FLUSH_BYTES};
use crate::registry::{Tracepoint, ALL};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Instant;

/// Where blocks go.
struct Sink {
    dir: PathBuf,
    role: String,
    /// The open file and the pid it belongs to (a forked child opens its own).
    file: Option<(u32, File)>,
    /// The last write error, reported once per file.
    failed: bool,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);
/// The time origin of this process's records (ns since the epoch), set once.
static BASE_NS: AtomicU64 = AtomicU64::new(0);
/// Bumped in a forked child: buffers of an older generation hold the parent's records.
static FORK_GEN: AtomicU64 = AtomicU64::new(0);
static THREADS: Mutex<Vec<Arc<Mutex<ThreadBuf>>>> = Mutex::new(Vec::new());
static HOOKS: Once = Once::new();

struct ThreadBuf {
    tid: u32,
    gen: u64,
    count: u32,
    bytes: Vec<u8>,
}

impl ThreadBuf {
    /// The buffer's records as a block, and the buffer emptied.
    fn take_block(&mut self) -> Option<Vec<u8>> {
        if self.count == 0 {
            return None;
        }
        let block = encode_block(self.tid, self.count, &self.bytes);
        self.bytes.clear();
        self.count = 0;
        Some(block)
    }
}

/// A thread's buffer; at thread exit its records are written and it is forgotten.
struct Local(Arc<Mutex<ThreadBuf>>);

impl Local {
    fn new() -> Local {
        let b = Arc::new(Mutex::new(ThreadBuf {
            tid: gettid(),
            gen: FORK_GEN.load(Ordering::Relaxed),
            count: 0,
            bytes: Vec::new(),
        }));
        lock(&THREADS).push(b.clone());
        Local(b)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        flush_buf(&self.0);
        lock(&THREADS).retain(|t| !Arc::ptr_eq(t, &self.0));
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

/// Locks, ignoring poisoning: a panic elsewhere must not stop tracing or exit.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

fn getpid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Nanoseconds since the Unix epoch (wall clock: records of processes on one node
/// line up).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Sends this process's records to `dir` (created if missing), in a file named for
/// `role` (`client`, `daemon 3`) and the pid. Records buffered for an earlier
/// directory are written there first.
pub fn set_output(dir: &Path, role: &str) -> std::io::Result<()> {
    // The owner's only: paths are private (whatever the program's umask).
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let _ = BASE_NS.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
    HOOKS.call_once(|| {
        // SAFETY: registering functions with no preconditions.
        unsafe {
            libc::atexit(flush_at_exit);
            libc::pthread_atfork(None, None, Some(in_forked_child));
        }
    });
    let same = lock(&SINK).as_ref().is_some_and(|s| s.dir == dir && s.role == role);
    if !same {
        flush();
        *lock(&SINK) = Some(Sink { dir: dir.to_path_buf(), role: role.to_string(), file: None, failed: false });
    }
    Ok(())
}

/// The directory records go to, if any.
pub fn output_dir() -> Option<PathBuf> {
    lock(&SINK).as_ref().map(|s| s.dir.clone())
}

extern "C" fn flush_at_exit() {
    flush();
}

extern "C" fn in_forked_child() {
    // Only an atomic here: the child may not take locks another thread held.
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
}

fn open_file(s: &Sink, pid: u32) -> std::io::Result<File> {
    let stem = format!("{}-{pid}", s.role.replace(|c: char| !c.is_ascii_alphanumeric(), "-"));
    let tracepoints = ALL.iter().map(|t| (t.id, t.name.to_string())).collect();
    let header =
        encode_header(&Header { pid, base_ns: BASE_NS.load(Ordering::Relaxed), role: s.role.clone(), tracepoints });
    for n in 0..1000 {
        let name = if n == 0 { format!("{stem}.gtrace") } else { format!("{stem}.{n}.gtrace") };
        match OpenOptions::new().append(true).create_new(true).mode(0o600).open(s.dir.join(name)) {
            Ok(mut f) => {
                f.write_all(&header)?;
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "1000 trace files of this pid"))
}

/// Writes one block to this process's file (opening it on first use).
fn write_block(block: &[u8]) {
    let mut g = lock(&SINK);
    let Some(s) = g.as_mut() else { return };
    let pid = getpid();
    if s.file.as_ref().map(|(p, _)| *p) != Some(pid) {
        match open_file(s, pid) {
            Ok(f) => s.file = Some((pid, f)),
            Err(e) => {
                if !s.failed {
                    s.failed = true;
                    eprintln!("gust-trace: cannot write a trace file in {}: {e}; records dropped", s.dir.display());
                }
                return;
            }
        }
    }
    let (_, f) = s.file.as_mut().expect("opened above");
    if let Err(e) = f.write_all(block) {
        if !s.failed {
            s.failed = true;
            eprintln!("gust-trace: writing the trace file in {} failed: {e}; records dropped", s.dir.display());
        }
    }
}

fn flush_buf(b: &Mutex<ThreadBuf>) {
    let block = {
        let mut b = lock(b);
        if b.gen != FORK_GEN.load(Ordering::Relaxed) {
            // The parent's records: the parent writes them.
            b.bytes.clear();
            b.count = 0;
            None
        } else {
            b.take_block()
        }
    };
    if let Some(block) = block {
        write_block(&block);
    }
}

/// Writes every thread's buffered records to the file.
pub fn flush() {
    let threads: Vec<Arc<Mutex<ThreadBuf>>> = lock(&THREADS).clone();
    for t in threads {
        flush_buf(&t);
    }
}

/// Records one call. `r.tp`, `ts_ns` and `dur_ns` are the caller's (see [`Timer`]).
pub fn record(r: &Record) {
    let base = BASE_NS.load(Ordering::Relaxed);
    let gen = FORK_GEN.load(Ordering::Relaxed);
    let buffered = LOCAL.try_with(|l| {
        let full = {
            let mut b = lock(&l.0);
            if b.gen != gen {
                b.bytes.clear();
                b.count = 0;
                b.gen = gen;
                b.tid = gettid();
            }
            encode_record(&mut b.bytes, r, base);
            b.count += 1;
            if b.bytes.len() >= BLOCK_FLUSH_BYTES {
                b.take_block()
            } else {
                None
            }
        };
        if let Some(block) = full {
            write_block(&block);
        }
    });
    if buffered.is_err() {
        // Thread teardown (no thread-local any more): a block of one.
        let mut p = Vec::new();
        encode_record(&mut p, r, base);
        write_block(&encode_block(gettid(), 1, &p));
    }
}

/// A call being timed: made by [`start`] only when the tracepoint is on.
pub struct Timer {
    tp: &'static Tracepoint,
    ts_ns: u64,
    started: Instant,
}

/// Starts timing a call at `tp`; `None` (and nothing else done) when it is off.
#[inline(always)]
pub fn start(tp: &'static Tracepoint) -> Option<Timer> {
    if tp.on() {
        Some(Timer { tp, ts_ns: now_ns(), started: Instant::now() })
    } else {
        None
    }
}

impl Timer {
    pub fn tracepoint(&self) -> &'static Tracepoint {
        self.tp
    }

    /// Records the call; `r` says what it did (its tp, time and duration are set here).
    pub fn finish(self, mut r: Record) {
        r.tp = self.tp.id;
        r.ts_ns = self.ts_ns;
        r.dur_ns = self.started.elapsed().as_nanos() as u64;
        record(&r);
    }
}
