//! The daemon's event log: the namespace changes it applied (create, close after
//! write, delete, rename halves, attribute changes), each with a sequence number, in
//! memory, bounded by bytes (`--events-cap`), oldest dropped first.
//!
//! A consumer asks for the events after its cursor; when the oldest event still held
//! is past the cursor, the reply's `first_seq` says how many were dropped, so a
//! consumer is never silently short. Sequence numbers start at 1 when the daemon
//! starts (the log is not kept across restarts).
//!
//! Cost per recorded change: one uncontended mutex and one allocation of the path,
//! next to a RocksDB write; off (cap 0), one branch.
//!
//! Not for: merging daemons' logs or inotify names (gust events), durability.

use gust_proto::{now_ns, Event, EventKind, EVENTS_PAGE_BYTES_MAX, EVENT_OVERHEAD_BYTES};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Default bound on the log's counted bytes (path + `EVENT_OVERHEAD_BYTES` per
/// event): about 150,000 events of 40-byte paths.
pub const EVENTS_CAP_BYTES_DEFAULT: usize = 16 << 20;
/// Bound on the events one request examines (under the lock) before it answers, so
/// a selective prefix never holds the log for long.
const SCAN_EVENTS_MAX: usize = 16_384;

struct Log {
    events: VecDeque<Event>,
    bytes: usize,
    next_seq: u64,
}

pub struct EventLog {
    cap_bytes: usize,
    log: Mutex<Log>,
}

/// Whether `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || (path.starts_with(p) && path.as_bytes().get(p.len()) == Some(&b'/'))
}

impl EventLog {
    /// A log of at most `cap_bytes` counted bytes; 0 records nothing.
    pub fn new(cap_bytes: usize) -> Self {
        EventLog { cap_bytes, log: Mutex::new(Log { events: VecDeque::new(), bytes: 0, next_seq: 1 }) }
    }

    pub fn enabled(&self) -> bool {
        self.cap_bytes > 0
    }

    pub fn record(&self, kind: EventKind, path: &str, file_id: u128, is_dir: bool) {
        // A hard-linked file's attributes record is no name a watcher knows; only
        // its attribute changes are kept (under `//links/ID`, which `gust events`
        // does not show): a view linking the file follows them (gust-view).
        if !self.enabled() || (path.starts_with(gust_proto::path::LINKS_DIR) && kind != EventKind::Attrib) {
            return;
        }
        let cost = path.len() + EVENT_OVERHEAD_BYTES;
        let e = Event { seq: 0, time_ns: now_ns(), kind, is_dir, path: path.to_string(), file_id };
        let mut l = self.log.lock().unwrap_or_else(|p| p.into_inner());
        while l.bytes + cost > self.cap_bytes {
            match l.events.pop_front() {
                Some(old) => l.bytes -= old.path.len() + EVENT_OVERHEAD_BYTES,
                None => break,
            }
        }
        let mut e = e;
        e.seq = l.next_seq;
        l.next_seq += 1;
        l.bytes += cost;
        l.events.push_back(e);
    }

    /// A file created with its data by its writer's last close, in one request
    /// (`create_inline`, a batched create): created, then closed after writing, the
    /// two events a local create + write + close reports (IN_CREATE,
    /// IN_CLOSE_WRITE). `gust stage out --follow` copies files on the second.
    pub fn record_created_and_closed(&self, path: &str, file_id: u128) {
        self.record(EventKind::Create, path, file_id, false);
        self.record(EventKind::CloseWrite, path, file_id, false);
    }

    /// Events after `after_seq` under `prefix`, at most `max` and
    /// `EVENTS_PAGE_BYTES_MAX` counted bytes: (events, last seq examined, first seq
    /// held, next seq). A cursor past the log's end (the daemon restarted since)
    /// reads from the start; the caller sees `after_seq >= next_seq` and says so.
    pub fn page(&self, after_seq: u64, prefix: &str, max: usize) -> (Vec<Event>, u64, u64, u64) {
        let l = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let first = l.events.front().map(|e| e.seq).unwrap_or(l.next_seq);
        let after = if after_seq >= l.next_seq { 0 } else { after_seq };
        let start = (after + 1).saturating_sub(first) as usize;
        let mut out = Vec::new();
        let mut bytes = 0;
        let mut last = after.max(first.saturating_sub(1));
        for e in l.events.iter().skip(start).take(SCAN_EVENTS_MAX) {
            if out.len() >= max || bytes >= EVENTS_PAGE_BYTES_MAX {
                break;
            }
            last = e.seq;
            if under(&e.path, prefix) {
                bytes += e.path.len() + EVENT_OVERHEAD_BYTES;
                out.push(e.clone());
            }
        }
        (out, last, first, l.next_seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_log_pages_and_reports_drops() {
        let log = EventLog::new(10 * (2 + EVENT_OVERHEAD_BYTES));
        for i in 0..25 {
            log.record(EventKind::Create, &format!("/{}", i % 10), i, false);
        }
        // 25 recorded, 10 held: 16..=25.
        let (ev, last, first, next) = log.page(0, "/", 100);
        assert_eq!((first, next, last), (16, 26, 25));
        assert_eq!(ev.iter().map(|e| e.seq).collect::<Vec<_>>(), (16..=25).collect::<Vec<_>>());
        // A cursor inside the log: nothing missed, the rest returned.
        let (ev, last, first, _) = log.page(20, "/", 2);
        assert_eq!(ev.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![21, 22]);
        assert_eq!((last, first), (22, 16));
        // A prefix: only its paths, the cursor still moves over the others.
        let (ev, last, _, _) = log.page(15, "/3", 100);
        assert_eq!(ev.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), vec!["/3"]);
        assert_eq!(last, 25);
        assert!(under("/a/b", "/a") && under("/a", "/a/") && !under("/ab", "/a") && under("/x", "/"));
        // Off: nothing recorded.
        let off = EventLog::new(0);
        off.record(EventKind::Delete, "/x", 1, false);
        assert_eq!(off.page(0, "/", 10).0.len(), 0);
    }
}
