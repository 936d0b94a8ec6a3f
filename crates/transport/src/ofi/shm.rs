//! The shared-memory regions of libfabric's shm provider, named and swept.
//!
//! An shm endpoint is a file in /dev/shm (16 MiB of memory) that libfabric removes
//! when the endpoint closes or the process dies of a signal it catches. A process
//! killed by SIGKILL (a job's clients and daemons, at its end) leaves its region
//! behind, and by default the region is named after the process id: a later process
//! given the same id finds it, and libfabric refuses it (`shm file in use`), so that
//! process got no endpoint at all.
//!
//! libfabric also leaves the region of an endpoint never closed (a process's shared
//! endpoint for connecting) when the process exits.
//!
//! Here each region gets a name of its own (`gust-PID-NONCE`, never reused), the
//! process removes its regions when it exits, holds a shared `flock` on each for as
//! long as it lives (a lock the kernel drops when the process dies, in whatever pid
//! namespace), and each new endpoint first removes the `gust-` regions of this user
//! that no process holds.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};
use std::time::{Duration, SystemTime};

/// Where the provider keeps its regions.
const DIR: &str = "/dev/shm";
/// The provider's prefix of string addresses.
const PREFIX: &str = "fi_shm://";
/// A region this young may not be locked yet by the process creating it.
const GRACE: Duration = Duration::from_secs(10);

/// Whether `provider` is the shared-memory provider.
pub fn is_shm(provider: &str) -> bool {
    provider.split(';').any(|p| p == "shm")
}

/// A name for a new endpoint's region, unique on this node.
pub fn node_name() -> String {
    format!("gust-{}-{:016x}", std::process::id(), rand::random::<u64>())
}

/// Holds the region of the endpoint at `address` (`fi_shm://NAME`) locked until
/// dropped, and removes it when the process exits (libfabric removes it only when
/// the endpoint is closed, which a process's shared endpoints never are); None if
/// the region is not a file here (a provider built otherwise).
pub fn hold(address: &str) -> Option<Flock<File>> {
    let path = Path::new(DIR).join(address.strip_prefix(PREFIX)?);
    let held = Flock::lock(File::open(&path).ok()?, FlockArg::LockSharedNonblock).ok()?;
    remove_at_exit(path);
    Some(held)
}

/// Regions to remove when the process that made them exits (a forked child that
/// exits leaves its parent's alone).
static AT_EXIT: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

fn remove_at_exit(path: PathBuf) {
    static HOOK: Once = Once::new();
    extern "C" fn remove_all() {
        let me = std::process::id();
        // try_lock: at exit, a thread stopped while holding it must not hang us.
        let regions = AT_EXIT.try_lock().map(|v| v.clone()).unwrap_or_default();
        for (_, path) in regions.iter().filter(|(pid, _)| *pid == me) {
            let _ = std::fs::remove_file(path);
        }
    }
    // SAFETY: remove_all is a plain function that lives as long as the process.
    HOOK.call_once(|| unsafe {
        libc::atexit(remove_all);
    });
    AT_EXIT.lock().unwrap_or_else(|e| e.into_inner()).push((std::process::id(), path));
}

/// Removes the regions under `dir` that this user's GustFS processes left: named
/// `gust-…`, older than [`GRACE`], and locked by no one. Returns how many went.
pub fn sweep(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    let now = SystemTime::now();
    let mut gone = 0;
    for e in entries.flatten() {
        let path: PathBuf = e.path();
        let ours = e.file_name().to_str().is_some_and(|n| n.starts_with("gust-"));
        let Ok(meta) = e.metadata() else { continue };
        let old = meta.modified().ok().and_then(|m| now.duration_since(m).ok()).is_some_and(|age| age > GRACE);
        if !ours || !old || meta.uid() != me || !meta.is_file() {
            continue;
        }
        let Ok(f) = File::open(&path) else { continue };
        // An exclusive lock taken means no live process holds the region.
        if let Ok(held) = Flock::lock(f, FlockArg::LockExclusiveNonblock) {
            if std::fs::remove_file(&path).is_ok() {
                gone += 1;
            }
            drop(held);
        }
    }
    gone
}

/// [`sweep`] of the provider's directory.
pub fn sweep_stale() -> usize {
    sweep(Path::new(DIR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_removes_only_old_unheld_regions_of_gustfs() {
        let dir = tempfile::tempdir().unwrap();
        let old = SystemTime::now() - Duration::from_secs(60);
        let make = |name: &str, age: Option<SystemTime>| {
            let f = File::create(dir.path().join(name)).unwrap();
            if let Some(t) = age {
                f.set_modified(t).unwrap();
            }
        };
        make("gust-1-held", Some(old));
        make("gust-2-dead", Some(old));
        make("gust-3-new", None);
        make("12:0:0", Some(old));
        let held = Flock::lock(File::open(dir.path().join("gust-1-held")).unwrap(), FlockArg::LockSharedNonblock);
        assert!(held.is_ok());
        assert_eq!(sweep(dir.path()), 1);
        let mut left: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["12:0:0", "gust-1-held", "gust-3-new"]);
        drop(held);
        assert_eq!(sweep(dir.path()), 1, "let go: swept");
    }
}
