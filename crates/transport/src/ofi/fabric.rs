//! A process's endpoint on one fabric provider, and the connections multiplexed
//! over it.
//!
//! libfabric's reliable-datagram endpoints (FI_EP_RDM: verbs, CXI, EFA, tcp and shm
//! through rxm) have no connections: one endpoint per process reaches every peer by
//! address. GustFS's RPC layer wants connections (a session per client, replies and
//! recalls on it), so each message here carries a 16-byte header naming the
//! receiver's connection:
//!
//! ```text
//!  0      1          8                 16
//!  | kind | reserved | connection (le)  | payload ...
//! ```
//!
//! * CONNECT (connection 0): payload = the caller's connection id (8 bytes) and the
//!   caller's fabric address. A listening endpoint answers ACCEPT; others drop it.
//! * ACCEPT: payload = the listener's id for the new connection.
//! * DATA: payload = the next bytes of the stream. Sends are ordered (FI_ORDER_SAS),
//!   so pieces arrive in the order they were sent.
//! * CLOSE: the peer closed; reads see end of stream once what arrived is read.
//!
//! Connection ids are random 64-bit numbers; a message naming no connection of this
//! endpoint is dropped. Authentication is the handshake that runs over every stream.
//!
//! One thread per endpoint reads the completion queue (waiting on it where the
//! provider gives a wait object that does not spin, otherwise polling with a backoff of
//! at most 250 µs: shm),
//! copies each received piece to its connection and posts the buffer again.

use super::ffi::{Event, RawEndpoint};
use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const HEADER_BYTES: usize = 16;
const KIND_CONNECT: u8 = 1;
const KIND_ACCEPT: u8 = 2;
const KIND_DATA: u8 = 3;
const KIND_CLOSE: u8 = 4;

/// Bytes of stream per message: a 1 MiB request goes as four messages. Larger
/// pieces would cost every process RECV_BUFFERS times more memory.
pub const PIECE_BYTES_MAX: usize = 256 << 10;
/// Receive buffers posted at once (each of a piece and a header): 4 MiB a process.
const RECV_BUFFERS: usize = 16;
/// Longest fabric address taken from a peer (sockaddr_in6 is 28 bytes, shm's
/// strings under 100, CXI's and EFA's a few dozen).
const ADDRESS_BYTES_MAX: usize = 255;
/// Connections an endpoint keeps at most; CONNECTs past it are dropped.
const CONNECTIONS_MAX: usize = 1 << 16;
/// Longest pause between polls of a queue that cannot be waited on: the most an
/// idle connection's first message waits, against about 4,000 wake-ups a second
/// (1-2% of a core) for an idle endpoint.
const POLL_PAUSE_MAX: Duration = Duration::from_micros(250);
/// How long a close tries to hand its message to a full send queue.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Receive tokens carry this bit; send tokens never do.
const RECV_TOKEN: u64 = 1 << 63;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn header(kind: u8, conn: u64) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_BYTES];
    h[0] = kind;
    h[8..16].copy_from_slice(&conn.to_le_bytes());
    h
}

/// What a connection has received and not yet read.
#[derive(Default)]
struct Inbox {
    pieces: VecDeque<Vec<u8>>,
    /// Bytes of the front piece already read.
    offset: usize,
    /// The peer closed (or this side did).
    closed: bool,
}

/// One connection: the peer's address handle and connection id, and its inbox.
pub struct Conn {
    id: u64,
    peer: u64,
    /// The peer's id for this connection; 0 until a CONNECT is accepted.
    peer_conn: AtomicU64,
    inbox: Mutex<Inbox>,
    arrived: Condvar,
}

impl Conn {
    /// Whether bytes (or the end of the stream) wait to be read.
    pub fn readable_now(&self) -> bool {
        let b = lock(&self.inbox);
        !b.pieces.is_empty() || b.closed
    }

    /// Reads what arrived into `buf`, waiting up to `timeout` for the first byte.
    /// 0 at the end of the stream.
    pub fn read(&self, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut b = lock(&self.inbox);
        while b.pieces.is_empty() {
            if b.closed {
                return Ok(0);
            }
            b = wait(&self.arrived, b, deadline)?;
        }
        let mut n = 0;
        let inbox = &mut *b;
        while n < buf.len() {
            let Some(front) = inbox.pieces.front() else { break };
            let take = (front.len() - inbox.offset).min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&front[inbox.offset..inbox.offset + take]);
            n += take;
            inbox.offset += take;
            if inbox.offset == front.len() {
                inbox.pieces.pop_front();
                inbox.offset = 0;
            }
        }
        Ok(n)
    }

    fn deliver(&self, piece: Vec<u8>) {
        let mut b = lock(&self.inbox);
        if !b.closed {
            b.pieces.push_back(piece);
        }
        drop(b);
        self.arrived.notify_all();
    }

    fn close(&self) {
        lock(&self.inbox).closed = true;
        self.arrived.notify_all();
    }

    fn closed(&self) -> bool {
        lock(&self.inbox).closed
    }
}

