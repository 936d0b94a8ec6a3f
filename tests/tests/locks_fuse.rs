//! File locks through a FUSE mount (docs/FUSE.md, "File locks"): the kernel sends
//! them to the mount, which has the daemons keep them, so processes on the mount
//! contend with each other and with processes under the preload library (a lock the
//! kernel kept would not see those). `--local-locks` leaves them to the kernel.
//! Needs /dev/fuse and root (or fusermount3), python3 and cc.

mod common;

use common::locker::{eagain, locker_bin, send_waiting, sqlite_two_writers, Locker};
use gust_e2e::mount::Mount;
use gust_e2e::Instance;
use std::path::Path;

fn on_mount(bin: &Path) -> Locker {
    Locker::start(bin, &[])
}

#[test]
fn processes_on_the_mount_and_under_the_library_share_the_daemons_locks() {
    let dir = tempfile::tempdir().unwrap();
    let bin = locker_bin(dir.path());
    let inst = Instance::start(3);
    let c = inst.client();
    let m = Mount::new(&inst, &[]);
    let path = m.p("f");
    let path = path.to_str().unwrap();
    let (mut a, mut b) = (on_mount(&bin), on_mount(&bin));
    let mut p = Locker::preloaded(&inst, &bin);
    let (fa, fb, fp) = (a.open(path), b.open(path), p.open("/gustfs/f"));
    // fcntl between two processes of the mount, and with one of the library.
    assert_eq!(a.ask(&format!("lock {fa} wr 0 10")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} rd 5 1")), eagain());
    assert_eq!(p.ask(&format!("lock {fp} rd 5 1")), eagain(), "the library's process sees the mount's lock");
    assert_eq!(p.ask(&format!("getlk {fp} wr 0 0")), format!("locked wr 0 10 {}", a.pid()));
    assert_eq!(b.ask(&format!("getlk {fb} wr 0 0")), format!("locked wr 0 10 {}", a.pid()));
    assert_eq!(p.ask(&format!("lock {fp} wr 20 5")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} rd 22 1")), eagain(), "the mount's process sees the library's lock");
    // A waiting F_SETLKW on the mount, granted by the unlock.
    send_waiting(&mut b, &c, &format!("lock {fb} wr 0 5 wait"));
    // The unlock as F_SETLKW (Python's lockf sends it so): it never waits.
    assert_eq!(a.ask(&format!("lock {fa} un 0 0 wait")), "ok");
    assert_eq!(b.answer(), "ok");
    assert_eq!(p.ask(&format!("lock {fp} rd 0 1")), eagain(), "b holds it now");
    // POSIX: closing any descriptor of the file ends the process's locks.
    let fb2 = b.open(path);
    assert_eq!(b.ask(&format!("close {fb2}")), "ok");
    assert_eq!(p.ask(&format!("lock {fp} rd 0 1")), "ok", "b's locks went with its other descriptor's close");
    // flock through the mount: a whole-file lock of the open file.
    assert_eq!(p.ask(&format!("lock {fp} un 0 0")), "ok");
    assert_eq!(a.ask(&format!("flock {fa} ex nb")), "ok");
    assert_eq!(b.ask(&format!("flock {fb} sh nb")), eagain());
    assert_eq!(a.ask(&format!("close {fa}")), "ok", "its last close ends it");
    assert_eq!(b.ask(&format!("flock {fb} sh nb")), "ok");
}

#[test]
fn a_killed_waiter_on_the_mount_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let bin = locker_bin(dir.path());
    let inst = Instance::start(2);
    let c = inst.client();
    let m = Mount::new(&inst, &[]);
    let path = m.p("k");
    let path = path.to_str().unwrap();
    let mut p = Locker::preloaded(&inst, &bin);
    let fp = p.open("/gustfs/k");
    assert_eq!(p.ask(&format!("lock {fp} wr 0 0")), "ok");
    let mut w = on_mount(&bin);
    let fw = w.open(path);
    send_waiting(&mut w, &c, &format!("lock {fw} wr 0 0 wait"));
    // The kernel waits for the mount's answer even for a killed process: the mount
    // answers a wait EINTR after a second (locks.rs, `WAIT_SLICE`), and then the
    // process dies instead of asking again. `drop` waits for it.
    w.signal(libc::SIGKILL);
    drop(w);
    // Its wait is gone with it: the unlock grants nothing to the dead process.
    assert_eq!(p.ask(&format!("lock {fp} un 0 0")), "ok");
    let mut q = on_mount(&bin);
    let fq = q.open(path);
    assert_eq!(q.ask(&format!("lock {fq} wr 0 0")), "ok", "no lock of the killed waiter in the way");
}

#[test]
fn sqlite_in_two_processes_on_the_mount() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    sqlite_two_writers(&inst, m.path(), false);
}

/// `--local-locks`: the kernel keeps the locks, so the library's process does not
/// see the mount's (what every mount did before the daemons kept locks).
#[test]
fn local_locks_stay_in_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let bin = locker_bin(dir.path());
    let inst = Instance::start(2);
    let m = Mount::new(&inst, &["--local-locks"]);
    let path = m.p("l");
    let (mut a, mut b) = (on_mount(&bin), on_mount(&bin));
    let mut p = Locker::preloaded(&inst, &bin);
    let (fa, fb, fp) = (a.open(path.to_str().unwrap()), b.open(path.to_str().unwrap()), p.open("/gustfs/l"));
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 0")), eagain(), "the kernel's own locks, on this node");
    assert_eq!(p.ask(&format!("lock {fp} wr 0 0")), "ok", "not the daemons'");
}
