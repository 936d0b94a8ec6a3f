//! `gust events [--follow] [--since CURSOR] [PREFIX]`: the daemons' event logs merged
//! into one stream of JSON lines with inotify's event names, so that tools written
//! for inotify map over directly.
//!
//! Each line is one event: `{"event": "IN_CREATE", "mask": ["IN_CREATE", "IN_ISDIR"],
//! "path": ..., "daemon": d, "seq": n, "time_ns": t, "cookie": c (moves only),
//! "cursor": "0:12,1:40"}`. A consumer keeps the last line's `cursor` and resumes with
//! `--since CURSOR`; when a daemon dropped events past that cursor (its log is
//! bounded), an `IN_Q_OVERFLOW` line says how many (`missed`), never silence.
//!
//! Order: per daemon, the order it applied the changes, which is per file the order
//! of the file's changes (all of a path's metadata lives on one daemon); across
//! daemons, merged by time. A file rename is a MovedTo at the new path's daemon and a
//! delete at the old one's: a delete of a file id just moved is shown as
//! IN_MOVED_FROM, with the same cookie as its IN_MOVED_TO (which comes first).
//!
//! Not for: watching the local file system, IN_ACCESS/IN_OPEN (not recorded).

use crate::instance::InstanceArgs;
use clap::Args;
use gust_client::{Client, Event, EventKind, Gap};
use serde_json::json;
use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::time::Duration;

/// How often --follow asks the daemons for new events.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// File ids of recent IN_MOVED_TO events remembered to pair their IN_MOVED_FROM.
const RECENT_MOVES_MAX: usize = 4096;

#[derive(Args)]
pub struct EventsArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// Keep waiting for new events (without it: print what the logs hold, then exit).
    #[arg(long, short = 'f')]
    follow: bool,
    /// Resume after this cursor (the `cursor` of the last line seen), or `now` for
    /// new events only. Default: every event the daemons still hold.
    #[arg(long, value_name = "CURSOR")]
    since: Option<String>,
    /// Only events of this path and below (under the mount directory or internal).
    prefix: Option<String>,
}

fn parse_cursor(s: &str, n: usize) -> Result<Vec<u64>, String> {
    let mut v = vec![0; n];
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (d, seq) =
            part.split_once(':').ok_or(format!("--since {s}: expected DAEMON:SEQ,... (a printed cursor)"))?;
        let d: usize = d.parse().map_err(|_| format!("--since {s}: bad daemon id {d}"))?;
        let seq: u64 = seq.parse().map_err(|_| format!("--since {s}: bad sequence number {seq}"))?;
        if d >= n {
            return Err(format!("--since {s}: daemon {d} is not in this instance ({n} daemons)"));
        }
        v[d] = seq;
    }
    Ok(v)
}

fn cursor_text(c: &[u64]) -> String {
    c.iter().enumerate().map(|(d, s)| format!("{d}:{s}")).collect::<Vec<_>>().join(",")
}

fn names(kind: EventKind, is_dir: bool) -> Vec<&'static str> {
    let main = match kind {
        EventKind::Create => "IN_CREATE",
        EventKind::CloseWrite => "IN_CLOSE_WRITE",
        EventKind::Delete => "IN_DELETE",
        EventKind::MovedFrom => "IN_MOVED_FROM",
        EventKind::MovedTo => "IN_MOVED_TO",
        EventKind::Attrib => "IN_ATTRIB",
        EventKind::Modify => "IN_MODIFY",
    };
    if is_dir {
        vec![main, "IN_ISDIR"]
    } else {
        vec![main]
    }
}

struct Merger<'a> {
    c: &'a Client,
    mountdir: String,
    prefix: String,
    cursor: Vec<u64>,
    recent_moves: VecDeque<u128>,
    recent_set: HashSet<u128>,
    /// Deletes held back a round, not yet shown (daemon, seq): at most one per daemon.
    deferred: HashSet<(usize, u64)>,
}

