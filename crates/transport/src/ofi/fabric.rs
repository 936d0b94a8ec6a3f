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
//!  0      1          4                8                 16
//!  | kind | reserved | sequence (le)  | connection (le)  | payload ...
//! ```
//!
//! * CONNECT (connection 0): payload = the caller's connection id (8 bytes) and the
//!   caller's fabric address. A listening endpoint answers ACCEPT; others drop it.
//! * ACCEPT: payload = the listener's id for the new connection.
//! * DATA: payload = the next bytes of the stream, numbered per connection. The
//!   receiver puts pieces back in order by their numbers: rxm announces
//!   send-after-send order (FI_ORDER_SAS) but a small eager message can overtake a
//!   large one sent before it by rendezvous (seen here: a 1 MiB write whose last
//!   piece was short arrived corrupt before the numbers).
//! * CLOSE: the peer closed after the pieces numbered before its own number; reads
//!   see end of stream once those are read.
//!
//! Connection ids are random 64-bit numbers; a message naming no connection of this
//! endpoint is dropped. Authentication is the handshake that runs over every stream.
//!
//! The threads that wait on connections read the completion queue themselves, one
//! at a time, and a background thread does when none has for 10 ms
//! (progress.rs); whoever reads it copies each received piece to its connection
//! and posts the buffer again.

use super::conn::{lock, Conn, Inbox};
use super::ffi::{AddrKind, Event, RawEndpoint};
use super::progress::Progress;
use super::shm;
use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const HEADER_BYTES: usize = 16;
pub(super) const KIND_CONNECT: u8 = 1;
pub(super) const KIND_ACCEPT: u8 = 2;
pub(super) const KIND_DATA: u8 = 3;
pub(super) const KIND_CLOSE: u8 = 4;
/// A sign of life asked for on a connection silent for a while (keepalive.rs),
/// and the answer.
pub(super) const KIND_PING: u8 = 5;
pub(super) const KIND_PONG: u8 = 6;

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
/// Bytes a connection may have posted and not yet completed; a writer past it
/// waits (the provider buffers what it has not sent).
const CONN_IN_FLIGHT_MAX: usize = 8 << 20;
/// How long a sender whose send queue is full waits on the completion queue at a
/// time before trying again.
const SEND_QUEUE_WAIT: Duration = Duration::from_millis(1);
/// How long a close tries to hand its message to a full send queue.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Receive tokens carry this bit; send tokens never do.
const RECV_TOKEN: u64 = 1 << 63;

pub(super) fn header(kind: u8, conn: u64) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_BYTES];
    h[0] = kind;
    h[8..16].copy_from_slice(&conn.to_le_bytes());
    h
}

/// A posted send: its bytes (which must live until its completion) and the
/// connection it counts against (None for control messages).
struct InFlight {
    bytes: Vec<u8>,
    conn: Option<Arc<Conn>>,
}

struct RecvBuffer(UnsafeCell<Box<[u8]>>);
// SAFETY: a buffer is touched by the provider while posted and, once its
// completion is read, by the one thread that read it, never by two at a time.
unsafe impl Sync for RecvBuffer {}

#[derive(Default)]
struct Routes {
    conns: HashMap<u64, Arc<Conn>>,
    /// Peer addresses inserted so far, and their handles.
    peers: HashMap<Vec<u8>, u64>,
}

/// Buffers of whole pieces, used again: a fresh one of 256 KiB per message is a
/// fresh mapping whose page faults cost more than the copy into it (a fifth of a
/// 1 MiB round trip's CPU before the pool).
struct Pool {
    free: Mutex<Vec<Vec<u8>>>,
    /// The size of a buffer: a piece and its header.
    bytes: usize,
}

/// Buffers a pool keeps at most (4 MiB with 256 KiB pieces).
const POOL_BUFFERS_MAX: usize = 16;
/// Messages up to this size are copied into a buffer of their own size instead:
/// a small reply waiting to be read must not hold a whole piece's buffer.
const POOLED_FROM_BYTES: usize = 16 << 10;

impl Pool {
    /// An empty buffer for a message of `len` bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        if len >= POOLED_FROM_BYTES && len <= self.bytes {
            if let Some(mut v) = lock(&self.free).pop() {
                v.clear();
                return v;
            }
            return Vec::with_capacity(self.bytes);
        }
        Vec::with_capacity(len)
    }

    fn give(&self, v: Vec<u8>) {
        if v.capacity() == self.bytes {
            let mut f = lock(&self.free);
            if f.len() < POOL_BUFFERS_MAX {
                f.push(v);
            }
        }
    }
}

