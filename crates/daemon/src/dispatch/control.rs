//! Requests that run the daemon rather than the namespace: liveness, leases and
//! fences between daemons, shutdown, capacity, counters, the event log, the read
//! log, tracing, and how the daemon shares its node (qos.rs).

use super::*;

/// Serves a request of this class (any other is `misrouted`).
pub(super) fn serve(state: &State, req: Request) -> Reply {
    let md = &state.metadata;
    match req {
        Request::Ping => Ok(Response::Ok),
        Request::Heartbeat { from } => {
            if from == state.daemon_id {
                return Err(libc::EINVAL);
            }
            state.fences.heartbeat(from).map(|fenced| Response::Lease { fenced })
        }
        Request::Fence { daemon } => {
            if daemon == state.daemon_id || daemon as usize >= gust_hosts::DAEMONS_MAX {
                return Err(libc::EINVAL);
            }
            let left = state.fences.fence(md, daemon, crate::lease::LEASE)?;
            Ok(Response::Fenced { lease_left_ms: left.as_millis() as u64 })
        }
        Request::Unfence { daemon } => {
            if daemon as usize >= gust_hosts::DAEMONS_MAX {
                return Err(libc::EINVAL);
            }
            state.fences.unfence(md, daemon).map(|_| Response::Ok)
        }
        Request::Shutdown { keep } => shutdown(state, keep),
        Request::StatFs => {
            let (total_bytes, free_bytes, avail_bytes) = state.capacity()?;
            Ok(Response::StatFs { total_bytes, free_bytes, avail_bytes, files: md.estimate_records() })
        }
        Request::Stats => Ok(Response::Stats(state.metrics.snapshot(state.daemon_id))),
        Request::Metrics => Ok(Response::Metrics(crate::metrics::collect(state))),
        Request::Events { after_seq, prefix, max_entries } => {
            if prefix.len() > PATH_BYTES_MAX {
                return Err(libc::ENAMETOOLONG);
            }
            let max = max_entries.clamp(1, EVENTS_PAGE_ENTRIES_MAX) as usize;
            let (events, last_seq, first_seq, next_seq) = state.events.page(after_seq, &prefix, max);
            Ok(Response::Events { events, last_seq, first_seq, next_seq })
        }
        Request::ReadLog { after, max_entries } => {
            let max = max_entries.clamp(1, READ_LOG_PAGE_ENTRIES_MAX) as usize;
            let (entries, done, dropped) = state.read_log.page(after, max, SCAN_PAGE_BYTES_MAX);
            Ok(Response::ReadLog { entries, done, dropped })
        }
        Request::Trace { on, names, dir } => {
            crate::trace::control(state, on, &names, dir.as_deref()).map(|_| Response::Ok)
        }
        Request::Tune { cpus, nice, max_bandwidth } => tune(state, crate::qos::Limits { cpus, nice, max_bandwidth }),
        other => misrouted(&other),
    }
}

/// `shutdown`: stops the daemon once this reply has left; its root directory goes
/// unless `keep`.
fn shutdown(state: &State, keep: bool) -> Reply {
    state.wipe_on_exit.store(!keep, Ordering::SeqCst);
    if keep {
        // Tells a node agent that the data stays on purpose (gust-launch).
        let _ = std::fs::write(state.rootdir.join(gust_hosts::KEPT_MARKER), b"");
    }
    // The main thread waits for SIGTERM (`wait_for_termination`); send it a
    // moment later so this reply leaves first.
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(50));
        // SAFETY: signalling our own process.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    });
    Ok(Response::Ok)
}

/// `tune`: how the daemon shares its node from now on (qos.rs); answers the
/// limits applied.
fn tune(state: &State, limits: crate::qos::Limits) -> Reply {
    let a = state.qos.apply(limits).inspect_err(|&e| {
        tracing::warn!("daemon {}: tune refused: {}", state.daemon_id, state.qos.explain(limits, e))
    })?;
    tracing::info!(
        "daemon {}: tuned: cores {}, niceness {}, bandwidth {}",
        state.daemon_id,
        a.cpus,
        a.nice,
        crate::qos::bandwidth_text(a.max_bandwidth)
    );
    Ok(Response::Tuned { cpus: a.cpus, nice: a.nice, max_bandwidth: a.max_bandwidth })
}
