//! An idle fabric endpoint costs (almost) no CPU. In a test binary of its own: it
//! measures this process's fabric threads, and other tests' traffic would count.

use gust_transport::ofi::{unavailable, OfiAddr, OfiListener};
use std::time::{Duration, Instant};

/// The CPU time of this process's fabric threads (their names start "fabric-").
fn fabric_cpu() -> Duration {
    let mut ticks = 0u64;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        if comm.starts_with("fabric-") {
            let f: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
            ticks += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        }
    }
    // SAFETY: sysconf has no preconditions.
    Duration::from_secs_f64(ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// An endpoint with nothing to do waits on its queue (tcp) or polls it at most
/// every 250 µs (shm, whose waits spin): its background thread takes less than a
/// tenth of a core, where waiting on shm's queue took all of one.
#[test]
fn an_idle_endpoint_takes_no_cpu() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    for (provider, address) in [("tcp;ofi_rxm", "127.0.0.1"), ("shm", "-")] {
        let _l = OfiListener::bind(&OfiAddr { provider: provider.into(), address: address.into() }).unwrap();
        let (t0, c0) = (Instant::now(), fabric_cpu());
        std::thread::sleep(Duration::from_secs(1));
        let (used, wall) = (fabric_cpu() - c0, t0.elapsed());
        assert!(used < wall / 10, "{provider}: {used:?} of CPU in {wall:?} idle");
    }
}
