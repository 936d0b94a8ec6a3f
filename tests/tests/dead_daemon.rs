//! A dead or hung daemon: operations that need it fail with EIO within the RPC
//! timeout; operations on the other daemons keep working.

mod common;

use common::*;
use gust_client::{Client, ClientOptions};
use gust_e2e::Instance;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(2);
/// Generous bound on one failing operation: the timeout plus scheduling slack.
const FAIL_WITHIN: Duration = Duration::from_secs(6);
const VICTIM: u32 = 2;
/// Files probed; fewer when every probe of the hung daemon waits out the timeout.
const FILES: usize = 40;
const FILES_HUNG: usize = 12;

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    assert!(t.elapsed() < FAIL_WITHIN, "{what} took {:?}", t.elapsed());
    r
}

/// With daemon VICTIM gone, each file's metadata operation fails with EIO exactly
/// when its record lives there; the rest work. Returns (failed, worked).
fn check_split(c: &Client, before: &[(String, u32)]) -> (usize, usize) {
    let (mut failed, mut worked) = (0, 0);
    for (p, home) in before {
        let r = timed(&format!("stat {p}"), || c.stat(p));
        if *home == VICTIM {
            assert_eq!(r.map(|_| ()), Err(gust_client::Errno(libc::EIO)), "stat {p} (on the dead daemon)");
            failed += 1;
        } else {
            assert_eq!(r.unwrap().size, 3, "stat {p} (on a live daemon)");
            worked += 1;
        }
    }
    (failed, worked)
}

/// Which daemon holds each file's record, found from the daemons' stat counters.
fn homes(c: &Client, files: usize) -> Vec<(String, u32)> {
    (0..files)
        .map(|i| {
            let p = format!("/f{i}");
            put(c, &p, b"abc");
            let before: Vec<u64> = (0..c.daemon_count()).map(|d| op_count(c, d, "stat")).collect();
            c.stat(&p).unwrap();
            let d = (0..c.daemon_count()).find(|&d| op_count(c, d, "stat") > before[d as usize]).unwrap();
            (p, d)
        })
        .collect()
}

/// A client that asks the daemons for everything: a record cached under a grant
/// is served within its lease whatever became of its daemon (docs/DESIGN.md,
/// "Grants"), and these probes are of operations that need the daemon. (A first
/// write opens the callback connection that grants need: size holds.)
fn probe_client(inst: &Instance, force_tcp: bool) -> Client {
    inst.client_with(ClientOptions { rpc_timeout: TIMEOUT, force_tcp, grants: false, ..Default::default() })
}

