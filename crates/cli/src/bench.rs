//! `gust bench md` (mdtest-like), `gust bench io` (IOR-like) and `gust bench
//! history`: their options, and the table for people. The engine (workers, phases,
//! medians) is gust-bench; the history checker's driver is history.rs.

use crate::instance::InstanceArgs;
use clap::{Args, Subcommand};
use gust_bench::{Config, Summary, Workload};
use std::path::PathBuf;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    kind: BenchKind,
}

#[derive(Args, Clone)]
struct Common {
    /// Processes.
    #[arg(short = 'p', long, default_value_t = 1)]
    procs: u32,
    /// Where to run: `gust` (client core), `preload` (plain POSIX calls on
    /// $GUST_MOUNTDIR paths in workers started with libgust_preload.so), or
    /// `posix:DIR` (plain POSIX calls in DIR).
    #[arg(long, default_value = "gust")]
    target: String,
    /// Also run the same workload on this local directory and report GustFS/local.
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Repetitions; the report gives the median of each phase's rate.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    inst: InstanceArgs,
}

#[derive(Subcommand)]
enum BenchKind {
    /// Metadata: create, stat, read and remove N files per process.
    Md {
        /// Files per process.
        #[arg(short = 'n', long, default_value_t = 10_000)]
        files: u64,
        /// Bytes written into each file at create and read back.
        #[arg(long, value_parser = crate::parse_size, default_value = "0")]
        size: u64,
        /// All processes in one directory (default: one directory per process).
        #[arg(long)]
        shared_dir: bool,
        /// Create with O_CREAT|O_WRONLY, as mdtest does, instead of
        /// O_CREAT|O_EXCL|O_WRONLY.
        #[arg(long)]
        no_excl: bool,
        /// mdtest's -N: the stat, read and remove phases of process r work on the
        /// files of process (r + N) mod P (another process's: the contended case).
        #[arg(long, default_value_t = 0)]
        shift: u32,
        #[command(flatten)]
        common: Common,
    },
    /// Data: each process writes then reads (and verifies) a block.
    Io {
        /// Bytes per process.
        #[arg(short = 'b', long, value_parser = crate::parse_size, default_value = "64MiB")]
        block_size: u64,
        /// Bytes per write or read call.
        #[arg(short = 't', long, value_parser = crate::parse_size, default_value = "1MiB")]
        transfer_size: u64,
        /// One shared file, each process its own region (default: file per process).
        #[arg(long)]
        shared_file: bool,
        /// Random order of transfers (default: sequential).
        #[arg(long)]
        random: bool,
        #[command(flatten)]
        common: Common,
    },
    /// (internal) One worker process.
    #[command(hide = true)]
    Worker,
    /// Linearizability: processes race create, chmod, unlink and stat on a few
    /// shared paths; their history is checked (exit 0 linearizable, 1 violation,
    /// 2 undecided, 3 run failed).
    History(crate::history::HistoryArgs),
    /// (internal) One worker process of `history`.
    #[command(hide = true)]
    HistoryWorker(crate::history::WorkerArgs),
}

/// One line for the table's heading, for people.
fn describe(w: &Workload) -> String {
    match w {
        Workload::Md { files, size, shared_dir, no_excl, .. } => format!(
            "md: {files} files of {} per process, {}{}",
            crate::human_size(*size),
            if *shared_dir { "one shared directory" } else { "a directory per process" },
            if *no_excl { ", created without O_EXCL" } else { "" }
        ),
        Workload::Io { block_size, transfer_size, shared_file, random } => format!(
            "io: {} per process in {} {} transfers, {}",
            crate::human_size(*block_size),
            if *random { "random" } else { "sequential" },
            crate::human_size(*transfer_size),
            if *shared_file { "one shared file" } else { "a file per process" }
        ),
    }
}

/// Runs `w` as `c` asks and prints the medians: a table, or JSON with `--json`.
fn drive(w: Workload, c: Common) -> Result<(), String> {
    // Several targets (comma-separated) run interleaved, run by run, and the first is
    // reported as a ratio to each of the others.
    let mut targets: Vec<String> =
        c.target.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect();
    if let Some(b) = &c.baseline {
        targets.push(format!("posix:{}", b.display()));
    }
    let hosts = c.inst.hosts_path();
    let preload_env = if targets.iter().any(|t| t == "preload") {
        let lib = crate::run::preload_lib(None)?;
        crate::run::preload_env(&hosts, &lib)?.into_iter().map(|(k, v)| (k, v.to_string_lossy().into_owned())).collect()
    } else {
        Vec::new()
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let config = Config {
        procs: c.procs,
        runs: c.runs,
        targets,
        hosts,
        worker_command: vec![exe.into(), "bench".into(), "worker".into()],
        preload_env,
    };
    let summary = gust_bench::run(&w, &config)?;
    if c.json {
        let out = serde_json::json!({"workload": w, "procs": c.procs, "runs": c.runs, "unit": w.unit(), "phases": summary.phases});
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
    } else {
        print_table(&w, &config, &summary);
    }
    if summary.errors > 0 {
        return Err(format!("{} operation(s) failed or read wrong data", summary.errors));
    }
    Ok(())
}

/// The medians as a table: a column per target, then the ratios of the first.
fn print_table(w: &Workload, c: &Config, summary: &Summary) {
    let targets = &c.targets;
    println!("{}; {} process(es), median of {} run(s), {}", describe(w), c.procs, c.runs, w.unit());
    print!("{:<8}", "phase");
    for t in targets {
        print!(" {:>22}", if t.len() > 22 { &t[..22] } else { t });
    }
    if targets.len() == 2 {
        print!(" {:>8}", "ratio");
    }
    if targets.len() > 2 {
        for t in &targets[1..] {
            let short = t.split(':').next().unwrap_or(t);
            print!(" {:>12}", format!("/{short}"));
        }
    }
    println!();
    for row in &summary.phases {
        print!("{:<8}", row["phase"].as_str().unwrap_or(""));
        for t in targets {
            print!(" {:>22.1}", row[t]["median_rate"].as_f64().unwrap_or(f64::NAN));
        }
        if let Some(r) = row.get("ratio") {
            print!(" {:>8.3}", r.as_f64().unwrap_or(f64::NAN));
        }
        if targets.len() > 2 {
            for t in &targets[1..] {
                print!(" {:>12.3}", row.get(format!("ratio_vs_{t}")).and_then(|v| v.as_f64()).unwrap_or(f64::NAN));
            }
        }
        println!();
    }
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    match a.kind {
        BenchKind::Worker => gust_bench::worker(),
        BenchKind::History(a) => crate::history::run(a),
        BenchKind::HistoryWorker(a) => crate::history::worker(a),
        BenchKind::Md { files, size, shared_dir, no_excl, shift, common } => {
            drive(Workload::Md { files, size, shared_dir, no_excl, shift }, common)
        }
        BenchKind::Io { block_size, transfer_size, shared_file, random, common } => {
            if transfer_size == 0 || block_size % transfer_size != 0 {
                return Err("--block-size must be a multiple of a non-zero --transfer-size".into());
            }
            drive(Workload::Io { block_size, transfer_size, shared_file, random }, common)
        }
    }
}
