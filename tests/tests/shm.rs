//! The shared-memory transport (`shm:`) end to end: programs under the preload
//! library and the client core reach the daemons of their node over rings; a client
//! killed mid-request, a damaged ring and a missing rendezvous socket cost the daemon
//! nothing, and clients fall back to the Unix socket. Clients use shared memory
//! when `GUST_TRANSPORT=shm`: every test here sets it for itself and its children.
//!
//! How a test sees which path was taken: the daemon serves each shared-memory
//! connection on a thread of its own named "conn"; socket connections are served by
//! the worker pool and have none.

use gust_e2e::{gust_bin, wait_until, Instance};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// This process's clients (and the programs it starts) use shared memory. Every
/// test calls it before its first client, so whichever test's client reads the
/// variable first sees it set.
fn use_shm() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::env::set_var("GUST_TRANSPORT", "shm"));
}

/// Connections daemon `id` serves over shared memory right now.
fn shm_connections(inst: &Instance, id: u32) -> usize {
    let pid = inst.daemon_pid(id);
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("daemon's threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "conn")
        .count()
}

fn all_shm_connections(inst: &Instance) -> usize {
    (0..inst.daemons).map(|i| shm_connections(inst, i)).sum()
}

/// `bash -c script` under `gust run`, with `env` added.
fn preload_bash(inst: &Instance, script: &str, env: &[(&str, &str)]) -> Command {
    let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
    assert!(lib.exists(), "{} missing: build the workspace", lib.display());
    let mut c = Command::new(gust_bin());
    c.args(["run", "--", "bash", "-c", &format!("set -euo pipefail\n{script}")]).env("GUST_HOSTS_FILE", &inst.hosts);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn check(out: Output, what: &str) -> String {
    gust_e2e::stdout_of(what, &out)
}

fn write_file(c: &gust_client::Client, path: &str, data: &[u8]) {
    let fd = c.open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644).unwrap();
    assert_eq!(c.write(fd, data).unwrap(), data.len());
    c.close(fd).unwrap();
}

fn read_file(c: &gust_client::Client, path: &str) -> Vec<u8> {
    let fd = c.open(path, libc::O_RDONLY, 0).unwrap();
    let mut b = vec![0u8; 4096];
    let n = c.read(fd, &mut b).unwrap();
    c.close(fd).unwrap();
    b.truncate(n);
    b
}

/// Daemon 0's rendezvous socket.
fn shm_path(inst: &Instance) -> PathBuf {
    let entry = inst.hosts_file().daemons[0].clone();
    let Some(gust_transport::Endpoint::Shm(path)) = entry.shared_memory().cloned() else {
        panic!("the daemon offers no shared-memory endpoint: {:?}", entry.endpoints)
    };
    path
}

fn flag_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("gust-shm-test").tempdir_in("/tmp").unwrap()
}

