//! Connections to daemons and pipelined calls.
//!
//! Each daemon has a small pool of authenticated connections. A call takes an idle
//! connection (or opens one), so threads of one process never queue behind each
//! other on a single socket. A batch of requests to several daemons is pipelined:
//! all requests are sent first, then all replies read, so the daemons work in
//! parallel without a thread per request.

use crate::Errno;
use gust_hosts::DaemonEntry;
use gust_proto::frame::{Header, HEADER_BYTES, OP_RESPONSE_BIT, REPLY_FLAGS};
use gust_proto::{decode, encode, handshake, FrameError, Reply, Request, Response};
use gust_transport::{Endpoint, Stream};
use std::io::{self, BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock, TryLockError};
use std::time::Duration;
use tracing::{debug, warn};

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

/// A connection's read buffer. A reply's header and body (and a small reply's bulk)
/// come in one read through it; bulk bytes past it are read straight into their
/// destination, so only the part of a large reply that the first read took is
/// copied twice. 64 KiB made the first 64 KiB of every inline file of a data
/// loader (~100 KiB) a second copy; 16 KiB holds any record reply and a 4 KiB file.
const READ_BUFFER_BYTES: usize = 16 << 10;
/// Whether requests for daemons on other nodes go through this node's daemon (the
/// node proxy, `GUST_PROXY=1`; docs/DESIGN.md, "The node proxy"). `GUST_PROXY=0`
/// turns it off where the hosts file turns it on.
fn proxy_wanted(hosts_says: bool) -> bool {
    match std::env::var("GUST_PROXY").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => hosts_says,
    }
}

/// The envelope's op code (`Request::Forward`).
const OP_FORWARD: u16 = 49;

/// Idle connections kept per daemon; more may be open while in use.
const IDLE_CONNECTIONS_MAX: usize = 16;
/// Answer of a daemon recalling a claim: send again (rpc.rs `send_batch_placed`).
const RETRY: i32 = gust_proto::errno::RETRY;
/// First wait before a call answered `RETRY` is sent again: about a recall's round
/// trip and the holder's batch of creates.
const RETRY_WAIT_FIRST: Duration = Duration::from_micros(100);
/// Longest wait between two sends of a call answered `RETRY`.
const RETRY_WAIT_MAX: Duration = Duration::from_millis(10);
/// Answer of a daemon taking part in a move to a new layout: send again once it
/// is over (layout.rs).
const MOVING: i32 = gust_proto::errno::MOVING;
/// Longest wait between two sends of a call answered `MOVING`.
const MOVING_WAIT_MAX: Duration = Duration::from_millis(50);

/// How long a call answered `MOVING` is sent again before it fails (EIO):
/// `$GUST_MOVE_WAIT_S` seconds, 600 by default. A move of many gigabytes takes
/// minutes; clients wait it out rather than fail.
pub(crate) fn move_wait() -> Duration {
    static WAIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *WAIT.get_or_init(|| {
        let s = std::env::var("GUST_MOVE_WAIT_S").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(600);
        Duration::from_secs(s)
    })
}

/// Whether `req` may change what a daemon holds: not a read of records or
/// chunks, nor a question about the daemon itself.
fn changes(req: &Request) -> bool {
    use gust_proto::{TraceClass, WhileRecovering};
    !matches!(req.trace_class(), TraceClass::MdRead | TraceClass::ChunkRead)
        && req.while_recovering() == WhileRecovering::Refuses
}

/// Whether an answer means a daemon served the request (layout.rs counts those).
fn served<T>(a: &Result<T, Errno>) -> bool {
    !matches!(a, Err(Errno(RETRY | MOVING | gust_proto::errno::MOVED)))
}

/// Bumped in every child after fork (pthread_atfork), so pools can tell that their
/// connections belong to the parent without a getpid syscall per RPC.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
    crate::grants::close_parents_callbacks();
}

/// How many forks separate this process from the one that built the client (0 in
/// that one): state a child inherits can tell it is not its own.
pub(crate) fn fork_generation() -> u64 {
    register_fork_handler();
    FORK_GENERATION.load(Ordering::SeqCst)
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
    /// The last connection opened to it went over the network (TCP), not through
    /// this node's memory (shared memory, the Unix socket): what reads from it
    /// bring back is checked where it arrives (integrity.rs).
    networked: AtomicBool,
}

/// Tries at the pool's lock before a call does without the pool (`DaemonLink::pool`).
const POOL_LOCK_TRIES: u32 = 200;

impl DaemonLink {
    /// The pool of idle connections, locked; None if the lock stays taken. A child
    /// forked while another thread of its parent held it inherits it taken for good
    /// (that thread does not exist in the child), and its first call would wait
    /// forever: after a short spin the caller connects anew, or drops the connection
    /// it would have given back. Another thread of this process holds the lock only
    /// for a push or a pop.
    fn pool(&self) -> Option<MutexGuard<'_, (u64, Vec<Conn>)>> {
        for i in 0..POOL_LOCK_TRIES {
            match self.idle.try_lock() {
                Ok(g) => return Some(g),
                Err(TryLockError::Poisoned(e)) => return Some(e.into_inner()),
                Err(TryLockError::WouldBlock) if i < 16 => std::hint::spin_loop(),
                Err(TryLockError::WouldBlock) => std::thread::yield_now(),
            }
        }
        None
    }
}

