//! What this process caches under grants: records (and small files' inline data)
//! that their metadata daemons let it keep until they recall them (docs/DESIGN.md,
//! "Grants"; the daemon's half is gust-daemon's grants.rs).
//!
//! * Every connection to a daemon starts with `hello` (this process's random id,
//!   new after fork). Once this process has asked a daemon `CALLBACK_AFTER`
//!   lookups, it opens a `callback` connection to it, whose reader thread answers
//!   the daemon's `recall`s at once, whatever the application is doing.
//! * A stat, an open's `stat_data` or a create whose reply carries
//!   `REPLY_GRANTED` leaves its record here; lookups of that path are then answered
//!   from here, with no request, until a recall (another process is about to change
//!   it), this process's own change of it (forgotten when the request is sent and
//!   again when its reply comes), or the end of the lease.
//! * The lease: each reply with `REPLY_LEASED` extends the daemon's grants to one
//!   `LEASE` after its request was sent. A lookup finding less than half of it left
//!   renews it with a ping; one finding it over (the process was stopped, the
//!   daemon cut off) forgets all of that daemon's grants. So does the end of the
//!   callback connection (the daemon restarted or closed it).
//! * A reply installs its record only if nothing was forgotten since its request
//!   was sent (`Ticket`): a recall or a change may overtake the reply it concerns.
//!
//! Off with `GUST_GRANTS=0`, with copies (replicas), through the node proxy and in
//! cache mode. Bounded: `ENTRIES_MAX` records and `DATA_BYTES_MAX` bytes of data.

use gust_proto::{Record, Request, Response};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// The daemon's lease (gust-daemon's grants::LEASE).
pub const LEASE: Duration = Duration::from_secs(2);
/// Lookups of a daemon before this process opens a callback connection to it: a
/// short-lived process (`ls`, `cat`) never pays for one.
pub const CALLBACK_AFTER: u32 = 8;
/// Bound on records cached.
pub const ENTRIES_MAX: usize = 1 << 17;
/// Bound on inline data cached, in bytes.
pub const DATA_BYTES_MAX: usize = 64 << 20;
/// After a daemon refused a callback connection (or could not be reached), this
/// process does not ask it again for this long.
const RETRY_AFTER: Duration = Duration::from_secs(5);

type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<ahash::AHasher>>;

/// The descriptors of every callback connection of this process, so that a child
/// after fork closes its copies at once (`close_parents_callbacks`, in the fork
/// handler: only atomics and close(2) there). Otherwise the parent's exit would not
/// end its callback connections while the child lives, and the daemons would wait
/// out the parent's lease before changes of what it held. -1: a free slot.
static CALLBACK_FDS: [std::sync::atomic::AtomicI32; CALLBACK_FDS_MAX] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; CALLBACK_FDS_MAX];
/// Slots of `CALLBACK_FDS`: two descriptors per daemon and client (a process with
/// more simply keeps the rest open in its children).
const CALLBACK_FDS_MAX: usize = 512;

/// One callback connection's entries in `CALLBACK_FDS`. They must leave it before
/// the descriptors close (the connection's end, its replacement, the client's
/// drop): a number left there could name another file by the next fork, and the
/// child would close that.
#[derive(Default)]
struct LinkFds {
    fds: Vec<i32>,
    ended: bool,
}

impl LinkFds {
    /// The connection is up: its descriptors go in, unless it ended already.
    fn register(&mut self, fds: &[i32]) {
        if self.ended {
            return;
        }
        for &fd in fds {
            if CALLBACK_FDS.iter().any(|s| s.compare_exchange(-1, fd, Ordering::SeqCst, Ordering::SeqCst).is_ok()) {
                self.fds.push(fd);
            }
        }
    }

    /// Its descriptors are about to close: out they go.
    fn unregister(&mut self) {
        for fd in self.fds.drain(..) {
            let _ = CALLBACK_FDS.iter().any(|s| s.compare_exchange(fd, -1, Ordering::SeqCst, Ordering::SeqCst).is_ok());
        }
    }
}

