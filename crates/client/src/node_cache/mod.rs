//! The node cache (docs/DESIGN.md, "The node cache"): records and small files'
//! data that one holder per node keeps under its daemons' grants, in shared memory
//! that every client process of the node reads without a request.
//!
//! A process's own grants (grants.rs) only help with what that process looked up
//! before. A data loader's workers each read another random share of the data set
//! every epoch, so what one worker cached is what the next epoch's other workers
//! ask for. The holder is a client like any other (its own id, callback
//! connections, leases), which runs in the node's first daemon (`holder.rs`):
//!
//! * A process that read a file's data with a request (no grant of its own, no
//!   entry here) tells the holder the path, 32 to a message, one way, on the
//!   holder's socket (`<root directory>/node-cache.sock`; a process with fewer
//!   such reads, `ls` or `cat`, never connects). The holder looks them
//!   up (`stat_data`, in batches) and writes what its daemons granted into the
//!   table (table.rs).
//! * A lookup that misses this process's own grants looks in the table: an entry
//!   whose daemon's lease (as the holder published it) has not run out is the
//!   record as its daemon holds it.
//! * Before a daemon lets any change of a path go ahead, it recalls the holder's
//!   grant; the holder takes the entry out of the table before it answers. A
//!   holder that does not answer (stopped) keeps the change waiting until its
//!   lease is over, and by then no process uses its entries (the lease is in the
//!   table). A holder whose connection ended (its daemon was killed) is waited out
//!   the same way: its callback connection says its grants are shared
//!   (`callback`'s `shared`), so its end does not drop them at once.
//! * A process that defers creates or unlinks under claims does not look here:
//!   what it deferred is not at the daemons yet.
//!
//! Off with `GUST_NODE_CACHE=0` (in the daemons' environment: no holder; in a
//! client's: it does not look), and wherever grants are off.

mod holder;
pub(crate) mod table;

pub use holder::{serve, Serving};

use crate::Client;
use gust_proto::Record;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use table::Table;

/// The holder's socket, in its daemon's root directory.
pub const SOCKET_NAME: &str = "node-cache.sock";
/// The table's size unless `GUST_NODE_CACHE` says otherwise.
pub const DEFAULT_BYTES: u64 = 1 << 30;
/// Paths a process tells the holder in one message.
const HINT_PATHS: usize = 32;
/// Bound on one message's bytes (the holder closes a connection that sends more).
pub(crate) const HINT_BYTES_MAX: usize = 64 << 10;
/// After a failed connection, no other attempt for this long.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// A path told to the holder is not told again for this long (a lookup of it that
/// still misses: the holder did not get it, or lost it to a change).
const TELL_AGAIN_AFTER: Duration = Duration::from_secs(5);
/// Bound on the paths remembered as told.
const TOLD_MAX: usize = 1 << 14;

/// The answer to a process's connection: magic, then the table's size (u64 LE);
/// the table's descriptor comes with it.
pub(crate) const ANSWER_MAGIC: [u8; 8] = *b"GUSTNC01";
pub(crate) const ANSWER_BYTES: usize = 16;

/// `GUST_NODE_CACHE` from the environment: a size (`1GiB`, `256m`), `0` for off.
pub fn bytes_from_env() -> u64 {
    match std::env::var("GUST_NODE_CACHE") {
        Ok(v) if v == "0" || v == "off" => 0,
        Ok(v) => gust_hosts::parse_size(&v).unwrap_or(DEFAULT_BYTES),
        Err(_) => DEFAULT_BYTES,
    }
}

/// Paths seen lately, each for `window` after it was noted: the holder's
/// contended paths, a process's paths told to the holder. Bounded: past `max`
/// paths the expired ones go, and if that is not enough, all.
pub(crate) struct Recent {
    map: std::collections::HashMap<String, std::time::Instant>,
    window: Duration,
    max: usize,
}

impl Recent {
    pub(crate) fn new(window: Duration, max: usize) -> Recent {
        Recent { map: Default::default(), window, max }
    }

