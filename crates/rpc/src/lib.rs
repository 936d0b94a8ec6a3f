//! gust-rpc: one connection type for every party of GustFS that calls another.
//!
//! A [`Connection`] is one authenticated stream (TCP, Unix socket, shared memory,
//! in-memory) carrying frames both ways. Either side may call: each call has a
//! request id of the side that sent it, many calls may be in flight, and a reader
//! thread hands each reply to the caller waiting for its id, and each request the
//! other side starts to this side's [`Handler`] (a daemon calling a client back,
//! the next round's grants and recalls; ARCHITECTURE.md). Every wait has a bound;
//! when the connection ends, every caller still waiting learns it at once. One
//! error type, [`Error`], says how a call ended.
//!
//! Today it carries the daemon's own calls to other daemons: lease heartbeats
//! (gust-daemon's lease.rs) and the node proxy's multiplexed links (proxy/). The
//! client core's pooled, pipelined transport (gust-client's rpc.rs, which places
//! chunk bytes straight into the caller's buffers) is the next to move here.
//!
//! Not for: the daemon's serving side (its event loop and sessions, gust-daemon's
//! server/), the wire format (gust-proto), moving bytes (gust-transport).

use gust_proto::frame::{Header, OP_RESPONSE_BIT};
use gust_proto::{decode, decode_request, encode, handshake, read_frame, FrameError, Reply, Request, Response};
use gust_transport::{Endpoint, Stream};
use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Bound on opening a connection (connect and handshake), whatever the caller's
/// bound on its calls: a daemon that does not answer a handshake in this long is
/// treated as down.
pub const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(5);