pub(crate) struct Transport {
    links: Vec<DaemonLink>,
    /// Re-read when a daemon cannot be reached: it may have restarted on a new address.
    hosts_path: Option<PathBuf>,
    force_tcp: bool,
    /// Daemons of other nodes are tried at their fabric endpoint first.
    fabric: bool,
    this_host: String,
    secret: Vec<u8>,
    timeout: Duration,
    next_id: AtomicU64,
    /// The layout generation requests are routed by (layout.rs).
    generation: std::sync::atomic::AtomicU32,
    /// How many daemons hold data in it (the rest of `links` is room to grow).
    placed: std::sync::atomic::AtomicU32,
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
    /// The daemon of this node that forwards requests for the others (the node
    /// proxy), if in use.
    proxy: Option<u32>,
    /// What this process caches under the daemons' grants (grants.rs).
    pub(crate) grants: crate::grants::Cache,
    /// The instance's chunk size: a repair of corrupt blocks stays in its chunk
    /// (integrity.rs).
    pub(crate) chunk_bytes: u64,
    /// Chunks are erasure-coded (ec/): requests on chunks go to the addressed
    /// daemon alone, never to a replica group.
    pub(crate) erasure_coded: bool,
}

/// How a transport works (`Transport::new`).
pub(crate) struct TransportOptions {
    /// Bound on any one call.
    pub timeout: Duration,
    /// The network even to daemons on this host.
    pub force_tcp: bool,
    /// Fabric endpoints before TCP for daemons of other nodes.
    pub fabric: bool,
    /// Copies of every record and chunk (replica.rs).
    pub replicas: u32,
    /// Requests for other nodes' daemons go through this node's (when the hosts
    /// file says so; `GUST_PROXY` decides otherwise).
    pub proxy: bool,
    /// Take grants (grants.rs; off with copies and through the proxy anyway).
    pub grants: bool,
    /// The instance's chunk size (integrity.rs).
    pub chunk_bytes: u64,
    /// Short-circuit I/O (short_circuit.rs), with whether reads cut spans where
    /// a hole follows; None: off.
    pub short_circuit: Option<bool>,
    /// Chunks are erasure-coded (ec/).
    pub erasure_coded: bool,
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

/// Where a reply's bulk bytes go, chosen once its body arrived: called with the
/// reply and its bulk length, it returns a buffer of at least that length to read
/// them straight into (no intermediate vector, no copy), or None for a vector.
pub(crate) type Placer<'a, 'p> = &'a mut dyn FnMut(&Response, usize) -> Option<&'p mut [u8]>;

/// Where the bulk bytes of the replies of a batch go, decided once a reply's body
/// arrived. Told which call (by index) the reply answers, the reply, a reader of its
/// bulk and the bulk's length, a placer either reads exactly that many bytes itself
/// (into buffers of its own, however many: the files of a `read_many` reply) and
/// returns true, or reads nothing and returns false to have them read into a
/// vector. Its error (a reply that does not fit) fails the call.
pub(crate) type BatchPlacer<'a> = &'a mut dyn FnMut(usize, &Response, &mut dyn Read, usize) -> io::Result<bool>;

/// Reads the `want` bulk bytes of a reply into `to` (a `Placer`'s buffer).
pub(crate) fn read_placed(from: &mut dyn Read, to: &mut [u8], want: usize) -> io::Result<()> {
    if to.len() < want {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("reply of {want} bulk bytes for a buffer of {}", to.len()),
        ));
    }
    from.read_exact(&mut to[..want])
}

/// A reply and where its bulk bytes went (see `Placer`).
pub(crate) type PlacedAnswer = Result<(Response, Bulk), Errno>;

/// A batch's placer, lent for the reply to call `i`.
fn for_call<'s>(place: &'s mut Option<BatchPlacer<'_>>, i: usize) -> Option<(usize, BatchPlacer<'s>)> {
    match place {
        Some(p) => Some((i, &mut **p)),
        None => None,
    }
}

/// Where the bulk of a reply read with a placer went.
pub(crate) enum Bulk {
    /// Into the placer's buffer: this many bytes.
    Placed(usize),
    /// Into a vector (the placer declined).
    Vec(Vec<u8>),
}

impl Bulk {
    /// The bytes read into a vector; none if they went to the placer's buffer.
    fn into_vec(self) -> Vec<u8> {
        match self {
            Bulk::Vec(v) => v,
            Bulk::Placed(_) => Vec::new(),
        }
    }
}

