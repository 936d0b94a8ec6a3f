//! The clock holders' leases run on: the time this daemon was able to serve. A
//! daemon frozen past a lease (SIGSTOP, a VM pause, a debugger) must not find every
//! holder's lease run out when it resumes: its holders could not reach it
//! meanwhile, and one that deferred creates under a claim would lose them to the
//! first request another client had queued at the frozen daemon (the claim dropped
//! without a recall, the other client served before the holder's flush). The
//! clients' side runs on real time, so a client stops using a frozen daemon's
//! grants once its lease is out: a slower daemon clock only errs on the safe side
//! (a silent holder is waited for a little longer).
//!
//! Each reading adds the real time since the last one, at most `STEP_MAX_MS`; a
//! ticker reads it every `TICK`, so only a gap in which no thread of the process
//! ran is cut short.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How often the ticker reads the clock.
const TICK: Duration = Duration::from_millis(50);
/// Longest step one reading adds: a gap longer than this with a ticker running
/// every `TICK` is time the process was frozen.
const STEP_MAX_MS: u64 = 500;

pub(crate) struct ServiceClock {
    epoch: Instant,
    /// Real milliseconds since `epoch` at the last reading.
    real_ms: AtomicU64,
    /// Service milliseconds at the last reading.
    service_ms: AtomicU64,
}

impl ServiceClock {
    pub(crate) fn new() -> ServiceClock {
        ServiceClock { epoch: Instant::now(), real_ms: AtomicU64::new(0), service_ms: AtomicU64::new(0) }
    }

    /// Milliseconds of service since the clock was made (never decreasing).
    pub(crate) fn now_ms(&self) -> u64 {
        let real = self.epoch.elapsed().as_millis() as u64;
        let mut last = self.real_ms.load(Ordering::Acquire);
        loop {
            if real <= last {
                return self.service_ms.load(Ordering::Acquire);
            }
            match self.real_ms.compare_exchange_weak(last, real, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let step = (real - last).min(STEP_MAX_MS);
                    return self.service_ms.fetch_add(step, Ordering::AcqRel) + step;
                }
                Err(now) => last = now,
            }
        }
    }

    /// Reads `clock` every `TICK` on a thread of its own while `owner` lives.
    pub(crate) fn spawn_ticker<T: Send + Sync + 'static>(
        owner: Weak<T>,
        clock: impl Fn(&T) -> &ServiceClock + Send + 'static,
    ) {
        let spawned = std::thread::Builder::new().name("gust-lease-clock".into()).spawn(move || {
            while let Some(o) = owner.upgrade() {
                clock(&o).now_ms();
                drop(o);
                std::thread::sleep(TICK);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the lease clock's ticker (idle time then counts short too): {e}");
        }
    }

    #[cfg(test)]
    fn shift_epoch_back(&mut self, by: Duration) {
        self.epoch -= by;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_gap_counts_at_most_one_step_and_time_never_goes_back() {
        let mut c = ServiceClock::new();
        let a = c.now_ms();
        // As if the process had been frozen for 10 s since the last reading.
        c.shift_epoch_back(Duration::from_secs(10));
        let b = c.now_ms();
        assert!(b >= a && b - a <= STEP_MAX_MS, "a 10 s gap counted {} ms", b - a);
        assert!(c.now_ms() >= b);
    }

    /// Idle time counts in full while the ticker runs (without it, a 3 s idle
    /// stretch would count as one step, 0.5 s); never more than real time.
    #[test]
    fn idle_time_counts_while_the_ticker_runs() {
        let c = Arc::new(ServiceClock::new());
        ServiceClock::spawn_ticker(Arc::downgrade(&c), |c: &ServiceClock| c);
        let (t0, s0) = (Instant::now(), c.now_ms());
        std::thread::sleep(Duration::from_secs(3));
        let (counted, real) = (c.now_ms() - s0, t0.elapsed().as_millis() as u64);
        assert!(counted >= 1500 && counted <= real + 1, "{counted} ms counted of {real} ms idle");
    }
}
