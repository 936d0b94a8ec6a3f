//! `gust scrub`: reads every chunk of an instance and verifies it against its
//! checksums (docs/DESIGN.md, "Checksums"), at a bounded rate so that the job
//! beside it keeps its bandwidth; with replicas, rewrites what it finds corrupt
//! from another copy. Prints what it verified and every corrupt range (the file id,
//! the chunk, the bytes, and whether it was repaired), as JSON with `--json`.
//! Exits 1 if anything corrupt is left.
//!
//! `--stripes` (erasure-coded instances): then every stripe's parity is checked
//! against its data (gust-client's ec/check.rs: the write hole a writer killed
//! between its two rounds leaves, which no checksum shows) and rewritten where it
//! differs; at the same rate, after the checksums.
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
    /// Erasure-coded instances: also check every stripe's parity against its data
    /// (reads every cell once more) and rewrite parity that differs.
    #[arg(long)]
    stripes: bool,
}

/// A stripe whose parity did not hold what its data encodes to.
#[derive(Serialize)]
struct StaleStripe {
    file_id: String,
    paths: Vec<String>,
    stripe: u64,
    /// The daemons of the parity cells that differed.
    daemons: Vec<u32>,
    repaired: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What `--stripes` found.
#[derive(Serialize, Default)]
struct StripeReport {
    checked: u64,
    bytes: u64,
    stale: Vec<StaleStripe>,
    /// Stripes with a cell that could not be read (its daemon down).
    unreadable: u64,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    stripes: Option<StripeReport>,
}

pub fn run(a: ScrubArgs) -> Result<(), String> {
    let hp = a.inst.hosts_path();
    let c =
        Client::open_instance(&hp, ClientOptions::default()).map_err(|e| format!("{e} (is an instance running?)"))?;
    let rate = a.rate_mib.max(1) << 20;
    let page = rate.min(64 << 20);
    let repair = !a.no_repair && c.replicas() > 1;
    if a.stripes && c.erasure_code().is_none() {
        return Err("--stripes: this instance keeps copies, not erasure codes (gust start --ec)".into());
    }
    let started = Instant::now();
    let mut r = Report {
        daemons: c.daemon_count(),
        files: 0,
        bytes: 0,
        seconds: 0.0,
        corrupt: Vec::new(),
        skipped: Vec::new(),
        stripes: None,
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
            bar.show(|| format!("daemon {d}, {} files", r.files), r.bytes, started.elapsed());
            for range in p.corrupt {
                r.corrupt.push(found(&c, d, &range, repair));
            }
            match p.next {
                Some(n) => after = Some(n),
                None => break,
            }
            hold_rate(r.bytes, rate, started);
        }
    }
    if a.stripes {
        r.stripes = Some(check_stripes(&c, &bar, rate, !a.no_repair));
    }
    bar.finish();
    name_files(&c, &mut r.corrupt);
    r.seconds = started.elapsed().as_secs_f64();
    let stale_left = r.stripes.as_ref().map_or(0, |s| s.stale.iter().filter(|f| !f.repaired).count());
    let left = r.corrupt.iter().filter(|f| !f.repaired).count() + stale_left;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
    } else {
        print_report(&r, c.chunk_size_bytes());
    }
    if left > 0 || !r.skipped.is_empty() {
        return Err(format!(
            "{left} corrupt range(s) or stale stripe(s) left{}",
            if r.skipped.is_empty() { String::new() } else { format!(", {} daemon(s) not scrubbed", r.skipped.len()) }
        ));
    }
    Ok(())
}

/// Holds the rate: `bytes` read since `started` take `bytes / rate` seconds at
/// least.
fn hold_rate(bytes: u64, rate: u64, started: Instant) {
    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
    if let Some(wait) = due.checked_sub(started.elapsed()) {
        std::thread::sleep(wait);
    }
}

/// Every stripe of every file, its parity checked against its data at `rate`
/// bytes a second, rewritten where it differs if `repair`.
fn check_stripes(c: &Client, bar: &Bar, rate: u64, repair: bool) -> StripeReport {
    let mut files: HashMap<u128, (Vec<String>, u64)> = HashMap::new();
    let q = FindQuery { kind: Some(Kind::File), now_ns: gust_client::now_ns(), ..Default::default() };
    let _ = c.find("/", &q, |p, rec| {
        let f = files.entry(rec.file_id).or_insert_with(|| (Vec::new(), rec.size));
        f.0.push(p.to_string());
    });
    let mut r = StripeReport::default();
    let started = Instant::now();
    for (id, (paths, size)) in files {
        for stripe in 0..c.stripe_count(size) {
            match c.stale_parity(id, size, stripe) {
                Ok((stale, bytes)) => {
                    r.checked += 1;
                    r.bytes += bytes;
                    if !stale.is_empty() {
                        r.stale.push(stale_stripe(c, id, &paths, size, stripe, &stale, repair));
                    }
                }
                Err(_) => r.unreadable += 1,
            }
            bar.show(|| format!("{} stripes checked against their parity", r.checked), r.bytes, started.elapsed());
            hold_rate(r.bytes, rate, started);
        }
    }
    r
}

/// A stripe found with stale parity cells (`stale`: cell, daemon), rewritten
/// from its data if `repair`.
fn stale_stripe(
    c: &Client,
    id: u128,
    paths: &[String],
    size: u64,
    stripe: u64,
    stale: &[(usize, u32)],
    repair: bool,
) -> StaleStripe {
    let mut f = StaleStripe {
        file_id: format!("{id:032x}"),
        paths: paths.to_vec(),
        stripe,
        daemons: stale.iter().map(|(_, d)| *d).collect(),
        repaired: false,
        error: None,
    };
    let cells: Vec<usize> = stale.iter().map(|(j, _)| *j).collect();
    match repair {
        true => match c.rewrite_parity(id, size, stripe, &cells) {
            Ok(()) => f.repaired = true,
            Err(e) => f.error = Some(c.last_transport_error().unwrap_or_else(|| e.to_string())),
        },
        false => f.error = Some("not repaired (--no-repair)".into()),
    }
    f
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
    if let Some(s) = &r.stripes {
        println!(
            "stripes: {} checked ({} read), {} with parity that did not match their data, {} repaired; {} \
             unreadable (a daemon down)",
            s.checked,
            crate::human_size(s.bytes),
            s.stale.len(),
            s.stale.iter().filter(|f| f.repaired).count(),
            s.unreadable
        );
        for f in &s.stale {
            let name = if f.paths.is_empty() { format!("file {}", f.file_id) } else { f.paths.join(", ") };
            let daemons: Vec<String> = f.daemons.iter().map(|d| d.to_string()).collect();
            println!(
                "  {name} stripe {}: parity on daemon(s) {}: {}",
                f.stripe,
                daemons.join(", "),
                if f.repaired { "rewritten from the data".to_string() } else { f.error.clone().unwrap_or_default() }
            );
        }
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

    /// "scrub: `what`, N read, N/s" over the line before.
    fn show(&self, what: impl FnOnce() -> String, bytes: u64, spent: Duration) {
        if self.on {
            let rate = bytes as f64 / spent.as_secs_f64().max(0.001);
            eprint!(
                "\r\x1b[Kscrub: {}, {} read, {}/s",
                what(),
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