impl Merger<'_> {
    /// One round over the daemons: prints what they hold after the cursor, merged by
    /// time. Returns whether every daemon is caught up.
    fn round(&mut self, out: &mut impl Write) -> Result<bool, String> {
        let mut pending: Vec<VecDeque<Event>> = Vec::new();
        let mut caught_up = true;
        for d in 0..self.cursor.len() {
            let after = self.cursor[d];
            let p = match self.c.events_page(d as u32, after, &self.prefix) {
                Ok(p) => p,
                // With copies, another daemon recorded the same changes: go on
                // without this one (it is skipped until it answers again).
                Err(_) if self.c.replicas() > 1 && self.c.daemon_down(d as u32) => {
                    pending.push(VecDeque::new());
                    continue;
                }
                Err(e) => return Err(format!("daemon {d}: {e}")),
            };
            match p.gap(after) {
                Gap::None => {}
                // The daemon restarted (its log starts afresh): what it held is gone.
                Gap::Restarted => self.line(
                    out,
                    json!({"event": "IN_Q_OVERFLOW", "mask": ["IN_Q_OVERFLOW"], "daemon": d,
                    "missed": null, "reason": "daemon restarted; its event log started afresh"}),
                )?,
                Gap::Dropped(missed) => self.line(
                    out,
                    json!({"event": "IN_Q_OVERFLOW", "mask": ["IN_Q_OVERFLOW"], "daemon": d,
                    "missed": missed, "reason": "dropped from the daemon's bounded event log"}),
                )?,
            }
            caught_up &= p.caught_up();
            // Events come below; the cursor moves past what the page examined.
            self.cursor[d] = p.cursor_after(after);
            // A hard-linked file's attribute changes, at its link path: no name.
            let named = p.events.into_iter().filter(|e| !gust_client::path::is_link_path(&e.path));
            pending.push(named.collect());
        }
        // A file rename puts the new record before it deletes the old one, so the
        // IN_MOVED_TO of a delete that is a rename's is in this round or an earlier
        // one, unless its daemon was asked before the rename happened: such a delete
        // (and what follows it on its daemon) waits one round, once, for its pair.
        let moved: Vec<u128> = pending
            .iter()
            .flatten()
            .filter(|e| e.kind == EventKind::MovedTo && e.file_id != 0)
            .map(|e| e.file_id)
            .collect();
        for id in moved {
            self.remember_move(id);
        }
        for (d, q) in pending.iter_mut().enumerate() {
            let wait = q.iter().position(|e| {
                e.kind == EventKind::Delete
                    && !e.is_dir
                    && !self.recent_set.contains(&e.file_id)
                    && self.deferred.insert((d, e.seq))
            });
            if let Some(i) = wait {
                self.cursor[d] = q[i].seq - 1;
                q.truncate(i);
                caught_up = false;
            }
        }
        // Merge by time, keeping each daemon's own order; the cursor printed with an
        // event covers everything of its daemon up to it.
        let mut shown: Vec<u64> = self.cursor.clone();
        for (d, q) in pending.iter().enumerate() {
            if let Some(e) = q.front() {
                shown[d] = e.seq - 1;
            }
        }
        loop {
            let next = (0..pending.len()).filter(|&d| !pending[d].is_empty()).min_by_key(|&d| pending[d][0].time_ns);
            let Some(d) = next else { break };
            let e = pending[d].pop_front().expect("nonempty");
            shown[d] = if pending[d].is_empty() { self.cursor[d] } else { e.seq };
            self.event(out, d, &e, &shown)?;
        }
        out.flush().map_err(|e| e.to_string())?;
        Ok(caught_up)
    }

    fn remember_move(&mut self, file_id: u128) {
        if self.recent_set.insert(file_id) {
            self.recent_moves.push_back(file_id);
            if self.recent_moves.len() > RECENT_MOVES_MAX {
                let old = self.recent_moves.pop_front().expect("nonempty");
                self.recent_set.remove(&old);
            }
        }
    }

    fn event(&mut self, out: &mut impl Write, d: usize, e: &Event, cursor: &[u64]) -> Result<(), String> {
        self.deferred.remove(&(d, e.seq));
        // A rename's old name comes from its daemon as moved (RemoveKind::Moved);
        // a delete is a delete.
        let kind = e.kind;
        let path = if self.mountdir.is_empty() || self.mountdir == "/" {
            e.path.clone()
        } else {
            format!("{}{}", self.mountdir, e.path)
        };
        let mut v = json!({
            "event": names(kind, e.is_dir)[0],
            "mask": names(kind, e.is_dir),
            "path": path,
            "daemon": d,
            "seq": e.seq,
            "time_ns": e.time_ns,
            "cursor": cursor_text(cursor),
        });
        if matches!(kind, EventKind::MovedFrom | EventKind::MovedTo) {
            v["cookie"] = json!(e.file_id as u32);
        }
        self.line(out, v)
    }

    fn line(&self, out: &mut impl Write, v: serde_json::Value) -> Result<(), String> {
        writeln!(out, "{v}").map_err(|e| format!("cannot write: {e}"))
    }
}

pub fn run(a: EventsArgs) -> Result<(), String> {
    let c = a.inst.client()?;
    let n = c.daemon_count() as usize;
    let prefix = match &a.prefix {
        Some(p) => {
            let internal = c.internal_path(p).unwrap_or_else(|| p.clone());
            gust_client::normalize(&internal).map_err(|e| format!("{p}: {e}"))?
        }
        None => "/".to_string(),
    };
    let cursor = match a.since.as_deref() {
        None => vec![0; n],
        Some("now") => {
            // The current end of each log: ask for a path no event has (NUL is never
            // in a path), which returns at once with the log's next sequence number.
            let mut v = Vec::with_capacity(n);
            for d in 0..n {
                v.push(
                    c.events_page(d as u32, u64::MAX - 1, "/\0").map_err(|e| format!("daemon {d}: {e}"))?.next_seq - 1,
                );
            }
            v
        }
        Some(s) => parse_cursor(s, n)?,
    };
    let mut m = Merger {
        mountdir: c.mountdir().trim_end_matches('/').to_string(),
        c: &c,
        prefix,
        cursor,
        recent_moves: VecDeque::new(),
        recent_set: HashSet::new(),
        deferred: HashSet::new(),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        let caught_up = m.round(&mut out)?;
        if caught_up {
            if !a.follow {
                return Ok(());
            }
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        assert_eq!(parse_cursor("0:12,2:5", 3).unwrap(), vec![12, 0, 5]);
        assert_eq!(cursor_text(&[12, 0, 5]), "0:12,1:0,2:5");
        assert!(parse_cursor("3:1", 3).is_err());
        assert!(parse_cursor("x", 3).is_err());
        assert_eq!(names(EventKind::Create, true), vec!["IN_CREATE", "IN_ISDIR"]);
    }
}
