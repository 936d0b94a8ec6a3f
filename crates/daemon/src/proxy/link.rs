//! One multiplexed connection from this daemon to a remote one: many requests in
//! flight, each under a request id of this connection, answered in any order. A
//! reader thread hands each reply to the caller waiting for its id; when the
//! connection ends, every caller still waiting learns it at once.

use gust_proto::frame::{Header, OP_RESPONSE_BIT};
use gust_proto::{decode, encode, handshake, read_frame, FrameError, Reply, Request, Response};
use gust_transport::{Endpoint, Stream};
use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Bound on opening a connection (connect and handshake), as for clients.
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_secs(5);

/// A reply's body and bulk, or why none will come.
type Delivery = Result<(Vec<u8>, Vec<u8>), String>;

pub(crate) enum CallError {
    /// The connection ended before the reply (the remote died or restarted).
    Lost(String),
    /// No reply within the caller's bound (the remote hangs or is cut off).
    TimedOut(Duration),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Lost(e) => write!(f, "connection lost: {e}"),
            CallError::TimedOut(t) => write!(f, "no reply within {} ms", t.as_millis()),
        }
    }
}

struct Waiting {
    /// Callers waiting, by request id; None once the connection ended.
    callers: Option<HashMap<u64, SyncSender<Delivery>>>,
}

pub(crate) struct Link {
    writer: Mutex<Box<dyn Stream>>,
    waiting: Arc<Mutex<Waiting>>,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Link {
    /// Connects to `ep`, authenticates with the instance secret, asks for
    /// multiplexed service and starts the reader.
    pub fn open(ep: &Endpoint, secret: &[u8], timeout: Duration) -> Result<Link, String> {
        let bound = timeout.min(CONNECT_TIMEOUT_MAX);
        let mut s = gust_transport::connect(ep, bound).map_err(|e| format!("connect {ep}: {e}"))?;
        s.set_timeout(Some(bound)).map_err(|e| e.to_string())?;
        handshake::client(&mut s, secret).map_err(|e| format!("{ep}: {e}"))?;
        gust_proto::write_frame(&mut s, Request::Multiplex.op(), 0, &encode(&Request::Multiplex), &[])
            .map_err(|e| format!("{ep}: {e}"))?;
        let mut bulk = Vec::new();
        let f = read_frame(&mut s, &mut bulk).map_err(|e| format!("{ep}: {e}"))?;
        let ok = f.header.op == Request::Multiplex.op() | OP_RESPONSE_BIT
            && matches!(decode::<Reply>(&f.body), Ok(Ok(Response::Ok)));
        if !ok {
            return Err(format!("{ep}: refused multiplexed service"));
        }
        // Writes are bounded by the caller's timeout; the reader waits between
        // replies for as long as it takes (a timeout there only means "nothing yet").
        s.set_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        let reader = s.try_clone().map_err(|e| e.to_string())?;
        let waiting = Arc::new(Mutex::new(Waiting { callers: Some(HashMap::new()) }));
        let dead = Arc::new(AtomicBool::new(false));
        let (w, d) = (waiting.clone(), dead.clone());
        std::thread::Builder::new()
            .name("proxy-link".into())
            .spawn(move || read_replies(reader, &w, &d))
            .map_err(|e| format!("cannot start a reader: {e}"))?;
        Ok(Link { writer: Mutex::new(s), waiting, next_id: AtomicU64::new(1), dead })
    }

    pub fn alive(&self) -> bool {
        !self.dead.load(Ordering::Relaxed)
    }

    /// Ends the connection: the reader sees the end and fails every waiting caller.
    fn close(&self) {
        self.dead.store(true, Ordering::Relaxed);
        lock(&self.writer).shutdown();
    }

    /// Sends one request and waits up to `timeout` for its reply.
    pub fn call(&self, op: u16, body: &[u8], bulk: &[u8], timeout: Duration) -> Result<(Vec<u8>, Vec<u8>), CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        match &mut lock(&self.waiting).callers {
            Some(c) => c.insert(id, tx),
            None => return Err(CallError::Lost("connection closed".into())),
        };
        let hb = Header::new(op, id, body.len(), bulk.len()).encode();
        let sent = gust_transport::write_parts(&mut *lock(&self.writer), &[&hb, body, bulk]);
        if let Err(e) = sent {
            // Part of a frame may have gone: the connection cannot carry more.
            self.close();
            return Err(CallError::Lost(format!("send: {e}")));
        }
        match rx.recv_timeout(timeout) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(CallError::Lost(e)),
            Err(RecvTimeoutError::Disconnected) => Err(CallError::Lost("connection closed".into())),
            Err(RecvTimeoutError::Timeout) => {
                // A remote that keeps one request past the client's bound is hung or
                // cut off: a new connection finds out which.
                if let Some(c) = &mut lock(&self.waiting).callers {
                    c.remove(&id);
                }
                self.close();
                Err(CallError::TimedOut(timeout))
            }
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

/// Hands each reply to its caller until the connection ends, then fails the rest.
fn read_replies(s: Box<dyn Stream>, waiting: &Mutex<Waiting>, dead: &AtomicBool) {
    let mut r = BufReader::with_capacity(64 << 10, s);
    let why = loop {
        // Between replies a read timeout only means that nothing is due yet.
        match r.fill_buf() {
            Ok([]) => break "connection closed by the remote daemon".to_string(),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if dead.load(Ordering::Relaxed) {
                    break "connection closed".into();
                }
                continue;
            }
            Err(e) => break e.to_string(),
        }
        let mut bulk = Vec::new();
        let f = match read_frame(&mut r, &mut bulk) {
            Ok(f) => f,
            Err(FrameError::Closed) => break "connection closed by the remote daemon".into(),
            Err(e) => break e.to_string(),
        };
        if f.header.op & OP_RESPONSE_BIT == 0 {
            break format!("a request (op {}) where replies come", f.header.op);
        }
        let caller = lock(waiting).callers.as_mut().and_then(|c| c.remove(&f.header.request_id));
        // No caller: it gave up waiting (timed out); the reply is dropped.
        if let Some(tx) = caller {
            let _ = tx.send(Ok((f.body, bulk)));
        }
    };
    dead.store(true, Ordering::Relaxed);
    let callers = lock(waiting).callers.take().unwrap_or_default();
    for (_, tx) in callers {
        let _ = tx.send(Err(why.clone()));
    }
    r.get_ref().shutdown();
}
