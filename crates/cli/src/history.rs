//! `gust bench history`: real client processes race on a few shared paths, each
//! records what it called and what came back, and the history is checked for
//! linearizability (gust-history).
//!
//! The coordinator starts P worker processes (`gust bench history-worker`, this same
//! binary), each with its own client core. A worker makes seeded random create
//! (O_CREAT|O_EXCL, then close), chmod, unlink and stat calls and listings of the
//! directory (each read as one observation per shared path: named or not), mostly
//! stats, five in eight on the K shared paths of the run, one in eight on two paths
//! of its own beside them, one in eight on eight paths in a directory of its own,
//! where its creates are the preload library's (open without O_EXCL, deferred under
//! the directory's claim), and one in eight a stat in another worker's directory
//! (which recalls that worker's claim). Each worker starts by opening every path of
//! its directory once, while the others wait at the start: the first open at each
//! daemon takes the claim, the next ones there are deferred under it (with fewer
//! daemons than paths, some are), so every run checks deferred creates and their
//! recalls, whatever the timing. A worker
//! writes each call to its history file twice: the invocation before the call, the
//! completion after, one whole line each, so a worker killed at any point leaves
//! every completed call and at most one call of unknown outcome. Times are
//! CLOCK_MONOTONIC, which every process of the machine shares.
//!
//! Faults (`--faults kill,stop,daemon-stop,daemon-kill`): every 50-800 ms the coordinator SIGKILLs a running
//! worker and starts a replacement under a new process number (with what remains of
//! the killed one's operations), or SIGSTOPs one for 0.5-3 s. A stopped worker holds
//! whatever its client holds (connections, and grants once they exist) while others
//! go on, which is the case a recall must handle. A worker killed, or stopped for
//! 1.5 s or more (past its lease, what it deferred may be lost or late: a crash's
//! loss, docs/SEMANTICS.md), has its operations in its own directory left undecided.
//! With `daemon-stop` among the faults, a daemon of the instance (all on this host)
//! is SIGSTOPped for 0.5-3 s instead now and then: past a lease, every client's
//! lease on it runs out while its holders' grants and claims stand at the daemon.
//! Nothing is left undecided for it: a paused daemon loses nothing. With
//! `daemon-kill`, a daemon is SIGKILLed now and then (one at a time, after a second
//! of service since the last restart) and started again on its root directory
//! 0.2-1.5 s later (`gust repair --id`, which waits until it serves): clients find
//! their connections to it gone and forget its grants and claims, and the new daemon
//! holds changes back for a lease. In a round with a kill the workers' own
//! directories are not checked (what a worker deferred under a claim on the killed
//! daemon is lost with it), calls that failed with EIO are undecided, and so are
//! unlinks that returned near a kill (see `leave_undecided`).
//!
//! With `--netns NS0,NS1,...` worker k runs in network namespace NS[k mod n] over
//! TCP (`ip netns exec`): clients on separate hosts, as the test suite's test hosts
//! (tests/tests/netns_history.rs), so grants, claims and recalls cross hosts.
//!
//! A run counted in seconds goes in rounds of at most --round-seconds, each in a
//! fresh directory, checked and dropped before the next: at ~30,000 operations a
//! second (2 cores), ten minutes make 18 million operations and a few GB of history,
//! which one round at a time never holds.
//!
//! Exit status: 0 linearizable, 1 a violation, 2 undecided (the checker reached its
//! limits), 3 the run itself failed (a worker could not start, failed, or did not
//! finish in time) with no violation found.
//!
//! Bounds: every loop ends by itself: a worker after its operations or at its
//! deadline, a round at a hard deadline (the coordinator then kills what is left),
//! faults at most 5 a second of round (64 in a round counted in operations), the
//! checker at --check-seconds a round.

use crate::instance::InstanceArgs;
use clap::{Args, ValueEnum};
use gust_client::{Client, ClientOptions, Errno};
use gust_history::{Limits, Line, Op, OpKind, Outcome, Report, Verdict};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXIT_VIOLATION: i32 = 1;
const EXIT_UNDECIDED: i32 = 2;
const EXIT_RUN_FAILED: i32 = 3;

/// Paths of its own each worker uses besides the shared ones.
const PRIVATE_PATHS: u32 = 2;
/// Paths in a directory of its own (`w<process>`), where only it creates: its
/// creates there (`open`, without O_EXCL) are deferred under the directory's claim
/// (gust-client claims.rs), and other workers' stats there recall the claim. More
/// than the daemons of a test instance, so that the first opens, which every worker
/// makes before the others start, put two names on one daemon.
const CLAIMED_PATHS: u32 = 8;
/// A worker waits at most this long for the others to reach the start.
const START_WAIT: Duration = Duration::from_secs(60);
/// A worker stopped this long may outlive its lease (2 s after the daemon last
/// served it): what it deferred under a claim may then be lost or come late, as
/// docs/SEMANTICS.md says, so its operations in its own directory are left
/// undecided (as a killed worker's) rather than checked.
const UNCHECKED_STOP_MS: u64 = 1500;
/// Modes of creates and chmods: distinct, so a stale stat shows.
const MODES: [u32; 8] = [0o600, 0o604, 0o640, 0o644, 0o660, 0o664, 0o700, 0o755];
const WORKERS_MAX: u32 = 256;
const PATHS_MAX: u32 = 100_000;
const SECONDS_MAX: f64 = 7.0 * 86_400.0;
/// Faults come at random gaps in this range (ms).
const FAULT_GAP_MS: (u64, u64) = (50, 800);
/// A stopped worker is continued after a time in this range (ms).
const STOP_MS: (u64, u64) = (500, 3000);
/// A killed daemon is started again after a time in this range (ms).
const DAEMON_DOWN_MS: (u64, u64) = (200, 1500);
/// How often the coordinator looks at its workers.
const POLL: Duration = Duration::from_millis(10);

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// SIGKILL a worker, start a replacement.
    Kill,
    /// SIGSTOP a worker for 0.5-3 s, then SIGCONT it.
    Stop,
    /// SIGSTOP a daemon (of an instance on this host) for 0.5-3 s, then SIGCONT it.
    DaemonStop,
    /// SIGKILL a daemon (of an instance on this host) and start it again on its root
    /// directory 0.2-1.5 s later (`gust repair --id`).
    DaemonKill,
    /// Set a host's link (`--links`) down for 0.5-3 s: its workers and its daemon
    /// are cut off from the others.
    LinkDown,
}