/// Waits on `cv` until notified or `deadline` passes (TimedOut then).
fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>, deadline: Option<Instant>) -> io::Result<MutexGuard<'a, T>> {
    match deadline {
        None => Ok(cv.wait(g).unwrap_or_else(|e| e.into_inner())),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "fabric connection timed out"));
            }
            Ok(cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0)
        }
    }
}

/// The sends of one write: how many are still in flight, and the first error.
#[derive(Default)]
struct Batch {
    state: Mutex<(usize, Option<i32>)>,
    done: Condvar,
}

/// A posted send: its bytes (which must live until its completion) and the write it
/// belongs to (None for control messages the progress thread sent).
struct InFlight {
    _bytes: Vec<u8>,
    batch: Option<Arc<Batch>>,
}

struct RecvBuffer(UnsafeCell<Box<[u8]>>);
// SAFETY: a buffer is touched by the provider while posted and by the progress
// thread alone once its completion is read, never by two at a time.
unsafe impl Sync for RecvBuffer {}

#[derive(Default)]
struct Routes {
    conns: HashMap<u64, Arc<Conn>>,
    /// Peer addresses inserted so far, and their handles.
    peers: HashMap<Vec<u8>, u64>,
}

/// One endpoint of this process on one provider.
pub struct Fabric {
    pub(super) ep: RawEndpoint,
    name: Vec<u8>,
    piece: usize,
    routes: Mutex<Routes>,
    /// Connections accepted and not yet taken; None while nothing listens.
    accepts: Mutex<Option<VecDeque<Arc<Conn>>>>,
    accepted: Condvar,
    in_flight: Mutex<HashMap<u64, InFlight>>,
    /// Control messages the progress thread sends when the provider takes them.
    outbox: Mutex<VecDeque<(u64, Vec<u8>)>>,
    next_token: AtomicU64,
    buffers: Vec<RecvBuffer>,
}

impl Fabric {
    /// Opens `provider`'s endpoint bound to `node` and starts its progress thread.
    pub fn open(provider: &str, node: Option<&str>) -> io::Result<Arc<Fabric>> {
        // shm's completion queues spin when waited on (a core per idle process):
        // polled instead, with a backoff.
        let ep = RawEndpoint::open(provider, node, !provider.split(';').any(|p| p == "shm"))?;
        let name = ep.name()?;
        let piece = (ep.max_msg() as usize).saturating_sub(HEADER_BYTES).clamp(1, PIECE_BYTES_MAX);
        let buffers =
            (0..RECV_BUFFERS).map(|_| RecvBuffer(UnsafeCell::new(vec![0u8; piece + HEADER_BYTES].into()))).collect();
        let f = Arc::new(Fabric {
            ep,
            name,
            piece,
            routes: Mutex::default(),
            accepts: Mutex::new(None),
            accepted: Condvar::new(),
            in_flight: Mutex::default(),
            outbox: Mutex::default(),
            next_token: AtomicU64::new(1),
            buffers,
        });
        for i in 0..RECV_BUFFERS {
            f.post_recv(i)?;
        }
        let run = f.clone();
        std::thread::Builder::new().name(format!("fabric-{provider}")).spawn(move || run.progress())?;
        Ok(f)
    }

