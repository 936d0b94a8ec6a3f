//! `gust scrub`: reads every chunk of an instance and verifies it against its
//! checksums (docs/DESIGN.md, "Checksums"), at a bounded rate so that the job
//! beside it keeps its bandwidth; with replicas, rewrites what it finds corrupt
//! from another copy. Prints what it verified and every corrupt range (the file id,
//! the chunk, the bytes, and whether it was repaired), as JSON with `--json`.
//! Exits 1 if anything corrupt is left.
//!
//! Daemon by daemon, a page (`scrub` request) at a time: a page reads about a
//! second's worth at the rate, and the next one waits until the rate allows it.
//!
//! Not for: the verifying itself (gust-store's chunk store, in each daemon), inline
//! data of small files (RocksDB's own block checksums cover it).

use crate::instance::InstanceArgs;
use clap::Args;
use gust_client::{Client, ClientOptions, CorruptRange, FindQuery, Kind};
use serde::Serialize;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// Bound on the bytes read per second, over all daemons, in MiB.
    #[arg(long, default_value_t = 100)]
    rate_mib: u64,
    /// Only report: leave corrupt blocks as they are, even with replicas.
    #[arg(long)]
    no_repair: bool,
    /// Print the result as JSON on stdout (for scripts).
    #[arg(long)]
    json: bool,
}

/// One corrupt range found, as reported.
#[derive(Serialize)]
struct Found {
    daemon: u32,
    /// The file id, 32 hex digits (as in the daemon's log).
    file_id: String,
    /// The file's path (every name, for a hard-linked file), looked up once the
    /// scrub is over; none if the file is gone.
    paths: Vec<String>,
    chunk: u64,
    offset: u64,
    len: u64,
    repaired: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
struct Report {
    daemons: u32,
    files: u64,
    bytes: u64,
    seconds: f64,
    corrupt: Vec<Found>,
    /// Daemons that could not be scrubbed (down), with why.
    skipped: Vec<(u32, String)>,
}

pub fn run(a: ScrubArgs) -> Result<(), String> {
    let hp = a.inst.hosts_path();
    let c =
        Client::open_instance(&hp, ClientOptions::default()).map_err(|e| format!("{e} (is an instance running?)"))?;
    let rate = a.rate_mib.max(1) << 20;
    let page = rate.min(64 << 20);
    let repair = !a.no_repair && c.replicas() > 1;
    let started = Instant::now();
    let mut r = Report {
        daemons: c.daemon_count(),
        files: 0,
        bytes: 0,
        seconds: 0.0,
        corrupt: Vec::new(),
        skipped: Vec::new(),
    };
    let bar = Bar::new(!a.json);
    for d in 0..c.daemon_count() {
        let mut after = None;
        loop {
            let p = match c.scrub_page(d, after, page) {
                Ok(p) => p,
                Err(e) => {
                    let why = c.last_transport_error().filter(|_| e.0 == libc::EIO).unwrap_or_else(|| e.to_string());
                    r.skipped.push((d, why));
                    break;
                }
            };
            r.files += p.files;
            r.bytes += p.bytes;
            bar.show(d, r.files, r.bytes, started.elapsed());
            for range in p.corrupt {
                r.corrupt.push(found(&c, d, &range, repair));
            }
            match p.next {
                Some(n) => after = Some(n),
                None => break,
            }
            // Hold the rate: the bytes so far may take this long at most.
            let due = Duration::from_secs_f64(r.bytes as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }
    bar.finish();
    name_files(&c, &mut r.corrupt);
    r.seconds = started.elapsed().as_secs_f64();
    let left = r.corrupt.iter().filter(|f| !f.repaired).count();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
    } else {
        print_report(&r, c.chunk_size_bytes());
    }
    if left > 0 || !r.skipped.is_empty() {
        return Err(format!(
            "{left} corrupt range(s) left{}",
            if r.skipped.is_empty() { String::new() } else { format!(", {} daemon(s) not scrubbed", r.skipped.len()) }
        ));
    }
    Ok(())
}

/// A corrupt range, repaired from a copy if `repair`.
fn found(c: &Client, d: u32, range: &CorruptRange, repair: bool) -> Found {
    let mut f = Found {
        daemon: d,
        file_id: format!("{:032x}", range.file_id),
        paths: Vec::new(),
        chunk: range.offset / c.chunk_size_bytes().max(1),
        offset: range.offset,
        len: range.len,
        repaired: false,
        error: None,
    };
    if repair {
        match c.repair_range(d, range) {
            Ok(_) => f.repaired = true,
            Err(e) => f.error = Some(c.last_transport_error().unwrap_or_else(|| e.to_string())),
        }
    } else {
        f.error = Some(if c.replicas() > 1 { "not repaired (--no-repair)" } else { "no copy to repair from" }.into());
    }
    f
}

/// Finds the paths of the files with corrupt ranges: one pass over the namespace
/// (daemons hold chunks by file id only), and only if something was found.
fn name_files(c: &Client, found: &mut [Found]) {
    if found.is_empty() {
        return;
    }
    let q = FindQuery { kind: Some(Kind::File), now_ns: gust_client::now_ns(), ..Default::default() };
    let mut paths: HashMap<String, Vec<String>> = HashMap::new();
    let _ = c.find("/", &q, |p, rec| {
        let id = format!("{:032x}", rec.file_id);
        if found.iter().any(|f| f.file_id == id) {
            paths.entry(id).or_default().push(p.to_string());
        }
    });
    for f in found.iter_mut() {
        f.paths = paths.get(&f.file_id).cloned().unwrap_or_default();
    }
}

fn print_report(r: &Report, chunk_bytes: u64) {
    println!(
        "scrubbed {} daemon(s): {} file(s), {} verified in {:.1} s; {} corrupt range(s), {} repaired",
        r.daemons,
        r.files,
        crate::human_size(r.bytes),
        r.seconds,
        r.corrupt.len(),
        r.corrupt.iter().filter(|f| f.repaired).count()
    );
    for f in &r.corrupt {
        let name = if f.paths.is_empty() { format!("file {}", f.file_id) } else { f.paths.join(", ") };
        println!(
            "  daemon {}: {name} chunk {} (chunk size {}), bytes {}-{}: {}",
            f.daemon,
            f.chunk,
            crate::human_size(chunk_bytes),
            f.offset,
            f.offset + f.len,
            if f.repaired { "repaired from a copy".to_string() } else { f.error.clone().unwrap_or_default() }
        );
    }
    for (d, why) in &r.skipped {
        println!("  daemon {d}: not scrubbed: {why}");
    }
}

/// A one-line progress display on a terminal's stderr (nothing otherwise).
struct Bar {
    on: bool,
}

impl Bar {
    fn new(wanted: bool) -> Bar {
        Bar { on: wanted && std::io::stderr().is_terminal() }
    }

    fn show(&self, daemon: u32, files: u64, bytes: u64, spent: Duration) {
        if self.on {
            let rate = bytes as f64 / spent.as_secs_f64().max(0.001);
            eprint!(
                "\r\x1b[Kscrub: daemon {daemon}, {files} files, {} verified, {}/s",
                crate::human_size(bytes),
                crate::human_size(rate as u64)
            );
        }
    }

    fn finish(&self) {
        if self.on {
            eprint!("\r\x1b[K");
        }
    }
}
