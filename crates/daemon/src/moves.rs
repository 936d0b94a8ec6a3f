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
//! * `prepare`: grants and claims are taken back and none is given until the end,
//!   so no client caches anything of the old layout;
//! * `freeze`: clients' requests are answered `MOVING` (they wait and send again)
//!   once those under way ended; refused (EBUSY) while file locks are held here;
//! * `copy` (the hosts file now says the new generation and `moving`): a thread
//!   walks this daemon's records and local files, sends each record and chunk the
//!   new layout places elsewhere to its new daemon (`move_in`, `write`), and
//!   deletes it here once that daemon has it. Walking again finds only what is
//!   left, so a copy that stopped (a daemon or the coordinator killed) resumes;
//! * `adopt` (the hosts file no longer says `moving`): the new generation is
//!   served, and grants are given again. `abort` (before any copy) serves the old.
//!
//! A daemon that starts while the hosts file says `moving` starts frozen in the
//! new generation: the coordinator (or `gust expand --resume`) drives it on.
//!
//! Not for: choosing daemons or starting them (gust-cli's resize.rs), placement
//! (gust-placement).

use crate::state::State;
use gust_hosts::{HostsFile, Placement};
use gust_placement::{CapacityWeighted, Distributor, WideStriping};
use gust_proto::errno::{MOVED, MOVING};
use gust_proto::{MoveProgress, MoveStep, MovedRecord, Reply, Request, Response, Span, WhileRecovering};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Records per `move_in` request, and the body bytes at which one is sent sooner.
const RECORDS_PER_REQUEST: usize = 512;
const RECORD_BYTES_PER_REQUEST: usize = 256 << 10;
/// Bound on waiting for requests under way to end (`freeze`).
const DRAIN_MAX: Duration = Duration::from_secs(30);
/// Bound on one call to another daemon during a copy.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Moves {
    /// The layout generation served.
    generation: AtomicU32,
    /// Clients' requests are answered `MOVING`.
    frozen: AtomicBool,
    /// Clients' requests admitted and not yet answered.
    in_flight: AtomicUsize,
    /// A copy thread runs.
    copying: AtomicBool,
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
            if step == MoveStep::Prepare {
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
        std::thread::Builder::new()
            .name("gust-move".into())
            .spawn(move || {
                let r = copy(&st, &hosts);
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
    // What `gust status` shows as used changed with the copy.
    state.metrics.forget_chunk_usage();
    m.generation.store(generation, Ordering::SeqCst);
    // The placement may be another (`gust tune --placement`).
    state.chunks.set_trim_holes(spills(hosts.placement));
    m.frozen.store(false, Ordering::SeqCst);
    state.grants.pause(false);
    m.set_step(MoveStep::Adopt, generation);
    info!(generation, placement = hosts.placement.name(), "serving the new layout");
    Ok(())
}

/// Whether chunks of a placement spill to the next daemon when one is full (then
/// reads cut spans at holes: the reader looks for the rest there).
pub fn spills(p: Placement) -> bool {
    matches!(p, Placement::Capacity | Placement::Local)
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

impl Peers<'_> {
    fn call(&mut self, to: u32, req: &Request, bulk: &[u8]) -> Result<Response, String> {
        if !self.open.get(&to).is_some_and(|c| c.alive()) {
            let d = self
                .hosts
                .daemons
                .iter()
                .find(|d| d.id == to)
                .ok_or(format!("daemon {to} is not in the hosts file"))?;
            let ep = d.network().ok_or(format!("daemon {to} has no network endpoint"))?;
            let opts = gust_rpc::Options { name: "move", ..gust_rpc::Options::new(CALL_TIMEOUT) };
            let c = gust_rpc::Connection::open(ep, self.secret, opts).map_err(|e| format!("daemon {to}: {e}"))?;
            self.open.insert(to, c);
        }
        let c = &self.open[&to];
        match c.call(req, bulk, CALL_TIMEOUT) {
            Ok((Ok(r), _)) => Ok(r),
            Ok((Err(e), _)) => {
                Err(format!("daemon {to} refused {}: {}", req.name(), gust_proto::errno::name(e).unwrap_or("an error")))
            }
            Err(e) => Err(format!("daemon {to}: {e}")),
        }
    }
}

/// Sends everything the layout of `hosts` places elsewhere to its daemon, and
/// deletes it here once there.
fn copy(state: &State, hosts: &HostsFile) -> Result<(), String> {
    let dist = distributor(hosts)?;
    let mut peers = Peers { hosts, secret: &state.secret, open: HashMap::new() };
    let started = Instant::now();
    copy_records(state, &*dist, &mut peers)?;
    copy_chunks(state, &*dist, &mut peers, hosts.chunk_size_bytes)?;
    let p = lock(&state.moves.progress).clone();
    info!(
        records = p.records,
        chunks = p.chunks,
        bytes = p.bytes,
        ms = started.elapsed().as_millis() as u64,
        "move: this daemon's part is copied"
    );
    Ok(())
}

/// The records `dist` places elsewhere, a page at a time; those that leave go in
/// one request per daemon (`send_records`).
fn copy_records(state: &State, dist: &dyn Distributor, peers: &mut Peers) -> Result<(), String> {
    let me = state.daemon_id;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = state.metadata.raw_page(after.as_deref(), RECORDS_PER_REQUEST).map_err(errno_text)?;
        let Some(last) = page.last() else { break };
        after = Some(last.0.clone());
        let mut leaving: BTreeMap<u32, Vec<gust_store::metadata::RawRecord>> = BTreeMap::new();
        for rec in page {
            let Some(path) = gust_store::keys::path_of(&rec.0) else {
                warn!("move: a record key that names no path stays here");
                continue;
            };
            let to = dist.locate_metadata(&path);
            if to != me {
                leaving.entry(to).or_default().push(rec);
            }
        }
        for (to, recs) in leaving {
            for part in batches(&recs) {
                send_records(state, peers, to, part)?;
            }
        }
    }
    Ok(())
}

/// Sends records (with their inline data) to daemon `to` (`move_in`), then deletes
/// them here.
fn send_records(
    state: &State,
    peers: &mut Peers,
    to: u32,
    part: &[gust_store::metadata::RawRecord],
) -> Result<(), String> {
    let mut bulk = Vec::new();
    let records = part
        .iter()
        .map(|(k, v, inline)| {
            if let Some(d) = inline {
                bulk.extend_from_slice(d);
            }
            MovedRecord { key: k.clone(), value: v.clone(), inline_len: inline.as_ref().map(|d| d.len() as u32) }
        })
        .collect();
    peers.call(to, &Request::MoveIn { records }, &bulk)?;
    let keys: Vec<Vec<u8>> = part.iter().map(|r| r.0.clone()).collect();
    state.metadata.delete_raw(&keys).map_err(errno_text)?;
    lock(&state.moves.progress).records += keys.len() as u64;
    Ok(())
}

/// The chunks `dist` places elsewhere, a local file at a time (`copy_chunk_file`).
fn copy_chunks(state: &State, dist: &dyn Distributor, peers: &mut Peers, chunk: u64) -> Result<(), String> {
    let mut after: Option<u128> = None;
    let mut buf = Vec::new();
    loop {
        let ids = state.chunks.file_ids(after, 256);
        let Some(&last) = ids.last() else { break };
        after = Some(last);
        for id in ids {
            copy_chunk_file(state, dist, peers, chunk, id, &mut buf)?;
        }
    }
    Ok(())
}

/// Sends the chunks of local file `id` that `dist` places elsewhere to their
/// daemons (those of zeros not at all), punches them out here, and notes the file
/// for removal at `adopt` if none stays.
fn copy_chunk_file(
    state: &State,
    dist: &dyn Distributor,
    peers: &mut Peers,
    chunk: u64,
    id: u128,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let me = state.daemon_id;
    let Some(len) = state.chunks.local_len(id).map_err(errno_text)? else { return Ok(()) };
    let mut moved = Vec::new();
    let mut kept = false;
    for k in 0..len.div_ceil(chunk) {
        let to = dist.locate_chunk(id, k);
        if to == me {
            kept = true;
            continue;
        }
        let span = Span { offset: k * chunk, len: (len - k * chunk).min(chunk) as u32 };
        let got = state.chunks.read(id, &[span], buf).map_err(errno_text)?;
        let n = got.first().copied().unwrap_or(0) as usize;
        if buf[..n].iter().any(|b| *b != 0) {
            let write =
                Request::Write { file_id: id, spans: vec![Span { offset: span.offset, len: n as u32 }], sums: vec![] };
            peers.call(to, &write, &buf[..n])?;
            let mut p = lock(&state.moves.progress);
            p.chunks += 1;
            p.bytes += n as u64;
        }
        moved.push(span);
    }
    if moved.is_empty() {
        return Ok(());
    }
    for s in moved {
        state.chunks.punch(id, s.offset, s.len as u64).map_err(errno_text)?;
    }
    if !kept {
        lock(&state.moves.emptied).push(id);
    }
    Ok(())
}

/// Records in requests of at most `RECORDS_PER_REQUEST` records and about
/// `RECORD_BYTES_PER_REQUEST` bytes of keys and values.
fn batches(recs: &[gust_store::metadata::RawRecord]) -> Vec<&[gust_store::metadata::RawRecord]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, r) in recs.iter().enumerate() {
        bytes += r.0.len() + r.1.len();
        if i + 1 - start >= RECORDS_PER_REQUEST || bytes >= RECORD_BYTES_PER_REQUEST {
            out.push(&recs[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < recs.len() {
        out.push(&recs[start..]);
    }
    out
}

fn errno_text(e: i32) -> String {
    format!("local store: {}", gust_proto::errno::name(e).unwrap_or("error"))
}

/// Serves `move_in`: records another daemon's copy sends here.
pub fn move_in(state: &State, records: &[MovedRecord], bulk: &[u8]) -> Reply {
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

    /// Batches of `move_in` keep to their bounds and cover every record once.
    #[test]
    fn batches_cover_every_record_within_bounds() {
        let recs: Vec<gust_store::metadata::RawRecord> = (0..1300)
            .map(|i| (vec![b'/', 0, (i % 250) as u8], vec![0u8; if i % 7 == 0 { 3000 } else { 10 }], None))
            .collect();
        let parts = batches(&recs);
        assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), recs.len());
        for p in &parts {
            assert!(p.len() <= RECORDS_PER_REQUEST);
            let bytes: usize = p.iter().map(|r| r.0.len() + r.1.len()).sum();
            assert!(bytes < RECORD_BYTES_PER_REQUEST + 3100, "{bytes}");
        }
    }
}
