//! Who owns a daemon's root directory: the daemon that serves from it, or `gust
//! repair` emptying and filling it. One process at a time, by an advisory lock
//! (`flock`, exclusive) on the file `lock` in the root directory, taken before any
//! store is opened or removed and held until the process lets go (or ends: the
//! kernel drops it with the descriptor).
//!
//! Before it, a repair that found its daemon silent took that for stopped. A daemon
//! still starting is silent too: the repair emptied the stores the daemon was
//! opening. RocksDB's own lock did not help, because the stores are removed before
//! they are opened.
//!
//! Not for: which daemon a root directory belongs to (`identity` in gust-daemon).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// The lock file's name in a root directory.
pub const LOCK_FILE: &str = "lock";

/// The root directory held by this process until dropped.
#[derive(Debug)]
pub struct RootLock {
    _file: File,
}

impl RootLock {
    /// Takes the root directory's lock without waiting: `Ok(None)` while another
    /// process holds it. The directory must exist.
    pub fn try_take(rootdir: &Path) -> std::io::Result<Option<RootLock>> {
        let file =
            OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(rootdir.join(LOCK_FILE))?;
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Some(RootLock { _file: file }));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => Ok(None),
            _ => Err(err),
        }
    }
}

impl RootLock {
    /// `try_take`, waiting up to `wait` for a holder to let go: a daemon killed a
    /// moment ago still holds the lock while its threads exit (its main thread
    /// already shows as a zombie), and one started again at once on its root
    /// directory would be refused.
    pub fn take_within(rootdir: &Path, wait: std::time::Duration) -> std::io::Result<Option<RootLock>> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            match RootLock::try_take(rootdir)? {
                Some(lock) => return Ok(Some(lock)),
                None if std::time::Instant::now() >= deadline => return Ok(None),
                None => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One holder at a time, across descriptors (as across processes); the lock is
    /// free again once its holder drops it.
    #[test]
    fn one_holder_at_a_time_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let first = RootLock::try_take(d.path()).unwrap().expect("free at first");
        assert!(RootLock::try_take(d.path()).unwrap().is_none(), "held by the first");
        drop(first);
        assert!(RootLock::try_take(d.path()).unwrap().is_some(), "free after the drop");
    }

    /// A holder that lets go while another waits: the waiter takes the lock then.
    #[test]
    fn a_waiter_takes_the_lock_once_let_go() {
        let d = tempfile::tempdir().unwrap();
        let first = RootLock::try_take(d.path()).unwrap().expect("free at first");
        let short = std::time::Duration::from_millis(30);
        assert!(RootLock::take_within(d.path(), short).unwrap().is_none(), "held for longer than the wait");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = d.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            tx.send(()).unwrap();
            RootLock::take_within(&path, std::time::Duration::from_secs(30)).unwrap()
        });
        rx.recv().unwrap();
        drop(first);
        assert!(waiter.join().unwrap().is_some(), "taken once let go");
    }

    /// A root directory that does not exist is an error, not "held".
    #[test]
    fn a_missing_root_directory_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert!(RootLock::try_take(&d.path().join("gone")).is_err());
    }
}