impl Transport {
    pub fn new(entries: Vec<DaemonEntry>, hosts_path: Option<PathBuf>, secret: Vec<u8>, o: TransportOptions) -> Self {
        let TransportOptions {
            timeout,
            force_tcp,
            fabric,
            replicas,
            proxy,
            grants,
            chunk_bytes,
            short_circuit,
            erasure_coded,
        } = o;
        register_fork_handler();
        // This node's daemon: on this host, with its socket here (test hosts in one
        // machine share host names only when they share the file system too).
        let this_host = gust_hosts::this_host();
        let proxy = (proxy_wanted(proxy) && !force_tcp)
            .then(|| {
                entries.iter().position(|e| {
                    e.host == this_host && matches!(e.node_local(), Some(Endpoint::Unix(p)) if p.exists())
                })
            })
            .flatten()
            .map(|i| i as u32);
        let links_len = entries.len();
        let down_until_ms = entries.iter().map(|_| AtomicU64::new(0)).collect();
        let fenced_until_ms = entries.iter().map(|_| AtomicU64::new(0)).collect();
        let links = entries
            .into_iter()
            .map(|e| DaemonLink {
                entry: RwLock::new(e),
                idle: Mutex::new((FORK_GENERATION.load(Ordering::SeqCst), Vec::new())),
                networked: AtomicBool::new(true),
            })
            .collect();
        Transport {
            links,
            hosts_path,
            force_tcp,
            fabric,
            this_host,
            secret,
            timeout,
            next_id: AtomicU64::new(1),
            generation: std::sync::atomic::AtomicU32::new(1),
            placed: std::sync::atomic::AtomicU32::new(links_len as u32),
            rpcs_sent: AtomicU64::new(0),
            last_error: Mutex::new(None),
            replicas,
            down_until_ms,
            fenced_until_ms,
            epoch: std::time::Instant::now(),
            grants: {
                let on = grants && proxy.is_none() && replicas == 1;
                let short = short_circuit
                    .filter(|_| on && !force_tcp)
                    .map(|trim| crate::short_circuit::Table::new(links_len, chunk_bytes, trim));
                crate::grants::Cache::new(links_len, on, short)
            },
            proxy,
            chunk_bytes,
            erasure_coded,
        }
    }

    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn last_error_slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_error.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The layout generation stamped on requests (layout.rs).
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// Routes by layout `generation` of `placed` daemons from now on.
    pub(crate) fn set_layout(&self, generation: u32, placed: u32) {
        self.placed.store(placed, Ordering::Release);
        self.grants.set_placed(placed);
        self.generation.store(generation, Ordering::Release);
    }

    /// How many daemons hold data (replica groups are formed among them).
    pub(crate) fn placed(&self) -> u32 {
        self.placed.load(Ordering::Acquire)
    }

    pub(crate) fn links_len(&self) -> u32 {
        self.links.len() as u32
    }

