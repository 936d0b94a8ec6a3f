//! How bytes move between a GustFS client and a daemon: endpoints, listeners and
//! streams, behind one interface whatever carries them.
//!
//! * [`Endpoint`]: where a daemon listens, by kind and address (`tcp:10.0.0.7:7000`,
//!   `unix:/tmp/gustfs/d0/daemon.sock`, `shm:/tmp/gustfs/d0/daemon.shm`, `mem:d0`),
//!   the form hosts files name them in.
//! * [`Listener`]: binds an endpoint and accepts [`Stream`]s.
//! * [`connect`]: opens a [`Stream`] to an endpoint within a time bound.
//! * [`Stream`]: a reliable, ordered byte stream (Read + Write) with timeouts and a
//!   second handle for a reader thread; [`write_parts`] sends a frame's parts with one
//!   write when they are small, the rule every sender of frames follows.
//!
//! Implementations: TCP (Nagle off: requests are small and latency-bound), Unix
//! domain sockets (a daemon on the same node), shared-memory rings ([`shm`], a daemon
//! on the same node without the socket path per request), and an in-memory transport ([`mem`])
//! whose delivery a seed controls (how writes are cut into reads, and injected
//! disconnects), so tests replay a fault schedule byte for byte, and HPC networks
//! through libfabric ([`ofi`]: verbs, Slingshot's CXI, EFA, and tcp and shm here).
//!
//! Not for: framing and message formats (gust-proto), authentication (the handshake
//! in gust-proto runs over any stream), retries and connection pools (the client).

pub mod handoff;
pub mod mem;
pub mod ofi;
pub mod shm;

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// Frames up to this size go out in one write of a gathered copy; larger ones are
/// written part by part with writev, where copying would cost more than a syscall.
pub const COALESCE_BYTES_MAX: usize = 64 << 10;

/// Send buffer asked for on Unix connections. Linux's default (212,992 bytes) is a
/// quarter of one reply of a batch of whole files (`read_many`: 8 files of 100 KiB
/// from each daemon); a reply that does not fit costs the daemon a partial write,
/// a copy of the rest and a second wake-up (docs/PERFORMANCE.md, "Data loader, fifth
/// round"). The kernel caps the request at net.core.wmem_max without an error, so a
/// machine that keeps that low keeps today's behaviour. A limit, not an allocation.
pub const UNIX_SEND_BUFFER_BYTES: usize = 4 << 20;

/// Where a daemon listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// Shared-memory rings handed out at this Unix socket ([`shm`]).
    Shm(PathBuf),
    /// An in-memory listener of this process, by name ([`mem`]).
    Mem(String),
    /// A libfabric endpoint: provider and address ([`ofi`]).
    Ofi(ofi::OfiAddr),
}

impl Endpoint {
    /// The kind as hosts files spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            Endpoint::Tcp(_) => "tcp",
            Endpoint::Unix(_) => "unix",
            Endpoint::Shm(_) => "shm",
            Endpoint::Mem(_) => "mem",
            Endpoint::Ofi(_) => "ofi",
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
            Endpoint::Shm(p) => write!(f, "shm:{}", p.display()),
            Endpoint::Mem(n) => write!(f, "mem:{n}"),
            Endpoint::Ofi(a) => write!(f, "ofi:{a}"),
        }
    }
}

/// An endpoint that cannot be parsed, with the reason for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadEndpoint(pub String);

impl fmt::Display for BadEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadEndpoint {}

/// Bound on an endpoint's text: a Unix socket path is at most 108 bytes, a host name
/// 253; anything longer in a hosts file is damage, not an address.
pub const ENDPOINT_BYTES_MAX: usize = 512;

impl FromStr for Endpoint {
    type Err = BadEndpoint;
    fn from_str(s: &str) -> Result<Self, BadEndpoint> {
        if s.len() > ENDPOINT_BYTES_MAX {
            return Err(BadEndpoint(format!("endpoint longer than {ENDPOINT_BYTES_MAX} bytes")));
        }
        let (kind, addr) = s
            .split_once(':')
            .ok_or_else(|| BadEndpoint(format!("'{s}': expected KIND:ADDRESS (tcp:, unix:, shm:, ofi: or mem:)")))?;
        match kind {
            "tcp" => addr
                .parse::<SocketAddr>()
                .map(Endpoint::Tcp)
                .map_err(|_| BadEndpoint(format!("'{s}': not an IP address and port"))),
            "unix" if addr.starts_with('/') => Ok(Endpoint::Unix(PathBuf::from(addr))),
            "unix" => Err(BadEndpoint(format!("'{s}': a Unix socket path must be absolute"))),
            "shm" if addr.starts_with('/') => Ok(Endpoint::Shm(PathBuf::from(addr))),
            "shm" => Err(BadEndpoint(format!("'{s}': a shared-memory endpoint's socket path must be absolute"))),
            "mem" if !addr.is_empty() => Ok(Endpoint::Mem(addr.to_string())),
            "ofi" => ofi::OfiAddr::parse(addr).map(Endpoint::Ofi).map_err(BadEndpoint),
            _ => Err(BadEndpoint(format!("'{s}': unknown endpoint kind '{kind}' (tcp, unix, shm, ofi or mem)"))),
        }
    }
}

