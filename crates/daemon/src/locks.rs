//! The lock table: file locks this daemon keeps for the files whose records it
//! holds (docs/DESIGN.md, "Locks"; the wire is gust-proto's lock.rs). Pure: no
//! I/O, no clock; `lock_service.rs` serves requests with it, tells waiting clients
//! their locks are granted and drops the locks of clients that are gone.
//!
//! * Owners are (client process, owner within it). Locks of different owners
//!   conflict when they are in the same space (byte ranges: POSIX and OFD; flock's
//!   own), overlap, and one of them is a write lock. An owner's own locks never
//!   conflict: a new lock replaces what the owner held on its range, splitting a
//!   lock it cuts and merging neighbours of the same mode, as POSIX says.
//! * A request that conflicts either fails (WouldBlock: EAGAIN) or waits in the
//!   file's queue under a token its client chose. Every change that can free a
//!   range looks at the queue again and grants what no longer conflicts (`Wake`).
//! * A POSIX wait that would close a cycle (owner A waits for B, who waits for A,
//!   through any files of this daemon) fails with EDEADLK, as Linux does; OFD and
//!   flock waits are not checked (Linux does not either).
//! * flock follows Linux: converting a lock first drops the old one (another owner
//!   may get in between), even when the conversion then fails with EWOULDBLOCK.
//!
//! Bounded: `ENTRIES_MAX` locks and waits in all, `CLIENT_ENTRIES_MAX` per client
//! process; past a bound a request fails with ENOLCK and changes nothing.
//!
//! Not for: who is alive (lock_service.rs, with the grants' callback connections),
//! the wire (gust-proto).

use gust_proto::{LockInfo, LockKind, LockMode};
use std::collections::{HashMap, HashSet};

/// Bound on locks held and waits queued, per daemon. An entry costs about 100 bytes
/// (its vector slot and its share of the indexes), so 6.5 MiB at the bound.
pub const ENTRIES_MAX: usize = 65_536;
/// Bound per client process, so that one process cannot take the table from all.
pub const CLIENT_ENTRIES_MAX: usize = 16_384;
/// Bound on the owners a deadlock search visits (Linux stops after 10 hops; a
/// longer cycle is not reported and simply waits).
const DEADLOCK_STEPS_MAX: usize = 64;

/// Who holds a lock: a client process and an owner it names (see gust-proto's lock.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    pub client: u64,
    pub owner: u64,
}

/// A lock request: what `owner` wants on `start..end` (end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    pub owner: Owner,
    pub kind: LockKind,
    pub mode: LockMode,
    pub start: u64,
    pub end: u64,
    /// Reported to `test`s of others (F_GETLK's l_pid).
    pub pid: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    owner: Owner,
    kind: LockKind,
    write: bool,
    start: u64,
    end: u64,
    pid: i32,
}

impl Held {
    fn info(&self) -> LockInfo {
        let mode = if self.write { LockMode::Write } else { LockMode::Read };
        LockInfo { mode, start: self.start, end: self.end, pid: self.pid }
    }
}

struct Waiter {
    token: u64,
    want: Want,
}

#[derive(Default)]
struct FileLocks {
    held: Vec<Held>,
    /// Waits in arrival order.
    waiters: Vec<Waiter>,
}

#[derive(Default)]
struct ClientIndex {
    /// Files where this client holds locks or waits.
    files: HashSet<u128>,
    /// Its queued waits: token -> file.
    waits: HashMap<u64, u128>,
    /// Its locks and waits, against `CLIENT_ENTRIES_MAX`.
    entries: usize,
}

/// What a lock request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Held now (or released, for Unlock).
    Granted,
    /// Waiting under its token: a `Wake` follows.
    Queued,
    /// Conflicts and may not wait: EAGAIN.
    WouldBlock,
    /// Waiting would close a cycle of POSIX owners: EDEADLK.
    Deadlock,
    /// No room: ENOLCK.
    Full,
}

impl Outcome {
    /// The errno a client gets, if any.
    pub fn errno(self) -> Option<i32> {
        match self {
            Outcome::Granted | Outcome::Queued => None,
            Outcome::WouldBlock => Some(libc::EAGAIN),
            Outcome::Deadlock => Some(libc::EDEADLK),
            Outcome::Full => Some(libc::ENOLCK),
        }
    }
}

