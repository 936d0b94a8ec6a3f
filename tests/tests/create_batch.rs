//! Batched deferred creates (gust-client create_batch.rs, daemon create_batch.rs):
//! under a directory's claim (claims.rs), small files created, written and closed
//! go to their metadata daemons many to a request; the creating client sees them at
//! once, and so does any other, whose request recalls the claim and so sends the
//! queue first; a create that fails at the flush is reported by the next close or
//! fsync, and nothing is lost.

mod common;

use common::{get, op_total, put};
use gust_client::{Client, ClientOptions};
use gust_e2e::{gust_bin, Instance};
use libc::{O_CREAT, O_EXCL, O_TRUNC, O_WRONLY};
use std::process::Command;

const BATCH: usize = 64;

fn put_deferred(c: &Client, p: &str, data: &[u8], flags: i32) {
    let fd = c.open_deferred(p, O_CREAT | O_WRONLY | flags, 0o644).unwrap();
    assert_eq!(c.write(fd, data).unwrap(), data.len());
    c.close(fd).unwrap();
}

fn content(i: usize) -> Vec<u8> {
    (0..4096).map(|j| ((i * 31 + j * 7) % 251) as u8).collect()
}

/// 256 files of 4 KiB in a fresh directory: after the first create on each daemon
/// (which brings its claim), the closes queue and go out 64 to a request, with no
/// single creates; another client finds every one.
#[test]
fn batches_of_creates_under_claims() {
    let inst = Instance::start(4);
    let c = inst.claiming_client(ClientOptions::default());
    c.set_create_batch(BATCH);
    let other = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    let sent = c.rpcs_sent();
    let n = 256;
    for i in 0..n {
        put_deferred(c, &format!("/d/f{i}"), &content(i), O_TRUNC);
    }
    c.settle_all();
    let requests = c.rpcs_sent() - sent;
    assert!(c.claims_held() > 0, "no claim was granted");
    // Without claims: a create and a write per file (512). A flush is due at 64
    // files or 50 ms, so a slow run sends more batches, each still many files.
    assert!(requests <= 64, "{requests} requests for {n} files");
    assert!(op_total(c, "create_inline_batch") > 0);
    for i in 0..n {
        assert_eq!(get(&other, &format!("/d/f{i}")), content(i), "f{i}");
    }
    // A deferred open of a queued path sends the queue first: the second create
    // of the same path is ordered after the first.
    put_deferred(c, "/d/twice", b"first version", O_TRUNC);
    put_deferred(c, "/d/twice", b"second", O_TRUNC);
    assert_eq!(get(&other, "/d/twice"), b"second");
}

/// Another client's exclusive create of a path this one has queued: the recall
/// sends the queue first, so the other finds the file (EEXIST) with this one's data.
#[test]
fn another_clients_exclusive_create_finds_the_queued_file() {
    let inst = Instance::start(1);
    let c = inst.claiming_client(ClientOptions::default());
    c.set_create_batch(BATCH);
    let other = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    put_deferred(c, "/d/first", b"first", O_TRUNC);
    assert_eq!(c.claims_held(), 1);
    put_deferred(c, "/d/x", b"mine", O_TRUNC);
    assert_err!(other.open("/d/x", O_CREAT | O_EXCL | O_WRONLY, 0o644), libc::EEXIST);
    assert_eq!(get(&other, "/d/x"), b"mine");
}

/// fsync sends the queue.
#[test]
fn fsync_sends_the_queue() {
    let inst = Instance::start(1);
    let c = inst.claiming_client(ClientOptions::default());
    c.set_create_batch(BATCH);
    put(c, "/log", b"x");
    let log = c.open("/log", O_WRONLY, 0).unwrap();
    assert_eq!(c.claims_held(), 1);
    let batches = op_total(c, "create_inline_batch");
    put_deferred(c, "/a", b"a", O_TRUNC);
    put_deferred(c, "/b", b"b", O_TRUNC);
    c.fsync(log).unwrap();
    assert_eq!(op_total(c, "create_inline_batch"), batches + 1, "one batch for both");
    c.close(log).unwrap();
}

