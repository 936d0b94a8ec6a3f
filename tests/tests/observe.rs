//! Observability with real daemons: the Prometheus page checked by `promtool check
//! metrics` and scraped by a real Prometheus server, the counters it shows against
//! a known workload, `gust status` totals and imbalance, and the job statistics of
//! `gust stop --stats`. promtool and prometheus come from Debian's prometheus
//! package (scripts/setup.sh).

use gust_client::Client;
use gust_e2e::{wait_until, Instance};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Files the workload creates, in one directory.
const FILES: usize = 300;
const FILE_BYTES: usize = 10_000;

/// GET `path` from `addr` over HTTP/1.0; (status line, body).
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("an HTTP response");
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// The value of the series `name{labels}` (labels exactly as written) on a page.
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn workload(c: &Client) {
    c.mkdir("/job", 0o755).unwrap();
    let data = vec![7u8; FILE_BYTES];
    for i in 0..FILES {
        let fd = c.open(&format!("/job/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        assert_eq!(c.write(fd, &data).unwrap(), FILE_BYTES);
        c.close(fd).unwrap();
    }
    // Errors by errno: stats of missing files.
    for i in 0..5 {
        assert!(c.stat(&format!("/job/missing{i}")).is_err());
    }
}

fn metrics_addrs(c: &Client, n: u32) -> Vec<String> {
    (0..n).map(|d| c.daemon_metrics(d).unwrap().metrics_addr).collect()
}

#[test]
fn prometheus_page_is_valid_counts_the_workload_and_is_scraped() {
    let inst = Instance::start_with(2, &["--metrics", "127.0.0.1:0"]);
    let c = inst.client();
    workload(&c);
    let addrs = metrics_addrs(&c, 2);
    assert!(addrs.iter().all(|a| a.starts_with("127.0.0.1:")), "{addrs:?}");
    let pages: Vec<String> = addrs
        .iter()
        .map(|a| {
            let (status, body) = http_get(a, "/metrics");
            assert!(status.contains("200"), "{status}");
            body
        })
        .collect();
    assert!(http_get(&addrs[0], "/other").0.contains("404"));

    // promtool's linter: names, types, help, histogram shape.
    for page in &pages {
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool (Debian package prometheus; scripts/setup.sh installs it)");
        p.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The counters add up to the workload across the daemons.
    let sum = |series: &dyn Fn(u32) -> String| -> f64 {
        pages.iter().enumerate().map(|(d, p)| value(p, &series(d as u32)).unwrap_or(0.0)).sum()
    };
    // create: the files and the directory (mkdir is a create).
    assert_eq!(sum(&|d| format!("gust_requests_total{{daemon=\"{d}\",op=\"create\"}}")), (FILES + 1) as f64);
    assert_eq!(sum(&|d| format!("gust_written_bytes_total{{daemon=\"{d}\"}}")), (FILES * FILE_BYTES) as f64);
    assert_eq!(sum(&|d| format!("gust_errors_total{{daemon=\"{d}\",errno=\"ENOENT\"}}")), 5.0);
    // Every served create is in the histogram's +Inf bucket and count.
    assert_eq!(
        sum(&|d| format!("gust_request_duration_seconds_bucket{{daemon=\"{d}\",op=\"create\",le=\"+Inf\"}}")),
        (FILES + 1) as f64
    );
    assert!(sum(&|d| format!("gust_metadata_records{{daemon=\"{d}\"}}")) >= FILES as f64);
    assert!(sum(&|d| format!("gust_chunk_store_bytes{{daemon=\"{d}\"}}")) >= (FILES * FILE_BYTES) as f64);
    assert!(value(&pages[0], "gust_capacity_bytes{daemon=\"0\"}").unwrap() > 0.0);
    assert!(value(&pages[0], "gust_connections_open{daemon=\"0\"}").unwrap() >= 1.0);

    // A real Prometheus server scrapes both daemons.
    let Ok(_) = Command::new("prometheus").arg("--version").output() else {
        panic!("prometheus server missing (Debian package prometheus; scripts/setup.sh installs it)");
    };
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: gust\n    static_configs:\n      - targets: [{}]\n",
            addrs.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ")
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{port}");
    let mut server = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
        .spawn()
        .expect("start prometheus");
    let query = "/api/v1/query?query=sum(gust_requests_total%7Bop%3D%22create%22%7D)";
    let want = format!("\"{}\"", FILES + 1);
    let mut last = String::new();
    let scraped = wait_until(Duration::from_secs(60), || {
        if let Ok(mut s) = TcpStream::connect(&web) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            if write!(s, "GET {query} HTTP/1.0\r\n\r\n").is_ok() {
                last.clear();
                let _ = s.read_to_string(&mut last);
            }
        }
        last.contains("\"status\":\"success\"") && last.contains(&want)
    });
    let _ = server.kill();
    let _ = server.wait();
    let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    assert!(scraped, "Prometheus did not report {want} creates; last answer: {last}\nlog tail: {}", {
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    });
}

#[test]
fn status_totals_and_stop_stats() {
    let mut inst = Instance::start(3);
    let c = inst.client();
    workload(&c);
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let total = text.lines().find(|l| l.split_whitespace().next() == Some("total")).expect("a total row");
    // Records summed over the daemons (RocksDB's estimate, which counts size
    // updates not yet folded too): at least the files and the directory.
    let cols: Vec<&str> = total.split_whitespace().collect();
    assert!(cols[3].parse::<usize>().unwrap() > FILES, "{text}");
    assert!(text.lines().any(|l| l.contains("imbalance")), "{text}");

    let stats = inst.dir.path().join("stats.json");
    let out = inst.gust(&["stop", "--stats", stats.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("busiest directories") && err.contains("/job"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert_eq!(v["totals"]["ops"]["create"]["count"], (FILES + 1) as u64);
    assert_eq!(v["totals"]["bytes_written"], (FILES * FILE_BYTES) as u64);
    assert_eq!(v["daemons"].as_array().unwrap().len(), 3);
    let per_daemon: u64 = v["daemons"].as_array().unwrap().iter().map(|d| d["bytes_written"].as_u64().unwrap()).sum();
    assert_eq!(per_daemon, (FILES * FILE_BYTES) as u64);
    // The busiest directory is the job's: every create, update_size and failed stat
    // of a file in it counts there.
    let top = &v["busiest_dirs"][0];
    assert_eq!(top["dir"], "/job");
    assert!(top["requests"].as_u64().unwrap() >= (2 * FILES + 5) as u64, "{top}");
    inst.stop();
}
