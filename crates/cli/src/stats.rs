//! What an instance did: `gust status` (per daemon, totals, imbalance) and the job
//! statistics of `gust stop --stats FILE` (JSON for scripts, a summary for people).
//!
//! Everything comes from the daemons' Metrics request; the numbers are counted by
//! the daemons (requests they served), so a job's client-side calls that touch
//! several daemons count once per daemon.
//!
//! Not for: counting (gust-daemon's metrics), Prometheus (the daemons serve it).

use crate::human_size as human;
use gust_client::{Client, DaemonMetrics};
use gust_hosts::HostsFile;
use gust_proto::LATENCY_BUCKET_BOUNDS_US;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Directories listed in the terminal summary (the JSON has up to BUSIEST_DIRS_MAX).
const SUMMARY_DIRS_MAX: usize = 10;

/// Every daemon's metrics, or why a daemon did not answer.
pub fn gather(c: &Client, h: &HostsFile) -> Vec<(u32, Result<DaemonMetrics, String>)> {
    h.daemons.iter().map(|d| (d.id, c.daemon_metrics(d.id).map_err(|e| e.to_string()))).collect()
}

fn requests(m: &DaemonMetrics) -> u64 {
    m.ops.iter().map(|o| o.count).sum()
}

/// max / mean of the values (1.0 = perfectly even; 0 values: 1.0).
pub fn imbalance(v: &[u64]) -> f64 {
    let sum: u64 = v.iter().sum();
    if v.is_empty() || sum == 0 {
        return 1.0;
    }
    let mean = sum as f64 / v.len() as f64;
    *v.iter().max().unwrap() as f64 / mean
}

/// The smallest bucket bound (µs) under which `q` of the requests fall; None past
/// the last bound.
fn quantile_bound_us(buckets: &[u64], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return Some(0);
    }
    let want = (q * total as f64).ceil() as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= want {
            return LATENCY_BUCKET_BOUNDS_US.get(i).copied();
        }
    }
    None
}

/// The `gust status` table: one row per daemon (state `up`, `recovering` for the
/// daemons in `recovering`, or `DOWN`), then totals and imbalance.
pub fn print_status(h: &HostsFile, all: &[(u32, Result<DaemonMetrics, String>)], recovering: &[u32]) -> usize {
    println!(
        "{:>3} {:<16} {:<22} {:>8} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  metrics",
        "id", "host", "address", "pid", "state", "requests", "errors", "records", "read", "written", "used", "free"
    );
    let mut down = 0;
    let up: Vec<&DaemonMetrics> = all.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    for (d, (_, r)) in h.daemons.iter().zip(all) {
        match r {
            Ok(m) => println!(
                "{:>3} {:<16} {:<22} {:>8} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
                d.id,
                d.host,
                d.tcp_addr(),
                d.pid,
                if recovering.contains(&d.id) { "recovering" } else { "up" },
                requests(m),
                m.ops.iter().map(|o| o.errors).sum::<u64>(),
                m.metadata_records,
                human(m.bytes_read),
                human(m.bytes_written),
                human(m.chunk_store_bytes),
                human(m.avail_bytes),
                if m.metrics_addr.is_empty() { "-".to_string() } else { format!("http://{}/metrics", m.metrics_addr) }
            ),
            Err(_) => {
                down += 1;
                println!("{:>3} {:<16} {:<22} {:>8} {:<10}", d.id, d.host, d.tcp_addr(), d.pid, "DOWN");
            }
        }
    }
    if up.len() > 1 {
        let col = |f: &dyn Fn(&DaemonMetrics) -> u64| up.iter().map(|m| f(m)).collect::<Vec<u64>>();
        let (req, rec, rd, wr, used) = (
            col(&requests),
            col(&|m| m.metadata_records),
            col(&|m| m.bytes_read),
            col(&|m| m.bytes_written),
            col(&|m| m.chunk_store_bytes),
        );
        let sum = |v: &[u64]| v.iter().sum::<u64>();
        println!(
            "{:>3} {:<16} {:<22} {:>8} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "",
            "total",
            "",
            "",
            "",
            sum(&req),
            up.iter().map(|m| m.ops.iter().map(|o| o.errors).sum::<u64>()).sum::<u64>(),
            sum(&rec),
            human(sum(&rd)),
            human(sum(&wr)),
            human(sum(&used)),
            human(up.iter().map(|m| m.avail_bytes).sum())
        );
        let f = |v: &[u64]| format!("{:.2}", imbalance(v));
        println!(
            "{:>3} {:<16} {:<22} {:>8} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "",
            "imbalance",
            "(max / mean)",
            "",
            "",
            f(&req),
            "",
            f(&rec),
            f(&rd),
            f(&wr),
            f(&used)
        );
    }
    if !up.is_empty() {
        println!("{}", grants_line(&up));
    }
    down
}

