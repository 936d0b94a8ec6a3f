//! A move's first pass (`precopy`), while the old layout is still served: the
//! records and chunks that the layout over every listed daemon places on a
//! joining daemon (one past `placed` in the hosts file, which no client reaches
//! yet) are sent there, and the chunk store notes which files change from the
//! start of the pass on. The `copy` step, with clients held off, then sends
//! only what changed (copy.rs), so clients wait for that instead of the whole
//! copy.
//!
//! Only joining daemons receive: a daemon that serves clients must not show
//! records or chunks of a layout it does not serve yet. So the pass helps a
//! grow (`gust expand`), where everything that moves goes to a new daemon; a
//! shrink or a change of placement has none and copies all in `copy`.
//!
//! The pass yields: after each request it sends it sleeps as long as the
//! request's work took (`Pace`), so that it takes at most about half a core
//! from the clients it runs beside (every daemon that holds data runs its pass at
//! once). It is the part of a move clients do not wait for: slower is fine.
//!
//! A file a client holds (short-circuit I/O: its holder writes it without
//! requests) is recalled before it is read, as a request reading its chunks
//! here would recall it; handed out again later, it counts as changed.
//!
//! Not for: the steps' order (mod.rs), the copy (copy.rs).

use super::copy::{batches, destination, read_chunk, send_records, write_chunk, PAGE};
use super::sent::{self, Log, Sent};
use super::{errno_text, Peers};
use crate::state::State;
use gust_hosts::HostsFile;
use gust_placement::Distributor;
use gust_proto::Span;
use gust_store::metadata::RawRecord;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::info;

/// The pass over this daemon's records and chunks for layout `generation` of
/// `hosts` (every listed daemon placed). What it sent, also when an error
/// stopped it (then not `complete`).
pub(super) fn run(state: &State, hosts: &HostsFile, generation: u32) -> (Sent, Result<(), String>) {
    let mut sent = Sent::nothing(generation);
    let r = pass(state, hosts, &mut sent);
    sent.complete = r.is_ok();
    (sent, r)
}

fn pass(state: &State, hosts: &HostsFile, sent: &mut Sent) -> Result<(), String> {
    let started = Instant::now();
    let n = hosts.daemons.len() as u32;
    // The layout over every listed daemon (wide or capacity; a local placement
    // does not move).
    let mut all = hosts.clone();
    all.placed = Some(n);
    let target = super::distributor(&all)?;
    sent.layout = n;
    let placed = hosts.placed_count();
    let path = sent::log_path(&state.rootdir);
    let mut log = Log::create(&path, sent.generation).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    state.chunks.track_changes();
    let mut peers = Peers::new(hosts, &state.secret);
    let mut w = Walk { state, target: &*target, placed, peers: &mut peers, log: &mut log, sent, pace: Pace::new() };
    w.records()?;
    w.chunks(hosts.chunk_size_bytes)?;
    w.log.flush().map_err(log_err)?;
    let p = super::lock(&state.moves.progress).clone();
    info!(
        records = p.records,
        chunks = p.chunks,
        bytes = p.bytes,
        ms = started.elapsed().as_millis() as u64,
        "move: first pass sent to the joining daemons"
    );
    Ok(())
}

fn log_err(e: std::io::Error) -> String {
    format!("move intent log: {e}")
}

struct Walk<'a, 'p> {
    state: &'a State,
    target: &'a dyn Distributor,
    /// Daemons from this id on are joining.
    placed: u32,
    peers: &'a mut Peers<'p>,
    log: &'a mut Log,
    sent: &'a mut Sent,
    pace: Pace,
}

/// Sleeps as long as the work since the last sleep took (a duty cycle of one
/// half), in steps of at least `PACE_MIN` of work.
struct Pace {
    since: Instant,
}

/// Work shorter than this goes on without a sleep (a sleep per small request
/// would cost more in wake-ups than it gives back).
const PACE_MIN: Duration = Duration::from_millis(2);

