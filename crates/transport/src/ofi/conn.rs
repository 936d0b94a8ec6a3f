//! One connection over a fabric endpoint: what it received (in order), what it
//! sent and the provider has not completed, and how a thread waits on it.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Pieces a connection keeps that arrived ahead of one still missing; a piece
/// numbered further ahead is dropped (a peer's bug: a writer never has more than
/// CONN_IN_FLIGHT_MAX bytes out).
const EARLY_PIECES_MAX: u32 = 1 << 16;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a connection has received and not yet read.
#[derive(Default)]
pub(super) struct Inbox {
    pieces: VecDeque<Vec<u8>>,
    /// The number of the next piece to read, and pieces that arrived before it.
    next: u32,
    early: BTreeMap<u32, Vec<u8>>,
    /// The peer's CLOSE came, numbered: the stream ends once the pieces before it
    /// are in (a CLOSE overtakes data as a short piece does).
    close_at: Option<u32>,
    /// Bytes of the front piece already read.
    offset: usize,
    /// The peer closed (or this side did).
    pub(super) closed: bool,
}

impl Inbox {
    /// Whether a read would return at once (bytes, or the end of the stream).
    pub(super) fn readable(&self) -> bool {
        !self.pieces.is_empty() || self.closed
    }

    /// Moves the pieces that are next in order to the readable ones; ends the
    /// stream where the peer's CLOSE says.
    fn drain_early(&mut self) {
        loop {
            let n = self.next;
            let Some(p) = self.early.remove(&n) else { break };
            self.pieces.push_back(p);
            self.next = n.wrapping_add(1);
        }
        if self.close_at == Some(self.next) {
            self.closed = true;
            self.early.clear();
        }
    }

    /// Copies what is readable into `buf`; its byte count. Pieces read to their
    /// end go to `done` (their buffers are used again).
    pub(super) fn take(&mut self, buf: &mut [u8], done: &mut Vec<Vec<u8>>) -> usize {
        let mut n = 0;
        while n < buf.len() {
            let Some(front) = self.pieces.front() else { break };
            let take = (front.len() - self.offset).min(buf.len() - n);
            buf[n..n + take].copy_from_slice(&front[self.offset..self.offset + take]);
            n += take;
            self.offset += take;
            if self.offset == front.len() {
                done.extend(self.pieces.pop_front());
                self.offset = 0;
            }
        }
        n
    }
}

/// A connection's sends that the provider has not completed yet.
#[derive(Default)]
pub(super) struct Sending {
    pub(super) bytes: usize,
    /// The first send that failed: every later write reports it.
    pub(super) error: Option<i32>,
}

/// One connection: the peer's address handle and connection id, and its inbox.
pub struct Conn {
    pub(super) id: u64,
    pub(super) peer: u64,
    /// The peer's id for this connection; 0 until a CONNECT is accepted.
    pub(super) peer_conn: AtomicU64,
    pub(super) inbox: Mutex<Inbox>,
    /// Anything that may end a wait on this connection: a piece, a close, an
    /// ACCEPT, a send completed, or the turn to poll the queue (progress.rs).
    pub(super) changed: Condvar,
    pub(super) sending: Mutex<Sending>,
    /// The number of the next piece this side sends.
    pub(super) next_seq: Mutex<u32>,
    /// A thread waits on this connection for its turn to poll (progress.rs).
    pub(super) wants_turn: AtomicBool,
    /// When the peer was last heard from (ms on `clock`; keepalive.rs).
    heard_ms: AtomicU64,
}

/// Milliseconds since this process first asked.
fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl Conn {
    pub(super) fn new(id: u64, peer: u64, peer_conn: u64) -> Conn {
        Conn {
            id,
            peer,
            peer_conn: AtomicU64::new(peer_conn),
            inbox: Mutex::default(),
            changed: Condvar::new(),
            sending: Mutex::default(),
            next_seq: Mutex::new(0),
            wants_turn: AtomicBool::new(false),
            heard_ms: AtomicU64::new(clock()),
        }
    }

    /// A message from the peer arrived.
    pub(super) fn heard(&self) {
        self.heard_ms.store(clock(), Ordering::Relaxed);
    }

    /// Whether the peer was heard from within `d`.
    pub(super) fn heard_within(&self, d: std::time::Duration) -> bool {
        clock().saturating_sub(self.heard_ms.load(Ordering::Relaxed)) < d.as_millis() as u64
    }

    /// Marks this connection as waiting for its turn (true if it was not yet).
    pub(super) fn want_turn(&self) -> bool {
        !self.wants_turn.swap(true, Ordering::AcqRel)
    }

    /// Whether bytes (or the end of the stream) wait to be read.
    pub fn readable_now(&self) -> bool {
        lock(&self.inbox).readable()
    }

    /// Wakes whoever waits on this connection (after a change made under another
    /// lock than the inbox's: taking the inbox's lock first means a waiter is
    /// either before its check or already waiting, never in between).
    pub(super) fn notify(&self) {
        drop(lock(&self.inbox));
        self.changed.notify_all();
    }

    pub(super) fn deliver(&self, seq: u32, piece: Vec<u8>) {
        let mut b = lock(&self.inbox);
        if b.closed || seq.wrapping_sub(b.next) > EARLY_PIECES_MAX {
            // Closed, or a number already used or absurdly far ahead: a peer's bug.
            return;
        }
        b.early.insert(seq, piece);
        b.drain_early();
        drop(b);
        self.changed.notify_all();
    }

    /// The peer closed after sending pieces up to `seq` (not included).
    pub(super) fn close_after(&self, seq: u32) {
        let mut b = lock(&self.inbox);
        b.close_at = Some(seq);
        b.drain_early();
        drop(b);
        self.changed.notify_all();
    }

    pub(super) fn close(&self) {
        lock(&self.inbox).closed = true;
        self.changed.notify_all();
    }

    pub(super) fn closed(&self) -> bool {
        lock(&self.inbox).closed
    }

    /// Whether this side's writes may go on: an error of an earlier send, or
    /// room under `max` bytes in flight.
    pub(super) fn send_state(&self, max: usize) -> Option<io::Result<()>> {
        let s = lock(&self.sending);
        if let Some(err) = s.error {
            return Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("fabric send failed: {}", super::ffi::RawEndpoint::describe(err)),
            )));
        }
        (s.bytes <= max).then_some(Ok(()))
    }

    /// A send of `len` bytes completed (`err` 0, or a libfabric error: the peer
    /// cannot be reached, and reads end too).
    pub(super) fn sent(&self, len: usize, err: i32) {
        let mut s = lock(&self.sending);
        s.bytes = s.bytes.saturating_sub(len);
        if err != 0 && s.error.is_none() {
            s.error = Some(err);
        }
        drop(s);
        if err != 0 {
            lock(&self.inbox).closed = true;
        }
        self.notify();
    }
}

/// The error a wait past its deadline returns.
pub(super) fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "fabric connection timed out")
}

/// Waits on `cv` until notified or `until` (TimedOut once `deadline` passed).
pub(super) fn wait_until<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>, until: Option<Instant>) -> MutexGuard<'a, T> {
    match until {
        None => cv.wait(g).unwrap_or_else(|e| e.into_inner()),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            cv.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0
        }
    }
}

/// Whether a wait's `deadline` has passed.
pub(super) fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}