    /// Whether `p` was noted within the window.
    pub(crate) fn contains(&self, p: &str) -> bool {
        self.map.get(p).is_some_and(|t| t.elapsed() < self.window)
    }

    /// Notes `p` now.
    pub(crate) fn note(&mut self, p: &str) {
        if self.map.len() >= self.max {
            let window = self.window;
            self.map.retain(|_, t| t.elapsed() < window);
            if self.map.len() >= self.max {
                self.map.clear();
            }
        }
        self.map.insert(p.to_string(), std::time::Instant::now());
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }
}

/// This process's view of its node's cache.
pub(crate) struct Reader {
    on: bool,
    table: RwLock<Option<Arc<Table>>>,
    link: Mutex<Link>,
    /// No connection before then (ms of the grants clock).
    retry_at_ms: AtomicU64,
    connected: AtomicBool,
    /// Lookups answered from the table (tests, `gust bench`).
    pub(crate) hits: AtomicU64,
}

struct Link {
    /// The socket, with the fork generation that opened it.
    sock: Option<(u64, UnixStream)>,
    pending: Vec<String>,
    /// Paths told lately.
    told: Recent,
}

impl Reader {
    pub(crate) fn new(on: bool) -> Reader {
        Reader {
            on,
            table: RwLock::new(None),
            link: Mutex::new(Link { sock: None, pending: Vec::new(), told: Recent::new(TELL_AGAIN_AFTER, TOLD_MAX) }),
            retry_at_ms: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            hits: AtomicU64::new(0),
        }
    }