/// In a child after fork: closes its copies of the parent's callback connections
/// (async-signal-safe: atomics and close(2)). The connections' objects are
/// forgotten later, never dropped (`Cache::start_over`).
pub(crate) fn close_parents_callbacks() {
    for slot in &CALLBACK_FDS {
        let fd = slot.swap(-1, Ordering::SeqCst);
        if fd >= 0 {
            // SAFETY: a descriptor this process inherited for a callback connection
            // nothing in the child uses.
            unsafe { libc::close(fd) };
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A cached record: its daemon, and its inline data if known (`None`: not asked;
/// `Some(None)`: the file's data is not inline).
struct Entry {
    daemon: u32,
    record: Record,
    data: Option<Option<Arc<[u8]>>>,
}

/// One daemon's side of this process's grants.
#[derive(Default)]
struct DaemonGrants {
    /// The callback connection (with the fork generation that opened it).
    link: Mutex<Option<(u64, Arc<gust_rpc::Connection>)>>,
    /// Its descriptors in `CALLBACK_FDS`.
    fds: Mutex<Option<Arc<Mutex<LinkFds>>>>,
    /// The callback connection is open; cleared by its end.
    up: Arc<AtomicBool>,
    /// Grants of this daemon may be used until then (ms since `Cache::epoch`).
    valid_until_ms: AtomicU64,
    /// Lookups sent to this daemon (up to `CALLBACK_AFTER`).
    lookups: AtomicU32,
    /// No new callback connection before then (ms since `Cache::epoch`).
    retry_at_ms: AtomicU64,
}

/// Told the daemon whose grants were all forgotten (`Cache::on_daemon_forgotten`).
type DaemonListener = Arc<dyn Fn(u32) + Send + Sync>;

/// Told each path a daemon recalls, after this process forgot it and before the
/// recall is answered (`Client::on_recall`).
pub type RecallListener = Arc<dyn Fn(&str) + Send + Sync>;

/// The sizes this process holds back under daemons' grants (size_cache.rs): a
/// recall gives them up, and the end of a daemon's callback connection ends them.
pub(crate) trait SizeHolder: Send + Sync {
    /// `daemon` recalls the hold on `path`'s size: what this process held.
    fn give_up(&self, daemon: u32, path: &str) -> Vec<gust_proto::HeldSize>;
    /// `daemon`'s callback connection ended: its holds are gone there.
    fn lost(&self, daemon: u32);
}

/// The cached records: shared with the callback connections' reader threads.
#[derive(Default)]
struct Records {
    map: RwLock<FastMap<String, Entry>>,
    data_bytes: AtomicU64,
    /// Bumped by every forget: a reply installs its record only if this did not
    /// move since its request was sent.
    generation: AtomicU64,
    /// Who else caches what these grants cover (a FUSE mount's kernel).
    listener: RwLock<Option<RecallListener>>,
    /// Directories whose names every daemon granted (`REPLY_LISTED`): what a
    /// listing returned, until a recall of the directory's listing key, a change of
    /// a name there by this process, or a daemon's lease ends.
    listings: RwLock<FastMap<String, Listing>>,
    listing_entries: AtomicU64,
    /// Bumped whenever a listing is forgotten: a listing installs only if this did
    /// not move since it started.
    listing_generation: AtomicU64,
    next_listing_id: AtomicU64,
    /// Claims held (claims.rs).
    pub(crate) claims: crate::claims::Held,
    /// Local files handed by daemons of this node (short_circuit.rs), if on.
    short: Option<crate::short_circuit::Table>,
    /// Sizes held back (size_cache.rs), once the client registered itself.
    sizes: RwLock<Option<Arc<dyn SizeHolder>>>,
    /// Told when every grant of a daemon is forgotten (a node cache's holder
    /// empties its table of that daemon's entries: node_cache/holder.rs).
    daemon_listener: RwLock<Option<DaemonListener>>,
}

/// A directory's names under listing grants of every daemon.
#[derive(Clone)]
pub(crate) struct Listing {
    /// Distinct for every listing installed (a FUSE mount compares it with what its
    /// kernel cached).
    pub id: u64,
    pub entries: Arc<[gust_proto::DirEntry]>,
}

/// Bound on the names of one directory kept as a listing.
pub const LISTING_ENTRIES_MAX: usize = 1 << 16;
/// Bound on the names of all listings kept (about 64 MiB at the bound).
const LISTINGS_ENTRIES_MAX: u64 = 1 << 20;

impl Records {
    fn forget(&self, p: &str) {
        if let Some(dir) = gust_proto::path::listing_dir(p) {
            self.forget_listing(dir);
            return;
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = m.remove(p) {
            self.release(&e);
        }
    }

    /// `dir`'s names may have changed: its listing goes (records stay).
    fn forget_listing(&self, dir: &str) {
        self.listing_generation.fetch_add(1, Ordering::SeqCst);
        let mut l = self.listings.write().unwrap_or_else(|e| e.into_inner());
        if let Some(gone) = l.remove(dir) {
            self.listing_entries.fetch_sub(gone.entries.len() as u64, Ordering::Relaxed);
        }
    }

    fn forget_listings(&self) {
        self.listing_generation.fetch_add(1, Ordering::SeqCst);
        self.listings.write().unwrap_or_else(|e| e.into_inner()).clear();
        self.listing_entries.store(0, Ordering::Relaxed);
    }

    fn forget_daemon(&self, daemon: u32) {
        if let Some(t) = &self.short {
            t.forget_daemon(daemon);
        }
        // What this process deferred under them goes out at its next path
        // operation, no longer held back (claims.rs).
        self.claims.lost_daemon(daemon);
        // So do the sizes it held there (size_cache.rs).
        if let Some(h) = self.size_holder() {
            h.lost(daemon);
        }
        // Every listing has names of every daemon.
        self.forget_listings();
        self.generation.fetch_add(1, Ordering::SeqCst);
        // After the generation moved: an install racing this either sees it moved
        // or is taken out by the listener.
        let listener = self.daemon_listener.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(tell) = listener {
            tell(daemon);
        }
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        if m.is_empty() {
            return;
        }
        let mut freed = 0u64;
        m.retain(|_, e| {
            let keep = e.daemon != daemon;
            if !keep {
                freed += data_len(e);
            }
            keep
        });
        self.data_bytes.fetch_sub(freed, Ordering::Relaxed);
    }

    /// Who holds sizes back in this process, once registered (size_cache.rs).
    fn size_holder(&self) -> Option<Arc<dyn SizeHolder>> {
        self.sizes.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn release(&self, e: &Entry) {
        self.data_bytes.fetch_sub(data_len(e), Ordering::Relaxed);
    }
}

fn data_len(e: &Entry) -> u64 {
    e.data.as_ref().and_then(|d| d.as_ref()).map_or(0, |d| d.len() as u64)
}

/// A record answered from a grant.
pub(crate) struct Held {
    pub record: Record,
    /// Its inline data if known (see `Entry`).
    pub data: Option<Option<Arc<[u8]>>>,
    pub daemon: u32,
    /// Less than half of the lease is left: ping the daemon after using it.
    pub renew: bool,
}

/// What a lookup remembers of the moment its request was sent.
#[derive(Clone, Copy)]
pub(crate) struct Ticket {
    generation: u64,
    listing_generation: u64,
}

/// This process's grants, from every daemon.
pub(crate) struct Cache {
    on: bool,
    /// In a child after fork that found a lock of its parent's held (another of
    /// the parent's threads had it at the fork, and that thread does not exist
    /// here): grants are off for good in this process, which never waits on it.
    off_after_fork: AtomicBool,
    /// This process's locks and their waits (locks.rs): they live by the callback
    /// connections too, whether grants are on or not.
    pub(crate) locks: Arc<crate::locks::LockTable>,
    records: Arc<Records>,
    daemons: Vec<DaemonGrants>,
    /// How many of them hold data in the layout routed by (layout.rs): a listing
    /// is whole with the grants of these.
    placed: AtomicU32,
    /// This process's id, of fork generation `id_generation`: a child after fork is
    /// another client. Every lookup checks the generation, so both are atomics; a
    /// child's first call starts over under `starting_over`.
    id: AtomicU64,
    id_generation: AtomicU64,
    starting_over: Mutex<()>,
    epoch: Instant,
    /// Lookups of a daemon before a callback connection to it (`CALLBACK_AFTER`;
    /// 0 for a process that lives long, `Client::set_long_lived`).
    callback_after: AtomicU32,
    /// What this client caches serves other processes too (a node cache's
    /// holder): its callback connections say so.
    shared: AtomicBool,
}

fn new_id() -> u64 {
    use rand::Rng;
    // The OS generator: this may run at exit, after thread-locals are gone.
    loop {
        let id: u64 = rand::rngs::OsRng.gen();
        if id != 0 {
            return id;
        }
    }
}

impl Cache {
    pub(crate) fn new(daemons: usize, on: bool, short: Option<crate::short_circuit::Table>) -> Cache {
        Cache {
            on,
            off_after_fork: AtomicBool::new(false),
            locks: Arc::new(crate::locks::LockTable::default()),
            records: Arc::new(Records { short, ..Records::default() }),
            daemons: (0..daemons).map(|_| DaemonGrants::default()).collect(),
            placed: AtomicU32::new(daemons as u32),
            id: AtomicU64::new(new_id()),
            id_generation: AtomicU64::new(crate::rpc::fork_generation()),
            starting_over: Mutex::new(()),
            epoch: Instant::now(),
            callback_after: AtomicU32::new(CALLBACK_AFTER),
            shared: AtomicBool::new(false),
        }
    }

    pub(crate) fn on(&self) -> bool {
        self.on && !self.off_after_fork.load(Ordering::Relaxed)
    }

    /// The daemons that hold data now (layout.rs).
    pub(crate) fn set_placed(&self, n: u32) {
        self.placed.store(n, Ordering::Release);
    }

    fn placed(&self) -> u32 {
        self.placed.load(Ordering::Acquire).min(self.daemons.len() as u32)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// This process's id (`hello`, `callback`). After a fork the child starts over:
    /// a new id, nothing cached, no callback connection (the parent's stay its own).
    pub(crate) fn client_id(&self) -> u64 {
        let generation = crate::rpc::fork_generation();
        if self.id_generation.load(Ordering::Acquire) != generation {
            let _one = lock(&self.starting_over);
            if self.id_generation.load(Ordering::Acquire) != generation {
                self.start_over(generation);
                self.id.store(new_id(), Ordering::Release);
                self.id_generation.store(generation, Ordering::Release);
            }
        }
        self.id.load(Ordering::Acquire)
    }

    /// In a child after fork: nothing of the parent's grants, connections or locks
    /// is used. Locks are only tried: another thread of the parent may have held
    /// one at the fork (a recall being answered), and it would never be released
    /// here; then grants stay off in this process (`off_after_fork`).
    fn start_over(&self, generation: u64) {
        let mut clean = true;
        for d in &self.daemons {
            match d.link.try_lock() {
                Ok(mut link) => {
                    if let Some((g, c)) = link.take() {
                        if g != generation {
                            // The parent's: closing it would shut the parent's socket
                            // (the fork handler closed this process's copies of its
                            // descriptors).
                            match Arc::try_unwrap(c) {
                                Ok(c) => c.abandon_after_fork(),
                                Err(c) => std::mem::forget(c),
                            }
                        }
                    }
                }
                Err(_) => clean = false,
            }
            // The fork handler emptied the registry: these numbers are not in it
            // (unregistering them could take out a new connection's).
            match d.fds.try_lock() {
                Ok(mut fds) => {
                    if let Some(f) = fds.take() {
                        match f.try_lock() {
                            Ok(mut f) => f.fds.clear(),
                            Err(_) => clean = false,
                        }
                    }
                }
                Err(_) => clean = false,
            }
            d.up.store(false, Ordering::SeqCst);
            d.valid_until_ms.store(0, Ordering::SeqCst);
        }
        self.records.generation.fetch_add(1, Ordering::SeqCst);
        self.records.listing_generation.fetch_add(1, Ordering::SeqCst);
        if let Some(t) = &self.records.short {
            if !t.forget_all_after_fork() {
                clean = false;
            }
        }
        // The parent's claims are the parent's (it sends what it deferred).
        if !self.records.claims.forget_all_after_fork() {
            clean = false;
        }
        match self.records.map.try_write() {
            Ok(mut m) => {
                m.clear();
                self.records.data_bytes.store(0, Ordering::Relaxed);
            }
            Err(_) => clean = false,
        }
        match self.records.listings.try_write() {
            Ok(mut l) => {
                l.clear();
                self.records.listing_entries.store(0, Ordering::Relaxed);
            }
            Err(_) => clean = false,
        }
        if !clean {
            self.off_after_fork.store(true, Ordering::Relaxed);
        }
        self.locks.forget_all();
    }

    /// The local files handed to this process (short_circuit.rs), if on.
    pub(crate) fn short_circuit(&self) -> Option<&crate::short_circuit::Table> {
        self.client_id();
        if !self.on() {
            return None;
        }
        self.records.short.as_ref()
    }

    /// `usable`, for short_circuit.rs.
    pub(crate) fn lease(&self, daemon: u32) -> Option<bool> {
        self.usable(daemon)
    }

    /// Whether grants of `daemon` may be used now; `renew` true when less than half
    /// of the lease is left.
    fn usable(&self, daemon: u32) -> Option<bool> {
        let d = self.daemons.get(daemon as usize)?;
        if !d.up.load(Ordering::Acquire) {
            return None;
        }
        let now = self.now_ms();
        let until = d.valid_until_ms.load(Ordering::Acquire);
        if now >= until {
            // The lease ran out: the daemon may have taken these grants back.
            if until != 0 {
                d.valid_until_ms.store(0, Ordering::Release);
                self.records.forget_daemon(daemon);
            }
            return None;
        }
        Some(until - now < LEASE.as_millis() as u64 / 2)
    }

    /// The cached record of `p` (and, with `data`, only if its inline data is known
    /// too), if its grant may be used.
    pub(crate) fn get(&self, p: &str, with_data: bool) -> Option<Held> {
        self.client_id();
        if !self.on() {
            return None;
        }
        let (record, data, daemon) = {
            let m = self.records.map.read().unwrap_or_else(|e| e.into_inner());
            let e = m.get(p)?;
            if with_data && e.data.is_none() {
                return None;
            }
            (e.record.clone(), e.data.clone(), e.daemon)
        };
        let renew = self.usable(daemon)?;
        Some(Held { record, data, daemon, renew })
    }

    /// What is left of the lease of the grant this process holds on `p`'s record
    /// (zero: none, or it may not be used).
    pub(crate) fn left(&self, p: &str) -> Duration {
        self.client_id();
        if !self.on() {
            return Duration::ZERO;
        }
        let daemon = {
            let m = self.records.map.read().unwrap_or_else(|e| e.into_inner());
            match m.get(p) {
                Some(e) => e.daemon,
                None => return Duration::ZERO,
            }
        };
        if self.usable(daemon).is_none() {
            return Duration::ZERO;
        }
        let until = self.daemons[daemon as usize].valid_until_ms.load(Ordering::Acquire);
        Duration::from_millis(until.saturating_sub(self.now_ms()))
    }

    /// Claims held, and what settles what was deferred under them (claims.rs).
    pub(crate) fn claims(&self) -> &crate::claims::Held {
        &self.records.claims
    }

    /// Sets who gives up held sizes at a recall (size_cache.rs).
    pub(crate) fn set_size_holder(&self, h: Arc<dyn SizeHolder>) {
        *self.records.sizes.write().unwrap_or_else(|e| e.into_inner()) = Some(h);
    }

    /// Sets who is told of recalls (see `RecallListener`).
    pub(crate) fn set_listener(&self, l: RecallListener) {
        *self.records.listener.write().unwrap_or_else(|e| e.into_inner()) = Some(l);
    }

    /// Before a lookup's request: whether to count it toward a callback connection,
    /// and the ticket its reply installs with.
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            generation: self.records.generation.load(Ordering::SeqCst),
            listing_generation: self.records.listing_generation.load(Ordering::SeqCst),
        }
    }

    /// Whether `daemon` should get a callback connection now (this process looked
    /// up enough there and has none).
    pub(crate) fn wants_link(&self, daemon: u32) -> bool {
        self.client_id();
        if !self.on() {
            return false;
        }
        let Some(d) = self.daemons.get(daemon as usize) else { return false };
        if d.up.load(Ordering::Acquire) {
            return false;
        }
        if d.lookups.load(Ordering::Relaxed) < self.callback_after.load(Ordering::Relaxed) {
            d.lookups.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        d.retry_at_ms.load(Ordering::Relaxed) <= self.now_ms()
    }

    /// Whether `daemon` should get a callback connection before a create: at once,
    /// for a process that takes claims (the create may bring one, claims.rs, and
    /// only on a callback connection).
    pub(crate) fn wants_link_to_create(&self, daemon: u32) -> bool {
        if !self.records.claims.armed() {
            return self.wants_link(daemon);
        }
        self.client_id();
        if !self.on() {
            return false;
        }
        let Some(d) = self.daemons.get(daemon as usize) else { return false };
        !d.up.load(Ordering::Acquire) && d.retry_at_ms.load(Ordering::Relaxed) <= self.now_ms()
    }

    /// Whether a callback connection to `daemon` may be opened now, however few
    /// lookups it served (short_circuit.rs: a file this process transfers much of).
    pub(crate) fn link_due(&self, daemon: u32) -> bool {
        self.client_id();
        if !self.on() {
            return false;
        }
        let Some(d) = self.daemons.get(daemon as usize) else { return false };
        !d.up.load(Ordering::Acquire) && d.retry_at_ms.load(Ordering::Relaxed) <= self.now_ms()
    }

    /// Whether the callback connection to `daemon` is open (in this process).
    pub(crate) fn link_up(&self, daemon: u32) -> bool {
        self.client_id();
        self.daemons.get(daemon as usize).is_some_and(|d| d.up.load(Ordering::Acquire))
    }

    /// The daemon says it holds no callback connection of this process (it ended
    /// it: this process was silent too long; the end may not have reached the
    /// reader thread yet): the connection is closed here too, and what lived by it
    /// goes now, so that `open_link` opens a new one.
    pub(crate) fn drop_link(&self, daemon: u32) {
        let Some(d) = self.daemons.get(daemon as usize) else { return };
        let mut link = lock(&d.link);
        if let Some((g, c)) = link.take() {
            if g == crate::rpc::fork_generation() {
                if let Some(f) = lock(&d.fds).as_ref() {
                    lock(f).unregister();
                }
                c.close();
            } else {
                std::mem::forget(c);
            }
        }
        d.up.store(false, Ordering::SeqCst);
        self.records.forget_daemon(daemon);
        self.locks.daemon_lost(daemon);
    }

    /// Opens the callback connection to `daemon` on `ep`: recalls and lock grants
    /// are answered by its reader thread from then on. Whatever was cached from an
    /// earlier one is forgotten first. Whether it is open now.
    pub(crate) fn open_link(
        &self,
        daemon: u32,
        ep: &gust_transport::Endpoint,
        secret: &[u8],
        timeout: Duration,
    ) -> bool {
        let Some(d) = self.daemons.get(daemon as usize) else { return false };
        let mut link = lock(&d.link);
        if d.up.load(Ordering::Acquire) {
            return true;
        }
        let generation = crate::rpc::fork_generation();
        if let Some((g, c)) = link.take() {
            if g == generation {
                if let Some(f) = lock(&d.fds).as_ref() {
                    lock(f).unregister();
                }
                c.close();
            } else {
                std::mem::forget(c);
            }
        }
        self.records.forget_daemon(daemon);
        // A new connection, a new registration (the old one's end may still come).
        let fds = Arc::new(Mutex::new(LinkFds::default()));
        *lock(&d.fds) = Some(fds.clone());
        let mut opts = gust_rpc::Options::new(timeout);
        opts.name = "gust-recalls";
        opts.handler = Some(callback_handler(self.records.clone(), self.locks.clone(), daemon));
        let (records, locks, up) = (self.records.clone(), self.locks.clone(), d.up.clone());
        let ended_fds = fds.clone();
        opts.on_end = Some(Arc::new(move |_| link_ended(&records, &locks, &up, &ended_fds, daemon)));
        let opened = gust_rpc::Connection::open(ep, secret, opts).and_then(|c| {
            let claims = self.records.claims.armed();
            let shared = self.shared.load(Ordering::Relaxed);
            match c.call(&Request::Callback { client: self.client_id(), claims, shared }, &[], timeout) {
                Ok((Ok(Response::Ok), _)) => Ok(c),
                Ok((r, _)) => Err(gust_rpc::Error::Malformed(format!("callback refused: {r:?}"))),
                Err(e) => Err(e),
            }
        });
        match opened {
            Ok(c) => {
                lock(&fds).register(c.raw_fds());
                d.up.store(true, Ordering::SeqCst);
                *link = Some((generation, Arc::new(c)));
                true
            }
            Err(e) => {
                tracing::debug!(daemon, "no callback connection: {e}");
                d.retry_at_ms.store(self.now_ms() + RETRY_AFTER.as_millis() as u64, Ordering::Relaxed);
                false
            }
        }
    }

    /// A reply of `daemon` to a request sent at `sent_ms` came with these flags: a
    /// leased one extends the lease.
    pub(crate) fn replied(&self, daemon: u32, sent_ms: u64, flags: u16) {
        if flags & gust_proto::frame::REPLY_LEASED == 0 {
            return;
        }
        let Some(d) = self.daemons.get(daemon as usize) else { return };
        if d.up.load(Ordering::Acquire) {
            d.valid_until_ms.fetch_max(sent_ms + LEASE.as_millis() as u64, Ordering::AcqRel);
        }
    }

    /// Milliseconds since this cache's epoch: when a request is sent.
    pub(crate) fn clock_ms(&self) -> u64 {
        self.now_ms()
    }

    /// Keeps a granted record (and its inline data, if known) unless anything was
    /// forgotten since `t` was taken, or the grants of `daemon` may not be used.
    pub(crate) fn install(&self, t: Ticket, daemon: u32, p: &str, record: &Record, data: Option<Option<&[u8]>>) {
        self.client_id();
        if !self.on() || self.usable(daemon).is_none() {
            return;
        }
        // An empty record has no inline data: what `stat_data` would say.
        let data = if data.is_none() && record.size == 0 { Some(None) } else { data };
        let len = data.flatten().map_or(0, |d| d.len());
        let mut m = self.records.map.write().unwrap_or_else(|e| e.into_inner());
        if self.records.generation.load(Ordering::SeqCst) != t.generation {
            return;
        }
        if m.len() >= ENTRIES_MAX || self.records.data_bytes.load(Ordering::Relaxed) as usize + len > DATA_BYTES_MAX {
            return;
        }
        let e = Entry { daemon, record: record.clone(), data: data.map(|d| d.map(Arc::from)) };
        self.records.data_bytes.fetch_add(len as u64, Ordering::Relaxed);
        if let Some(old) = m.insert(p.to_string(), e) {
            self.records.release(&old);
        }
    }

    /// This process is about to change (or has changed) the records of `req`: its
    /// cached copies go. A create changes no existing record (it makes a new one or
    /// fails, or an open finds the existing one), so it forgets nothing, and its
    /// own reply's grant can be installed.
    pub(crate) fn changing(&self, req: &Request) {
        self.client_id();
        if !self.on() {
            return;
        }
        // A name made or taken away here: this process's listing of its directory
        // goes (the daemon recalls it from others only).
        req.names_changed(|p| self.records.forget_listing(gust_proto::path::parent(p)));
        if matches!(
            req,
            Request::Create { .. }
                | Request::CreateInline { .. }
                | Request::CreateInlineBatch { .. }
                | Request::PutRecords { .. }
        ) {
            return;
        }
        req.changed_paths(|p| self.records.forget(p));
    }

    /// The listing of `dir`, if every daemon's grant on its names may be used, and
    /// the daemons whose lease is half gone (to renew).
    fn listing(&self, dir: &str) -> Option<(Listing, Vec<u32>)> {
        self.client_id();
        if !self.on() {
            return None;
        }
        let l = self.records.listings.read().unwrap_or_else(|e| e.into_inner()).get(dir).cloned()?;
        let mut renew = Vec::new();
        for d in 0..self.placed() {
            if self.usable(d)? {
                renew.push(d);
            }
        }
        Some((l, renew))
    }

    /// Keeps `entries` as the listing of `dir` (every daemon granted its names at
    /// the listing's first page) unless a listing was forgotten since `t` was
    /// taken or a grant may not be used; its id if kept.
    pub(crate) fn install_listing(&self, t: Ticket, dir: &str, entries: Vec<gust_proto::DirEntry>) -> Option<u64> {
        self.client_id();
        if !self.on() || entries.len() > LISTING_ENTRIES_MAX {
            return None;
        }
        if !(0..self.placed()).all(|d| self.usable(d).is_some()) {
            return None;
        }
        let mut l = self.records.listings.write().unwrap_or_else(|e| e.into_inner());
        if self.records.listing_generation.load(Ordering::SeqCst) != t.listing_generation {
            return None;
        }
        let n = entries.len() as u64;
        if self.records.listing_entries.load(Ordering::Relaxed) + n > LISTINGS_ENTRIES_MAX {
            // Full: start again (listings are cheap to make again).
            l.clear();
            self.records.listing_entries.store(0, Ordering::Relaxed);
        }
        let id = self.records.next_listing_id.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(old) = l.insert(dir.to_string(), Listing { id, entries: entries.into() }) {
            self.records.listing_entries.fetch_sub(old.entries.len() as u64, Ordering::Relaxed);
        }
        self.records.listing_entries.fetch_add(n, Ordering::Relaxed);
        Some(id)
    }

    /// This client's grants serve other processes (a node cache's holder): the
    /// daemons wait out its lease however its callback connections end.
    pub(crate) fn set_shared(&self) {
        self.shared.store(true, Ordering::Relaxed);
    }

    /// Sets who is told when every grant of a daemon is forgotten.
    pub(crate) fn on_daemon_forgotten(&self, tell: impl Fn(u32) + Send + Sync + 'static) {
        *self.records.daemon_listener.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(tell));
    }

    /// What is left of the lease of `daemon`'s grants, if they may be used.
    pub(crate) fn lease_left(&self, daemon: u32) -> Option<Duration> {
        self.usable(daemon)?;
        let until = self.daemons[daemon as usize].valid_until_ms.load(Ordering::Acquire);
        Some(Duration::from_millis(until.saturating_sub(self.now_ms())))
    }

    /// Whether nothing was forgotten since `t` was taken.
    pub(crate) fn unchanged_since(&self, t: Ticket) -> bool {
        self.records.generation.load(Ordering::SeqCst) == t.generation
    }

    /// Records cached now (tests, `gust bench` reports).
    pub(crate) fn len(&self) -> usize {
        self.records.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Cache {
    /// The callback connections close with the cache: their descriptors leave the
    /// registry first (in a child after fork, they were never its own).
    fn drop(&mut self) {
        let own = self.id_generation.load(Ordering::Acquire) == crate::rpc::fork_generation();
        for d in &self.daemons {
            if let Some(f) = lock(&d.fds).take() {
                let mut f = lock(&f);
                if own {
                    f.unregister();
                } else {
                    f.fds.clear();
                }
            }
            if !own {
                if let Some((_, c)) = lock(&d.link).take() {
                    std::mem::forget(c);
                }
            }
        }
    }
}

thread_local! {
    /// Flags of the last reply this thread read (gust-proto's `REPLY_*`): a
    /// lookup's caller reads whether it was granted right after its call.
    static LAST_FLAGS: std::cell::Cell<u16> = const { std::cell::Cell::new(0) };
}

/// Notes a reply's flags for the calling thread (rpc.rs).
pub(crate) fn note_flags(flags: u16) {
    let _ = LAST_FLAGS.try_with(|f| f.set(flags));
}

/// Whether the last reply this thread read granted its record.
pub(crate) fn last_granted() -> bool {
    LAST_FLAGS.try_with(|f| f.get() & gust_proto::frame::REPLY_GRANTED != 0).unwrap_or(false)
}

/// Whether the last reply this thread read granted a claim (claims.rs).
pub(crate) fn last_claimed() -> bool {
    LAST_FLAGS.try_with(|f| f.get() & gust_proto::frame::REPLY_CLAIMED != 0).unwrap_or(false)
}

/// Whether the last reply this thread read granted a listing's names.
pub(crate) fn last_listed() -> bool {
    LAST_FLAGS.try_with(|f| f.get() & gust_proto::frame::REPLY_LISTED != 0).unwrap_or(false)
}

thread_local! {
    /// Per call of the last batch this thread sent (rpc.rs): its reply's flags
    /// (a listing page's records and names granted).
    static BATCH_FLAGS: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A batch of `n` calls starts: nothing granted yet.
pub(crate) fn batch_begin(n: usize) {
    note_flags(0);
    let _ = BATCH_FLAGS.try_with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        b.resize(n, 0);
    });
}

/// Call `i` of the batch got its answer: what the last reply read said (the
/// batch clears it before each call's answer). A single call's caller reads
/// `last_granted` afterwards as before.
pub(crate) fn batch_answered(i: usize) {
    let flags = LAST_FLAGS.try_with(|f| f.get()).unwrap_or(0);
    let _ = BATCH_FLAGS.try_with(|b| {
        if let Some(x) = b.borrow_mut().get_mut(i) {
            *x = flags;
        }
    });
}

/// The reply flags of call `i` of the last batch this thread sent.
pub(crate) fn batch_flags(i: usize) -> u16 {
    BATCH_FLAGS.try_with(|b| b.borrow().get(i).copied().unwrap_or(0)).unwrap_or(0)
}

impl crate::Client {
    /// The record of `p` (with `with_data`, and its inline data) if this process
    /// holds a usable grant on it: no request. Renews the daemon's lease when half
    /// of it is gone.
    pub(crate) fn granted_record(&self, p: &str, with_data: bool) -> Option<(Record, Option<Arc<[u8]>>)> {
        // Else another process of this node may have read it: the node cache.
        self.held_record(p, with_data).or_else(|| self.node_cached(p, with_data))
    }

    /// `granted_record` from this process's own grants alone: what it may tell a
    /// cache in front of it about (a FUSE kernel), since recalls of them come here.
    pub(crate) fn held_record(&self, p: &str, with_data: bool) -> Option<(Record, Option<Arc<[u8]>>)> {
        let held = self.transport.grants.get(p, with_data)?;
        if held.renew {
            // Any leased reply renews; if this fails, the lease runs out by itself.
            let _ = self.transport.call(held.daemon, Request::Ping);
        }
        Some((held.record, held.data.flatten()))
    }

    /// Before a lookup or create that `daemon` may grant: opens the callback
    /// connection when it is due, and takes the ticket the reply installs with.
    pub(crate) fn lookup_ticket(&self, daemon: u32) -> Option<Ticket> {
        self.ticket_for(daemon, false)
    }

    /// `lookup_ticket` for a create (see `Cache::wants_link_to_create`).
    pub(crate) fn create_ticket(&self, daemon: u32) -> Option<Ticket> {
        self.ticket_for(daemon, true)
    }

    fn ticket_for(&self, daemon: u32, create: bool) -> Option<Ticket> {
        let g = &self.transport.grants;
        if !g.on() {
            return None;
        }
        let wants = if create { g.wants_link_to_create(daemon) } else { g.wants_link(daemon) };
        if wants {
            if let Some(ep) = self.transport.callback_endpoint(daemon) {
                let _ = g.open_link(daemon, &ep, self.transport.secret(), self.transport.timeout());
            }
        }
        Some(g.ticket())
    }

    /// After a listing page of `daemon` (entries of `dir`, records as stored) came
    /// back granted: keeps every record, as a lookup's.
    pub(crate) fn listing_granted(&self, t: Option<Ticket>, daemon: u32, dir: &str, entries: &[(String, Record)]) {
        if let Some(t) = t {
            for (name, r) in entries {
                self.transport.grants.install(t, daemon, &gust_proto::path::join(dir, name), r, None);
            }
        }
    }

    /// After the reply: keeps its record (and inline data, if `data` says what it
    /// is) if the reply this thread just read granted it.
    pub(crate) fn lookup_answered(
        &self,
        t: Option<Ticket>,
        daemon: u32,
        p: &str,
        record: &Record,
        data: Option<Option<&[u8]>>,
    ) {
        if let Some(t) = t {
            if last_granted() {
                self.transport.grants.install(t, daemon, p, record, data);
            }
        }
    }

    /// A record this process made and its daemon granted (a batch of creates,
    /// create_batch.rs): kept as a lookup's.
    pub(crate) fn granted_created(
        &self,
        t: Option<Ticket>,
        daemon: u32,
        p: &str,
        record: &Record,
        data: Option<&[u8]>,
    ) {
        if let Some(t) = t {
            self.transport.grants.install(t, daemon, p, record, Some(data));
        }
    }

    /// The id of the listing of `dir` this process holds under its daemons'
    /// grants (every name, kept until a name there changes), if any: a FUSE mount
    /// lets its kernel keep its cached listing of the directory while this stays.
    pub fn listing_held(&self, dir: &str) -> Option<u64> {
        let p = crate::normalize(dir).ok()?;
        self.held_listing(&p).map(|l| l.id)
    }

    /// The listing of normalized `dir` held under every daemon's grant, renewing
    /// the leases that are half gone.
    pub(crate) fn held_listing(&self, dir: &str) -> Option<Listing> {
        let (l, renew) = self.transport.grants.listing(dir)?;
        if !renew.is_empty() {
            // Any leased reply renews; if this fails, the lease runs out by itself.
            let calls = renew.iter().map(|&d| crate::rpc::Call { daemon: d, req: Request::Ping, bulk: Vec::new() });
            let _ = self.transport.batch(calls.collect());
        }
        Some(l)
    }

    /// Records this process holds under grants now (tests).
    pub fn granted_records(&self) -> usize {
        self.transport.grants.len()
    }

    /// Whether this client caches under grants at all (not with `GUST_GRANTS=0`,
    /// copies, the node proxy or cache mode).
    pub fn grants_on(&self) -> bool {
        self.transport.grants.on()
    }

    /// The attributes of `path` (not followed) as granted to this process, and
    /// what is left of the grant's lease: how long a cache in front of this client,
    /// such as a FUSE mount's kernel, may keep them. For a name of a hard-linked
    /// file, both its record and its file's must be granted. `None` without a
    /// usable grant (no request is made). The daemon recalls before anyone changes
    /// the record, and `on_recall` says so.
    pub fn granted_lstat(&self, path: &str) -> Option<(crate::Stat, Duration)> {
        let p = crate::normalize(path).ok()?;
        let g = &self.transport.grants;
        let (mut record, _) = self.held_record(&p, false)?;
        let mut left = g.left(&p);
        if let Some(link) = record.linked_to().map(str::to_string) {
            record = self.held_record(&link, false)?.0;
            left = left.min(g.left(&link));
        }
        (!left.is_zero()).then(|| (crate::Stat::from_record(&record, self.chunk_size), left))
    }

    /// This process serves others for a long time (a FUSE mount): callback
    /// connections open at the first lookup of each daemon, so grants come from the
    /// start (a short-lived process waits for `CALLBACK_AFTER` lookups).
    pub fn set_long_lived(&self) {
        self.transport.grants.callback_after.store(0, Ordering::Relaxed);
    }

    /// Calls `tell(path)` for every path a daemon recalls from this process, on the
    /// thread that answers the recall, before the answer: the daemon lets the
    /// change go ahead only after it returns (or after this process's lease), so
    /// a cache in front of this client drops its copy there (a FUSE mount's kernel
    /// entries and pages). One listener; a later call replaces it.
    pub fn on_recall(&self, tell: impl Fn(&str) + Send + Sync + 'static) {
        self.transport.grants.set_listener(Arc::new(tell));
    }
}

/// The handler of a callback connection's requests: recalls, lock grants and
/// liveness questions from `daemon`, answered on its reader thread without waiting
/// for the application.
fn callback_handler(records: Arc<Records>, locks: Arc<crate::locks::LockTable>, daemon: u32) -> gust_rpc::Handler {
    Arc::new(move |req: Request, _bulk: Vec<u8>| match req {
        Request::Recall { paths } => (Ok(answer_recall(&records, daemon, &paths)), Vec::new()),
        Request::LockGranted { token, errno } => {
            locks.granted(token, errno);
            (Ok(Response::Ok), Vec::new())
        }
        // The daemon asks whether this process is alive (it holds locks others want).
        Request::Ping => (Ok(Response::Ok), Vec::new()),
        _ => (Err(libc::ENOSYS), Vec::new()),
    })
}

/// Gives back what `daemon` recalls: cached records and handed files are forgotten,
/// what was deferred under a claim is sent, held sizes go back in the answer.
fn answer_recall(records: &Records, daemon: u32, paths: &[String]) -> Response {
    let mut claims = false;
    let mut sizes: Option<Vec<gust_proto::HeldSize>> = None;
    for p in paths {
        if let Some(path) = gust_proto::path::size_path(p) {
            let given = records.size_holder().map(|h| h.give_up(daemon, path)).unwrap_or_default();
            if !given.is_empty() {
                // The daemon applies them to the record: a copy of it cached here
                // has the size from before them.
                records.forget(path);
            }
            sizes.get_or_insert_with(Vec::new).extend(given);
            continue;
        }
        match gust_proto::path::claim_dir(p) {
            // Settled even if this process dropped the claim already (its lease ran
            // out here first): what it deferred is still here, and the daemon waits
            // for it.
            Some(dir) => {
                records.claims.lost(daemon, dir);
                claims = true;
            }
            None => match (gust_proto::path::data_file(p), &records.short) {
                (Some(file_id), Some(t)) => t.forget(daemon, file_id),
                (Some(_), None) => {}
                (None, _) => records.forget(p),
            },
        }
    }
    if claims {
        // Before the answer: what was deferred under the claim is sent.
        records.claims.settle();
    }
    let listener = records.listener.read().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(tell) = listener {
        paths.iter().filter(|p| gust_proto::path::size_path(p).is_none()).for_each(|p| tell(p));
    }
    match sizes {
        Some(sizes) => Response::HeldSizes { sizes },
        None => Response::Ok,
    }
}

/// A callback connection to `daemon` ended (run on its reader thread, before the
/// reader's descriptor closes): what its grants covered is forgotten, and what was
/// deferred under its claims goes out.
fn link_ended(
    records: &Records,
    locks: &crate::locks::LockTable,
    up: &std::sync::atomic::AtomicBool,
    fds: &Mutex<LinkFds>,
    daemon: u32,
) {
    let mut f = lock(fds);
    f.ended = true;
    f.unregister();
    drop(f);
    up.store(false, Ordering::SeqCst);
    let claimed = records.claims.holds_any(daemon);
    records.forget_daemon(daemon);
    // The daemon dropped this process's locks with the connection.
    locks.daemon_lost(daemon);
    if claimed {
        // Its claims went with it (it restarted, or closed the connection): nobody
        // recalls them any more, so what was deferred under them goes out now, not
        // at this process's next call.
        records.claims.settle();
    }
}