#[derive(Args)]
pub struct HistoryArgs {
    /// Worker processes at any time.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// Run this long, in rounds of at most --round-seconds.
    #[arg(long, conflicts_with = "ops")]
    seconds: Option<f64>,
    /// Longest round of a --seconds run: each round has a fresh directory and its
    /// history is checked and dropped before the next, so memory and disk stay
    /// bounded (~30,000 operations a second on 2 cores: ~40 MB of history a round).
    #[arg(long, default_value_t = 10.0)]
    round_seconds: f64,
    /// Operations per worker, in one round [default: 1000, unless --seconds].
    #[arg(long)]
    ops: Option<u64>,
    /// Shared paths (few paths: more contention).
    #[arg(long, default_value_t = 8)]
    paths: u32,
    /// Workers take no claims, write a byte into each file they create, and make
    /// their stats with `stat_data`: each tells the node cache's holder what it
    /// looked up, and answers lookups from what the holder took for the others
    /// (docs/DESIGN.md, "The node cache").
    #[arg(long)]
    node_cache: bool,
    /// Seed of the operation sequences (and of the faults' times and victims).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// GustFS directory under which each round makes its own (run.PID.SEED.ROUND).
    #[arg(long, default_value = "/history")]
    dir: String,
    /// Faults to inject while the workers run, comma-separated: kill, stop (of
    /// workers), daemon-stop, daemon-kill (of the daemons, which must run on this
    /// host).
    #[arg(long, value_enum, value_delimiter = ',')]
    faults: Vec<Fault>,
    /// Run worker k in network namespace NETNS[k mod n] (`ip netns exec`), over
    /// TCP: clients on separate hosts, such as the test hosts of the test suite
    /// (needs root). The daemons are wherever the hosts file says; `daemon-kill`
    /// starts daemon i again in NETNS[i].
    #[arg(long, value_delimiter = ',')]
    netns: Vec<String>,
    /// Links of the hosts (`ip link` names in this namespace) for `--faults
    /// link-down`.
    #[arg(long, value_delimiter = ',')]
    links: Vec<String>,
    /// Print JSON instead of a summary.
    #[arg(long)]
    json: bool,
    /// Write the merged history (one operation a line) of the last round checked
    /// to this file: the round of the violation, if any (a run stops at the first).
    #[arg(long, value_name = "FILE")]
    keep_history: Option<PathBuf>,
    /// Check a history file (one kept with --keep-history, or workers' files) and
    /// run nothing.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// Seconds the checker may take on a round before it calls it undecided.
    #[arg(long, default_value_t = 300.0)]
    check_seconds: f64,
    #[command(flatten)]
    inst: InstanceArgs,
}