/// Bytes the reader buffers from the stream: a reply's head and small bodies in one
/// read.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// How a call (or opening a connection) ended without a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Nothing listens at the address: the process is gone (its host said so).
    Refused(String),
    /// Connecting or authenticating failed otherwise (unreachable, a wrong secret,
    /// a refusal of multiplexed service).
    Connect(String),
    /// The connection ended before the reply (the other side died or restarted,
    /// or a frame could not be sent whole).
    Lost(String),
    /// No reply within the caller's bound (the other side hangs or is cut off);
    /// the connection is closed, since a late reply could not be told apart.
    TimedOut(Duration),
    /// A reply came but does not decode as one.
    Malformed(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused(e) => write!(f, "connection refused: {e}"),
            Error::Connect(e) => write!(f, "cannot connect: {e}"),
            Error::Lost(e) => write!(f, "connection lost: {e}"),
            Error::TimedOut(t) => write!(f, "no reply within {} ms", t.as_millis()),
            Error::Malformed(e) => write!(f, "malformed reply: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// What this side answers to a request the other side starts: the request and its
/// bulk in, the reply and its bulk out. Runs on the connection's reader thread, so
/// it must be short (hand long work to another thread and answer when done is the
/// next round's need, not this one's).
pub type Handler = Arc<dyn Fn(Request, Vec<u8>) -> (Reply, Vec<u8>) + Send + Sync>;

/// How to open a connection.
#[derive(Clone)]
pub struct Options {
    /// Bound on every write, and on connect and handshake (at most
    /// [`CONNECT_TIMEOUT_MAX`]).
    pub timeout: Duration,
    /// Ask a daemon for multiplexed service first (`multiplex`, op 50): it then
    /// serves this connection's requests in parallel and answers out of order.
    /// Without it a daemon answers one request after the other, in order.
    pub multiplex: bool,
    /// Answers requests the other side starts; None: such a request ends the
    /// connection (it is a protocol error where nobody calls this side).
    pub handler: Option<Handler>,
    /// The reader thread's name, for stack dumps and profiles.
    pub name: &'static str,
    /// Called by the reader thread when the connection ends, with whether the other
    /// side closed it (an end of stream, not an error or a close from this side).
    pub on_end: Option<EndHandler>,
}

/// What runs when a connection ends (see [`Options::on_end`]).
pub type EndHandler = Arc<dyn Fn(bool) + Send + Sync>;

impl Options {
    pub fn new(timeout: Duration) -> Options {
        Options { timeout, multiplex: false, handler: None, name: "gust-rpc", on_end: None }
    }
}

/// A reply's body and bulk, or why none will come.
type Delivery = Result<(Vec<u8>, Vec<u8>), String>;

struct Waiting {
    /// Callers waiting, by request id; None once the connection ended.
    callers: Option<HashMap<u64, SyncSender<Delivery>>>,
}

/// One connection, shared by any number of calling threads (`&self` everywhere).
pub struct Connection {
    writer: Arc<Mutex<Box<dyn Stream>>>,
    waiting: Arc<Mutex<Waiting>>,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
    /// The other side closed the connection (an end of stream, or a write refused
    /// because its end is gone).
    peer_closed: Arc<AtomicBool>,
    peer: String,
    fds: Vec<i32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connection {
    /// Connects to `ep`, authenticates with the instance secret (both ways), asks
    /// for multiplexed service if `opts` says so, and starts the reader.
    pub fn open(ep: &Endpoint, secret: &[u8], opts: Options) -> Result<Connection, Error> {
        let bound = opts.timeout.min(CONNECT_TIMEOUT_MAX);
        let s = gust_transport::connect(ep, bound).map_err(|e| match e.kind() {
            io::ErrorKind::ConnectionRefused => Error::Refused(format!("{ep}: {e}")),
            _ => Error::Connect(format!("{ep}: {e}")),
        })?;
        Connection::client(s, secret, opts).map_err(|e| match e {
            Error::Connect(m) => Error::Connect(format!("{ep}: {m}")),
            e => e,
        })
    }

    /// [`Connection::open`] over a stream connected already: the client's half of
    /// the handshake, then multiplexed service if asked for.
    pub fn client(mut s: Box<dyn Stream>, secret: &[u8], opts: Options) -> Result<Connection, Error> {
        let bound = opts.timeout.min(CONNECT_TIMEOUT_MAX);
        s.set_timeout(Some(bound)).map_err(|e| Error::Connect(e.to_string()))?;
        handshake::client(&mut s, secret).map_err(|e| Error::Connect(e.to_string()))?;
        if opts.multiplex {
            ask_multiplex(&mut s).map_err(Error::Connect)?;
        }
        Connection::start(s, opts)
    }

    /// The side that was connected to: runs the daemon's half of the handshake on
    /// an accepted stream, then serves it like [`Connection::open`]'s (tests, and
    /// parties that accept few connections; a daemon's many clients are served by
    /// its event loop instead).
    pub fn accept(mut s: Box<dyn Stream>, secret: &[u8], opts: Options) -> Result<Connection, Error> {
        let bound = opts.timeout.min(CONNECT_TIMEOUT_MAX);
        s.set_timeout(Some(bound)).map_err(|e| Error::Connect(e.to_string()))?;
        handshake::daemon(&mut s, secret, false).map_err(|e| Error::Connect(format!("{}: {e}", s.peer())))?;
        Connection::start(s, opts)
    }

    /// Serves a stream whose handshake is done already (a daemon's session handing
    /// a client's `callback` connection over): from now on frames go both ways
    /// through this connection.
    pub fn established(s: Box<dyn Stream>, opts: Options) -> Result<Connection, Error> {
        Connection::start(s, opts)
    }

    fn start(s: Box<dyn Stream>, opts: Options) -> Result<Connection, Error> {
        // Writes are bounded by the caller's timeout; the reader waits between
        // frames as long as it takes (a timeout there only means "nothing yet").
        s.set_timeout(Some(opts.timeout)).map_err(|e| Error::Connect(e.to_string()))?;
        let peer = s.peer();
        let reader = s.try_clone().map_err(|e| Error::Connect(e.to_string()))?;
        let fds = [s.raw_fd(), reader.raw_fd()].into_iter().flatten().collect();
        let writer = Arc::new(Mutex::new(s));
        let waiting = Arc::new(Mutex::new(Waiting { callers: Some(HashMap::new()) }));
        let dead = Arc::new(AtomicBool::new(false));
        let peer_closed = Arc::new(AtomicBool::new(false));
        let ends = Ends {
            peer_closed: peer_closed.clone(),
            writer: writer.clone(),
            waiting: waiting.clone(),
            dead: dead.clone(),
            handler: opts.handler,
            on_end: opts.on_end,
        };
        std::thread::Builder::new()
            .name(opts.name.into())
            .spawn(move || ends.read(reader))
            .map_err(|e| Error::Connect(format!("cannot start a reader thread: {e}")))?;
        Ok(Connection { writer, waiting, next_id: AtomicU64::new(1), dead, peer_closed, peer, fds })
    }

    /// The descriptors of this process that carry the connection (its own and its
    /// reader's): a child after fork closes its copies of them (`abandon_after_fork`).
    pub fn raw_fds(&self) -> &[i32] {
        &self.fds
    }

    /// In a child after fork, where the connection is the parent's: forgets it
    /// without shutting it down (that would end it for the parent too). The caller
    /// closed the child's copies of `raw_fds` already, or does not mind keeping them.
    pub fn abandon_after_fork(self) {
        std::mem::forget(self);
    }

    /// Whether the connection may still carry calls.
    pub fn alive(&self) -> bool {
        !self.dead.load(Ordering::Relaxed)
    }

    /// Whether the other side closed the connection (its process ended, or it
    /// closed it on purpose), as opposed to an error, a timeout or a close here.
    pub fn ended_by_peer(&self) -> bool {
        self.peer_closed.load(Ordering::SeqCst)
    }

    /// Who is at the other end, for messages.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Ends the connection: the reader sees the end and fails every waiting caller.
    pub fn close(&self) {
        self.dead.store(true, Ordering::Relaxed);
        lock(&self.writer).shutdown();
    }

    /// Answers request `id` of op `op` that arrived before this connection took
    /// the stream over (a daemon's session handing over a `callback` connection).
    pub fn reply(&self, op: u16, id: u64, reply: &Reply) -> Result<(), Error> {
        send(&self.writer, op | OP_RESPONSE_BIT, id, &encode(reply), &[]).map_err(|e| {
            self.close();
            Error::Lost(format!("send: {e}"))
        })
    }

    /// Sends `req` and does not wait: its reply, when it comes, is dropped by the
    /// reader (no caller waits for its id). For a message whose sender must not be
    /// held by a slow receiver (a daemon telling a client its lock is granted); the
    /// write itself is bounded by the connection's timeout.
    pub fn notify(&self, req: &Request) -> Result<(), Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if !self.alive() {
            return Err(Error::Lost("connection closed".into()));
        }
        send(&self.writer, req.op(), id, &encode(req), &[]).map_err(|e| {
            if matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) {
                self.peer_closed.store(true, Ordering::SeqCst);
            }
            self.close();
            Error::Lost(format!("send: {e}"))
        })
    }

    /// Sends `req` with `bulk` and waits up to `timeout` for the reply and its bulk.
    pub fn call(&self, req: &Request, bulk: &[u8], timeout: Duration) -> Result<(Reply, Vec<u8>), Error> {
        let (body, bulk) = self.call_raw(req.op(), &encode(req), bulk, timeout)?;
        let reply = decode::<Reply>(&body).map_err(|e| Error::Malformed(e.to_string()))?;
        Ok((reply, bulk))
    }

    /// Sends an encoded request body (the node proxy passes bodies through) and
    /// waits up to `timeout` for the reply's body and bulk, undecoded.
    pub fn call_raw(&self, op: u16, body: &[u8], bulk: &[u8], timeout: Duration) -> Result<(Vec<u8>, Vec<u8>), Error> {
        self.call_routed(op, 0, body, bulk, timeout)
    }

    /// `call_raw` of a request a client routed by layout `generation` (a forward
    /// of the node proxy keeps it: the daemon it reaches checks it).
    pub fn call_routed(
        &self,
        op: u16,
        generation: u32,
        body: &[u8],
        bulk: &[u8],
        timeout: Duration,
    ) -> Result<(Vec<u8>, Vec<u8>), Error> {
        debug_assert!(op & OP_RESPONSE_BIT == 0, "a call sends a request op");
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        match &mut lock(&self.waiting).callers {
            Some(c) => c.insert(id, tx),
            None => return Err(Error::Lost("connection closed".into())),
        };
        if let Err(e) = send_routed(&self.writer, op, id, generation, body, bulk) {
            if matches!(e.kind(), io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) {
                self.peer_closed.store(true, Ordering::SeqCst);
            }
            // Part of a frame may have gone: the connection cannot carry more.
            self.close();
            return Err(Error::Lost(format!("send: {e}")));
        }
        match rx.recv_timeout(timeout) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(Error::Lost(e)),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Lost("connection closed".into())),
            Err(RecvTimeoutError::Timeout) => {
                if let Some(c) = &mut lock(&self.waiting).callers {
                    c.remove(&id);
                }
                self.close();
                Err(Error::TimedOut(timeout))
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

/// One frame, written whole under the writer's lock (replies of the handler and
/// calls of other threads share the stream).
fn send(writer: &Mutex<Box<dyn Stream>>, op: u16, id: u64, body: &[u8], bulk: &[u8]) -> io::Result<()> {
    send_routed(writer, op, id, 0, body, bulk)
}

/// `send`, saying the layout generation the request was routed by (the frame
/// header's `generation`).
fn send_routed(
    writer: &Mutex<Box<dyn Stream>>,
    op: u16,
    id: u64,
    generation: u32,
    body: &[u8],
    bulk: &[u8],
) -> io::Result<()> {
    write_request(&mut **lock(writer), op, id, generation, body, &[bulk])
}

/// Writes one request frame: the header (with the layout generation it was routed
/// by), the body, and the bulk in `bulk`'s parts, coalesced into one write when
/// small (gust_transport::write_parts). Every request of every client goes out
/// through here.
pub fn write_request(
    w: &mut (impl std::io::Write + ?Sized),
    op: u16,
    id: u64,
    generation: u32,
    body: &[u8],
    bulk: &[&[u8]],
) -> io::Result<()> {
    let bulk_len: usize = bulk.iter().map(|b| b.len()).sum();
    let head = Header::new(op, id, body.len(), bulk_len).with_generation(generation).encode();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + bulk.len());
    parts.push(&head);
    parts.push(body);
    parts.extend_from_slice(bulk);
    gust_transport::write_parts(w, &parts)
}

fn ask_multiplex(s: &mut Box<dyn Stream>) -> Result<(), String> {
    let req = Request::Multiplex;
    write_request(s, req.op(), 0, 0, &encode(&req), &[]).map_err(|e| e.to_string())?;
    let mut bulk = Vec::new();
    let f = read_frame(s, &mut bulk).map_err(|e| e.to_string())?;
    let ok = f.header.op == req.op() | OP_RESPONSE_BIT && matches!(decode::<Reply>(&f.body), Ok(Ok(Response::Ok)));
    if ok {
        Ok(())
    } else {
        Err("refused multiplexed service".into())
    }
}

/// Why a connection ended when the other side closed it.
const PEER_CLOSED: &str = "connection closed by the other side";

/// What the reader thread holds of its connection.
struct Ends {
    writer: Arc<Mutex<Box<dyn Stream>>>,
    waiting: Arc<Mutex<Waiting>>,
    dead: Arc<AtomicBool>,
    peer_closed: Arc<AtomicBool>,
    handler: Option<Handler>,
    on_end: Option<EndHandler>,
}

impl Ends {
    /// Hands each reply to its caller and each request to the handler until the
    /// connection ends, then fails the callers still waiting.
    fn read(self, s: Box<dyn Stream>) {
        let mut r = BufReader::with_capacity(READ_BUFFER_BYTES, s);
        let why = loop {
            match self.next_frame(&mut r) {
                Ok(()) => {}
                Err(why) => break why,
            }
        };
        if why == PEER_CLOSED {
            self.peer_closed.store(true, Ordering::SeqCst);
        }
        self.dead.store(true, Ordering::Relaxed);
        let callers = lock(&self.waiting).callers.take().unwrap_or_default();
        for (_, tx) in callers {
            let _ = tx.send(Err(why.clone()));
        }
        r.get_ref().shutdown();
        if let Some(f) = &self.on_end {
            f(why == PEER_CLOSED);
        }
    }

    fn next_frame(&self, r: &mut BufReader<Box<dyn Stream>>) -> Result<(), String> {
        // Between frames a read timeout only means that nothing is due yet.
        match r.fill_buf() {
            Ok([]) => return Err(PEER_CLOSED.into()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return if self.dead.load(Ordering::Relaxed) { Err("connection closed".into()) } else { Ok(()) };
            }
            Err(e) => return Err(e.to_string()),
        }
        let mut bulk = Vec::new();
        let f = match read_frame(r, &mut bulk) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Err(PEER_CLOSED.into()),
            Err(e) => return Err(e.to_string()),
        };
        if f.header.op & OP_RESPONSE_BIT != 0 {
            let caller = lock(&self.waiting).callers.as_mut().and_then(|c| c.remove(&f.header.request_id));
            // No caller: it gave up waiting (timed out); the reply is dropped.
            if let Some(tx) = caller {
                let _ = tx.send(Ok((f.body, bulk)));
            }
            return Ok(());
        }
        let Some(handler) = &self.handler else {
            return Err(format!("a request (op {}) where only replies come", f.header.op));
        };
        // A request the other side started: answered under its id, with its op.
        let reply = match decode_request(f.header.op, &f.body) {
            Ok(req) => handler(req, bulk),
            Err(FrameError::UnknownOp(_)) => (Err(libc::ENOSYS), Vec::new()),
            Err(e) => return Err(format!("a request that does not decode: {e}")),
        };
        send(&self.writer, f.header.op | OP_RESPONSE_BIT, f.header.request_id, &encode(&reply.0), &reply.1)
            .map_err(|e| format!("send a reply: {e}"))
    }
}

#[cfg(test)]
mod tests;
