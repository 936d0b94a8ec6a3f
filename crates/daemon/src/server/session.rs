//! One client connection as a state machine: the handshake, then frames in and
//! replies out, driven by whoever has the connection's turn (a worker of the event
//! loop, or the thread of a stream that has no descriptor).
//!
//! A turn does at most one read: it serves every whole frame that read completed,
//! keeps the part of a frame that has not all arrived, and returns what the
//! connection waits for next. Nothing in a turn waits on the peer, so a peer that
//! trickles bytes, stops halfway or stops reading its replies costs its own buffers
//! (bounded, see `budget`) and a deadline, never a thread.
//!
//! Where bytes go: a read lands in the worker's scratch buffer; frames that fit in
//! it are served from there. A frame larger than the scratch buffer (a big write)
//! gets a buffer of its exact size once its header is known, and the rest of it is
//! read straight into place. Replies go out with one write when small, gathered
//! writes when large; what the socket does not take is kept until it does.

use super::budget::Budget;
use crate::dispatch::{carries_bulk, handle_for, BulkOut};
use crate::state::State;
use gust_proto::frame::{Header, HEADER_BYTES};
use gust_proto::handshake::{self, DaemonHandshake, CLIENT_MAC_BYTES, HELLO_BYTES};
use gust_proto::{decode_request, encode, FrameError, Reply, Request};
use gust_transport::{Stream, COALESCE_BYTES_MAX};
use std::io::{self, IoSlice, Write};
use std::time::{Duration, Instant};
use tracing::{debug_span, warn};

#[path = "session_callback.rs"]
mod callback;
#[path = "session_proxy.rs"]
mod proxied;

/// A worker's read buffer: one read takes up to this much.
pub(crate) const SCRATCH_BYTES: usize = 64 << 10;
/// A peer must finish the handshake within this time.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default bound on a stall: a frame that started arriving must be whole within this
/// time (at least ~0.5 MiB/s for the largest frame), and a reply the peer does not
/// take must be taken within it; otherwise the connection is closed.
pub const STALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(60);
/// A worker's reply buffer above this size is released after the request.
const BUFFER_KEEP_BYTES_MAX: usize = 4 << 20;

/// What a connection waits for after its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// More bytes from the peer.
    Read,
    /// Room to send the rest of a reply.
    Write,
    /// Request memory (the budget is spent): retry the turn later.
    Park,
    Close,
}

/// What one worker thread owns and lends to each turn it runs.
pub(crate) struct Worker {
    pub scratch: Vec<u8>,
    pub bulk_out: Vec<u8>,
    reply: Vec<u8>,
    /// A large frame's buffer, kept for the next one: a fresh zeroed allocation per
    /// 512 KiB write costs a memset or page faults each time.
    spare: Vec<u8>,
}

impl Worker {
    pub fn new() -> Worker {
        Worker {
            scratch: vec![0; SCRATCH_BYTES],
            bulk_out: Vec::new(),
            reply: Vec::with_capacity(4096),
            spare: Vec::new(),
        }
    }

    /// A buffer of `len` bytes (contents unspecified), the spare one if it is large
    /// enough.
    fn frame_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.spare);
        if buf.capacity() < len {
            return vec![0; len];
        }
        if buf.len() >= len {
            buf.truncate(len);
        } else {
            buf.resize(len, 0);
        }
        buf
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= BUFFER_KEEP_BYTES_MAX && buf.capacity() > self.spare.capacity() {
            self.spare = buf;
        }
    }
}

enum Phase {
    Hello,
    ClientMac(DaemonHandshake),
    Ready,
}

/// A frame larger than the scratch buffer, received in place.
struct InPlace {
    header: Header,
    /// Body then bulk, `HEADER_BYTES` not included.
    buf: Vec<u8>,
    got: usize,
}

