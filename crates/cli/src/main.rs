//! `gust`: the one command a person types. This crate only wires the others.

mod bench;
mod cluster;
mod events;
mod find;
mod history;
mod instance;
mod logging;
mod mount;
mod probe;
mod repair;
mod resize;
mod run;
mod scrub;
mod stage;
mod stats;
mod trace;
mod tune;
mod view;
mod writeback;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "gust", version, about = "GustFS: an ad hoc burst-buffer file system for HPC jobs")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

pub use gust_hosts::parse_size;

/// A byte count for people: 4 KiB, 64 MiB, 1.5 GiB.
pub fn human_size(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one daemon in the foreground.
    Daemon {
        #[arg(long)]
        rootdir: PathBuf,
        #[arg(long, default_value = "/gustfs")]
        mountdir: String,
        #[arg(long)]
        hosts_file: PathBuf,
        /// TCP address to serve; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Listen on this libfabric provider too (e.g. "tcp;ofi_rxm", "verbs;ofi_rxm",
        /// cxi, efa, shm); clients on other nodes use it before TCP.
        #[arg(long, value_name = "PROVIDER")]
        fabric: Option<String>,
        /// Chunk size of a new instance (must match an existing one).
        #[arg(long, value_parser = parse_size)]
        chunk_size: Option<u64>,
        /// Discard the root directory's previous contents.
        #[arg(long)]
        clean_rootdir: bool,
        /// Daemon id (0-based); default: the one recorded in the root directory,
        /// or the next free id.
        #[arg(long)]
        id: Option<u32>,
        /// For a new instance: create/mkdir check that the parent directory exists.
        #[arg(long)]
        check_parent: bool,
        /// Worker threads serving all connections (default: 4 per core, 8 to 64).
        #[arg(long)]
        threads: Option<usize>,
        /// Bound on memory held for requests in flight, all connections together
        /// (e.g. 512M); a connection whose next frame does not fit waits.
        #[arg(long, value_parser = parse_size)]
        request_memory: Option<u64>,
        /// Seconds a frame may take to arrive once started, and a reply to be taken
        /// by its client, before the connection is closed (default 60).
        #[arg(long)]
        stall_timeout: Option<f64>,
        /// Serve Prometheus metrics at http://ADDR/metrics (port 0: a free port).
        #[arg(long, value_name = "ADDR")]
        metrics: Option<String>,
        /// Bound on the event log (`gust events`); 0 turns it off.
        #[arg(long, value_parser = parse_size, default_value = "16MiB")]
        events_cap: u64,
        /// Directory for this daemon's trace file (`gust trace`).
        #[arg(long, value_name = "DIR")]
        trace_dir: Option<PathBuf>,
        /// Daemon tracepoints on from the start (names or groups: md, chunk, daemon).
        #[arg(long, value_name = "NAMES")]
        trace: Option<String>,
        /// Declare the chunk store's capacity (e.g. 8MiB): writes past it get ENOSPC,
        /// and capacity placement weighs the daemon by it [default: the root
        /// directory's free space, not enforced].
        #[arg(long, value_parser = parse_size)]
        capacity: Option<u64>,
        #[command(flatten)]
        limits: tune::LimitArgs,
    },
    /// Start an instance: N daemons on this machine (--local N), one per host over
    /// ssh (--hosts LIST), or one per node of the SLURM job (srun).
    Start(instance::StartArgs),
    /// Stop an instance's daemons and remove their data (unless --keep).
    Stop(instance::StopArgs),
    /// Show each daemon's address, health, operation counts and capacity.
    Status(instance::InstanceArgs),
    /// Print the shell exports a client needs: eval "$(gust env)".
    Env(instance::InstanceArgs),
    /// List a directory in GustFS.
    Ls {
        path: String,
        #[command(flatten)]
        inst: instance::InstanceArgs,
    },
    /// Print a GustFS file to stdout.
    Cat {
        path: String,
        #[command(flatten)]
        inst: instance::InstanceArgs,
    },
    /// Find files as GNU find does, evaluated by all daemons in parallel:
    /// gust find PATH [-name GLOB] [-type f|d|l] [-size [+-]N[ckMG]] [-newer FILE] [-mmin [+-]N]
    Find(find::FindArgs),
    /// Namespace changes as JSON lines with inotify's names, merged from all daemons:
    /// gust events [--follow] [--since CURSOR] [PREFIX]
    Events(events::EventsArgs),
    /// Copy between the shared (parallel) file system and GustFS: the daemons copy
    /// the chunks they hold (gust stage in|out SRC... DEST).
    Stage(stage::StageArgs),
    /// Cache mode: write back every file changed in GustFS now, and wait.
    Flush(writeback::FlushArgs),
    /// Views of an object store prefix under /.views/NAME, kept current from the
    /// store's events: gust view add|ls|status|rm
    View(view::ViewArgs),
    /// Benchmarks: `md` (mdtest-like), `io` (IOR-like), `history` (linearizability).
    Bench(bench::BenchArgs),
    /// Run a command with GustFS under the mount directory (LD_PRELOAD library):
    /// gust run -- CMD ARGS
    Run(run::RunArgs),
    /// Mount an instance with FUSE (foreground; -d to detach); see docs/FUSE.md.
    Mount(mount::MountArgs),
    /// Unmount a `gust mount`.
    Umount(mount::UmountArgs),
    /// Describe this node for GustFS as JSON: local storage, memory, cores, network.
    Probe(probe::ProbeArgs),
    /// Tracepoints: `gust trace on|off NAMES` switches a running instance's daemons;
    /// `gust trace report DIR` summarizes trace files, plots them and writes Chrome
    /// trace JSON. Clients trace with GUST_TRACE=NAMES GUST_TRACE_DIR=DIR.
    Trace(trace::TraceArgs),
    /// Bring a daemon of a replicated instance up to date from its replicas (after
    /// it crashed and came back recovering, or was fenced after missing changes): gust repair --id D
    Repair(repair::RepairArgs),
    /// Verify every chunk of the instance against its checksums at a bounded rate,
    /// rewrite what is corrupt from another copy (with replicas), list the rest:
    /// gust scrub [--rate-mib N] [--json]
    Scrub(scrub::ScrubArgs),
    /// Change a running instance: how its daemons share their nodes with the job,
    /// gust tune [--cpus N] [--nice N] [--max-bandwidth BYTES] (none: show them), or --placement wide|capacity
    Tune(tune::TuneArgs),
    /// Add daemons to a running instance and move to them the data the new layout
    /// places there (clients wait during the move): gust expand --local N
    Expand(resize::ExpandArgs),
    /// Remove the daemons with the highest ids from a running instance, moving
    /// their data to the others first: gust shrink --count N
    Shrink(resize::ShrinkArgs),
    /// Run by `gust start` on each node: starts that node's daemon (internal).
    #[command(hide = true)]
    NodeAgent(cluster::NodeAgentArgs),
    /// Run by `gust stop` on a node whose daemon did not answer: stops and removes
    /// what the instance left there (internal).
    #[command(hide = true)]
    NodeClean(cluster::NodeCleanArgs),
}

