//! One daemon's event log, a page at a time (`gust events` merges the daemons).
//!
//! Not for: merging, cursors over many daemons, inotify names (the CLI does that).

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
