//! Who reads a fabric endpoint's completion queue, and when.
//!
//! With a thread whose only job is to read the queue, every message costs two
//! wake-ups: that thread's, then the one of the thread waiting for the message
//! (on this machine each is tens of microseconds; a socket's reader is woken once).
//! So the threads that wait read the queue themselves, one at a time (the leader,
//! as in a leader/followers pool): a thread waiting on its connection polls the
//! queue if no one else does, hands what it reads to whichever connections it is
//! for, and gives the turn to the next waiting thread when its own wait is over.
//! A thread that finds another polling waits on its connection for a message or
//! for its turn. A background thread polls only when no one has for 10 ms
//! (so that CONNECTs, closes and sends' completions are read while nobody waits),
//! and a waiting thread that finds it polling wakes it (fi_cq_signal) to take over.

use super::conn::{lock, past, timed_out, wait_until, Conn, Inbox};
use super::fabric::Fabric;
use super::ffi::Event;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest one poll waits on the queue: a leader whose connection's deadline
/// is far looks up this often.
const POLL_WAIT: Duration = Duration::from_millis(100);
/// How long no thread must have polled before the background thread does (it
/// looks this often while others poll: 100 wake-ups a second, where waking it at
/// every hand-over would cost one per message).
const BACKGROUND_AFTER: Duration = Duration::from_millis(10);
/// Longest pause between polls of a queue that cannot be waited on (shm): the
/// most a message waits, against about 4,000 wake-ups a second (1-2% of a core)
/// for an endpoint no one uses.
const POLL_PAUSE_MAX: Duration = Duration::from_micros(250);

struct Lead {
    polling: bool,
    /// The poller is the background thread: a waiting thread wakes it.
    background: bool,
    /// Connections whose threads wait for a turn (stale entries are skipped).
    queue: VecDeque<Arc<Conn>>,
    last_release: Instant,
}

impl Lead {
    fn waiting(&self) -> bool {
        self.queue.iter().any(|c| c.wants_turn.load(Ordering::Acquire))
    }
}

/// An endpoint's turn-taking.
pub(super) struct Progress {
    lead: Mutex<Lead>,
}

impl Progress {
    pub(super) fn new() -> Progress {
        Progress {
            lead: Mutex::new(Lead {
                polling: false,
                background: false,
                queue: VecDeque::new(),
                last_release: Instant::now(),
            }),
        }
    }
}

impl Fabric {
    /// Waits until `ready` holds for `c`'s inbox (checked under its lock, which the
    /// result holds), or `deadline` passes, polling the queue when it is this
    /// thread's turn.
    pub(super) fn wait_for<'a>(
        &self,
        c: &'a Arc<Conn>,
        deadline: Option<Instant>,
        ready: impl Fn(&Inbox) -> bool,
    ) -> io::Result<MutexGuard<'a, Inbox>> {
        loop {
            let g = lock(&c.inbox);
            if ready(&g) {
                return Ok(g);
            }
            if past(deadline) {
                return Err(timed_out());
            }
            drop(g);
            if self.try_lead(false) {
                self.poll_as_leader(deadline);
                continue;
            }
            let g = lock(&c.inbox);
            if ready(&g) {
                return Ok(g);
            }
            if !self.enqueue(c) {
                continue; // the poller let go meanwhile: take the turn
            }
            let turn = Instant::now() + POLL_WAIT;
            let until = deadline.map_or(turn, |d| d.min(turn));
            drop(wait_until(&c.changed, g, Some(until)));
            c.wants_turn.store(false, Ordering::Release);
        }
    }

    pub(super) fn try_lead(&self, background: bool) -> bool {
        let mut l = lock(&self.progress.lead);
        if l.polling {
            return false;
        }
        l.polling = true;
        l.background = background;
        true
    }

    /// Queues `c` for a turn while another thread polls (false: no one does).
    fn enqueue(&self, c: &Arc<Conn>) -> bool {
        let mut l = lock(&self.progress.lead);
        if !l.polling {
            return false;
        }
        if c.want_turn() {
            l.queue.push_back(c.clone());
        }
        if l.background {
            self.ep.signal();
        }
        true
    }

    /// Polls once (up to `deadline`, at most POLL_WAIT), handles what came, and
    /// gives the turn on.
    pub(super) fn poll_as_leader(&self, deadline: Option<Instant>) {
        let wait = deadline.map_or(POLL_WAIT, |d| d.saturating_duration_since(Instant::now()).min(POLL_WAIT));
        let mut ev = [Event::default(); 16];
        let n = if self.waits { self.poll_waiting(&mut ev, wait) } else { self.poll_pausing(&mut ev, wait) };
        for e in &ev[..n] {
            self.complete(e);
        }
        self.flush_outbox();
        self.release();
    }

    fn poll_waiting(&self, ev: &mut [Event], wait: Duration) -> usize {
        let ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
        match self.ep.poll(ev, ms) {
            Ok(n) => n,
            Err(e) => {
                eprintln!("gustfs: fabric completion queue: {e}");
                std::thread::sleep(Duration::from_millis(10));
                0
            }
        }
    }

    /// Polls a queue that cannot be waited on, pausing between polls (at most
    /// POLL_PAUSE_MAX), until something comes, `wait` passes, or (for the
    /// background thread) a waiting thread wants the turn.
    fn poll_pausing(&self, ev: &mut [Event], wait: Duration) -> usize {
        let end = Instant::now() + wait;
        let mut pause = Duration::from_micros(1);
        loop {
            let n = self.ep.poll(ev, 0).unwrap_or(0);
            if n > 0 || Instant::now() >= end {
                return n;
            }
            {
                let l = lock(&self.progress.lead);
                if l.background && l.waiting() {
                    return 0;
                }
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(POLL_PAUSE_MAX);
        }
    }

    /// Lets go of the queue: the next waiting thread gets the turn, or, if none,
    /// the background thread may take it later.
    fn release(&self) {
        let next = {
            let mut l = lock(&self.progress.lead);
            l.polling = false;
            l.background = false;
            l.last_release = Instant::now();
            loop {
                match l.queue.pop_front() {
                    Some(c) if c.wants_turn.load(Ordering::Acquire) => break Some(c),
                    Some(_) => continue,
                    None => break None,
                }
            }
        };
        if let Some(c) = next {
            c.notify();
        }
    }

    /// The background thread: polls when no other thread has for BACKGROUND_AFTER.
    pub(super) fn background(self: Arc<Self>) {
        loop {
            loop {
                self.keepalive_due();
                let mut l = lock(&self.progress.lead);
                let idle_for = l.last_release.elapsed();
                if !l.polling && !l.waiting() && idle_for >= BACKGROUND_AFTER {
                    l.polling = true;
                    l.background = true;
                    break;
                }
                // Nothing wakes it: it looks again after BACKGROUND_AFTER.
                drop(l);
                std::thread::sleep(BACKGROUND_AFTER);
            }
            self.poll_as_leader(None);
        }
    }
}
