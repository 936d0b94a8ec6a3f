//! The Prometheus exporter: the daemon's metrics as Prometheus text format (version
//! 0.0.4) on `GET /metrics`, from a tiny HTTP/1.x server on an opt-in address
//! (`gust daemon --metrics ADDR`).
//!
//! The server is written here rather than taken from a crate: it answers one request
//! per connection, one connection at a time, on one thread, with a bounded request
//! head (`REQUEST_HEAD_BYTES_MAX`) and a timeout per connection, which is all a
//! scraper every few seconds needs and leaves nothing to configure or to go wrong
//! under a peer that misbehaves. The page holds counts and sizes only, no path or
//! name of the job's files (the busiest directories go only to authenticated `gust`
//! clients, in the Metrics request), so it needs no secret; it is off unless asked
//! for, and `gust start` binds it to loopback unless told otherwise.
//!
//! Not for: counting (metrics), anything but GET /metrics.

use crate::state::State;
use gust_proto::{DaemonMetrics, LATENCY_BUCKET_BOUNDS_US};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Bound on the request line and headers read from a scraper.
const REQUEST_HEAD_BYTES_MAX: usize = 8192;
/// A scraper must send its request and take the page within this time.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `addr` and serves the page from a thread of its own; returns the bound
/// address (port 0 picks a free port).
pub fn spawn(state: Arc<State>, addr: &str) -> Result<String, String> {
    let l = TcpListener::bind(addr).map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    let bound = l.local_addr().map_err(|e| e.to_string())?.to_string();
    let _ = state.metrics.exporter_addr.set(bound.clone());
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for s in l.incoming() {
                match s {
                    Ok(s) => serve(&state, s),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(bound)
}

fn serve(state: &State, mut s: TcpStream) {
    let _ = s.set_read_timeout(Some(CONNECTION_TIMEOUT));
    let _ = s.set_write_timeout(Some(CONNECTION_TIMEOUT));
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            let _ = respond(&mut s, "431 Request Header Fields Too Large", "text/plain", "request head too large\n");
            return;
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let _ = match (method, path) {
        ("GET", "/metrics") | ("HEAD", "/metrics") => {
            let body = render(&crate::metrics::collect(state));
            respond(
                &mut s,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                if method == "GET" { &body } else { "" },
            )
        }
        ("GET", _) | ("HEAD", _) => respond(&mut s, "404 Not Found", "text/plain", "GustFS daemon: see /metrics\n"),
        _ => respond(&mut s, "405 Method Not Allowed", "text/plain", "GET /metrics only\n"),
    };
}

fn respond(s: &mut TcpStream, status: &str, content_type: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

/// Errno names for the error label (Linux numbering); others show their number.
fn errno_name(e: i32) -> String {
    match (e, gust_proto::errno::name(e)) {
        (-1, _) => "other".into(),
        (_, Some(n)) => n.into(),
        (_, None) => format!("E{e}"),
    }
}

/// A bucket bound in seconds for the `le` label ("0.00001", "0.25", "1").
fn seconds(us: u64) -> String {
    format!("{}", us as f64 / 1e6)
}

/// The page: one family per quantity, every series labelled with the daemon id.
pub fn render(m: &DaemonMetrics) -> String {
    let d = m.daemon_id;
    let mut o = String::with_capacity(32 * 1024);
    render_requests(&mut o, m);
    family(&mut o, "gust_errors_total", "counter", "Error replies, by errno.");
    for (e, n) in &m.errors {
        let _ = writeln!(o, "gust_errors_total{{daemon=\"{d}\",errno=\"{}\"}} {n}", errno_name(*e));
    }
    for (name, kind, help, v) in single_values(m) {
        family(&mut o, name, kind, help);
        let _ = writeln!(o, "{name}{{daemon=\"{d}\"}} {v}");
    }
    family(&mut o, "gust_uptime_seconds", "gauge", "Seconds since the daemon started.");
    let _ = writeln!(o, "gust_uptime_seconds{{daemon=\"{d}\"}} {}", m.uptime_ms as f64 / 1e3);
    o
}

/// A family's HELP and TYPE lines.
fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The families by operation: requests, errors, and the latency histogram.
fn render_requests(o: &mut String, m: &DaemonMetrics) {
    let d = m.daemon_id;
    family(o, "gust_requests_total", "counter", "Requests served, by operation.");
    for op in &m.ops {
        let _ = writeln!(o, "gust_requests_total{{daemon=\"{d}\",op=\"{}\"}} {}", op.name, op.count);
    }
    family(o, "gust_request_errors_total", "counter", "Requests answered with an error, by operation.");
    for op in &m.ops {
        let _ = writeln!(o, "gust_request_errors_total{{daemon=\"{d}\",op=\"{}\"}} {}", op.name, op.errors);
    }
    family(o, "gust_request_duration_seconds", "histogram", "Service time of requests, by operation.");
    for op in &m.ops {
        let mut cumulative = 0;
        for (i, n) in op.latency_buckets.iter().enumerate() {
            cumulative += n;
            let le = LATENCY_BUCKET_BOUNDS_US.get(i).map(|&b| seconds(b)).unwrap_or_else(|| "+Inf".into());
            let _ = writeln!(
                o,
                "gust_request_duration_seconds_bucket{{daemon=\"{d}\",op=\"{}\",le=\"{le}\"}} {cumulative}",
                op.name
            );
        }
        let _ = writeln!(
            o,
            "gust_request_duration_seconds_sum{{daemon=\"{d}\",op=\"{}\"}} {}",
            op.name,
            op.latency_us_sum as f64 / 1e6
        );
        let _ = writeln!(o, "gust_request_duration_seconds_count{{daemon=\"{d}\",op=\"{}\"}} {cumulative}", op.name);
    }
}

/// The families of one series each: (name, type, help, value).
fn single_values(m: &DaemonMetrics) -> [(&'static str, &'static str, &'static str, u64); 17] {
    [
        ("gust_read_bytes_total", "counter", "File data bytes read from the chunk store.", m.bytes_read),
        ("gust_written_bytes_total", "counter", "File data bytes written to the chunk store.", m.bytes_written),
        ("gust_connections_open", "gauge", "Client connections open.", m.connections_open),
        (
            "gust_frames_refused_total",
            "counter",
            "Connections and frames refused (handshake, malformed frames).",
            m.frames_refused,
        ),
        ("gust_metadata_records", "gauge", "Metadata records held (RocksDB's estimate).", m.metadata_records),
        (
            "gust_metadata_store_bytes",
            "gauge",
            "Bytes of the metadata store (SST files and memtables).",
            m.metadata_store_bytes,
        ),
        ("gust_chunk_store_bytes", "gauge", "Bytes the chunk store occupies on disk.", m.chunk_store_bytes),
        ("gust_capacity_bytes", "gauge", "Size of the file system holding the root directory.", m.capacity_bytes),
        ("gust_free_bytes", "gauge", "Free bytes of that file system.", m.free_bytes),
        ("gust_available_bytes", "gauge", "Bytes of that file system available to the daemon.", m.avail_bytes),
        ("gust_grants_held", "gauge", "Grants on records and listings clients hold.", m.grants.held),
        ("gust_grants_given_total", "counter", "Grants given.", m.grants.given),
        ("gust_recalls_total", "counter", "Recalls sent (of records, listings and claims).", m.grants.recalls),
        (
            "gust_recalls_expired_total",
            "counter",
            "Holders whose lease ran out before they answered a recall.",
            m.grants.expired,
        ),
        ("gust_claims_held", "gauge", "Claims on directories clients hold.", m.grants.claims),
        ("gust_claims_given_total", "counter", "Claims on directories granted.", m.grants.claims_given),
        ("gust_claims_recalled_total", "counter", "Claims on directories recalled.", m.grants.claims_recalled),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bounds_in_seconds() {
        assert_eq!(seconds(10), "0.00001");
        assert_eq!(seconds(250), "0.00025");
        assert_eq!(seconds(1_000_000), "1");
        assert_eq!(errno_name(2), "ENOENT");
        assert_eq!(errno_name(-1), "other");
    }
}
