//! Fencing (docs/DESIGN.md, "Fencing"): with two replicas, a daemon that stops
//! answering without restarting (SIGSTOP here) misses the writes clients make
//! meanwhile through its group's other member. When it answers again, no client
//! (the writer, or a fresh one whose first member for the files is that daemon)
//! reads the old bytes: the writer fenced it on its peers before acknowledging, its
//! lease ran out while it was stopped, and its first heartbeat is answered
//! `fenced`. It answers EHOSTDOWN, `gust status` shows it fenced, and after
//! `gust repair` it serves the new bytes.

mod common;

use common::{try_get, try_put as put};
use gust_client::{Client, ClientOptions, Errno};
use gust_e2e::{wait_until, Instance};
use std::time::{Duration, Instant};

const DAEMONS: u32 = 3;
const STOPPED: u32 = 1;
/// Short, so that the first change meeting the stopped daemon gives up on it soon;
/// not shorter: a peer's durable record of the fence (a synced RocksDB write) has
/// taken over a second on a machine busy writing back other tests' files, and a
/// fence no peer took within it is not acknowledged (EIO).
const RPC_TIMEOUT: Duration = Duration::from_millis(2500);
/// The daemons' lease (gust-daemon lease.rs).
const LEASE: Duration = Duration::from_secs(2);

/// The whole of `p`, in a buffer sized by a stat.
fn get(c: &Client, p: &str) -> Result<Vec<u8>, Errno> {
    try_get(c, p, c.stat(p)?.size as usize + 1)
}

fn opts() -> ClientOptions {
    ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() }
}

/// Version `v` of file `i`: inline-sized for some, several 4 KiB chunks for others,
/// so records, inline data and chunks of the stopped daemon's groups all change.
fn content(i: usize, v: u8) -> Vec<u8> {
    let len = if i.is_multiple_of(2) { 300 } else { 30_000 + i * 101 };
    (0..len).map(|j| ((j * 7 + i) as u8).wrapping_add(v.wrapping_mul(97))).collect()
}

fn signal(inst: &Instance, id: u32, sig: i32) {
    // SAFETY: a signal to a daemon this test started.
    assert_eq!(unsafe { libc::kill(inst.daemon_pid(id) as i32, sig) }, 0);
}

/// Every file reads back as version `v` through `c`: never the old bytes.
fn check(c: &Client, files: &[(usize, String)], v: u8, who: &str) {
    for (i, p) in files {
        let got = get(c, p).unwrap_or_else(|e| panic!("{who}: read {p}: {e}"));
        assert!(got == content(*i, v), "{who}: {p} reads back other bytes than version {v} (stale copy served)");
    }
}

#[test]
fn a_resumed_daemon_is_fenced_and_serves_no_stale_bytes() {
    let inst = Instance::start_with(DAEMONS, &["--chunk-size", "4k", "--replicas", "2"]);
    let c = inst.client_with(opts());
    // Files whose record's first copy is on the daemon to be stopped: a fresh client
    // asks it first.
    let files: Vec<(usize, String)> =
        (0..400).map(|i| (i, format!("/f{i}"))).filter(|(_, p)| c.record_holders(p)[0] == STOPPED).take(16).collect();
    assert_eq!(files.len(), 16);
    for (i, p) in &files {
        put(&c, p, &content(*i, 1)).unwrap();
    }
    check(&inst.client_with(opts()), &files, 1, "before");

    signal(&inst, STOPPED, libc::SIGSTOP);
    // Writes go on through the other member of each group. The first change that
    // meets the stopped daemon waits for the RPC timeout and fences it, once.
    let t = Instant::now();
    for (i, p) in &files {
        put(&c, p, &content(*i, 2)).unwrap_or_else(|e| {
            panic!(
                "write {p} while daemon {STOPPED} is stopped: {e} ({})\ndaemon logs:\n{}",
                c.last_transport_error().unwrap_or_default(),
                (0..DAEMONS).map(|d| inst.daemon_log(d)).collect::<Vec<_>>().join("\n")
            )
        });
    }
    let bound = RPC_TIMEOUT * 2 + LEASE + Duration::from_secs(2);
    assert!(t.elapsed() < bound, "writes took {:?} (bound {bound:?})", t.elapsed());
    check(&c, &files, 2, "writer, daemon stopped");

    signal(&inst, STOPPED, libc::SIGCONT);
    // At once and after its heartbeats asked for a lease again: nobody reads the
    // old bytes, not the writer, not a fresh client whose first member it is.
    check(&inst.client_with(opts()), &files, 2, "fresh client, just resumed");
    check(&c, &files, 2, "writer, just resumed");
    let fenced = format!("daemon {STOPPED}: fenced (");
    assert!(
        wait_until(LEASE * 10, || inst.daemon_log(STOPPED).contains(&fenced)),
        "the resumed daemon's heartbeats were never answered `fenced`; its log:\n{}",
        inst.daemon_log(STOPPED)
    );
    let fresh = inst.client_with(opts());
    assert_eq!(fresh.daemon_recovering(STOPPED), Ok(true), "the resumed daemon answers EHOSTDOWN");
    check(&fresh, &files, 2, "fresh client, later");
    // The writer skipped the stopped daemon since its RPC timeout; once the skip
    // ends (DOWN_SKIP after it), it asks the resumed daemon first again.
    assert!(
        wait_until(gust_client::DOWN_SKIP * 3, || !c.daemon_down(STOPPED)),
        "the writer still skips daemon {STOPPED}"
    );
    check(&c, &files, 2, "writer, later");
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("daemon {STOPPED} FENCED by daemon(s) 0, 2")), "{text}");

    let out = inst.gust(&["repair", "--id", &STOPPED.to_string()]);
    assert!(out.status.success(), "repair: {}", String::from_utf8_lossy(&out.stderr));
    let fresh = inst.client_with(opts());
    assert_eq!(fresh.daemon_recovering(STOPPED), Ok(false), "serving after repair");
    check(&fresh, &files, 2, "after repair");
    // The new bytes come from the repaired daemon itself: its group partners gone,
    // it serves alone (its peers refuse connections: their processes are gone).
    for d in [0, 2] {
        signal(&inst, d, libc::SIGKILL);
    }
    assert!(
        wait_until(Duration::from_secs(10), || inst.daemon_gone(0) && inst.daemon_gone(2)),
        "daemons 0 and 2 still accept connections after kill -9"
    );
    let alone = inst.client_with(opts());
    // Every record of the files is on group {1, 2}; a chunk may be on group {2, 0},
    // gone now (EIO). No read returns other bytes, and the files whose chunks are
    // all on groups of daemon 1 read back whole.
    let mut whole = 0;
    for (i, p) in &files {
        assert_eq!(alone.stat(p).map(|s| s.size), Ok(content(*i, 2).len() as u64), "{p}: record after repair");
        match get(&alone, p) {
            Ok(got) => {
                assert!(got == content(*i, 2), "the repaired daemon alone: {p} reads back other bytes");
                whole += 1;
            }
            Err(e) => assert_eq!(e, Errno(libc::EIO), "{p}: {:?}", alone.last_transport_error()),
        }
    }
    assert!(whole > 0, "no file read back whole from the repaired daemon alone");
    assert_eq!(alone.daemon_recovering(STOPPED), Ok(false));
}
