//! Connections to daemons and pipelined calls.
//!
//! Each daemon has a small pool of authenticated connections. A call takes an idle
//! connection (or opens one), so threads of one process never queue behind each
//! other on a single socket. A batch of requests to several daemons is pipelined:
//! all requests are sent first, then all replies read, so the daemons work in
//! parallel without a thread per request.

use crate::Errno;
use gust_hosts::DaemonEntry;
use gust_proto::frame::{Header, HEADER_BYTES, OP_RESPONSE_BIT};
use gust_proto::{decode, encode, handshake, FrameError, Reply, Request, Response, PROTOCOL_VERSION};
use gust_transport::{Endpoint, Stream};
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;
use tracing::debug;

/// Microseconds a caller polls for a reply before sleeping (GUST_SPIN_US, default 0).
/// Sleeping costs a wake-up, which on a VM is often a cross-CPU interrupt; polling
/// avoids it when the reply comes quickly and a core is free. With more runnable
/// processes than cores, polling steals the daemon's CPU, hence off by default.
fn spin_us() -> u64 {
    static SPIN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| std::env::var("GUST_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Whether daemons on this node are reached over shared-memory rings
/// (`GUST_TRANSPORT=shm`) rather than their Unix socket. Off by default: on the
/// 2-core test machine the socket path measured faster in the metadata benchmark
/// (docs/PERFORMANCE.md, "Node-local transport").
fn use_shm() -> bool {
    static SHM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SHM.get_or_init(|| std::env::var("GUST_TRANSPORT").is_ok_and(|v| v == "shm"))
}

/// Idle connections kept per daemon; more may be open while in use.
const IDLE_CONNECTIONS_MAX: usize = 16;

/// Bumped in every child after fork (pthread_atfork), so pools can tell that their
/// connections belong to the parent without a getpid syscall per RPC.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

fn register_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only touches an atomic.
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    });
}

pub(crate) struct Conn {
    reader: BufReader<Box<dyn Stream>>,
    writer: Box<dyn Stream>,
}

pub(crate) struct DaemonLink {
    /// Where the daemon is; replaced when a restarted daemon re-registered
    /// elsewhere in the hosts file.
    entry: RwLock<DaemonEntry>,
    idle: Mutex<(u64, Vec<Conn>)>, // (fork generation that opened them, connections)
}

pub(crate) struct Transport {
    links: Vec<DaemonLink>,
    /// Re-read when a daemon cannot be reached: it may have restarted on a new address.
    hosts_path: Option<PathBuf>,
    force_tcp: bool,
    this_host: String,
    secret: Vec<u8>,
    timeout: Duration,
    next_id: AtomicU64,
    /// RPCs sent, for tests and `gust bench` reports.
    pub rpcs_sent: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Copies of every record and chunk (replica.rs); 1: calls go where addressed.
    pub(crate) replicas: u32,
    /// Per daemon: until when (ms since `epoch`) it counts as down and calls skip
    /// it (replicated instances only; replica.rs).
    pub(crate) down_until_ms: Vec<AtomicU64>,
    /// Per daemon: until when (ms since `epoch`) this client counts it as fenced,
    /// unless it sees it serve before (fence.rs).
    pub(crate) fenced_until_ms: Vec<AtomicU64>,
    pub(crate) epoch: std::time::Instant,
}

/// One request of a batch: daemon index, request, bulk parts sent after the body.
pub(crate) struct Call<'a> {
    pub daemon: u32,
    pub req: Request,
    pub bulk: Vec<&'a [u8]>,
}

/// Where the bulk bytes of a Read reply go: for each requested span, its position in
/// the caller's buffer. The reply's bytes are read straight from the socket into place
/// (no intermediate buffer), and the part of a span the daemon does not hold is zeroed.
pub(crate) type Dest = Vec<(usize, u32)>;

/// A reply and its bulk bytes.
pub(crate) type Answer = Result<(Response, Vec<u8>), Errno>;