impl Pace {
    fn new() -> Pace {
        Pace { since: Instant::now() }
    }

    fn step(&mut self) {
        let worked = self.since.elapsed();
        if worked >= PACE_MIN {
            std::thread::sleep(worked);
            self.since = Instant::now();
        }
    }
}

impl Walk<'_, '_> {
    fn cancelled(&self) -> Result<(), String> {
        if self.state.moves.cancel.load(Ordering::SeqCst) {
            return Err("the move was called off".into());
        }
        Ok(())
    }

    /// The records the target places on a joining daemon, a page at a time.
    fn records(&mut self) -> Result<(), String> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            self.cancelled()?;
            let (target, placed) = (self.target, self.placed);
            let joins = |k: &[u8]| destination(target, k).is_some_and(|to| to >= placed);
            let (page, last) = self.state.metadata.raw_page_where(after.as_deref(), PAGE, joins).map_err(errno_text)?;
            let Some(last) = last else { break };
            after = Some(last);
            let mut leaving: BTreeMap<u32, Vec<RawRecord>> = BTreeMap::new();
            for rec in page {
                if let Some(to) = destination(self.target, &rec.0) {
                    leaving.entry(to).or_default().push(rec);
                }
            }
            for (to, recs) in leaving {
                for part in batches(&recs) {
                    self.send_records(to, part)?;
                }
            }
        }
        Ok(())
    }

    fn send_records(&mut self, to: u32, part: &[RawRecord]) -> Result<(), String> {
        let hashes: Vec<u128> = part.iter().map(|r| sent::record_hash(&r.1, r.2.as_deref())).collect();
        for (r, h) in part.iter().zip(&hashes) {
            self.log.record(to, &r.0, *h).map_err(log_err)?;
        }
        self.log.flush().map_err(log_err)?;
        send_records(self.state, self.peers, to, part)?;
        self.log.answered().map_err(log_err)?;
        self.pace.step();
        for (r, h) in part.iter().zip(hashes) {
            self.sent.records.insert(r.0.clone(), (to, h));
        }
        Ok(())
    }

    /// The chunks the target places on a joining daemon, a local file at a time.
    fn chunks(&mut self, chunk: u64) -> Result<(), String> {
        let mut after: Option<u128> = None;
        let mut buf = Vec::new();
        loop {
            self.cancelled()?;
            let ids = self.state.chunks.file_ids(after, 256);
            let Some(&last) = ids.last() else { break };
            after = Some(last);
            for id in ids {
                self.file(chunk, id, &mut buf)?;
            }
        }
        Ok(())
    }

    fn file(&mut self, chunk: u64, id: u128, buf: &mut Vec<u8>) -> Result<(), String> {
        let grants = &self.state.grants;
        // Read while no client is handed the file: one that holds it (its
        // writer, say, still running) gives it back first, as for any request
        // that reads the file's chunks here.
        let key = gust_proto::path::data_key(id);
        let _held = crate::grants::EndOnDrop(grants, Some(grants.begin_keys(vec![(key, None)])));
        let Some(len) = self.state.chunks.local_len(id).map_err(errno_text)? else { return Ok(()) };
        for k in 0..len.div_ceil(chunk) {
            let to = self.target.locate_chunk(id, k);
            if to < self.placed {
                continue;
            }
            self.cancelled()?;
            let span = Span { offset: k * chunk, len: (len - k * chunk).min(chunk) as u32 };
            // Only this daemon's own chunks: the others are holes here, and what
            // it logs it may drop there later.
            let n = read_chunk(self.state, id, span, buf)?;
            if n == 0 {
                continue;
            }
            self.log.chunk(to, id, span.offset, n).map_err(log_err)?;
            self.log.flush().map_err(log_err)?;
            write_chunk(self.state, self.peers, id, span.offset, to, buf)?;
            self.log.answered().map_err(log_err)?;
            self.pace.step();
            self.sent.chunks.entry(id).or_default().push((span.offset, n, to));
        }
        Ok(())
    }
}