/// A connected, reliable, ordered byte stream.
pub trait Stream: Read + Write + Send {
    /// Bound on every read and write from now on (None: wait forever).
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// A second handle on the same connection (a reader beside a writer).
    fn try_clone(&self) -> io::Result<Box<dyn Stream>>;
    /// Who is at the other end, for log lines.
    fn peer(&self) -> String;
    /// Ends the connection in both directions; the peer's reads see end of stream.
    fn shutdown(&self);
    /// Whether bytes are waiting to be read, without blocking (a reply that is
    /// already there is worth polling for rather than sleeping on).
    fn readable_now(&self) -> bool;
    /// The descriptor an event loop (epoll) can wait on; None for transports that
    /// have none (in-memory), which a server then serves with a thread of their own.
    fn raw_fd(&self) -> Option<RawFd>;
    /// Reads and writes return `WouldBlock` instead of waiting (event-driven
    /// servers). Unsupported (an error) where `raw_fd` is None.
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
}

fn poll_readable(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

/// The `Stream` methods a kernel socket type answers alike (TcpStream, UnixStream);
/// only how it names its peer differs.
macro_rules! socket_stream {
    ($ty:ty, $peer:expr) => {
        impl Stream for $ty {
            fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(t)?;
                self.set_write_timeout(t)
            }
            fn try_clone(&self) -> io::Result<Box<dyn Stream>> {
                Ok(Box::new(<$ty>::try_clone(self)?))
            }
            fn peer(&self) -> String {
                let name: fn(&$ty) -> String = $peer;
                name(self)
            }
            fn shutdown(&self) {
                let _ = <$ty>::shutdown(self, std::net::Shutdown::Both);
            }
            fn readable_now(&self) -> bool {
                poll_readable(self.as_raw_fd())
            }
            fn raw_fd(&self) -> Option<RawFd> {
                Some(self.as_raw_fd())
            }
            fn set_nonblocking(&self, on: bool) -> io::Result<()> {
                Self::set_nonblocking(self, on)
            }
        }
    };
}

socket_stream!(TcpStream, |s| s.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "tcp peer".into()));
socket_stream!(UnixStream, |_| "unix socket".into());

/// A Unix stream with [`UNIX_SEND_BUFFER_BYTES`] asked for; a refusal leaves the
/// default, which works, only slower for large replies.
fn with_send_buffer(s: UnixStream) -> UnixStream {
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::SndBuf, &UNIX_SEND_BUFFER_BYTES);
    s
}

/// Opens a stream to `ep`, giving up after `timeout`.
pub fn connect(ep: &Endpoint, timeout: Duration) -> io::Result<Box<dyn Stream>> {
    match ep {
        Endpoint::Tcp(a) => {
            let s = TcpStream::connect_timeout(a, timeout)?;
            s.set_nodelay(true)?;
            Ok(Box::new(s))
        }
        // A local connect either succeeds or fails at once; no timeout needed.
        Endpoint::Unix(p) => Ok(Box::new(with_send_buffer(UnixStream::connect(p)?))),
        Endpoint::Shm(p) => Ok(Box::new(shm::connect(p, timeout)?)),
        Endpoint::Mem(n) => mem::connect(n),
        Endpoint::Ofi(a) => ofi::connect(a, timeout),
    }
}

/// Resolves `host:port` (a name or an address) to a TCP endpoint.
pub fn tcp_endpoint(host_port: &str) -> io::Result<Endpoint> {
    host_port
        .to_socket_addrs()?
        .next()
        .map(Endpoint::Tcp)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{host_port}: no address")))
}

enum ListenerKind {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
    Shm(shm::ShmListener, PathBuf),
    Mem(mem::MemListener),
    Ofi(ofi::OfiListener),
}

/// A bound endpoint accepting streams.
pub struct Listener {
    kind: ListenerKind,
    local: Endpoint,
}

