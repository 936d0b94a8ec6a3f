//! `gust probe`: this node's storage, memory, cores and network as JSON, and into
//! an SQLite file with --db (gust-probe does the work).

use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct ProbeArgs {
    /// Also add the result to this SQLite file (created if missing; rows of this host
    /// replace its earlier ones), so that a site can query many nodes with SQL.
    #[arg(long)]
    db: Option<PathBuf>,
    /// MiB to write on each writable storage to measure its bandwidth (at most 1024,
    /// a tenth of its free space and one second); 0 skips the measurement.
    #[arg(long, default_value_t = 64)]
    bench_mib: u64,
    /// Print which storage `gust start` would choose for this much data, and why.
    #[arg(long, value_parser = crate::parse_size)]
    choose: Option<u64>,
}

pub fn run(a: ProbeArgs) -> Result<(), String> {
    let node = gust_probe::probe(a.bench_mib.min(1024) << 20);
    if let Some(db) = &a.db {
        gust_probe::store(db, &node)?;
    }
    if let Some(need) = a.choose {
        let c = gust_probe::choose_storage(&node, need)?;
        eprintln!("gust: would choose {}", c.why);
    }
    let text = serde_json::to_string_pretty(&node).map_err(|e| e.to_string())?;
    use std::io::Write;
    // A closed pipe (`gust probe | head`) is not an error worth a message.
    let _ = writeln!(std::io::stdout().lock(), "{text}");
    Ok(())
}
