//! A client process killed (SIGKILL) while connected over a fabric: the serving
//! side's stream ends within a few keepalive intervals, as a socket's ends on a
//! reset, instead of waiting for ever (a daemon would keep a thread per dead
//! client). In a binary of its own: it shortens the keepalive interval for its
//! process (GUST_FABRIC_KEEPALIVE_MS) and runs itself again as the client.
//! The killed client's shared-memory region (/dev/shm) is removed by the next shm
//! endpoint opened on the node.

use gust_transport::ofi::{connect, unavailable, OfiAddr, OfiListener};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Set in the child: the address to connect to.
const CHILD: &str = "GUST_TEST_FABRIC_CHILD";

/// Set in the child: exit after saying hello instead of waiting to be killed.
const CHILD_EXITS: &str = "GUST_TEST_FABRIC_CHILD_EXITS";

/// The client, when this binary runs as the child: connects, says hello, waits
/// (to be killed, or for a byte and then exits).
#[test]
fn child() {
    let Ok(at) = std::env::var(CHILD) else { return };
    let mut s = connect(&OfiAddr::parse(&at).unwrap(), Duration::from_secs(10)).unwrap();
    s.write_all(b"hi").unwrap();
    if std::env::var(CHILD_EXITS).is_ok() {
        s.read_exact(&mut [0u8; 1]).unwrap();
        return;
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[test]
fn a_killed_peer_ends_the_stream() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    std::env::set_var("GUST_FABRIC_KEEPALIVE_MS", "200");
    for (provider, address) in [("tcp;ofi_rxm", "127.0.0.1"), ("shm", "-")] {
        let l = OfiListener::bind(&OfiAddr { provider: provider.into(), address: address.into() }).unwrap();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture"])
            .env(CHILD, l.local().to_string())
            .spawn()
            .unwrap();
        let mut s = l.accept().unwrap();
        s.set_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut hi = [0u8; 2];
        s.read_exact(&mut hi).unwrap();
        assert_eq!(&hi, b"hi");
        child.kill().unwrap();
        child.wait().unwrap();
        let t = Instant::now();
        let r = s.read(&mut [0u8; 1]);
        let waited = t.elapsed();
        assert!(
            matches!(&r, Ok(0)) || matches!(&r, Err(e) if e.kind() != std::io::ErrorKind::TimedOut),
            "{provider}: {r:?} after {waited:?}"
        );
        assert!(waited < Duration::from_secs(20), "{provider}: the end took {waited:?}");
        eprintln!("{provider}: a killed peer's stream ended after {waited:?}");
    }
}

/// The files in /dev/shm whose names start with `prefix`.
fn regions(prefix: &str) -> Vec<std::path::PathBuf> {
    let all = std::fs::read_dir("/dev/shm").unwrap().flatten();
    all.filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).map(|e| e.path()).collect()
}

/// In the parent with libfabric: an shm listener and a child connected to it
/// (which exits after a byte if `exits`, else waits to be killed), past its hello.
fn shm_child(exits: bool) -> Option<(OfiListener, std::process::Child, Box<dyn gust_transport::Stream>)> {
    if std::env::var(CHILD).is_ok() {
        return None;
    }
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return None;
    }
    let l = OfiListener::bind(&OfiAddr { provider: "shm".into(), address: "-".into() }).unwrap();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child", "--nocapture"]).env(CHILD, l.local().to_string());
    if exits {
        cmd.env(CHILD_EXITS, "1");
    }
    let child = cmd.spawn().unwrap();
    let mut s = l.accept().unwrap();
    s.read_exact(&mut [0u8; 2]).unwrap();
    Some((l, child, s))
}

#[test]
fn a_process_that_exits_removes_its_region() {
    let Some((_l, mut child, mut s)) = shm_child(true) else { return };
    let made = format!("gust-{}-", child.id());
    assert_eq!(regions(&made).len(), 1, "the child has its region while it runs");
    s.write_all(b"!").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(regions(&made), Vec::<std::path::PathBuf>::new(), "gone with the child");
}

#[test]
fn a_killed_process_region_is_swept_by_the_next_endpoint() {
    let Some((_l, mut child, _s)) = shm_child(false) else { return };
    let left = format!("gust-{}-", child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    let stale = regions(&left);
    assert_eq!(stale.len(), 1, "the killed child's region stays behind: {stale:?}");
    // Past the grace a region gets between its creation and its owner's lock.
    let old = std::time::SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options().write(true).open(&stale[0]).unwrap().set_modified(old).unwrap();
    let mine = regions(&format!("gust-{}-", std::process::id()));
    for m in &mine {
        std::fs::File::options().write(true).open(m).unwrap().set_modified(old).unwrap();
    }

    let _next = OfiListener::bind(&OfiAddr { provider: "shm".into(), address: "-".into() }).unwrap();
    assert!(!stale[0].exists(), "the next endpoint removes the dead process's region");
    assert!(mine.iter().all(|m| m.exists()), "and leaves the live ones: {mine:?}");
}
