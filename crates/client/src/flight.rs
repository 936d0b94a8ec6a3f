//! One flush of the deferred queues at a time (create_batch.rs, remove_batch.rs).
//!
//! A flush takes its queue, then sends it. A thread that flushes meanwhile finds
//! the queue empty; without this it went on at once, and read the daemons' state
//! from before the batch it needed: a file another thread of the process had
//! written and closed read back empty or short (a queued create over an existing
//! file truncates it, then writes), an unlinked one was still there. The same held
//! for a claim's recall: it answered the daemon, letting another process in, while
//! a batch under the claim was still on its way. So a flush is a flight: the
//! thread that takes a queue flies until its requests are answered, and any other
//! thread's flush waits for it to land first. The flying thread's own nested
//! flushes (an open inside a create sent over an existing file flushes again) go
//! on without waiting for themselves.
//!
//! After fork, the parent's flight is the parent's: a child never waits for it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

thread_local! {
    /// Whether this thread flies the flight now.
    static FLYING: Cell<bool> = const { Cell::new(false) };
}

#[derive(Default)]
pub(crate) struct Flight {
    /// The fork generation of the thread flying, if one is.
    state: Mutex<Option<u64>>,
    landed: Condvar,
    /// `state.is_some()`, read without the lock on every path operation.
    up: AtomicBool,
}

/// A flight under way; it lands when dropped.
pub(crate) struct Flying<'a>(Option<&'a Flight>);

impl Flight {
    /// Whether a flush must look further than its queue: another thread's flight
    /// may be under way.
    fn maybe_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// The start of a flush of the queue whose length `queued` counts: None when
    /// it holds nothing, once any other thread's flight has landed (what that one
    /// took is applied by then); otherwise this thread's flight, which takes and
    /// sends the queue.
    pub(crate) fn take_off_for(&self, queued: &AtomicUsize) -> Option<Flying<'_>> {
        if queued.load(Ordering::Acquire) == 0 && !self.maybe_up() {
            return None;
        }
        let flying = self.take_off();
        (queued.load(Ordering::Acquire) != 0).then_some(flying)
    }

    /// Waits for another thread's flight to land, then flies this one (its queue
    /// is taken after this returns). Nested in this thread's own flight: flies at
    /// once, inside it.
    pub(crate) fn take_off(&self) -> Flying<'_> {
        if FLYING.with(Cell::get) {
            return Flying(None);
        }
        let generation = crate::rpc::fork_generation();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while *s == Some(generation) {
            s = self.landed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        *s = Some(generation);
        self.up.store(true, Ordering::Release);
        FLYING.with(|f| f.set(true));
        Flying(Some(self))
    }
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        let Some(f) = self.0 else { return };
        FLYING.with(|x| x.set(false));
        let mut s = f.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = None;
        f.up.store(false, Ordering::Release);
        drop(s);
        f.landed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{mpsc, Arc};

    /// A flush that finds another in flight waits for it to land; the flying
    /// thread's nested flush does not wait for itself.
    #[test]
    fn a_second_flush_waits_for_the_first_to_land() {
        let f = Arc::new(Flight::default());
        let landed = Arc::new(AtomicUsize::new(0));
        let first = f.take_off();
        assert!(f.maybe_up());
        drop(f.take_off()); // nested: at once
        assert!(f.maybe_up(), "a nested flight does not land the outer one");
        let (tx, rx) = mpsc::channel();
        let (f2, landed2) = (f.clone(), landed.clone());
        let t = std::thread::spawn(move || {
            tx.send(()).unwrap();
            let _second = f2.take_off();
            // Only after the first landed.
            landed2.load(Ordering::SeqCst)
        });
        rx.recv().unwrap();
        // Room for the other thread to get past take_off if it did not wait.
        for _ in 0..10_000 {
            std::thread::yield_now();
        }
        landed.store(1, Ordering::SeqCst);
        drop(first);
        assert_eq!(t.join().unwrap(), 1);
        assert!(!f.maybe_up());
    }
}
