//! Locks across test hosts (network namespaces, gust_e2e::test_hosts), each process
//! in its own host's namespace and reaching the daemons over TCP, as from separate
//! nodes (docs/DESIGN.md, "Locks"):
//! * SQLite: two writers, through the preload library and through a FUSE mount on
//!   each host. The daemons' locks keep them apart: no row is lost or duplicated and
//!   the database checks out (gust_e2e::sqlite).
//! * kill -9 of a lock holder on one host: a waiter on another host gets the lock
//!   within the bound.
//!
//! Needs root, iproute2, a C compiler and FUSE (scripts/setup.sh).

mod common;

use common::locker::{locker_bin, preload_lib, send_waiting, Locker};
use gust_e2e::{gust_bin, sqlite, test_hosts::TestHosts};
use std::time::{Duration, Instant};

#[test]
fn sqlite_from_two_test_hosts_through_the_preload_library() {
    let mut hosts = TestHosts::create();
    hosts.start_instance(512 * 1024, 1);
    let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
    let on = |i: u32| {
        let (hosts, lib) = (&hosts, lib.clone());
        move |args: &[&str]| {
            let mut cmd = hosts.client_command(i, "python3");
            cmd.args(args).env("LD_PRELOAD", &lib);
            cmd
        }
    };
    let db = "/gustfs/db.sqlite";
    sqlite::run_writers(&[&on(0), &on(1)], db);
    sqlite::check_rows(&on(2), db, 2);
}

/// Mounts the instance in a host's namespace (`ip netns exec` gives the command a
/// mount namespace of its own, so the mount and its users run in one shell), runs
/// Python there with the mount as its working directory, and unmounts.
const ON_A_MOUNT: &str = r#"
set -u
d=$(mktemp -d /tmp/gust-mnt.XXXXXX)
"$GUST" mount "$d" --hosts-file "$GUST_HOSTS_FILE" $GUST_MOUNT_EXTRA > "$d.log" 2>&1 &
m=$!
i=0
until mountpoint -q "$d"; do
    i=$((i + 1))
    if [ $i -gt 1200 ] || ! kill -0 $m 2>/dev/null; then echo "gust mount did not come up:" >&2; cat "$d.log" >&2; exit 1; fi
    sleep 0.05
done
(cd "$d" && python3 "$@")
rc=$?
kill -TERM $m
wait $m
rmdir "$d"
exit $rc
"#;

#[test]
fn sqlite_from_two_test_hosts_through_fuse_mounts() {
    let mut hosts = TestHosts::create();
    hosts.start_instance(512 * 1024, 1);
    let on = |i: u32| {
        let hosts = &hosts;
        move |args: &[&str]| {
            let mut cmd = hosts.client_command(i, "sh");
            cmd.args(["-c", ON_A_MOUNT, "sh"])
                .args(args)
                .env("GUST", gust_bin())
                .env("GUST_MOUNT_EXTRA", std::env::var("GUST_MOUNT_EXTRA").unwrap_or_default());
            cmd
        }
    };
    let db = "db.sqlite";
    sqlite::run_writers(&[&on(0), &on(1)], db);
    sqlite::check_rows(&on(2), db, 2);
    // The kernel of each host did not keep the locks: they reached the daemons.
    let c = gust_client::Client::open_instance(
        &hosts.hosts_file(),
        gust_client::ClientOptions { force_tcp: true, ..Default::default() },
    )
    .unwrap();
    let locks: u64 = (0..c.daemon_count())
        .map(|d| c.daemon_stats(d).unwrap().ops.iter().find(|(n, _)| n == "lock").map_or(0, |(_, k)| *k))
        .sum();
    assert!(locks >= 2 * sqlite::ROWS as u64, "{locks} lock requests reached the daemons");
}

/// A holder on host 0 killed with SIGKILL: its host's kernel closes its connections,
/// the daemon ends its locks, and the waiter on host 1 gets the lock (fcntl and
/// flock alike).
#[test]
fn kill_9_of_a_holder_on_another_test_host_frees_its_locks() {
    let mut hosts = TestHosts::create();
    hosts.start_instance(512 * 1024, 1);
    let bin = locker_bin(hosts.dir.path());
    let on = |i: u32| {
        let mut cmd = hosts.client_command(i, &bin);
        cmd.env("LD_PRELOAD", preload_lib());
        Locker::spawn(cmd)
    };
    let (mut a, mut b) = (on(0), on(1));
    let (fa, fb) = (a.open("/gustfs/k"), b.open("/gustfs/k"));
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok");
    assert_eq!(a.ask(&format!("flock {fa} ex")), "ok");
    let c = gust_client::Client::open_instance(
        &hosts.hosts_file(),
        gust_client::ClientOptions { force_tcp: true, ..Default::default() },
    )
    .unwrap();
    send_waiting(&mut b, &c, &format!("lock {fb} wr 0 0 wait"));
    let t = Instant::now();
    a.signal(libc::SIGKILL);
    assert_eq!(b.answer(), "ok", "the waiter on host 1 got the lock of the killed holder on host 0");
    let took = t.elapsed();
    assert_eq!(b.ask(&format!("flock {fb} ex nb")), "ok", "its flock lock went too");
    // The bound for a killed holder: the end of its callback connection, at once
    // (docs/DESIGN.md, "Locks"); 5 s leaves room for a loaded machine.
    assert!(took < Duration::from_secs(5), "the lock came {took:?} after the kill");
    eprintln!("lock granted on another host {took:?} after kill -9 of its holder");
}
