//! What the instance says about itself: capacity summed over the daemons (statfs),
//! one daemon's capacity and counters, and whether a daemon answers; and how a
//! daemon shares its node (`tune`).
//!
//! Not for: anything about one file (namespace.rs).

use crate::error::unexpected;
use crate::rpc::Call;
use crate::stat::StatFs;
use crate::{Client, DaemonMetrics, DaemonStats, Result};
use gust_proto::MoveProgress;
use gust_proto::{Request, Response};

/// Bound on threads pinging daemons at once ([`Client::unanswered`]).
pub const PING_THREADS_MAX: usize = 64;

impl Client {
    pub(crate) fn statfs_impl(&self) -> Result<StatFs> {
        let mut s = StatFs {
            total_bytes: 0,
            free_bytes: 0,
            avail_bytes: 0,
            files: 0,
            daemons: self.daemon_count(),
            chunk_size_bytes: self.chunk_size,
        };
        let calls = self.all_daemons().map(|d| Call { daemon: d, req: Request::StatFs, bulk: Vec::new() }).collect();
        for (d, a) in self.all_daemons().zip(self.transport.batch(calls)) {
            match a {
                Ok((Response::StatFs { total_bytes, free_bytes, avail_bytes, files }, _)) => {
                    s.total_bytes += total_bytes;
                    s.free_bytes += free_bytes;
                    s.avail_bytes += avail_bytes;
                    s.files += files;
                }
                Ok((r, _)) => return Err(unexpected(r)),
                // A down daemon's share is not there to be used.
                Err(e) if self.skippable(d, e) => {}
                Err(e) => return Err(e),
            }
        }
        // Every byte and record is stored `replicas` times.
        let r = self.replicas() as u64;
        s.total_bytes /= r;
        s.free_bytes /= r;
        s.avail_bytes /= r;
        s.files /= r;
        Ok(s)
    }

    /// Counters of one daemon (requests per op, bytes, connections).
    pub fn daemon_stats(&self, daemon: u32) -> Result<DaemonStats> {
        match self.transport.call(daemon, Request::Stats)? {
            Response::Stats(s) => Ok(s),
            r => Err(unexpected(r)),
        }
    }

    /// Everything one daemon counts: ops with latencies and errors, bytes, store
    /// sizes, capacity, busiest directories.
    pub fn daemon_metrics(&self, daemon: u32) -> Result<DaemonMetrics> {
        match self.transport.call(daemon, Request::Metrics)? {
            Response::Metrics(m) => Ok(m),
            r => Err(unexpected(r)),
        }
    }

    /// Capacity of one daemon's root directory.
    pub fn daemon_statfs(&self, daemon: u32) -> Result<StatFs> {
        match self.transport.call(daemon, Request::StatFs)? {
            Response::StatFs { total_bytes, free_bytes, avail_bytes, files } => Ok(StatFs {
                total_bytes,
                free_bytes,
                avail_bytes,
                files,
                daemons: 1,
                chunk_size_bytes: self.chunk_size,
            }),
            r => Err(unexpected(r)),
        }
    }

    pub fn ping(&self, daemon: u32) -> Result<()> {
        self.transport.call(daemon, Request::Ping).map(|_| ())
    }

    /// Opens a connection to every daemon now, with one ping each (in one batch):
    /// a process about to give up the rights that reach the daemons' sockets (the
    /// preload library before setuid) keeps them. Failures are left for later calls.
    pub fn connect_all(&self) {
        let calls = self.all_daemons().map(|d| crate::rpc::Call { daemon: d, req: Request::Ping, bulk: Vec::new() });
        let _ = self.transport.batch(calls.collect());
    }

    /// The daemons that do not answer a ping, each with why (the transport's
    /// words, naming the address), in id order: empty when all answer. Pings go out
    /// from at most [`PING_THREADS_MAX`] threads at once, so a thousand daemons, or
    /// hosts that let a connect hang, take a few RPC timeouts, not one each. The one
    /// way `gust start`, `gust mount` and readiness checks ask.
    pub fn unanswered(&self) -> Vec<(u32, String)> {
        let n = self.daemon_count();
        let down = std::sync::Mutex::new(Vec::new());
        let next = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..(n as usize).min(PING_THREADS_MAX) {
                s.spawn(|| loop {
                    let d = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if d >= n {
                        return;
                    }
                    if let Err(e) = self.ping(d) {
                        let why = self.last_transport_error().unwrap_or_else(|| e.to_string());
                        down.lock().unwrap_or_else(|e| e.into_inner()).push((d, why));
                    }
                });
            }
        });
        let mut v = down.into_inner().unwrap_or_else(|e| e.into_inner());
        v.sort();
        v
    }

    /// Asks one daemon to stop; unless `keep`, it removes its root directory.
    pub fn shutdown_daemon(&self, daemon: u32, keep: bool) -> Result<()> {
        self.transport.call(daemon, Request::Shutdown { keep }).map(|_| ())
    }

    /// Changes how daemon `daemon` shares its node (`gust tune`; None leaves a limit
    /// as it is, 0 lifts it: see the `tune` request) and returns what it runs with
    /// after: its cores as a CPU list, its niceness, its bandwidth limit in bytes a
    /// second (0: none).
    pub fn tune_daemon(
        &self,
        daemon: u32,
        cpus: Option<u32>,
        nice: Option<i32>,
        max_bandwidth: Option<u64>,
    ) -> Result<(String, i32, u64)> {
        match self.transport.call(daemon, Request::Tune { cpus, nice, max_bandwidth })? {
            Response::Tuned { cpus, nice, max_bandwidth } => Ok((cpus, nice, max_bandwidth)),
            r => Err(unexpected(r)),
        }
    }

    /// Sends step `step` of a move to layout `generation` to daemon `daemon`
    /// (`gust expand`, `gust shrink`) and returns where its part stands.
    pub fn move_step(&self, daemon: u32, step: gust_proto::MoveStep, generation: u32) -> Result<MoveProgress> {
        match self.transport.call(daemon, Request::Move { step, generation })? {
            Response::Moved(p) => Ok(p),
            r => Err(unexpected(r)),
        }
    }

    /// Gives daemon `daemon` the hosts file `text` for its node's copy (a move on
    /// many nodes; gust-cli's resize.rs).
    pub fn put_hosts(&self, daemon: u32, text: String) -> Result<()> {
        match self.transport.call(daemon, Request::PutHosts { text })? {
            Response::Ok => Ok(()),
            r => Err(unexpected(r)),
        }
    }
}
