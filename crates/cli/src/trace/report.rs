//! `gust trace report DIR`: what the trace files of DIR say, for a person (tables
//! with units) or a script (`--json`), plus PNG plots and Chrome trace JSON written
//! next to them (or to `--out`).
//!
//! Counted: per tracepoint, per process and per daemon, the calls, errors, bytes and
//! latency percentiles (nearest rank). `files_written` and `files_read` are distinct
//! paths that client `write` / `read` records moved bytes of.

use crate::human_size;
use clap::Args;
use gust_trace::reader::{read_dir, TraceFile};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

#[derive(Args)]
pub struct ReportArgs {
    /// Directory holding the trace files (*.gtrace).
    dir: PathBuf,
    /// Where plots and trace.json go [default: DIR].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the summary as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Do not draw PNG plots.
    #[arg(long)]
    no_plots: bool,
}

/// Calls of one kind: count, errors, bytes, durations.
#[derive(Default)]
pub struct OpStats {
    pub count: u64,
    pub errors: u64,
    pub bytes: u64,
    pub durations_ns: Vec<u64>,
}

impl OpStats {
    fn add(&mut self, bytes: u64, dur_ns: u64, failed: bool) {
        self.count += 1;
        self.errors += failed as u64;
        self.bytes += bytes;
        self.durations_ns.push(dur_ns);
    }

