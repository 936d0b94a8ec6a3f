//! Short-circuit I/O, the client's side (docs/DESIGN.md, "Short-circuit I/O"):
//! the chunks a daemon of this node holds of a file are read and written in the
//! daemon's local file itself, which the daemon handed this process (two
//! descriptors over its short-circuit socket, gust-daemon's short_circuit.rs),
//! instead of a request per transfer that copies every byte through a socket
//! twice. Blocks are verified and summed as the daemon's chunk store does
//! (gust-store's `chunk_file`, the same code).
//!
//! * **When.** Once this process has sent `CALLBACK_AFTER` requests to a daemon
//!   of its node it opens the callback connection (grants.rs) and asks for the
//!   local file of each file it reads or writes there. Until then, and whenever the
//!   daemon refuses (another process uses the file: no ask for `REFUSED_FOR`),
//!   transfers are requests as before.
//! * **Taken back.** The daemon recalls a handed file before it serves any request
//!   that reads or changes the file's chunks (this process's own too): the recall
//!   (on the callback connection's thread) takes the file out of the table, waits
//!   for the transfers using it to end, and closes it before the answer. A file is
//!   used only under the daemon's lease (`Cache::usable`), and goes with the
//!   callback connection (the daemon ended) and at a fork (the child is another
//!   client). An ask whose answer crosses a recall is thrown away (a generation
//!   count, as for grants).
//! * **Sizes** go to the metadata daemon as for every write (size_cache.rs);
//!   spills (a full disk: ENOSPC) and holes are sent and read as requests.
//! * **Off** with `GUST_SHORT_CIRCUIT=0`, with copies (the daemons refuse), without
//!   grants, and on other nodes (there is no local file to hand).
//!
//! Not for: choosing daemons (routing.rs), the wire (rpc.rs).

use gust_proto::short_circuit::{self as sc, Ask};
use gust_store::chunk_file::{Access, Local};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// After a refusal, no ask for the same file of the same daemon for this long
/// (the daemon's own contention window is 1 s).
const REFUSED_FOR: Duration = Duration::from_secs(1);

/// Transfers through one open file description before a daemon of this node is
/// asked for the file: a file written or read once (a small file, `cp` of
/// one) costs no ask, no local file the daemon opens for it, and no recall at
/// its removal.
pub(crate) const ASK_AFTER: u32 = 4;

/// Bound on local files held at once (two descriptors each, counted against the
/// process's descriptor limit with the application's own): past it no more are
/// asked. A file's go at the last close of a description that asked for them.
const HANDED_MAX: usize = 64;

/// A local file this process was handed, while it may use it.
pub(crate) struct Handed {
    local: Local,
    /// False once recalled: the recall holds the write side until the transfers
    /// under way (each holding the read side) have ended.
    usable: RwLock<bool>,
}

impl Handed {
    /// Runs `io` on the local file unless it was taken back (then None).
    pub(crate) fn with<T>(&self, io: impl FnOnce(&Local) -> T) -> Option<T> {
        let ok = self.usable.read().unwrap_or_else(|e| e.into_inner());
        (*ok).then(|| io(&self.local))
    }
}

/// The files this process holds, by (daemon, file id); shared with the recall
/// handlers (grants.rs).
pub(crate) struct Table {
    map: RwLock<HashMap<(u32, u128), Arc<Handed>>>,
    /// Bumped by every forget: an ask installs its file only if this did not move.
    generation: AtomicU64,
    /// No ask for these before the time (ms on the grants clock).
    refused: Mutex<HashMap<(u32, u128), u64>>,
    /// A daemon's socket, per daemon, with the fork generation that opened it.
    sockets: Vec<Mutex<Option<(u64, UnixStream)>>>,
    /// How blocks are read and written with their sums in this process.
    pub(crate) access: Access,
}

impl Table {
    pub(crate) fn new(daemons: usize, chunk_bytes: u64, trim_holes: bool) -> Table {
        Table {
            map: RwLock::default(),
            generation: AtomicU64::new(0),
            refused: Mutex::default(),
            sockets: (0..daemons).map(|_| Mutex::new(None)).collect(),
            access: Access::new(format!("short-circuit client {}", std::process::id()), chunk_bytes, trim_holes),
        }
    }

    pub(crate) fn get(&self, daemon: u32, file_id: u128) -> Option<Arc<Handed>> {
        self.map.read().unwrap_or_else(|e| e.into_inner()).get(&(daemon, file_id)).cloned()
    }

    /// A recall of the file's data key: out of the table, then closed once its
    /// transfers under way have ended.
    pub(crate) fn forget(&self, daemon: u32, file_id: u128) {
        self.forget_where(|k| k == (daemon, file_id));
    }

    /// Every daemon's local file of `file_id` (this process closed it): the
    /// daemon's grant stays until its next recall, which finds nothing to close.
    pub(crate) fn forget_file(&self, file_id: u128) {
        self.forget_where(|k| k.1 == file_id);
    }

    /// Every file of `daemon` (its callback connection or lease ended).
    pub(crate) fn forget_daemon(&self, daemon: u32) {
        self.forget_where(|k| k.0 == daemon);
    }