#[derive(Args)]
pub struct WorkerArgs {
    /// Process number in the history.
    #[arg(long)]
    process: u32,
    #[arg(long)]
    seed: u64,
    /// Directory of the run in GustFS.
    #[arg(long)]
    base: String,
    /// Shared paths.
    #[arg(long)]
    paths: u32,
    /// Operations to make.
    #[arg(long)]
    ops: Option<u64>,
    /// CLOCK_MONOTONIC nanoseconds at which to stop.
    #[arg(long)]
    until_ns: Option<u64>,
    /// History file to append to.
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    hosts_file: PathBuf,
    /// Local directory of the start: after its first opens the worker makes
    /// `ready.<process>` there and waits for `go`.
    #[arg(long)]
    start: PathBuf,
    /// As the coordinator's --node-cache.
    #[arg(long)]
    node_cache: bool,
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the machine.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC exists
    // on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The attribute the model's setxattr and getxattr use.
const XATTR_NAME: &str = "user.h";

/// The seed of one worker's operations: the run's seed and its process number.
fn worker_seed(seed: u64, process: u32) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (process as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

/// The next operation: 38% stat, 5% a listing of the directory (what it says of
/// every shared path), 15% create, 14% chmod, 7% setxattr and 7% getxattr of
/// `user.h`, 14% unlink; three in four on a shared path. With --node-cache, 85%
/// stats and no listings.
fn pick(rng: &mut StdRng, a: &WorkerArgs) -> (OpKind, String, u32) {
    let roll = rng.gen_range(0..100);
    let mut kind = if a.node_cache {
        // A data set read by many and changed by few; no listings (of many paths:
        // one operation per path).
        match roll {
            0..=84 => OpKind::Stat,
            85..=87 => OpKind::Create,
            88..=92 => OpKind::Chmod,
            93..=94 => OpKind::Setxattr,
            95..=96 => OpKind::Getxattr,
            _ => OpKind::Unlink,
        }
    } else {
        pick_kind(roll)
    };
    let path = match rng.gen_range(0..8) {
        0..=4 => format!("{}/s{}", a.base, rng.gen_range(0..a.paths)),
        5 => format!("{}/p{}.{}", a.base, a.process, rng.gen_range(0..PRIVATE_PATHS)),
        6 => {
            // Its own directory: creates as the preload library makes them.
            kind = match kind {
                OpKind::Create => OpKind::Open,
                OpKind::Listed => OpKind::Stat,
                k => k,
            };
            format!("{}/q{}", own_dir(&a.base, a.process), rng.gen_range(0..CLAIMED_PATHS))
        }
        _ => {
            // Another worker's: a stat, which recalls that worker's claim.
            kind = OpKind::Stat;
            let other = rng.gen_range(0..=a.process.max(3));
            format!("{}/q{}", own_dir(&a.base, other), rng.gen_range(0..CLAIMED_PATHS))
        }
    };
    let arg = match kind {
        OpKind::Create | OpKind::Open | OpKind::Chmod => MODES[rng.gen_range(0..MODES.len())],
        OpKind::Setxattr => rng.gen_range(1..=gust_history::model::XATTR_VALUES),
        OpKind::Unlink | OpKind::Stat | OpKind::Listed | OpKind::Getxattr => 0,
    };
    (kind, path, arg)
}

/// The kind of the default mix for a roll of 0..100.
fn pick_kind(roll: u32) -> OpKind {
    match roll {
        0..=37 => OpKind::Stat,
        38..=42 => OpKind::Listed,
        43..=57 => OpKind::Create,
        58..=71 => OpKind::Chmod,
        72..=78 => OpKind::Setxattr,
        79..=85 => OpKind::Getxattr,
        _ => OpKind::Unlink,
    }
}

/// The directory only worker `process` creates in.
fn own_dir(base: &str, process: u32) -> String {
    format!("{base}/w{process}")
}

/// A worker's operations in its own directory, after it was killed or stopped for
/// longer than `UNCHECKED_STOP_MS` (`unchecked`), are left undecided: what it
/// deferred there may have been lost, which a crash is allowed to do. Its
/// observations there go; its changes may have taken effect at any time after their
/// invocation, or never.
///
/// In a round in which a daemon was killed (`daemon_down` not empty): the paths of
/// the workers' own directories are not checked at all (what a worker deferred
/// under a claim on the killed daemon is lost with it, docs/SEMANTICS.md; paths are
/// checked one by one, so leaving some out is sound). On the shared paths, a call
/// that failed with EIO (its daemon was down) is a change of unknown effect or an
/// observation of nothing, and so is an unlink that returned in the second before a
/// kill or while a daemon was down: it may have been deferred under a claim too (a
/// worker's next call sends what it deferred).
fn leave_undecided(
    ops: Vec<Op>,
    base: &str,
    unchecked: &std::collections::HashSet<u32>,
    daemon_down: &[(u64, u64)],
) -> Vec<Op> {
    let near_a_kill = |o: &Op| {
        daemon_down.iter().any(|&(from, to)| o.return_ns.saturating_add(1_000_000_000) >= from && o.return_ns <= to)
    };
    let own_dirs = format!("{base}/w");
    ops.into_iter()
        .filter_map(|mut o| {
            if !daemon_down.is_empty() && o.path.starts_with(&own_dirs) {
                return None;
            }
            let own = unchecked.contains(&o.process) && o.path.starts_with(&format!("{}/", own_dir(base, o.process)));
            let lost = !daemon_down.is_empty()
                && (o.result == Outcome::Errno(libc::EIO)
                    || (o.kind == OpKind::Unlink && o.result == Outcome::Ok && near_a_kill(&o)));
            if !own && !lost {
                return Some(o);
            }
            if o.kind.observes() {
                return None;
            }
            o.result = Outcome::Unknown;
            o.return_ns = gust_history::RETURN_NEVER;
            Some(o)
        })
        .collect()
}

/// A listing of the shared paths' directory: per shared path, `Ok` if it names the
/// path, ENOENT if not (the same errno for all if it failed).
fn list(c: &Client, a: &WorkerArgs) -> Vec<(String, Outcome)> {
    let shared: Vec<String> = (0..a.paths).map(|i| format!("{}/s{i}", a.base)).collect();
    match c.read_dir(&a.base) {
        Ok(entries) => {
            let names: std::collections::HashSet<String> = entries.into_iter().map(|e| e.name).collect();
            shared
                .into_iter()
                .map(|p| {
                    let named = names.contains(p.rsplit('/').next().unwrap_or_default());
                    (p, if named { Outcome::Ok } else { Outcome::Errno(libc::ENOENT) })
                })
                .collect()
        }
        Err(e) => shared.into_iter().map(|p| (p, Outcome::Errno(e.0))).collect(),
    }
}

/// Makes one call through the client core and says what it returned.
fn call(c: &Client, kind: OpKind, path: &str, arg: u32, node_cache: bool) -> Outcome {
    let r: Result<Outcome, Errno> = match kind {
        OpKind::Create => c.open(path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, arg).map(|fd| {
            // With --node-cache a file has data, as a data set's files do: processes
            // tell the node cache's holder of files with data only. The model sees
            // modes, not sizes.
            if node_cache {
                if let Err(e) = c.write(fd, b"x") {
                    eprintln!("gust bench history-worker: write after creating {path}: {e}");
                }
            }
            // The create took effect with the open; a failed close changes nothing
            // of what the model sees, but a person should know.
            if let Err(e) = c.close(fd) {
                eprintln!("gust bench history-worker: close after creating {path}: {e}");
            }
            Outcome::Ok
        }),
        OpKind::Open => c.open_deferred(path, libc::O_CREAT | libc::O_WRONLY, arg).map(|fd| {
            if let Err(e) = c.close(fd) {
                eprintln!("gust bench history-worker: close after opening {path}: {e}");
            }
            Outcome::Ok
        }),
        OpKind::Chmod => c.chmod(path, arg).map(|_| Outcome::Ok),
        OpKind::Unlink => c.unlink(path).map(|_| Outcome::Ok),
        // The record with the file's data: a lookup the node cache answers.
        OpKind::Stat if node_cache => c.stat_data(path).map(|(r, _)| Outcome::Mode(r.mode & 0o7777)),
        OpKind::Stat => c.stat(path).map(|s| Outcome::Mode(s.mode & 0o7777)),
        OpKind::Setxattr => c.setxattr(path, XATTR_NAME, arg.to_string().as_bytes(), 0, true).map(|_| Outcome::Ok),
        OpKind::Getxattr => c.getxattr(path, XATTR_NAME, true).map(|v| {
            // A value the model did not write reads as 0, which it never holds.
            Outcome::Value(std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()).unwrap_or(0))
        }),
        OpKind::Listed => unreachable!("listings are made by `list`"),
    };
    r.unwrap_or_else(|e| Outcome::Errno(e.0))
}

/// Appends one line with one write, so that a kill leaves it whole or absent.
fn write_line(out: &mut std::fs::File, l: &Line, path: &Path) -> Result<(), String> {
    let mut s = l.to_json();
    s.push('\n');
    out.write_all(s.as_bytes()).map_err(|e| format!("cannot write history file {}: {e}", path.display()))
}

/// Entry point of `gust bench history-worker`.
pub fn worker(a: WorkerArgs) -> Result<(), String> {
    if a.ops.is_none() && a.until_ns.is_none() {
        return Err("history-worker needs --ops or --until-ns".into());
    }
    // As the preload library's: it lives as long as the process and takes claims
    // (unless it reads through the node cache, which a process with claims does not).
    let client: &'static Client = Box::leak(Box::new(Client::open_instance(&a.hosts_file, ClientOptions::from_env())?));
    if !a.node_cache {
        client.arm_claims();
    }
    // Its daemon may be down (`--faults daemon-kill`) for a while.
    let up_by = Instant::now() + START_WAIT;
    loop {
        match client.mkdir(&own_dir(&a.base, a.process), 0o755) {
            Ok(()) => break,
            Err(e) if e.0 == libc::EEXIST => break,
            Err(e) if e.0 == libc::EIO && Instant::now() < up_by => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("cannot make {}: {e}", own_dir(&a.base, a.process))),
        }
    }
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&a.out)
        .map_err(|e| format!("cannot open history file {}: {e}", a.out.display()))?;
    let mut rng = StdRng::seed_from_u64(worker_seed(a.seed, a.process));
    let mut seq = 0u64;
    // Every path of its own directory once, before the others start: with more
    // paths than daemons, some open is deferred under a claim nobody recalls yet.
    let first = a.ops.map_or(CLAIMED_PATHS as u64, |n| n.min(CLAIMED_PATHS as u64));
    for i in 0..first {
        let path = format!("{}/q{i}", own_dir(&a.base, a.process));
        let mode = MODES[rng.gen_range(0..MODES.len())];
        record(client, &mut out, &a, seq, OpKind::Open, &path, mode)?;
        seq += 1;
    }
    wait_for_start(&a)?;
    while a.ops.is_none_or(|n| seq < n) && a.until_ns.is_none_or(|t| monotonic_ns() < t) {
        let (mut kind, path, arg) = pick(&mut rng, &a);
        if kind == OpKind::Listed && a.ops.is_some_and(|n| seq + a.paths as u64 > n) {
            // A listing counts one operation per shared path: the last few are stats,
            // so that a worker makes exactly --ops.
            kind = OpKind::Stat;
        }
        if kind == OpKind::Listed {
            // One line per shared path, all invoked before the listing and
            // completed after it.
            let t = monotonic_ns();
            let invs: Vec<Line> = (0..a.paths)
                .map(|i| Line::invocation(a.process, seq + i as u64, kind, &format!("{}/s{i}", a.base), 0, t))
                .collect();
            for inv in &invs {
                write_line(&mut out, inv, &a.out)?;
            }
            let results = list(client, &a);
            let t = monotonic_ns();
            let down = results.iter().any(|(_, r)| *r == Outcome::Errno(libc::EIO));
            for (inv, (_, result)) in invs.iter().zip(results) {
                write_line(&mut out, &inv.completed(t, result), &a.out)?;
            }
            if down {
                wait_for_daemons(client);
            }
            seq += a.paths as u64;
            continue;
        }
        record(client, &mut out, &a, seq, kind, &path, arg)?;
        seq += 1;
    }
    // What is still deferred goes out before the process ends (the preload library
    // does this in its exit handler).
    client.settle_all();
    if a.node_cache {
        let hits = a.out.with_extension("hits");
        std::fs::write(&hits, client.node_cache_hits().to_string())
            .map_err(|e| format!("cannot write {}: {e}", hits.display()))?;
    }
    Ok(())
}

