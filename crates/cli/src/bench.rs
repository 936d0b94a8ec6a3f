//! `gust bench md` (mdtest-like) and `gust bench io` (IOR-like).
//!
//! The parent process spawns P worker processes (this same binary, `gust bench
//! worker`), and drives them phase by phase through their stdin/stdout, the way
//! MPI barriers separate mdtest's phases: it says "go", every worker runs the phase
//! and reports, and the phase's wall time runs from the first "go" to the last report.
//! Rates are total operations (or bytes) over that wall time.
//!
//! A target is either GustFS through the client core (`gust`) or a directory through
//! plain POSIX calls (`posix:DIR`), so one run can measure GustFS against the local
//! file system (`--baseline DIR`) on the same workload and report the ratio.

use crate::instance::InstanceArgs;
use clap::{Args, Subcommand};
use gust_client::{Client, ClientOptions, Errno};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

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

#[derive(Serialize, Deserialize, Clone, Debug)]
enum Workload {
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
    /// One line for the table's heading, for people.
    fn describe(&self) -> String {
        match self {
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
}

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

/// The operations a workload needs, over GustFS or a POSIX directory.
trait Target {
    fn mkdir(&self, p: &str) -> Result<(), Errno>;
    fn rmdir(&self, p: &str) -> Result<(), Errno>;
    fn open(&self, p: &str, flags: i32, mode: u32) -> Result<i32, Errno>;
    fn close(&self, fd: i32) -> Result<(), Errno>;
    fn pwrite(&self, fd: i32, b: &[u8], off: u64) -> Result<usize, Errno>;
    fn pread(&self, fd: i32, b: &mut [u8], off: u64) -> Result<usize, Errno>;
    fn stat_size(&self, p: &str) -> Result<u64, Errno>;
    fn unlink(&self, p: &str) -> Result<(), Errno>;
}

struct GustTarget(&'static Client);

impl Target for GustTarget {
    fn mkdir(&self, p: &str) -> Result<(), Errno> {
        self.0.mkdir(p, 0o755)
    }
    fn rmdir(&self, p: &str) -> Result<(), Errno> {
        self.0.rmdir(p)
    }
    fn open(&self, p: &str, flags: i32, mode: u32) -> Result<i32, Errno> {
        // As the preload library opens: a create is deferred to close (small files
        // inline, gust-client inline.rs).
        self.0.open_deferred(p, flags, mode)
    }
    fn close(&self, fd: i32) -> Result<(), Errno> {
        self.0.close(fd)
    }
    fn pwrite(&self, fd: i32, b: &[u8], off: u64) -> Result<usize, Errno> {
        self.0.pwrite(fd, b, off)
    }
    fn pread(&self, fd: i32, b: &mut [u8], off: u64) -> Result<usize, Errno> {
        self.0.pread(fd, b, off)
    }
    fn stat_size(&self, p: &str) -> Result<u64, Errno> {
        self.0.stat(p).map(|s| s.size)
    }
    fn unlink(&self, p: &str) -> Result<(), Errno> {
        self.0.unlink(p)
    }
}

/// Plain libc calls: exactly what an unmodified program does.
struct PosixTarget;

fn cpath(p: &str) -> CString {
    CString::new(p).expect("bench paths have no NUL")
}

fn check(rc: isize) -> Result<usize, Errno> {
    if rc < 0 {
        Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)))
    } else {
        Ok(rc as usize)
    }
}

impl Target for PosixTarget {
    fn mkdir(&self, p: &str) -> Result<(), Errno> {
        check(unsafe { libc::mkdir(cpath(p).as_ptr(), 0o755) } as isize).map(|_| ())
    }
    fn rmdir(&self, p: &str) -> Result<(), Errno> {
        check(unsafe { libc::rmdir(cpath(p).as_ptr()) } as isize).map(|_| ())
    }
    fn open(&self, p: &str, flags: i32, mode: u32) -> Result<i32, Errno> {
        check(unsafe { libc::open(cpath(p).as_ptr(), flags, mode) } as isize).map(|fd| fd as i32)
    }
    fn close(&self, fd: i32) -> Result<(), Errno> {
        check(unsafe { libc::close(fd) } as isize).map(|_| ())
    }
    fn pwrite(&self, fd: i32, b: &[u8], off: u64) -> Result<usize, Errno> {
        check(unsafe { libc::pwrite(fd, b.as_ptr() as *const _, b.len(), off as i64) })
    }
    fn pread(&self, fd: i32, b: &mut [u8], off: u64) -> Result<usize, Errno> {
        check(unsafe { libc::pread(fd, b.as_mut_ptr() as *mut _, b.len(), off as i64) })
    }
    fn stat_size(&self, p: &str) -> Result<u64, Errno> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::stat(cpath(p).as_ptr(), &mut st) } as isize)?;
        Ok(st.st_size as u64)
    }
    fn unlink(&self, p: &str) -> Result<(), Errno> {
        check(unsafe { libc::unlink(cpath(p).as_ptr()) } as isize).map(|_| ())
    }
}

