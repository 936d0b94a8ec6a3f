//! Claims, the client's part (docs/DESIGN.md, "Claims"; the daemon's is
//! gust-daemon's grants/claims.rs): a daemon that grants a claim on a directory
//! (`REPLY_CLAIMED` on a create) lets this process alone make names there among
//! those it holds, until it recalls it. Meanwhile this process defers its creates
//! there: an open with O_CREAT sends nothing, its small writes stay in the
//! descriptor, and its close queues the file for a batch (inline.rs,
//! create_batch.rs). Nobody else can tell: any request of another process that names
//! the directory recalls the claim first, and the recall is answered only once what
//! was deferred is sent (`settle`, run by the callback connection's reader thread,
//! whatever the application is doing).
//!
//! Without a claim nothing is deferred: an open with O_CREAT creates the file at
//! once, so that another process that opens it next finds it (MPI-IO's collective
//! open, parallel HDF5).
//!
//! Only processes whose front end armed claims (`Client::arm_claims`: the preload
//! library and `gust bench`) take them: the recall runs the client's own code.
//!
//! Not for: grants on records and listings (grants.rs), the queue (create_batch.rs).

use crate::Client;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// What settles this process's deferred creates (`Client::settle_for_recall`).
type Settler = Arc<dyn Fn() + Send + Sync>;

/// The claims this process holds: (daemon, directory).
#[derive(Default)]
pub(crate) struct Held {
    armed: AtomicBool,
    set: Mutex<HashSet<(u32, String)>>,
    count: AtomicUsize,
    settler: RwLock<Option<Settler>>,
}

impl Held {
    pub(crate) fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// A reply granted the claim on `dir` of `daemon`.
    pub(crate) fn gained(&self, daemon: u32, dir: &str) {
        if !self.armed() {
            return;
        }
        let mut s = self.set.lock().unwrap_or_else(|e| e.into_inner());
        if s.insert((daemon, dir.to_string())) {
            self.count.store(s.len(), Ordering::Release);
        }
    }

    /// The daemon recalls the claim on `dir`: whether this process held it.
    pub(crate) fn lost(&self, daemon: u32, dir: &str) -> bool {
        let mut s = self.set.lock().unwrap_or_else(|e| e.into_inner());
        let held = s.remove(&(daemon, dir.to_string()));
        self.count.store(s.len(), Ordering::Release);
        held
    }

    /// Every claim of `daemon` is gone (its callback connection ended, or its
    /// lease ran out while this process was stopped).
    pub(crate) fn lost_daemon(&self, daemon: u32) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut s = self.set.lock().unwrap_or_else(|e| e.into_inner());
        s.retain(|(d, _)| *d != daemon);
        self.count.store(s.len(), Ordering::Release);
    }

    /// Whether any claim of `daemon` is held.
    pub(crate) fn holds_any(&self, daemon: u32) -> bool {
        self.count.load(Ordering::Acquire) > 0
            && self.set.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|(d, _)| *d == daemon)
    }

    /// In a child after fork: none of the parent's claims are its own. False if
    /// another thread of the parent held the lock at the fork.
    pub(crate) fn forget_all_after_fork(&self) -> bool {
        match self.set.try_lock() {
            Ok(mut s) => {
                s.clear();
                self.count.store(0, Ordering::Release);
                true
            }
            Err(_) => false,
        }
    }

    /// Runs `f` if the claim on `dir` of `daemon` is held, with the claims locked:
    /// a recall (which takes the lock first) then finds what `f` deferred.
    pub(crate) fn while_held<T>(&self, daemon: u32, dir: &str, f: impl FnOnce() -> T) -> Option<T> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let s = self.set.lock().unwrap_or_else(|e| e.into_inner());
        // A lookup without allocating: the set is small (a process's directories).
        s.iter().any(|(d, p)| *d == daemon && p == dir).then(f)
    }

    /// Sends everything deferred (a recall, on the callback connection's thread).
    pub(crate) fn settle(&self) {
        let s = self.settler.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(settle) = s {
            settle();
        }
    }

    /// How many are held now.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

impl Client {
    /// Lets this process take claims on directories and defer its creates under
    /// them (see the module doc). The client must live as long as the process: the
    /// recall of a claim runs its code on another thread. A no-op where grants are
    /// off (copies, cache mode, the node proxy, `GUST_GRANTS=0`).
    pub fn arm_claims(&'static self) {
        if !self.transport.grants.on() {
            return;
        }
        let held = self.transport.grants.claims();
        *held.settler.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(move || self.settle_for_recall()));
        held.armed.store(true, Ordering::Release);
    }

    /// Claims this process holds now (tests, `gust bench`).
    pub fn claims_held(&self) -> usize {
        self.transport.grants.claims().len()
    }

    /// After a create of `p` on `daemon`: keeps the claim its reply granted.
    pub(crate) fn claim_answered(&self, daemon: u32, p: &str) {
        if crate::grants::last_claimed() {
            self.transport.grants.claims().gained(daemon, gust_proto::path::parent(p));
        }
    }

    /// Runs `f` if this process holds the claim on `p`'s directory on the daemon of
    /// `p`'s record (see `Held::while_held`).
    pub(crate) fn while_claimed<T>(&self, p: &str, f: impl FnOnce() -> T) -> Option<T> {
        let held = self.transport.grants.claims();
        if held.len() == 0 {
            return None;
        }
        held.while_held(self.md_daemon(p), gust_proto::path::parent(p), f)
    }

    /// Sends what this process deferred: the creates of open descriptors (as
    /// ordinary files; waiting for a thread that is writing through one), then the
    /// queued creates and unlinks. A recall is answered after this.
    fn settle_for_recall(&self) {
        self.settle_open_creates_waiting();
        self.flush_creates();
        self.flush_removes();
    }
}
