//! Listings with attributes (gust-client listing.rs): one `readdir_plus` per daemon
//! per page, and the stats that follow a listing answered from it, through the client
//! core and through the LD_PRELOAD library (`ls -l`, `find`, Python's scandir).

mod common;

use common::op_total;
use gust_e2e::{gust_bin, Instance};
use std::process::Command;

#[test]
fn stats_after_a_listing_ask_no_daemon() {
    let inst = Instance::start(4);
    let c = inst.client();
    let probe = inst.client(); // reads counters without touching c's cache
    c.mkdir("/d", 0o755).unwrap();
    let n = 5_000u64;
    for i in 0..n {
        let fd = c.open(&format!("/d/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.pwrite(fd, &vec![1u8; (i % 7) as usize], 0).unwrap();
        c.close(fd).unwrap();
    }
    c.symlink("f1", "/d/link").unwrap();
    let sent = c.rpcs_sent();
    let listed = c.read_dir_plus("/d").unwrap();
    assert_eq!(listed.len() as u64, n + 1);
    for (e, st) in &listed {
        if e.name != "link" {
            let i: u64 = e.name[1..].parse().unwrap();
            assert_eq!(st.size, i % 7, "{}", e.name);
        }
    }
    // 4 daemons, about 1,250 entries each: one page per daemon, plus the directory's
    // own lookup.
    assert!(c.rpcs_sent() - sent <= 4 + 1, "listing took {} requests", c.rpcs_sent() - sent);
    let (stats, sent) = (op_total(&probe, "stat"), c.rpcs_sent());
    for i in 0..n {
        assert_eq!(c.lstat(&format!("/d/f{i}")).unwrap().size, i % 7);
    }
    assert_eq!(c.lstat("/d/link").unwrap().kind, gust_client::Kind::Symlink);
    assert_eq!(c.rpcs_sent() - sent, 0, "stats after the listing went to the daemons");
    assert_eq!(op_total(&probe, "stat"), stats);
    // stat of a listed symlink follows it, from the daemons.
    assert_eq!(c.stat("/d/link").unwrap().size, 1);
    // A change by this client forgets the listing: the next stat asks and sees it.
    let fd = c.open("/d/f3", libc::O_WRONLY, 0).unwrap();
    c.pwrite(fd, b"0123456789", 0).unwrap();
    c.close(fd).unwrap();
    let sent = c.rpcs_sent();
    assert_eq!(c.lstat("/d/f3").unwrap().size, 10);
    assert_eq!(c.rpcs_sent() - sent, 1);
    // So does time: past the TTL a stat asks again.
    c.read_dir_plus("/d").unwrap();
    // Not a wait for an event: the passing of the TTL is what is under test.
    std::thread::sleep(gust_client::LISTING_ATTRS_TTL + std::time::Duration::from_millis(100));
    let sent = c.rpcs_sent();
    c.lstat("/d/f4").unwrap();
    assert_eq!(c.rpcs_sent() - sent, 1);
}

/// `ls -l` under the preload library: the listing's pages, and no stat request per
/// entry (before: one per entry).
#[test]
fn ls_l_under_preload_costs_pages_not_stats() {
    let inst = Instance::start(3);
    let c = inst.client();
    c.mkdir("/big", 0o755).unwrap();
    let n = 3_000;
    for i in 0..n {
        let fd = c.open(&format!("/big/file-{i:05}"), libc::O_CREAT | libc::O_WRONLY, 0o640).unwrap();
        c.close(fd).unwrap();
    }
    let (stats, pages) = (op_total(&c, "stat"), op_total(&c, "readdir_plus"));
    let out = Command::new(gust_bin())
        .args([
            "run",
            "--",
            "bash",
            "-c",
            "ls -l /gustfs/big | tail -n +2 | wc -l; ls -l /gustfs/big | grep -c '^-rw-r-----'",
        ])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{n}\n{n}\n"));
    let stat_requests = op_total(&c, "stat") - stats;
    assert!(stat_requests < 20, "ls -l of {n} entries sent {stat_requests} stat requests");
    assert!(op_total(&c, "readdir_plus") - pages <= 2 * 3 * 2, "one page per daemon per listing");
}