pub(crate) struct Session {
    stream: Box<dyn Stream>,
    pub peer: String,
    span: tracing::Span,
    phase: Phase,
    /// Refuse politely at the handshake: the daemon is at its connection limit.
    busy: bool,
    /// Bytes that arrived and were not served yet: the start of a frame (or
    /// handshake message), or whole frames left behind a reply the peer has not
    /// taken.
    pending: Vec<u8>,
    in_place: Option<InPlace>,
    /// Reply bytes the socket did not take yet, from `out_sent` on.
    out: Vec<u8>,
    out_sent: usize,
    /// A large reply's bulk the socket did not take yet, from `out_bulk_sent` on:
    /// the worker's buffer itself, taken over rather than copied.
    out_bulk: Vec<u8>,
    out_bulk_sent: usize,
    /// The send queue of replies that go out by reference (splice.rs), made for the
    /// first; what waits in it goes before `out` and `out_bulk`.
    pipe: Option<super::splice::SendPipe>,
    /// Bytes of `pending`, `in_place` and `out` charged to the budget.
    charged: usize,
    /// When the handshake, a partial frame or an unsent reply times out.
    pub deadline: Option<Instant>,
    stall_timeout: Duration,
    /// The last frame served was larger than the scratch buffer.
    expect_large: bool,
    /// A proxy's multiplexed connection: frames go to the proxy's pool, which
    /// writes every reply (crate::proxy).
    mux: Option<std::sync::Arc<crate::proxy::MuxWriter>>,
    /// This connection holds one of the proxy's places for a forward (taken before
    /// the forward is served, given back after).
    forward_place: bool,
    /// A forward ended in this turn: connections parked for a place may go on.
    pub forward_ended: bool,
    /// The client process that said `hello` on this connection (crate::grants).
    client: Option<std::sync::Arc<crate::grants::Holder>>,
    /// The stream went to a client's callback connection (session_callback.rs): it
    /// is not shut down when the session ends.
    detached: bool,
}

enum Flow {
    Continue,
    Stop(Outcome),
}

/// Where a reply's bulk bytes are (see dispatch's `BulkOut`).
enum Bulk<'a> {
    None,
    /// The worker's `bulk_out`.
    Worker,
    /// Values pinned in RocksDB for the length of this request, in order.
    Pinned(Vec<&'a [u8]>),
}

impl Session {
    pub fn new(stream: Box<dyn Stream>, daemon_id: u32, busy: bool, stall_timeout: Duration) -> Session {
        let peer = stream.peer();
        let span = tracing::info_span!("conn", daemon = daemon_id, peer = %peer);
        Session {
            stream,
            peer,
            span,
            phase: Phase::Hello,
            busy,
            pending: Vec::new(),
            in_place: None,
            out: Vec::new(),
            out_sent: 0,
            out_bulk: Vec::new(),
            out_bulk_sent: 0,
            pipe: None,
            charged: 0,
            deadline: Some(Instant::now() + HANDSHAKE_TIMEOUT),
            stall_timeout,
            expect_large: false,
            mux: None,
            forward_place: false,
            forward_ended: false,
            client: None,
            detached: false,
        }
    }

    pub fn stream(&self) -> &dyn Stream {
        &*self.stream
    }

    /// The handshake is done.
    pub fn established(&self) -> bool {
        matches!(self.phase, Phase::Ready)
    }

    /// Bytes charged to the budget, to give back when the session ends.
    pub fn charged(&self) -> usize {
        self.charged
    }

    /// The budget was settled by whoever ended the session.
    pub fn forget_charge(&mut self) {
        self.charged = 0;
    }

    fn set_charged(&mut self, budget: &Budget, now: usize) {
        if now > self.charged {
            budget.charge(now - self.charged);
        } else {
            budget.release(self.charged - now);
        }
        self.charged = now;
    }

    fn held_bytes(&self) -> usize {
        self.pending.capacity()
            + self.in_place.as_ref().map_or(0, |p| p.buf.capacity())
            + self.out.capacity()
            + self.out_bulk.capacity()
    }

    /// One turn: send what is owed, serve what already arrived, read once, serve.
    pub fn turn(&mut self, state: &State, budget: &Budget, w: &mut Worker) -> Outcome {
        let span = self.span.clone();
        let _g = span.enter();
        let outcome = self.turn_inner(state, budget, w);
        // Buffers held past this turn count against the budget.
        let held = self.held_bytes();
        if held != self.charged {
            self.set_charged(budget, held);
        }
        self.deadline = match (&self.phase, outcome) {
            (Phase::Hello | Phase::ClientMac(_), _) => self.deadline,
            (_, Outcome::Write) | (_, Outcome::Park) => {
                Some(self.deadline.unwrap_or_else(|| Instant::now() + self.stall_timeout))
            }
            _ if !self.pending.is_empty() || self.in_place.is_some() => {
                Some(self.deadline.unwrap_or_else(|| Instant::now() + self.stall_timeout))
            }
            _ => None,
        };
        outcome
    }