/// Real programs under the preload library with GUST_CREATE_BATCH: a shell writing
/// 100 small files sends no single create, its children (cat, forked after the
/// writes) find the files, and a program that exits leaves them all.
#[test]
fn preload_programs_batch_their_creates() {
    let inst = Instance::start(3);
    let c = inst.client();
    let (singles, batches) = (op_total(&c, "create_inline"), op_total(&c, "create_inline_batch"));
    let script =
        "set -euo pipefail; mkdir /gustfs/s; for i in $(seq 1 100); do echo \"line $i\" > /gustfs/s/f$i; done; \
                  cat /gustfs/s/f7 /gustfs/s/f100; \
                  python3 -c 'import os\nfor i in range(10):\n  open(\"/gustfs/s/p%d\" % i, \"w\").write(\"p%d\" % i)'";
    let out = Command::new(gust_bin())
        .args(["run", "--", "bash", "-c", script])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .env("GUST_CREATE_BATCH", "32")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "line 7\nline 100\n");
    assert_eq!(op_total(&c, "create_inline"), singles, "no single creates");
    let sent = op_total(&c, "create_inline_batch") - batches;
    // 110 files on 3 daemons: at least 110/32 flushes of up to 3 requests (bash
    // sends before each fork of cat and at exit, python at exit).
    assert!((4..=3 * 8).contains(&sent), "{sent} batch requests for 110 files");
    for i in [1, 50, 100] {
        assert_eq!(get(&c, &format!("/s/f{i}")), format!("line {i}\n").as_bytes());
    }
    for i in 0..10 {
        assert_eq!(get(&c, &format!("/s/p{i}")), format!("p{i}").as_bytes());
    }
}

/// A daemon that is gone when the queue is sent: the flush fails, the failure is
/// reported (by the close after the fsync that met the dead daemon itself), and the
/// file does not exist once the daemon is back: the error did not vanish.
#[test]
fn a_lost_daemon_fails_the_batch_and_the_close_says_so() {
    let inst = Instance::start(1);
    let c =
        inst.claiming_client(ClientOptions { rpc_timeout: std::time::Duration::from_secs(2), ..Default::default() });
    c.set_create_batch(BATCH);
    put(c, "/log", b"x");
    let log = c.open("/log", O_WRONLY, 0).unwrap();
    assert_eq!(c.claims_held(), 1);
    put_deferred(c, "/a", b"queued", O_TRUNC);
    let pid = inst.daemon_pid(0) as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    gust_e2e::wait_until(std::time::Duration::from_secs(10), || unsafe { libc::kill(pid, 0) } != 0);
    assert!(c.fsync(log).is_err(), "fsync meets the dead daemon");
    assert!(c.close(log).is_err(), "the failed batched create is reported");
    inst.restart_daemon(0);
    let other = inst.client();
    let back = gust_e2e::wait_until(std::time::Duration::from_secs(20), || other.ping(0).is_ok());
    assert!(back, "daemon restarted");
    assert_err!(other.stat("/a"), libc::ENOENT);
    assert_eq!(get(&other, "/log"), b"x");
}

/// Threads of one process replace their own files in a shared fresh directory
/// (each `write_whole`: a create deferred to its close, as Python's `write_bytes`)
/// and read each back at once: every read sees what its thread's close put there,
/// and a stat after its unlink finds nothing.
/// Before, a close that met another thread's snapshot of the waiting creates left
/// its create to that thread and returned before the file was there (read back
/// missing, empty or short), and a flush that found the queue taken by another
/// thread went on before that thread's batch was applied.
#[test]
fn threads_read_back_what_they_just_wrote() {
    let inst = Instance::start(3);
    let c = inst.claiming_client(ClientOptions::default());
    for round in 0..100 {
        let dir = format!("/r{round}");
        c.mkdir(&dir, 0o755).unwrap();
        std::thread::scope(|s| {
            for t in 0..8usize {
                let dir = &dir;
                s.spawn(move || {
                    // Past the inline bound of a request's data for some, within it for others.
                    let data = common::pattern((round * 8 + t) as u64, 60_000 + t * 30_000);
                    let p = format!("{dir}/f{t}");
                    for i in 0..5 {
                        let fd = c.open_deferred_whole(&p, O_WRONLY | O_CREAT | O_TRUNC, 0o644).unwrap();
                        assert_eq!(c.write(fd, &data).unwrap(), data.len());
                        c.close(fd).unwrap();
                        let st = c.stat(&p).unwrap_or_else(|e| panic!("round {round} {p} write {i}: {e:?}"));
                        assert_eq!(st.size, data.len() as u64, "round {round} {p} write {i}");
                        assert!(get(c, &p) == data, "round {round} {p} write {i}: other bytes");
                    }
                    // An unlink (deferred under the claim) is gone for the next stat.
                    c.unlink(&p).unwrap();
                    assert_eq!(c.stat(&p).err(), Some(gust_client::Errno(libc::ENOENT)), "round {round} {p}");
                });
            }
        });
    }
}
