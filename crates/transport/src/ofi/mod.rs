//! HPC networks through libfabric: the `ofi` endpoint kind.
//!
//! An endpoint is written `ofi:PROVIDER/ADDRESS`: the provider as libfabric names it
//! (`tcp;ofi_rxm`, `shm`, `verbs;ofi_rxm`, `cxi`, `efa`) and the address in the
//! provider's format: `IP:PORT` for providers that address by socket address, the
//! string itself for providers that address by string (shm: `fi_shm://…`), and
//! `0x` and hex for the rest. A daemon binds `ofi:PROVIDER/IP` (its `--listen`
//! address; the provider picks the port) or `ofi:PROVIDER/-` (the provider picks
//! everything, as shm does), and its hosts file line carries the address it got.
//!
//! Requests and replies travel as messages of a reliable-datagram endpoint (one per
//! process and provider, [`fabric`]), each stream's bytes in pieces of at most
//! [`fabric::PIECE_BYTES_MAX`]; the rest of GustFS sees a [`Stream`] like any other.
//! Bulk data by RMA is not used yet: a piece is a message, copied once on each side
//! as on a socket (docs/DESIGN.md, "HPC networks").
//!
//! libfabric is opened at run time; a build without its headers, or a machine
//! without the library or the provider, gets an error that says which, and clients
//! then use the daemon's TCP endpoint.

mod conn;
pub mod fabric;
pub mod ffi;
mod keepalive;
mod progress;
mod shm;

use crate::Stream;
use conn::Conn;
use fabric::Fabric;
use ffi::AddrKind;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::unix::io::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a daemon's fabric endpoint is (or, to bind, where it should be).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OfiAddr {
    pub provider: String,
    pub address: String,
}

impl fmt::Display for OfiAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.address)
    }
}

impl OfiAddr {
    /// Parses `PROVIDER/ADDRESS` (what follows `ofi:`).
    pub fn parse(s: &str) -> Result<OfiAddr, String> {
        let (p, a) = s.split_once('/').ok_or_else(|| format!("'ofi:{s}': expected ofi:PROVIDER/ADDRESS"))?;
        let ok = |t: &str| !t.is_empty() && !t.chars().any(|c| c.is_whitespace() || c.is_control());
        if !ok(p) || !ok(a) {
            return Err(format!("'ofi:{s}': the provider and the address must be non-empty, without spaces"));
        }
        Ok(OfiAddr { provider: p.to_string(), address: a.to_string() })
    }

    /// The node to bind for a listener: an IP address, or None (`-`).
    fn bind_node(&self) -> Option<String> {
        if self.address == "-" {
            return None;
        }
        let ip = self.address.parse::<SocketAddr>().map(|s| s.ip()).or_else(|_| self.address.parse::<IpAddr>());
        Some(ip.map(|ip| ip.to_string()).unwrap_or_else(|_| self.address.clone()))
    }
}

/// Endpoints this process opened, by process (a forked child opens its own: the
/// parent's progress thread is not in it), provider and bound node.
type Registry = HashMap<(u32, String, Option<String>), Arc<Fabric>>;
static FABRICS: Mutex<Option<Registry>> = Mutex::new(None);

fn fabric(provider: &str, node: Option<String>) -> io::Result<Arc<Fabric>> {
    let mut reg = FABRICS.lock().unwrap_or_else(|e| e.into_inner());
    let key = (std::process::id(), provider.to_string(), node.clone());
    if let Some(f) = reg.get_or_insert_with(HashMap::new).get(&key) {
        return Ok(f.clone());
    }
    let f = Fabric::open(provider, node.as_deref())?;
    reg.get_or_insert_with(HashMap::new).insert(key, f.clone());
    Ok(f)
}

/// The address of this host that reaches `to` (a UDP socket's route, no packet sent):
/// a client's endpoint binds there, so that it listens on nothing else.
fn source_for(to: SocketAddr) -> io::Result<IpAddr> {
    let any: SocketAddr = if to.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.expect("literal");
    let u = UdpSocket::bind(any)?;
    u.connect(to)?;
    Ok(u.local_addr()?.ip())
}

/// `text` in the provider's encoding.
fn encode(kind: AddrKind, text: &str) -> io::Result<Vec<u8>> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("fabric address '{text}': {why}"));
    match kind {
        AddrKind::Socket => {
            let a: SocketAddr = text.parse().map_err(|_| bad("expected IP:PORT for this provider"))?;
            Ok(sockaddr(a))
        }
        AddrKind::Text => {
            let mut v = text.as_bytes().to_vec();
            v.push(0);
            Ok(v)
        }
        AddrKind::Opaque => {
            let hex = text.strip_prefix("0x").ok_or_else(|| bad("expected 0x and hex for this provider"))?;
            if hex.len() % 2 != 0 {
                return Err(bad("odd number of hex digits"));
            }
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|_| bad("not hex")))
                .collect()
        }
    }
}

