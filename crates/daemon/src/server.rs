//! The RPC server: accept loops, one thread per connection, request dispatch.
//!
//! Threads, not an async runtime: a daemon serves a bounded number of long-lived
//! client connections (`CONNECTIONS_MAX`), each request is short, and blocking I/O on
//! a dedicated thread costs the fewest syscalls and wake-ups per request. Requests on
//! one connection are answered in order; clients get parallelism from several
//! connections and from talking to many daemons at once.

use crate::chunks::ChunkStore;
use crate::metadata::{MetadataStore, Res};
use gust_proto::frame::OP_RESPONSE_BIT;
use gust_proto::path::validate as validate_path;
use gust_proto::{
    decode_request, encode, handshake, read_frame, write_frame, DaemonStats, DirEntry, FrameError, Reply, Request,
    Response, Span, OPS, OP_MAX, PATH_BYTES_MAX, READDIR_PAGE_BYTES_MAX, READDIR_PAGE_ENTRIES_MAX,
    SCAN_PAGE_ENTRIES_MAX, SPANS_PER_REQUEST_MAX,
};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug_span, error, info_span, warn};

/// Bound on concurrent connections; past it the handshake answers "busy".
pub const CONNECTIONS_MAX: u64 = 1024;
/// A peer must finish the handshake within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Per-connection buffers above this size are released after each request.
const BUFFER_KEEP_BYTES_MAX: usize = 4 << 20;
/// Log lines about refused peers (or failed accepts) that may come in a burst;
/// past it, one line per second (see `LogBudget`).
const LOG_LINES_BURST: u64 = 10;

/// Bounds the log lines of one kind of peer-driven event: a port scan or a peer
/// retrying in a loop must not grow the daemon's log without bound. Allows a burst
/// of `LOG_LINES_BURST` lines, then one per second; the next line logged after
/// some were dropped says how many. `gust status` (frames_refused) counts them all.
struct LogBudget {
    /// (lines that may be logged now, when the last one was credited, lines dropped).
    inner: Mutex<(u64, Instant, u64)>,
}

impl LogBudget {
    fn new() -> Self {
        LogBudget { inner: Mutex::new((LOG_LINES_BURST, Instant::now(), 0)) }
    }

    /// Some(lines dropped since the last logged one) if this one may be logged.
    fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, credited, dropped) = &mut *g;
        let secs = now.saturating_duration_since(*credited).as_secs();
        if secs > 0 {
            *tokens = (*tokens + secs).min(LOG_LINES_BURST);
            *credited += Duration::from_secs(secs);
        }
        if *tokens == 0 {
            *dropped += 1;
            return None;
        }
        *tokens -= 1;
        Some(std::mem::take(dropped))
    }
}

pub struct State {
    pub daemon_id: u32,
    pub rootdir: PathBuf,
    pub metadata: MetadataStore,
    pub chunks: ChunkStore,
    secret: Vec<u8>,
    started: Instant,
    ops: Vec<AtomicU64>,
    connections_open: AtomicU64,
    frames_refused: AtomicU64,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    /// Set by a Shutdown request without `keep`: remove the root directory on exit.
    pub wipe_on_exit: AtomicBool,
    refusals_logged: LogBudget,
    accept_errors_logged: LogBudget,
}

impl State {
    pub fn new(daemon_id: u32, rootdir: PathBuf, metadata: MetadataStore, chunks: ChunkStore, secret: Vec<u8>) -> Self {
        State {
            daemon_id,
            rootdir,
            metadata,
            chunks,
            secret,
            started: Instant::now(),
            ops: (0..=OP_MAX).map(|_| AtomicU64::new(0)).collect(),
            connections_open: AtomicU64::new(0),
            frames_refused: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            wipe_on_exit: AtomicBool::new(false),
            refusals_logged: LogBudget::new(),
            accept_errors_logged: LogBudget::new(),
        }
    }
}

pub fn block_termination_signals() {
    // SAFETY: plain signal-mask manipulation on this thread; threads spawned later
    // inherit the mask, so only `wait_for_termination` receives these signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        // A peer vanishing mid-write must give EPIPE, not kill the daemon.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

pub fn wait_for_termination() -> i32 {
    // SAFETY: sigwait on a set of blocked signals.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
        sig
    }
}

