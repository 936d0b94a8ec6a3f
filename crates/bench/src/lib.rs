//! The engine of `gust bench md` (mdtest-like) and `gust bench io` (IOR-like).
//!
//! The parent process spawns P worker processes ([`worker`]), and drives them phase
//! by phase through their stdin/stdout, the way MPI barriers separate mdtest's
//! phases: it says "go", every worker runs the phase and reports, and the phase's
//! wall time runs from the first "go" to the last report. Rates are total operations
//! (or bytes) over that wall time.
//!
//! A target is GustFS through the client core (`gust`), plain POSIX calls under the
//! preload library on the mount directory (`preload`), or a directory through plain
//! POSIX calls (`posix:DIR`), so one run can measure GustFS against the local file
//! system on the same workload and report the ratio.
//!
//! Not for: command-line parsing and the table for people (gust-cli's bench.rs),
//! the history checker (gust-history).

mod phase;
mod target;
mod worker;

pub use worker::worker;

use phase::{phases, PhaseReport};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;
use target::{make_target, target_root, Target};

#[derive(Serialize, Deserialize, Clone, Debug)]
pub enum Workload {
    Md {
        files: u64,
        size: u64,
        shared_dir: bool,
        #[serde(default)]
        no_excl: bool,
        #[serde(default)]
        shift: u32,
    },
    Io {
        block_size: u64,
        transfer_size: u64,
        shared_file: bool,
        random: bool,
    },
}

impl Workload {
    /// The unit of this workload's rates.
    pub fn unit(&self) -> &'static str {
        match self {
            Workload::Md { .. } => "ops/s",
            Workload::Io { .. } => "MiB/s",
        }
    }
}

/// What one worker process runs.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct WorkerSpec {
    workload: Workload,
    target: String,
    hosts_file: PathBuf,
    /// Directory of this run inside the target.
    base: String,
    rank: u32,
    procs: u32,
    seed: u64,
}

/// A benchmark run.
pub struct Config {
    /// Worker processes per target and run.
    pub procs: u32,
    /// Repetitions; each phase's rate is reported as the median.
    pub runs: u32,
    /// Targets, run interleaved run by run; the first is reported as a ratio to each
    /// of the others.
    pub targets: Vec<String>,
    /// The instance's hosts file.
    pub hosts: PathBuf,
    /// The command that runs one worker (`gust bench worker`): program, arguments.
    pub worker_command: Vec<OsString>,
    /// The environment of `preload` workers (LD_PRELOAD and the instance's
    /// variables); needed if a target is `preload`.
    pub preload_env: Vec<(String, String)>,
}

/// One phase of one run on one target.
#[derive(Serialize, Clone, Debug)]
pub struct PhaseResult {
    pub phase: String,
    pub target: String,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Operations per second (md) or MiB per second (io).
    pub rate: f64,
}

/// A run's medians: per phase, a JSON row with each target's `median_rate`, `runs`
/// and `errors`, and `ratio` (two targets) or `ratio_vs_TARGET` (more).
pub struct Summary {
    pub phases: Vec<serde_json::Value>,
    /// Operations that failed or read wrong data, over every run.
    pub errors: u64,
}

/// Runs `w` on every target of `c`, `c.runs` times, and summarizes.
pub fn run(w: &Workload, c: &Config) -> Result<Summary, String> {
    if c.procs == 0 || c.runs == 0 {
        return Err("--procs and --runs must be at least 1".into());
    }
    let mut all: Vec<PhaseResult> = Vec::new();
    for run in 0..c.runs {
        for t in &c.targets {
            all.extend(run_once(w, c, t, run)?);
        }
    }
    let phases = phases(w).iter().map(|phase| summary_row(phase, &c.targets, &all)).collect();
    Ok(Summary { phases, errors: all.iter().map(|r| r.errors).sum() })
}

/// The summary row of `phase`: each target's median rate, and the first target's
/// ratio to the others.
fn summary_row(phase: &str, targets: &[String], all: &[PhaseResult]) -> serde_json::Value {
    let mut row = serde_json::Map::new();
    row.insert("phase".into(), phase.into());
    let mut meds = Vec::new();
    for t in targets {
        let rates: Vec<f64> = all.iter().filter(|r| r.phase == phase && &r.target == t).map(|r| r.rate).collect();
        let errors: u64 = all.iter().filter(|r| r.phase == phase && &r.target == t).map(|r| r.errors).sum();
        let m = median(rates.clone());
        row.insert(t.to_string(), serde_json::json!({"median_rate": m, "runs": rates, "errors": errors}));
        meds.push(m);
    }
    if meds.len() == 2 && meds[1] > 0.0 {
        row.insert("ratio".into(), (meds[0] / meds[1]).into());
    }
    if meds.len() > 2 {
        for (t, m) in targets.iter().zip(&meds).skip(1) {
            if *m > 0.0 {
                row.insert(format!("ratio_vs_{t}"), (meds[0] / m).into());
            }
        }
    }
    serde_json::Value::Object(row)
}

