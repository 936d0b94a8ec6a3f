//! Durability: a daemon killed with SIGKILL in the middle of a write-heavy run and
//! restarted on the same root directory still has every acknowledged byte.

mod common;

use common::*;
use gust_client::ClientOptions;
use gust_e2e::{wait_until, Instance};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WRITERS: usize = 3;
const FILES_PER_WRITER_MAX: usize = 3_000;
const RECORD_BYTES: usize = 64;
const VICTIM: u32 = 1;

fn record(writer: usize, seq: usize) -> Vec<u8> {
    let mut r = format!("<{writer}:{seq}:").into_bytes();
    r.resize(RECORD_BYTES - 1, b'a' + ((writer * 5 + seq) % 26) as u8);
    r.push(b'\n');
    r
}

/// What a writer saw acknowledged.
#[derive(Default)]
struct Acked {
    files: Vec<(String, u64, usize)>,
    records: Vec<(usize, usize)>,
}

#[test]
fn acknowledged_writes_survive_kill_9_and_restart() {
    let inst = Instance::start_with(3, &["--chunk-size", "4k"]);
    let opts = ClientOptions { rpc_timeout: Duration::from_secs(2), ..Default::default() };
    let c = Arc::new(inst.client_with(opts.clone()));
    for w in 0..WRITERS {
        c.mkdir(&format!("/w{w}"), 0o755).unwrap();
    }
    put(&c, "/log", b"");
    let old_entry = inst.hosts_file().daemons[VICTIM as usize].clone();

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (c, stop, failures, acked) = (c.clone(), stop.clone(), failures.clone(), acked.clone());
            std::thread::spawn(move || {
                for i in 0..FILES_PER_WRITER_MAX {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let path = format!("/w{w}/f{i}");
                    let seed = (w * 1_000_000 + i) as u64;
                    let len = 1 + (i * 7_919) % 20_000;
                    let r = (|| {
                        let fd = c.open(&path, libc::O_CREAT | libc::O_WRONLY, 0o644)?;
                        let r = c.write(fd, &pattern(seed, len));
                        c.close(fd)?;
                        r
                    })();
                    match r {
                        Ok(n) if n == len => acked.lock().unwrap().files.push((path, seed, len)),
                        Ok(n) => panic!("short write {n} of {len}"),
                        Err(_) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let r = (|| {
                        let fd = c.open("/log", libc::O_WRONLY | libc::O_APPEND, 0)?;
                        let r = c.write(fd, &record(w, i));
                        c.close(fd)?;
                        r
                    })();
                    match r {
                        Ok(_) => acked.lock().unwrap().records.push((w, i)),
                        Err(_) => {
                            failures.fetch_add(1, Ordering::Relaxed);
                            // Not a wait for anything: a pause between failed
                            // appends so that the outage is not a busy loop.
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
            })
        })
        .collect();

    // Let writes flow, then kill the daemon mid-run.
    assert!(
        wait_until(Duration::from_secs(20), || acked.lock().unwrap().files.len() >= 200),
        "writers made no progress"
    );
    let acked_before_kill = acked.lock().unwrap().files.len();
    // SAFETY: plain kill(2) of the daemon's pid.
    assert_eq!(unsafe { libc::kill(old_entry.pid as i32, libc::SIGKILL) }, 0);
    assert!(
        wait_until(Duration::from_secs(10), || failures.load(Ordering::Relaxed) >= 5),
        "no write failed while the daemon was dead"
    );
    // The restart listens on the same address: the killed process must have let go of it.
    assert!(
        wait_until(Duration::from_secs(10), || inst.daemon_gone(VICTIM)),
        "daemon {VICTIM} still accepts connections after kill -9"
    );

    let log_path = inst.restart_daemon(VICTIM);
    let up = wait_until(Duration::from_secs(20), || {
        let h = inst.hosts_file();
        h.daemons[VICTIM as usize].pid != old_entry.pid && inst.client_with(opts.clone()).ping(VICTIM).is_ok()
    });
    assert!(
        up,
        "restarted daemon did not answer; its log:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    let new_entry = inst.hosts_file().daemons[VICTIM as usize].clone();
    assert_eq!(new_entry.tcp_addr(), old_entry.tcp_addr());
    assert_eq!(new_entry.rootdir, old_entry.rootdir);

    // Writers keep going against the restarted daemon for a while.
    let n_restart = acked.lock().unwrap().files.len();
    assert!(
        wait_until(Duration::from_secs(20), || acked.lock().unwrap().files.len() >= n_restart + 100),
        "writers made no progress after the restart"
    );
    stop.store(true, Ordering::Relaxed);
    for h in writers {
        h.join().unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    eprintln!(
        "acknowledged {} files ({acked_before_kill} before the kill) and {} records; {} operations failed during the outage",
        acked.files.len(),
        acked.records.len(),
        failures.load(Ordering::Relaxed)
    );

    // A fresh client sees every acknowledged byte.
    let t = Instant::now();
    let fresh = inst.client();
    for (path, seed, len) in &acked.files {
        let got = get(&fresh, path);
        assert_eq!(got.len(), *len, "{path}: size after restart");
        assert!(got == pattern(*seed, *len), "{path}: content differs after restart");
    }
    let log = get(&fresh, "/log");
    let mut found = HashSet::new();
    for slot in log.chunks(RECORD_BYTES) {
        let head = String::from_utf8_lossy(&slot[..slot.len().min(20)]).to_string();
        let mut it = head.trim_start_matches('<').split(':');
        let (Some(w), Some(i)) = (it.next().and_then(|x| x.parse().ok()), it.next().and_then(|x| x.parse().ok()))
        else {
            continue; // an append that failed part-way: its slot may hold zeros
        };
        if slot == record(w, i) {
            found.insert((w, i));
        }
    }
    for r in &acked.records {
        assert!(found.contains(r), "acknowledged record {r:?} missing from /log after the restart");
    }
    eprintln!("verified in {:?}", t.elapsed());
    let log_text = std::fs::read_to_string(&log_path).unwrap();
    assert!(log_text.contains(&format!("daemon {VICTIM} of instance")), "restart log:\n{log_text}");
}

/// A client keeps working across a daemon restart on a new port: its pooled
/// connections are dead, so idempotent requests are sent again on a new connection,
/// and the connection follows the daemon's new line in the hosts file.
#[test]
fn client_follows_a_daemon_restarted_on_a_new_port() {
    let inst = Instance::start(2);
    let c =
        inst.client_with(ClientOptions { rpc_timeout: Duration::from_secs(5), force_tcp: true, ..Default::default() });
    // Files whose metadata lives on the victim, so every stat below needs it.
    let mut on_victim = Vec::new();
    for i in 0..200 {
        let p = format!("/f{i}");
        put(&c, &p, p.as_bytes());
        if gust_placement_of(&c, &p) == VICTIM {
            on_victim.push(p);
        }
    }
    assert!(on_victim.len() > 20, "placement put too few files on daemon {VICTIM}");
    for p in &on_victim {
        c.stat(p).unwrap(); // warm the connection pool
    }
    let old = inst.hosts_file().daemons[VICTIM as usize].clone();
    unsafe { libc::kill(old.pid as i32, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(old.tcp_addr()).is_err()));
    inst.restart_daemon_at(VICTIM, "127.0.0.1:0");
    assert!(wait_until(Duration::from_secs(20), || {
        let e = inst.hosts_file().daemons[VICTIM as usize].clone();
        e.pid != old.pid && std::net::TcpStream::connect(e.tcp_addr()).is_ok()
    }));
    assert_ne!(inst.hosts_file().daemons[VICTIM as usize].tcp_addr(), old.tcp_addr());
    // The same client, without being told: every record and byte is back.
    for p in &on_victim {
        assert_eq!(get(&c, p), p.as_bytes(), "{p}");
    }
}

/// Which daemon holds a path's metadata: the one whose stat counter moves.
fn gust_placement_of(c: &gust_client::Client, p: &str) -> u32 {
    let before: Vec<u64> = (0..c.daemon_count()).map(|d| op_count(c, d, "stat")).collect();
    c.stat(p).unwrap();
    (0..c.daemon_count()).find(|&d| op_count(c, d, "stat") > before[d as usize]).expect("some daemon served the stat")
}
