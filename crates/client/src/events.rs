//! One daemon's event log, a page at a time (`gust events` merges the daemons).
//!
//! The one reading of a page against the cursor that asked for it ([`EventsPage::gap`],
//! [`EventsPage::cursor_after`], [`EventsPage::caught_up`]): `gust events` and
//! `gust stage out --follow` both keep a cursor per daemon.
//!
//! Not for: merging, inotify names (the CLI does that).

use crate::error::unexpected;
use crate::{Client, Result};
use gust_proto::{Event, Request, Response, EVENTS_PAGE_ENTRIES_MAX};

/// A page of one daemon's event log; see `Response::Events`.
#[derive(Debug, Clone)]
pub struct EventsPage {
    pub events: Vec<Event>,
    /// The cursor to ask after next time.
    pub last_seq: u64,
    /// The oldest event the daemon still holds (events between the cursor asked
    /// after and this one were dropped).
    pub first_seq: u64,
    pub next_seq: u64,
}

/// What a page says about the events between the cursor that asked and the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gap {
    /// Nothing missed.
    None,
    /// This many events were dropped from the daemon's bounded log before they were
    /// read.
    Dropped(u64),
    /// The daemon restarted: its log started afresh, and what it held is gone.
    Restarted,
}

impl EventsPage {
    /// Whether events were missed since `after` (the cursor this page was asked
    /// after).
    pub fn gap(&self, after: u64) -> Gap {
        if after > 0 && after >= self.next_seq {
            Gap::Restarted
        } else if self.first_seq > after + 1 {
            Gap::Dropped(self.first_seq - 1 - after)
        } else {
            Gap::None
        }
    }

    /// The cursor to ask after next time: past what this page examined (a restarted
    /// daemon's log counts from its start again).
    pub fn cursor_after(&self, after: u64) -> u64 {
        match self.gap(after) {
            Gap::Restarted => self.last_seq,
            // Past the dropped ones even if the page examined none, so that the gap
            // is reported once.
            Gap::Dropped(_) => self.last_seq.max(self.first_seq - 1),
            Gap::None => self.last_seq.max(after),
        }
    }

    /// Whether the daemon held nothing more past this page when it answered.
    pub fn caught_up(&self) -> bool {
        self.last_seq + 1 >= self.next_seq
    }
}

impl Client {
    /// Events of daemon `daemon` after `after_seq` whose path is `prefix` or below.
    pub fn events_page(&self, daemon: u32, after_seq: u64, prefix: &str) -> Result<EventsPage> {
        let req = Request::Events { after_seq, prefix: prefix.to_string(), max_entries: EVENTS_PAGE_ENTRIES_MAX };
        match self.transport.call(daemon, req)? {
            Response::Events { mut events, last_seq, first_seq, next_seq } => {
                // With copies, every copy's daemon records the change: one counts
                // (replica.rs). The cursor is the daemon's, whatever is left out.
                events.retain(|e| self.keeps(daemon, &e.path));
                Ok(EventsPage { events, last_seq, first_seq, next_seq })
            }
            r => Err(unexpected(r)),
        }
    }
}

/// A cursor per daemon and prefix: where a follower of the event logs is (`gust
/// stage out --follow`, a view of a GustFS directory).
pub struct EventCursors {
    prefixes: Vec<String>,
    /// [daemon][prefix] -> the last sequence number read.
    after: Vec<Vec<u64>>,
}

impl EventCursors {
    /// Cursors at the end of every daemon's log now: what happens from here on
    /// is read.
    pub fn now(c: &Client, prefixes: Vec<String>) -> std::result::Result<Self, String> {
        let mut after = Vec::new();
        for d in 0..c.daemon_count() {
            let mut v = Vec::new();
            for p in &prefixes {
                let page = c.events_page(d, u64::MAX - 1, p).map_err(|e| format!("event log of daemon {d}: {e}"))?;
                v.push(page.next_seq.saturating_sub(1));
            }
            after.push(v);
        }
        Ok(EventCursors { prefixes, after })
    }

    /// Calls `each` for every event since the last call, and says whether some
    /// were lost (dropped from a full log, gone with a restarted daemon's, or a
    /// daemon did not answer): then a full pass of the follower is due.
    pub fn read(&mut self, c: &Client, mut each: impl FnMut(&Event)) -> bool {
        let mut lost = false;
        for d in 0..c.daemon_count() {
            for (k, p) in self.prefixes.iter().enumerate() {
                loop {
                    let after = self.after[d as usize][k];
                    let Ok(page) = c.events_page(d, after, p) else {
                        lost = true;
                        break;
                    };
                    if page.gap(after) != Gap::None {
                        lost = true;
                    }
                    page.events.iter().for_each(&mut each);
                    self.after[d as usize][k] = page.cursor_after(after);
                    if page.events.is_empty() || page.caught_up() {
                        break;
                    }
                }
            }
        }
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(last_seq: u64, first_seq: u64, next_seq: u64) -> EventsPage {
        EventsPage { events: Vec::new(), last_seq, first_seq, next_seq }
    }

    #[test]
    fn a_cursor_reads_gaps_restarts_and_progress() {
        // Events 1..=10 held, 10 the last; asked after 4, the page read to 7.
        let p = page(7, 1, 11);
        assert_eq!(p.gap(4), Gap::None);
        assert_eq!(p.cursor_after(4), 7);
        assert!(!p.caught_up());
        // The log dropped 1..=5: asked after 2, events 3, 4 and 5 are gone.
        let p = page(8, 6, 11);
        assert_eq!(p.gap(2), Gap::Dropped(3));
        assert_eq!(p.cursor_after(2), 8);
        // ... also when the page examined none of what is left (reported once).
        assert_eq!(page(2, 6, 11).cursor_after(2), 5);
        // A fresh start: after 0 nothing is missed, even with an empty log.
        assert_eq!(page(0, 1, 1).gap(0), Gap::None);
        assert!(page(0, 1, 1).caught_up());
        // Restarted: asked after 40, the new log holds 1..=3.
        let p = page(3, 1, 4);
        assert_eq!(p.gap(40), Gap::Restarted);
        assert_eq!(p.cursor_after(40), 3, "counts from the new log's start");
        assert!(p.caught_up());
        // Caught up with an empty page: the cursor stays.
        let p = page(9, 1, 10);
        assert_eq!((p.gap(9), p.cursor_after(9), p.caught_up()), (Gap::None, 9, true));
    }
}
