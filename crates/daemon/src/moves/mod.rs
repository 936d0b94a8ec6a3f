//! Growing and shrinking: this daemon's part in a move of data to a new layout
//! (`gust expand`, `gust shrink`; docs/DESIGN.md, "Growing and shrinking").
//!
//! A layout is a hosts file generation: which daemons hold data (`placed`) and how
//! (the placement). Clients stamp the generation they routed by on every request
//! (the frame header); this daemon serves only requests of its own generation:
//! an older one is answered `MOVED` (the client reads the hosts file again and
//! routes anew), a newer one `MOVING` (this daemon has not adopted it yet).
//! Requests of no generation (0: between daemons, tools) and questions about the
//! daemon itself (`WhileRecovering::Serves`: ping, stats, move) are not checked.
//!
//! The coordinating `gust` sends every daemon the steps of a move in order:
//! * `precopy` (a grow only, while the old layout is served): a first pass sends
//!   the joining daemons what the new layout places on them, and changes are
//!   noted from then on (precopy.rs);
//! * `prepare`: grants and claims are taken back and none is given until the end,
//!   so no client caches anything of the old layout;
//! * `freeze`: clients' requests are answered `MOVING` (they wait and send again)
//!   once those under way ended; refused (EBUSY) while file locks are held here;
//! * `copy` (the hosts file now says the new generation and `moving`): a thread
//!   walks this daemon's records and local files, sends each record and chunk the
//!   new layout places elsewhere to its new daemon (`move_in`, `write`) unless
//!   the first pass sent it and it did not change, and deletes them here once
//!   every daemon has them (copy.rs). Walking again finds only what is left, so
//!   a copy that stopped (a daemon or the coordinator killed) resumes;
//! * `adopt` (the hosts file no longer says `moving`): the new generation is
//!   served, and grants are given again. `abort` (before any copy) serves the old.
//!
//! A daemon that starts while the hosts file says `moving` starts frozen in the
//! new generation: the coordinator (or `gust expand --resume`) drives it on.
//!
//! Not for: choosing daemons or starting them (gust-cli's resize.rs), placement
//! (gust-placement).

mod copy;
mod precopy;
mod sent;

use crate::state::State;
use gust_hosts::{HostsFile, Placement};
use gust_placement::{CapacityWeighted, Distributor, WideStriping};
use gust_proto::errno::{MOVED, MOVING};
use gust_proto::{MoveProgress, MoveStep, MovedRecord, Reply, Request, Response, WhileRecovering};
use sent::Sent;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};
/// Bound on waiting for requests under way to end (`freeze`).
const DRAIN_MAX: Duration = Duration::from_secs(30);
/// Bound on one call to another daemon during a copy.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on waiting for another daemon that cannot be reached during a copy.
const PEER_WAIT: Duration = Duration::from_secs(60);

pub struct Moves {
    /// The layout generation served.
    generation: AtomicU32,
    /// Clients' requests are answered `MOVING`.
    frozen: AtomicBool,
    /// Clients' requests admitted and not yet answered.
    in_flight: AtomicUsize,
    /// A copy thread runs.
    copying: AtomicBool,
    /// A first pass runs.
    precopying: AtomicBool,
    /// The first pass is to stop (the move was called off).
    cancel: AtomicBool,
    /// What the last first pass sent, until a copy or an abort takes it.
    sent: Mutex<Option<Sent>>,
    hosts_file: OnceLock<PathBuf>,
    /// The daemon's state, for the copy thread.
    state: OnceLock<std::sync::Weak<State>>,
    progress: Mutex<MoveProgress>,
    /// Local chunk files this move sent every chunk of: removed at Adopt if still
    /// empty. Not before: in a move both ways (a change of placement), a peer may
    /// write a chunk that stays here into the same file while this copy runs, and a
    /// removal then would drop it (it did, in the first version of that test).
    emptied: Mutex<Vec<u128>>,
}