    fn turn_inner(&mut self, state: &State, budget: &Budget, w: &mut Worker) -> Outcome {
        match self.flush_out(w) {
            Ok(true) => {}
            Ok(false) => return Outcome::Write,
            Err(_) => return Outcome::Close,
        }
        // Whole frames left behind a reply that has now gone out.
        if !self.pending.is_empty() && self.in_place.is_none() {
            let data = std::mem::take(&mut self.pending);
            let (used, flow) = self.consume(state, w, &data);
            let keep = self.keep_rest(budget, w, &data[used..]);
            if let Flow::Stop(o) = flow {
                return o;
            }
            if let Some(o) = keep {
                return o;
            }
        }
        // After a large frame, read the next header alone: the frame behind it is
        // probably large too and then goes straight into place, instead of its first
        // 64 KiB being copied out of the scratch buffer (12% more copying at 512 KiB
        // chunks). A small frame behind it costs one more read.
        for attempt in 0..2 {
            if self.in_place.is_some() {
                return self.read_in_place(state, w);
            }
            let header_only = attempt == 0 && self.expect_large && self.pending.is_empty();
            let limit = if header_only { HEADER_BYTES } else { SCRATCH_BYTES };
            let outcome = self.read_scratch(state, budget, w, limit);
            if outcome != Outcome::Read || !header_only {
                return outcome;
            }
        }
        Outcome::Read
    }

    /// Reads into the frame being received in place, as long as bytes are there
    /// (one frame per turn keeps turns fair; going back to epoll between pieces of
    /// it would cost two syscalls and a wake-up per socket buffer's worth); serves
    /// it when whole.
    fn read_in_place(&mut self, state: &State, w: &mut Worker) -> Outcome {
        let Some(p) = &mut self.in_place else { return Outcome::Read };
        while p.got < p.buf.len() {
            match read_some(&mut *self.stream, &mut p.buf[p.got..]) {
                Ok(0) => {
                    state.metrics.refused();
                    warn!(
                        "closing connection from {}: truncated frame ({} of {} bytes)",
                        self.peer,
                        p.got,
                        p.buf.len()
                    );
                    return Outcome::Close;
                }
                Ok(n) => p.got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Outcome::Read,
                Err(_) => return Outcome::Close,
            }
        }
        let p = self.in_place.take().expect("checked above");
        if !self.forward_room(state, &p.header) {
            self.in_place = Some(p);
            return Outcome::Park;
        }
        let body_len = p.header.body_len as usize;
        let flow = self.serve(state, w, p.header, &p.buf[..body_len], &p.buf[body_len..]);
        w.recycle(p.buf);
        self.expect_large = true;
        match flow {
            Flow::Stop(o) => o,
            Flow::Continue => Outcome::Read,
        }
    }