/// A control message waiting to be sent (an ACCEPT), until `until`.
pub(super) struct Control {
    pub(super) dest: u64,
    pub(super) bytes: Vec<u8>,
    pub(super) until: Instant,
}

/// How long an ACCEPT is tried: a peer that cannot be reached in that time (gone,
/// or an address that leads nowhere) is given up, and never holds up the others.
const CONTROL_WAIT: Duration = Duration::from_secs(10);

/// One endpoint of this process on one provider.
pub struct Fabric {
    pool: Pool,
    pub(super) ep: RawEndpoint,
    /// Whether polls can wait on the queue (not shm's, which spins).
    pub(super) waits: bool,
    /// Which thread reads the queue (progress.rs).
    pub(super) progress: Progress,
    /// When the next keepalive round is due (keepalive.rs).
    pub(super) next_keepalive: Mutex<Instant>,
    /// The process that opened it: a forked child has its memory but not its
    /// progress thread, and shares its sockets with the parent.
    pid: u32,
    name: Vec<u8>,
    /// shm: the lock that tells sweepers the region is in use (shm.rs).
    _region: Option<nix::fcntl::Flock<std::fs::File>>,
    piece: usize,
    routes: Mutex<Routes>,
    /// Connections accepted and not yet taken; None while nothing listens.
    accepts: Mutex<Option<VecDeque<Arc<Conn>>>>,
    accepted: Condvar,
    in_flight: Mutex<HashMap<u64, InFlight>>,
    /// Control messages the progress thread sends when the provider takes them.
    pub(super) outbox: Mutex<VecDeque<Control>>,
    next_token: AtomicU64,
    buffers: Vec<RecvBuffer>,
}

