//! Two FUSE mounts of one instance, as on two nodes: each mount has its own kernel
//! caches (names, attributes, file pages), kept under the mount process's grants
//! and dropped when a daemon recalls them (crates/fuse/src/coherence.rs). What one
//! mount changes, the other shows at once, with the default options (1 s timeouts
//! before this, during which the other mount showed the old state); and what no one
//! changes is still answered by the kernel alone.
//! Needs /dev/fuse and root (or fusermount3).

mod common;

use common::{daemon_requests, listings_served};
use gust_e2e::mount::Mount;
use gust_e2e::Instance;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};

#[test]
fn what_one_mount_changes_the_other_shows_at_once() {
    let inst = Instance::start(3);
    let (a, b) = (Mount::new(&inst, &[]), Mount::new(&inst, &[]));

    // Contents and size: b reads (its kernel caches the attributes and pages), a
    // replaces the contents, b reads the new ones.
    fs::write(a.p("x"), b"one").unwrap();
    assert_eq!(fs::read(b.p("x")).unwrap(), b"one");
    assert_eq!(fs::metadata(b.p("x")).unwrap().len(), 3);
    fs::write(a.p("x"), b"two, longer").unwrap();
    assert_eq!(fs::metadata(b.p("x")).unwrap().len(), 11, "b's kernel kept the old size");
    assert_eq!(fs::read(b.p("x")).unwrap(), b"two, longer", "b's kernel kept the old pages");

    // Bytes changed in place, size unchanged, on a descriptor b holds open: once
    // a's writer closes (the file's attributes change on its daemon), b's next
    // read through the same descriptor sees them (close-to-open, and no stale page).
    fs::write(a.p("db"), vec![b'a'; 8192]).unwrap();
    let mut held = fs::File::open(b.p("db")).unwrap();
    let mut first = vec![0u8; 8192];
    held.read_exact(&mut first).unwrap();
    assert!(first.iter().all(|&c| c == b'a'));
    {
        let w = fs::OpenOptions::new().write(true).open(a.p("db")).unwrap();
        w.write_all_at(&[b'b'; 4096], 4096).unwrap();
        w.sync_all().unwrap();
    }
    let mut again = vec![0u8; 8192];
    held.seek(SeekFrom::Start(0)).unwrap();
    held.read_exact(&mut again).unwrap();
    assert!(again[..4096].iter().all(|&c| c == b'a') && again[4096..].iter().all(|&c| c == b'b'), "stale page");

    // Names: b looked y up; a renames it, then puts a directory where it was.
    fs::write(a.p("y"), b"y").unwrap();
    assert!(b.p("y").is_file());
    fs::rename(a.p("y"), a.p("z")).unwrap();
    assert!(!b.p("y").exists(), "b's kernel kept the renamed name");
    assert_eq!(fs::read(b.p("z")).unwrap(), b"y");
    fs::create_dir(a.p("y")).unwrap();
    assert!(b.p("y").is_dir(), "b's kernel kept a file where a directory is");
    fs::remove_file(a.p("z")).unwrap();
    assert!(!b.p("z").exists(), "b's kernel kept a removed name");

    // Attributes: a mode changed by a.
    fs::write(a.p("m"), b"").unwrap();
    assert_eq!(fs::metadata(b.p("m")).unwrap().permissions().mode() & 0o777, 0o644);
    fs::set_permissions(a.p("m"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(b.p("m")).unwrap().permissions().mode() & 0o777, 0o600, "b's kernel kept the old mode");

    // A file appended to by both in turn: each sees the other's bytes.
    let mut log = Vec::new();
    for i in 0..20 {
        let (m, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let mut f = fs::OpenOptions::new().create(true).append(true).open(m.p("log")).unwrap();
        writeln!(f, "line {i}").unwrap();
        drop(f);
        log.extend_from_slice(format!("line {i}\n").as_bytes());
        assert_eq!(fs::read(other.p("log")).unwrap(), log, "after line {i}");
    }
}

/// What no one else changes is answered by each mount's kernel under the grants,
/// with no request: the coherence costs nothing while there is no contention.
#[test]
fn uncontended_lookups_ask_no_daemon() {
    let inst = Instance::start(3);
    let (a, b) = (Mount::new(&inst, &[]), Mount::new(&inst, &[]));
    let c = inst.client();
    for i in 0..20 {
        fs::write(a.p(&format!("f{i}")), b"data").unwrap();
    }
    for m in [&a, &b] {
        for i in 0..20 {
            fs::metadata(m.p(&format!("f{i}"))).unwrap();
        }
    }
    let before = daemon_requests(&c);
    for m in [&a, &b] {
        for i in 0..20 {
            fs::metadata(m.p(&format!("f{i}"))).unwrap();
        }
    }
    let asked = daemon_requests(&c) - before;
    // A lease renewal may fall in the window (at most one per daemon and mount).
    assert!(asked <= 6, "{asked} requests for 40 stats of files no one changed");
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// A directory listed again and again is answered by the kernel's cache of it (no
/// request) while no name there changes; a name made, removed or renamed through
/// the other mount is in the next listing at once (the daemons recall the mount
/// process's grant on the directory's names, and the mount drops the kernel's
/// cached entries before the change goes ahead).
#[test]
fn listings_follow_names_made_on_the_other_mount() {
    let inst = Instance::start(3);
    let (a, b) = (Mount::new(&inst, &[]), Mount::new(&inst, &[]));
    let c = inst.client();
    fs::create_dir(a.p("d")).unwrap();
    let mut want: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
    for n in &want {
        fs::write(a.p(&format!("d/{n}")), n).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let before = listings_served(&c);
        for _ in 0..10 {
            assert_eq!(names(&b.p("d")), want);
        }
        if listings_served(&c) == before {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "listings of an unchanged directory still reach the daemons");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    fs::write(a.p("d/new"), b"x").unwrap();
    want.push("new".into());
    want.sort();
    assert_eq!(names(&b.p("d")), want, "a name made through the other mount");
    fs::remove_file(a.p("d/f0")).unwrap();
    want.retain(|n| n != "f0");
    assert_eq!(names(&b.p("d")), want, "a name removed through the other mount");
    fs::rename(a.p("d/f1"), a.p("d/g1")).unwrap();
    want = want.into_iter().map(|n| if n == "f1" { "g1".into() } else { n }).collect();
    want.sort();
    assert_eq!(names(&b.p("d")), want, "a name renamed through the other mount");
    // And from the client core (another process's view, as the preload library's).
    c.unlink("/d/f2").unwrap();
    want.retain(|n| n != "f2");
    assert_eq!(names(&b.p("d")), want);
    assert_eq!(names(&a.p("d")), want);
}