/// A preloaded bash writes, reads, lists, renames and removes files, and while it
/// holds its connections the daemons serve them over shared memory; the same script
/// with GUST_TRANSPORT=unix runs over the Unix socket (no ring on any daemon).
#[test]
fn preload_programs_run_over_shared_memory_and_without_it() {
    use_shm();
    let inst = Instance::start(2);
    for (transport, dir) in [("shm", "a"), ("unix", "b")] {
        let flags = flag_dir();
        let f = flags.path().display();
        let script = format!(
            r#"
mkdir /gustfs/{dir}
for i in $(seq 1 40); do echo "line $i" > /gustfs/{dir}/f$i; done
head -c 300000 /dev/urandom > {f}/big
cp {f}/big /gustfs/{dir}/big
cmp {f}/big /gustfs/{dir}/big
[ "$(cat /gustfs/{dir}/f17)" = "line 17" ]
[ "$(ls /gustfs/{dir} | wc -l)" = 41 ]
touch {f}/ready
while [ ! -e {f}/go ]; do sleep 0.05; done
mv /gustfs/{dir}/f1 /gustfs/{dir}/g1
[ "$(cat /gustfs/{dir}/g1)" = "line 1" ]
rm /gustfs/{dir}/f* /gustfs/{dir}/g1
[ "$(ls /gustfs/{dir})" = big ]
echo done
"#
        );
        let child = preload_bash(&inst, &script, &[("GUST_TRANSPORT", transport)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let ready = wait_until(Duration::from_secs(60), || flags.path().join("ready").exists());
        let during = all_shm_connections(&inst);
        std::fs::write(flags.path().join("go"), b"").unwrap();
        let out = check(child.wait_with_output().unwrap(), "preloaded script");
        assert!(ready, "the script never got to its pause");
        assert_eq!(out.trim(), "done");
        // Its processes have exited (without closing their pools: no destructors
        // run at exit); the daemons notice by the rendezvous sockets closing.
        assert!(
            wait_until(Duration::from_secs(5), || all_shm_connections(&inst) == 0),
            "{} shared-memory connections outlive their processes",
            all_shm_connections(&inst)
        );
        if transport == "shm" {
            assert!(during >= 2, "bash holds connections to both daemons over shared memory; saw {during}");
        } else {
            assert_eq!(during, 0, "without GUST_TRANSPORT=shm clients use the Unix socket");
        }
    }
    // The files the preloaded programs left are what the client core sees.
    let c = inst.client();
    assert_eq!(c.stat("/a/big").unwrap().size, 300_000);
    assert_eq!(c.stat("/b/big").unwrap().size, 300_000);
    assert!(all_shm_connections(&inst) > 0, "the client core uses shared memory too");
}

/// A preloaded dd killed with SIGKILL while it streams 1 MiB writes: the daemons
/// notice, give the connection's thread back, and serve the next client.
#[test]
fn a_client_killed_mid_request_costs_the_daemon_nothing() {
    use_shm();
    let inst = Instance::start(2);
    // Every byte over the rings (short-circuit I/O would write them into the
    // daemons' local files itself).
    let mut dd = preload_bash(
        &inst,
        "exec dd if=/dev/zero of=/gustfs/big bs=1M count=20000 2>/dev/null",
        &[("GUST_SHORT_CIRCUIT", "0")],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Writing (1 MiB writes go to both daemons), several MiB of it on each, then
    // the kill: frames are in flight in the rings.
    assert!(
        wait_until(Duration::from_secs(60), || all_shm_connections(&inst) >= 2),
        "dd never wrote to both daemons over shared memory"
    );
    // Asked over TCP: a shared-memory client would hold rings of its own.
    let probe = inst.client_with(gust_client::ClientOptions { force_tcp: true, ..Default::default() });
    let streaming = || (0..inst.daemons).all(|d| probe.daemon_stats(d).unwrap().bytes_written >= 8 << 20);
    assert!(wait_until(Duration::from_secs(60), streaming), "dd did not stream 8 MiB to each daemon");
    assert!(dd.try_wait().unwrap().is_none(), "dd still writing when killed");
    dd.kill().unwrap();
    dd.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || all_shm_connections(&inst) == 0),
        "the daemons still hold {} shared-memory connections 5 s after the client died",
        all_shm_connections(&inst)
    );
    let c = inst.client();
    write_file(&c, "/after", b"still serving");
    assert_eq!(read_file(&c, "/after"), b"still serving");
}

/// A client that damages its ring (after authenticating, and one before) is cut off;
/// the daemon keeps serving everyone else.
#[test]
fn a_damaged_ring_from_a_client_does_not_take_the_daemon_down() {
    use_shm();
    let inst = Instance::start(1);
    let path = shm_path(&inst);
    let secret = gust_hosts::load_secret(&inst.hosts).unwrap();
    let c = inst.client();
    write_file(&c, "/before", b"x");
    for authenticate in [true, false] {
        let mut s = gust_transport::shm::connect(&path, Duration::from_secs(5)).unwrap();
        if authenticate {
            gust_proto::handshake::client(&mut s, &secret).unwrap();
        }
        s.damage_for_tests();
        // The daemon drops the connection: its side reads as closed here.
        let mut b = [0u8; 1];
        use gust_transport::Stream;
        use std::io::Read;
        s.set_timeout(Some(Duration::from_secs(10))).unwrap();
        let r = s.read(&mut b);
        assert!(matches!(r, Ok(0)), "the daemon closes a damaged connection: {r:?}");
    }
    assert_eq!(read_file(&c, "/before"), b"x");
    let pid = inst.daemon_pid(0);
    assert!(PathBuf::from(format!("/proc/{pid}")).exists(), "daemon alive");
}

/// Without the rendezvous socket (a daemon of an older version, or one that could
/// not bind it) clients use the Unix socket.
#[test]
fn without_the_shared_memory_socket_clients_use_the_unix_socket() {
    use_shm();
    let inst = Instance::start(2);
    for d in inst.hosts_file().daemons {
        std::fs::remove_file(d.rootdir.join("daemon.shm")).unwrap();
    }
    let out = preload_bash(&inst, "echo hello > /gustfs/f; cat /gustfs/f; rm /gustfs/f", &[]).output().unwrap();
    assert_eq!(check(out, "preloaded script").trim(), "hello");
    let c = inst.client();
    write_file(&c, "/g", b"core");
    assert_eq!(read_file(&c, "/g"), b"core");
    assert_eq!(all_shm_connections(&inst), 0);
}

/// A client that authenticates, starts a frame and then stays silent (alive): the
/// daemon cuts it off at the stall timeout, as it does on sockets, and its thread
/// is given back.
#[test]
fn a_silent_client_mid_frame_is_cut_off_at_the_stall_timeout() {
    use_shm();
    use gust_transport::Stream;
    use std::io::{Read, Write};
    let inst = Instance::start_with(1, &["--stall-timeout", "2"]);
    let secret = gust_hosts::load_secret(&inst.hosts).unwrap();
    let mut s = gust_transport::shm::connect(&shm_path(&inst), Duration::from_secs(5)).unwrap();
    gust_proto::handshake::client(&mut s, &secret).unwrap();
    s.write_all(&[0u8; 7]).unwrap();
    assert!(wait_until(Duration::from_secs(5), || shm_connections(&inst, 0) == 1), "connection not served");
    let t = std::time::Instant::now();
    assert!(
        wait_until(Duration::from_secs(15), || shm_connections(&inst, 0) == 0),
        "a client silent mid-frame still holds its daemon thread after 15 s (stall timeout 2 s)"
    );
    assert!(t.elapsed() >= Duration::from_millis(1500), "cut off before its stall timeout");
    s.set_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(s.read(&mut b), Ok(0)), "the client sees the close");
    let c = inst.client();
    write_file(&c, "/after", b"ok");
    assert_eq!(read_file(&c, "/after"), b"ok");
}