    /// The nearest-rank percentile `p` (0-100) of the durations, ns.
    fn percentile_ns(&self, p: f64) -> u64 {
        let mut d = self.durations_ns.clone();
        d.sort_unstable();
        percentile(&d, p)
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Requests one daemon saw: as clients recorded them, and as it served them.
#[derive(Default)]
pub struct DaemonLoad {
    pub client_requests: u64,
    pub client_bytes: u64,
    pub served_requests: u64,
    pub served_bytes: u64,
}

pub struct Summary {
    pub ops: BTreeMap<String, OpStats>,
    /// Per trace file (one process each), in file order.
    pub processes: Vec<(String, u32, BTreeMap<String, OpStats>)>,
    pub daemons: BTreeMap<u32, DaemonLoad>,
    pub records: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub files_written: usize,
    pub files_read: usize,
}

pub fn is_client(f: &TraceFile) -> bool {
    f.header.role.starts_with("client")
}

pub fn summarize(files: &[TraceFile]) -> Summary {
    let mut s = Summary {
        ops: BTreeMap::new(),
        processes: Vec::new(),
        daemons: BTreeMap::new(),
        records: 0,
        first_ns: u64::MAX,
        last_ns: 0,
        bytes_written: 0,
        bytes_read: 0,
        files_written: 0,
        files_read: 0,
    };
    let (mut written, mut read) = (BTreeSet::new(), BTreeSet::new());
    for f in files {
        let mut per: BTreeMap<String, OpStats> = BTreeMap::new();
        let client = is_client(f);
        for (_, r) in &f.records {
            let name = f.tracepoint_name(r.tp).to_string();
            let failed = r.result != 0;
            // A truncate's size is the size set, not bytes moved.
            let bytes = if name == "truncate" { 0 } else { r.size };
            s.ops.entry(name.clone()).or_default().add(bytes, r.dur_ns, failed);
            per.entry(name.clone()).or_default().add(bytes, r.dur_ns, failed);
            s.records += 1;
            s.first_ns = s.first_ns.min(r.ts_ns);
            s.last_ns = s.last_ns.max(r.ts_ns.saturating_add(r.dur_ns));
            if let Some(d) = r.daemon {
                let l = s.daemons.entry(d).or_default();
                if client {
                    l.client_requests += 1;
                    l.client_bytes += bytes;
                } else {
                    l.served_requests += 1;
                    l.served_bytes += bytes;
                }
            }
            if client && !failed && r.size > 0 {
                match name.as_str() {
                    "write" => {
                        s.bytes_written += r.size;
                        written.insert(r.path.clone());
                    }
                    "read" => {
                        s.bytes_read += r.size;
                        read.insert(r.path.clone());
                    }
                    _ => {}
                }
            }
        }
        s.processes.push((f.header.role.clone(), f.header.pid, per));
    }
    s.files_written = written.len();
    s.files_read = read.len();
    if s.records == 0 {
        s.first_ns = 0;
    }
    s
}

fn op_json(name: &str, o: &OpStats) -> Value {
    json!({
        "name": name,
        "count": o.count,
        "errors": o.errors,
        "bytes": o.bytes,
        "latency_us": {
            "p50": o.percentile_ns(50.0) as f64 / 1e3,
            "p90": o.percentile_ns(90.0) as f64 / 1e3,
            "p99": o.percentile_ns(99.0) as f64 / 1e3,
            "max": o.percentile_ns(100.0) as f64 / 1e3,
        },
    })
}

pub fn summary_json(s: &Summary, files: &[TraceFile], outputs: &[PathBuf]) -> Value {
    json!({
        "trace_files": files.len(),
        "records": s.records,
        "span_s": (s.last_ns.saturating_sub(s.first_ns)) as f64 / 1e9,
        "bytes_written": s.bytes_written,
        "bytes_read": s.bytes_read,
        "files_written": s.files_written,
        "files_read": s.files_read,
        "ops": s.ops.iter().map(|(n, o)| op_json(n, o)).collect::<Vec<_>>(),
        "processes": s.processes.iter().zip(files).map(|((role, pid, per), f)| json!({
            "file": f.path.display().to_string(),
            "role": role,
            "pid": pid,
            "records": f.records.len(),
            "ops": per.iter().map(|(n, o)| op_json(n, o)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "daemons": s.daemons.iter().map(|(d, l)| json!({
            "daemon": d,
            "client_requests": l.client_requests,
            "client_bytes": l.client_bytes,
            "served_requests": l.served_requests,
            "served_bytes": l.served_bytes,
        })).collect::<Vec<_>>(),
        "outputs": outputs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    })
}

/// A duration for people: 850 ns, 25.3 µs, 1.2 ms, 3.10 s.
pub fn human_ns(ns: u64) -> String {
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.1} µs", ns as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

fn print_ops(ops: &BTreeMap<String, OpStats>, indent: &str) {
    println!(
        "{indent}{:<12} {:>9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "operation", "calls", "errors", "bytes", "p50", "p90", "p99", "max"
    );
    for (n, o) in ops {
        println!(
            "{indent}{:<12} {:>9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
            n,
            o.count,
            o.errors,
            if o.bytes > 0 { human_size(o.bytes) } else { "-".into() },
            human_ns(o.percentile_ns(50.0)),
            human_ns(o.percentile_ns(90.0)),
            human_ns(o.percentile_ns(99.0)),
            human_ns(o.percentile_ns(100.0)),
        );
    }
}

fn print_summary(s: &Summary, dir: &std::path::Path, outputs: &[PathBuf]) {
    println!(
        "{} records from {} processes in {}, over {}",
        s.records,
        s.processes.len(),
        dir.display(),
        human_ns(s.last_ns.saturating_sub(s.first_ns))
    );
    println!(
        "clients wrote {} to {} files and read {} from {} files",
        human_size(s.bytes_written),
        s.files_written,
        human_size(s.bytes_read),
        s.files_read
    );
    println!();
    print_ops(&s.ops, "");
    for (role, pid, per) in &s.processes {
        println!();
        println!("{role} (pid {pid})");
        print_ops(per, "  ");
    }
    if !s.daemons.is_empty() {
        println!();
        println!(
            "{:<8} {:>16} {:>14} {:>16} {:>14}",
            "daemon", "client requests", "client bytes", "served requests", "served bytes"
        );
        for (d, l) in &s.daemons {
            println!(
                "{:<8} {:>16} {:>14} {:>16} {:>14}",
                d,
                l.client_requests,
                human_size(l.client_bytes),
                l.served_requests,
                human_size(l.served_bytes)
            );
        }
    }
    if !outputs.is_empty() {
        println!();
        for o in outputs {
            println!("wrote {}", o.display());
        }
    }
}

pub fn run(a: ReportArgs) -> Result<(), String> {
    let files = read_dir(&a.dir).map_err(|e| format!("cannot read the trace: {e}"))?;
    let s = summarize(&files);
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut outputs = vec![super::chrome::write(&files, s.first_ns, &out.join("trace.json"))?];
    let mut plot_error = None;
    if !a.no_plots {
        match super::plots::draw_all(&files, &s, &out) {
            Ok(mut p) => outputs.append(&mut p),
            Err(e) => plot_error = Some(e),
        }
    }
    if a.json {
        let mut v = summary_json(&s, &files, &outputs);
        if let Some(e) = &plot_error {
            v["plot_error"] = json!(e);
        }
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
    } else {
        print_summary(&s, &a.dir, &outputs);
    }
    match plot_error {
        Some(e) => Err(format!("no plots: {e}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let d: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&d, 50.0), 50);
        assert_eq!(percentile(&d, 99.0), 99);
        assert_eq!(percentile(&d, 100.0), 100);
        assert_eq!(percentile(&[7], 1.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_ns(850), "850 ns");
        assert_eq!(human_ns(25_340), "25.3 µs");
        assert_eq!(human_ns(1_200_000), "1.2 ms");
        assert_eq!(human_ns(3_100_000_000), "3.10 s");
    }
}