/// One run on `target`: directories made, workers started and driven through every
/// phase, what the run left removed.
fn run_once(w: &Workload, c: &Config, target: &str, run: u32) -> Result<Vec<PhaseResult>, String> {
    // The preload target is set up and cleaned up through the client core; its
    // workers see the same directory under the mount directory.
    let preload = target == "preload";
    let setup = make_target(if preload { "gust" } else { target }, &c.hosts)?;
    let base = format!("{}/gust-bench.{}.{}", target_root(target), std::process::id(), run);
    let (worker_base, worker_env) = if preload {
        let h = gust_hosts::HostsFile::load(&c.hosts).map_err(|e| e.to_string())?;
        (format!("{}{base}", h.mountdir.trim_end_matches('/')), c.preload_env.clone())
    } else {
        (base.clone(), Vec::new())
    };
    make_dirs(setup.as_ref(), w, &base, c.procs)?;
    let seed = 0x5eed_0000 + run as u64;
    let specs = (0..c.procs)
        .map(|rank| WorkerSpec {
            workload: w.clone(),
            target: target.into(),
            hosts_file: c.hosts.clone(),
            base: worker_base.clone(),
            rank,
            procs: c.procs,
            seed,
        })
        .collect();
    let mut workers = worker::spawn_workers(&c.worker_command, specs, &worker_env)?;
    let mut results = Vec::new();
    for phase in phases(w) {
        results.push(drive_phase(&mut workers, w, target, phase)?);
    }
    for mut wk in workers {
        drop(wk.stdin);
        let _ = wk.child.wait();
    }
    clean_up(setup.as_ref(), w, &base, c.procs);
    Ok(results)
}

/// The run's directories: its base, and for md its own directory and one per
/// process unless they share one.
fn make_dirs(setup: &dyn Target, w: &Workload, base: &str, procs: u32) -> Result<(), String> {
    setup.mkdir(base).map_err(|e| format!("mkdir {base}: {e}"))?;
    if let Workload::Md { shared_dir, .. } = w {
        setup.mkdir(&format!("{base}/md")).map_err(|e| format!("mkdir: {e}"))?;
        if !shared_dir {
            for r in 0..procs {
                setup.mkdir(&format!("{base}/md/p{r}")).map_err(|e| format!("mkdir: {e}"))?;
            }
        }
    }
    Ok(())
}

/// Says "go" to every worker, then waits for every report: the phase's time runs
/// from the first "go" to the last report.
fn drive_phase(workers: &mut [worker::Worker], w: &Workload, target: &str, phase: &str) -> Result<PhaseResult, String> {
    let t0 = Instant::now();
    for wk in workers.iter_mut() {
        writeln!(wk.stdin, "go {phase}").map_err(|e| e.to_string())?;
        wk.stdin.flush().map_err(|e| e.to_string())?;
    }
    let mut total = PhaseReport::default();
    for wk in workers.iter_mut() {
        let mut line = String::new();
        wk.stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        let r: PhaseReport =
            serde_json::from_str(line.trim()).map_err(|e| format!("worker died in phase {phase}: {e}"))?;
        total.ops += r.ops;
        total.bytes += r.bytes;
        total.errors += r.errors;
    }
    let secs = t0.elapsed().as_secs_f64();
    let rate = match w {
        Workload::Md { .. } => total.ops as f64 / secs,
        Workload::Io { .. } => total.bytes as f64 / 1048576.0 / secs,
    };
    Ok(PhaseResult {
        phase: phase.to_string(),
        target: target.into(),
        ops: total.ops,
        bytes: total.bytes,
        errors: total.errors,
        seconds: secs,
        rate,
    })
}

/// Removes what a run left (its files were removed by the md workload's last
/// phase; io files are removed here).
fn clean_up(setup: &dyn Target, w: &Workload, base: &str, procs: u32) {
    match w {
        Workload::Md { shared_dir, .. } => {
            if !shared_dir {
                for r in 0..procs {
                    let _ = setup.rmdir(&format!("{base}/md/p{r}"));
                }
            }
            let _ = setup.rmdir(&format!("{base}/md"));
        }
        Workload::Io { shared_file, .. } => {
            if *shared_file {
                let _ = setup.unlink(&format!("{base}/io.shared"));
            } else {
                for r in 0..procs {
                    let _ = setup.unlink(&format!("{base}/io.{r}"));
                }
            }
        }
    }
    let _ = setup.rmdir(base);
}

/// The median (the mean of the middle two of an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_even_and_no_runs() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn a_row_gives_the_first_targets_ratio_to_the_other() {
        let r = |target: &str, rate: f64| PhaseResult {
            phase: "stat".into(),
            target: target.into(),
            ops: 1,
            bytes: 0,
            errors: 0,
            seconds: 1.0,
            rate,
        };
        let all = vec![r("gust", 10.0), r("posix:/x", 40.0), r("gust", 30.0), r("posix:/x", 40.0), r("gust", 20.0)];
        let row = summary_row("stat", &["gust".into(), "posix:/x".into()], &all);
        assert_eq!(row["gust"]["median_rate"], 20.0);
        assert_eq!(row["ratio"], 0.5);
    }
}
