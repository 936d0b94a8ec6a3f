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
use std::io::{self, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Microseconds a caller polls for a reply before sleeping (GUST_SPIN_US, default 0).
/// Sleeping costs a wake-up, which on a VM is often a cross-CPU interrupt; polling
/// avoids it when the reply comes quickly and a core is free. With more runnable
/// processes than cores, polling steals the daemon's CPU, hence off by default.
fn spin_us() -> u64 {
    static SPIN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| std::env::var("GUST_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(0))
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

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream {
    fn raw_fd(&self) -> i32 {
        use std::os::unix::io::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }
}

pub(crate) struct Conn {
    reader: BufReader<Stream>,
    writer: Stream,
}

pub(crate) struct DaemonLink {
    pub entry: DaemonEntry,
    use_uds: bool,
    idle: Mutex<(u64, Vec<Conn>)>, // (fork generation that opened them, connections)
}

pub(crate) struct Transport {
    pub links: Vec<DaemonLink>,
    secret: Vec<u8>,
    timeout: Duration,
    next_id: AtomicU64,
    /// RPCs sent, for tests and `gust bench` reports.
    pub rpcs_sent: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// One request of a batch: daemon index, request, bulk parts sent after the body.
pub(crate) struct Call<'a> {
    pub daemon: u32,
    pub req: Request,
    pub bulk: Vec<&'a [u8]>,
}

/// A reply and its bulk bytes.
pub(crate) type Answer = Result<(Response, Vec<u8>), Errno>;

impl Transport {
    pub fn new(entries: Vec<DaemonEntry>, secret: Vec<u8>, timeout: Duration, force_tcp: bool) -> Self {
        register_fork_handler();
        let me = gust_hosts::this_host();
        let links = entries
            .into_iter()
            .map(|e| {
                let use_uds = !force_tcp && e.host == me && e.uds_path.as_ref().is_some_and(|p| p.exists());
                DaemonLink { entry: e, use_uds, idle: Mutex::new((FORK_GENERATION.load(Ordering::SeqCst), Vec::new())) }
            })
            .collect();
        Transport {
            links,
            secret,
            timeout,
            next_id: AtomicU64::new(1),
            rpcs_sent: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap().clone()
    }

    fn fail(&self, daemon: u32, what: String) -> Errno {
        let e = &self.links[daemon as usize].entry;
        let msg = format!("daemon {} ({}): {what}", e.id, e.tcp_addr);
        *self.last_error.lock().unwrap() = Some(msg);
        Errno(libc::EIO)
    }

    fn connect(&self, daemon: u32) -> Result<Conn, Errno> {
        let link = &self.links[daemon as usize];
        let stream = if link.use_uds {
            let p = link.entry.uds_path.as_ref().expect("use_uds implies a socket path");
            UnixStream::connect(p).map(Stream::Unix).map_err(|e| self.fail(daemon, format!("connect {}: {e}", p.display())))?
        } else {
            let addr = link
                .entry
                .tcp_addr
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| self.fail(daemon, "cannot resolve address".into()))?;
            let s = TcpStream::connect_timeout(&addr, self.timeout.min(Duration::from_secs(5)))
                .map_err(|e| self.fail(daemon, format!("connect: {e}")))?;
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        };
        stream.set_timeouts(Some(self.timeout)).map_err(|e| self.fail(daemon, format!("{e}")))?;
        let mut stream = stream;
        handshake::client(&mut stream, &self.secret).map_err(|e| self.fail(daemon, e.to_string()))?;
        let writer = stream.try_clone().map_err(|e| self.fail(daemon, format!("{e}")))?;
        Ok(Conn { reader: BufReader::with_capacity(64 * 1024, stream), writer })
    }

    fn take(&self, daemon: u32) -> Result<Conn, Errno> {
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
                return Ok(c);
            }
        }
        self.connect(daemon)
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
        let h = Header { version: PROTOCOL_VERSION, op: req.op(), request_id: id, body_len: body.len() as u32, bulk_len: bulk_len as u32 };
        let mut first = Vec::with_capacity(HEADER_BYTES + body.len() + if bulk_len <= 64 * 1024 { bulk_len } else { 0 });
        first.extend_from_slice(&h.encode());
        first.extend_from_slice(&body);
        if bulk_len <= 64 * 1024 {
            for b in bulk {
                first.extend_from_slice(b);
            }
            c.writer.write_all(&first)
        } else {
            c.writer.write_all(&first)?;
            for b in bulk {
                c.writer.write_all(b)?;
            }
            Ok(())
        }
    }

    fn recv(&self, c: &mut Conn, id: u64, op: u16) -> Result<(Reply, Vec<u8>), String> {
        let mut hb = [0u8; HEADER_BYTES];
        let spin = spin_us();
        if spin > 0 && c.reader.buffer().is_empty() {
            let fd = c.reader.get_ref().raw_fd();
            let t0 = std::time::Instant::now();
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            while t0.elapsed().as_micros() < spin as u128 {
                // SAFETY: one valid pollfd, zero timeout.
                if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        c.reader.read_exact(&mut hb).map_err(|e| format!("no reply: {e}"))?;
        let h = Header::decode(&hb).map_err(|e: FrameError| e.to_string())?;
        if h.request_id != id || h.op != op | OP_RESPONSE_BIT {
            return Err(format!("reply for request {} op {:#x}, expected {id} op {op:#x}", h.request_id, h.op));
        }
        let mut body = vec![0u8; h.body_len as usize];
        c.reader.read_exact(&mut body).map_err(|e| format!("truncated reply: {e}"))?;
        let mut bulk = vec![0u8; h.bulk_len as usize];
        c.reader.read_exact(&mut bulk).map_err(|e| format!("truncated reply: {e}"))?;
        let reply: Reply = decode(&body).map_err(|e| e.to_string())?;
        Ok((reply, bulk))
    }

    /// Sends every call, then collects every answer, in order.
    pub fn batch(&self, calls: Vec<Call<'_>>) -> Vec<Answer> {
        let mut pending: Vec<Option<(Conn, u64, u16)>> = Vec::with_capacity(calls.len());
        let mut answers: Vec<Option<Answer>> = Vec::with_capacity(calls.len());
        for call in &calls {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.rpcs_sent.fetch_add(1, Ordering::Relaxed);
            match self.take(call.daemon) {
                Ok(mut c) => match self.send(&mut c, id, &call.req, &call.bulk) {
                    Ok(()) => {
                        pending.push(Some((c, id, call.req.op())));
                        answers.push(None);
                    }
                    Err(e) => {
                        pending.push(None);
                        answers.push(Some(Err(self.fail(call.daemon, format!("send: {e}")))));
                    }
                },
                Err(e) => {
                    pending.push(None);
                    answers.push(Some(Err(e)));
                }
            }
        }
        for (i, p) in pending.into_iter().enumerate() {
            let Some((mut c, id, op)) = p else { continue };
            let daemon = calls[i].daemon;
            answers[i] = Some(match self.recv(&mut c, id, op) {
                Ok((reply, bulk)) => {
                    self.give_back(daemon, c);
                    reply.map(|r| (r, bulk)).map_err(Errno)
                }
                Err(e) => Err(self.fail(daemon, e)),
            });
        }
        answers.into_iter().map(|a| a.expect("every call answered")).collect()
    }

    pub fn call(&self, daemon: u32, req: Request) -> Result<Response, Errno> {
        let mut v = self.batch(vec![Call { daemon, req, bulk: Vec::new() }]);
        v.pop().expect("one answer").map(|(r, _)| r)
    }
}
