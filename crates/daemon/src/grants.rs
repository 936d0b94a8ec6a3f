//! Grants: the right of a client process to cache a record (and its inline data)
//! that this daemon holds, until this daemon recalls it (docs/DESIGN.md, "Grants";
//! CephFS's capabilities and NFSv4's delegations are the models).
//!
//! * A client says who it is on each connection (`hello`) and keeps one connection
//!   open for this daemon's calls (`callback`). Only such a client gets grants.
//! * A stat, an open's `stat_data` or a create of that client may come with a grant
//!   (the reply's `REPLY_GRANTED` flag); the grant is registered before the record
//!   is read, so a change that starts after the read finds it.
//! * Before a request changes a record (`Request::changed_paths`), every other
//!   holder of a grant on its path is sent a `recall` on its callback connection,
//!   and the change waits for the answer. While a change is under way on a path,
//!   nobody else gets a grant on it; a path recalled lately gets none for
//!   `CONTENDED_FOR` (contended objects are served as before, without grants).
//! * A recall also takes the holder's other grants in the same directory (at most
//!   `NEIGHBOURS_MAX`): a process that changes one of another's files there tends
//!   to change the rest (mdtest -N), which would cost a recall each.
//! * A holder that does not answer (stopped, cut off) loses its grants when its
//!   lease has run out: one `LEASE` after the last request this daemon served it
//!   (every reply on a connection of a client with a live callback renews it, and
//!   says so with `REPLY_LEASED`; the client stops using grants of a daemon whose
//!   lease it did not renew). A holder whose callback connection ended by its own
//!   close (the process exited or was killed) loses them at once.
//! * Leases run on the daemon's lease clock (clock.rs), which does not count a
//!   pause of the daemon itself (SIGSTOP, a VM pause): its holders could not reach
//!   it meanwhile, and are recalled as usual once it runs again.
//! * A daemon that restarts on a used root directory holds changes back for one
//!   lease (`grace`): clients of the previous incarnation stop using its grants
//!   within that time, since nothing renews them any more.
//!
//! * A listing's first page (`readdir`, `readdir_plus` without `after`) grants the
//!   caller the directory's names this daemon holds (`REPLY_LISTED`), under the
//!   key `listing_key(dir)`, registered before the page is read; a request that
//!   makes or takes away a name there (`Request::names_changed`) changes that key
//!   too, so its holders are recalled first, as a record's are.
//! * A listing with attributes (`readdir_plus`) grants every entry of its page
//!   (`grant_listed`): the records are read first, in one scan, so the grants are
//!   registered after the read, and kept only if no change of a record in that
//!   directory ended in between (a counter per directory bucket, `dir_epoch`); a
//!   change still under way refuses the grant as for a stat.
//!
//! Bounded: at most `PATHS_MAX` granted paths, `CLIENTS_MAX` clients and
//! `CLIENT_PATHS_MAX` paths per client; past a bound, replies come without grants.
//!
//! Not for: what a client caches and how (gust-client's grants.rs), the wire
//! (gust-proto's `hello`, `callback`, `recall`, reply flags).

use gust_proto::{HeldSize, Request, Response};
use std::collections::{HashMap, HashSet};

mod claims;
mod clock;
pub use claims::{CLAIMS_MAX, RETRY};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tracing::warn;

/// How long a grant may be used after the request that last renewed it was sent
/// (the client's clock) or served (this daemon's). A change waits at most this long
/// (plus `LEASE_MARGIN`) for a client that does not answer a recall.
pub const LEASE: Duration = Duration::from_secs(2);
/// Added to a lease before a silent holder's grants are taken back: clock rates of
/// two nodes differ slightly.
const LEASE_MARGIN: Duration = Duration::from_millis(200);
/// Bound on paths with grants, per daemon.
pub const PATHS_MAX: usize = 1 << 20;
/// Bound on clients known (said `hello`), per daemon.
pub const CLIENTS_MAX: usize = 1 << 16;
/// Bound on paths granted to one client, per daemon.
pub const CLIENT_PATHS_MAX: usize = 1 << 17;
/// A path recalled from a holder gets no grant for this long: a file others keep
/// changing is served as before, without recalls.
const CONTENDED_FOR: Duration = Duration::from_secs(1);
/// Bound on a holder's other grants in a directory that one recall takes along.
const NEIGHBOURS_MAX: usize = 4096;
/// Paths per recall message: a message of the longest paths fits a body only
/// in pieces (a move takes back every grant at once: `pause`).
const RECALL_PATHS_MAX: usize = 64;
/// Bound on paths remembered as contended.
const CONTENDED_MAX: usize = 1 << 14;
/// Buckets of the per-directory change counters (`dir_epoch`): two directories in
/// one bucket only cost a listing its grants now and then.
const DIR_BUCKETS: usize = 1024;

/// Recalls to send: per holder, the holder and the paths taken back from it.
type Recalls = HashMap<u64, (Arc<Holder>, Vec<String>)>;

/// Applies sizes recalled holders gave back (`Grants::set_size_applier`).
pub type SizeApplier = Box<dyn Fn(Vec<HeldSize>) + Send + Sync>;