fn make_target(target: &str, hosts: &std::path::Path) -> Result<Box<dyn Target>, String> {
    if target == "gust" {
        // Lives as long as the worker process, as the preload library's: claims
        // need that (gust-client claims.rs).
        let c: &'static Client = Box::leak(Box::new(Client::open_instance(hosts, ClientOptions::from_env())?));
        c.set_defer_exclusive_create(std::env::var("GUST_DEFER_EXCL").is_ok_and(|v| v == "1"));
        c.arm_claims();
        Ok(Box::new(GustTarget(c)))
    } else if target.starts_with("posix:") || target == "preload" {
        // preload: the worker runs with LD_PRELOAD, so these libc calls are the
        // interposed ones, exactly what an unmodified program does.
        Ok(Box::new(PosixTarget))
    } else {
        Err(format!("unknown target '{target}' (use gust, preload or posix:DIR)"))
    }
}

fn target_root(target: &str) -> String {
    match target.strip_prefix("posix:") {
        Some(d) => d.trim_end_matches('/').to_string(),
        None => String::new(),
    }
}

/// Fills `buf` with the pattern for file offset `off`: every 8-byte word holds its
/// own offset mixed with the seed, so misplaced or stale data is caught on read.
fn fill_pattern(buf: &mut [u8], off: u64, seed: u64) {
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let v = (off + i as u64 * 8) ^ seed;
        let b = v.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

/// A small deterministic permutation (xorshift-driven Fisher-Yates).
fn shuffle(v: &mut [u64], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let j = (seed % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[derive(Default, Serialize, Deserialize, Clone, Copy, Debug)]
struct PhaseReport {
    ops: u64,
    bytes: u64,
    errors: u64,
}

/// The directory of process `rank`'s files.
fn md_dir_of(s: &WorkerSpec, shared: bool, rank: u32) -> String {
    if shared {
        format!("{}/md", s.base)
    } else {
        format!("{}/md/p{}", s.base, rank)
    }
}

fn phases(w: &Workload) -> &'static [&'static str] {
    match w {
        Workload::Md { .. } => &["create", "stat", "read", "remove"],
        Workload::Io { .. } => &["write", "read"],
    }
}

fn run_phase(t: &dyn Target, s: &WorkerSpec, phase: &str) -> PhaseReport {
    let mut r = PhaseReport::default();
    match s.workload {
        Workload::Md { files, size, shared_dir, no_excl, shift } => {
            // mdtest -N: after the create phase, another process's files.
            let owner = if phase == "create" { s.rank } else { (s.rank + shift) % s.procs.max(1) };
            let dir = md_dir_of(s, shared_dir, owner);
            let create_flags = libc::O_CREAT | libc::O_WRONLY | if no_excl { 0 } else { libc::O_EXCL };
            let mut data = vec![0u8; size as usize];
            fill_pattern(&mut data, 0, s.seed);
            let mut buf = vec![0u8; size as usize];
            for i in 0..files {
                let p = if shared_dir { format!("{dir}/f{owner}.{i}") } else { format!("{dir}/f{i}") };
                let ok = match phase {
                    "create" => t
                        .open(&p, create_flags, 0o644)
                        .and_then(|fd| {
                            let w = if size > 0 { t.pwrite(fd, &data, 0).map(|_| ()) } else { Ok(()) };
                            t.close(fd).and(w)
                        })
                        .is_ok(),
                    "stat" => t.stat_size(&p).map(|sz| sz == size).unwrap_or(false),
                    "read" => t
                        .open(&p, libc::O_RDONLY, 0)
                        .and_then(|fd| {
                            let rd = if size > 0 { t.pread(fd, &mut buf, 0) } else { Ok(0) };
                            t.close(fd).and(rd)
                        })
                        .map(|n| n as u64 == size && buf == data)
                        .unwrap_or(false),
                    "remove" => t.unlink(&p).is_ok(),
                    _ => unreachable!(),
                };
                r.ops += 1;
                r.bytes += if phase == "create" || phase == "read" { size } else { 0 };
                r.errors += u64::from(!ok);
            }
            if phase == "create" || phase == "remove" {
                // Within the phase's time: a path operation sends what the process
                // still holds back (creates and unlinks queued under claims,
                // gust-client claims.rs), as the next phase's first call would.
                let _ = t.stat_size(&dir);
            }
        }
        Workload::Io { block_size, transfer_size, shared_file, random } => {
            let (path, region) = if shared_file {
                (format!("{}/io.shared", s.base), s.rank as u64 * block_size)
            } else {
                (format!("{}/io.{}", s.base, s.rank), 0)
            };
            let n = block_size / transfer_size;
            let mut order: Vec<u64> = (0..n).collect();
            if random {
                shuffle(&mut order, s.seed ^ (s.rank as u64 + 1) ^ if phase == "read" { 0x9e37 } else { 0 });
            }
            let mut buf = vec![0u8; transfer_size as usize];
            let mut expect = vec![0u8; transfer_size as usize];
            let flags = if phase == "write" { libc::O_CREAT | libc::O_WRONLY } else { libc::O_RDONLY };
            let fd = match t.open(&path, flags, 0o644) {
                Ok(fd) => fd,
                Err(_) => {
                    r.errors += 1;
                    return r;
                }
            };
            for k in order {
                let off = region + k * transfer_size;
                let ok = if phase == "write" {
                    fill_pattern(&mut buf, off, s.seed);
                    t.pwrite(fd, &buf, off).map(|w| w == buf.len()).unwrap_or(false)
                } else {
                    fill_pattern(&mut expect, off, s.seed);
                    t.pread(fd, &mut buf, off).map(|w| w == buf.len() && buf == expect).unwrap_or(false)
                };
                r.ops += 1;
                r.bytes += transfer_size;
                r.errors += u64::from(!ok);
            }
            if t.close(fd).is_err() {
                r.errors += 1;
            }
        }
    }
    r
}

/// Entry point of `gust bench worker`: spec from the environment, phases on stdin.
fn worker() -> Result<(), String> {
    let spec: WorkerSpec =
        serde_json::from_str(&std::env::var("GUST_BENCH_SPEC").map_err(|_| "GUST_BENCH_SPEC not set")?)
            .map_err(|e| e.to_string())?;
    let t = make_target(&spec.target, &spec.hosts_file)?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    writeln!(out, "ready").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Some(phase) = line.strip_prefix("go ") else { break };
        let r = run_phase(t.as_ref(), &spec, phase);
        writeln!(out, "{}", serde_json::to_string(&r).unwrap()).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

#[derive(Serialize, Clone, Debug)]
struct PhaseResult {
    phase: String,
    target: String,
    ops: u64,
    bytes: u64,
    errors: u64,
    seconds: f64,
    /// Operations per second (md) or MiB per second (io).
    rate: f64,
}

fn spawn_workers(specs: Vec<WorkerSpec>, extra_env: &[(String, String)]) -> Result<Vec<Worker>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut ws = Vec::new();
    for s in specs {
        let mut cmd = Command::new(&exe);
        cmd.args(["bench", "worker"]).env("GUST_BENCH_SPEC", serde_json::to_string(&s).unwrap());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot spawn worker: {e}"))?;
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            let _ = child.kill();
            return Err(format!("worker {} failed to start: {}", s.rank, line.trim()));
        }
        ws.push(Worker { child, stdin, stdout });
    }
    Ok(ws)
}

fn run_once(w: &Workload, c: &Common, target: &str, run: u32) -> Result<Vec<PhaseResult>, String> {
    let hosts = c.inst.hosts_path();
    // The preload target is set up and cleaned up through the client core; its
    // workers see the same directory under the mount directory.
    let preload = target == "preload";
    let setup = make_target(if preload { "gust" } else { target }, &hosts)?;
    let base = format!("{}/gust-bench.{}.{}", target_root(target), std::process::id(), run);
    let (worker_base, worker_env) = if preload {
        let h = gust_hosts::HostsFile::load(&hosts).map_err(|e| e.to_string())?;
        let lib = crate::run::preload_lib(None)?;
        let env = crate::run::preload_env(&hosts, &lib)?
            .into_iter()
            .map(|(k, v)| (k, v.to_string_lossy().into_owned()))
            .collect::<Vec<_>>();
        (format!("{}{base}", h.mountdir.trim_end_matches('/')), env)
    } else {
        (base.clone(), Vec::new())
    };
    setup.mkdir(&base).map_err(|e| format!("mkdir {base}: {e}"))?;
    if let Workload::Md { shared_dir, .. } = w {
        setup.mkdir(&format!("{base}/md")).map_err(|e| format!("mkdir: {e}"))?;
        if !shared_dir {
            for r in 0..c.procs {
                setup.mkdir(&format!("{base}/md/p{r}")).map_err(|e| format!("mkdir: {e}"))?;
            }
        }
    }
    let seed = 0x5eed_0000 + run as u64;
    let specs = (0..c.procs)
        .map(|rank| WorkerSpec {
            workload: w.clone(),
            target: target.into(),
            hosts_file: hosts.clone(),
            base: worker_base.clone(),
            rank,
            procs: c.procs,
            seed,
        })
        .collect();
    let mut workers = spawn_workers(specs, &worker_env)?;
    let mut results = Vec::new();
    for phase in phases(w) {
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
        results.push(PhaseResult {
            phase: phase.to_string(),
            target: target.into(),
            ops: total.ops,
            bytes: total.bytes,
            errors: total.errors,
            seconds: secs,
            rate,
        });
    }
    for mut wk in workers {
        drop(wk.stdin);
        let _ = wk.child.wait();
    }
    // Clean up what the run left.
    match w {
        Workload::Md { shared_dir, .. } => {
            if !shared_dir {
                for r in 0..c.procs {
                    let _ = setup.rmdir(&format!("{base}/md/p{r}"));
                }
            }
            let _ = setup.rmdir(&format!("{base}/md"));
        }
        Workload::Io { shared_file, .. } => {
            if *shared_file {
                let _ = setup.unlink(&format!("{base}/io.shared"));
            } else {
                for r in 0..c.procs {
                    let _ = setup.unlink(&format!("{base}/io.{r}"));
                }
            }
        }
    }
    let _ = setup.rmdir(&base);
    Ok(results)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn drive(w: Workload, c: Common) -> Result<(), String> {
    if c.procs == 0 || c.runs == 0 {
        return Err("--procs and --runs must be at least 1".into());
    }
    // Several targets (comma-separated) run interleaved, run by run, and the first is
    // reported as a ratio to each of the others.
    let mut targets: Vec<String> =
        c.target.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect();
    if let Some(b) = &c.baseline {
        targets.push(format!("posix:{}", b.display()));
    }
    let mut all: Vec<PhaseResult> = Vec::new();
    for run in 0..c.runs {
        for t in &targets {
            all.extend(run_once(&w, &c, t, run)?);
        }
    }
    let unit = match w {
        Workload::Md { .. } => "ops/s",
        Workload::Io { .. } => "MiB/s",
    };
    let mut summary = Vec::new();
    for phase in phases(&w) {
        let mut row = serde_json::Map::new();
        row.insert("phase".into(), (*phase).into());
        let mut meds = Vec::new();
        for t in &targets {
            let rs: Vec<&PhaseResult> = all.iter().filter(|r| r.phase == *phase && &r.target == t).collect();
            let m = median(rs.iter().map(|r| r.rate).collect());
            let errors: u64 = rs.iter().map(|r| r.errors).sum();
            row.insert(t.to_string(), serde_json::json!({"median_rate": m, "runs": rs.iter().map(|r| r.rate).collect::<Vec<_>>(), "errors": errors}));
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
        summary.push(serde_json::Value::Object(row));
    }
    let errors: u64 = all.iter().map(|r| r.errors).sum();
    if c.json {
        let out = serde_json::json!({"workload": w, "procs": c.procs, "runs": c.runs, "unit": unit, "phases": summary});
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
    } else {
        println!("{}; {} process(es), median of {} run(s), {unit}", w.describe(), c.procs, c.runs);
        print!("{:<8}", "phase");
        for t in &targets {
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
        for row in &summary {
            print!("{:<8}", row["phase"].as_str().unwrap());
            for t in &targets {
                print!(" {:>22.1}", row[t]["median_rate"].as_f64().unwrap());
            }
            if let Some(r) = row.get("ratio") {
                print!(" {:>8.3}", r.as_f64().unwrap());
            }
            if targets.len() > 2 {
                for t in &targets[1..] {
                    print!(" {:>12.3}", row.get(format!("ratio_vs_{t}")).and_then(|v| v.as_f64()).unwrap_or(f64::NAN));
                }
            }
            println!();
        }
    }
    if errors > 0 {
        return Err(format!("{errors} operation(s) failed or read wrong data"));
    }
    Ok(())
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    match a.kind {
        BenchKind::Worker => worker(),
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