fn run(force_tcp: bool, hang: bool) {
    let inst = Instance::start_with(4, &["--chunk-size", "4k"]);
    let c = probe_client(&inst, force_tcp);
    let files = homes(&c, if hang { FILES_HUNG } else { FILES });
    assert!(files.iter().any(|f| f.1 == VICTIM) && files.iter().any(|f| f.1 != VICTIM));
    // A multi-chunk file: its chunks are spread over all four daemons.
    let big = pattern(1, 200_000);
    put(&c, "/big", &big);
    let pid = inst.daemon_pid(VICTIM) as i32;
    // SAFETY: signals to a daemon process this test started.
    unsafe { libc::kill(pid, if hang { libc::SIGSTOP } else { libc::SIGKILL }) };
    if hang {
        // The stop is asynchronous: wait until every thread of the daemon is stopped.
        let all_stopped = || {
            std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().all(|t| {
                let stat = std::fs::read_to_string(t.unwrap().path().join("stat")).unwrap_or_default();
                // The state follows the parenthesized command name.
                stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("T")
            })
        };
        assert!(gust_e2e::wait_until(Duration::from_secs(5), all_stopped), "daemon did not stop");
    }

    let (failed, worked) = check_split(&c, &files);
    eprintln!("{failed} operations failed with EIO, {worked} worked");
    assert!(c.last_transport_error().unwrap().contains(&format!("daemon {VICTIM}")));
    // A fresh client (no pooled connections) behaves the same.
    let fresh = probe_client(&inst, force_tcp);
    check_split(&fresh, &files[..6]);
    // Creating, writing and reading files whose daemons are all alive still works,
    // while a read that needs a chunk on the dead daemon fails (never zeros).
    let fd = timed("open /big", || c.open("/big", libc::O_RDONLY, 0));
    if let Ok(fd) = fd {
        let mut b = vec![0u8; big.len()];
        assert_err!(timed("read /big", || c.pread(fd, &mut b, 0)), libc::EIO);
        c.close(fd).unwrap();
    }
    assert_err!(timed("statfs", || c.statfs()), libc::EIO);
    assert_err!(timed("readdir /", || c.read_dir("/")), libc::EIO);
    for (p, home) in files.iter().filter(|f| f.1 != VICTIM).take(5) {
        // One-chunk files on live daemons may still have their chunk on the dead one.
        let fd = c.open(p, libc::O_RDWR, 0).unwrap();
        let r = timed("pwrite", || c.pwrite(fd, b"xyz", 0));
        match r {
            Ok(3) => {
                let mut b = [0u8; 3];
                c.pread(fd, &mut b, 0).unwrap();
                assert_eq!(&b, b"xyz");
            }
            other => assert_eq!(other, Err(gust_client::Errno(libc::EIO)), "{p} (metadata on {home})"),
        }
        c.close(fd).unwrap();
    }
    for d in (0..4).filter(|&d| d != VICTIM) {
        c.ping(d).unwrap();
    }
    assert_err!(timed("ping", || c.ping(VICTIM)), libc::EIO);
    if hang {
        // SAFETY: as above; a stopped process is killed by SIGKILL.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[test]
fn killed_daemon_unix_sockets() {
    run(false, false);
}

#[test]
fn killed_daemon_tcp() {
    run(true, false);
}

#[test]
fn hung_daemon_times_out_tcp() {
    run(true, true);
}

#[test]
fn hung_daemon_times_out_unix_sockets() {
    run(false, true);
}

/// A read with a buffer larger than the file asks the daemons of the chunks past
/// its end too (in the same round trip as the size). When only such a chunk's
/// daemon is dead, the read still returns the file: nothing past the end was
/// needed. A read that needs the dead daemon's bytes still fails with EIO.
#[test]
fn a_dead_daemon_holding_only_chunks_past_the_end_fails_no_read() {
    let inst = Instance::start_with(3, &["--chunk-size", "4k"]);
    let c = inst.client_with(ClientOptions { rpc_timeout: TIMEOUT, force_tcp: false, ..Default::default() });
    let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    // A file whose record and first chunk are on live daemons and whose second
    // chunk (past its end) is on the victim; and one whose first chunk is there.
    let (mut past_end, mut first) = (None, None);
    for i in 0..200 {
        let p = format!("/f{i}");
        put(&c, &p, &data);
        let id = c.lstat_record(&p).unwrap().file_id;
        let spans = c.chunk_spans_by_daemon(id, 8192);
        let holder = |off: u64| {
            spans
                .iter()
                .find(|(_, ss)| ss.iter().any(|s| s.offset <= off && off < s.offset + s.len as u64))
                .map(|(d, _)| *d)
        };
        let (md, c0, c1) = (c.metadata_daemon(&p), holder(0).unwrap(), holder(4096).unwrap());
        if md != VICTIM && c0 != VICTIM && c1 == VICTIM && past_end.is_none() {
            past_end = Some(p);
        } else if md != VICTIM && c0 == VICTIM && first.is_none() {
            first = Some(p);
        }
    }
    let (past_end, first) = (past_end.expect("a file with its second chunk on the victim"), first.unwrap());
    let pid = inst.daemon_pid(VICTIM) as i32;
    // SAFETY: kill(2) of the daemon process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let mut buf = vec![0u8; 8192];
    let fd = c.open(&past_end, libc::O_RDONLY, 0).unwrap();
    let n = timed("read past the end", || c.pread(fd, &mut buf, 0)).unwrap();
    assert_eq!(&buf[..n], &data[..], "the whole file, nothing more");
    c.close(fd).unwrap();
    let fd = c.open(&first, libc::O_RDONLY, 0).unwrap();
    assert_err!(timed("read of the dead daemon's chunk", || c.pread(fd, &mut buf, 0)), libc::EIO);
}
