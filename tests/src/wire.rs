//! Bytes corrupted on the wire: a TCP proxy on loopback in front of a daemon that
//! flips one bit of the daemon's replies wherever they carry [`MARK`], as a bad
//! NIC or a bit flipped in a router's memory would (TCP's own checksum misses
//! some of those). Requests pass unchanged. A client reaches the daemons through
//! the proxies by a copy of the instance's hosts file (with its secret) whose
//! daemon addresses name the proxies ([`hosts_through`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes a proxy looks for in replies; data that holds them gets a bit
/// flipped on its way back. Nothing in a frame's header or body holds them.
pub const MARK: &[u8; 16] = b"<gust-wire-mark>";

/// `len` bytes of MARK over and over.
pub fn marked(len: usize) -> Vec<u8> {
    MARK.iter().copied().cycle().take(len).collect()
}

/// A proxy listening on 127.0.0.1 in front of one daemon; it stops on drop.
pub struct CorruptingProxy {
    pub addr: String,
    /// Flips still allowed; each reply byte run that holds MARK takes one.
    pub flips_left: Arc<AtomicUsize>,
    /// Flips made so far.
    pub flipped: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl CorruptingProxy {
    /// A proxy to `target` (host:port) that flips at most `flips` times.
    pub fn start(target: &str, flips: usize) -> CorruptingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let flips_left = Arc::new(AtomicUsize::new(flips));
        let flipped = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (target, left, done, halt) = (target.to_string(), flips_left.clone(), flipped.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = conn else { continue };
                let Ok(daemon) = TcpStream::connect(&target) else { continue };
                let (c2, d2) = (client.try_clone().unwrap(), daemon.try_clone().unwrap());
                std::thread::spawn(move || pass(client, daemon));
                let (left, done) = (left.clone(), done.clone());
                std::thread::spawn(move || corrupt(d2, c2, &left, &done));
            }
        });
        CorruptingProxy { addr, flips_left, flipped, stop }
    }
}

impl Drop for CorruptingProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the stop.
        let _ = TcpStream::connect(&self.addr);
    }
}

/// Copies `from` to `to` until either ends.
fn pass(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Copies the daemon's replies to the client, flipping the low bit of the last
/// byte of each MARK found (a run that spans two reads is found too).
fn corrupt(mut from: TcpStream, mut to: TcpStream, left: &AtomicUsize, done: &AtomicUsize) {
    let mut buf = vec![0u8; 1 << 16];
    // The last MARK.len() - 1 bytes already sent, to find a MARK across reads.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut seen = tail.clone();
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = seen.windows(MARK.len()).position(|w| w == MARK) {
            let last = at + MARK.len() - 1 - tail.len();
            if left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| l.checked_sub(1)).is_ok() {
                buf[last] ^= 1;
                done.fetch_add(1, Ordering::SeqCst);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        let keep = seen.len().min(MARK.len() - 1);
        tail = seen[seen.len() - keep..].to_vec();
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// A copy of the hosts file `hosts` (and its secret) beside it, whose daemons'
/// addresses are those of `proxies` (by daemon id; None: the daemon's own).
pub fn hosts_through(hosts: &Path, proxies: &[Option<&CorruptingProxy>]) -> PathBuf {
    let h = gust_hosts::HostsFile::load(hosts).unwrap();
    let mut text = std::fs::read_to_string(hosts).unwrap();
    for (d, p) in h.daemons.iter().zip(proxies) {
        if let Some(p) = p {
            text = text.replace(&d.tcp_addr(), &p.addr);
        }
    }
    static COPIES: AtomicUsize = AtomicUsize::new(0);
    let copy = hosts.with_file_name(format!("through-{}.hosts", COPIES.fetch_add(1, Ordering::SeqCst)));
    std::fs::write(&copy, text).unwrap();
    let secret = gust_hosts::secret_path(&copy);
    std::fs::copy(gust_hosts::secret_path(hosts), &secret).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    copy
}