/// The grants and claims of several daemons, added up.
fn grant_totals(ms: &[&DaemonMetrics]) -> gust_proto::GrantMetrics {
    let mut t = gust_proto::GrantMetrics::default();
    for m in ms {
        let g = &m.grants;
        t.held += g.held;
        t.given += g.given;
        t.recalls += g.recalls;
        t.expired += g.expired;
        t.claims += g.claims;
        t.claims_given += g.claims_given;
        t.claims_recalled += g.claims_recalled;
    }
    t
}

fn grants_json(g: &gust_proto::GrantMetrics) -> Value {
    json!({
        "held": g.held,
        "given": g.given,
        "recalls": g.recalls,
        "recalls_expired": g.expired,
        "claims_held": g.claims,
        "claims_given": g.claims_given,
        "claims_recalled": g.claims_recalled,
    })
}

/// The line of `gust status` under the table: grants and claims of the daemons up.
fn grants_line(up: &[&DaemonMetrics]) -> String {
    let g = grant_totals(up);
    format!(
        "grants: {} held, {} given, {} recalls ({} unanswered within the lease); claims on directories: {} held, {} given, {} recalled",
        g.held, g.given, g.recalls, g.expired, g.claims, g.claims_given, g.claims_recalled
    )
}

/// The job statistics as JSON: per daemon, totals, busiest directories.
pub fn job_stats(h: &HostsFile, all: &[(u32, Result<DaemonMetrics, String>)]) -> Value {
    let mut total_ops: Vec<(String, u64, u64)> = Vec::new(); // name, count, errors
    let mut dirs: HashMap<String, u64> = HashMap::new();
    let mut dirs_untracked = 0;
    let mut daemons = Vec::new();
    for (id, r) in all {
        let m = match r {
            Ok(m) => m,
            Err(e) => {
                daemons.push(json!({ "id": id, "error": e }));
                continue;
            }
        };
        let mut ops = serde_json::Map::new();
        for o in &m.ops {
            match total_ops.iter_mut().find(|t| t.0 == o.name) {
                Some(t) => {
                    t.1 += o.count;
                    t.2 += o.errors;
                }
                None => total_ops.push((o.name.clone(), o.count, o.errors)),
            }
            if o.count == 0 {
                continue;
            }
            let done: u64 = o.latency_buckets.iter().sum();
            ops.insert(
                o.name.clone(),
                json!({
                    "count": o.count,
                    "errors": o.errors,
                    "latency_us_mean": o.latency_us_sum.checked_div(done).unwrap_or(0),
                    "latency_us_p50_bound": quantile_bound_us(&o.latency_buckets, 0.5),
                    "latency_us_p99_bound": quantile_bound_us(&o.latency_buckets, 0.99),
                }),
            );
        }
        for (d, n) in &m.busiest_dirs {
            *dirs.entry(d.clone()).or_default() += n;
        }
        dirs_untracked += m.dirs_untracked;
        daemons.push(json!({
            "id": m.daemon_id,
            "host": h.daemons.iter().find(|d| d.id == *id).map(|d| d.host.clone()).unwrap_or_default(),
            "uptime_s": m.uptime_ms as f64 / 1e3,
            "requests": requests(m),
            "ops": ops,
            "errors_by_errno": m.errors.iter().map(|(e, n)| (e.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "bytes_read": m.bytes_read,
            "bytes_written": m.bytes_written,
            "metadata_records": m.metadata_records,
            "metadata_store_bytes": m.metadata_store_bytes,
            "chunk_store_bytes": m.chunk_store_bytes,
            "capacity_bytes": m.capacity_bytes,
            "avail_bytes": m.avail_bytes,
            "grants": grants_json(&m.grants),
        }));
    }
    let mut dirs: Vec<(String, u64)> = dirs.into_iter().collect();
    dirs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    dirs.truncate(gust_proto::BUSIEST_DIRS_MAX);
    let ok: Vec<&DaemonMetrics> = all.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    let sum = |f: &dyn Fn(&DaemonMetrics) -> u64| ok.iter().map(|m| f(m)).sum::<u64>();
    let per = |f: &dyn Fn(&DaemonMetrics) -> u64| ok.iter().map(|m| f(m)).collect::<Vec<u64>>();
    json!({
        "instance": h.instance,
        "daemons": daemons,
        "totals": {
            "ops": total_ops.iter().filter(|t| t.1 > 0)
                .map(|t| (t.0.clone(), json!({ "count": t.1, "errors": t.2 })))
                .collect::<serde_json::Map<_, _>>(),
            "requests": sum(&requests),
            "bytes_read": sum(&|m| m.bytes_read),
            "bytes_written": sum(&|m| m.bytes_written),
            "metadata_records": sum(&|m| m.metadata_records),
            "chunk_store_bytes": sum(&|m| m.chunk_store_bytes),
            "grants": grants_json(&grant_totals(&ok)),
        },
        "imbalance": {
            "requests": imbalance(&per(&requests)),
            "bytes_written": imbalance(&per(&|m| m.bytes_written)),
            "bytes_read": imbalance(&per(&|m| m.bytes_read)),
            "metadata_records": imbalance(&per(&|m| m.metadata_records)),
        },
        "busiest_dirs": dirs.iter().map(|(d, n)| json!({ "dir": d, "requests": n })).collect::<Vec<_>>(),
        "dirs_untracked_requests": dirs_untracked,
    })
}

/// The terminal summary of `job_stats`.
pub fn print_summary(v: &Value) {
    let t = &v["totals"];
    let u = |x: &Value| x.as_u64().unwrap_or(0);
    eprintln!(
        "gust: job statistics: {} requests, {} read, {} written, {} records, {} in chunk stores",
        u(&t["requests"]),
        human(u(&t["bytes_read"])),
        human(u(&t["bytes_written"])),
        u(&t["metadata_records"]),
        human(u(&t["chunk_store_bytes"]))
    );
    if let Some(ops) = t["ops"].as_object() {
        let mut ops: Vec<(&String, u64, u64)> = ops.iter().map(|(k, o)| (k, u(&o["count"]), u(&o["errors"]))).collect();
        ops.sort_by_key(|o| std::cmp::Reverse(o.1));
        let line: Vec<String> = ops
            .iter()
            .map(|(k, n, e)| if *e > 0 { format!("{k} {n} ({e} errors)") } else { format!("{k} {n}") })
            .collect();
        eprintln!("  operations: {}", line.join(", "));
    }
    for d in v["daemons"].as_array().into_iter().flatten() {
        if let Some(e) = d["error"].as_str() {
            eprintln!("  daemon {}: no answer ({e})", d["id"]);
            continue;
        }
        eprintln!(
            "  daemon {:>3}: {:>10} requests, {:>10} read, {:>10} written, {:>8} records",
            d["id"],
            u(&d["requests"]),
            human(u(&d["bytes_read"])),
            human(u(&d["bytes_written"])),
            u(&d["metadata_records"])
        );
    }
    let im = &v["imbalance"];
    eprintln!(
        "  imbalance (max / mean): requests {:.2}, written {:.2}, records {:.2}",
        im["requests"].as_f64().unwrap_or(1.0),
        im["bytes_written"].as_f64().unwrap_or(1.0),
        im["metadata_records"].as_f64().unwrap_or(1.0)
    );
    let dirs = v["busiest_dirs"].as_array().cloned().unwrap_or_default();
    if !dirs.is_empty() {
        eprintln!("  busiest directories (metadata requests):");
        for d in dirs.iter().take(SUMMARY_DIRS_MAX) {
            eprintln!("    {:>10}  {}", u(&d["requests"]), d["dir"].as_str().unwrap_or(""));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imbalance_and_quantiles() {
        assert_eq!(imbalance(&[10, 10]), 1.0);
        assert_eq!(imbalance(&[30, 10]), 1.5);
        assert_eq!(imbalance(&[0, 0]), 1.0);
        let mut b = vec![0u64; LATENCY_BUCKET_BOUNDS_US.len() + 1];
        b[2] = 98;
        b[5] = 2;
        assert_eq!(quantile_bound_us(&b, 0.5), Some(LATENCY_BUCKET_BOUNDS_US[2]));
        assert_eq!(quantile_bound_us(&b, 0.99), Some(LATENCY_BUCKET_BOUNDS_US[5]));
        b[LATENCY_BUCKET_BOUNDS_US.len()] = 1000;
        assert_eq!(quantile_bound_us(&b, 0.99), None);
    }
}