impl Fabric {
    /// Opens `provider`'s endpoint bound to `node` and starts its progress thread.
    pub fn open(provider: &str, node: Option<&str>) -> io::Result<Arc<Fabric>> {
        // shm's completion queues spin when waited on (a core per idle process):
        // polled instead, with a backoff.
        let shm = shm::is_shm(provider);
        let named = if shm && node.is_none() {
            shm::sweep_stale();
            Some(shm::node_name())
        } else {
            None
        };
        let ep = RawEndpoint::open(provider, node.or(named.as_deref()), !shm)?;
        let waits = ep.waits();
        let name = ep.name()?;
        let region = if shm { shm::hold(&super::decode(ep.addr_kind(), &name)) } else { None };
        let piece = (ep.max_msg() as usize).saturating_sub(HEADER_BYTES).clamp(1, PIECE_BYTES_MAX);
        let buffers =
            (0..RECV_BUFFERS).map(|_| RecvBuffer(UnsafeCell::new(vec![0u8; piece + HEADER_BYTES].into()))).collect();
        let f = Arc::new(Fabric {
            pool: Pool { free: Mutex::default(), bytes: piece + HEADER_BYTES },
            ep,
            waits,
            progress: Progress::new(),
            next_keepalive: Mutex::new(Instant::now()),
            pid: std::process::id(),
            name,
            _region: region,
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
        std::thread::Builder::new().name(format!("fabric-{provider}")).spawn(move || run.background())?;
        Ok(f)
    }

    /// This endpoint's address as the provider encodes it.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    fn post_recv(&self, i: usize) -> io::Result<()> {
        // SAFETY: buffer i is not posted (never yet, or its completion was just
        // read by the calling thread, the only one that has it); it lives as
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
        let c = Arc::new(Conn::new(id, peer, peer_conn));
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
        let answered =
            self.post(peer, msg, Some(c.clone()), Some(deadline)).and_then(|()| self.accepted_by(&c, deadline));
        if let Err(e) = answered {
            self.forget(&c);
            return Err(e);
        }
        Ok(c)
    }

    /// Waits for the ACCEPT of `c` until `deadline`.
    fn accepted_by(&self, c: &Arc<Conn>, deadline: Instant) -> io::Result<()> {
        self.wait_for(c, Some(deadline), |_| c.peer_conn.load(Ordering::Acquire) != 0)
            .map(drop)
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no answer from the fabric endpoint"))
    }

    /// Reads what arrived on `c` into `buf`, waiting up to `timeout` for the first
    /// byte. 0 at the end of the stream.
    pub fn read(&self, c: &Arc<Conn>, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<usize> {
        let mut done = Vec::new();
        let n = self.wait_for(c, timeout.map(|t| Instant::now() + t), Inbox::readable)?.take(buf, &mut done);
        for v in done {
            self.pool.give(v);
        }
        Ok(n)
    }

    /// Sends `bytes` on `c` as pieces. Returns once they are posted, as a socket's
    /// write returns once the kernel has the bytes: the provider completes them in
    /// the background, a failure is reported by the next write, and a connection
    /// with more than [`CONN_IN_FLIGHT_MAX`] bytes not yet completed waits (up to
    /// `timeout`) before posting more.
    pub fn write(self: &Arc<Self>, c: &Arc<Conn>, bytes: &[u8], timeout: Option<Duration>) -> io::Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        drop(self.wait_for(c, deadline, |_| c.send_state(CONN_IN_FLIGHT_MAX).is_some())?);
        c.send_state(CONN_IN_FLIGHT_MAX).unwrap_or(Ok(()))?;
        if c.closed() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "fabric connection closed"));
        }
        let to = c.peer_conn.load(Ordering::Acquire);
        // Numbered and posted under one lock: another thread's write on the same
        // connection comes wholly before or after.
        let mut seq = lock(&c.next_seq);
        for p in bytes.chunks(self.piece) {
            let mut m = self.pool.take(HEADER_BYTES + p.len());
            m.extend_from_slice(&header(KIND_DATA, to));
            m[4..8].copy_from_slice(&seq.to_le_bytes());
            m.extend_from_slice(p);
            // On an error the pieces posted before complete on their own; the
            // stream is unusable after a partial write, as a socket's would be.
            self.post(c.peer, m, Some(c.clone()), deadline)?;
            *seq = seq.wrapping_add(1);
        }
        Ok(())
    }

    /// Posts one message, retrying while the provider's queue is full.
    fn post(&self, dest: u64, bytes: Vec<u8>, conn: Option<Arc<Conn>>, deadline: Option<Instant>) -> io::Result<()> {
        let mut pause = Duration::from_micros(1);
        let mut bytes = bytes;
        loop {
            match self.post_once(dest, bytes, conn.clone()) {
                Ok(()) => return Ok(()),
                Err((e, back)) if e.kind() == io::ErrorKind::WouldBlock => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "fabric send queue stayed full"));
                    }
                    bytes = back;
                    // Full until completions are read (rxm's credits come back
                    // with them, a rendezvous goes on when its peer answers):
                    // read them here, waiting on the queue if no other thread
                    // does, rather than sleep until another thread has.
                    if self.drive() == 0 {
                        if self.try_lead(false) {
                            self.poll_as_leader(Some(Instant::now() + SEND_QUEUE_WAIT));
                        } else {
                            std::thread::sleep(pause);
                            pause = (pause * 2).min(Duration::from_micros(200));
                        }
                    }
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Posts one message once; on an error, the message back with it.
    pub(super) fn post_once(
        &self,
        dest: u64,
        bytes: Vec<u8>,
        conn: Option<Arc<Conn>>,
    ) -> Result<(), (io::Error, Vec<u8>)> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        if let Some(c) = &conn {
            lock(&c.sending).bytes += len;
        }
        lock(&self.in_flight).insert(token, InFlight { bytes, conn });
        // SAFETY: the bytes live in `in_flight` (a Vec's heap buffer does not move
        // with the Vec) until this send's completion is read.
        match unsafe { self.ep.send(std::slice::from_raw_parts(ptr, len), dest, token) } {
            Ok(()) => Ok(()),
            Err(e) => Err((e, self.unpost(token))),
        }
    }

    /// Takes back a send the provider refused; its bytes.
    fn unpost(&self, token: u64) -> Vec<u8> {
        let Some(f) = lock(&self.in_flight).remove(&token) else { return Vec::new() };
        if let Some(c) = f.conn {
            c.sent(f.bytes.len(), 0);
        }
        f.bytes
    }

    /// Sends `bytes` as one message to the endpoint at `addr`, outside any
    /// connection: for tests that play a peer sending damaged messages.
    #[cfg(test)]
    pub(super) fn send_raw(&self, addr: &[u8], bytes: Vec<u8>) -> io::Result<()> {
        let peer = self.peer(addr)?;
        self.post(peer, bytes, None, Some(Instant::now() + Duration::from_secs(5)))
    }

    /// Ends `c`: the peer is told (when it knows the connection), and messages for
    /// it are dropped from now on.
    pub fn close(&self, c: &Conn) {
        c.close();
        if std::process::id() != self.pid {
            // A forked child dropping its parent's connections: a CLOSE sent from
            // here would end the parent's. Left alone (the child opens its own).
            return;
        }
        let to = c.peer_conn.load(Ordering::Acquire);
        if to != 0 {
            // Posted from this thread: a close must not wait for whichever thread
            // reads the queue next. Best effort: a peer that is gone
            // learns nothing either way.
            let mut m = header(KIND_CLOSE, to);
            m[4..8].copy_from_slice(&lock(&c.next_seq).to_le_bytes());
            let _ = self.post(c.peer, m, None, Some(Instant::now() + CLOSE_WAIT));
        }
        self.forget(c);
    }

    /// Every connection of this endpoint.
    pub(super) fn connections(&self) -> Vec<Arc<Conn>> {
        lock(&self.routes).conns.values().cloned().collect()
    }

    pub(super) fn forget(&self, c: &Conn) {
        lock(&self.routes).conns.remove(&c.id);
    }

    /// Reads and handles the completions there are, without waiting (any thread
    /// may: the queue is thread safe, and each completion goes to one reader).
    fn drive(&self) -> usize {
        let mut ev = [Event::default(); 16];
        let n = self.ep.poll(&mut ev, 0).unwrap_or(0);
        for e in &ev[..n] {
            self.complete(e);
        }
        n
    }

    /// Sends the control messages waiting, each once: one the provider cannot
    /// take yet goes to the back (a peer being connected to, or one that cannot
    /// be, must not hold up the others), one past its time is dropped.
    pub(super) fn flush_outbox(&self) {
        let waiting = lock(&self.outbox).len();
        for _ in 0..waiting {
            let Some(m) = lock(&self.outbox).pop_front() else { return };
            if Instant::now() >= m.until {
                continue;
            }
            if let Err((e, bytes)) = self.post_once(m.dest, m.bytes, None) {
                if e.kind() == io::ErrorKind::WouldBlock {
                    lock(&self.outbox).push_back(Control { dest: m.dest, bytes, until: m.until });
                }
            }
        }
    }

    pub(super) fn complete(&self, e: &Event) {
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
        let Some(InFlight { bytes, conn }) = lock(&self.in_flight).remove(&e.token) else { return };
        if let Some(c) = conn {
            c.sent(bytes.len(), e.err);
        }
        self.pool.give(bytes);
    }

    /// One message from a peer. Anything malformed, or for a connection this
    /// endpoint does not have, is dropped.
    fn received(&self, m: &[u8]) {
        if m.len() < HEADER_BYTES {
            return;
        }
        let conn = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
        let seq = u32::from_le_bytes(m[4..8].try_into().expect("4 bytes"));
        let body = &m[HEADER_BYTES..];
        if m[0] == KIND_CONNECT {
            return self.connect_from(body);
        }
        let Some(c) = lock(&self.routes).conns.get(&conn).cloned() else { return };
        c.heard();
        match m[0] {
            KIND_ACCEPT if body.len() >= 8 => {
                let theirs = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
                c.peer_conn.store(theirs, Ordering::Release);
                c.notify();
            }
            KIND_DATA => {
                let mut piece = self.pool.take(body.len());
                piece.extend_from_slice(body);
                c.deliver(seq, piece);
            }
            KIND_CLOSE => c.close_after(seq),
            KIND_PING => self.answer_ping(&c),
            _ => {} // KIND_PONG: heard, nothing else
        }
    }

    /// Whether a peer's address is in this provider's format at all: a socket
    /// address of its family's length, a NUL-terminated string, or bytes as many
    /// as this endpoint's own address.
    fn plausible(&self, name: &[u8]) -> bool {
        match self.ep.addr_kind() {
            AddrKind::Socket => {
                let family = name.get(0..2).map(|f| u16::from_ne_bytes([f[0], f[1]]) as i32);
                matches!((family, name.len()), (Some(libc::AF_INET), 16) | (Some(libc::AF_INET6), 28))
            }
            AddrKind::Text => name.len() > 1 && name.ends_with(&[0]) && !name[..name.len() - 1].contains(&0),
            AddrKind::Opaque => name.len() == self.name.len(),
        }
    }

    fn connect_from(&self, body: &[u8]) {
        if body.len() <= 8 || lock(&self.accepts).is_none() || lock(&self.routes).conns.len() >= CONNECTIONS_MAX {
            return;
        }
        let theirs = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
        if !self.plausible(&body[8..]) {
            return;
        }
        let Ok(peer) = self.peer(&body[8..]) else { return };
        let c = self.new_conn(peer, theirs);
        let mut reply = header(KIND_ACCEPT, theirs);
        reply.extend_from_slice(&c.id.to_le_bytes());
        lock(&self.outbox).push_back(Control { dest: peer, bytes: reply, until: Instant::now() + CONTROL_WAIT });
        if let Some(q) = lock(&self.accepts).as_mut() {
            q.push_back(c);
        }
        self.accepted.notify_all();
    }
}