    fn fail(&self, daemon: u32, what: String) -> Errno {
        if self.left_instance(daemon) {
            return Errno(gust_proto::errno::MOVED);
        }
        let e = self.links[daemon as usize].entry.read().unwrap_or_else(|e| e.into_inner());
        let msg = format!("daemon {} ({}): {what}", e.id, e.tcp_addr());
        debug!(daemon, "{msg}");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg);
        self.mark_down(daemon);
        Errno(libc::EIO)
    }

    /// Connects; if that fails and the hosts file now lists this daemon elsewhere (it
    /// restarted, e.g. on another port), follows it there once.
    fn connect(&self, daemon: u32) -> Result<Conn, Errno> {
        match self.connect_once(daemon) {
            Ok(c) => Ok(c),
            Err(e) => {
                // A daemon that left the instance (`gust shrink`) is gone: the
                // request belongs to another daemon of the new layout (layout.rs).
                if self.left_instance(daemon) {
                    return Err(Errno(gust_proto::errno::MOVED));
                }
                if self.refresh_entry(daemon) {
                    self.connect_once(daemon)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Whether `daemon` left the instance in a layout newer than the one requests
    /// carry (`gust shrink`): it answered nothing but `MOVING` since its move
    /// began (a frozen daemon serves nothing), so a request cut off by its exit
    /// was not served and belongs to another daemon (layout.rs).
    fn left_instance(&self, daemon: u32) -> bool {
        let Some(path) = &self.hosts_path else { return false };
        gust_hosts::HostsFile::load(path)
            .is_ok_and(|h| h.generation > self.generation() && !h.daemons.iter().any(|d| d.id == daemon))
    }

    /// Re-reads this daemon's line of the hosts file; true if it changed.
    pub(crate) fn refresh_entry(&self, daemon: u32) -> bool {
        let Some(path) = &self.hosts_path else { return false };
        let Ok(h) = gust_hosts::HostsFile::load(path) else { return false };
        let Some(new) = h.daemons.into_iter().find(|d| d.id == daemon) else { return false };
        let link = &self.links[daemon as usize];
        let mut e = link.entry.write().unwrap_or_else(|e| e.into_inner());
        if *e == new {
            return false;
        }
        *e = new;
        drop(e);
        // Pooled connections lead to the old address.
        if let Some(mut idle) = link.pool() {
            idle.1.clear();
        }
        true
    }

    fn connect_once(&self, daemon: u32) -> Result<Conn, Errno> {
        let entry = self.links[daemon as usize].entry.read().unwrap_or_else(|e| e.into_inner()).clone();
        // The daemon's node-local endpoints when it is on this host (and their
        // sockets are there: a daemon on another node may share the host name in
        // tests): shared memory first, then the Unix socket, then the network.
        let on_this_node = !self.force_tcp && entry.host == self.this_host;
        let here = |e: &&Endpoint| on_this_node && matches!(e, Endpoint::Unix(p) | Endpoint::Shm(p) if p.exists());
        let shm = entry.shared_memory().filter(|e| use_shm() && here(e));
        // A daemon of another node: its fabric endpoint (gust start --fabric) first.
        let fabric = entry.fabric().filter(|_| self.fabric && !on_this_node);
        let fallback = entry.node_local().filter(here).or_else(|| entry.network());
        let connect_timeout = self.timeout.min(Duration::from_secs(5));
        let first = shm.or(fabric).and_then(|ep| match gust_transport::connect(ep, connect_timeout) {
            Ok(s) => Some((s, ep)),
            Err(e) => {
                // Shared memory busy (the daemon's bound), a fabric this process
                // cannot open, or gone: the socket path always works.
                debug!(daemon, "connect {ep}: {e}; using the next endpoint");
                None
            }
        });
        let mut stream = match first {
            Some((s, ep)) => {
                let networked = matches!(ep, Endpoint::Ofi(_));
                self.links[daemon as usize].networked.store(networked, Ordering::Relaxed);
                s
            }
            None => {
                let ep = fallback.ok_or_else(|| self.fail(daemon, "no endpoint this client can use".into()))?;
                let s = gust_transport::connect(ep, connect_timeout)
                    .map_err(|e| self.fail(daemon, format!("connect {ep}: {e}")))?;
                let networked = !matches!(ep, Endpoint::Unix(_) | Endpoint::Shm(_));
                self.links[daemon as usize].networked.store(networked, Ordering::Relaxed);
                s
            }
        };
        stream.set_timeout(Some(self.timeout)).map_err(|e| self.fail(daemon, format!("{e}")))?;
        handshake::client(&mut stream, &self.secret).map_err(|e| self.fail(daemon, e.to_string()))?;
        if self.grants.on() {
            // Who sends this connection's requests (never answered; grants.rs).
            let hello = Request::Hello { client: self.grants.client_id() };
            gust_rpc::write_request(&mut stream, hello.op(), 0, 0, &encode(&hello), &[])
                .map_err(|e| self.fail(daemon, format!("send: {e}")))?;
        }
        let writer = stream.try_clone().map_err(|e| self.fail(daemon, format!("{e}")))?;
        Ok(Conn { reader: BufReader::with_capacity(READ_BUFFER_BYTES, stream), writer })
    }

    /// An idle pooled connection (second value true) or a new one.
    fn take(&self, daemon: u32) -> Result<(Conn, bool), Errno> {
        if let Some(mut idle) = self.links[daemon as usize].pool() {
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
        let Some(mut idle) = self.links[daemon as usize].pool() else { return };
        if idle.0 == FORK_GENERATION.load(Ordering::Relaxed) && idle.1.len() < IDLE_CONNECTIONS_MAX {
            idle.1.push(c);
        }
    }

    /// The daemon whose connection carries calls to `daemon`: this node's daemon
    /// when the node proxy is in use, else `daemon` itself. With copies, a node
    /// daemon found down is passed by (calls go straight to the daemons meanwhile).
    fn via(&self, daemon: u32) -> u32 {
        match self.proxy {
            Some(p) if !self.is_down(p) => p,
            _ => daemon,
        }
    }

    /// Whether a reply from `daemon` crossed a network on its way here: it came
    /// through the node proxy (from another node), or over TCP. Replies through
    /// this node's memory (shared memory, the Unix socket) left a daemon that had
    /// just verified them and met no wire: they are not checked again (the check
    /// cost 8% of the read bandwidth of local daemons on the test machine).
    fn came_over_network(&self, daemon: u32) -> bool {
        let via = self.via(daemon);
        via != daemon || self.links.get(via as usize).is_none_or(|l| l.networked.load(Ordering::Relaxed))
    }

    /// A connection for a call to `daemon` and the daemon it leads to: through the
    /// node proxy, or straight to `daemon` when the proxy cannot be reached and has
    /// just been marked down (replicated instances: replica.rs).
    fn take_for(&self, daemon: u32) -> Result<(Conn, bool, u32), Errno> {
        let via = self.via(daemon);
        match self.take(via) {
            Ok((c, reused)) => Ok((c, reused, via)),
            Err(_) if via != daemon && self.is_down(via) => self.take(daemon).map(|(c, r)| (c, r, daemon)),
            Err(e) => Err(e),
        }
    }

    /// Sends `req` for `daemon` on `c`, a connection to `via`: as it is, or in a
    /// forwarding envelope when `via` is the node proxy. Returns the op code the
    /// reply will carry.
    fn send_to(&self, c: &mut Conn, via: u32, daemon: u32, id: u64, req: &Request, bulk: &[&[u8]]) -> io::Result<u16> {
        if via == daemon {
            return self.send(c, id, req, bulk).map(|()| req.op());
        }
        // The proxy answers before this client's own read times out.
        let timeout_ms = (self.timeout.as_millis() * 9 / 10).min(u32::MAX as u128) as u32;
        let fwd = Request::Forward { target: daemon, op: req.op(), timeout_ms, body: encode(req) };
        self.send(c, id, &fwd, bulk).map(|()| OP_FORWARD)
    }

    /// A forwarded call's reply: EHOSTUNREACH is the proxy saying the daemon could
    /// not be reached, the same failure as a direct connection's.
    fn unwrap_forwarded(&self, daemon: u32, op: u16, reply: Reply) -> Result<Reply, Errno> {
        if op == OP_FORWARD && reply == Err(libc::EHOSTUNREACH) {
            return Err(self.fail(daemon, "not reachable from this node's daemon (node proxy)".into()));
        }
        Ok(reply)
    }

    fn send(&self, c: &mut Conn, id: u64, req: &Request, bulk: &[&[u8]]) -> io::Result<()> {
        gust_rpc::write_request(&mut c.writer, req.op(), id, self.generation(), &encode(req), bulk)
    }

    /// Reads one reply: its bulk, for a Read reply with a `dest`, straight into
    /// `buf`; for a reply that `place` takes, into its buffer (the placer is told
    /// the call's index in its batch); else into a vector. The error says whether
    /// the connection ended before any byte of it arrived (closed or reset; not a
    /// timeout).
    fn recv_placed(
        &self,
        c: &mut Conn,
        id: u64,
        op: u16,
        dest: Option<&Dest>,
        buf: &mut [u8],
        place: Option<(usize, BatchPlacer<'_>)>,
    ) -> Result<(Reply, Bulk, u16), (bool, String)> {
        wait_first_byte(c)?;
        let mut hb = [0u8; HEADER_BYTES];
        c.reader.read_exact(&mut hb).map_err(|e| (false, format!("truncated reply: {e}")))?;
        let h = Header::decode(&hb).map_err(|e: FrameError| (false, e.to_string()))?;
        let flags = h.op & REPLY_FLAGS;
        crate::grants::note_flags(flags);
        if h.request_id != id || h.op & !REPLY_FLAGS != op | OP_RESPONSE_BIT {
            return Err((
                false,
                format!("reply for request {} op {:#x}, expected {id} op {op:#x}", h.request_id, h.op),
            ));
        }
        let mut body = vec![0u8; h.body_len as usize];
        c.reader.read_exact(&mut body).map_err(|e| (false, format!("truncated reply: {e}")))?;
        let reply: Reply = decode(&body).map_err(|e| (false, e.to_string()))?;
        if let (Some(dest), Ok(Response::Data { span_lens, .. })) = (dest, &reply) {
            read_into_dest(c, span_lens, dest, h.bulk_len as u64, buf)?;
            return Ok((reply, Bulk::Vec(Vec::new()), flags));
        }
        let want = h.bulk_len as usize;
        if let (Some((index, place)), Ok(r)) = (place, &reply) {
            let mut from = (&mut c.reader).take(want as u64);
            match place(index, r, &mut from, want) {
                Ok(true) if from.limit() == 0 => return Ok((reply, Bulk::Placed(want), flags)),
                Ok(true) => return Err((false, format!("{} bulk bytes of the reply left unread", from.limit()))),
                Ok(false) => {}
                Err(e) => return Err((false, format!("reply: {e}"))),
            }
        }
        // Not zeroed first: a zeroing pass over a small file's data took a tenth of
        // a data-loader worker's CPU (read_to_end fills uninitialized capacity).
        let mut bulk = Vec::with_capacity(want);
        let got = (&mut c.reader).take(want as u64).read_to_end(&mut bulk);
        match got {
            Ok(n) if n == want => Ok((reply, Bulk::Vec(bulk), flags)),
            Ok(n) => Err((false, format!("truncated reply: {n} of {want} bulk bytes"))),
            Err(e) => Err((false, format!("truncated reply: {e}"))),
        }
    }

    /// A reply came to `req`, sent at `sent_ms` on a connection to `via`: this
    /// process's cached copies of what it changed go (again: a lookup may have
    /// overtaken the change), and a leased reply renews `via`'s grants (grants.rs).
    fn replied(&self, via: u32, req: &Request, sent_ms: u64, flags: u16) {
        self.grants.changing(req);
        self.grants.replied(via, sent_ms, flags);
    }

    /// Where a callback connection to `daemon` goes: its Unix socket on this node,
    /// else the network (never shared memory: the daemon's reader is a socket's).
    pub(crate) fn callback_endpoint(&self, daemon: u32) -> Option<Endpoint> {
        let entry = self.links.get(daemon as usize)?.entry.read().unwrap_or_else(|e| e.into_inner()).clone();
        let on_this_node = !self.force_tcp && entry.host == self.this_host;
        let local = entry.node_local().filter(|e| on_this_node && matches!(e, Endpoint::Unix(p) if p.exists()));
        local.or_else(|| entry.network()).cloned()
    }

    /// The short-circuit socket of `daemon` if it is on this node.
    pub(crate) fn short_circuit_socket(&self, daemon: u32) -> Option<PathBuf> {
        let entry = self.links.get(daemon as usize)?.entry.read().unwrap_or_else(|e| e.into_inner()).clone();
        if self.force_tcp || entry.host != self.this_host {
            return None;
        }
        match entry.node_local() {
            Some(Endpoint::Unix(p)) if p.exists() => Some(p.parent()?.join(gust_proto::short_circuit::SOCKET_NAME)),
            _ => None,
        }
    }

    pub(crate) fn secret(&self) -> &[u8] {
        &self.secret
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// One call on a fresh connection (the retry of a call whose pooled connection
    /// turned out to be dead).
    fn call_fresh(
        &self,
        call: &Call<'_>,
        dest: Option<&Dest>,
        buf: &mut [u8],
        place: Option<(usize, BatchPlacer<'_>)>,
    ) -> PlacedAnswer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        debug!(daemon = call.daemon, op = call.req.name(), id, "sending again on a new connection");
        let mut via = self.via(call.daemon);
        let mut c = match self.connect(via) {
            Err(_) if via != call.daemon && self.is_down(via) => {
                via = call.daemon;
                self.connect(via)?
            }
            r => r?,
        };
        self.grants.changing(&call.req);
        let sent_ms = self.grants.clock_ms();
        let op = self
            .send_to(&mut c, via, call.daemon, id, &call.req, &call.bulk)
            .map_err(|e| self.fail(call.daemon, format!("send: {e}")))?;
        match self.recv_placed(&mut c, id, op, dest, buf, place) {
            Ok((reply, bulk, flags)) => {
                self.replied(via, &call.req, sent_ms, flags);
                self.give_back(via, c);
                self.unwrap_forwarded(call.daemon, op, reply)?.map(|r| (r, bulk)).map_err(Errno)
            }
            Err(e) => Err(self.fail(call.daemon, e.1)),
        }
    }

    /// One call whose reply's bulk goes where `place` says (see `Placer`), as
    /// addressed (no replica routing: callers use it with one copy only). Sent again
    /// once on a fresh connection under the rules of `send_batch`.
    pub(crate) fn call_placed(&self, call: Call<'_>, place: Placer<'_, '_>) -> Result<(Response, Bulk), Errno> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.rpcs_sent.fetch_add(1, Ordering::Relaxed);
        let mut place = |_: usize, r: &Response, from: &mut dyn Read, n: usize| match place(r, n) {
            Some(to) => read_placed(from, to, n).map(|()| true),
            None => Ok(false),
        };
        let (mut c, reused) = self.take(call.daemon)?;
        self.grants.changing(&call.req);
        let sent_ms = self.grants.clock_ms();
        let mut sent = self.send(&mut c, id, &call.req, &call.bulk);
        if sent.is_err() && reused {
            c = self.connect(call.daemon)?;
            sent = self.send(&mut c, id, &call.req, &call.bulk);
        }
        sent.map_err(|e| self.fail(call.daemon, format!("send: {e}")))?;
        debug!(daemon = call.daemon, op = call.req.name(), id, "request sent");
        let r = match self.recv_placed(&mut c, id, call.req.op(), None, &mut [], Some((0, &mut place))) {
            Err((true, _)) if reused && call.req.is_idempotent() => {
                drop(c);
                c = self.connect(call.daemon)?;
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                self.send(&mut c, id, &call.req, &call.bulk)
                    .map_err(|e| self.fail(call.daemon, format!("send: {e}")))?;
                self.recv_placed(&mut c, id, call.req.op(), None, &mut [], Some((0, &mut place)))
            }
            r => r,
        };
        match r {
            Ok((reply, bulk, flags)) => {
                self.replied(call.daemon, &call.req, sent_ms, flags);
                self.give_back(call.daemon, c);
                let answer = reply.map(|r| (r, bulk)).map_err(Errno);
                if served(&answer) && changes(&call.req) {
                    crate::layout::note_served();
                }
                answer
            }
            Err((_, e)) => Err(self.fail(call.daemon, e)),
        }
    }

    /// Sends every call to the daemon it names, then collects every answer, in
    /// order, with Read replies delivered into `buf` at the positions `dests` give
    /// (replica.rs's `batch` and `batch_into` are the way in: they add the copies).
    ///
    /// A pooled connection may have died with its daemon (which may be back by now).
    /// Such a call is sent again, once, on a new connection when that cannot apply it
    /// twice: when sending failed (the daemon never got a whole frame), or when the
    /// connection ended before any byte of the reply came and the request is
    /// idempotent. A reply that did not come within the RPC timeout is a failure
    /// at once: sending again would wait as long again (replica.rs counts on one
    /// timeout per operation that meets a hung or cut-off daemon).
    pub(crate) fn send_batch(&self, calls: Vec<Call<'_>>, dests: Vec<Option<Dest>>, buf: &mut [u8]) -> Vec<Answer> {
        let answers = self.send_batch_placed(calls, dests, buf, None);
        answers.into_iter().map(|a| a.map(|(r, bulk)| (r, bulk.into_vec()))).collect()
    }

    /// `send_batch`, with the bulk of the replies that `place` takes read into its
    /// buffers (a batch of whole-file reads: read_many.rs).
    ///
    /// A call answered `RETRY` (it names a directory whose claim another process
    /// holds, and the daemon is recalling it: claims.rs) is sent again after a short
    /// wait, doubling up to `RETRY_WAIT_MAX`, until it is answered otherwise or the
    /// RPC timeout has passed (then EIO).
    pub(crate) fn send_batch_placed(
        &self,
        calls: Vec<Call<'_>>,
        dests: Vec<Option<Dest>>,
        buf: &mut [u8],
        mut place: Option<BatchPlacer<'_>>,
    ) -> Vec<PlacedAnswer> {
        let all: Vec<usize> = (0..calls.len()).collect();
        let mut answers = self.send_batch_once(&calls, &all, &dests, buf, &mut place);
        let is_retry = |a: &PlacedAnswer| matches!(a, Err(Errno(RETRY | MOVING)));
        // A change a daemon applied makes the operation unsafe to run again.
        let applied = |answers: &[PlacedAnswer]| answers.iter().zip(&calls).any(|(a, c)| served(a) && changes(&c.req));
        if !answers.iter().any(is_retry) {
            if applied(&answers) {
                crate::layout::note_served();
            }
            return answers;
        }
        let started = std::time::Instant::now();
        let mut wait = RETRY_WAIT_FIRST;
        loop {
            let again: Vec<usize> = (0..answers.len()).filter(|&i| is_retry(&answers[i])).collect();
            if applied(&answers) {
                crate::layout::note_served();
            }
            if again.is_empty() {
                return answers;
            }
            let moving = again.iter().any(|&i| matches!(answers[i], Err(Errno(MOVING))));
            if started.elapsed() > if moving { move_wait() } else { self.timeout } {
                let msg = if moving {
                    format!("the instance was still moving data to a new layout after {} s", move_wait().as_secs())
                } else {
                    "a directory's claim was not given back within the RPC timeout".to_string()
                };
                *self.last_error_slot() = Some(msg);
                for i in again {
                    answers[i] = Err(Errno(libc::EIO));
                }
                return answers;
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(if moving { MOVING_WAIT_MAX } else { RETRY_WAIT_MAX });
            let got = self.send_batch_once(&calls, &again, &dests, buf, &mut place);
            for (i, a) in again.into_iter().zip(got) {
                answers[i] = a;
            }
        }
    }

    /// One round of `send_batch_placed`: the calls `which` names, their answers in
    /// that order.
    fn send_batch_once(
        &self,
        calls: &[Call<'_>],
        which: &[usize],
        dests: &[Option<Dest>],
        buf: &mut [u8],
        place: &mut Option<BatchPlacer<'_>>,
    ) -> Vec<PlacedAnswer> {
        debug_assert_eq!(calls.len(), dests.len());
        let sent: Vec<Sent> = which.iter().map(|&i| self.send_one(&calls[i])).collect();
        let mut answers = Vec::with_capacity(which.len());
        if which.len() == calls.len() {
            crate::grants::batch_begin(calls.len());
        }
        for (&i, st) in which.iter().zip(sent) {
            crate::grants::note_flags(0);
            answers.push(self.answer_one(&calls[i], st, dests[i].as_ref(), buf, for_call(place, i)));
            crate::grants::batch_answered(i);
        }
        answers
    }

    /// Sends one call of a batch on a connection to its daemon (pooled if one is).
    fn send_one(&self, call: &Call<'_>) -> Sent {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.rpcs_sent.fetch_add(1, Ordering::Relaxed);
        self.grants.changing(&call.req);
        let sent_ms = self.grants.clock_ms();
        match self.take_for(call.daemon) {
            Ok((mut c, reused, via)) => match self.send_to(&mut c, via, call.daemon, id, &call.req, &call.bulk) {
                Ok(op) => {
                    // Events, not spans: the calls of a batch interleave. With the
                    // default filter (info) a disabled event costs an atomic load.
                    debug!(daemon = call.daemon, op = call.req.name(), id, "request sent");
                    Sent::Pending(c, id, op, reused, via, sent_ms)
                }
                Err(_) if reused => Sent::Resend,
                Err(e) => Sent::Done(Err(self.fail(call.daemon, format!("send: {e}")))),
            },
            Err(e) => Sent::Done(Err(e)),
        }
    }

    /// The answer to one call of a batch, as `send_one` left it, checked where its
    /// bytes arrived (integrity.rs): a read whose bytes do not match the sums that
    /// came with them is asked once more on a fresh connection, then answered
    /// EBADMSG.
    fn answer_one(
        &self,
        call: &Call<'_>,
        st: Sent,
        dest: Option<&Dest>,
        buf: &mut [u8],
        mut place: Option<(usize, BatchPlacer<'_>)>,
    ) -> PlacedAnswer {
        let lent = place.as_mut().map(|(i, p)| (*i, &mut **p as BatchPlacer<'_>));
        let answer = self.answer_one_raw(call, st, dest, buf, lent);
        if !self.came_over_network(call.daemon) || Transport::answer_intact(call, &answer, dest, buf) {
            return answer;
        }
        let Request::Read { file_id, .. } = call.req else { return answer };
        warn!(daemon = call.daemon, "a read's bytes arrived not matching their checksums: asking again");
        let again = self.call_fresh(call, dest, buf, place);
        match Transport::answer_intact(call, &again, dest, buf) {
            true => again,
            false => Err(self.corrupt_arrival(call.daemon, file_id)),
        }
    }

    /// `answer_one` before the check: read from its connection, or sent again on a
    /// fresh one where that is safe.
    fn answer_one_raw(
        &self,
        call: &Call<'_>,
        st: Sent,
        dest: Option<&Dest>,
        buf: &mut [u8],
        place: Option<(usize, BatchPlacer<'_>)>,
    ) -> PlacedAnswer {
        let (mut c, id, op, reused, via, sent_ms) = match st {
            Sent::Done(a) => return a,
            Sent::Resend => return self.call_fresh(call, dest, buf, place),
            Sent::Pending(c, id, op, reused, via, sent_ms) => (c, id, op, reused, via, sent_ms),
        };
        let mut place = place;
        let first_try = place.as_mut().map(|(i, p)| (*i, &mut **p as BatchPlacer<'_>));
        match self.recv_placed(&mut c, id, op, dest, buf, first_try) {
            Ok((reply, bulk, flags)) => {
                self.replied(via, &call.req, sent_ms, flags);
                debug!(
                    daemon = call.daemon,
                    op = call.req.name(),
                    id,
                    errno = reply.as_ref().err().copied().unwrap_or(0),
                    "reply"
                );
                self.give_back(via, c);
                match self.unwrap_forwarded(call.daemon, op, reply) {
                    Ok(reply) => reply.map(|r| (r, bulk)).map_err(Errno),
                    Err(e) => Err(e),
                }
            }
            Err((true, _)) if reused && call.req.is_idempotent() => {
                drop(c);
                self.call_fresh(call, dest, buf, place)
            }
            Err((_, e)) => Err(self.fail(call.daemon, e)),
        }
    }
}

/// One call of a batch after its send.
enum Sent {
    /// Waiting for the reply on this connection (id, op, pooled?, the daemon it
    /// leads to, when it was sent).
    Pending(Conn, u64, u16, bool, u32, u64),
    /// Sending on a pooled connection failed: send again on a fresh one.
    Resend,
    Done(PlacedAnswer),
}

/// Waits for a reply's first byte. "Nothing came" (the daemon died before the reply:
/// the connection was closed or reset) is what makes a retry safe for idempotent
/// requests: the error's flag says so.
fn wait_first_byte(c: &mut Conn) -> Result<(), (bool, String)> {
    let spin = spin_us();
    if spin > 0 && c.reader.buffer().is_empty() {
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_micros() < spin as u128 && !c.reader.get_ref().readable_now() {
            std::hint::spin_loop();
        }
    }
    // A read with a timeout is interrupted by a stop and continue (SIGSTOP, SIGCONT)
    // even with SA_RESTART (signal(7)): that is no failure.
    let first = loop {
        match c.reader.fill_buf() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    // Nothing within the RPC timeout is no sign of a dead connection to a daemon
    // that may be back: sending again would only wait as long once more.
    let first = first.map_err(|e| {
        let silent = matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut);
        (!silent, format!("no reply: {e}"))
    })?;
    if first.is_empty() {
        return Err((true, "no reply: connection closed by the daemon".into()));
    }
    Ok(())
}

/// Reads a Read reply's bulk (`bulk_len` bytes, `span_lens` per span) into `buf` at
/// the places `dest` gives, zeroing what a span came back short of. The layout is
/// checked before anything is written into the caller's buffer.
fn read_into_dest(
    c: &mut Conn,
    span_lens: &[u32],
    dest: &Dest,
    bulk_len: u64,
    buf: &mut [u8],
) -> Result<(), (bool, String)> {
    let fits = span_lens.len() == dest.len()
        && span_lens.iter().zip(dest).all(|(got, (at, len))| got <= len && at + *len as usize <= buf.len())
        && span_lens.iter().map(|g| *g as u64).sum::<u64>() == bulk_len;
    if !fits {
        return Err((false, "read reply does not match the requested spans".into()));
    }
    for (got, (at, len)) in span_lens.iter().zip(dest) {
        let (at, got, len) = (*at, *got as usize, *len as usize);
        c.reader.read_exact(&mut buf[at..at + got]).map_err(|e| (false, format!("truncated reply: {e}")))?;
        buf[at + got..at + len].fill(0);
    }
    Ok(())
}