impl Transport {
    pub fn new(
        entries: Vec<DaemonEntry>,
        hosts_path: Option<PathBuf>,
        secret: Vec<u8>,
        timeout: Duration,
        force_tcp: bool,
        replicas: u32,
    ) -> Self {
        register_fork_handler();
        let down_until_ms = entries.iter().map(|_| AtomicU64::new(0)).collect();
        let fenced_until_ms = entries.iter().map(|_| AtomicU64::new(0)).collect();
        let links = entries
            .into_iter()
            .map(|e| DaemonLink {
                entry: RwLock::new(e),
                idle: Mutex::new((FORK_GENERATION.load(Ordering::SeqCst), Vec::new())),
            })
            .collect();
        Transport {
            links,
            hosts_path,
            force_tcp,
            this_host: gust_hosts::this_host(),
            secret,
            timeout,
            next_id: AtomicU64::new(1),
            rpcs_sent: AtomicU64::new(0),
            last_error: Mutex::new(None),
            replicas,
            down_until_ms,
            fenced_until_ms,
            epoch: std::time::Instant::now(),
        }
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap().clone()
    }

    pub(crate) fn last_error_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_error.lock().unwrap()
    }

    pub(crate) fn links_len(&self) -> u32 {
        self.links.len() as u32
    }

    fn fail(&self, daemon: u32, what: String) -> Errno {
        let e = self.links[daemon as usize].entry.read().unwrap();
        let msg = format!("daemon {} ({}): {what}", e.id, e.tcp_addr());
        debug!(daemon, "{msg}");
        *self.last_error.lock().unwrap() = Some(msg);
        self.mark_down(daemon);
        Errno(libc::EIO)
    }

    /// Connects; if that fails and the hosts file now lists this daemon elsewhere (it
    /// restarted, e.g. on another port), follows it there once.
    fn connect(&self, daemon: u32) -> Result<Conn, Errno> {
        match self.connect_once(daemon) {
            Ok(c) => Ok(c),
            Err(e) => {
                if self.refresh_entry(daemon) {
                    self.connect_once(daemon)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Re-reads this daemon's line of the hosts file; true if it changed.
    fn refresh_entry(&self, daemon: u32) -> bool {
        let Some(path) = &self.hosts_path else { return false };
        let Ok(h) = gust_hosts::HostsFile::load(path) else { return false };
        let Some(new) = h.daemons.into_iter().find(|d| d.id == daemon) else { return false };
        let link = &self.links[daemon as usize];
        let mut e = link.entry.write().unwrap();
        if *e == new {
            return false;
        }
        *e = new;
        drop(e);
        // Pooled connections lead to the old address.
        link.idle.lock().unwrap().1.clear();
        true
    }

    fn connect_once(&self, daemon: u32) -> Result<Conn, Errno> {
        let entry = self.links[daemon as usize].entry.read().unwrap().clone();
        // The daemon's node-local endpoints when it is on this host (and their
        // sockets are there: a daemon on another node may share the host name in
        // tests): shared memory first, then the Unix socket, then the network.
        let on_this_node = !self.force_tcp && entry.host == self.this_host;
        let here = |e: &&Endpoint| on_this_node && matches!(e, Endpoint::Unix(p) | Endpoint::Shm(p) if p.exists());
        let shm = entry.shared_memory().filter(|e| use_shm() && here(e));
        let fallback = entry.node_local().filter(here).or_else(|| entry.network());
        let connect_timeout = self.timeout.min(Duration::from_secs(5));
        let shm_stream = shm.and_then(|ep| match gust_transport::connect(ep, connect_timeout) {
            Ok(s) => Some(s),
            Err(e) => {
                // Busy (the daemon's bound), or gone: the socket path always works.
                debug!(daemon, "connect {ep}: {e}; using the next endpoint");
                None
            }
        });
        let mut stream = match shm_stream {
            Some(s) => s,
            None => {
                let ep = fallback.ok_or_else(|| self.fail(daemon, "no endpoint this client can use".into()))?;
                gust_transport::connect(ep, connect_timeout)
                    .map_err(|e| self.fail(daemon, format!("connect {ep}: {e}")))?
            }
        };
        stream.set_timeout(Some(self.timeout)).map_err(|e| self.fail(daemon, format!("{e}")))?;
        handshake::client(&mut stream, &self.secret).map_err(|e| self.fail(daemon, e.to_string()))?;
        let writer = stream.try_clone().map_err(|e| self.fail(daemon, format!("{e}")))?;
        Ok(Conn { reader: BufReader::with_capacity(64 * 1024, stream), writer })
    }

    /// An idle pooled connection (second value true) or a new one.
    fn take(&self, daemon: u32) -> Result<(Conn, bool), Errno> {
        {
            let mut idle = self.links[daemon as usize].idle.lock().unwrap();
            let generation = FORK_GENERATION.load(Ordering::Relaxed);
            if idle.0 != generation {
                // After fork the parent's sockets are shared: never use them here.
                // Forget them without closing: closing would not disturb the parent,
                // but the descriptors may already be reused by the child.
                for c in idle.1.drain(..) {
                    std::mem::forget(c);
                }
                idle.0 = generation;
            }
            if let Some(c) = idle.1.pop() {
                return Ok((c, true));
            }
        }
        self.connect(daemon).map(|c| (c, false))
    }

    fn give_back(&self, daemon: u32, c: Conn) {
        let mut idle = self.links[daemon as usize].idle.lock().unwrap();
        if idle.0 == FORK_GENERATION.load(Ordering::Relaxed) && idle.1.len() < IDLE_CONNECTIONS_MAX {
            idle.1.push(c);
        }
    }

    fn send(&self, c: &mut Conn, id: u64, req: &Request, bulk: &[&[u8]]) -> io::Result<()> {
        let body = encode(req);
        let bulk_len: usize = bulk.iter().map(|b| b.len()).sum();
        let h = Header {
            version: PROTOCOL_VERSION,
            op: req.op(),
            request_id: id,
            body_len: body.len() as u32,
            bulk_len: bulk_len as u32,
        };
        let hb = h.encode();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + bulk.len());
        parts.push(&hb);
        parts.push(&body);
        parts.extend_from_slice(bulk);
        gust_transport::write_parts(&mut c.writer, &parts)
    }

    /// Reads one reply, its bulk into a Vec or, for a Read reply with a `dest`,
    /// straight into `buf`. The error says whether no byte of it arrived.
    fn recv(
        &self,
        c: &mut Conn,
        id: u64,
        op: u16,
        dest: Option<&Dest>,
        buf: &mut [u8],
    ) -> Result<(Reply, Vec<u8>), (bool, String)> {
        let mut hb = [0u8; HEADER_BYTES];
        let spin = spin_us();
        if spin > 0 && c.reader.buffer().is_empty() {
            let t0 = std::time::Instant::now();
            while t0.elapsed().as_micros() < spin as u128 && !c.reader.get_ref().readable_now() {
                std::hint::spin_loop();
            }
        }
        // The first byte separately: "nothing came" (the daemon died before the
        // reply) is what makes a retry safe for idempotent requests.
        let first = c.reader.fill_buf().map_err(|e| (true, format!("no reply: {e}")))?;
        if first.is_empty() {
            return Err((true, "no reply: connection closed by the daemon".into()));
        }
        c.reader.read_exact(&mut hb).map_err(|e| (false, format!("truncated reply: {e}")))?;
        let h = Header::decode(&hb).map_err(|e: FrameError| (false, e.to_string()))?;
        if h.request_id != id || h.op != op | OP_RESPONSE_BIT {
            return Err((
                false,
                format!("reply for request {} op {:#x}, expected {id} op {op:#x}", h.request_id, h.op),
            ));
        }
        let mut body = vec![0u8; h.body_len as usize];
        c.reader.read_exact(&mut body).map_err(|e| (false, format!("truncated reply: {e}")))?;
        let reply: Reply = decode(&body).map_err(|e| (false, e.to_string()))?;
        if let (Some(dest), Ok(Response::Data { span_lens })) = (dest, &reply) {
            // Check the layout before writing anything into the caller's buffer.
            let fits = span_lens.len() == dest.len()
                && span_lens.iter().zip(dest).all(|(got, (at, len))| got <= len && at + *len as usize <= buf.len())
                && span_lens.iter().map(|g| *g as u64).sum::<u64>() == h.bulk_len as u64;
            if !fits {
                return Err((false, "read reply does not match the requested spans".into()));
            }
            for (got, (at, len)) in span_lens.iter().zip(dest) {
                let (at, got, len) = (*at, *got as usize, *len as usize);
                c.reader.read_exact(&mut buf[at..at + got]).map_err(|e| (false, format!("truncated reply: {e}")))?;
                buf[at + got..at + len].fill(0);
            }
            return Ok((reply, Vec::new()));
        }
        // Not zeroed first: a zeroing pass over a small file's data took a tenth of
        // a data-loader worker's CPU (read_to_end fills uninitialized capacity).
        let want = h.bulk_len as usize;
        let mut bulk = Vec::with_capacity(want);
        let got = (&mut c.reader).take(want as u64).read_to_end(&mut bulk);
        match got {
            Ok(n) if n == want => Ok((reply, bulk)),
            Ok(n) => Err((false, format!("truncated reply: {n} of {want} bulk bytes"))),
            Err(e) => Err((false, format!("truncated reply: {e}"))),
        }
    }

    /// One call on a fresh connection (the retry of a call whose pooled connection
    /// turned out to be dead).
    fn call_fresh(&self, call: &Call<'_>, dest: Option<&Dest>, buf: &mut [u8]) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        debug!(daemon = call.daemon, op = call.req.name(), id, "sending again on a new connection");
        let mut c = self.connect(call.daemon)?;
        self.send(&mut c, id, &call.req, &call.bulk).map_err(|e| self.fail(call.daemon, format!("send: {e}")))?;
        match self.recv(&mut c, id, call.req.op(), dest, buf) {
            Ok((reply, bulk)) => {
                self.give_back(call.daemon, c);
                reply.map(|r| (r, bulk)).map_err(Errno)
            }
            Err(e) => Err(self.fail(call.daemon, e.1)),
        }
    }

    /// Sends every call to the daemon it names, then collects every answer, in
    /// order (replica.rs's `batch_into` is the way in: it adds the copies).
    ///
    /// A pooled connection may have died with its daemon (which may be back by now).
    /// Such a call is sent again, once, on a new connection when that cannot apply it
    /// twice: when sending failed (the daemon never got a whole frame), or when no
    /// byte of the reply came and the request is idempotent.
    pub fn batch(&self, calls: Vec<Call<'_>>) -> Vec<Answer> {
        let dests = calls.iter().map(|_| None).collect();
        self.batch_into(calls, dests, &mut [])
    }

    /// `batch` as addressed, with Read replies delivered into `buf` at the positions
    /// `dests` give.
    pub(crate) fn send_batch(&self, calls: Vec<Call<'_>>, dests: Vec<Option<Dest>>, buf: &mut [u8]) -> Vec<Answer> {
        debug_assert_eq!(calls.len(), dests.len());
        enum Sent {
            /// Waiting for the reply on this connection (id, op, pooled?).
            Pending(Conn, u64, u16, bool),
            /// Sending on a pooled connection failed: send again on a fresh one.
            Resend,
            Done(Answer),
        }
        let mut sent: Vec<Sent> = Vec::with_capacity(calls.len());
        for call in &calls {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.rpcs_sent.fetch_add(1, Ordering::Relaxed);
            sent.push(match self.take(call.daemon) {
                Ok((mut c, reused)) => match self.send(&mut c, id, &call.req, &call.bulk) {
                    Ok(()) => {
                        // Events, not spans: the calls of a batch interleave. With the
                        // default filter (info) a disabled event costs an atomic load.
                        debug!(daemon = call.daemon, op = call.req.name(), id, "request sent");
                        Sent::Pending(c, id, call.req.op(), reused)
                    }
                    Err(_) if reused => Sent::Resend,
                    Err(e) => Sent::Done(Err(self.fail(call.daemon, format!("send: {e}")))),
                },
                Err(e) => Sent::Done(Err(e)),
            });
        }
        let mut answers = Vec::with_capacity(calls.len());
        for (i, st) in sent.into_iter().enumerate() {
            let call = &calls[i];
            let dest = dests[i].as_ref();
            answers.push(match st {
                Sent::Done(a) => a,
                Sent::Resend => self.call_fresh(call, dest, buf),
                Sent::Pending(mut c, id, op, reused) => match self.recv(&mut c, id, op, dest, buf) {
                    Ok((reply, bulk)) => {
                        debug!(
                            daemon = call.daemon,
                            op = call.req.name(),
                            id,
                            errno = reply.as_ref().err().copied().unwrap_or(0),
                            "reply"
                        );
                        self.give_back(call.daemon, c);
                        reply.map(|r| (r, bulk)).map_err(Errno)
                    }
                    Err((true, _)) if reused && call.req.is_idempotent() => {
                        drop(c);
                        self.call_fresh(call, dest, buf)
                    }
                    Err((_, e)) => Err(self.fail(call.daemon, e)),
                },
            });
        }
        answers
    }
}