impl Listener {
    /// Binds `ep`. TCP port 0 picks a free port ([`Listener::local`] tells which); a
    /// stale Unix socket file at the path is replaced.
    pub fn bind(ep: &Endpoint) -> io::Result<Listener> {
        match ep {
            Endpoint::Tcp(a) => {
                let l = TcpListener::bind(a)?;
                let local = Endpoint::Tcp(l.local_addr()?);
                Ok(Listener { kind: ListenerKind::Tcp(l), local })
            }
            Endpoint::Unix(p) => {
                let _ = std::fs::remove_file(p);
                let l = UnixListener::bind(p)?;
                Ok(Listener { kind: ListenerKind::Unix(l, p.clone()), local: ep.clone() })
            }
            Endpoint::Shm(p) => Listener::bind_shm(p, shm::SHM_CONNECTIONS_MAX_DEFAULT, shm::ring_bytes()),
            Endpoint::Mem(n) => Ok(Listener { kind: ListenerKind::Mem(mem::listen(n)?), local: ep.clone() }),
            Endpoint::Ofi(a) => {
                let l = ofi::OfiListener::bind(a)?;
                let local = Endpoint::Ofi(l.local().clone());
                Ok(Listener { kind: ListenerKind::Ofi(l), local })
            }
        }
    }

    /// Binds a shared-memory endpoint at the Unix socket `path` serving at most
    /// `connections_max` connections at once, with rings of `ring_bytes` each way.
    pub fn bind_shm(path: &std::path::Path, connections_max: usize, ring_bytes: usize) -> io::Result<Listener> {
        let l = shm::ShmListener::bind(path, connections_max, ring_bytes)?;
        Ok(Listener { kind: ListenerKind::Shm(l, path.to_path_buf()), local: Endpoint::Shm(path.to_path_buf()) })
    }

    /// The endpoint as bound (with the port TCP picked).
    pub fn local(&self) -> &Endpoint {
        &self.local
    }

    /// The listening descriptor, for an event loop; None for in-memory listeners.
    pub fn raw_fd(&self) -> Option<RawFd> {
        match &self.kind {
            ListenerKind::Tcp(l) => Some(l.as_raw_fd()),
            ListenerKind::Unix(l, _) => Some(l.as_raw_fd()),
            ListenerKind::Shm(..) | ListenerKind::Mem(_) | ListenerKind::Ofi(_) => None,
        }
    }

