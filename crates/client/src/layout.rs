//! The layout this client routes by: the placement of the hosts file's placed
//! daemons, and its generation, which every request carries (the frame header).
//!
//! `gust expand` and `gust shrink` move data to a new layout under a new
//! generation (docs/DESIGN.md, "Growing and shrinking"). Daemons answer a request
//! of an older generation `MOVED`, one sent during the move `MOVING`. On `MOVED`
//! this client reads the hosts file again and routes by the new layout
//! ([`Client::refresh_layout`]); the traced entry points (traced.rs) then run the
//! operation again if no request of it had been served yet, and fail it with EIO
//! (saying why) otherwise. `MOVING` is waited out in the transport (rpc.rs).
//!
//! Not for: hashing (gust-placement), connections (rpc.rs).

use crate::{Client, Errno, Result};
use gust_hosts::HostsFile;
use gust_placement::{CapacityWeighted, Distributor, WideStriping};
use std::cell::Cell;
use std::sync::RwLock;

thread_local! {
    /// A request of the current operation of this thread was served (an answer
    /// other than `MOVED` or `MOVING` came): running it again could apply it twice.
    static SERVED: Cell<bool> = const { Cell::new(false) };
}

/// Notes that a request of this thread's operation was served.
pub(crate) fn note_served() {
    SERVED.with(|s| s.set(true));
}

/// Runs `f`, whose requests are not part of this thread's operation (what the
/// process deferred, sent before it): served, they do not keep the operation
/// from running again under a new layout.
pub(crate) fn apart<T>(f: impl FnOnce() -> T) -> T {
    let outer = SERVED.with(|s| s.get());
    let r = f();
    SERVED.with(|s| s.set(outer));
    r
}

/// Whether a placement spills chunks to the next daemon when one is full (its
/// readers look past a hole there: daemons and short-circuit reads cut spans at
/// holes).
/// An erasure-coded instance does not: a stripe's cells stay on their daemons.
pub(crate) fn spills(h: &HostsFile) -> bool {
    h.ec.is_none() && matches!(h.placement, gust_hosts::Placement::Capacity | gust_hosts::Placement::Local)
}

/// The placement of `hosts`' placed daemons.
pub(crate) fn distributor(hosts: &HostsFile) -> Box<dyn Distributor> {
    let n = hosts.placed_count();
    if let Some((k, m)) = hosts.ec.filter(|(k, m)| k + m <= n) {
        return Box::new(erasure_coded(hosts, gust_placement::ec::Code { k, m }));
    }
    match hosts.placement {
        gust_hosts::Placement::Wide => Box::new(WideStriping::new(n)),
        gust_hosts::Placement::Capacity => Box::new(CapacityWeighted::new(&capacities(hosts))),
        gust_hosts::Placement::Local => {
            crate::home::choose(&hosts.daemons[..n as usize]);
            Box::new(gust_placement::NodeLocal::new(n))
        }
    }
}

/// The stripes of an erasure-coded instance over its placed daemons: by capacity
/// with capacity placement, else spread evenly.
pub(crate) fn erasure_coded(hosts: &HostsFile, code: gust_placement::ec::Code) -> gust_placement::ErasureCoded {
    let n = hosts.placed_count();
    match hosts.placement {
        gust_hosts::Placement::Capacity => gust_placement::ErasureCoded::weighted(&capacities(hosts), code),
        _ => gust_placement::ErasureCoded::new(n, code),
    }
}

/// The capacities the placed daemons registered (0 where none).
pub(crate) fn capacities(hosts: &HostsFile) -> Vec<u64> {
    hosts.daemons[..hosts.placed_count() as usize].iter().map(|d| d.capacity_bytes.unwrap_or(0)).collect()
}

/// A distributor that can be replaced while other threads route by it.
pub(crate) struct Layout {
    current: RwLock<Box<dyn Distributor>>,
}

impl Layout {
    pub(crate) fn new(d: Box<dyn Distributor>) -> Layout {
        Layout { current: RwLock::new(d) }
    }

