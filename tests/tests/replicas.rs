//! Replicas (`gust start --replicas R`): with R = 2 and a daemon killed (kill -9),
//! every acknowledged write reads back and every operation keeps working; the
//! daemon, restarted on its root directory, is fenced (it missed writes) instead of
//! serving stale data until `gust repair` brings it up to date; `gust status` says
//! what is degraded. With R = 1, operations
//! on the lost daemon's records fail with EIO within the bound, the others work.

mod common;

use common::{try_get, try_put as put};
use gust_client::{Client, ClientOptions, Errno};
use gust_e2e::Instance;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const VICTIM: u32 = 1;
/// The client's RPC timeout; a killed daemon's refusals come at once.
const RPC_TIMEOUT: Duration = Duration::from_secs(3);
/// The bound an operation meeting the dead daemon must stay within: one refused
/// connection (a killed process on loopback), far under the RPC timeout.
const WITHIN: Duration = Duration::from_secs(2);

fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    assert!(t.elapsed() < WITHIN, "{what} took {:?}", t.elapsed());
    r
}

/// Bytes of file i: multi-chunk for some, inline-sized for others.
fn content(i: usize) -> Vec<u8> {
    let len = if i.is_multiple_of(3) { 100 } else { 20_000 + (i % 50) * 997 };
    (0..len).map(|j| ((j * 31 + i * 7) % 253) as u8).collect()
}

/// Up to 1 MiB of `p`: larger than every file here, so reads also ask for chunks
/// past the end.
fn get(c: &Client, p: &str) -> Result<Vec<u8>, Errno> {
    try_get(c, p, 1 << 20)
}

fn kill9(inst: &Instance, id: u32) {
    let pid = inst.daemon_pid(id) as i32;
    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.rsplit(')').next().unwrap().contains(" Z"))
    };
    assert!(gust_e2e::wait_until(Duration::from_secs(10), gone), "daemon {id} did not die");
}