    fn table(&self) -> Option<Arc<Table>> {
        if !self.connected.load(Ordering::Acquire) {
            return None;
        }
        self.table.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Client {
    /// The record of `p` (with `with_data`, its inline data known) from the node
    /// cache, if an entry is there under a lease and this process deferred nothing
    /// that the daemons do not know yet.
    pub(crate) fn node_cached(&self, p: &str, with_data: bool) -> Option<(Record, Option<Arc<[u8]>>)> {
        let n = &self.node;
        if !n.on || !self.transport.grants.on() || self.defers_anything() {
            return None;
        }
        let t = n.table()?;
        let f = t.get(p, with_data, table::mono_ns())?;
        let record: Record = gust_proto::decode(&f.record).ok()?;
        n.hits.fetch_add(1, Ordering::Relaxed);
        Some((record, f.data.flatten().map(Arc::from)))
    }

    /// Whether this process may hold anything back from the daemons (claims taken,
    /// creates or unlinks queued): then the node cache may not answer it.
    fn defers_anything(&self) -> bool {
        self.transport.grants.claims().len() > 0 || self.queued_anything()
    }

    /// A lookup of `p`'s data went to its daemon (and found `size` bytes): the
    /// holder is told, so the next process that reads it finds it in the table.
    /// Not for an empty file: its record alone is what the process's own grants
    /// keep, and reads of many empty files once each (mdtest's read phase) would
    /// only make the holder work.
    pub(crate) fn node_missed(&self, p: &str, size: u64) {
        let n = &self.node;
        if !n.on || size == 0 || !self.transport.grants.on() {
            return;
        }
        let mut link = n.link.lock().unwrap_or_else(|e| e.into_inner());
        let fork = crate::rpc::fork_generation();
        if link.sock.as_ref().is_some_and(|(g, _)| *g != fork) {
            // The parent's socket: its messages are the parent's (the mapping is
            // read-only and stays).
            link.sock = None;
            link.pending.clear();
            link.told.clear();
        }
        if link.told.contains(p) {
            return;
        }
        link.told.note(p);
        if link.pending.len() < HINT_PATHS {
            link.pending.push(p.to_string());
        }
        // A process with fewer such reads (`ls`, `cat`) never connects.
        if link.pending.len() < HINT_PATHS {
            return;
        }
        if link.sock.is_none() {
            if self.transport.grants.clock_ms() < n.retry_at_ms.load(Ordering::Relaxed) {
                link.pending.clear();
                return;
            }
            match self.connect_node_cache() {
                Ok(s) => link.sock = Some((fork, s)),
                Err(e) => {
                    tracing::debug!("no node cache: {e}");
                    let at = self.transport.grants.clock_ms() + RETRY_AFTER.as_millis() as u64;
                    n.retry_at_ms.store(at, Ordering::Relaxed);
                    link.pending.clear();
                    return;
                }
            }
        }
        let msg = hint_message(&link.pending);
        link.pending.clear();
        let sent = link.sock.as_mut().map(|(_, s)| s.write_all(&msg));
        if !matches!(sent, Some(Ok(()))) {
            // The holder went (its daemon stopped): connect again later; its
            // table's leases run out by themselves.
            link.sock = None;
            n.connected.store(false, Ordering::Release);
        }
    }

    /// Connects to this node's holder and maps its table.
    fn connect_node_cache(&self) -> std::io::Result<UnixStream> {
        let path = self.node_cache_socket().ok_or_else(|| std::io::Error::other("no daemon on this node"))?;
        let s = UnixStream::connect(&path)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_write_timeout(Some(Duration::from_millis(200)))?;
        let mut buf = [0u8; ANSWER_BYTES];
        let (n, fds) = gust_transport::handoff::recv(&s, &mut buf)?;
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        if n != ANSWER_BYTES || buf[..8] != ANSWER_MAGIC || fds.len() != 1 {
            return Err(bad("not a node cache's answer"));
        }
        let table = Table::open(&fds[0])?;
        *self.node.table.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(table));
        self.node.connected.store(true, Ordering::Release);
        Ok(s)
    }

    /// The holder's socket: beside the Unix socket of this node's first daemon.
    fn node_cache_socket(&self) -> Option<PathBuf> {
        let first = (0..self.transport.links_len()).find_map(|d| self.transport.short_circuit_socket(d))?;
        Some(first.with_file_name(SOCKET_NAME))
    }

    /// Lookups this process answered from the node cache (tests, `gust bench`).
    pub fn node_cache_hits(&self) -> u64 {
        self.node.hits.load(Ordering::Relaxed)
    }
}

/// One message of paths: length (u32 LE), then the paths, each ended by a NUL.
fn hint_message(paths: &[String]) -> Vec<u8> {
    let mut body = Vec::new();
    for p in paths {
        if body.len() + p.len() + 1 > HINT_BYTES_MAX - 4 {
            break;
        }
        body.extend_from_slice(p.as_bytes());
        body.push(0);
    }
    let mut msg = (body.len() as u32).to_le_bytes().to_vec();
    msg.extend_from_slice(&body);
    msg
}

/// The paths of a message's body (invalid ones left out).
pub(crate) fn hint_paths(body: &[u8]) -> Vec<String> {
    body.split(|&b| b == 0)
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter(|p| gust_proto::path::validate(p).is_ok())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_paths_expire_and_stay_bounded() {
        let mut r = Recent::new(Duration::from_secs(60), 2);
        r.note("/a");
        r.note("/b");
        assert!(r.contains("/a") && r.contains("/b") && !r.contains("/c"));
        // Past the bound with nothing expired: all go, the new one stays.
        r.note("/c");
        assert!(!r.contains("/a") && !r.contains("/b") && r.contains("/c"));
        let mut gone = Recent::new(Duration::ZERO, 2);
        gone.note("/a");
        assert!(!gone.contains("/a"), "past its window");
    }

    #[test]
    fn hint_messages_carry_their_paths_and_nothing_else() {
        let paths: Vec<String> = vec!["/a/b".into(), "/c".into()];
        let msg = hint_message(&paths);
        assert_eq!(u32::from_le_bytes(msg[..4].try_into().unwrap()) as usize, msg.len() - 4);
        assert_eq!(hint_paths(&msg[4..]), paths);
        // Not paths: left out.
        assert_eq!(hint_paths(b"relative\0/ok\0\xff\xfe\0"), vec!["/ok".to_string()]);
        // A message never passes the bound, however long its paths.
        let long: Vec<String> = (0..100).map(|i| format!("/{}{i}", "x".repeat(2000))).collect();
        assert!(hint_message(&long).len() <= HINT_BYTES_MAX);
    }
}