trait Conn: Read + Write + Send + Sized + 'static {
    fn set_timeout(&self, t: Option<Duration>);
    fn dup(&self) -> std::io::Result<Self>;
}

impl Conn for TcpStream {
    fn set_timeout(&self, t: Option<Duration>) {
        let _ = self.set_read_timeout(t);
        let _ = self.set_write_timeout(t);
    }
    fn dup(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
}

impl Conn for UnixStream {
    fn set_timeout(&self, t: Option<Duration>) {
        let _ = self.set_read_timeout(t);
        let _ = self.set_write_timeout(t);
    }
    fn dup(&self) -> std::io::Result<Self> {
        self.try_clone()
    }
}

pub fn spawn_tcp(state: Arc<State>, l: TcpListener) {
    std::thread::Builder::new()
        .name("accept-tcp".into())
        .spawn(move || {
            for s in l.incoming() {
                match s {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        let peer = s.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into());
                        start_conn(state.clone(), s, peer);
                    }
                    Err(e) => {
                        if state.accept_errors_logged.admit().is_some() {
                            error!(daemon = state.daemon_id, "accept (tcp): {e}");
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        })
        .expect("spawn accept thread");
}

pub fn spawn_uds(state: Arc<State>, l: UnixListener) {
    std::thread::Builder::new()
        .name("accept-uds".into())
        .spawn(move || {
            for s in l.incoming() {
                match s {
                    Ok(s) => start_conn(state.clone(), s, "unix socket".into()),
                    Err(e) => {
                        if state.accept_errors_logged.admit().is_some() {
                            error!(daemon = state.daemon_id, "accept (unix): {e}");
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        })
        .expect("spawn accept thread");
}

fn start_conn<S: Conn>(state: Arc<State>, s: S, peer: String) {
    let n = state.connections_open.fetch_add(1, Ordering::SeqCst) + 1;
    let busy = n > CONNECTIONS_MAX;
    let st = state.clone();
    let r = std::thread::Builder::new().name("conn".into()).spawn(move || {
        serve_conn(&st, s, &peer, busy);
        st.connections_open.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = r {
        error!(daemon = state.daemon_id, "cannot spawn connection thread: {e}");
        state.connections_open.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_conn<S: Conn>(state: &State, mut s: S, peer: &str, busy: bool) {
    let _conn = info_span!("conn", daemon = state.daemon_id, peer = %peer).entered();
    s.set_timeout(Some(HANDSHAKE_TIMEOUT));
    if let Err(e) = handshake::daemon(&mut s, &state.secret, busy) {
        state.frames_refused.fetch_add(1, Ordering::Relaxed);
        match state.refusals_logged.admit() {
            Some(0) => warn!("refused connection from {peer}: {e}"),
            Some(dropped) => warn!("refused connection from {peer}: {e} ({dropped} earlier refusals not logged)"),
            None => {}
        }
        return;
    }
    s.set_timeout(None);
    let Ok(w) = s.dup() else { return };
    let mut reader = BufReader::with_capacity(64 * 1024, s);
    let mut writer = BufWriter::with_capacity(64 * 1024, w);
    let mut bulk_in = Vec::new();
    let mut bulk_out = Vec::new();
    loop {
        let frame = match read_frame(&mut reader, &mut bulk_in) {
            Ok(f) => f,
            Err(FrameError::Closed) => return,
            Err(e) => {
                state.frames_refused.fetch_add(1, Ordering::Relaxed);
                warn!("closing connection from {peer}: {e}");
                return;
            }
        };
        let op = frame.header.op;
        let id = frame.header.request_id;
        let req = match decode_request(op, &frame.body) {
            Ok(r) => r,
            Err(e) => {
                // The header was sound, so answer with an error before closing.
                state.frames_refused.fetch_add(1, Ordering::Relaxed);
                warn!(op, id, "closing connection from {peer}: {e}");
                let errno = if matches!(e, FrameError::UnknownOp(_)) { libc::ENOSYS } else { libc::EPROTO };
                let reply: Reply = Err(errno);
                let _ = write_frame(&mut writer, op | OP_RESPONSE_BIT, id, &encode(&reply), &[]);
                return;
            }
        };
        // Disabled (free) unless GUST_LOG asks for debug: then every event of this
        // request carries its op and id.
        let _req = debug_span!("req", op = req.name(), id).entered();
        state.ops[op as usize].fetch_add(1, Ordering::Relaxed);
        bulk_out.clear();
        let reply = handle(state, req, &bulk_in, &mut bulk_out);
        let out: &[u8] = if matches!(reply, Ok(Response::Data { .. })) { &bulk_out } else { &[] };
        if let Err(e) = write_frame(&mut writer, op | OP_RESPONSE_BIT, id, &encode(&reply), out) {
            warn!("closing connection from {peer}: cannot send reply: {e}");
            return;
        }
        // An idle connection should not pin a large transfer's buffers.
        if bulk_in.capacity() > BUFFER_KEEP_BYTES_MAX {
            bulk_in = Vec::new();
        }
        if bulk_out.capacity() > BUFFER_KEEP_BYTES_MAX {
            bulk_out = Vec::new();
        }
    }
}

fn validate_spans(spans: &[Span], bulk_len: Option<usize>) -> Res<usize> {
    if spans.len() > SPANS_PER_REQUEST_MAX {
        return Err(libc::EINVAL);
    }
    let mut total = 0usize;
    for s in spans {
        s.offset.checked_add(s.len as u64).filter(|e| *e <= i64::MAX as u64).ok_or(libc::EFBIG)?;
        total = total.checked_add(s.len as usize).ok_or(libc::EINVAL)?;
    }
    if total > gust_proto::BULK_BYTES_MAX as usize {
        return Err(libc::EINVAL);
    }
    if let Some(b) = bulk_len {
        if b != total {
            return Err(libc::EINVAL);
        }
    }
    Ok(total)
}

fn handle(state: &State, req: Request, bulk_in: &[u8], bulk_out: &mut Vec<u8>) -> Reply {
    let md = &state.metadata;
    match req {
        Request::Ping => Ok(Response::Ok),
        Request::Shutdown { keep } => {
            state.wipe_on_exit.store(!keep, Ordering::SeqCst);
            if keep {
                // Tells a node agent that the data stays on purpose (gust-launch).
                let _ = std::fs::write(state.rootdir.join(gust_hosts::KEPT_MARKER), b"");
            }
            // The main thread waits for SIGTERM (`wait_for_termination`); send it a
            // moment later so this reply leaves first.
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                // SAFETY: signalling our own process.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            });
            Ok(Response::Ok)
        }
        Request::Create { path, record, exclusive } => {
            validate_path(&path)?;
            if record.target.len() > PATH_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            md.create(&path, &record, exclusive).map(Response::Record)
        }
        Request::Stat { path } => {
            validate_path(&path)?;
            md.get(&path)?.map(Response::Record).ok_or(libc::ENOENT)
        }
        Request::Remove { path, kind } => {
            validate_path(&path)?;
            md.remove(&path, kind == gust_proto::RemoveKind::Dir).map(Response::Record)
        }
        Request::UpdateSize { path, file_id, end, append_len, mtime_ns } => {
            validate_path(&path)?;
            md.update_size(&path, file_id, end, append_len, mtime_ns).map(Response::Offset)
        }
        Request::Truncate { path, size, mtime_ns } => {
            validate_path(&path)?;
            md.truncate(&path, size, mtime_ns).map(Response::Record)
        }
        Request::SetAttr { path, mode, atime_ns, mtime_ns, ctime_ns } => {
            validate_path(&path)?;
            md.set_attr(&path, mode, atime_ns, mtime_ns, ctime_ns).map(Response::Record)
        }
        Request::PutRecord { path, record, replace } => {
            validate_path(&path)?;
            if record.target.len() > PATH_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            md.put_record(&path, &record, replace).map(Response::MaybeRecord)
        }
        Request::ReadDir { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, READDIR_PAGE_ENTRIES_MAX) as usize;
            let (page, done) = md.read_dir(&dir, after.as_deref(), max, READDIR_PAGE_BYTES_MAX)?;
            Ok(Response::DirPage {
                entries: page.into_iter().map(|(name, kind)| DirEntry { name, kind }).collect(),
                done,
            })
        }
        Request::HasChildren { dir } => {
            validate_path(&dir)?;
            md.has_children(&dir).map(Response::Bool)
        }
        Request::ScanTree { dir, after, max_entries } => {
            validate_path(&dir)?;
            let max = max_entries.clamp(1, SCAN_PAGE_ENTRIES_MAX) as usize;
            let (records, last_key, done) = md.scan_tree(&dir, after.as_deref(), max)?;
            Ok(Response::Tree { records, last_key, done })
        }
        Request::PutRecords { records } => {
            if records.len() > SCAN_PAGE_ENTRIES_MAX as usize {
                return Err(libc::EINVAL);
            }
            for (p, r) in &records {
                validate_path(p)?;
                if r.target.len() > PATH_BYTES_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
            }
            md.put_records(&records).map(|_| Response::Ok)
        }
        Request::RemoveRecords { paths } => {
            if paths.len() > SCAN_PAGE_ENTRIES_MAX as usize {
                return Err(libc::EINVAL);
            }
            for p in &paths {
                validate_path(p)?;
            }
            md.remove_records(&paths).map(|_| Response::Ok)
        }
        Request::Write { file_id, spans } => {
            validate_spans(&spans, Some(bulk_in.len()))?;
            let n = state.chunks.write(file_id, &spans, bulk_in)?;
            state.bytes_written.fetch_add(n, Ordering::Relaxed);
            Ok(Response::Written(n))
        }
        Request::Read { file_id, spans } => {
            validate_spans(&spans, None)?;
            let span_lens = state.chunks.read(file_id, &spans, bulk_out)?;
            state.bytes_read.fetch_add(bulk_out.len() as u64, Ordering::Relaxed);
            Ok(Response::Data { span_lens })
        }
        Request::TruncateChunks { file_id, size } => state.chunks.truncate(file_id, size).map(|_| Response::Ok),
        Request::RemoveChunks { file_id } => state.chunks.remove(file_id).map(|_| Response::Ok),
        Request::Fsync { file_id } => {
            if let Some(f) = file_id {
                state.chunks.sync(f)?;
            }
            md.sync().map(|_| Response::Ok)
        }
        Request::StatFs => {
            let c = std::ffi::CString::new(state.rootdir.as_os_str().as_encoded_bytes()).map_err(|_| libc::EINVAL)?;
            // SAFETY: statvfs writes into a zeroed struct we own; the path is NUL-terminated.
            let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(c.as_ptr(), &mut sv) } != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            let f = sv.f_frsize;
            Ok(Response::StatFs {
                total_bytes: sv.f_blocks * f,
                free_bytes: sv.f_bfree * f,
                avail_bytes: sv.f_bavail * f,
                files: md.estimate_records(),
            })
        }
        Request::Stats => Ok(Response::Stats(DaemonStats {
            daemon_id: state.daemon_id,
            uptime_ms: state.started.elapsed().as_millis() as u64,
            ops: OPS
                .iter()
                .map(|(op, name)| (name.to_string(), state.ops[*op as usize].load(Ordering::Relaxed)))
                .collect(),
            connections_open: state.connections_open.load(Ordering::Relaxed),
            frames_refused: state.frames_refused.load(Ordering::Relaxed),
            bytes_written: state.bytes_written.load(Ordering::Relaxed),
            bytes_read: state.bytes_read.load(Ordering::Relaxed),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_budget_bursts_then_one_line_a_second() {
        let b = LogBudget::new();
        let t0 = b.inner.lock().unwrap().1;
        for _ in 0..LOG_LINES_BURST {
            assert_eq!(b.admit_at(t0), Some(0));
        }
        for _ in 0..1000 {
            assert_eq!(b.admit_at(t0 + Duration::from_millis(999)), None);
        }
        // One line a second, saying how many were dropped before it.
        assert_eq!(b.admit_at(t0 + Duration::from_millis(1500)), Some(1000));
        assert_eq!(b.admit_at(t0 + Duration::from_millis(1600)), None);
        assert_eq!(b.admit_at(t0 + Duration::from_millis(2000)), Some(1));
        // A quiet minute refills the burst, no more.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..LOG_LINES_BURST {
            assert_eq!(b.admit_at(later), Some(0));
        }
        assert_eq!(b.admit_at(later), None);
    }
}