    /// `f` of the current distributor, under the read lock (no reference count
    /// taken: every routing decision passes here).
    fn with<R>(&self, f: impl FnOnce(&dyn Distributor) -> R) -> R {
        f(&**self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    fn set(&self, d: Box<dyn Distributor>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = d;
    }
}

impl Distributor for Layout {
    fn daemon_count(&self) -> u32 {
        self.with(|d| d.daemon_count())
    }
    fn locate_metadata(&self, path: &str) -> u32 {
        self.with(|d| d.locate_metadata(path))
    }
    fn locate_chunk(&self, file_id: u128, chunk: u64) -> u32 {
        self.with(|d| d.locate_chunk(file_id, chunk))
    }
    fn chunk_order(&self, file_id: u128, chunk: u64, out: &mut Vec<u32>) {
        self.with(|d| d.chunk_order(file_id, chunk, out))
    }
    fn spill_daemons(&self) -> u32 {
        self.with(|d| d.spill_daemons())
    }
    fn daemons_for_chunks(&self, file_id: u128, chunk_first: u64, chunk_last: u64) -> Vec<u32> {
        self.with(|d| d.daemons_for_chunks(file_id, chunk_first, chunk_last))
    }
}

impl Client {
    /// The layout generation this client routes by.
    pub fn layout_generation(&self) -> u32 {
        self.transport.generation()
    }

    /// Reads the hosts file again and routes by the layout it says from now on
    /// (after a daemon answered `MOVED`). Another instance's file, or one with
    /// more daemons than this client kept room for, is an error (EIO, saying so).
    pub fn refresh_layout(&self) -> Result<()> {
        let h = HostsFile::load(&self.hosts_path).map_err(|e| self.layout_error(e.to_string()))?;
        if h.instance != self.hosts.instance {
            return Err(self.layout_error(format!(
                "{} now describes instance {}, not {}",
                self.hosts_path.display(),
                h.instance,
                self.hosts.instance
            )));
        }
        if h.generation <= self.layout_generation() {
            return Ok(());
        }
        if h.daemons.iter().any(|d| d.id >= self.transport.links_len()) {
            return Err(self.layout_error(format!(
                "the instance grew past the {} daemons this process kept room for; restart it",
                self.transport.links_len()
            )));
        }
        for d in &h.daemons {
            self.transport.refresh_entry(d.id);
        }
        self.dist.set(distributor(&h));
        self.transport.set_layout(h.generation, h.placed_count());
        // A placement changed at run time (`gust tune --placement`): local reads
        // cut spans at holes as the daemons now do.
        if let Some(t) = self.transport.grants.short_circuit() {
            t.access.set_trim_holes(spills(&h));
        }
        tracing::info!(generation = h.generation, daemons = h.placed_count(), "routing by the instance's new layout");
        Ok(())
    }

    fn layout_error(&self, msg: String) -> Errno {
        *self.transport.last_error_slot() = Some(msg);
        Errno(libc::EIO)
    }

    /// Runs operation `f` of this thread; when a daemon answers `MOVED` before
    /// any request of it was served, routes by the new layout and runs it again.
    pub(crate) fn rerouted<T>(&self, f: impl FnMut() -> Result<T>) -> Result<T> {
        self.rerouted_as(false, f)
    }

    /// `rerouted` for an operation that changes nothing (a whole listing): run
    /// again on `MOVED` even if some of its requests were served.
    pub(crate) fn rerouted_reading<T>(&self, f: impl FnMut() -> Result<T>) -> Result<T> {
        self.rerouted_as(true, f)
    }

    fn rerouted_as<T>(&self, repeatable: bool, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        let outer = SERVED.with(|s| s.replace(false));
        let mut tries = 0;
        let started = std::time::Instant::now();
        let r = loop {
            SERVED.with(|s| s.set(false));
            match f() {
                // A call the transport does not send again itself (a whole
                // file's read): waited out here.
                Err(Errno(gust_proto::errno::MOVING))
                    if !SERVED.with(|s| s.get()) && started.elapsed() < crate::rpc::move_wait() =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(Errno(gust_proto::errno::MOVING)) => {
                    break Err(self.layout_error("the instance was moving data to a new layout".into()))
                }
                Err(Errno(gust_proto::errno::MOVED)) => {
                    let served = SERVED.with(|s| s.get());
                    if let Err(e) = self.refresh_layout() {
                        break Err(e);
                    }
                    tries += 1;
                    if (served && !repeatable) || tries > 8 {
                        break Err(self.layout_error(
                            "the instance's layout changed during this operation (gust expand or shrink): \
                             part of it was done under the old layout; try it again"
                                .into(),
                        ));
                    }
                }
                r => break r,
            }
        };
        SERVED.with(|s| s.set(outer || s.get()));
        r
    }
}
