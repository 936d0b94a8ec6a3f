//! A client process killed (SIGKILL) while connected over a fabric: the serving
//! side's stream ends within a few keepalive intervals, as a socket's ends on a
//! reset, instead of waiting for ever (a daemon would keep a thread per dead
//! client). In a binary of its own: it shortens the keepalive interval for its
//! process (GUST_FABRIC_KEEPALIVE_MS) and runs itself again as the client.

use gust_transport::ofi::{connect, unavailable, OfiAddr, OfiListener};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Set in the child: the address to connect to.
const CHILD: &str = "GUST_TEST_FABRIC_CHILD";

/// The client, when this binary runs as the child: connects, says hello, waits.
#[test]
fn child() {
    let Ok(at) = std::env::var(CHILD) else { return };
    let mut s = connect(&OfiAddr::parse(&at).unwrap(), Duration::from_secs(10)).unwrap();
    s.write_all(b"hi").unwrap();
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