/// A queued wait that ended: its client is told (`lock_granted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    pub client: u64,
    pub token: u64,
    /// 0: held; ENOLCK: no room to hold it.
    pub errno: i32,
}

/// What `Table::lock` did, and what it makes others do.
#[derive(Debug)]
pub struct Decision {
    pub outcome: Outcome,
    /// Waits this request ended (its release made room).
    pub wakes: Vec<Wake>,
    /// Clients holding the locks this request conflicts with (whose liveness matters now).
    pub blockers: Vec<u64>,
}

/// The locks of one daemon.
pub struct Table {
    files: HashMap<u128, FileLocks>,
    clients: HashMap<u64, ClientIndex>,
    entries: usize,
    max: usize,
    client_max: usize,
}

impl Default for Table {
    fn default() -> Self {
        Table::new(ENTRIES_MAX, CLIENT_ENTRIES_MAX)
    }
}

fn overlaps(a_start: u64, a_end: u64, b_start: u64, b_end: u64) -> bool {
    a_start < b_end && b_start < a_end
}

fn conflicts(h: &Held, w: &Want) -> bool {
    h.owner != w.owner
        && h.kind.byte_range() == w.kind.byte_range()
        && overlaps(h.start, h.end, w.start, w.end)
        && (h.write || w.mode == LockMode::Write)
}

impl Table {
    pub fn new(max: usize, client_max: usize) -> Table {
        Table { files: HashMap::new(), clients: HashMap::new(), entries: 0, max, client_max }
    }

    /// (locks held, waits queued), for `gust status` and tests.
    pub fn counts(&self) -> (usize, usize) {
        let waits: usize = self.files.values().map(|f| f.waiters.len()).sum();
        (self.entries - waits, waits)
    }

    /// Takes, changes or releases a lock of `file` as `want` says; with `wait`, a
    /// conflicting request waits under that token instead of failing. The caller
    /// checked the range (`gust_proto::lock_range_valid`).
    pub fn lock(&mut self, file: u128, want: Want, wait: Option<u64>) -> Decision {
        let mut d = Decision { outcome: Outcome::Granted, wakes: Vec::new(), blockers: Vec::new() };
        if let Some(token) = wait {
            // The same wait sent again (a client's resend) replaces the first.
            self.cancel(want.owner.client, token);
        }
        let space = want.kind.byte_range();
        if want.mode == LockMode::Unlock {
            let ok = self.set(file, want.owner, space, want.start, want.end, None);
            d.outcome = if ok { Outcome::Granted } else { Outcome::Full };
            d.wakes = self.wake(file);
            self.tidy(file, want.owner.client);
            return d;
        }
        let write = want.mode == LockMode::Write;
        if want.kind == LockKind::Flock {
            let mine = self
                .files
                .get(&file)
                .and_then(|f| f.held.iter().find(|h| h.owner == want.owner && !h.kind.byte_range()))
                .map(|h| h.write);
            match mine {
                Some(held_write) if held_write == write => return d,
                // Linux drops the old lock before it tries for the new mode.
                Some(_) => {
                    self.set(file, want.owner, false, want.start, want.end, None);
                    d.wakes = self.wake(file);
                }
                None => {}
            }
        }
        let blockers: Vec<Owner> = match self.files.get(&file) {
            Some(f) => f.held.iter().filter(|h| conflicts(h, &want)).map(|h| h.owner).collect(),
            None => Vec::new(),
        };
        d.blockers = blockers.iter().map(|o| o.client).collect::<HashSet<_>>().into_iter().collect();
        let outcome = if blockers.is_empty() {
            if self.set(file, want.owner, space, want.start, want.end, Some((want.kind, write, want.pid))) {
                // A downgrade (write to read) may let readers in.
                d.wakes.extend(self.wake(file));
                Outcome::Granted
            } else {
                Outcome::Full
            }
        } else if let Some(token) = wait {
            if want.kind == LockKind::Posix && self.deadlock(want.owner, blockers) {
                Outcome::Deadlock
            } else if !self.room(want.owner.client, 1) {
                Outcome::Full
            } else {
                self.files.entry(file).or_default().waiters.push(Waiter { token, want });
                let ci = self.clients.entry(want.owner.client).or_default();
                ci.files.insert(file);
                ci.waits.insert(token, file);
                ci.entries += 1;
                self.entries += 1;
                Outcome::Queued
            }
        } else {
            Outcome::WouldBlock
        };
        d.outcome = outcome;
        self.tidy(file, want.owner.client);
        d
    }