/// One client process, as this daemon knows it.
pub struct Holder {
    pub id: u64,
    /// When this daemon last served it a request: ms of the lease clock (clock.rs).
    last_seen_ms: AtomicU64,
    /// Its callback connection, once it opened one.
    link: Mutex<Option<Arc<gust_rpc::Connection>>>,
    /// Its callback connection said it takes claims (claims.rs).
    pub claims: std::sync::atomic::AtomicBool,
    /// Its callback connection said its grants serve other processes (a node
    /// cache's holder): its end waits out the lease, however it came.
    pub shared: std::sync::atomic::AtomicBool,
}

impl Holder {
    /// Whether its callback connection is open: its replies renew its lease.
    pub fn leased(&self) -> bool {
        lock(&self.link).as_ref().is_some_and(|c| c.alive())
    }

    /// Its callback connection, if open (lock_service.rs tells it of granted locks
    /// and asks it whether it is alive there).
    pub fn link(&self) -> Option<Arc<gust_rpc::Connection>> {
        lock(&self.link).clone().filter(|c| c.alive())
    }
}

impl PathEntry {
    /// Nothing refers to it: it may go. Not while a recall of it is under way: a
    /// new entry of the path would take the old recall's end for its own, and a
    /// count gone below zero would keep every later change of the path waiting.
    fn unused(&self) -> bool {
        self.holders.is_empty() && self.changing.is_empty() && self.recalling == 0
    }
}

#[derive(Default)]
struct PathEntry {
    holders: Vec<u64>,
    /// Changes under way: who makes each (None: a caller without `hello`).
    changing: Vec<Option<u64>>,
    /// Recalls sent and not answered yet: a later change of the path waits for
    /// them too (the holders they go to are off `holders` already).
    recalling: u32,
}

#[derive(Default)]
struct Table {
    paths: HashMap<String, PathEntry>,
    clients: HashMap<u64, Arc<Holder>>,
    /// Per client, the paths it holds grants on.
    held: HeldBy,
    granted: usize,
    contended: HashMap<String, Instant>,
    /// Claims on directories, by directory (claims.rs).
    claims: HashMap<String, claims::Claim>,
    /// Grants on size keys (`size_key`: a client holding a file's size back),
    /// mirrored in `Grants::size_holds` for a check without the lock.
    size_held: usize,
}

impl Table {
    /// A grant on `key` was taken from one holder: counts it.
    fn took(&mut self, key: &str, size_holds: &std::sync::atomic::AtomicUsize) {
        self.granted -= 1;
        if gust_proto::path::size_path(key).is_some() {
            self.size_held -= 1;
            size_holds.store(self.size_held, Ordering::Release);
        }
    }

    /// `key` (a path, a listing key) was recalled: no grant on it for
    /// `CONTENDED_FOR` (bounded: past `CONTENDED_MAX` the old marks go first).
    fn note_contended(&mut self, key: String) {
        if self.contended.len() >= CONTENDED_MAX {
            self.contended.retain(|_, since| since.elapsed() < CONTENDED_FOR);
        }
        if self.contended.len() < CONTENDED_MAX {
            self.contended.insert(key, Instant::now());
        }
    }
}

/// The paths one client holds grants on, by directory: a recall finds the
/// holder's other grants in a directory without a walk over all of them (a FUSE
/// mount that listed large directories holds hundreds of thousands).
#[derive(Default)]
struct Held {
    by_dir: HashMap<String, HashSet<String>>,
    len: usize,
}

impl Held {
    /// The directory a path is filed under: its parent; a listing key under
    /// itself, so it is nobody's neighbour.
    fn dir_of(path: &str) -> &str {
        if gust_proto::path::listing_dir(path).is_some() {
            path
        } else {
            gust_proto::path::parent(path)
        }
    }

    /// Whether the path's directory is new here.
    fn insert(&mut self, path: &str) -> bool {
        let dir = Self::dir_of(path);
        let new_dir = !self.by_dir.contains_key(dir);
        if self.by_dir.entry(dir.to_string()).or_default().insert(path.to_string()) {
            self.len += 1;
        }
        new_dir
    }

    /// Whether the path's directory has no held path left.
    fn remove(&mut self, path: &str) -> bool {
        let dir = Self::dir_of(path);
        if let Some(s) = self.by_dir.get_mut(dir) {
            if s.remove(path) {
                self.len -= 1;
                if s.is_empty() {
                    self.by_dir.remove(dir);
                    return true;
                }
            }
        }
        false
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Held paths in directory `dir`.
    fn in_dir(&self, dir: &str) -> impl Iterator<Item = &String> {
        self.by_dir.get(dir).into_iter().flatten()
    }

    fn into_paths(self) -> impl Iterator<Item = String> {
        self.by_dir.into_values().flatten()
    }
}

/// Every client's `Held`, and per directory how many clients hold paths in it: a
/// claim asks whether any other client holds something in a directory, which with
/// tens of thousands of clients per daemon must not be a walk over all of them.
#[derive(Default)]
struct HeldBy {
    clients: HashMap<u64, Held>,
    dirs: HashMap<String, u32>,
}

impl HeldBy {
    fn get(&self, c: &u64) -> Option<&Held> {
        self.clients.get(c)
    }

    fn insert(&mut self, c: u64, path: &str) {
        if self.clients.entry(c).or_default().insert(path) {
            *self.dirs.entry(Held::dir_of(path).to_string()).or_default() += 1;
        }
    }

    fn remove(&mut self, c: u64, path: &str) {
        if self.clients.get_mut(&c).is_some_and(|s| s.remove(path)) {
            self.left_dir(Held::dir_of(path));
        }
    }

