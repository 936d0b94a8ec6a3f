//! Sending again what a process deferred (create_batch.rs, remove_batch.rs) when
//! its first send did not reach a daemon that serves it.
//!
//! A deferred create or unlink has returned to the application: if its batch fails,
//! nothing can report it, and the change is lost as far as every process can tell
//! (the process's own next stat sees the unlink undone). Two failures are not final:
//! * `MOVED`: the layout changed since the batch was grouped (`gust expand`,
//!   `gust shrink`; a move recalls claims first, so this meets only a queue whose
//!   claims went with a daemon killed before the move). The daemon applied nothing;
//!   the paths go again, grouped under the new layout.
//! * EIO: the daemon could not be reached (killed and not back yet, or hung). It is
//!   sent again, with pauses, until the RPC timeout has passed: a daemon started
//!   again on its root directory takes it within its grace, during which it holds
//!   every other process's changes back (docs/SEMANTICS.md, "Claims").
//!
//! A batch sent again may have been applied the first time (the daemon died before
//! its answer): the senders take the answer that only a second application gives
//! (EEXIST for a create that is there as this process made it, ENOENT for a remove)
//! as done.
//!
//! Not for: the queues (create_batch.rs, remove_batch.rs), requests not deferred
//! (the application sees their errors).

use crate::{Client, Errno};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Rounds in which batches go again under a new layout before their paths fail.
const REROUTES_MAX: u32 = 8;
/// First and longest pause before a batch goes again to a daemon not reached.
const PAUSE_FIRST: Duration = Duration::from_millis(20);
const PAUSE_MAX: Duration = Duration::from_millis(500);

/// The rounds of one flush.
pub(crate) struct Resend {
    started: Instant,
    reroutes: u32,
    /// This round's answer to `MOVED` (the layout is read again once a round,
    /// however many daemons answered it).
    rerouted: Option<bool>,
    pause: Duration,
    /// Some batch went again: answers may tell of the first send's effect.
    pub(crate) again: bool,
}

impl Resend {
    pub(crate) fn new() -> Resend {
        Resend { started: Instant::now(), reroutes: 0, rerouted: None, pause: PAUSE_FIRST, again: false }
    }

    /// Whether a batch whose call failed with `e` goes again (a `MOVED` refreshes
    /// the layout it is grouped by).
    pub(crate) fn goes_again(&mut self, c: &Client, e: Errno) -> bool {
        match e.0 {
            gust_proto::errno::MOVED => *self.rerouted.get_or_insert_with(|| {
                self.reroutes += 1;
                self.reroutes <= REROUTES_MAX && c.refresh_layout().is_ok()
            }),
            libc::EIO => self.started.elapsed() < c.transport.timeout(),
            _ => false,
        }
    }

    /// Before the next round.
    pub(crate) fn pause(&mut self, c: &Client) {
        c.creates.resends.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(PAUSE_MAX);
        self.again = true;
        self.rerouted = None;
    }
}

/// Sends `items` in rounds (`round` sends them and returns those that go again)
/// until none is left, pausing between rounds; its requests are not those of the
/// operation that sends the queue (`layout::apart`).
pub(crate) fn send_in_rounds<T>(c: &Client, mut items: Vec<T>, mut round: impl FnMut(Vec<T>, &mut Resend) -> Vec<T>) {
    let mut resend = Resend::new();
    crate::layout::apart(|| loop {
        items = round(items, &mut resend);
        if items.is_empty() {
            return;
        }
        resend.pause(c);
    })
}

impl Client {
    /// Rounds in which this process sent a deferred batch again (tests, `gust bench`).
    pub fn deferred_resends(&self) -> usize {
        self.creates.resends.load(Ordering::Relaxed)
    }
}