    /// F_GETLK: a lock of another owner that `want` (Read or Write) conflicts with.
    pub fn test(&self, file: u128, want: &Want) -> Option<LockInfo> {
        let f = self.files.get(&file)?;
        f.held.iter().filter(|h| conflicts(h, want)).min_by_key(|h| h.start).map(Held::info)
    }

    /// Gives up a queued wait: true if it was waiting.
    pub fn cancel(&mut self, client: u64, token: u64) -> bool {
        let Some(file) = self.clients.get_mut(&client).and_then(|c| c.waits.remove(&token)) else { return false };
        let Some(f) = self.files.get_mut(&file) else { return false };
        let Some(i) = f.waiters.iter().position(|w| w.token == token && w.want.owner.client == client) else {
            return false;
        };
        f.waiters.remove(i);
        self.entries -= 1;
        if let Some(c) = self.clients.get_mut(&client) {
            c.entries -= 1;
        }
        self.tidy(file, client);
        true
    }

    /// Everything of `client` goes (its process ended, or went silent): its locks
    /// and its waits. Returns the waits of others this lets through.
    pub fn release_client(&mut self, client: u64) -> Vec<Wake> {
        let Some(ci) = self.clients.remove(&client) else { return Vec::new() };
        self.entries -= ci.entries;
        let mut wakes = Vec::new();
        for file in ci.files {
            let Some(f) = self.files.get_mut(&file) else { continue };
            f.held.retain(|h| h.owner.client != client);
            f.waiters.retain(|w| w.want.owner.client != client);
            wakes.extend(self.wake(file).into_iter().filter(|w| w.client != client));
            if self.files.get(&file).is_some_and(|f| f.held.is_empty() && f.waiters.is_empty()) {
                self.files.remove(&file);
            }
        }
        // `wake` may have granted something to others only; the client is gone.
        self.clients.remove(&client);
        wakes
    }

    /// Clients holding locks that a queued wait waits for: their liveness decides
    /// when those waits end (lock_service.rs probes the silent ones).
    pub fn blocking_clients(&self) -> HashSet<u64> {
        let mut out = HashSet::new();
        for f in self.files.values() {
            for w in &f.waiters {
                out.extend(f.held.iter().filter(|h| conflicts(h, &w.want)).map(|h| h.owner.client));
            }
        }
        out
    }

    /// Whether `client` holds any lock or waits anywhere here.
    pub fn has_client(&self, client: u64) -> bool {
        self.clients.contains_key(&client)
    }

    /// Whether `n` more entries of `client` fit both bounds.
    fn room(&self, client: u64, n: usize) -> bool {
        let mine = self.clients.get(&client).map_or(0, |c| c.entries);
        self.entries + n <= self.max && mine + n <= self.client_max
    }

