//! Serving a multiplexed connection (a proxy's link from another daemon): its
//! requests go to a pool of threads of their own and are answered in whatever
//! order they finish, each by its request id, so a slow request (an fsync, a large
//! read) does not hold up the others behind it on the connection.
//!
//! The session that reads the connection stays with the event loop; it hands each
//! whole frame here (copied: the event loop's buffers are reused at once) and
//! never writes on the connection again. Replies are written whole under the
//! connection's writer lock, waiting for room at most the stall timeout.
//!
//! Bounds: at most `QUEUE_MAX` requests wait, and their bytes at most
//! `QUEUED_BYTES_MAX`; past that the event-loop worker handing one over waits for
//! room (at most the stall timeout, then the connection is closed), which is the
//! back-pressure on a peer sending faster than this daemon serves. A request that
//! does not decode gets EPROTO (unknown op: ENOSYS) under its id; the connection,
//! which other clients' requests share, stays open.

use crate::dispatch::{carries_bulk, handle, BulkOut};
use crate::state::State;
use gust_proto::frame::Header;
use gust_proto::{decode_request, encode, FrameError, Reply, Response};
use gust_transport::Stream;
use std::io::{self, IoSlice};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::warn;

const QUEUE_MAX: usize = 256;
const QUEUED_BYTES_MAX: usize = 128 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sending side of a multiplexed connection, shared by the pool's threads.
pub(crate) struct MuxWriter {
    stream: Mutex<Box<dyn Stream>>,
    stall_timeout: Duration,
}

impl MuxWriter {
    /// `stream` is a second handle on the session's (non-blocking) connection.
    pub fn new(stream: Box<dyn Stream>, stall_timeout: Duration) -> MuxWriter {
        MuxWriter { stream: Mutex::new(stream), stall_timeout }
    }

    /// Writes one reply frame whole; a peer that does not take it within the stall
    /// timeout loses the connection.
    pub fn send(&self, op: u16, id: u64, body: &[u8], bulk: &[&[u8]]) -> io::Result<()> {
        let bulk_len = bulk.iter().map(|b| b.len()).sum();
        let hb = Header::reply(op, id, body.len(), bulk_len).encode();
        let mut s = lock(&self.stream);
        let deadline = Instant::now() + self.stall_timeout;
        let mut slices: Vec<IoSlice<'_>> = [&hb[..], body]
            .into_iter()
            .chain(bulk.iter().copied())
            .filter(|p| !p.is_empty())
            .map(IoSlice::new)
            .collect();
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        while !rest.is_empty() {
            match s.write_vectored(rest) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed")),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !wait_writable(&**s, left) {
                        s.shutdown();
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "peer does not take its replies"));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn wait_writable(s: &dyn Stream, t: Duration) -> bool {
    let Some(fd) = s.raw_fd() else { return false };
    let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    let ms = t.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: one pollfd we own.
    unsafe { libc::poll(&mut p, 1, ms.max(1)) == 1 }
}

struct Job {
    writer: Arc<MuxWriter>,
    op: u16,
    id: u64,
    /// The layout the client routed by (moves/ checks it).
    generation: u32,
    body: Vec<u8>,
    bulk: Vec<u8>,
}

/// Bytes of the requests waiting, bounded.
struct Queued {
    bytes: Mutex<usize>,
    freed: Condvar,
}

pub(crate) struct Pool {
    jobs: SyncSender<Job>,
    queued: Arc<Queued>,
}

impl Pool {
    pub fn start(state: &Arc<State>, threads: usize) -> io::Result<Pool> {
        let (tx, rx) = sync_channel::<Job>(QUEUE_MAX);
        let rx = Arc::new(Mutex::new(rx));
        let queued = Arc::new(Queued { bytes: Mutex::new(0), freed: Condvar::new() });
        for i in 0..threads.max(1) {
            let (state, rx, queued) = (state.clone(), rx.clone(), queued.clone());
            std::thread::Builder::new().name(format!("mux-{i}")).spawn(move || serve(&state, &rx, &queued))?;
        }
        Ok(Pool { jobs: tx, queued })
    }

    /// Queues one request of a multiplexed connection; false if there was no room
    /// within `wait` (the caller closes the connection).
    pub fn submit(&self, writer: &Arc<MuxWriter>, h: Header, body: &[u8], bulk: &[u8], wait: Duration) -> bool {
        let len = body.len() + bulk.len();
        {
            let deadline = Instant::now() + wait;
            let mut q = lock(&self.queued.bytes);
            // One request larger than the bound still goes, alone.
            while *q > 0 && *q + len > QUEUED_BYTES_MAX {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return false;
                }
                q = self.queued.freed.wait_timeout(q, left).unwrap_or_else(|e| e.into_inner()).0;
            }
            *q += len;
        }
        let job = Job {
            writer: writer.clone(),
            op: h.op,
            id: h.request_id,
            generation: h.generation,
            body: body.to_vec(),
            bulk: bulk.to_vec(),
        };
        // The byte bound above keeps this wait short; the channel bounds the count.
        if self.jobs.send(job).is_err() {
            self.queued.release(len);
            return false;
        }
        true
    }

    /// Answers a multiplex request (already served) on the connection's writer.
    pub fn answer_ok(writer: &MuxWriter, op: u16, id: u64) -> io::Result<()> {
        let reply: Reply = Ok(Response::Ok);
        writer.send(op, id, &encode(&reply), &[])
    }
}

impl Queued {
    fn release(&self, len: usize) {
        let mut q = lock(&self.bytes);
        *q = q.saturating_sub(len);
        self.freed.notify_all();
    }
}

fn serve(state: &State, rx: &Mutex<Receiver<Job>>, queued: &Queued) {
    let mut bulk_out = Vec::new();
    loop {
        let job = match lock(rx).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        queued.release(job.body.len() + job.bulk.len());
        let (reply, out): (Reply, BulkOut) = match decode_request(job.op, &job.body) {
            Ok(req) => {
                state.metrics.count_op(job.op);
                bulk_out.clear();
                // As a direct request: routed by the layout served (moves/).
                match state.moves.admit(job.generation, &req) {
                    Ok(_admitted) => handle(state, req, &job.bulk, &mut bulk_out),
                    Err(e) => (Err(e), BulkOut::Buffer),
                }
            }
            Err(e) => {
                // The frame itself was sound: answer this request, keep the connection.
                state.metrics.refused();
                warn!(op = job.op, id = job.id, "multiplexed request refused: {e}");
                (Err(if matches!(e, FrameError::UnknownOp(_)) { libc::ENOSYS } else { libc::EPROTO }), BulkOut::Buffer)
            }
        };
        let bulk = if carries_bulk(&reply) { out.parts(&bulk_out) } else { Vec::new() };
        if let Err(e) = job.writer.send(job.op, job.id, &encode(&reply), &bulk) {
            warn!("multiplexed connection: cannot send reply: {e}");
        }
        drop(out);
        if bulk_out.capacity() > 4 << 20 {
            bulk_out = Vec::new();
        }
    }
}