    /// This endpoint's address as the provider encodes it.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    fn post_recv(&self, i: usize) -> io::Result<()> {
        // SAFETY: buffer i is not posted (never yet, or its completion was just
        // handled by the progress thread, the only caller afterwards); it lives as
        // long as the fabric, and fabrics are never dropped while their thread runs.
        unsafe {
            let b = &mut *self.buffers[i].0.get();
            self.ep.recv(b.as_mut_ptr(), b.len(), RECV_TOKEN | i as u64)
        }
    }

    /// From now on CONNECTs are accepted and queued for [`Fabric::accept`].
    pub fn listen(&self) {
        lock(&self.accepts).get_or_insert_with(VecDeque::new);
    }

    /// The next accepted connection, waiting for one.
    pub fn accept(&self) -> Arc<Conn> {
        let mut q = lock(&self.accepts);
        loop {
            if let Some(c) = q.as_mut().and_then(|q| q.pop_front()) {
                return c;
            }
            q = self.accepted.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn peer(&self, addr: &[u8]) -> io::Result<u64> {
        if let Some(h) = lock(&self.routes).peers.get(addr) {
            return Ok(*h);
        }
        if addr.is_empty() || addr.len() > ADDRESS_BYTES_MAX {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a fabric address"));
        }
        // The provider reads as many bytes as its format says an address has, and a
        // string up to its NUL: it reads from a zeroed copy of the largest size, so
        // a short or unterminated address from a peer cannot make it read past it.
        let mut padded = addr.to_vec();
        padded.resize(ADDRESS_BYTES_MAX + 1, 0);
        let h = self.ep.insert(&padded)?;
        lock(&self.routes).peers.insert(addr.to_vec(), h);
        Ok(h)
    }

    fn new_conn(&self, peer: u64, peer_conn: u64) -> Arc<Conn> {
        let mut r = lock(&self.routes);
        let id = loop {
            let id = rand::random::<u64>();
            if id != 0 && !r.conns.contains_key(&id) {
                break id;
            }
        };
        let c = Arc::new(Conn {
            id,
            peer,
            peer_conn: AtomicU64::new(peer_conn),
            inbox: Mutex::default(),
            arrived: Condvar::new(),
        });
        r.conns.insert(id, c.clone());
        c
    }

    /// Opens a connection to the listener at `addr` (the provider's encoding),
    /// waiting up to `timeout` for its ACCEPT.
    pub fn connect(&self, addr: &[u8], timeout: Duration) -> io::Result<Arc<Conn>> {
        let peer = self.peer(addr)?;
        let c = self.new_conn(peer, 0);
        let mut msg = header(KIND_CONNECT, 0);
        msg.extend_from_slice(&c.id.to_le_bytes());
        msg.extend_from_slice(&self.name);
        let deadline = Instant::now() + timeout;
        let answered = self.send_all(peer, vec![msg], Some(deadline)).and_then(|()| self.accepted_by(&c, deadline));
        if let Err(e) = answered {
            self.forget(&c);
            return Err(e);
        }
        Ok(c)
    }

    /// Waits for the ACCEPT of `c` until `deadline`.
    fn accepted_by(&self, c: &Conn, deadline: Instant) -> io::Result<()> {
        let mut b = lock(&c.inbox);
        while c.peer_conn.load(Ordering::Acquire) == 0 {
            b = wait(&c.arrived, b, Some(deadline))
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer from the fabric endpoint"))?;
        }
        Ok(())
    }

    /// Sends `bytes` on `c` as pieces, returning once the provider completed them
    /// (or `timeout` passed).
    pub fn write(&self, c: &Conn, bytes: &[u8], timeout: Option<Duration>) -> io::Result<()> {
        if c.closed() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "fabric connection closed"));
        }
        let to = c.peer_conn.load(Ordering::Acquire);
        let msgs = bytes
            .chunks(self.piece)
            .map(|p| {
                let mut m = header(KIND_DATA, to);
                m.extend_from_slice(p);
                m
            })
            .collect();
        self.send_all(c.peer, msgs, timeout.map(|t| Instant::now() + t))
    }

    fn send_all(&self, dest: u64, msgs: Vec<Vec<u8>>, deadline: Option<Instant>) -> io::Result<()> {
        let batch = Arc::new(Batch::default());
        lock(&batch.state).0 = msgs.len();
        for m in msgs {
            // On an error the pieces posted before complete on their own; the
            // stream is unusable after a partial write, as a socket's would be.
            self.post(dest, m, Some(batch.clone()), deadline)?;
        }
        let mut s = lock(&batch.state);
        while s.0 > 0 {
            s = wait(&batch.done, s, deadline)?;
        }
        match s.1 {
            None => Ok(()),
            Some(err) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("fabric send failed: {}", RawEndpoint::describe(err)),
            )),
        }
    }

    /// Posts one message, retrying while the provider's queue is full.
    fn post(&self, dest: u64, bytes: Vec<u8>, batch: Option<Arc<Batch>>, deadline: Option<Instant>) -> io::Result<()> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        lock(&self.in_flight).insert(token, InFlight { _bytes: bytes, batch });
        let mut pause = Duration::from_micros(1);
        loop {
            // SAFETY: the bytes live in `in_flight` (a Vec's heap buffer does not
            // move with the Vec) until the progress thread reads this completion.
            let rc = unsafe { self.ep.send(std::slice::from_raw_parts(ptr, len), dest, token) };
            match rc {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        lock(&self.in_flight).remove(&token);
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "fabric send queue stayed full"));
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_micros(200));
                }
                Err(e) => {
                    lock(&self.in_flight).remove(&token);
                    return Err(e);
                }
            }
        }
    }

    /// Ends `c`: the peer is told (when it knows the connection), and messages for
    /// it are dropped from now on.
    pub fn close(&self, c: &Conn) {
        c.close();
        let to = c.peer_conn.load(Ordering::Acquire);
        if to != 0 {
            // Posted from this thread: the progress thread may be waiting on the
            // queue (shm's wait does not end at its timeout), and a close must not
            // wait for the next completion. Best effort: a peer that is gone
            // learns nothing either way.
            let _ = self.post(c.peer, header(KIND_CLOSE, to), None, Some(Instant::now() + CLOSE_WAIT));
        }
        self.forget(c);
    }

    fn forget(&self, c: &Conn) {
        lock(&self.routes).conns.remove(&c.id);
    }

    /// The progress thread: completions in, pieces to their connections, buffers
    /// posted again, control messages out.
    fn progress(self: Arc<Self>) {
        let mut ev = [Event::default(); 16];
        let waits = self.ep.waits();
        let mut idle = Duration::ZERO;
        loop {
            self.flush_outbox();
            let n = match self.ep.poll(&mut ev, if waits { 100 } else { 0 }) {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("gustfs: fabric completion queue: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                    0
                }
            };
            for e in &ev[..n] {
                self.complete(e);
            }
            if n == 0 && !waits {
                std::thread::sleep(idle);
                idle = (idle * 2).clamp(Duration::from_micros(1), POLL_PAUSE_MAX);
            } else {
                idle = Duration::ZERO;
            }
        }
    }

    fn flush_outbox(&self) {
        loop {
            let Some((dest, msg)) = lock(&self.outbox).pop_front() else { return };
            let token = self.next_token.fetch_add(1, Ordering::Relaxed);
            let (ptr, len) = (msg.as_ptr(), msg.len());
            lock(&self.in_flight).insert(token, InFlight { _bytes: msg, batch: None });
            // SAFETY: as in `post`.
            match unsafe { self.ep.send(std::slice::from_raw_parts(ptr, len), dest, token) } {
                Ok(()) => {}
                Err(e) => {
                    let back = lock(&self.in_flight).remove(&token);
                    if e.kind() == io::ErrorKind::WouldBlock {
                        // Full: the next turn tries again, after reading completions.
                        if let Some(f) = back {
                            lock(&self.outbox).push_front((dest, f._bytes));
                        }
                        return;
                    }
                }
            }
        }
    }

    fn complete(&self, e: &Event) {
        if e.token & RECV_TOKEN != 0 {
            let i = (e.token & !RECV_TOKEN) as usize;
            if i >= self.buffers.len() {
                return;
            }
            if e.err == 0 {
                // SAFETY: buffer i's receive completed; no one else touches it
                // until it is posted again below.
                let b = unsafe { &*self.buffers[i].0.get() };
                self.received(&b[..(e.len as usize).min(b.len())]);
            }
            if let Err(err) = self.post_recv(i) {
                eprintln!("gustfs: fabric: cannot post a receive buffer again: {err}");
            }
            return;
        }
        let Some(f) = lock(&self.in_flight).remove(&e.token) else { return };
        if let Some(b) = f.batch {
            let mut s = lock(&b.state);
            s.0 = s.0.saturating_sub(1);
            if e.err != 0 && s.1.is_none() {
                s.1 = Some(e.err);
            }
            drop(s);
            b.done.notify_all();
        }
    }

    /// One message from a peer. Anything malformed, or for a connection this
    /// endpoint does not have, is dropped.
    fn received(&self, m: &[u8]) {
        if m.len() < HEADER_BYTES {
            return;
        }
        let conn = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
        let body = &m[HEADER_BYTES..];
        match m[0] {
            KIND_CONNECT => self.connect_from(body),
            KIND_ACCEPT if body.len() >= 8 => {
                if let Some(c) = lock(&self.routes).conns.get(&conn).cloned() {
                    let theirs = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
                    c.peer_conn.store(theirs, Ordering::Release);
                    drop(lock(&c.inbox));
                    c.arrived.notify_all();
                }
            }
            KIND_DATA => {
                if let Some(c) = lock(&self.routes).conns.get(&conn).cloned() {
                    c.deliver(body.to_vec());
                }
            }
            KIND_CLOSE => {
                if let Some(c) = lock(&self.routes).conns.remove(&conn) {
                    c.close();
                }
            }
            _ => {}
        }
    }

    fn connect_from(&self, body: &[u8]) {
        if body.len() <= 8 || lock(&self.accepts).is_none() || lock(&self.routes).conns.len() >= CONNECTIONS_MAX {
            return;
        }
        let theirs = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        let Ok(peer) = self.peer(&body[8..]) else { return };
        let c = self.new_conn(peer, theirs);
        let mut reply = header(KIND_ACCEPT, theirs);
        reply.extend_from_slice(&c.id.to_le_bytes());
        lock(&self.outbox).push_back((peer, reply));
        if let Some(q) = lock(&self.accepts).as_mut() {
            q.push_back(c);
        }
        self.accepted.notify_all();
    }
}