    /// Sets `owner`'s locks of one space on `start..end` to `new` (kind, write, pid),
    /// or to nothing: what it held there is cut away (split if it reaches past both
    /// ends), then neighbours of the same mode merge. False, changing nothing, if
    /// the result does not fit the bounds (a split adds an entry).
    fn set(
        &mut self,
        file: u128,
        owner: Owner,
        byte_range: bool,
        start: u64,
        end: u64,
        new: Option<(LockKind, bool, i32)>,
    ) -> bool {
        let f = self.files.entry(file).or_default();
        let (mine, others): (Vec<Held>, Vec<Held>) =
            f.held.iter().partition(|h| h.owner == owner && h.kind.byte_range() == byte_range);
        let mut next: Vec<Held> = Vec::with_capacity(mine.len() + 2);
        for h in &mine {
            if !overlaps(h.start, h.end, start, end) {
                next.push(*h);
                continue;
            }
            if h.start < start {
                next.push(Held { end: start, ..*h });
            }
            if h.end > end {
                next.push(Held { start: end, ..*h });
            }
        }
        if let Some((kind, write, pid)) = new {
            next.push(Held { owner, kind, write, start, end, pid });
        }
        next.sort_by_key(|h| h.start);
        let mut merged: Vec<Held> = Vec::with_capacity(next.len());
        for h in next {
            match merged.last_mut() {
                Some(m) if m.end == h.start && m.write == h.write && m.kind == h.kind => m.end = h.end,
                _ => merged.push(h),
            }
        }
        let grows = merged.len().saturating_sub(mine.len());
        if grows > 0 && !self.room(owner.client, grows) {
            return false;
        }
        let f = self.files.get_mut(&file).expect("made above");
        f.held = others;
        let shrinks = mine.len().saturating_sub(merged.len());
        f.held.extend(merged);
        self.entries = self.entries + grows - shrinks;
        let ci = self.clients.entry(owner.client).or_default();
        ci.entries = ci.entries + grows - shrinks;
        ci.files.insert(file);
        true
    }

    /// Grants the queued waits of `file` that no longer conflict, in order, pass
    /// after pass until one grants nothing (a grant can be a downgrade that lets
    /// an earlier wait in).
    fn wake(&mut self, file: u128) -> Vec<Wake> {
        let mut wakes = Vec::new();
        loop {
            let Some(f) = self.files.get(&file) else { return wakes };
            let free = f.waiters.iter().position(|w| !f.held.iter().any(|h| conflicts(h, &w.want)));
            let Some(i) = free else { return wakes };
            let w = self.files.get_mut(&file).expect("looked up above").waiters.remove(i);
            let client = w.want.owner.client;
            self.entries -= 1;
            if let Some(c) = self.clients.get_mut(&client) {
                c.entries -= 1;
                c.waits.remove(&w.token);
            }
            let want = w.want;
            let held = self.set(
                file,
                want.owner,
                want.kind.byte_range(),
                want.start,
                want.end,
                Some((want.kind, want.mode == LockMode::Write, want.pid)),
            );
            wakes.push(Wake { client, token: w.token, errno: if held { 0 } else { libc::ENOLCK } });
            self.tidy(file, client);
        }
    }

    /// Whether a POSIX wait of `me` behind `blockers` closes a cycle: some blocker
    /// waits (through any file) for a lock whose owner waits ... for `me`.
    fn deadlock(&self, me: Owner, blockers: Vec<Owner>) -> bool {
        let mut stack = blockers;
        let mut seen: HashSet<Owner> = HashSet::new();
        while let Some(o) = stack.pop() {
            if o == me {
                return true;
            }
            if !seen.insert(o) || seen.len() > DEADLOCK_STEPS_MAX {
                continue;
            }
            let Some(ci) = self.clients.get(&o.client) else { continue };
            for (token, file) in &ci.waits {
                let Some(f) = self.files.get(file) else { continue };
                let waits = f.waiters.iter().filter(|w| w.token == *token && w.want.owner == o);
                for w in waits.filter(|w| w.want.kind == LockKind::Posix) {
                    stack.extend(f.held.iter().filter(|h| conflicts(h, &w.want)).map(|h| h.owner));
                }
            }
        }
        false
    }

    /// Drops what is empty after a change of `file` by `client`: the file's entry,
    /// the client's note of the file, the client's entry.
    fn tidy(&mut self, file: u128, client: u64) {
        let (file_empty, client_there) = match self.files.get(&file) {
            Some(f) => (
                f.held.is_empty() && f.waiters.is_empty(),
                f.held.iter().any(|h| h.owner.client == client)
                    || f.waiters.iter().any(|w| w.want.owner.client == client),
            ),
            None => (true, false),
        };
        if file_empty {
            self.files.remove(&file);
        }
        if !client_there {
            if let Some(c) = self.clients.get_mut(&client) {
                c.files.remove(&file);
                if c.files.is_empty() && c.entries == 0 {
                    self.clients.remove(&client);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "locks_tests.rs"]
mod tests;
