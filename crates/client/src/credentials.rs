//! Who is calling: the effective uid, gid and supplementary groups that new records
//! are owned by and that `chown` and `access` check against.
//!
//! A process-wide front end (preload, C API, Python) acts as its process: geteuid,
//! getegid, getgroups. A front end that serves other processes (the FUSE mount)
//! runs each request with that request's caller via [`as_caller`]; the setting is
//! per thread and lasts for the closure only.
//!
//! Not for: enforcing mode bits on every call. The client core checks only what it
//! must decide itself (chown's rules, `access`); a FUSE mount shared between users
//! leaves the mode checks to the kernel (default_permissions). See docs/SEMANTICS.md.

use std::cell::RefCell;

/// Bound on the supplementary groups read for one caller (Linux's NGROUPS_MAX).
const GROUPS_MAX: usize = 65_536;

/// The ids a call acts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (may or may not repeat `gid`).
    pub groups: Vec<u32>,
}

thread_local! {
    static CALLER: RefCell<Option<Credentials>> = const { RefCell::new(None) };
}

/// The caller set on this thread, if any. None also once the thread's locals are
/// destroyed: the main thread's are before `exit` runs its handlers, which may
/// still write (the preload library serves them; gust-client's exit.rs).
fn caller<T>(f: impl FnOnce(&Credentials) -> T) -> Option<T> {
    CALLER.try_with(|c| c.borrow().as_ref().map(f)).ok().flatten()
}

impl Credentials {
    /// This process's effective ids and supplementary groups.
    pub fn of_process() -> Credentials {
        // SAFETY: geteuid/getegid have no preconditions; getgroups writes at most
        // `n` entries into a buffer of that many.
        unsafe {
            let n = libc::getgroups(0, std::ptr::null_mut()).clamp(0, GROUPS_MAX as i32);
            let mut groups = vec![0 as libc::gid_t; n as usize];
            let got = libc::getgroups(n, groups.as_mut_ptr());
            groups.truncate(got.max(0) as usize);
            Credentials { uid: libc::geteuid(), gid: libc::getegid(), groups }
        }
    }

    /// Effective uid and gid only (no groups): what a create needs, without the
    /// getgroups call.
    pub(crate) fn owner() -> (u32, u32) {
        caller(|c| (c.uid, c.gid)).unwrap_or_else(|| {
            // SAFETY: geteuid/getegid have no preconditions.
            unsafe { (libc::geteuid(), libc::getegid()) }
        })
    }

    /// The caller of the current call: the one set by [`as_caller`] on this thread,
    /// else this process.
    pub fn current() -> Credentials {
        caller(Credentials::clone).unwrap_or_else(Credentials::of_process)
    }

    /// Whether the current caller is root, without the getgroups call.
    pub(crate) fn is_root_caller() -> bool {
        Credentials::owner().0 == 0
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Runs `f` with `who` as the caller of every client call it makes on this thread.
pub fn as_caller<T>(who: Credentials, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Credentials>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CALLER.with(|c| *c.borrow_mut() = prev);
        }
    }
    let prev = CALLER.with(|c| c.borrow_mut().replace(who));
    let _restore = Restore(prev);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_caller_is_scoped_and_nests() {
        let me = Credentials::of_process();
        assert_eq!(Credentials::current(), me);
        let a = Credentials { uid: 1234, gid: 55, groups: vec![7] };
        as_caller(a.clone(), || {
            assert_eq!(Credentials::current(), a);
            assert_eq!(Credentials::owner(), (1234, 55));
            assert!(a.in_group(7) && a.in_group(55) && !a.in_group(8));
            as_caller(Credentials { uid: 0, gid: 0, groups: vec![] }, || assert!(Credentials::current().is_root()));
            assert_eq!(Credentials::current(), a);
        });
        assert_eq!(Credentials::current(), me);
        // Other threads never see it.
        as_caller(a, || std::thread::spawn(Credentials::current).join().unwrap());
        assert_eq!(Credentials::current(), me);
    }
}