    /// Client `c` is gone: what it held.
    fn remove_client(&mut self, c: u64) -> Option<Held> {
        let held = self.clients.remove(&c)?;
        for dir in held.by_dir.keys() {
            self.left_dir(dir);
        }
        Some(held)
    }

    fn left_dir(&mut self, dir: &str) {
        if let Some(n) = self.dirs.get_mut(dir) {
            *n -= 1;
            if *n == 0 {
                self.dirs.remove(dir);
            }
        }
    }

    /// Whether a client other than `c` holds a path in directory `dir`.
    fn others_in_dir(&self, c: u64, dir: &str) -> bool {
        let all = self.dirs.get(dir).copied().unwrap_or(0);
        let mine = u32::from(self.clients.get(&c).is_some_and(|s| s.by_dir.contains_key(dir)));
        all > mine
    }
}

pub struct Grants {
    table: Mutex<Table>,
    /// Signalled when recalls end (`PathEntry::recalling`).
    recalls_ended: std::sync::Condvar,
    /// Leases run on it (clock.rs): a frozen daemon's pause does not count.
    clock: Arc<clock::ServiceClock>,
    /// Changes wait until then (a restart; see the module's comment).
    grace_until: Mutex<Option<Instant>>,
    /// GUST_DEBUG_NO_RECALL=1: grant, but never recall (tests show that the history
    /// checker catches the stale reads this gives; never for real use).
    no_recall: bool,
    /// Counters for `gust status`: grants given, recalls sent, holders whose lease
    /// ran out before they answered.
    pub given: AtomicU64,
    pub recalls: AtomicU64,
    pub expired: AtomicU64,
    /// Claims granted and recalled since start.
    claims_given: AtomicU64,
    claims_recalled: AtomicU64,
    /// Changes ended, per bucket of their records' directory (`dir_epoch`).
    dir_changes: Vec<AtomicU64>,
    /// `table.claims.len()`, read without the lock by every request.
    claims_held: std::sync::atomic::AtomicUsize,
    /// A move to a new layout is under way (moves/): no grant or claim is given.
    paused: std::sync::atomic::AtomicBool,
    /// Recalls of size keys under way (their sizes not applied yet): looks at
    /// records wait for them (`begin_look`).
    size_recalls: std::sync::atomic::AtomicUsize,
    /// Applies sizes that recalled holders gave back (the daemon's metadata
    /// store, set at start); without it they are left to the caller.
    size_applier: std::sync::OnceLock<SizeApplier>,
    /// A local file was handed to a client since start (short_circuit.rs): from
    /// then on every request for chunk data marks the file's data key. Before,
    /// such requests only count themselves in `data_unmarked`, which the first
    /// hand-over waits to drain, so none of them can overlap a holder's writes.
    data_handed: std::sync::atomic::AtomicBool,
    data_unmarked: std::sync::atomic::AtomicUsize,
    /// `Table::size_held`: while 0, looks at records and changes of them skip the
    /// size keys.
    size_holds: std::sync::atomic::AtomicUsize,
}

fn dir_bucket(dir: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut h);
    h.finish() as usize % DIR_BUCKETS
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for Grants {
    fn default() -> Self {
        Grants::new()
    }
}

impl Grants {
    pub fn new() -> Grants {
        Grants {
            table: Mutex::new(Table::default()),
            recalls_ended: std::sync::Condvar::new(),
            clock: {
                let c = Arc::new(clock::ServiceClock::new());
                clock::ServiceClock::spawn_ticker(Arc::downgrade(&c), |c: &clock::ServiceClock| c);
                c
            },
            grace_until: Mutex::new(None),
            no_recall: std::env::var("GUST_DEBUG_NO_RECALL").is_ok_and(|v| v == "1"),
            given: AtomicU64::new(0),
            recalls: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            claims_given: AtomicU64::new(0),
            claims_recalled: AtomicU64::new(0),
            dir_changes: (0..DIR_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            claims_held: std::sync::atomic::AtomicUsize::new(0),
            paused: std::sync::atomic::AtomicBool::new(false),
            size_recalls: std::sync::atomic::AtomicUsize::new(0),
            size_applier: std::sync::OnceLock::new(),
            data_handed: std::sync::atomic::AtomicBool::new(false),
            data_unmarked: std::sync::atomic::AtomicUsize::new(0),
            size_holds: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Before this daemon hands a local file to a client for the first time:
    /// requests for chunk data mark their files from now on, and those that
    /// started without marking have ended when this returns.
    pub fn handing_data(&self) {
        self.data_handed.store(true, Ordering::SeqCst);
        while self.data_unmarked.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// What `gust status` and the metrics exporter show of grants and claims.
    pub fn metrics(&self) -> gust_proto::GrantMetrics {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        gust_proto::GrantMetrics {
            held: lock(&self.table).granted as u64,
            given: load(&self.given),
            recalls: load(&self.recalls),
            expired: load(&self.expired),
            claims: self.claims_held.load(Ordering::Acquire) as u64,
            claims_given: load(&self.claims_given),
            claims_recalled: load(&self.claims_recalled),
        }
    }

    /// A counter of the changes of records in `dir` that ended (shared with the
    /// directories of its bucket): read before a listing reads its records.
    pub fn dir_epoch(&self, dir: &str) -> u64 {
        self.dir_changes[dir_bucket(dir)].load(Ordering::SeqCst)
    }

    /// Grants `h` every listed record, the paths of directory `dir` (entries of a
    /// `readdir_plus` page, read after `epoch` was taken with `dir_epoch`). All or
    /// nothing: true if each is granted; otherwise those granted here are taken
    /// back. False as well if a change of a record in `dir` ended since `epoch`:
    /// the page may hold a record from before it.
    pub fn grant_listed(&self, dir: &str, paths: &[String], h: &Holder, epoch: u64) -> bool {
        self.grant_all_if(paths, h, || self.dir_epoch(dir) == epoch)
    }

    /// Grants `h` every one of `paths` (records it just read or made), all or
    /// nothing: true if each is granted now; otherwise those granted here are
    /// taken back.
    pub fn grant_all(&self, paths: &[String], h: &Holder) -> bool {
        self.grant_all_if(paths, h, || true)
    }

    /// `grant_all`, kept only if `still` says so once all are granted.
    fn grant_all_if(&self, paths: &[String], h: &Holder, still: impl FnOnce() -> bool) -> bool {
        if !h.leased() || paths.is_empty() {
            return false;
        }
        let mut new = Vec::new();
        let mut all = true;
        for p in paths {
            match self.grant(p, h) {
                Grant::No => {
                    all = false;
                    break;
                }
                Grant::New => new.push(p),
                Grant::Held => {}
            }
        }
        if all && still() {
            return true;
        }
        for p in new {
            self.ungrant(p, h);
        }
        false
    }

    /// The lease clock (clock.rs), in milliseconds.
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A restart on a used root directory: changes wait one lease from now.
    pub fn start_grace(&self) {
        *lock(&self.grace_until) = Some(Instant::now() + LEASE + LEASE_MARGIN);
    }

    /// The client that said `hello` with this id, known from now on (None past
    /// `CLIENTS_MAX` clients with live connections: it is then served without grants).
    pub fn hello(&self, id: u64) -> Option<Arc<Holder>> {
        let mut t = lock(&self.table);
        if let Some(h) = t.clients.get(&id) {
            h.last_seen_ms.store(self.now_ms(), Ordering::Relaxed);
            return Some(h.clone());
        }
        if t.clients.len() >= CLIENTS_MAX {
            self.sweep(&mut t);
            if t.clients.len() >= CLIENTS_MAX {
                return None;
            }
        }
        let h = Arc::new(Holder {
            id,
            last_seen_ms: AtomicU64::new(self.now_ms()),
            link: Mutex::new(None),
            claims: std::sync::atomic::AtomicBool::new(false),
            shared: std::sync::atomic::AtomicBool::new(false),
        });
        t.clients.insert(id, h.clone());
        Some(h)
    }

    /// Forgets clients whose callback connection is gone and whose lease ran out.
    fn sweep(&self, t: &mut Table) {
        let now = self.now_ms();
        let lease = (LEASE + LEASE_MARGIN).as_millis() as u64;
        let gone: Vec<u64> = t
            .clients
            .values()
            .filter(|h| !h.leased() && h.last_seen_ms.load(Ordering::Relaxed) + lease < now)
            .map(|h| h.id)
            .collect();
        for id in gone {
            self.drop_client_grants(t, id);
            t.clients.remove(&id);
        }
    }

    /// A request of this client is being served: its lease runs from now.
    pub fn seen(&self, h: &Holder) {
        h.last_seen_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// The client `id`, if this daemon knows it (it said `hello` or opened a
    /// callback connection).
    pub fn holder(&self, id: u64) -> Option<Arc<Holder>> {
        lock(&self.table).clients.get(&id).cloned()
    }

    /// How long ago this daemon last served `h` a request (or heard it answer).
    pub fn silent_for(&self, h: &Holder) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(h.last_seen_ms.load(Ordering::Relaxed)))
    }

    /// The client's callback connection: recalls go there from now on. Grants it
    /// held through an earlier one are void (it forgot them before opening this).
    pub fn set_link(&self, h: &Arc<Holder>, link: gust_rpc::Connection) -> Arc<gust_rpc::Connection> {
        let link = Arc::new(link);
        let mut t = lock(&self.table);
        self.drop_client_grants(&mut t, h.id);
        if let Some(old) = lock(&h.link).replace(link.clone()) {
            old.close();
        }
        link
    }

    /// The callback connection of client `id` ended; `by_peer`: the client closed
    /// it (its process ended), so its grants go at once. Otherwise they stay until
    /// a change finds them (which then waits out the lease).
    pub fn link_ended(&self, id: u64, by_peer: bool) {
        if !by_peer {
            return;
        }
        let mut t = lock(&self.table);
        self.drop_client_grants(&mut t, id);
    }

    fn drop_client_grants(&self, t: &mut Table, id: u64) {
        self.drop_client_claims(t, id);
        let Some(paths) = t.held.remove_client(id) else { return };
        for p in paths.into_paths() {
            t.took(&p, &self.size_holds);
            if let Some(e) = t.paths.get_mut(&p) {
                e.holders.retain(|&c| c != id);
                if e.unused() {
                    t.paths.remove(&p);
                }
            }
        }
    }

    /// Registers a grant on `path` for `h`, before the record is read. `No` without
    /// a live callback connection, past a bound, on a contended path, or while
    /// another caller changes it; `Held` if `h` held it already (a failed request
    /// must then leave it: the client still keeps what it cached under it).
    pub fn grant(&self, path: &str, h: &Holder) -> Grant {
        if !h.leased() || self.paused() {
            return Grant::No;
        }
        let mut t = lock(&self.table);
        if let Some(e) = t.paths.get(path) {
            if e.holders.contains(&h.id) && e.changing.iter().all(|c| *c == Some(h.id)) {
                return Grant::Held;
            }
        }
        if t.granted >= PATHS_MAX {
            return Grant::No;
        }
        if let Some(since) = t.contended.get(path) {
            if since.elapsed() < CONTENDED_FOR {
                return Grant::No;
            }
            t.contended.remove(path);
        }
        if t.held.get(&h.id).is_some_and(|s| s.len() >= CLIENT_PATHS_MAX) {
            return Grant::No;
        }
        let e = t.paths.entry(path.to_string()).or_default();
        if e.changing.iter().any(|c| *c != Some(h.id)) {
            if e.unused() {
                t.paths.remove(path);
            }
            return Grant::No;
        }
        if e.holders.contains(&h.id) {
            return Grant::Held;
        }
        e.holders.push(h.id);
        t.held.insert(h.id, path);
        t.granted += 1;
        if gust_proto::path::size_path(path).is_some() {
            t.size_held += 1;
            self.size_holds.store(t.size_held, Ordering::Release);
        }
        self.given.fetch_add(1, Ordering::Relaxed);
        Grant::New
    }

    /// Sets how sizes given back in recalls are applied: before the recalls that
    /// brought them count as ended (`begin_keys`).
    pub fn set_size_applier(&self, apply: SizeApplier) {
        let _ = self.size_applier.set(apply);
    }

    /// Whether grants and claims are given now (not during a move).
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// Stops giving grants and claims (a move to a new layout begins, moves.rs)
    /// and takes back every one given: each holder is recalled as for a change,
    /// and a claim's holder sends the names it made first; the sizes holders give
    /// back are applied (`set_size_applier`). Returns once all are back or their
    /// holders' leases ran out. `pause(false)` gives them again.
    pub fn pause(&self, on: bool) {
        self.paused.store(on, Ordering::Release);
        if !on {
            return;
        }
        let claims: Vec<(Option<Arc<Holder>>, String)> = {
            let t = lock(&self.table);
            t.claims.iter().map(|(dir, c)| (t.clients.get(&c.holder).cloned(), dir.clone())).collect()
        };
        for (h, dir) in claims {
            self.end_claim(h, dir);
        }
        // Every grant, taken off the table at once (no other change's bookkeeping
        // is needed: none is given meanwhile), then recalled per holder.
        let mut sent: Vec<(String, u32)> = Vec::new();
        let mut by_holder: HashMap<u64, (Arc<Holder>, Vec<String>)> = HashMap::new();
        {
            let mut guard = lock(&self.table);
            let t = &mut *guard;
            let mut taken: Vec<(u64, String)> = Vec::new();
            for (p, e) in t.paths.iter_mut() {
                if e.holders.is_empty() {
                    continue;
                }
                e.recalling += e.holders.len() as u32;
                sent.push((p.clone(), e.holders.len() as u32));
                if gust_proto::path::size_path(p).is_some() {
                    self.size_recalls.fetch_add(e.holders.len(), Ordering::AcqRel);
                }
                taken.extend(e.holders.drain(..).map(|c| (c, p.clone())));
            }
            for (c, p) in taken {
                t.took(&p, &self.size_holds);
                t.held.remove(c, &p);
                if let Some(h) = t.clients.get(&c) {
                    by_holder.entry(c).or_insert_with(|| (h.clone(), Vec::new())).1.push(p);
                }
            }
        }
        if !by_holder.is_empty() && !self.no_recall {
            let sizes = self.recall_all(by_holder.into_values().collect());
            self.apply_sizes(sizes);
        }
        self.end_recalls(sent);
    }

    /// Applies sizes given back in recalls, if an applier is set; else leaves
    /// them to the caller (returned).
    fn apply_sizes(&self, sizes: Vec<HeldSize>) -> Vec<HeldSize> {
        match self.size_applier.get() {
            Some(apply) if !sizes.is_empty() => {
                apply(sizes);
                Vec::new()
            }
            _ => sizes,
        }
    }

    /// The recalls of `sent` (path, how many) are over, their sizes applied.
    fn end_recalls(&self, sent: Vec<(String, u32)>) {
        let mut t = lock(&self.table);
        for (p, n) in sent {
            if gust_proto::path::size_path(&p).is_some() {
                self.size_recalls.fetch_sub(n as usize, Ordering::AcqRel);
            }
            if let Some(e) = t.paths.get_mut(&p) {
                e.recalling = e.recalling.saturating_sub(n);
                if e.unused() {
                    t.paths.remove(&p);
                }
            }
        }
        self.recalls_ended.notify_all();
    }

    /// Takes back a grant registered for a read that then failed (no record).
    pub fn ungrant(&self, path: &str, h: &Holder) {
        let mut t = lock(&self.table);
        let Some(e) = t.paths.get_mut(path) else { return };
        let before = e.holders.len();
        e.holders.retain(|&c| c != h.id);
        let removed = before != e.holders.len();
        if e.unused() {
            t.paths.remove(path);
        }
        if removed {
            t.took(path, &self.size_holds);
            t.held.remove(h.id, path);
        }
    }

    /// Before `req` changes records: marks its paths as changing (no new grants to
    /// others), takes every other holder's grant on them back (a recall each, in
    /// parallel per holder) and returns what `end_change` needs. Nothing to do (and
    /// no lock taken) for a request that changes no record and touches no chunk
    /// data.
    pub fn begin_change(&self, req: &Request, caller: Option<u64>) -> Option<Change> {
        let mut keys: Vec<(String, Option<u64>)> = Vec::new();
        req.changed_paths(|p| keys.push((p.to_string(), caller)));
        // A change of a record other than a size's merge (which commutes with the
        // sizes others hold back) takes those sizes first: a truncate after them,
        // not before.
        if self.sizes_held() && !matches!(req, Request::UpdateSize { .. } | Request::HoldSize { .. }) {
            let sizes: Vec<String> = keys.iter().map(|(p, _)| gust_proto::path::size_key(p)).collect();
            keys.extend(sizes.into_iter().map(|k| (k, caller)));
        }
        // A name made or taken away changes its directory's listing: the grants on
        // the directory's names are recalled like a record's.
        let mut listings = Vec::new();
        req.names_changed(|p| listings.push(gust_proto::path::listing_key(gust_proto::path::parent(p))));
        listings.sort();
        listings.dedup();
        keys.extend(listings.into_iter().map(|l| (l, caller)));
        // A file's local file handed to a client (short-circuit I/O) comes back
        // before this daemon reads or writes it for anyone, the holder too: its
        // own request would race its own descriptors (a block and its sum). On a
        // daemon that never handed a file the request only counts itself
        // (`handing_data`).
        let mut files = Vec::new();
        req.chunk_files(|id| files.push(id));
        let data = !files.is_empty();
        let mut unmarked = false;
        if data && !self.data_handed.load(Ordering::SeqCst) {
            self.data_unmarked.fetch_add(1, Ordering::SeqCst);
            if self.data_handed.load(Ordering::SeqCst) {
                self.data_unmarked.fetch_sub(1, Ordering::SeqCst);
            } else {
                unmarked = true;
            }
        }
        if !unmarked {
            keys.extend(files.into_iter().map(|id| (gust_proto::path::data_key(id), None)));
        }
        if keys.is_empty() {
            return unmarked.then_some(Change { keys, unmarked, sizes: Vec::new() });
        }
        let mut c = self.begin_keys(keys);
        c.unmarked = unmarked;
        Some(c)
    }

    /// `begin_change` for these keys, each with the caller its holders are not
    /// recalled from.
    pub fn begin_keys(&self, keys: Vec<(String, Option<u64>)>) -> Change {
        self.wait_out_grace(&keys);
        let (recall, sent) = self.take_back(&keys);
        let mut sizes = Vec::new();
        if !recall.is_empty() && !self.no_recall {
            sizes = self.recall_all(recall.into_values().collect());
        }
        // Sizes given back are applied before the recalls count as ended: a look
        // at the record that waited for them reads them applied.
        let sizes = self.apply_sizes(sizes);
        if !sent.is_empty() {
            self.end_recalls(sent);
        }
        Change { keys, unmarked: false, sizes }
    }

    /// Before a change of `keys`: while the previous incarnation's grace lasts, waits
    /// for it to end (its clients may still use their grants until their leases run
    /// out).
    fn wait_out_grace(&self, keys: &[(String, Option<u64>)]) {
        // Not for chunk data alone: a holder of the previous incarnation's local
        // files forgot them when its callback connection ended with that process.
        let grace = if keys.iter().all(|(k, _)| gust_proto::path::data_file(k).is_some()) {
            None
        } else {
            *lock(&self.grace_until)
        };
        if let Some(until) = grace {
            let now = Instant::now();
            if now < until {
                std::thread::sleep(until - now);
            } else {
                *lock(&self.grace_until) = None;
            }
        }
    }

    /// Marks `keys` as changing, waits for the recalls of changes that started
    /// earlier, and takes every other holder's grant on them back from the table.
    /// Returns the recalls to send, and the paths with recalls sent and how many.
    fn take_back(&self, keys: &[(String, Option<u64>)]) -> (Recalls, Vec<(String, u32)>) {
        let mut recall = Recalls::new();
        let mut sent: Vec<(String, u32)> = Vec::new();
        let mut guard = lock(&self.table);
        for (p, caller) in keys {
            guard.paths.entry(p.clone()).or_default().changing.push(*caller);
        }
        // A change that started earlier may still wait for its recalls: this one
        // must not return before those holders forgot the path either.
        while keys.iter().any(|(p, _)| guard.paths.get(p).is_some_and(|e| e.recalling > 0)) {
            guard = self.recalls_ended.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        let t = &mut *guard;
        for (p, caller) in keys {
            self.take_from_others(t, keys, p, *caller, &mut recall, &mut sent);
        }
        (recall, sent)
    }

    /// Takes the grants on `p` of every holder but `caller` back (into `recall`, one
    /// recall per holder, and `sent`), with their neighbours (`take_neighbours`).
    fn take_from_others(
        &self,
        t: &mut Table,
        keys: &[(String, Option<u64>)],
        p: &str,
        caller: Option<u64>,
        recall: &mut Recalls,
        sent: &mut Vec<(String, u32)>,
    ) {
        let e = t.paths.get_mut(p).expect("marked above");
        let others: Vec<u64> = e.holders.iter().copied().filter(|&c| Some(c) != caller).collect();
        if others.is_empty() {
            return;
        }
        e.holders.retain(|&c| Some(c) == caller);
        e.recalling += others.len() as u32;
        sent.push((p.to_string(), others.len() as u32));
        if gust_proto::path::size_path(p).is_some() {
            self.size_recalls.fetch_add(others.len(), Ordering::AcqRel);
        }
        for c in others {
            t.took(p, &self.size_holds);
            t.held.remove(c, p);
            let Some(h) = t.clients.get(&c).cloned() else { continue };
            let into = &mut recall.entry(c).or_insert_with(|| (h, Vec::new())).1;
            into.push(p.to_string());
            self.take_neighbours(t, keys, p, c, into, sent);
        }
        // Not a size key: its holder asks again at its next write, one
        // request per look, where a second of no holds would cost a
        // request per write (N writers of a shared file, each looking
        // at it once when it opens).
        if gust_proto::path::size_path(p).is_none() {
            t.note_contended(p.to_string());
        }
    }

    /// Holder `c`'s other grants in `p`'s directory (up to `NEIGHBOURS_MAX`, none
    /// of `keys`), taken back into the same recall (`into`): a process changing one
    /// of another's files there tends to change the rest (mdtest -N), and each
    /// would cost a recall of its own. Not for a listing: a name made there says
    /// nothing of the others; nor for chunk data, which has no directory.
    fn take_neighbours(
        &self,
        t: &mut Table,
        keys: &[(String, Option<u64>)],
        p: &str,
        c: u64,
        into: &mut Vec<String>,
        sent: &mut Vec<(String, u32)>,
    ) {
        let dir = gust_proto::path::parent(p);
        let listing = gust_proto::path::listing_dir(p).is_some() || gust_proto::path::data_file(p).is_some();
        let neighbours: Vec<String> = t.held.get(&c).filter(|_| !listing).map_or(Vec::new(), |s| {
            s.in_dir(dir).filter(|q| !keys.iter().any(|(k, _)| k == *q)).take(NEIGHBOURS_MAX).cloned().collect()
        });
        for q in neighbours {
            let Some(e) = t.paths.get_mut(&q) else { continue };
            e.holders.retain(|&x| x != c);
            e.recalling += 1;
            t.took(&q, &self.size_holds);
            t.held.remove(c, &q);
            if gust_proto::path::size_path(&q).is_some() {
                self.size_recalls.fetch_add(1, Ordering::AcqRel);
            }
            sent.push((q.clone(), 1));
            into.push(q);
        }
    }

    /// Before a request of `caller` looks at the records of `paths` (a stat, a
    /// read of inline data): the sizes other clients hold back on them
    /// (`hold_size`) are recalled, and the returned change carries them for the
    /// caller to apply before it reads. None (no lock taken) when no size is held
    /// on this daemon or none of these paths has another holder.
    pub fn begin_look(&self, paths: &[&str], caller: Option<u64>) -> Option<Change> {
        if self.size_holds.load(Ordering::Acquire) == 0 && self.size_recalls.load(Ordering::Acquire) == 0 {
            return None;
        }
        // A size recalled by another's look or change and not yet applied counts as
        // held (the caller's own too: it gave it up to that recall): the look waits
        // for it (`begin_keys` applies it before the recall ends).
        let keys: Vec<(String, Option<u64>)> = {
            let t = lock(&self.table);
            paths
                .iter()
                .map(|p| gust_proto::path::size_key(p))
                .filter(|k| {
                    t.paths.get(k).is_some_and(|e| e.recalling > 0 || e.holders.iter().any(|&h| Some(h) != caller))
                })
                .map(|k| (k, caller))
                .collect()
        };
        if keys.is_empty() {
            return None;
        }
        Some(self.begin_keys(keys))
    }

    /// Whether clients hold sizes back on this daemon (a change of a record then
    /// recalls them: `Grants::begin_change`).
    fn sizes_held(&self) -> bool {
        self.size_holds.load(Ordering::Acquire) > 0
    }

    /// Marks the chunk data of `file_id` as being read for this daemon (a scrub),
    /// unless a client holds its local file: then None, and the caller leaves the
    /// file alone (the holder's reads verify it). Ends with `end_change`.
    pub fn hold_data_unless_held(&self, file_id: u128) -> Option<Change> {
        let key = gust_proto::path::data_key(file_id);
        let mut t = lock(&self.table);
        if t.paths.get(&key).is_some_and(|e| !e.holders.is_empty() || e.recalling > 0) {
            return None;
        }
        t.paths.entry(key.clone()).or_default().changing.push(None);
        Some(Change { keys: vec![(key, None)], unmarked: false, sizes: Vec::new() })
    }

    /// The change is applied (or failed): its paths may be granted again. With
    /// `removed`, their records are gone: the caller's own grants on them go too.
    pub fn end_change(&self, c: Change, removed: bool) {
        if c.unmarked {
            self.data_unmarked.fetch_sub(1, Ordering::SeqCst);
        }
        // Before the paths may be granted again: a listing that read them before
        // this change sees the count move (`grant_listed`).
        for (p, _) in &c.keys {
            self.dir_changes[dir_bucket(gust_proto::path::parent(p))].fetch_add(1, Ordering::SeqCst);
        }
        let mut t = lock(&self.table);
        let t = &mut *t;
        for (p, caller) in &c.keys {
            let Some(e) = t.paths.get_mut(p) else { continue };
            let holders: Vec<u64> = if removed { e.holders.drain(..).collect() } else { Vec::new() };
            if let Some(i) = e.changing.iter().position(|x| x == caller) {
                e.changing.swap_remove(i);
            }
            if e.unused() {
                t.paths.remove(p);
            }
            for h in holders {
                t.took(p, &self.size_holds);
                t.held.remove(h, p);
            }
        }
    }

    /// Recalls from each holder, one thread per holder past the first, and waits for
    /// all: every answer, or each silent holder's lease.
    /// The sizes the holders gave up (`HeldSizes` answers).
    fn recall_all(&self, mut holders: Vec<(Arc<Holder>, Vec<String>)>) -> Vec<HeldSize> {
        let first = holders.pop().expect("at least one holder");
        std::thread::scope(|s| {
            let others: Vec<_> =
                holders.into_iter().map(|(h, paths)| s.spawn(move || self.recall(&h, paths))).collect();
            let mut sizes = self.recall(&first.0, first.1);
            for o in others {
                sizes.extend(o.join().unwrap_or_default());
            }
            sizes
        })
    }

    /// One holder: its paths recalled `RECALL_PATHS_MAX` to a message (a body's
    /// bound), one message after the other (`recall_one`).
    fn recall(&self, h: &Holder, mut paths: Vec<String>) -> Vec<HeldSize> {
        let mut sizes = Vec::new();
        while paths.len() > RECALL_PATHS_MAX {
            let rest = paths.split_off(RECALL_PATHS_MAX);
            sizes.extend(self.recall_one(h, std::mem::replace(&mut paths, rest)));
        }
        sizes.extend(self.recall_one(h, paths));
        sizes
    }

    /// One holder: a recall on its callback connection, answered within what is
    /// left of its lease; else its lease is waited out and all its grants dropped.
    fn recall_one(&self, h: &Holder, paths: Vec<String>) -> Vec<HeldSize> {
        let lease_end = h.last_seen_ms.load(Ordering::Relaxed) + (LEASE + LEASE_MARGIN).as_millis() as u64;
        let left = Duration::from_millis(lease_end.saturating_sub(self.now_ms()));
        if left.is_zero() {
            // Its lease ran out: it uses none of this daemon's grants any more.
            return Vec::new();
        }
        let link = lock(&h.link).clone();
        self.recalls.fetch_add(1, Ordering::Relaxed);
        let answer = match &link {
            Some(c) if c.alive() => match c.call(&Request::Recall { paths: paths.clone() }, &[], left) {
                Ok((Ok(Response::Ok), _)) => Some(Vec::new()),
                // Only sizes of the paths recalled count: a client names no others.
                Ok((Ok(Response::HeldSizes { sizes }), _)) => Some(
                    sizes
                        .into_iter()
                        .filter(|s| paths.iter().any(|k| gust_proto::path::size_path(k) == Some(s.path.as_str())))
                        .collect(),
                ),
                _ => None,
            },
            _ => None,
        };
        if let Some(sizes) = answer {
            return sizes;
        }
        if link.as_ref().is_some_and(|c| c.ended_by_peer()) && !h.shared.load(Ordering::Relaxed) {
            // Its process closed the connection (it ended): nothing of it is cached.
            let mut t = lock(&self.table);
            self.drop_client_grants(&mut t, h.id);
            return Vec::new();
        }
        self.expired.fetch_add(1, Ordering::Relaxed);
        warn!(client = format!("{:016x}", h.id), "a client did not answer a recall; waiting out its lease");
        let left = Duration::from_millis(lease_end.saturating_sub(self.now_ms()));
        std::thread::sleep(left);
        let mut t = lock(&self.table);
        self.drop_client_grants(&mut t, h.id);
        if let Some(c) = lock(&h.link).take() {
            c.close();
        }
        Vec::new()
    }

    /// (paths granted, clients known) now, for `gust status`.
    pub fn counts(&self) -> (usize, usize) {
        let t = lock(&self.table);
        (t.granted, t.clients.len())
    }
}

/// What `Grants::grant` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// No grant: the reply says nothing.
    No,
    /// Registered for this request.
    New,
    /// The caller held it already.
    Held,
}

/// Ends its change when dropped.
pub struct EndOnDrop<'a>(pub &'a Grants, pub Option<Change>);

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.1.take() {
            self.0.end_change(c, false);
        }
    }
}

/// A change under way (see `Grants::begin_change`).
pub struct Change {
    /// Each key with the caller its holders were not recalled from.
    keys: Vec<(String, Option<u64>)>,
    /// A request for chunk data counted in `Grants::data_unmarked`.
    unmarked: bool,
    /// Sizes the recalled holders had held back (`hold_size`): the caller applies
    /// them before it serves the request (`take_sizes`).
    sizes: Vec<HeldSize>,
}

impl Change {
    /// The sizes the recalls brought back, to apply now.
    pub fn take_sizes(&mut self) -> Vec<HeldSize> {
        std::mem::take(&mut self.sizes)
    }
}

#[cfg(test)]
#[path = "grants_tests.rs"]
mod tests;