/// Makes one call, its invocation and its completion written around it. A call
/// that met a down daemon (EIO) is followed by a wait for the daemons: each call
/// until it is back would be one more of unknown outcome, which the checker pays
/// for.
fn record(
    client: &Client,
    out: &mut std::fs::File,
    a: &WorkerArgs,
    seq: u64,
    kind: OpKind,
    path: &str,
    arg: u32,
) -> Result<(), String> {
    let inv = Line::invocation(a.process, seq, kind, path, arg, monotonic_ns());
    write_line(out, &inv, &a.out)?;
    let result = call(client, kind, path, arg, a.node_cache);
    write_line(out, &inv.completed(monotonic_ns(), result), &a.out)?;
    if result == Outcome::Errno(libc::EIO) {
        if let Some(why) = client.last_transport_error() {
            tracing::warn!("{} {path}: EIO: {why}", kind.name());
        }
        wait_for_daemons(client);
    }
    Ok(())
}

/// Waits until every daemon answers a ping (at most `START_WAIT`).
fn wait_for_daemons(client: &Client) {
    let deadline = Instant::now() + START_WAIT;
    while (0..client.daemon_count()).any(|d| client.ping(d).is_err()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Says this worker is ready (`ready.<process>` in the start directory) and waits
/// for the coordinator's `go`, which comes once every first worker is ready (a
/// replacement finds it there). Bounded: past `START_WAIT` the worker goes on.
fn wait_for_start(a: &WorkerArgs) -> Result<(), String> {
    let ready = a.start.join(format!("ready.{}", a.process));
    std::fs::write(&ready, b"").map_err(|e| format!("cannot make {}: {e}", ready.display()))?;
    let go = a.start.join("go");
    let deadline = Instant::now() + START_WAIT;
    while !go.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Entry point of `gust bench history`: exits with the verdict's status.
pub fn run(a: HistoryArgs) -> Result<(), String> {
    let code = drive(&a).unwrap_or_else(|e| {
        eprintln!("gust: {e}");
        EXIT_RUN_FAILED
    });
    if code != 0 {
        let _ = std::io::stdout().flush();
        std::process::exit(code);
    }
    Ok(())
}

/// What the workers did, over all rounds.
#[derive(Default)]
struct RunStats {
    rounds: u32,
    processes: u32,
    kills: u32,
    stops: u32,
    /// Daemons stopped and continued (`--faults daemon-stop`).
    daemon_stops: u32,
    /// Daemons killed and started again (`--faults daemon-kill`).
    daemon_kills: u32,
    /// Links set down and up again (`--faults link-down`).
    link_downs: u32,
    /// Workers that exited with an error, or could not be started.
    failed: Vec<String>,
    /// Workers still running at a round's hard deadline (killed then).
    timed_out: u32,
    seconds: f64,
    /// Requests of deferred work the daemons served during the run
    /// (`create_inline_batch`, `remove_batch`): the claims the checked history
    /// went through. A lower bound with `daemon-kill`: a restarted daemon counts
    /// from 0.
    batches: [u64; 2],
    /// Lookups the workers answered from the node cache (`--node-cache`; workers
    /// killed before their end are not counted).
    node_cache_hits: u64,
}

/// The batch ops counted in `RunStats::batches`.
const BATCH_OPS: [&str; 2] = ["create_inline_batch", "remove_batch"];

/// How many requests of each of `BATCH_OPS` the daemons served so far (0 for a
/// daemon that does not answer: the count is a report, not a check).
fn batch_requests(client: &Client) -> [u64; 2] {
    let mut n = [0u64; 2];
    for d in 0..client.daemon_count() {
        if let Ok(s) = client.daemon_stats(d) {
            for (i, op) in BATCH_OPS.iter().enumerate() {
                n[i] += s.ops.iter().find(|(name, _)| name == op).map_or(0, |(_, k)| *k);
            }
        }
    }
    n
}

/// What the checker found, over all rounds.
#[derive(Default)]
struct Totals {
    operations: usize,
    never_returned: usize,
    indeterminate: usize,
    cut_lines: usize,
    paths: usize,
    violations: usize,
    undecided: usize,
    check_seconds: f64,
    /// Each path not shown linearizable: round, path, verdict, explanation.
    problems: Vec<serde_json::Value>,
    /// None for --check.
    run: Option<RunStats>,
}

impl Totals {
    fn add(&mut self, round: u32, r: &Report, cut_lines: usize, check_seconds: f64) {
        self.operations += r.operations;
        self.never_returned += r.never_returned;
        self.indeterminate += r.indeterminate;
        self.cut_lines += cut_lines;
        self.paths += r.paths.len();
        self.violations += r.violations();
        self.undecided += r.undecided();
        self.check_seconds += check_seconds;
        for p in &r.paths {
            let mut v =
                serde_json::json!({"round": round, "path": p.path, "operations": p.operations, "steps": p.steps});
            match &p.verdict {
                Verdict::Linearizable => continue,
                Verdict::TooBig => v["verdict"] = "undecided".into(),
                Verdict::Violation(x) => {
                    v["verdict"] = "violation".into();
                    v["explanation"] = x.explain(&p.path, r.t0_ns).into();
                    v["culprit"] = serde_json::to_value(x.culprit.to_line()).expect("a history line serializes");
                }
            }
            self.problems.push(v);
        }
    }

    fn run_failed(&self) -> bool {
        self.run.as_ref().is_some_and(|r| !r.failed.is_empty() || r.timed_out > 0)
    }

    fn verdict(&self) -> &'static str {
        if self.violations > 0 {
            "violation"
        } else if self.undecided > 0 {
            "undecided"
        } else {
            "linearizable"
        }
    }
}

/// Runs the workload (or reads --check) and checks it; returns the exit status.
fn drive(a: &HistoryArgs) -> Result<i32, String> {
    let mut t = Totals::default();
    match &a.check {
        Some(f) => {
            let (lines, cut) = read_history(f)?;
            check_round(a, 0, &gust_history::merge(lines)?, cut, &mut t)?;
        }
        None => run_rounds(a, &mut t)?,
    }
    if a.json {
        print_json(a, &t);
    } else {
        print_summary(a, &t);
    }
    Ok(if t.violations > 0 {
        EXIT_VIOLATION
    } else if t.run_failed() {
        EXIT_RUN_FAILED
    } else if t.undecided > 0 {
        EXIT_UNDECIDED
    } else {
        0
    })
}

/// Checks one round's history (and keeps it if asked: the last round checked is
/// the one kept, and a run stops at its first violation).
fn check_round(a: &HistoryArgs, round: u32, ops: &[Op], cut: usize, t: &mut Totals) -> Result<(), String> {
    if let Some(f) = &a.keep_history {
        keep(f, ops)?;
    }
    let start = Instant::now();
    let limits = Limits {
        deadline: Some(start + Duration::from_secs_f64(a.check_seconds.clamp(0.001, SECONDS_MAX))),
        ..Limits::default()
    };
    let report = gust_history::check(ops, &limits);
    t.add(round, &report, cut, start.elapsed().as_secs_f64());
    Ok(())
}

/// Lines of one history file; the second value counts cut last lines.
fn read_history(f: &Path) -> Result<(Vec<Line>, usize), String> {
    let text = std::fs::read_to_string(f).map_err(|e| format!("cannot read history {}: {e}", f.display()))?;
    gust_history::parse_lines(&text).map_err(|e| format!("{}: {e}", f.display()))
}

fn keep(f: &Path, ops: &[Op]) -> Result<(), String> {
    let mut text = String::with_capacity(ops.len() * 128);
    for o in ops {
        text += &o.to_line().to_json();
        text.push('\n');
    }
    std::fs::write(f, text).map_err(|e| format!("cannot write {}: {e}", f.display()))
}

/// One round: its directory in GustFS (every path of the model starts absent), the
/// local directory of its workers' history files, and how long it runs.
struct Round {
    base: String,
    local: PathBuf,
    /// Operations per worker, or None: until `until_ns`.
    ops: Option<u64>,
    until_ns: Option<u64>,
    seconds: f64,
}

fn validate(a: &HistoryArgs) -> Result<(), String> {
    if a.workers == 0 || a.workers > WORKERS_MAX {
        return Err(format!("--workers must be 1 to {WORKERS_MAX}"));
    }
    if a.paths == 0 || a.paths > PATHS_MAX {
        return Err(format!("--paths must be 1 to {PATHS_MAX}"));
    }
    if a.seconds.is_some_and(|s| !(s > 0.0 && s <= SECONDS_MAX)) {
        return Err(format!("--seconds must be above 0 and at most {SECONDS_MAX}"));
    }
    if !(a.round_seconds >= 1.0 && a.round_seconds <= SECONDS_MAX) {
        return Err("--round-seconds must be at least 1".into());
    }
    if !a.dir.starts_with('/') {
        return Err(format!("--dir {}: give a GustFS path from the root (/...)", a.dir));
    }
    if a.faults.contains(&Fault::LinkDown) && a.links.is_empty() {
        return Err("--faults link-down needs --links".into());
    }
    if !a.netns.is_empty() && a.faults.contains(&Fault::DaemonKill) && a.netns.len() < local_daemons(a)?.len() {
        return Err("--faults daemon-kill with --netns needs a namespace for each daemon (daemon i in the i-th)".into());
    }
    Ok(())
}

/// The instance's daemons (id, pid), all on this host.
fn local_daemons(a: &HistoryArgs) -> Result<Vec<(u32, i32)>, String> {
    let path = a.inst.hosts_path();
    let h = gust_hosts::HostsFile::load(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let me = gust_hosts::this_host();
    if let Some(d) = h.daemons.iter().find(|d| d.host != me) {
        return Err(format!(
            "--faults daemon-stop and daemon-kill need every daemon on this host; daemon {} runs on {}",
            d.id, d.host
        ));
    }
    Ok(h.daemons.iter().map(|d| (d.id, d.pid as i32)).collect())
}

/// Runs the rounds one after the other, checking each; stops at a violation or a
/// failed round.
fn run_rounds(a: &HistoryArgs, t: &mut Totals) -> Result<(), String> {
    validate(a)?;
    let client = a.inst.client()?;
    let dir = a.dir.trim_end_matches('/');
    match client.mkdir(if dir.is_empty() { "/" } else { dir }, 0o755) {
        Ok(()) => {}
        Err(e) if e.0 == libc::EEXIST => {}
        Err(e) => return Err(format!("cannot make {dir} in GustFS: {e}")),
    }
    let local = std::env::temp_dir().join(format!("gust-history.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&local);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&local)
        .map_err(|e| format!("cannot make {} for the workers' histories: {e}", local.display()))?;
    // Rounds of equal length, at most --round-seconds each: memory and disk for
    // the histories stay bounded however long the run.
    let lengths: Vec<(Option<u64>, f64)> = match a.seconds {
        None => vec![(Some(a.ops.unwrap_or(1000)), 0.0)],
        Some(s) => {
            let n = (s / a.round_seconds).ceil().max(1.0) as u32;
            vec![(None, s / n as f64); n as usize]
        }
    };
    let mut c = Coordinator {
        a,
        rng: StdRng::seed_from_u64(worker_seed(a.seed, u32::MAX)),
        st: RunStats::default(),
        unchecked: Default::default(),
        daemons: if a.faults.iter().any(|f| matches!(f, Fault::DaemonStop | Fault::DaemonKill)) {
            local_daemons(a)?
        } else {
            Vec::new()
        },
        daemons_stopped: Vec::new(),
        daemons_killed: Vec::new(),
        links_down: Vec::new(),
        daemon_down: Vec::new(),
    };
    let start = Instant::now();
    let batches_before = batch_requests(&client);
    let mut r = Ok(());
    for (number, (ops, seconds)) in lengths.into_iter().enumerate() {
        let number = number as u32;
        let round = Round {
            base: format!("{dir}/run.{}.{}.{number}", std::process::id(), a.seed),
            local: local.join(format!("round.{number}")),
            ops,
            until_ns: ops.is_none().then(|| monotonic_ns() + (seconds * 1e9) as u64),
            seconds,
        };
        r = c.round(&client, &round).and_then(|(ops, cut)| check_round(a, number, &ops, cut, t));
        if r.is_err() || t.violations > 0 || !c.st.failed.is_empty() || c.st.timed_out > 0 {
            break;
        }
    }
    let _ = std::fs::remove_dir_all(&local);
    c.st.seconds = start.elapsed().as_secs_f64();
    let batches_after = batch_requests(&client);
    c.st.batches = [0, 1].map(|i| batches_after[i].saturating_sub(batches_before[i]));
    t.run = Some(std::mem::take(&mut c.st));
    r
}

/// The node cache hits the workers of a round wrote at their end (`--node-cache`).
fn node_cache_hits(local: &Path) -> u64 {
    let Ok(dir) = std::fs::read_dir(local) else { return 0 };
    dir.flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "hits"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse::<u64>().ok())
        .sum()
}

/// Starts, faults and waits for the workers, round after round.
struct Coordinator<'a> {
    a: &'a HistoryArgs,
    /// Times and victims of faults.
    rng: StdRng,
    st: RunStats,
    /// Workers of this round killed or stopped for `UNCHECKED_STOP_MS` or more.
    unchecked: std::collections::HashSet<u32>,
    /// The instance's daemons (id, pid; this host's), for `--faults daemon-stop`
    /// and `daemon-kill`.
    daemons: Vec<(u32, i32)>,
    /// Daemons stopped now, and when each is continued.
    daemons_stopped: Vec<(i32, Instant)>,
    /// Daemons killed (id, pid), when each is started again, when it was killed
    /// (CLOCK_MONOTONIC ns).
    daemons_killed: Vec<(u32, i32, Instant, u64)>,
    /// Links down now (index in --links), when each goes up, when it went down.
    links_down: Vec<(usize, Instant, u64)>,
    /// The times (CLOCK_MONOTONIC ns) daemons were down in this round: from the
    /// kill to the end of the restart.
    daemon_down: Vec<(u64, u64)>,
}

impl Coordinator<'_> {
    /// Continues the stopped daemons that are due (all of them with `all`).
    fn continue_daemons(&mut self, all: bool) {
        let now = Instant::now();
        for (pid, _) in self.daemons_stopped.extract_if(.., |d| all || d.1 <= now) {
            // SAFETY: kill(2) on a daemon of the instance this run started on.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }

    /// Sets the links that are due (all of them with `all`) up again; their down
    /// time counts as a daemon's (`leave_undecided`).
    fn raise_links(&mut self, all: bool) {
        let now = Instant::now();
        let due: Vec<_> = self.links_down.extract_if(.., |l| all || l.1 <= now).collect();
        for (i, _, down_ns) in due {
            if let Err(e) = set_link(&self.a.links[i], "up") {
                self.st.failed.push(e);
            }
            self.daemon_down.push((down_ns, monotonic_ns()));
        }
    }

    /// Starts the killed daemons that are due (all of them with `all`) again on
    /// their root directories, as `gust repair --id` does, and waits until each
    /// serves.
    fn restart_daemons(&mut self, all: bool) {
        let now = Instant::now();
        let due: Vec<_> = self.daemons_killed.extract_if(.., |k| all || k.2 <= now).collect();
        if due.is_empty() {
            return;
        }
        for (id, pid, _, killed_ns) in due {
            let gone_by = Instant::now() + Duration::from_secs(10);
            while gust_launch::proc::pid_alive(pid as u32)
                && !gust_launch::proc::is_zombie(pid as u32)
                && Instant::now() < gone_by
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            // With --netns, daemon i lives in NETNS[i]: it is started again there
            // (`gust repair` starts it as its own child, in its namespace).
            let repaired = gust_on(self.a.netns.get(id as usize)).and_then(|mut cmd| {
                cmd.args(["repair", "--id", &id.to_string(), "--hosts-file"])
                    .arg(self.a.inst.hosts_path())
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|e| e.to_string())
            });
            match repaired {
                Ok(out) if out.status.success() => {}
                Ok(out) => self
                    .st
                    .failed
                    .push(format!("daemon {id} did not start again: {}", String::from_utf8_lossy(&out.stderr).trim())),
                Err(e) => self.st.failed.push(format!("daemon {id} did not start again: {e}")),
            }
            self.daemon_down.push((killed_ns, monotonic_ns()));
        }
        // The restarted daemons' new pids.
        match local_daemons(self.a) {
            Ok(d) => self.daemons = d,
            Err(e) => self.st.failed.push(e),
        }
    }
}

/// A daemon is never left stopped or dead: not by an error, nor by a panic.
impl Drop for Coordinator<'_> {
    fn drop(&mut self) {
        self.continue_daemons(true);
        self.restart_daemons(true);
        self.raise_links(true);
    }
}

/// One worker process of a round.
struct Running {
    process: u32,
    child: Child,
    out: PathBuf,
    /// Operations it was given (None: it runs to the round's deadline).
    ops: Option<u64>,
    stopped_until: Option<Instant>,
}

impl Coordinator<'_> {
    /// Runs one round and returns its merged history and cut lines, leaving
    /// nothing of it in GustFS or in the local directory.
    fn round(&mut self, client: &Client, r: &Round) -> Result<(Vec<Op>, usize), String> {
        // Its daemon may be down for a while (a daemon killed beside the run, as
        // the workers' own directories' may: `worker`).
        let up_by = Instant::now() + START_WAIT;
        loop {
            match client.mkdir(&r.base, 0o755) {
                Ok(()) => break,
                Err(e) if e.0 == libc::EEXIST => break,
                Err(e) if e.0 == libc::EIO && Instant::now() < up_by => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("cannot make {} in GustFS: {e}", r.base)),
            }
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&r.local)
            .map_err(|e| format!("cannot make {}: {e}", r.local.display()))?;
        let first = self.st.processes;
        self.unchecked.clear();
        self.daemon_down.clear();
        let files = self.run_workers(r);
        let mut lines = Vec::new();
        let mut cut = 0;
        let mut read = Ok(());
        for f in files.iter().filter(|f| f.exists()) {
            match read_history(f) {
                Ok((l, c)) => {
                    lines.extend(l);
                    cut += c;
                }
                Err(e) => read = Err(e),
            }
        }
        self.st.node_cache_hits += node_cache_hits(&r.local);
        let _ = std::fs::remove_dir_all(&r.local);
        self.st.rounds += 1;
        read?;
        let ops = leave_undecided(gust_history::merge(lines)?, &r.base, &self.unchecked, &self.daemon_down);
        let mut paths: Vec<&str> = ops.iter().map(|o| o.path.as_str()).collect();
        paths.sort_unstable();
        paths.dedup();
        for p in paths {
            let _ = client.unlink(p);
        }
        for process in first..self.st.processes {
            for i in 0..CLAIMED_PATHS {
                let _ = client.unlink(&format!("{}/q{i}", own_dir(&r.base, process)));
            }
            let _ = client.rmdir(&own_dir(&r.base, process));
        }
        let _ = client.rmdir(&r.base);
        Ok((ops, cut))
    }

    /// Starts the workers, injects faults, and waits for all of them (at most until
    /// a hard deadline); returns their history files.
    fn run_workers(&mut self, r: &Round) -> Vec<PathBuf> {
        let start = Instant::now();
        let run_for = Duration::from_secs_f64(r.seconds);
        // Generous: a round that overshoots this is stuck, not slow.
        let hard_deadline = start
            + match r.ops {
                Some(n) => Duration::from_secs(120) + Duration::from_millis(n.saturating_mul(2)),
                None => run_for + Duration::from_secs(60),
            };
        let faults_max = match r.ops {
            Some(_) => 64,
            None => (r.seconds * 5.0) as u32 + 1,
        };
        let mut faults = 0;
        let mut next_fault = start + self.fault_gap();
        let mut files = Vec::new();
        let mut running: Vec<Running> = Vec::new();
        for _ in 0..self.a.workers {
            self.spawn(r, r.ops, &mut running, &mut files);
        }
        self.start(r, &mut running, hard_deadline);
        while !running.is_empty() {
            let now = Instant::now();
            self.continue_daemons(false);
            self.restart_daemons(false);
            self.raise_links(false);
            self.reap(&mut running);
            for w in running.iter_mut().filter(|w| w.stopped_until.is_some_and(|t| t <= now)) {
                signal(&w.child, libc::SIGCONT);
                w.stopped_until = None;
            }
            if now >= hard_deadline {
                for mut w in running.drain(..) {
                    signal(&w.child, libc::SIGCONT);
                    self.unchecked.insert(w.process);
                    let _ = w.child.kill();
                    let _ = w.child.wait();
                    self.st.timed_out += 1;
                }
                break;
            }
            let open = r.ops.is_some() || now + Duration::from_millis(500) < start + run_for;
            if !self.a.faults.is_empty() && open && now >= next_fault && faults < faults_max {
                next_fault = now + self.fault_gap();
                faults += 1;
                self.inject(r, &mut running, &mut files);
            }
            std::thread::sleep(POLL);
        }
        self.continue_daemons(true);
        self.restart_daemons(true);
        self.raise_links(true);
        files
    }

    /// Waits until every running worker made its first opens (or exited), then
    /// lets them all go at once.
    fn start(&mut self, r: &Round, running: &mut Vec<Running>, deadline: Instant) {
        loop {
            self.reap(running);
            let all_ready = running.iter().all(|w| r.local.join(format!("ready.{}", w.process)).exists());
            if all_ready || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let go = r.local.join("go");
        if let Err(e) = std::fs::write(&go, b"") {
            self.st.failed.push(format!("cannot make {}: {e}", go.display()));
        }
    }

    /// A daemon neither stopped nor killed now, chosen at random.
    fn free_daemon(&mut self) -> Option<(u32, i32)> {
        let free: Vec<(u32, i32)> = self
            .daemons
            .iter()
            .copied()
            .filter(|&(id, pid)| {
                self.daemons_stopped.iter().all(|s| s.0 != pid) && self.daemons_killed.iter().all(|k| k.0 != id)
            })
            .collect();
        (!free.is_empty()).then(|| free[self.rng.gen_range(0..free.len())])
    }

    fn fault_gap(&mut self) -> Duration {
        Duration::from_millis(self.rng.gen_range(FAULT_GAP_MS.0..=FAULT_GAP_MS.1))
    }

    /// Starts the next process number with `ops` operations (or until the round's
    /// deadline).
    fn spawn(&mut self, r: &Round, ops: Option<u64>, running: &mut Vec<Running>, files: &mut Vec<PathBuf>) {
        let process = self.st.processes;
        self.st.processes += 1;
        let out = r.local.join(format!("history.{process}.jsonl"));
        files.push(out.clone());
        // `ip netns exec` execs the worker: its pid is the worker's, for the faults.
        let ns = (!self.a.netns.is_empty()).then(|| &self.a.netns[process as usize % self.a.netns.len()]);
        let mut cmd = match gust_on(ns) {
            Ok(cmd) => cmd,
            Err(e) => return self.st.failed.push(format!("worker {process}: {e}")),
        };
        cmd.args(["bench", "history-worker", "--process", &process.to_string(), "--seed", &self.a.seed.to_string()])
            .args(["--base", &r.base, "--paths", &self.a.paths.to_string()])
            .arg("--out")
            .arg(&out)
            .arg("--hosts-file")
            .arg(self.a.inst.hosts_path())
            .arg("--start")
            .arg(&r.local)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(n) = ops {
            cmd.args(["--ops", &n.to_string()]);
        }
        if let Some(t) = r.until_ns {
            cmd.args(["--until-ns", &t.to_string()]);
        }
        if self.a.node_cache {
            cmd.arg("--node-cache");
        }
        match cmd.spawn() {
            Ok(child) => running.push(Running { process, child, out, ops, stopped_until: None }),
            Err(e) => self.st.failed.push(format!("worker {process}: cannot start: {e}")),
        }
    }

    /// Takes the workers that exited; one that exited with an error fails the run.
    fn reap(&mut self, running: &mut Vec<Running>) {
        let failed = &mut self.st.failed;
        running.retain_mut(|w| match w.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                if !status.success() {
                    failed.push(format!("worker {} exited with {status}", w.process));
                }
                false
            }
            Err(e) => {
                failed.push(format!("worker {}: cannot wait for it: {e}", w.process));
                false
            }
        });
    }

    /// Kills or stops one running worker chosen at random; a killed one is replaced
    /// by a new process number with the operations it had left.
    fn inject(&mut self, r: &Round, running: &mut Vec<Running>, files: &mut Vec<PathBuf>) {
        let candidates: Vec<usize> = (0..running.len()).filter(|&i| running[i].stopped_until.is_none()).collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[self.rng.gen_range(0..candidates.len())];
        match self.a.faults[self.rng.gen_range(0..self.a.faults.len())] {
            Fault::DaemonKill => {
                // One daemon down at a time: every change of a path on a down
                // daemon has an unknown outcome, which the checker pays for.
                // And a second of service after each restart.
                let settled = self.daemon_down.last().is_none_or(|d| monotonic_ns() > d.1 + 1_000_000_000);
                if !self.daemons_killed.is_empty() || !settled {
                    return;
                }
                let Some((id, pid)) = self.free_daemon() else { return };
                let killed_ns = monotonic_ns();
                // SAFETY: kill(2) on a daemon of the instance this run started on;
                // `restart_daemons` (and Drop) starts it again.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                let ms = self.rng.gen_range(DAEMON_DOWN_MS.0..=DAEMON_DOWN_MS.1);
                self.daemons_killed.push((id, pid, Instant::now() + Duration::from_millis(ms), killed_ns));
                self.st.daemon_kills += 1;
            }
            Fault::LinkDown => {
                let free: Vec<usize> =
                    (0..self.a.links.len()).filter(|i| self.links_down.iter().all(|l| l.0 != *i)).collect();
                if free.is_empty() {
                    return;
                }
                let i = free[self.rng.gen_range(0..free.len())];
                let down_ns = monotonic_ns();
                if let Err(e) = set_link(&self.a.links[i], "down") {
                    return self.st.failed.push(e);
                }
                let ms = self.rng.gen_range(STOP_MS.0..=STOP_MS.1);
                self.links_down.push((i, Instant::now() + Duration::from_millis(ms), down_ns));
                self.st.link_downs += 1;
            }
            Fault::DaemonStop => {
                let Some((_, pid)) = self.free_daemon() else { return };
                let ms = self.rng.gen_range(STOP_MS.0..=STOP_MS.1);
                // SAFETY: kill(2) on a daemon of the instance this run started on;
                // `continue_daemons` (and Drop) sends the SIGCONT.
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                self.daemons_stopped.push((pid, Instant::now() + Duration::from_millis(ms)));
                self.st.daemon_stops += 1;
            }
            Fault::Stop => {
                signal(&running[i].child, libc::SIGSTOP);
                let ms = self.rng.gen_range(STOP_MS.0..=STOP_MS.1);
                running[i].stopped_until = Some(Instant::now() + Duration::from_millis(ms));
                if ms >= UNCHECKED_STOP_MS {
                    self.unchecked.insert(running[i].process);
                }
                self.st.stops += 1;
            }
            Fault::Kill => {
                let mut w = running.swap_remove(i);
                self.unchecked.insert(w.process);
                let _ = w.child.kill();
                let _ = w.child.wait();
                self.st.kills += 1;
                let left = w.ops.map(|n| n.saturating_sub(completed(&w.out)));
                if left != Some(0) && r.until_ns.is_none_or(|t| monotonic_ns() < t) {
                    self.spawn(r, left, running, files);
                }
            }
        }
    }
}

