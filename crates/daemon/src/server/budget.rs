//! The global bound on memory held for requests between turns: frames that arrived
//! in part, and replies a slow peer has not taken yet.
//!
//! A frame may be 33 MiB (1 MiB body, 32 MiB bulk), so without a bound a few hundred
//! peers sending large writes slowly could pin gigabytes. A connection whose next
//! frame does not fit waits (it is not read from; TCP pushes back on the peer) until
//! others finish; nothing is refused and nothing aborts. Replies already computed are
//! charged without waiting (they cannot be taken back), but a connection with an
//! unsent reply reads no further requests, so each holds at most one.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Default bound (`gust start --request-memory`): room for 15 maximum-size frames
/// at once, far beyond what a node's network delivers in the time one takes to serve.
pub const REQUEST_MEMORY_BYTES_DEFAULT: usize = 512 << 20;

pub(crate) struct Budget {
    max_bytes: usize,
    used_bytes: AtomicUsize,
}

impl Budget {
    pub fn new(max_bytes: usize) -> Budget {
        Budget { max_bytes, used_bytes: AtomicUsize::new(0) }
    }

    /// Takes `n` bytes if they fit under the bound.
    pub fn try_charge(&self, n: usize) -> bool {
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| u.checked_add(n).filter(|t| *t <= self.max_bytes))
            .is_ok()
    }

    /// Takes `n` bytes whatever the bound (a reply already computed).
    pub fn charge(&self, n: usize) {
        self.used_bytes.fetch_add(n, Ordering::AcqRel);
    }

    pub fn release(&self, n: usize) {
        self.used_bytes.fetch_sub(n, Ordering::AcqRel);
    }

    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used_bytes.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_wait_at_the_bound_and_replies_do_not() {
        let b = Budget::new(100);
        assert!(b.try_charge(60));
        assert!(!b.try_charge(41), "past the bound");
        assert!(b.try_charge(40));
        b.charge(10);
        assert_eq!(b.used(), 110);
        assert!(!b.try_charge(1));
        b.release(60);
        assert!(b.try_charge(50));
        assert_eq!(b.used(), 100);
    }
}