/// Every operation on the instance, checked against `model` (path -> bytes).
fn exercise(c: &Client, model: &mut BTreeMap<String, Vec<u8>>, round: usize) {
    for (p, want) in model.iter() {
        let got = timed(&format!("read {p}"), || get(c, p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(got == *want, "{p} reads back different bytes");
        assert_eq!(timed("stat", || c.stat(p)).unwrap().size, want.len() as u64, "{p}");
    }
    // The listing has every file exactly once (copies are not listed twice).
    let mut names: Vec<String> = timed("readdir", || c.read_dir("/d")).unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    let want: Vec<String> = model.keys().filter_map(|p| p.strip_prefix("/d/").map(String::from)).collect();
    assert_eq!(names, want, "listing of /d");
    let plus: Vec<String> =
        timed("readdir plus", || c.read_dir_plus("/d")).unwrap().into_iter().map(|(e, _)| e.name).collect();
    assert_eq!(plus.len(), want.len(), "listing with attributes of /d: {plus:?}");
    // Changes of every kind.
    for i in 0..12 {
        let p = format!("/d/new{round}-{i}");
        let data = content(1000 + round * 100 + i);
        timed("create+write", || put(c, &p, &data)).unwrap_or_else(|e| panic!("{p}: {e}"));
        model.insert(p, data);
    }
    let victim = format!("/d/new{round}-0");
    timed("unlink", || c.unlink(&victim)).unwrap();
    model.remove(&victim);
    let (from, to) = (format!("/d/new{round}-1"), format!("/d/moved{round}"));
    timed("rename", || c.rename(&from, &to)).unwrap();
    let v = model.remove(&from).unwrap();
    model.insert(to, v);
    let t = format!("/d/new{round}-2");
    timed("truncate", || c.truncate(&t, 10)).unwrap();
    model.get_mut(&t).unwrap().truncate(10);
    let sub = format!("/sub{round}");
    timed("mkdir", || c.mkdir(&sub, 0o755)).unwrap();
    timed("rmdir", || c.rmdir(&sub)).unwrap();
    timed("statfs", || c.statfs()).unwrap();
}

#[test]
fn two_replicas_survive_a_killed_daemon_and_fence_it_when_it_returns() {
    let inst = Instance::start_with(4, &["--chunk-size", "4k", "--replicas", "2"]);
    assert_eq!(inst.hosts_file().replicas, 2);
    let c = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    c.mkdir("/d", 0o755).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..40 {
        let p = format!("/d/f{i}");
        put(&c, &p, &content(i)).unwrap();
        model.insert(p, content(i));
    }
    exercise(&c, &mut model, 0);
    // Both copies' daemons record each change; `gust events` shows it once.
    let out = inst.gust(&["events", "/d"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let creates = text.lines().filter(|l| l.contains("\"IN_CREATE\"") && l.contains("/d/f7\"")).count();
    assert_eq!(creates, 1, "{text}");

    kill9(&inst, VICTIM);
    exercise(&c, &mut model, 1);
    // The event stream goes on without the dead daemon (its copies' daemons have
    // recorded the same changes).
    let out = inst.gust(&["events", "/d"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let creates = text.lines().filter(|l| l.contains("\"IN_CREATE\"") && l.contains("/d/new1-3\"")).count();
    assert_eq!(creates, 1, "{text}");
    // A fresh client (no daemon known down yet) pays one refusal, then skips it.
    let fresh = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    exercise(&fresh, &mut model, 2);
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "status fails while a daemon is down");
    assert!(text.contains(&format!("DEGRADED: daemon {VICTIM} down")), "{text}");
    assert!(text.contains("under-replicated: records and chunks placed first on daemon(s) 0, 1"), "{text}");

    // Back on its root directory it missed everything written meanwhile: it must
    // not answer for it. It refuses (EHOSTDOWN) and clients keep to the copies.
    inst.restart_daemon(VICTIM);
    // Asked through a client of its own: each refused connection would make `c`
    // skip the daemon for DOWN_SKIP again.
    let probe = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    assert!(
        gust_e2e::wait_until(Duration::from_secs(20), || probe.daemon_recovering(VICTIM).is_ok()),
        "the restarted daemon {VICTIM} never answered"
    );
    assert_eq!(c.daemon_recovering(VICTIM), Ok(true));
    // `c` skips the daemon it found dead until DOWN_SKIP after it last did; then it
    // meets the restarted daemon, which refuses, below.
    assert!(
        gust_e2e::wait_until(gust_client::DOWN_SKIP * 3, || !c.daemon_down(VICTIM)),
        "the writer still skips daemon {VICTIM}"
    );
    let fresh = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    exercise(&fresh, &mut model, 3);
    exercise(&c, &mut model, 4);
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Recovering, and fenced by its peers: the writes above skipped it.
    assert!(text.contains(&format!("daemon {VICTIM} FENCED by daemon(s) 0, 2")), "{text}");
    // Its row in the daemon table says so too: it answers, but does not serve.
    let victim = VICTIM.to_string();
    let row = text.lines().find(|l| l.split_whitespace().next() == Some(victim.as_str())).unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(4), Some("recovering"), "{text}");

    // `gust repair` copies its share back from the copies and lets it serve.
    let out = inst.gust(&["repair", "--id", &VICTIM.to_string()]);
    assert!(out.status.success(), "repair: {}", String::from_utf8_lossy(&out.stderr));
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("all daemons serving"), "{text}");
    // Its copies are current: with the other member of each of its groups ({0, 1}
    // and {1, 2}) dead, everything, written while it was away included, reads back
    // from it, and every operation still works ({2, 3} and {3, 0} keep daemon 3).
    kill9(&inst, 0);
    kill9(&inst, 2);
    let fresh = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    exercise(&fresh, &mut model, 5);
}

#[test]
fn one_replica_fails_the_lost_daemons_records_with_eio_within_the_bound() {
    let inst = Instance::start_with(4, &["--chunk-size", "4k"]);
    let c = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    let place = gust_placement::WideStriping::new(4);
    use gust_placement::Distributor;
    let files: Vec<String> = (0..40).map(|i| format!("/f{i}")).collect();
    for f in &files {
        put(&c, f, b"small").unwrap();
    }
    kill9(&inst, VICTIM);
    let (mut failed, mut worked) = (0, 0);
    for f in &files {
        let r = timed(&format!("stat {f}"), || c.stat(f));
        if place.locate_metadata(f) == VICTIM {
            assert_eq!(r.err(), Some(Errno(libc::EIO)), "{f} lives on the dead daemon");
            failed += 1;
        } else {
            assert_eq!(r.map(|s| s.size), Ok(5), "{f}");
            // Its data is where its chunk is: read back, or EIO if that is the
            // dead daemon (never other bytes).
            match timed("read", || get(&c, f)) {
                Ok(b) => assert_eq!(b, b"small", "{f}"),
                Err(e) => assert_eq!(e, Errno(libc::EIO), "{f}"),
            }
            worked += 1;
        }
    }
    assert!(failed > 0 && worked > 0, "{failed} failed, {worked} worked");
    // Creating where the record's daemon is alive still works (an empty file: its
    // data would go to a chunk's daemon, which may be the dead one).
    let alive = (0..100).map(|i| format!("/n{i}")).find(|p| place.locate_metadata(p) != VICTIM).unwrap();
    let fd = timed("create", || c.open(&alive, libc::O_CREAT | libc::O_WRONLY, 0o644)).unwrap();
    timed("close", || c.close(fd)).unwrap();
    assert_eq!(c.stat(&alive).unwrap().size, 0);
}

/// Holds `root`'s lock as a daemon does while it serves from it (flock on the
/// file `lock` in it) until dropped.
struct HeldRoot {
    _file: std::fs::File,
}

impl HeldRoot {
    /// Takes the lock once the killed daemon has let go of it: its main thread
    /// shows as a zombie (what `kill9` waits for) while its other threads may still
    /// be exiting with the descriptor table, and the lock, in hand.
    fn take(root: &std::path::Path) -> HeldRoot {
        use std::os::unix::io::AsRawFd;
        let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(root.join("lock")).unwrap();
        // SAFETY: flock on a descriptor this test owns.
        let taken = || unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        assert!(gust_e2e::wait_until(Duration::from_secs(10), taken), "lock of {root:?} not let go");
        HeldRoot { _file: f }
    }
}

/// `gust repair` of a daemon that does not answer yet (a process still starting on
/// its root directory) waits for that process instead of emptying the stores it is
/// opening; a second daemon on a root directory in use is refused with a message
/// that says so. Once the holder lets go, the repair runs and the daemon serves.
#[test]
fn repair_waits_for_the_process_that_holds_the_root_directory() {
    use std::io::BufRead;
    let inst = Instance::start_with(3, &["--chunk-size", "4k", "--replicas", "2"]);
    let c = inst.client();
    let mut model = BTreeMap::new();
    for i in 0..12 {
        let p = format!("/f{i}");
        put(&c, &p, &content(i)).unwrap();
        model.insert(p, content(i));
    }
    let root = inst.hosts_file().daemons[VICTIM as usize].rootdir.clone();
    kill9(&inst, VICTIM);
    let held = HeldRoot::take(&root);

    let hosts = inst.rootdir().join("gust.hosts");
    let out = std::process::Command::new(gust_e2e::gust_bin())
        .args(["daemon", "--hosts-file"])
        .arg(&hosts)
        .arg("--rootdir")
        .arg(&root)
        .args(["--listen", "127.0.0.1:0", "--id", &VICTIM.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is in use by another process"), "{err}");

    let mut repair = std::process::Command::new(gust_e2e::gust_bin())
        .args(["repair", "--id", &VICTIM.to_string()])
        .env("GUST_HOSTS_FILE", &hosts)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(repair.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("waiting for the process that holds") {
            break;
        }
    }
    assert!(seen.last().is_some_and(|l| l.contains("waiting")), "repair did not wait: {seen:?}");
    assert!(root.join("metadata").join("CURRENT").exists(), "the stores were emptied under their holder");
    drop(held);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert!(repair.wait().unwrap().success(), "repair: {seen:?} {rest:?}");
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("all daemons serving"), "{text}");
    // Its copies are current: with its peers of each group gone, it serves them.
    kill9(&inst, 0);
    let fresh = inst.client_with(ClientOptions { rpc_timeout: RPC_TIMEOUT, force_tcp: false, ..Default::default() });
    for (p, want) in &model {
        assert!(get(&fresh, p).unwrap_or_else(|e| panic!("{p}: {e}")) == *want, "{p}");
    }
}