/// This gust binary as a command, in network namespace `ns` (over TCP) if given.
fn gust_on(ns: Option<&String>) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
    Ok(match ns {
        None => Command::new(exe),
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(exe).env("GUST_TRANSPORT", "tcp");
            c
        }
    })
}

/// `ip link set LINK up|down`.
fn set_link(link: &str, state: &str) -> Result<(), String> {
    let out = Command::new("ip")
        .args(["link", "set", link, state])
        .output()
        .map_err(|e| format!("cannot run ip link set {link} {state}: {e}"))?;
    if !out.status.success() {
        return Err(format!("ip link set {link} {state}: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

fn signal(c: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
    unsafe { libc::kill(c.id() as i32, sig) };
}

/// Operations a (dead) worker completed, from its history file.
fn completed(f: &Path) -> u64 {
    read_history(f).map_or(0, |(lines, _)| lines.iter().filter(|l| l.result.is_some()).count() as u64)
}

fn print_json(a: &HistoryArgs, t: &Totals) {
    let mut out = serde_json::json!({
        "verdict": t.verdict(),
        "operations": t.operations,
        "never_returned": t.never_returned,
        "indeterminate": t.indeterminate,
        "cut_lines": t.cut_lines,
        "paths": t.paths,
        "violations": t.violations,
        "undecided_paths": t.undecided,
        "check_seconds": t.check_seconds,
        "problems": t.problems,
    });
    if let Some(s) = &t.run {
        out["seed"] = a.seed.into();
        out["workers"] = a.workers.into();
        out["shared_paths"] = a.paths.into();
        out["rounds"] = s.rounds.into();
        out["processes"] = s.processes.into();
        out["run_seconds"] = s.seconds.into();
        out["ops_per_second"] = (t.operations as f64 / s.seconds.max(1e-9)).into();
        out["faults"] = serde_json::json!({
            "kill": s.kills,
            "stop": s.stops,
            "daemon_stop": s.daemon_stops,
            "daemon_kill": s.daemon_kills,
            "link_down": s.link_downs,
        });
        out["workers_failed"] = s.failed.clone().into();
        out["workers_timed_out"] = s.timed_out.into();
        out["batches"] = serde_json::json!({BATCH_OPS[0]: s.batches[0], BATCH_OPS[1]: s.batches[1]});
        out["node_cache_hits"] = s.node_cache_hits.into();
    }
    println!("{}", serde_json::to_string_pretty(&out).expect("a report always serializes"));
}

fn print_summary(a: &HistoryArgs, t: &Totals) {
    match &t.run {
        Some(s) => {
            println!(
                "history: {} operations by {} workers ({} processes with replacements) in {} round(s), {:.1} s ({:.0} ops/s), seed {}",
                t.operations,
                a.workers,
                s.processes,
                s.rounds,
                s.seconds,
                t.operations as f64 / s.seconds.max(1e-9),
                a.seed
            );
            if !a.faults.is_empty() {
                println!(
                    "faults: {} kills, {} stops, {} daemon stops, {} daemon kills, {} links down",
                    s.kills, s.stops, s.daemon_stops, s.daemon_kills, s.link_downs
                );
            }
            println!(
                "deferred under claims: {} create batches, {} remove batches reached the daemons",
                s.batches[0], s.batches[1]
            );
            if a.node_cache {
                println!("node cache: {} lookups answered from it by workers that ended", s.node_cache_hits);
            }
            for f in &s.failed {
                println!("worker failed: {f}");
            }
            if s.timed_out > 0 {
                println!("workers stuck: {} did not finish in time and were killed", s.timed_out);
            }
        }
        None => println!("history: {} operations", t.operations),
    }
    println!(
        "outcomes: {} never returned, {} failed with an error outside the model (EIO, ...), {} cut lines",
        t.never_returned, t.indeterminate, t.cut_lines
    );
    for p in &t.problems {
        if let Some(e) = p["explanation"].as_str() {
            print!("{e}");
        }
    }
    let n = t.paths;
    let secs = t.check_seconds;
    match t.verdict() {
        "linearizable" => println!("check: linearizable, all {n} path histories ({secs:.2} s)"),
        "violation" => println!("check: NOT linearizable: {} of {n} path histories ({secs:.2} s)", t.violations),
        _ => println!(
            "check: undecided: {} of {n} path histories too big for the limits ({secs:.2} s; raise --check-seconds)",
            t.undecided
        ),
    }
}
