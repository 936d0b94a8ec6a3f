//! `gust trace`: switching a running instance's daemon tracepoints (`on`, `off`)
//! and reading trace files back (`report`: summary, PNG plots, Chrome trace JSON).
//!
//! Clients are traced per process with GUST_TRACE=NAMES and GUST_TRACE_DIR=DIR
//! (gust-trace); daemons with `gust start --trace NAMES --trace-dir DIR` or
//! `gust trace on NAMES --dir DIR`.
//!
//! Not for: recording (gust-trace, the client core, the daemon).

mod chrome;
mod plots;
mod report;

use crate::instance::InstanceArgs;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    cmd: TraceCmd,
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Switch daemon tracepoints on (names or groups: md, chunk, daemon, all).
    On {
        names: String,
        /// Directory (on each daemon's node) for the trace files; default: the
        /// daemons' --trace-dir.
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        inst: InstanceArgs,
    },
    /// Switch daemon tracepoints off; the daemons write what they buffered.
    Off {
        names: String,
        #[command(flatten)]
        inst: InstanceArgs,
    },
    /// Summarize the trace files (*.gtrace) of DIR; write plots and Chrome JSON.
    Report(report::ReportArgs),
}

pub fn run(a: TraceArgs) -> Result<(), String> {
    match a.cmd {
        TraceCmd::On { names, dir, inst } => switch(&inst, true, &names, dir),
        TraceCmd::Off { names, inst } => switch(&inst, false, &names, None),
        TraceCmd::Report(r) => report::run(r),
    }
}

/// The daemon tracepoints `names` names; an error if it names none.
fn daemon_tracepoints(names: &str) -> Result<Vec<&'static str>, String> {
    let all = gust_trace::registry::select(names)?;
    let ours: Vec<&'static str> = all.iter().filter(|t| t.groups.contains(&"daemon")).map(|t| t.name).collect();
    if ours.is_empty() {
        return Err(format!(
            "'{names}' names client tracepoints only: a client process records them with \
             GUST_TRACE={names} GUST_TRACE_DIR=DIR; daemon tracepoints are md, chunk (groups) or daemon (all)"
        ));
    }
    Ok(ours)
}

fn switch(inst: &InstanceArgs, on: bool, names: &str, dir: Option<PathBuf>) -> Result<(), String> {
    let ours = daemon_tracepoints(names)?;
    let dir = match dir {
        Some(d) => Some(std::path::absolute(&d).map_err(|e| format!("--dir {}: {e}", d.display()))?),
        None => None,
    };
    let dir_s = dir.as_ref().map(|d| d.display().to_string());
    let client = inst.client()?;
    let mut failed = Vec::new();
    for d in 0..client.daemon_count() {
        match client.trace_daemon(d, on, names, dir_s.as_deref()) {
            Ok(()) => {}
            Err(e) if e.0 == libc::EINVAL && on => {
                failed.push(format!("daemon {d}: no trace directory (pass --dir DIR, or start with --trace-dir)"))
            }
            Err(e) => failed.push(format!(
                "daemon {d}: {}",
                client.last_transport_error().filter(|_| e.0 == libc::EIO).unwrap_or_else(|| e.to_string())
            )),
        }
    }
    let n = client.daemon_count();
    if !failed.is_empty() {
        return Err(format!("tracing not switched on every daemon:\n  {}", failed.join("\n  ")));
    }
    let state = if on { "on" } else { "off (buffered records written)" };
    match &dir {
        Some(d) => println!("{} on {n} daemons {state}; trace files in {}", ours.join(", "), d.display()),
        None => println!("{} on {n} daemons {state}", ours.join(", ")),
    }
    Ok(())
}