/// A client's request admitted: counted as under way until dropped.
pub struct Admitted<'a>(Option<&'a Moves>);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.0 {
            m.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Default for Moves {
    fn default() -> Self {
        Moves::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Moves {
    pub fn new() -> Moves {
        Moves {
            generation: AtomicU32::new(1),
            frozen: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            copying: AtomicBool::new(false),
            precopying: AtomicBool::new(false),
            cancel: AtomicBool::new(false),
            sent: Mutex::new(None),
            hosts_file: OnceLock::new(),
            state: OnceLock::new(),
            progress: Mutex::new(MoveProgress {
                step: MoveStep::Adopt,
                generation: 1,
                records: 0,
                chunks: 0,
                bytes: 0,
                done: true,
                error: String::new(),
            }),
            emptied: Mutex::new(Vec::new()),
        }
    }

    /// At start: the layout the hosts file says (frozen if a move is under way).
    pub fn start(&self, state: &Arc<State>, hosts_file: PathBuf, hosts: &HostsFile) {
        let _ = self.hosts_file.set(hosts_file);
        let _ = self.state.set(Arc::downgrade(state));
        self.generation.store(hosts.generation, Ordering::SeqCst);
        lock(&self.progress).generation = hosts.generation;
        if hosts.moving {
            self.frozen.store(true, Ordering::SeqCst);
            let mut p = lock(&self.progress);
            p.step = MoveStep::Freeze;
            p.generation = hosts.generation;
            p.done = false;
            info!(
                generation = hosts.generation,
                "a move to a new layout is under way: serving no client until it ends"
            );
        }
    }

    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Whether a client's request routed by layout `generation` is served now.
    pub fn admit(&self, generation: u32, req: &Request) -> Result<Admitted<'_>, i32> {
        if generation == 0 || req.while_recovering() == WhileRecovering::Serves {
            return Ok(Admitted(None));
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let admitted = Admitted(Some(self));
        if self.frozen.load(Ordering::SeqCst) {
            return Err(MOVING);
        }
        let mine = self.generation.load(Ordering::SeqCst);
        if generation < mine {
            return Err(MOVED);
        }
        if generation > mine {
            return Err(MOVING);
        }
        Ok(admitted)
    }

    fn status(&self) -> Reply {
        Ok(Response::Moved(lock(&self.progress).clone()))
    }

    fn set_step(&self, step: MoveStep, generation: u32) {
        let mut p = lock(&self.progress);
        if p.step != step || p.generation != generation {
            // A first pass's counts stay for the copy after it.
            let after_precopy = p.step == MoveStep::Precopy && p.generation == generation;
            if step == MoveStep::Precopy || (step == MoveStep::Prepare && !after_precopy) {
                (p.records, p.chunks, p.bytes) = (0, 0, 0);
            }
            p.step = step;
            p.generation = generation;
            p.done = step != MoveStep::Copy;
            p.error.clear();
        }
    }

    fn load_hosts(&self) -> Result<HostsFile, i32> {
        let path = self.hosts_file.get().ok_or(libc::EIO)?;
        HostsFile::load(path).map_err(|e| {
            warn!("move: {e}");
            libc::EIO
        })
    }
}

/// Serves `move` (see the module's comment).
pub fn serve(state: &State, step: MoveStep, generation: u32) -> Reply {
    let m = &state.moves;
    match step {
        MoveStep::Status => {}
        MoveStep::Precopy => start_precopy(state, generation)?,
        MoveStep::Prepare => {
            m.set_step(step, generation);
            state.grants.pause(true);
        }
        MoveStep::Freeze => freeze(state, generation)?,
        MoveStep::Copy => start_copy(state, generation)?,
        MoveStep::Adopt => adopt(state, generation)?,
        MoveStep::Abort => {
            if m.copying.load(Ordering::SeqCst) || lock(&m.progress).step == MoveStep::Copy {
                return Err(libc::EBUSY);
            }
            // A first pass still sending stops before this answers: a later
            // attempt's joining daemons (a port used again) must not get its bytes.
            m.cancel.store(true, Ordering::SeqCst);
            let until = Instant::now() + DRAIN_MAX;
            while m.precopying.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if m.precopying.load(Ordering::SeqCst) {
                return Err(libc::EBUSY);
            }
            forget_first_pass(state);
            m.frozen.store(false, Ordering::SeqCst);
            state.grants.pause(false);
            m.set_step(MoveStep::Adopt, m.generation());
        }
    }
    m.status()
}

/// `freeze`: clients' requests are answered `MOVING` from now on; waits (a bounded
/// time) for those under way to end. EBUSY while file locks are held here.
fn freeze(state: &State, generation: u32) -> Result<(), i32> {
    let m = &state.moves;
    m.frozen.store(true, Ordering::SeqCst);
    let started = Instant::now();
    while m.in_flight.load(Ordering::SeqCst) > 0 {
        if started.elapsed() > DRAIN_MAX {
            warn!("move: requests under way did not end within {} s", DRAIN_MAX.as_secs());
            return Err(libc::EBUSY);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    if state.locks.counts().0 > 0 {
        return Err(libc::EBUSY);
    }
    m.set_step(MoveStep::Freeze, generation);
    Ok(())
}

/// `copy`: once the hosts file says the move to `generation` is under way, starts
/// the copy thread (unless one runs); its end is in the progress `status` shows.
fn start_copy(state: &State, generation: u32) -> Result<(), i32> {
    let m = &state.moves;
    let hosts = m.load_hosts()?;
    if hosts.generation != generation || !hosts.moving {
        return Err(libc::ESTALE);
    }
    m.frozen.store(true, Ordering::SeqCst);
    m.set_step(MoveStep::Copy, generation);
    if !m.copying.swap(true, Ordering::SeqCst) {
        let Some(st) = m.state.get().and_then(|w| w.upgrade()) else {
            m.copying.store(false, Ordering::SeqCst);
            return Err(libc::EIO);
        };
        // A copy started again (`--resume`) is judged afresh.
        {
            let mut p = lock(&m.progress);
            p.error.clear();
            p.done = false;
        }
        std::thread::Builder::new()
            .name("gust-move".into())
            .spawn(move || {
                let r = run_copy(&st, &hosts);
                let mut p = lock(&st.moves.progress);
                match r {
                    Ok(()) if p.generation == generation => p.done = true,
                    Ok(()) => {}
                    Err(e) => {
                        warn!("move to generation {generation}: {e}");
                        p.error = e;
                    }
                }
                drop(p);
                st.moves.copying.store(false, Ordering::SeqCst);
            })
            .map_err(|_| libc::EAGAIN)?;
    }
    Ok(())
}

/// `adopt`: once the hosts file says the move to `generation` ended and the copy
/// is done, serves the new layout: files the copy emptied go, and grants are given
/// again.
fn adopt(state: &State, generation: u32) -> Result<(), i32> {
    let m = &state.moves;
    let hosts = m.load_hosts()?;
    if hosts.generation != generation || hosts.moving {
        return Err(libc::ESTALE);
    }
    if m.copying.load(Ordering::SeqCst) {
        return Err(libc::EBUSY);
    }
    // Every copy is done and no client writes yet: files left empty go.
    for id in std::mem::take(&mut *lock(&m.emptied)) {
        if let Err(e) = state.chunks.remove_if_empty(id) {
            warn!(file_id = id, errno = e, "move: an emptied chunk file stays");
        }
    }
    forget_first_pass(state);
    // What `gust status` shows as used changed with the copy.
    state.metrics.forget_chunk_usage();
    m.generation.store(generation, Ordering::SeqCst);
    // The placement may be another (`gust tune --placement`).
    state.chunks.set_trim_holes(spills(&hosts));
    m.frozen.store(false, Ordering::SeqCst);
    state.grants.pause(false);
    m.set_step(MoveStep::Adopt, generation);
    info!(generation, placement = hosts.placement.name(), "serving the new layout");
    Ok(())
}

/// `precopy`: before the move to `generation`, while the old layout is served,
/// starts the first pass (precopy.rs) unless one runs; its end is in the
/// progress `status` shows.
fn start_precopy(state: &State, generation: u32) -> Result<(), i32> {
    let m = &state.moves;
    let hosts = m.load_hosts()?;
    if hosts.moving || hosts.generation >= generation {
        return Err(libc::ESTALE);
    }
    if hosts.placed_count() as usize >= hosts.daemons.len() {
        return Err(libc::EINVAL); // nobody joins
    }
    if m.precopying.swap(true, Ordering::SeqCst) {
        // Another attempt's pass still runs: this one goes without.
        return if lock(&m.progress).generation == generation { Ok(()) } else { Err(libc::EBUSY) };
    }
    m.cancel.store(false, Ordering::SeqCst);
    m.set_step(MoveStep::Precopy, generation);
    lock(&m.progress).done = false;
    let Some(st) = m.state.get().and_then(|w| w.upgrade()) else {
        m.precopying.store(false, Ordering::SeqCst);
        return Err(libc::EIO);
    };
    let spawned = std::thread::Builder::new().name("gust-precopy".into()).spawn(move || {
        let (sent, r) = precopy::run(&st, &hosts, generation);
        *lock(&st.moves.sent) = Some(sent);
        let mut p = lock(&st.moves.progress);
        match r {
            Ok(()) if p.generation == generation => p.done = true,
            Ok(()) => {}
            Err(e) => {
                warn!("first pass of the move to generation {generation}: {e}");
                p.error = e;
                p.done = true;
            }
        }
        drop(p);
        st.moves.precopying.store(false, Ordering::SeqCst);
    });
    if spawned.is_err() {
        m.precopying.store(false, Ordering::SeqCst);
        return Err(libc::EAGAIN);
    }
    Ok(())
}

/// The copy thread: waits for a first pass still running, takes what it sent
/// (or what its intent log says, after a restart), and copies (copy.rs).
fn run_copy(state: &State, hosts: &HostsFile) -> Result<(), String> {
    let m = &state.moves;
    while m.precopying.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let dist = distributor(hosts)?;
    let changed = state.chunks.take_changes();
    let sent = match lock(&m.sent).take().filter(|s| s.generation == hosts.generation) {
        Some(mut s) => {
            // Whatever changed since the pass began counts; and all of it, if the
            // pass stopped part way or placed by another layout.
            s.changed = changed.filter(|_| s.complete && s.layout == hosts.placed_count());
            s
        }
        None => {
            let path = sent::log_path(&state.rootdir);
            let logged = sent::load(&path, hosts.generation).map_err(|e| format!("{}: {e}", path.display()))?;
            logged.unwrap_or_else(|| {
                // Another move's (one called off while this daemon was away).
                let _ = std::fs::remove_file(&path);
                Sent::nothing(hosts.generation)
            })
        }
    };
    copy::copy(state, &*dist, hosts, sent)
}

/// Ends any first pass's state: what it sent, the changes noted, its log.
fn forget_first_pass(state: &State) {
    *lock(&state.moves.sent) = None;
    state.chunks.take_changes();
    let _ = std::fs::remove_file(sent::log_path(&state.rootdir));
}

/// Whether chunks of a placement spill to the next daemon when one is full (then
/// reads cut spans at holes: the reader looks for the rest there).
pub fn spills(h: &HostsFile) -> bool {
    h.ec.is_none() && matches!(h.placement, Placement::Capacity | Placement::Local)
}

/// The placement of `hosts`' layout (wide or capacity; a local placement keeps
/// data where it was written, which no move changes).
pub fn distributor(hosts: &HostsFile) -> Result<Box<dyn Distributor>, String> {
    let n = hosts.placed_count();
    match hosts.placement {
        Placement::Wide => Ok(Box::new(WideStriping::new(n))),
        Placement::Capacity => Ok(Box::new(CapacityWeighted::new(
            &hosts.daemons[..n as usize].iter().map(|d| d.capacity_bytes.unwrap_or(0)).collect::<Vec<_>>(),
        ))),
        Placement::Local => Err("placement local cannot be moved".into()),
    }
}

/// Connections to the daemons this copy sends to, opened on first use.
struct Peers<'a> {
    hosts: &'a HostsFile,
    secret: &'a [u8],
    open: HashMap<u32, gust_rpc::Connection>,
}

impl<'a> Peers<'a> {
    fn new(hosts: &'a HostsFile, secret: &'a [u8]) -> Peers<'a> {
        Peers { hosts, secret, open: HashMap::new() }
    }

    /// Sends `req` to daemon `to` and waits for its answer. A daemon that cannot
    /// be reached may be starting again: asked again (a move's requests may be
    /// sent twice) for up to `PEER_WAIT`.
    fn call(&mut self, to: u32, req: &Request, bulk: &[u8]) -> Result<Response, String> {
        let until = Instant::now() + PEER_WAIT;
        loop {
            match self.call_once(to, req, bulk) {
                Err((true, _)) if Instant::now() < until => {
                    self.open.remove(&to);
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => return r.map_err(|(_, e)| e),
            }
        }
    }

    /// One try of `call`; an error says whether the daemon could not be reached.
    fn call_once(&mut self, to: u32, req: &Request, bulk: &[u8]) -> Result<Response, (bool, String)> {
        if !self.open.get(&to).is_some_and(|c| c.alive()) {
            let d = self
                .hosts
                .daemons
                .iter()
                .find(|d| d.id == to)
                .ok_or((false, format!("daemon {to} is not in the hosts file")))?;
            let ep = d.network().ok_or((false, format!("daemon {to} has no network endpoint")))?;
            let opts = gust_rpc::Options { name: "move", ..gust_rpc::Options::new(CALL_TIMEOUT) };
            let c =
                gust_rpc::Connection::open(ep, self.secret, opts).map_err(|e| (true, format!("daemon {to}: {e}")))?;
            self.open.insert(to, c);
        }
        let c = &self.open[&to];
        match c.call(req, bulk, CALL_TIMEOUT) {
            Ok((Ok(r), _)) => Ok(r),
            Ok((Err(e), _)) => Err((
                false,
                format!("daemon {to} refused {}: {}", req.name(), gust_proto::errno::name(e).unwrap_or("an error")),
            )),
            Err(e) => Err((true, format!("daemon {to}: {e}"))),
        }
    }
}

fn errno_text(e: i32) -> String {
    format!("local store: {}", gust_proto::errno::name(e).unwrap_or("error"))
}

/// Serves `put_hosts`: the coordinator's hosts file, stored as this node's copy
/// if it is of this instance, not of an older layout, and lists this daemon on
/// this host (EINVAL, ESTALE otherwise). The lines of this node's daemons stay
/// as this node's copy has them: a daemon started again here registered its new
/// process there, which the coordinator's copy may not know yet.
pub fn put_hosts(state: &State, text: &str) -> Reply {
    let path = state.moves.hosts_file.get().ok_or(libc::EIO)?;
    let _lock = gust_hosts::lock(path).map_err(|_| libc::EIO)?;
    let now = state.moves.load_hosts()?;
    let mut new = HostsFile::parse(path, text).map_err(|_| libc::EINVAL)?;
    let me = |h: &HostsFile| h.daemons.iter().find(|d| d.id == state.daemon_id).map(|d| d.host.clone());
    if new.instance != now.instance || me(&new).is_none() || me(&new) != me(&now) {
        return Err(libc::EINVAL);
    }
    if new.generation < now.generation {
        return Err(libc::ESTALE);
    }
    let here = me(&now);
    for d in new.daemons.iter_mut().filter(|d| Some(&d.host) == here.as_ref()) {
        if let Some(mine) = now.daemons.iter().find(|m| m.id == d.id && m.host == d.host) {
            *d = mine.clone();
        }
    }
    new.store(path).map_err(|e| {
        warn!("cannot store the hosts file a move sent: {e}");
        libc::EIO
    })?;
    Ok(Response::Ok)
}

/// Serves `move_in` and `move_drop`: what another daemon's move sends here.
pub fn serve_in(state: &State, req: Request, bulk: &[u8]) -> Reply {
    match req {
        Request::MoveIn { records } => move_in(state, &records, bulk),
        Request::MoveDrop { keys, file_id, spans } => move_drop(state, &keys, file_id, &spans),
        _ => Err(libc::EPROTO),
    }
}

/// `move_in`: records put as they are.
fn move_in(state: &State, records: &[MovedRecord], bulk: &[u8]) -> Reply {
    let mut at = 0usize;
    let mut put = Vec::with_capacity(records.len());
    for r in records {
        let inline = match r.inline_len {
            Some(n) => {
                let end = at.checked_add(n as usize).filter(|e| *e <= bulk.len()).ok_or(libc::EINVAL)?;
                let d = &bulk[at..end];
                at = end;
                Some(d)
            }
            None => None,
        };
        let path = gust_store::keys::path_of(&r.key).ok_or(libc::EINVAL)?;
        gust_proto::path::validate(&path)?;
        put.push((r.key.as_slice(), r.value.as_slice(), inline));
    }
    if at != bulk.len() {
        return Err(libc::EINVAL);
    }
    state.metadata.put_raw(&put)?;
    Ok(Response::Ok)
}

/// `move_drop`: records deleted by key, spans of a file's chunks made holes (a
/// file left empty is removed at `adopt`).
fn move_drop(state: &State, keys: &[Vec<u8>], file_id: u128, spans: &[gust_proto::Span]) -> Reply {
    for k in keys {
        let path = gust_store::keys::path_of(k).ok_or(libc::EINVAL)?;
        gust_proto::path::validate(&path)?;
    }
    if !keys.is_empty() {
        state.metadata.delete_raw(keys)?;
    }
    let block = gust_store::sums::SUM_BLOCK_BYTES as u64;
    if spans.iter().any(|s| !s.offset.is_multiple_of(block)) {
        return Err(libc::EINVAL);
    }
    for s in spans.iter().filter(|s| s.len > 0) {
        state.chunks.punch(file_id, s.offset, s.len as u64)?;
    }
    if !spans.is_empty() {
        lock(&state.moves.emptied).push(file_id);
    }
    Ok(Response::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's request is served only under the daemon's own generation and
    /// not while it is frozen; generation 0 and questions about the daemon are
    /// always served; every admitted request is counted until it ends.
    #[test]
    fn requests_are_admitted_by_generation() {
        let m = Moves::new();
        m.generation.store(3, Ordering::SeqCst);
        let stat = Request::Stat { path: "/a".into() };
        assert!(m.admit(3, &stat).is_ok());
        assert_eq!(m.admit(2, &stat).err(), Some(MOVED));
        assert_eq!(m.admit(4, &stat).err(), Some(MOVING));
        assert!(m.admit(0, &stat).is_ok(), "between daemons");
        assert!(m.admit(1, &Request::Ping).is_ok(), "a question about the daemon");
        {
            let _a = m.admit(3, &stat).unwrap();
            assert_eq!(m.in_flight.load(Ordering::SeqCst), 1);
        }
        assert_eq!(m.in_flight.load(Ordering::SeqCst), 0, "refused and ended requests are not counted");
        m.frozen.store(true, Ordering::SeqCst);
        assert_eq!(m.admit(3, &stat).err(), Some(MOVING));
        assert!(m.admit(3, &Request::Move { step: MoveStep::Status, generation: 3 }).is_ok());
        assert_eq!(m.in_flight.load(Ordering::SeqCst), 0);
    }
}
