//! Rate limits for log lines that peers can provoke.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Log lines about refused peers (or failed accepts) that may come in a burst;
/// past it, one line per second (see `LogBudget`).
pub const LOG_LINES_BURST: u64 = 10;

/// Bounds the log lines of one kind of peer-driven event: a port scan or a peer
/// retrying in a loop must not grow the daemon's log without bound. Allows a burst
/// of `LOG_LINES_BURST` lines, then one per second; the next line logged after
/// some were dropped says how many. `gust status` (frames_refused) counts them all.
pub struct LogBudget {
    /// (lines that may be logged now, when the last one was credited, lines dropped).
    inner: Mutex<(u64, Instant, u64)>,
}

impl LogBudget {
    pub fn new() -> Self {
        LogBudget { inner: Mutex::new((LOG_LINES_BURST, Instant::now(), 0)) }
    }

    /// Some(lines dropped since the last logged one) if this one may be logged.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, credited, dropped) = &mut *g;
        let secs = now.saturating_duration_since(*credited).as_secs();
        if secs > 0 {
            *tokens = (*tokens + secs).min(LOG_LINES_BURST);
            *credited += Duration::from_secs(secs);
        }
        if *tokens == 0 {
            *dropped += 1;
            return None;
        }
        *tokens -= 1;
        Some(std::mem::take(dropped))
    }
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_budget_bursts_then_one_line_a_second() {
        let b = LogBudget::new();
        let t0 = b.inner.lock().unwrap_or_else(|e| e.into_inner()).1;
        for _ in 0..LOG_LINES_BURST {
            assert_eq!(b.admit_at(t0), Some(0));
        }
        for _ in 0..1000 {
            assert_eq!(b.admit_at(t0 + Duration::from_millis(999)), None);
        }
        // One line a second, saying how many were dropped before it.
        assert_eq!(b.admit_at(t0 + Duration::from_millis(1500)), Some(1000));
        assert_eq!(b.admit_at(t0 + Duration::from_millis(1600)), None);
        assert_eq!(b.admit_at(t0 + Duration::from_millis(2000)), Some(1));
        // A quiet minute refills the burst, no more.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..LOG_LINES_BURST {
            assert_eq!(b.admit_at(later), Some(0));
        }
        assert_eq!(b.admit_at(later), None);
    }
}
