//! Metadata operations on small files cost exactly one RPC to exactly one daemon,
//! measured by the daemons' own counters and by the client's. Clients here take no
//! grants (`ClientOptions::grants`): with them, a lookup of a record the process
//! holds costs none (tests/tests/grants.rs).

mod common;

use gust_client::Client;
use gust_e2e::Instance;
use std::collections::{BTreeMap, BTreeSet};

/// Every op counter of every daemon: (daemon, op) -> count.
fn snapshot(c: &Client) -> BTreeMap<(u32, String), u64> {
    let mut m = BTreeMap::new();
    for d in 0..c.daemon_count() {
        for (op, n) in c.daemon_stats(d).unwrap().ops {
            m.insert((d, op), n);
        }
    }
    m
}

/// Runs `f` and returns the (daemon, op) counters that moved, leaving out the
/// "stats" requests the measurement itself makes and the callback connections of
/// grants ("callback"), and the client's RPC count.
fn measure(c: &Client, f: impl FnOnce()) -> (Vec<(u32, String, u64)>, u64) {
    let before = snapshot(c);
    let sent = c.rpcs_sent();
    f();
    let sent = c.rpcs_sent() - sent;
    let after = snapshot(c);
    let moved = after
        .iter()
        .filter(|((_, op), _)| !matches!(op.as_str(), "stats" | "callback"))
        .filter_map(|((d, op), n)| {
            let delta = n - before.get(&(*d, op.clone())).copied().unwrap_or(0);
            (delta > 0).then(|| (*d, op.clone(), delta))
        })
        .collect();
    (moved, sent)
}

fn assert_one_rpc(c: &Client, what: &str, want_op: &str, f: impl FnOnce()) -> u32 {
    let (moved, sent) = measure(c, f);
    assert_eq!(sent, 1, "{what}: the client sent {sent} RPCs");
    assert_eq!(moved.len(), 1, "{what}: daemons served {moved:?}");
    let (d, op, n) = &moved[0];
    assert_eq!((op.as_str(), *n), (want_op, 1), "{what}: daemons served {moved:?}");
    *d
}

#[test]
fn create_stat_unlink_cost_one_rpc_each() {
    for n in [1u32, 4, 16] {
        eprintln!("--- {n} daemon(s)");
        let inst = Instance::start(n);
        let c = inst.client_with(gust_client::ClientOptions { grants: false, ..Default::default() });
        c.mkdir("/dir", 0o755).unwrap();
        let mut daemons_hit = BTreeSet::new();
        for i in 0..24 {
            let p = format!("/dir/file-{i}");
            let d_create = assert_one_rpc(&c, &format!("create {p}"), "create", || {
                let fd = c.open(&p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
                c.close(fd).unwrap();
            });
            let d_stat = assert_one_rpc(&c, &format!("stat {p}"), "stat", || {
                assert_eq!(c.stat(&p).unwrap().size, 0);
            });
            // open of an existing file is one RPC too (stat_data: the record, and
            // a small file's data along with it).
            let d_open = assert_one_rpc(&c, &format!("open {p}"), "stat_data", || {
                let fd = c.open(&p, libc::O_RDONLY, 0).unwrap();
                c.close(fd).unwrap();
            });
            let d_unlink = assert_one_rpc(&c, &format!("unlink {p}"), "remove", || c.unlink(&p).unwrap());
            // Metadata of one path lives on one daemon.
            assert_eq!([d_create, d_stat, d_open], [d_unlink; 3], "{p}");
            daemons_hit.insert(d_create);
            assert_err!(c.stat(&p), libc::ENOENT);
        }
        // Placement spreads paths: with several daemons, several are used.
        if n > 1 {
            assert!(daemons_hit.len() > 1, "all 24 paths hashed to daemons {daemons_hit:?}");
        }
        // mkdir at the top is one RPC as well (no parent check by default); below
        // another directory it is two: the create, and the parent's link count and
        // times (a merge on the parent's daemon). rmdir likewise adds one.
        assert_one_rpc(&c, "mkdir /top", "create", || c.mkdir("/top", 0o755).unwrap());
        let (moved, sent) = measure(&c, || c.mkdir("/dir/sub", 0o755).unwrap());
        assert_eq!(sent, 2, "mkdir /dir/sub: {moved:?}");
        let ops: BTreeSet<&str> = moved.iter().map(|m| m.1.as_str()).collect();
        assert_eq!(ops, BTreeSet::from(["create", "dir_changed"]), "{moved:?}");
        assert_eq!(c.stat("/dir").unwrap().nlink, 3);
    }
}

#[test]
fn check_parent_costs_one_more_rpc() {
    let inst = Instance::start_with(4, &["--check-parent"]);
    let c = inst.client_with(gust_client::ClientOptions { grants: false, ..Default::default() });
    c.mkdir("/d", 0o755).unwrap();
    let (moved, sent) = measure(&c, || {
        let fd = c.open("/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
    });
    assert_eq!(sent, 2);
    let ops: BTreeSet<&str> = moved.iter().map(|m| m.1.as_str()).collect();
    assert_eq!(ops, BTreeSet::from(["create", "stat"]), "{moved:?}");
    assert_eq!(moved.iter().map(|m| m.2).sum::<u64>(), 2);
}

/// O_SYNC: every write returns only after the daemons holding the file's chunks and
/// its record were asked to make them durable; without it, writes send no fsync.
#[test]
fn o_sync_writes_are_synced_and_plain_writes_are_not() {
    let inst = Instance::start_with(3, &["--chunk-size", "4k"]);
    let c = inst.client_with(gust_client::ClientOptions { grants: false, ..Default::default() });
    let fsyncs = |moved: &[(u32, String, u64)]| moved.iter().filter(|m| m.1 == "fsync").map(|m| m.2).sum::<u64>();
    let fd = c.open("/plain", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    let (moved, _) = measure(&c, || {
        c.write(fd, &[1u8; 20_000]).unwrap();
    });
    assert_eq!(fsyncs(&moved), 0, "a plain write asked for fsync: {moved:?}");
    c.close(fd).unwrap();
    let fd = c.open("/sync", libc::O_CREAT | libc::O_WRONLY | libc::O_SYNC, 0o644).unwrap();
    let (moved, _) = measure(&c, || {
        c.write(fd, &[2u8; 20_000]).unwrap();
    });
    // 20,000 bytes in 4 KiB chunks span 5 chunks: at least one daemon syncs.
    assert!(fsyncs(&moved) >= 1, "an O_SYNC write was not synced: {moved:?}");
    let (moved, _) = measure(&c, || {
        c.pwrite(fd, &[3u8; 100], 0).unwrap();
    });
    assert!(fsyncs(&moved) >= 1, "an O_SYNC pwrite was not synced: {moved:?}");
    c.close(fd).unwrap();
}
