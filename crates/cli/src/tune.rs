//! `gust tune`, and the limits `gust start` and `gust daemon` take: how a daemon
//! shares its node with the job (gust-daemon's qos.rs; docs/DESIGN.md, "Sharing the
//! node").

use crate::instance::InstanceArgs;
use clap::Args;
use gust_daemon::qos::{bandwidth_text, explain, Limits};

/// The limits of a daemon, as options.
#[derive(Args, Clone, Debug, Default)]
pub struct LimitArgs {
    /// Run each daemon's threads on N cores: the last N of those it was started on
    /// (MPI ranks bind from the first core up; for a job that leaves them free, or
    /// with --nice). 0: all of them.
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
    /// Niceness of each daemon's threads (-20 to 19; raising it needs no privilege):
    /// the application's ranks get the cores they share first.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub nice: Option<i32>,
    /// Bound on the chunk bytes each daemon reads, writes, stages and scrubs per second
    /// (network and disk), e.g. 200MiB; 0: no limit. Metadata and small files kept
    /// with their records are not paced.
    #[arg(long, value_name = "BYTES", value_parser = crate::parse_size)]
    pub max_bandwidth: Option<u64>,
}

impl LimitArgs {
    pub fn limits(&self) -> Limits {
        Limits { cpus: self.cpus, nice: self.nice, max_bandwidth: self.max_bandwidth }
    }

    /// As `gust daemon` arguments.
    pub fn daemon_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(c) = self.cpus {
            v.extend(["--cpus".to_string(), c.to_string()]);
        }
        if let Some(n) = self.nice {
            v.push(format!("--nice={n}"));
        }
        if let Some(b) = self.max_bandwidth {
            v.extend(["--max-bandwidth".to_string(), b.to_string()]);
        }
        v
    }
}

#[derive(Args)]
pub struct TuneArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    #[command(flatten)]
    limits: LimitArgs,
    /// Print one JSON object per daemon instead of the table.
    #[arg(long)]
    json: bool,
    /// Change how chunks are placed while the instance runs: `wide` or
    /// `capacity` (weighted by the capacity each daemon registered at start). The
    /// data whose place changes moves, as `gust expand` moves it (clients wait
    /// during the copy); prints the move's JSON summary.
    #[arg(long, value_name = "PLACEMENT")]
    placement: Option<gust_hosts::Placement>,
}

/// Changes the limits of every daemon of a running instance (none given: shows
/// them), one line per daemon.
pub fn run(a: TuneArgs) -> Result<(), String> {
    if let Some(to) = a.placement {
        let l = a.limits.limits();
        if l.cpus.is_some() || l.nice.is_some() || l.max_bandwidth.is_some() {
            return Err("--placement goes alone (change the limits in another `gust tune`)".into());
        }
        return crate::resize::change_placement(&a.inst.hosts_path(), to);
    }
    let c = a.inst.client()?;
    let l = a.limits.limits();
    let mut failed = 0;
    if !a.json {
        println!("{:>6}  {:<12} {:>5}  bandwidth", "daemon", "cores", "nice");
    }
    for d in 0..c.daemon_count() {
        match c.tune_daemon(d, l.cpus, l.nice, l.max_bandwidth) {
            Ok((cpus, nice, bw)) if a.json => {
                println!("{}", serde_json::json!({"daemon": d, "cpus": cpus, "nice": nice, "max_bandwidth": bw}))
            }
            Ok((cpus, nice, bw)) => println!("{d:>6}  {cpus:<12} {nice:>5}  {}", bandwidth_text(bw)),
            Err(e) => {
                failed += 1;
                eprintln!("gust tune: daemon {d}: {}", explain(l, e.0, None));
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {} daemons kept their limits", c.daemon_count()));
    }
    Ok(())
}