/// The provider's encoding of an address, as text.
fn decode(kind: AddrKind, bytes: &[u8]) -> String {
    match kind {
        AddrKind::Socket => from_sockaddr(bytes).map(|a| a.to_string()).unwrap_or_else(|| hex(bytes)),
        AddrKind::Text => String::from_utf8_lossy(bytes.split(|b| *b == 0).next().unwrap_or_default()).into_owned(),
        AddrKind::Opaque => hex(bytes),
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::from("0x");
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

/// A `struct sockaddr_in` or `sockaddr_in6` as bytes.
fn sockaddr(a: SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(v4) => {
            let mut b = vec![0u8; 16];
            b[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&v4.port().to_be_bytes());
            b[4..8].copy_from_slice(&v4.ip().octets());
            b
        }
        SocketAddr::V6(v6) => {
            let mut b = vec![0u8; 28];
            b[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&v6.port().to_be_bytes());
            b[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&v6.ip().octets());
            b[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
            b
        }
    }
}

fn from_sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?) as i32;
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match family {
        libc::AF_INET => {
            let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::from((ip, port)))
        }
        libc::AF_INET6 => {
            let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::from((ip, port)))
        }
        _ => None,
    }
}

/// Opens a stream to the daemon at `a`, within `timeout`.
pub fn connect(a: &OfiAddr, timeout: Duration) -> io::Result<Box<dyn Stream>> {
    let node = match a.address.parse::<SocketAddr>() {
        Ok(to) => Some(source_for(to)?.to_string()),
        Err(_) => None,
    };
    let f = fabric(&a.provider, node)?;
    let peer = encode(f.ep.addr_kind(), &a.address)?;
    let conn = f.connect(&peer, timeout).map_err(|e| io::Error::new(e.kind(), format!("ofi:{a}: {e}")))?;
    Ok(Box::new(OfiStream::new(f, conn, format!("ofi:{a}"))))
}

/// A bound fabric endpoint accepting streams.
pub struct OfiListener {
    fabric: Arc<Fabric>,
    local: OfiAddr,
}

impl OfiListener {
    /// Binds `a` (see the module's documentation for the node it names).
    pub fn bind(a: &OfiAddr) -> io::Result<OfiListener> {
        // An endpoint of its own (not this process's shared one for connecting):
        // two listeners must not take each other's connections.
        let f = Fabric::open(&a.provider, a.bind_node().as_deref())?;
        f.listen();
        let local = OfiAddr { provider: a.provider.clone(), address: decode(f.ep.addr_kind(), f.name()) };
        Ok(OfiListener { fabric: f, local })
    }

    /// The address as bound, for the hosts file.
    pub fn local(&self) -> &OfiAddr {
        &self.local
    }

    /// Waits for the next connection.
    pub fn accept(&self) -> io::Result<Box<dyn Stream>> {
        let c = self.fabric.accept();
        Ok(Box::new(OfiStream::new(self.fabric.clone(), c, format!("ofi client of {}", self.local.provider))))
    }
}

/// Closes the connection when the last handle on it goes.
struct Handle {
    fabric: Arc<Fabric>,
    conn: Arc<Conn>,
    peer: String,
    timeout: Mutex<Option<Duration>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.fabric.close(&self.conn);
    }
}

/// A stream over a fabric connection.
pub struct OfiStream(Arc<Handle>);

impl OfiStream {
    fn new(fabric: Arc<Fabric>, conn: Arc<Conn>, peer: String) -> OfiStream {
        OfiStream(Arc::new(Handle { fabric, conn, peer, timeout: Mutex::new(None) }))
    }

    fn timeout(&self) -> Option<Duration> {
        *self.0.timeout.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Read for OfiStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.fabric.read(&self.0.conn, buf, self.timeout())
    }
}

impl Write for OfiStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.fabric.write(&self.0.conn, buf, self.timeout())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream for OfiStream {
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        *self.0.timeout.lock().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }
    fn try_clone(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(OfiStream(self.0.clone())))
    }
    fn peer(&self) -> String {
        self.0.peer.clone()
    }
    fn shutdown(&self) {
        self.0.fabric.close(&self.0.conn);
    }
    fn readable_now(&self) -> bool {
        self.0.conn.readable_now()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn set_nonblocking(&self, _on: bool) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "fabric streams block"))
    }
}

/// Whether this build and machine have libfabric: None, or why not. Whether a
/// provider is there is known when an endpoint of it is bound.
pub fn unavailable() -> Option<String> {
    ffi::unavailable()
}

#[cfg(test)]
mod tests;