/// Whether this command's standard output is meant for `eval` (`eval "$(gust
/// start)"`, `eval "$(gust env)"`): such a command prints `false` there when it
/// fails, as ssh-agent-style tools do, so that the `eval` fails too and `set -e` or
/// an `&&` chain stops at the failure instead of going on without an instance.
fn output_for_eval(subcommand: Option<&str>) -> bool {
    matches!(subcommand, Some("start" | "env"))
}

/// Says `false` on standard output for `eval` (see [`output_for_eval`]); not on a
/// terminal, where a person reads the error on stderr.
fn fail_eval() {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        println!("false");
    }
}

fn main() -> ExitCode {
    let subcommand = std::env::args().nth(1);
    let for_eval = output_for_eval(subcommand.as_deref());
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if for_eval && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                fail_eval();
            }
            e.exit()
        }
    };
    logging::init();
    let r = match cli.cmd {
        Cmd::Daemon {
            rootdir,
            mountdir,
            hosts_file,
            listen,
            fabric,
            chunk_size,
            clean_rootdir,
            id,
            check_parent,
            threads,
            request_memory,
            stall_timeout,
            metrics,
            events_cap,
            trace_dir,
            trace,
            capacity,
            limits,
        } => {
            let defaults = gust_daemon::server::ServerOptions::default();
            let server = gust_daemon::server::ServerOptions {
                threads: threads.unwrap_or(defaults.threads).clamp(1, 1024),
                request_memory_bytes: request_memory.map_or(defaults.request_memory_bytes, |b| b as usize),
                stall_timeout: stall_timeout
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .map_or(defaults.stall_timeout, |s| std::time::Duration::from_secs_f64(s.min(86_400.0))),
            };
            let config = gust_daemon::DaemonConfig {
                server,
                rootdir,
                mountdir,
                hosts_file,
                listen,
                fabric,
                chunk_size_bytes: chunk_size,
                clean_rootdir,
                id,
                check_parent,
                metrics_listen: metrics,
                events_cap_bytes: events_cap as usize,
                trace_dir,
                trace,
                capacity_bytes: capacity,
                limits: limits.limits(),
            };
            // The node cache's holder runs in the node's first daemon (gust-client's
            // node_cache), a client of the instance beside the daemon it serves.
            gust_daemon::run_with(config, |s| {
                let serving = gust_client::node_cache::Serving {
                    daemon_id: s.daemon_id,
                    rootdir: s.rootdir,
                    hosts_file: s.hosts_file,
                };
                if let Err(e) = gust_client::node_cache::serve(serving) {
                    tracing::warn!("node cache: not started: {e}");
                }
            })
        }
        Cmd::Start(a) => instance::start(a),
        Cmd::Stop(a) => instance::stop(a),
        Cmd::Status(a) => instance::status(a),
        Cmd::Env(a) => instance::env(a),
        Cmd::Ls { path, inst } => instance::ls(inst, &path),
        Cmd::Cat { path, inst } => instance::cat(inst, &path),
        Cmd::Find(a) => find::run(a),
        Cmd::Events(a) => events::run(a),
        Cmd::Stage(a) => stage::run(a),
        Cmd::Flush(a) => writeback::flush(a),
        Cmd::View(a) => view::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Mount(a) => mount::mount(a),
        Cmd::Umount(a) => mount::umount(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Trace(a) => trace::run(a),
        Cmd::Repair(a) => repair::run(a),
        Cmd::Scrub(a) => scrub::run(a),
        Cmd::Tune(a) => tune::run(a),
        Cmd::Expand(a) => resize::expand(a),
        Cmd::Shrink(a) => resize::shrink(a),
        Cmd::NodeClean(a) => cluster::node_clean(a),
        Cmd::NodeAgent(a) => return ExitCode::from(cluster::node_agent(a).clamp(0, 255) as u8),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gust: {e}");
            if for_eval {
                fail_eval();
            }
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    /// Sizes as people write them, binary units, and clear errors.
    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999t").is_err(), "too large");
    }
}
