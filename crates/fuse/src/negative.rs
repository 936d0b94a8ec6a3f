//! Negative entries: names this mount knows to be absent, so that the LOOKUP the
//! kernel sends before every CREATE (Linux's FUSE has no lookup-and-create request:
//! `fuse_atomic_open` looks a new name up first) costs no RPC.
//!
//! Two sources, both bounded in time by `--negative-timeout` (0, the default, turns
//! both off):
//! * A LOOKUP that found nothing is answered as a negative entry (node id 0) with that
//!   timeout: the kernel keeps the negative dentry and sends the next open-create of
//!   the name straight as CREATE.
//! * A directory made through this mount was empty when it was made. For the timeout
//!   after that, a name in it that this mount did not put there is absent, as far as
//!   this mount can tell; its LOOKUP is answered without asking the daemons. This is
//!   what makes a fresh create one RPC in the common case of mkdir then create files
//!   (tar, cp -r, mdtest, data-set writers).
//!
//! The price, written down in docs/FUSE.md and docs/SEMANTICS.md: a name another
//! client creates is seen by this mount up to the timeout late, as the kernel's
//! positive entries already make removals and renames elsewhere seen late. A create
//! itself is never wrong: CREATE goes to the daemon, which decides existence (O_EXCL
//! fails there; without it the existing file is opened).
//!
//! Not for: positive entries (the inode table, inodes.rs; the kernel's dentry cache).
//!
//! Bounds: at most `FRESH_DIRS_MAX` directories and `NAMES_PER_DIR_MAX` names each
//! (a directory past that is dropped, and its lookups ask the daemons again); an
//! entry is about 100 bytes plus its names, so the whole is a few tens of MiB at most.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Directories made through this mount tracked at once.
const FRESH_DIRS_MAX: usize = 4096;
/// Names one tracked directory may gain through this mount before it is dropped.
const NAMES_PER_DIR_MAX: usize = 65_536;

struct FreshDir {
    made: Instant,
    /// Names this mount created (or renamed) into the directory since it was made.
    present: HashSet<String>,
}

pub(crate) struct Negative {
    timeout: Duration,
    fresh: Mutex<HashMap<String, FreshDir>>,
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

impl Negative {
    pub(crate) fn new(timeout: Duration) -> Negative {
        Negative { timeout, fresh: Mutex::new(HashMap::new()) }
    }

    /// How long the kernel may keep a negative entry; zero when they are off.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `dir` was just made through this mount: it is empty.
    pub(crate) fn made_dir(&self, dir: &str) {
        if self.timeout.is_zero() {
            return;
        }
        let mut m = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= FRESH_DIRS_MAX {
            let timeout = self.timeout;
            m.retain(|_, d| d.made.elapsed() < timeout);
            if m.len() >= FRESH_DIRS_MAX {
                return;
            }
        }
        m.insert(dir.to_string(), FreshDir { made: Instant::now(), present: HashSet::new() });
    }

    /// `path` now exists (made or renamed there through this mount); also called,
    /// conservatively, before the operation is sent, so a concurrent lookup never
    /// answers "absent" for a name being created.
    pub(crate) fn added(&self, path: &str) {
        if self.timeout.is_zero() {
            return;
        }
        let (dir, name) = split(path);
        let mut m = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        let full = match m.get_mut(dir) {
            Some(d) => {
                d.present.insert(name.to_string());
                d.present.len() > NAMES_PER_DIR_MAX
            }
            None => false,
        };
        if full {
            m.remove(dir);
        }
    }

    /// `path` was removed through this mount (it is absent again). Not called for a
    /// failed removal: the name stays "present", which only costs a lookup RPC.
    pub(crate) fn removed(&self, path: &str) {
        if self.timeout.is_zero() {
            return;
        }
        let (dir, name) = split(path);
        if let Some(d) = self.fresh.lock().unwrap_or_else(|e| e.into_inner()).get_mut(dir) {
            d.present.remove(name);
        }
        self.forget_dirs_under(path);
    }

    /// A directory renamed or removed: what was known under its old path no longer
    /// holds there (its new path is not tracked; lookups there ask the daemons).
    pub(crate) fn forget_dirs_under(&self, path: &str) {
        if self.timeout.is_zero() {
            return;
        }
        let prefix = format!("{path}/");
        self.fresh.lock().unwrap_or_else(|e| e.into_inner()).retain(|p, _| p != path && !p.starts_with(&prefix));
    }

    /// Whether `path` is known absent without asking: its directory was made through
    /// this mount less than the timeout ago and the name was not created since.
    /// Returns how much longer that knowledge holds (the negative entry's TTL).
    pub(crate) fn known_absent(&self, path: &str) -> Option<Duration> {
        if self.timeout.is_zero() {
            return None;
        }
        let (dir, name) = split(path);
        let mut m = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        let d = m.get(dir)?;
        let age = d.made.elapsed();
        if age >= self.timeout {
            m.remove(dir);
            return None;
        }
        (!d.present.contains(name)).then(|| self.timeout - age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_a_fresh_directory_are_absent_until_created_or_expired() {
        let n = Negative::new(Duration::from_millis(300));
        assert!(n.known_absent("/d/a").is_none(), "an unknown directory says nothing");
        n.made_dir("/d");
        assert!(n.known_absent("/d/a").is_some());
        n.added("/d/a");
        assert!(n.known_absent("/d/a").is_none(), "a created name is not absent");
        assert!(n.known_absent("/d/b").is_some());
        n.removed("/d/a");
        assert!(n.known_absent("/d/a").is_some(), "a removed name is absent again");
        n.made_dir("/d/sub");
        n.forget_dirs_under("/d");
        assert!(n.known_absent("/d/x").is_none() && n.known_absent("/d/sub/x").is_none());
        n.made_dir("/");
        assert!(n.known_absent("/top").is_some(), "the root's children split right");
        std::thread::sleep(Duration::from_millis(350));
        assert!(n.known_absent("/top").is_none(), "knowledge expires");
    }

    #[test]
    fn off_when_the_timeout_is_zero() {
        let n = Negative::new(Duration::ZERO);
        n.made_dir("/d");
        assert!(n.known_absent("/d/a").is_none());
    }
}
