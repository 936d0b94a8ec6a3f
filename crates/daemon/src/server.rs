//! The RPC server: accept loops, one thread per connection, framing and handshake.
//!
//! Threads, not an async runtime: a daemon serves a bounded number of long-lived
//! client connections (`CONNECTIONS_MAX`), each request is short, and blocking I/O on
//! a dedicated thread costs the fewest syscalls and wake-ups per request. Requests on
//! one connection are answered in order; clients get parallelism from several
//! connections and from talking to many daemons at once. What a request does is
//! `dispatch`'s business.

use crate::dispatch::handle;
use crate::state::State;
use gust_proto::frame::OP_RESPONSE_BIT;
use gust_proto::{decode_request, encode, handshake, read_frame, write_frame, FrameError, Reply, Response};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug_span, error, info_span, warn};

/// Bound on concurrent connections; past it the handshake answers "busy".
pub const CONNECTIONS_MAX: u64 = 1024;
/// A peer must finish the handshake within this time.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Per-connection buffers above this size are released after each request.
const BUFFER_KEEP_BYTES_MAX: usize = 4 << 20;

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
    let n = state.metrics.connections_open.fetch_add(1, Ordering::SeqCst) + 1;
    let busy = n > CONNECTIONS_MAX;
    let st = state.clone();
    let r = std::thread::Builder::new().name("conn".into()).spawn(move || {
        serve_conn(&st, s, &peer, busy);
        st.metrics.connections_open.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = r {
        error!(daemon = state.daemon_id, "cannot spawn connection thread: {e}");
        state.metrics.connections_open.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_conn<S: Conn>(state: &State, mut s: S, peer: &str, busy: bool) {
    let _conn = info_span!("conn", daemon = state.daemon_id, peer = %peer).entered();
    s.set_timeout(Some(HANDSHAKE_TIMEOUT));
    if let Err(e) = handshake::daemon(&mut s, &state.secret, busy) {
        state.metrics.refused();
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
                state.metrics.refused();
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
                state.metrics.refused();
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
        state.metrics.count_op(op);
        bulk_out.clear();
        let reply = handle(state, req, &bulk_in, &mut bulk_out);
        let out: &[u8] =
            if matches!(reply, Ok(Response::Data { .. } | Response::RecordData { .. })) { &bulk_out } else { &[] };
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
