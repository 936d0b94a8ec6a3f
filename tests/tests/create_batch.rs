//! Batched deferred creates (gust-client create_batch.rs, daemon create_batch.rs;
//! opt-in with $GUST_CREATE_BATCH): small files created, written and closed go to
//! their metadata daemons many to a request; the creating client sees them at once,
//! others from the flush; a create that fails at the flush is reported by the next
//! close or fsync, and nothing is lost.

mod common;

use common::{get, op_total, put};
use gust_client::Client;
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

/// 64 files of 4 KiB: nothing is sent until the 64th close, which sends one
/// `create_inline_batch` per metadata daemon (4), and no `create_inline`.
/// Until then another client sees none of them.
#[test]
fn a_batch_of_creates_is_one_request_per_daemon() {
    let inst = Instance::start(4);
    let (c, other) = (inst.client(), inst.client());
    c.set_create_batch(BATCH);
    c.mkdir("/d", 0o755).unwrap();
    let (singles, batches) = (op_total(&c, "create_inline"), op_total(&c, "create_inline_batch"));
    let sent = c.rpcs_sent();
    for i in 0..BATCH - 1 {
        put_deferred(&c, &format!("/d/f{i}"), &content(i), O_TRUNC);
    }
    assert_eq!(c.rpcs_sent() - sent, 0, "63 closes queue, send nothing");
    assert_err!(other.stat("/d/f0"), libc::ENOENT);
    put_deferred(&c, &format!("/d/f{}", BATCH - 1), &content(BATCH - 1), O_TRUNC);
    assert_eq!(c.rpcs_sent() - sent, 4, "the 64th close sends one request per daemon");
    assert_eq!(op_total(&c, "create_inline_batch") - batches, 4);
    assert_eq!(op_total(&c, "create_inline"), singles, "no single creates");
    for i in 0..BATCH {
        assert_eq!(get(&other, &format!("/d/f{i}")), content(i), "f{i}");
    }
    // A path operation of the creating client sends what is queued first.
    put_deferred(&c, "/d/late", b"late", O_TRUNC);
    assert_err!(other.stat("/d/late"), libc::ENOENT);
    assert_eq!(c.stat("/d/late").unwrap().size, 4, "own stat sees it");
    assert_eq!(get(&other, "/d/late"), b"late", "sent by that stat");
    // A deferred open of a queued path sends the queue first: the second create
    // of the same path is ordered after the first.
    put_deferred(&c, "/d/twice", b"first version", O_TRUNC);
    put_deferred(&c, "/d/twice", b"second", O_TRUNC);
    assert_eq!(get(&c, "/d/twice"), b"second");
}

/// An exclusive create (GUST_DEFER_EXCL) whose path another client takes between
/// its close and the flush: the flush gets EEXIST, the other client's file stays,
/// and the next close of this client reports EEXIST, once. A non-exclusive one in
/// the same situation writes its data into what is there, as its open would have.
#[test]
fn a_failed_batched_create_is_reported_at_the_next_close() {
    let inst = Instance::start(2);
    let (c, other) = (inst.client(), inst.client());
    c.set_create_batch(BATCH);
    c.set_defer_exclusive_create(true);
    put_deferred(&c, "/x", b"mine", O_EXCL);
    put_deferred(&c, "/y", b"mine", O_TRUNC);
    put(&other, "/x", b"theirs");
    put(&other, "/y", b"theirs, longer");
    // Any path operation sends the queue.
    assert_err!(c.stat("/nothing"), libc::ENOENT);
    assert_eq!(get(&other, "/x"), b"theirs", "the exclusive create changed nothing");
    assert_eq!(get(&other, "/y"), b"mine", "O_TRUNC, then the data: as an open would have");
    let fd = c.open("/y", libc::O_RDONLY, 0).unwrap();
    assert_err!(c.close(fd), libc::EEXIST);
    let fd = c.open("/y", libc::O_RDONLY, 0).unwrap();
    c.close(fd).unwrap();
}

/// fsync sends the queue and reports its failure.
#[test]
fn fsync_sends_the_queue_and_reports_its_failure() {
    let inst = Instance::start(2);
    let (c, other) = (inst.client(), inst.client());
    c.set_create_batch(BATCH);
    c.set_defer_exclusive_create(true);
    put(&c, "/log", b"x");
    let log = c.open("/log", O_WRONLY, 0).unwrap();
    put_deferred(&c, "/a", b"a", O_EXCL);
    put_deferred(&c, "/b", b"b", O_EXCL);
    put(&other, "/b", b"other");
    assert_err!(c.fsync(log), libc::EEXIST);
    c.fsync(log).unwrap();
    c.close(log).unwrap();
    assert_eq!(get(&other, "/a"), b"a");
    assert_eq!(get(&other, "/b"), b"other");
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
    let c = inst.client_with(gust_client::ClientOptions {
        rpc_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    });
    c.set_create_batch(BATCH);
    put(&c, "/log", b"x");
    let log = c.open("/log", O_WRONLY, 0).unwrap();
    put_deferred(&c, "/a", b"queued", O_TRUNC);
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