    /// Takes the files whose (daemon, file id) `which` picks out of the table,
    /// then closes each once its transfers under way have ended.
    fn forget_where(&self, which: impl Fn((u32, u128)) -> bool) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let gone: Vec<Arc<Handed>> = {
            let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
            let keys: Vec<_> = m.keys().copied().filter(|&k| which(k)).collect();
            keys.into_iter().filter_map(|k| m.remove(&k)).collect()
        };
        for h in gone {
            *h.usable.write().unwrap_or_else(|e| e.into_inner()) = false;
        }
    }

    /// In a child after fork: the parent's files and sockets are the parent's
    /// (dropping this process's copies of the descriptors leaves the parent's
    /// open). Whether every lock could be taken.
    pub(crate) fn forget_all_after_fork(&self) -> bool {
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut clean = true;
        match self.map.try_write() {
            Ok(mut m) => m.clear(),
            Err(_) => clean = false,
        }
        for s in &self.sockets {
            match s.try_lock() {
                Ok(mut s) => *s = None,
                Err(_) => clean = false,
            }
        }
        clean
    }

    fn refused_until(&self, daemon: u32, file_id: u128) -> u64 {
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).get(&(daemon, file_id)).copied().unwrap_or(0)
    }

    fn refuse(&self, daemon: u32, file_id: u128, until_ms: u64) {
        let mut r = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if r.len() >= 4 * HANDED_MAX {
            r.clear();
        }
        r.insert((daemon, file_id), until_ms);
    }

    /// Asks `daemon` (its socket at `path`) for the local file of `file_id` as
    /// client `client`. Ok(None): refused (`errno`) or thrown away (a recall
    /// crossed it).
    fn ask(&self, daemon: u32, path: &Path, client: u64, file_id: u128) -> std::io::Result<Result<Arc<Handed>, i32>> {
        let generation = self.generation.load(Ordering::SeqCst);
        let fork = crate::rpc::fork_generation();
        let slot = &self.sockets[daemon as usize];
        let mut sock = slot.lock().unwrap_or_else(|e| e.into_inner());
        if sock.as_ref().is_some_and(|(g, _)| *g != fork) {
            // The parent's socket: this process's copy is dropped, the parent's
            // stays open.
            *sock = None;
        }
        if sock.is_none() {
            let s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            *sock = Some((fork, s));
        }
        let s = &sock.as_ref().expect("connected above").1;
        let exchanged = gust_transport::handoff::send(s, &Ask { client, file_id }.encode(), &[]).and_then(|()| {
            let mut buf = [0u8; sc::ANSWER_BYTES];
            gust_transport::handoff::recv(s, &mut buf).map(|(n, fds)| (sc::decode_answer(&buf[..n]), fds))
        });
        let (answer, fds) = match exchanged {
            Ok(x) => x,
            Err(e) => {
                *sock = None;
                return Err(e);
            }
        };
        drop(sock);
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        match answer {
            Some(0) if fds.len() == 2 => {
                let mut fds = fds.into_iter();
                let data = std::fs::File::from(fds.next().expect("two"));
                let sums = std::fs::File::from(fds.next().expect("two"));
                let h = Arc::new(Handed { local: Local::from_files(data, sums), usable: RwLock::new(true) });
                let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
                if self.generation.load(Ordering::SeqCst) != generation || m.len() >= HANDED_MAX {
                    // A recall crossed the answer: the daemon may already have
                    // served another request of the file.
                    return Ok(Err(libc::EAGAIN));
                }
                m.insert((daemon, file_id), h.clone());
                Ok(Ok(h))
            }
            Some(0) => Err(bad("short-circuit answer without its two descriptors")),
            Some(e) => Ok(Err(e)),
            None => Err(bad("not a short-circuit answer")),
        }
    }
}

impl crate::Client {
    /// Closes the local files of `file_id` this process holds, if any.
    pub(crate) fn forget_handed(&self, file_id: u128) {
        if let Some(t) = self.transport.grants.short_circuit() {
            t.forget_file(file_id);
        }
    }

    /// Whether a transfer through `f` may ask for a local file (`ASK_AFTER`);
    /// counts it.
    pub(crate) fn may_ask(f: &crate::open_files::OpenFile) -> bool {
        f.transfers.load(Ordering::Relaxed) >= ASK_AFTER || f.transfers.fetch_add(1, Ordering::Relaxed) >= ASK_AFTER
    }

    /// The local file of `file_id`'s chunks at `daemon` if this process may read
    /// and write it itself now (module doc); None: send requests. Without `ask`,
    /// only one held already.
    pub(crate) fn handed(&self, daemon: u32, file_id: u128, ask: bool) -> Option<Arc<Handed>> {
        let g = &self.transport.grants;
        let table = g.short_circuit()?;
        if !ask {
            return table.get(daemon, file_id).filter(|_| g.lease(daemon) == Some(false));
        }
        let path = self.transport.short_circuit_socket(daemon)?;
        if !g.link_up(daemon) {
            // The callback connection a recall comes on, now: this file had
            // `ASK_AFTER` transfers already.
            let ep = self.transport.callback_endpoint(daemon).filter(|_| g.link_due(daemon))?;
            if !g.open_link(daemon, &ep, self.transport.secret(), self.transport.timeout()) {
                return None;
            }
        }
        if g.lease(daemon) != Some(false) {
            // No lease yet, or half of it gone: any leased reply renews it.
            let _ = self.transport.call(daemon, gust_proto::Request::Ping);
            g.lease(daemon)?;
        }
        if let Some(h) = table.get(daemon, file_id) {
            return Some(h);
        }
        let now = g.clock_ms();
        if table.refused_until(daemon, file_id) > now {
            return None;
        }
        match table.ask(daemon, &path, g.client_id(), file_id) {
            Ok(Ok(h)) => Some(h),
            Ok(Err(e)) => {
                let how_long = match e {
                    // Never for this daemon's files: copies, a declared capacity.
                    libc::EOPNOTSUPP => u64::MAX / 2,
                    _ => REFUSED_FOR.as_millis() as u64,
                };
                table.refuse(daemon, file_id, now + how_long);
                None
            }
            Err(e) => {
                tracing::debug!(daemon, "short-circuit socket: {e}");
                table.refuse(daemon, file_id, now + REFUSED_FOR.as_millis() as u64);
                None
            }
        }
    }
}