    /// `accept` returns `WouldBlock` when no connection waits (event loops).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match &self.kind {
            ListenerKind::Tcp(l) => l.set_nonblocking(on),
            ListenerKind::Unix(l, _) => l.set_nonblocking(on),
            ListenerKind::Shm(..) => Err(io::Error::new(io::ErrorKind::Unsupported, "shared-memory listeners block")),
            ListenerKind::Mem(_) => Err(io::Error::new(io::ErrorKind::Unsupported, "in-memory listeners block")),
            ListenerKind::Ofi(_) => Err(io::Error::new(io::ErrorKind::Unsupported, "fabric listeners block")),
        }
    }

    /// Waits for the next connection. Accepted streams block (Linux does not pass
    /// the listener's O_NONBLOCK on) until told otherwise.
    pub fn accept(&self) -> io::Result<Box<dyn Stream>> {
        match &self.kind {
            ListenerKind::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nodelay(true)?;
                Ok(Box::new(s))
            }
            ListenerKind::Unix(l, _) => Ok(Box::new(with_send_buffer(l.accept()?.0))),
            ListenerKind::Shm(l, _) => l.accept(),
            ListenerKind::Mem(l) => l.accept(),
            ListenerKind::Ofi(l) => l.accept(),
        }
    }

    /// Accepts forever on a thread of its own, handing each stream to `on_stream`.
    /// Accept errors (out of descriptors, a peer that reset before accept) are
    /// reported to `on_error` and retried after a pause, so a burst of them cannot
    /// spin a core.
    pub fn serve(
        self,
        name: &str,
        on_stream: impl Fn(Box<dyn Stream>) + Send + 'static,
        on_error: impl Fn(&io::Error) + Send + 'static,
    ) -> io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name(name.into()).spawn(move || loop {
            match self.accept() {
                Ok(s) => on_stream(s),
                Err(e) => {
                    on_error(&e);
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        match &self.kind {
            ListenerKind::Unix(_, p) | ListenerKind::Shm(_, p) => {
                let _ = std::fs::remove_file(p);
            }
            ListenerKind::Mem(_) => mem::unlisten(&self.local),
            ListenerKind::Tcp(_) | ListenerKind::Ofi(_) => {}
        }
    }
}

/// Writes `parts` in order as one message: one write of a gathered copy when the
/// total is at most [`COALESCE_BYTES_MAX`] (a small frame is one segment on the wire
/// and one wake-up at the peer), otherwise vectored writes without copying.
pub fn write_parts(w: &mut (impl Write + ?Sized), parts: &[&[u8]]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if total <= COALESCE_BYTES_MAX {
        let mut one = Vec::with_capacity(total);
        for p in parts {
            one.extend_from_slice(p);
        }
        return w.write_all(&one);
    }
    let mut slices: Vec<IoSlice<'_>> = parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)).collect();
    let mut rest: &mut [IoSlice<'_>] = &mut slices;
    while !rest.is_empty() {
        let n = w.write_vectored(rest)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed while sending"));
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn endpoints_parse_and_print_back() {
        for s in [
            "tcp:127.0.0.1:7000",
            "tcp:[::1]:80",
            "unix:/tmp/x/daemon.sock",
            "shm:/tmp/x/daemon.shm",
            "mem:d3",
            "ofi:tcp;ofi_rxm/10.0.0.7:7100",
            "ofi:shm/fi_shm://4242",
        ] {
            let e: Endpoint = s.parse().unwrap();
            assert_eq!(e.to_string(), s);
        }
        for bad in [
            "",
            "tcp",
            "tcp:host",
            "tcp:1.2.3.4",
            "unix:rel/path",
            "shm:rel",
            "mem:",
            "rdma:x",
            "ofi:tcp",
            &"x".repeat(600),
        ] {
            let e = bad.parse::<Endpoint>().unwrap_err();
            assert!(!e.0.is_empty(), "{bad}");
        }
    }

    /// The same exchange over every kind: a request out, a large reply back in
    /// pieces, end of stream after shutdown.
    fn exchange(ep: Endpoint) {
        let l = Listener::bind(&ep).unwrap();
        let at = l.local().clone();
        let server = std::thread::spawn(move || {
            let mut s = l.accept().unwrap();
            let mut req = [0u8; 5];
            s.read_exact(&mut req).unwrap();
            assert_eq!(&req, b"hello");
            let big = vec![7u8; 300_000];
            write_parts(&mut s, &[b"head", &big, b"tail"]).unwrap();
            s.shutdown();
        });
        let mut c = connect(&at, Duration::from_secs(5)).unwrap();
        c.set_timeout(Some(Duration::from_secs(10))).unwrap();
        write_parts(&mut c, &[b"hel", b"lo"]).unwrap();
        let mut all = Vec::new();
        c.read_to_end(&mut all).unwrap();
        assert_eq!(all.len(), 4 + 300_000 + 4);
        assert_eq!(&all[..4], b"head");
        assert_eq!(&all[all.len() - 4..], b"tail");
        server.join().unwrap();
    }

    #[test]
    fn tcp_unix_and_memory_carry_the_same_exchange() {
        exchange("tcp:127.0.0.1:0".parse().unwrap());
        let d = std::env::temp_dir().join(format!("gust-transport-{}.sock", std::process::id()));
        exchange(Endpoint::Unix(d.clone()));
        assert!(!d.exists(), "the socket file goes with the listener");
        exchange(Endpoint::Mem("exchange-test".into()));
        let d = std::env::temp_dir().join(format!("gust-transport-{}.shm", std::process::id()));
        exchange(Endpoint::Shm(d.clone()));
        assert!(!d.exists(), "the rendezvous socket goes with the listener");
    }

    #[test]
    fn connecting_to_nothing_fails_quickly() {
        let t = std::time::Instant::now();
        assert!(connect(&"unix:/nonexistent/gust.sock".parse().unwrap(), Duration::from_secs(1)).is_err());
        assert!(connect(&Endpoint::Mem("nobody-listens".into()), Duration::from_secs(1)).is_err());
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    /// Both ends of a Unix connection ask for UNIX_SEND_BUFFER_BYTES: Linux grants
    /// twice the request, capped by net.core.wmem_max.
    #[test]
    fn unix_connections_get_the_larger_send_buffer() {
        let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max").unwrap().trim().parse().unwrap();
        let want = 2 * UNIX_SEND_BUFFER_BYTES.min(wmem_max);
        let default: usize =
            std::fs::read_to_string("/proc/sys/net/core/wmem_default").unwrap().trim().parse().unwrap();
        let p = std::env::temp_dir().join(format!("gust-transport-sndbuf-{}.sock", std::process::id()));
        let l = Listener::bind(&Endpoint::Unix(p.clone())).unwrap();
        let client = UnixStream::connect(&p).unwrap();
        let ours = with_send_buffer(UnixStream::connect(&p).unwrap());
        let accepted = l.accept().unwrap();
        let _ = l.accept().unwrap();
        let get = |fd: &UnixStream| nix::sys::socket::getsockopt(fd, nix::sys::socket::sockopt::SndBuf).unwrap();
        assert_eq!(get(&ours), want);
        assert_eq!(get(&client), default, "a plain connection keeps the default");
        let fd = accepted.raw_fd().unwrap();
        // SAFETY: borrowed for the call; `accepted` keeps it open and owns it.
        let borrowed = std::mem::ManuallyDrop::new(unsafe { <UnixStream as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        assert_eq!(get(&borrowed), want, "accepted connections ask too");
    }
}