    /// Reads once, up to `limit` bytes, into the worker's scratch buffer; serves the
    /// whole frames there and keeps the rest.
    fn read_scratch(&mut self, state: &State, budget: &Budget, w: &mut Worker, limit: usize) -> Outcome {
        let mut scratch = std::mem::take(&mut w.scratch);
        let n = match read_some(&mut *self.stream, &mut scratch[..limit]) {
            Ok(0) => {
                w.scratch = scratch;
                return self.ended(state, "connection closed");
            }
            Ok(n) => n,
            Err(e) => {
                w.scratch = scratch;
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Outcome::Read;
                }
                return self.ended(state, &e.to_string());
            }
        };
        let outcome = if self.pending.is_empty() {
            let (used, flow) = self.consume(state, w, &scratch[..n]);
            let keep = self.keep_rest(budget, w, &scratch[used..n]);
            match flow {
                Flow::Stop(o) => o,
                Flow::Continue => keep.unwrap_or(Outcome::Read),
            }
        } else {
            let mut data = std::mem::take(&mut self.pending);
            data.extend_from_slice(&scratch[..n]);
            let (used, flow) = self.consume(state, w, &data);
            let keep = self.keep_rest(budget, w, &data[used..]);
            match flow {
                Flow::Stop(o) => o,
                Flow::Continue => keep.unwrap_or(Outcome::Read),
            }
        };
        w.scratch = scratch;
        outcome
    }

    /// Keeps bytes not served: a partial frame whose header says it is larger than
    /// the scratch buffer moves into a buffer of its size (if the budget has room,
    /// otherwise the connection parks); anything else waits in `pending`.
    fn keep_rest(&mut self, budget: &Budget, w: &mut Worker, rest: &[u8]) -> Option<Outcome> {
        if rest.is_empty() {
            return None;
        }
        if matches!(self.phase, Phase::Ready) && !self.owing() && rest.len() >= HEADER_BYTES {
            let hb: &[u8; HEADER_BYTES] = rest[..HEADER_BYTES].try_into().expect("length checked");
            if let Ok(h) = Header::decode(hb) {
                let len = h.body_len as usize + h.bulk_len as usize;
                if HEADER_BYTES + len > SCRATCH_BYTES && rest.len() < HEADER_BYTES + len {
                    if !budget.try_charge(len) {
                        self.pending = rest.to_vec();
                        return Some(Outcome::Park);
                    }
                    self.charged += len;
                    let mut buf = w.frame_buffer(len);
                    let have = rest.len() - HEADER_BYTES;
                    buf[..have].copy_from_slice(&rest[HEADER_BYTES..]);
                    self.in_place = Some(InPlace { header: h, buf, got: have });
                    return None;
                }
            }
        }
        self.pending = rest.to_vec();
        None
    }

    /// Serves every whole handshake message or frame at the start of `data`;
    /// returns how many bytes that used, and whether to stop here.
    fn consume(&mut self, state: &State, w: &mut Worker, data: &[u8]) -> (usize, Flow) {
        let mut at = 0;
        loop {
            let rest = &data[at..];
            // A reply waits for the peer: serve nothing more until it has gone.
            if self.owing() {
                return (at, Flow::Stop(Outcome::Write));
            }
            let (used, flow) = match std::mem::replace(&mut self.phase, Phase::Ready) {
                Phase::Hello => self.take_hello(state, rest),
                Phase::ClientMac(h) => self.take_client_mac(state, h, rest),
                Phase::Ready => self.take_frame(state, w, rest),
            };
            at += used;
            if let Some(flow) = flow {
                return (at, flow);
            }
        }
    }

    /// The client's hello at the start of `rest`, answered. Returns the bytes used,
    /// and a flow if `consume` stops here (`Continue`: the hello is not whole yet).
    fn take_hello(&mut self, state: &State, rest: &[u8]) -> (usize, Option<Flow>) {
        let Some(hello) = rest.get(..HELLO_BYTES) else {
            self.phase = Phase::Hello;
            return (0, Some(Flow::Continue));
        };
        let hello: &[u8; HELLO_BYTES] = hello.try_into().expect("length checked");
        let (reply, next) = handshake::daemon_hello(hello, &state.secret, self.busy);
        let sent = reply.is_empty() || self.send_parts(&[&reply]).is_ok();
        match next {
            Ok(h) if sent => {
                self.phase = Phase::ClientMac(h);
                (HELLO_BYTES, None)
            }
            Ok(_) => (HELLO_BYTES, Some(Flow::Stop(Outcome::Close))),
            Err(e) => {
                self.refuse(state, &e.to_string());
                (HELLO_BYTES, Some(Flow::Stop(Outcome::Close)))
            }
        }
    }

    /// The client's MAC at the start of `rest`, which ends handshake `h`: the
    /// connection is established, or refused. Returns as `take_hello`.
    fn take_client_mac(&mut self, state: &State, h: DaemonHandshake, rest: &[u8]) -> (usize, Option<Flow>) {
        let Some(mac) = rest.get(..CLIENT_MAC_BYTES) else {
            self.phase = Phase::ClientMac(h);
            return (0, Some(Flow::Continue));
        };
        let mac: &[u8; CLIENT_MAC_BYTES] = mac.try_into().expect("length checked");
        let (status, r) = h.finish(&state.secret, mac);
        let sent = self.send_parts(&[&[status]]).is_ok();
        if let Err(e) = r {
            self.refuse(state, &e.to_string());
            return (CLIENT_MAC_BYTES, Some(Flow::Stop(Outcome::Close)));
        }
        if !sent {
            return (CLIENT_MAC_BYTES, Some(Flow::Stop(Outcome::Close)));
        }
        self.phase = Phase::Ready;
        self.deadline = None;
        // Streams without a descriptor block: no bound once established.
        let _ = self.stream.set_timeout(None);
        (CLIENT_MAC_BYTES, None)
    }

    /// The frame at the start of `rest`, served if whole (and, for a forward, if
    /// the proxy has room). Returns as `take_hello`.
    fn take_frame(&mut self, state: &State, w: &mut Worker, rest: &[u8]) -> (usize, Option<Flow>) {
        let Some(hb) = rest.get(..HEADER_BYTES) else { return (0, Some(Flow::Continue)) };
        let h = match Header::decode(hb.try_into().expect("length checked")) {
            Ok(h) => h,
            Err(e) => {
                state.metrics.refused();
                warn!("closing connection from {}: {e}", self.peer);
                return (0, Some(Flow::Stop(Outcome::Close)));
            }
        };
        let body_end = HEADER_BYTES + h.body_len as usize;
        let end = body_end + h.bulk_len as usize;
        if rest.len() < end {
            return (0, Some(Flow::Continue));
        }
        if !self.forward_room(state, &h) {
            return (0, Some(Flow::Stop(Outcome::Park)));
        }
        self.expect_large = false;
        match self.serve(state, w, h, &rest[HEADER_BYTES..body_end], &rest[body_end..end]) {
            Flow::Stop(o) => (end, Some(Flow::Stop(o))),
            Flow::Continue => (end, None),
        }
    }

    /// The peer is gone (or the reaper cut it off). Before the handshake finished,
    /// that is a refused connection, counted and logged as one.
    fn ended(&self, state: &State, why: &str) -> Outcome {
        if !matches!(self.phase, Phase::Ready) {
            let expired = self.deadline.is_some_and(|d| d <= Instant::now());
            let why = if expired { "handshake not finished in time" } else { why };
            self.refuse(state, &format!("handshake i/o error: {why}"));
        } else if !self.pending.is_empty() {
            state.metrics.refused();
            let what = if self.pending.len() < HEADER_BYTES { "truncated frame header" } else { "truncated frame" };
            warn!("closing connection from {}: {what} ({why})", self.peer);
        }
        Outcome::Close
    }

    fn refuse(&self, state: &State, why: &str) {
        state.metrics.refused();
        match state.refusals_logged.admit() {
            Some(0) => warn!("refused connection from {}: {why}", self.peer),
            Some(dropped) => {
                warn!("refused connection from {}: {why} ({dropped} earlier refusals not logged)", self.peer)
            }
            None => {}
        }
    }

    /// Decodes, dispatches and answers one frame.
    fn serve(&mut self, state: &State, w: &mut Worker, h: Header, body: &[u8], bulk_in: &[u8]) -> Flow {
        if let Some(flow) = self.serve_proxied(state, w, h, body, bulk_in) {
            return flow;
        }
        let (op, id) = (h.op, h.request_id);
        let req = match decode_request(op, body) {
            Ok(r) => r,
            Err(e) => {
                // The header was sound, so answer with an error before closing.
                state.metrics.refused();
                warn!(op, id, "closing connection from {}: {e}", self.peer);
                let errno = if matches!(e, FrameError::UnknownOp(_)) { libc::ENOSYS } else { libc::EPROTO };
                let reply: Reply = Err(errno);
                let _ = self.send_frame(w, op, id, &encode(&reply), Bulk::None);
                return Flow::Stop(Outcome::Close);
            }
        };
        // Disabled (free) unless GUST_LOG asks for debug: then every event of this
        // request carries its op and id.
        let _req = debug_span!("req", op = req.name(), id).entered();
        match req {
            Request::Hello { client } => {
                // Never answered (it costs the client no round trip), nor counted:
                // it is part of setting a connection up, like the handshake.
                self.client = state.grants.hello(client);
                return Flow::Continue;
            }
            Request::Callback { client, claims, shared } => {
                state.metrics.count_op(op);
                return self.become_callback(state, op, id, client, claims, shared);
            }
            _ => state.metrics.count_op(op),
        }
        if let Some(h) = &self.client {
            state.grants.seen(h);
        }
        // Routed by another layout than the one served, or during a move
        // (moves/): answered at once, and sent again by the client.
        let _admitted = match state.moves.admit(h.generation, &req) {
            Ok(a) => a,
            Err(e) => {
                let reply: Reply = Err(e);
                return match self.send_frame(w, op, id, &encode(&reply), Bulk::None) {
                    Ok(()) => Flow::Continue,
                    Err(_) => Flow::Stop(Outcome::Close),
                };
            }
        };
        w.bulk_out.clear();
        let (reply, out, flags) = handle_for(state, self.client.as_deref(), req, bulk_in, &mut w.bulk_out);
        let op = op | flags;
        let bulk = match (carries_bulk(&reply), &out) {
            (false, _) => Bulk::None,
            (true, BulkOut::Buffer) => Bulk::Worker,
            (true, pinned) => Bulk::Pinned(pinned.parts(&[])),
        };
        let r = self.send_frame(w, op, id, &encode(&reply), bulk);
        drop(out);
        // An idle worker should not pin a large transfer's buffer.
        if w.bulk_out.capacity() > BUFFER_KEEP_BYTES_MAX {
            w.bulk_out = Vec::new();
        }
        match r {
            Ok(()) => Flow::Continue,
            Err(e) => {
                warn!("closing connection from {}: cannot send reply: {e}", self.peer);
                Flow::Stop(Outcome::Close)
            }
        }
    }

    fn send_frame(&mut self, w: &mut Worker, op: u16, id: u64, body: &[u8], bulk_from: Bulk<'_>) -> io::Result<()> {
        let worker_bulk = std::mem::take(&mut w.bulk_out);
        let bulk: Vec<&[u8]> = match &bulk_from {
            Bulk::None => Vec::new(),
            Bulk::Worker => vec![&worker_bulk[..]],
            Bulk::Pinned(parts) => parts.clone(),
        };
        let bulk_len: usize = bulk.iter().map(|b| b.len()).sum();
        let hb = Header::reply(op, id, body.len(), bulk_len).encode();
        if HEADER_BYTES + body.len() + bulk_len <= COALESCE_BYTES_MAX {
            // One write, one segment, one wake-up at the client.
            let mut reply = std::mem::take(&mut w.reply);
            reply.clear();
            reply.extend_from_slice(&hb);
            reply.extend_from_slice(body);
            bulk.iter().for_each(|b| reply.extend_from_slice(b));
            let r = self.send_parts(&[&reply]);
            w.reply = reply;
            w.bulk_out = worker_bulk;
            r
        } else {
            let head = HEADER_BYTES + body.len();
            let total = head + bulk_len;
            let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + bulk.len());
            parts.push(&hb);
            parts.push(body);
            parts.extend_from_slice(&bulk);
            if matches!(bulk_from, Bulk::Pinned(_)) && bulk_len >= super::splice::BY_REFERENCE_BYTES_MIN {
                match self.send_by_reference(&parts) {
                    Ok(false) => {}
                    r => {
                        w.bulk_out = worker_bulk;
                        return r.map(|_| ());
                    }
                }
            }
            let written = match self.write_now(&parts) {
                Ok(n) => n,
                Err(e) => {
                    w.bulk_out = worker_bulk;
                    return Err(e);
                }
            };
            if written < total {
                // A reply of megabytes to a client that reads slower than we write:
                // keep the small head by copy and the bulk by taking the worker's
                // buffer over, not copying it.
                if written < head {
                    self.keep_unsent(&[&hb, body], written);
                }
                let bulk_sent = written.saturating_sub(head);
                if matches!(bulk_from, Bulk::Worker) {
                    self.out_bulk_sent = bulk_sent;
                    self.out_bulk = worker_bulk;
                    return Ok(());
                }
                // Pinned in RocksDB only for this request: what the socket did not
                // take is copied (only then).
                self.out_bulk_sent = 0;
                self.out_bulk.clear();
                extend_past(&mut self.out_bulk, &bulk, bulk_sent);
            }
            w.bulk_out = worker_bulk;
            Ok(())
        }
    }

    /// A reply is waiting for the peer to take it.
    fn owing(&self) -> bool {
        self.out_sent < self.out.len()
            || self.out_bulk_sent < self.out_bulk.len()
            || self.pipe.as_ref().is_some_and(|p| p.queued() > 0)
    }

    /// Sends a reply whose bulk is values RocksDB holds pinned through the
    /// connection's pipe, those in table files by reference (splice.rs); false
    /// (nothing sent) where that gains nothing or cannot be done: no value in a
    /// table file, no descriptor, no pipe. What neither the pipe nor the socket
    /// takes now is copied into `out_bulk`, behind the pipe, before the values'
    /// pins go.
    fn send_by_reference(&mut self, parts: &[&[u8]]) -> io::Result<bool> {
        let Some(fd) = self.stream.raw_fd() else { return Ok(false) };
        if !super::splice::available() {
            return Ok(false);
        }
        // parts: header, body, then the values.
        let by_reference: Vec<bool> =
            parts.iter().enumerate().map(|(i, p)| i >= 2 && super::splice::file_backed(p)).collect();
        if !by_reference.contains(&true) {
            return Ok(false);
        }
        if self.pipe.is_none() {
            match super::splice::SendPipe::new() {
                Ok(p) => self.pipe = Some(p),
                Err(_) => return Ok(false),
            }
        }
        let pipe = self.pipe.as_mut().expect("made above");
        debug_assert_eq!(pipe.queued(), 0, "a reply is sent only when nothing is owed");
        for (i, part) in parts.iter().enumerate() {
            let mut at = 0;
            while at < part.len() {
                at += pipe.push(&part[at..], by_reference[i])?;
                if at < part.len() {
                    // The pipe is full: make room, unless the socket is full too.
                    let queued = pipe.queued();
                    pipe.drain(fd)?;
                    if pipe.queued() == queued {
                        self.out_bulk.clear();
                        self.out_bulk_sent = 0;
                        extend_past(&mut self.out_bulk, &parts[i..], at);
                        return Ok(true);
                    }
                }
            }
        }
        pipe.drain(fd)?;
        Ok(true)
    }

    /// Writes `parts` as far as the socket takes them now; returns the bytes written.
    fn write_now(&mut self, parts: &[&[u8]]) -> io::Result<usize> {
        let mut slices: Vec<IoSlice<'_>> = parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)).collect();
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        let mut written = 0;
        while !rest.is_empty() {
            match self.stream.write_vectored(rest) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed")),
                Ok(n) => {
                    written += n;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// Keeps what of `parts` lies past the first `written` bytes, in `out`.
    fn keep_unsent(&mut self, parts: &[&[u8]], written: usize) {
        extend_past(&mut self.out, parts, written);
    }

    /// Writes `parts` as far as the socket takes them now; keeps the rest in `out`.
    fn send_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let written = self.write_now(parts)?;
        self.keep_unsent(parts, written);
        Ok(())
    }

    /// Sends what `out` and `out_bulk` hold; true once all of it went. The bulk
    /// buffer then goes back to the worker for its next reply.
    fn flush_out(&mut self, w: &mut Worker) -> io::Result<bool> {
        if let (Some(pipe), Some(fd)) = (self.pipe.as_mut(), self.stream.raw_fd()) {
            pipe.drain(fd)?;
            if pipe.queued() > 0 {
                return Ok(false);
            }
        }
        while self.owing() {
            let a = &self.out[self.out_sent..];
            let b = &self.out_bulk[self.out_bulk_sent..];
            let r = if a.is_empty() {
                self.stream.write(b)
            } else {
                self.stream.write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
            };
            match r {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed")),
                Ok(n) => {
                    let from_out = n.min(a.len());
                    self.out_sent += from_out;
                    self.out_bulk_sent += n - from_out;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        if self.out.capacity() > 0 {
            self.out = Vec::new();
            self.out_sent = 0;
        }
        if self.out_bulk.capacity() > 0 {
            let mut b = std::mem::take(&mut self.out_bulk);
            self.out_bulk_sent = 0;
            if b.capacity() <= BUFFER_KEEP_BYTES_MAX && b.capacity() > w.bulk_out.capacity() {
                b.clear();
                w.bulk_out = b;
            }
        }
        Ok(true)
    }
}

/// Appends to `dst` what of `parts`, one after the other, lies past their first
/// `skip` bytes: the part of a reply the socket did not take.
fn extend_past(dst: &mut Vec<u8>, parts: &[&[u8]], mut skip: usize) {
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        dst.extend_from_slice(&p[skip..]);
        skip = 0;
    }
}

fn read_some(s: &mut dyn Stream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.detached {
            return;
        }
        self.stream.shutdown();
    }
}
