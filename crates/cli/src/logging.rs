//! Logs of whatever the `gust` binary runs (daemon, mount, stage, bench): the only
//! place a tracing subscriber is installed. The daemon and the client core only
//! emit events and spans; the LD_PRELOAD library never installs a subscriber, since
//! a log line written there would go through the `write` it interposes (it keeps
//! its own raw one-time warnings).
//!
//! Lines go to stderr (`gust start` sends each daemon's stderr to its log file) with
//! RFC 3339 UTC times, the level, the spans (`conn{daemon peer}`, and with debug
//! `req{op id}`) and the module. `GUST_LOG` filters, default `info`, in the
//! `tracing-subscriber` env-filter syntax: `GUST_LOG=debug`,
//! `GUST_LOG=gust_daemon=debug,fuser=warn`. Records of the `log` crate, which the
//! FUSE library uses, pass through the same filter.
//!
//! Not for: metrics or tracepoints (they will get their own module).

use tracing_subscriber::EnvFilter;

/// Name of the environment variable holding the filter.
const FILTER_VAR: &str = "GUST_LOG";
const FILTER_DEFAULT: &str = "info";

/// Installs the subscriber for this process. Call once, first thing in `main`.
pub fn init() {
    let filter = match std::env::var(FILTER_VAR) {
        Ok(v) => EnvFilter::try_new(&v).unwrap_or_else(|e| {
            eprintln!("gust: {FILTER_VAR}={v:?} is not a valid log filter ({e}); using {FILTER_DEFAULT}");
            EnvFilter::new(FILTER_DEFAULT)
        }),
        Err(_) => EnvFilter::new(FILTER_DEFAULT),
    };
    // The default timer prints RFC 3339 UTC with microseconds. No colours: these
    // lines mostly end up in files.
    let r = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();
    if let Err(e) = r {
        eprintln!("gust: cannot install the logger: {e}");
    }
}
