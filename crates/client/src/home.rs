//! Where this process's new files live with `--placement local` (gust-placement's
//! `local`): their *home*, a daemon of this node, named in each new file id.
//!
//! This node's daemons are those whose network address is one of this node's
//! interface addresses (loopback included): what a node is for the network, which
//! also holds for test hosts in network namespaces that share a host name. With
//! several (`gust start --local N`), a process picks one by its pid, so the
//! processes of a node spread over them. `GUST_PLACEMENT=wide` makes this process's
//! files wide-striped (shared inputs); files staged in are always.
//!
//! The home is process-wide (a process has one instance, in practice): an instance
//! without local placement never reads it from an id, and a home past an
//! instance's daemon count is read as none.

use gust_hosts::DaemonEntry;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

/// No home: wide striping.
const NONE: u32 = u32::MAX;
static HOME: AtomicU32 = AtomicU32::new(NONE);

/// The home new file ids name (none: wide-striped).
pub(crate) fn home() -> Option<u32> {
    let h = HOME.load(Ordering::Relaxed);
    (h != NONE).then_some(h)
}

/// Picks this process's home among `daemons` for an instance with local placement.
pub(crate) fn choose(daemons: &[DaemonEntry]) {
    if std::env::var("GUST_PLACEMENT").is_ok_and(|v| v == "wide") {
        HOME.store(NONE, Ordering::Relaxed);
        return;
    }
    let mine: Vec<IpAddr> = gust_hosts::interfaces().into_iter().map(|(_, a)| a).collect();
    let here: Vec<u32> = daemons
        .iter()
        .filter(|d| match d.network() {
            Some(gust_transport::Endpoint::Tcp(a)) => mine.contains(&a.ip()),
            _ => false,
        })
        .map(|d| d.id)
        .collect();
    let home = if here.is_empty() { NONE } else { here[std::process::id() as usize % here.len()] };
    HOME.store(home, Ordering::Relaxed);
}
