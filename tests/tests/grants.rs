//! Grants (docs/DESIGN.md, "Grants"): a client process answers lookups of records
//! no one else is changing from its memory, and a change by any other process is
//! seen by every operation that starts after the change returned: the daemon recalls
//! the grant first. A holder that does not answer (stopped) delays the change by at
//! most its lease; one that died delays nothing.

mod common;

use gust_e2e::{gust_bin, Instance};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemons' lease (gust-daemon's grants::LEASE) plus its margin.
const LEASE_BOUND: Duration = Duration::from_millis(2200);

/// A process under the LD_PRELOAD library that answers `stat` and `read` commands
/// (tests/c/grant_holder.c): the holder of grants.
struct Holder {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

fn holder_bin(dir: &tempfile::TempDir) -> PathBuf {
    let bin = dir.path().join("grant_holder");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/grant_holder.c");
    let cc = Command::new("cc").args(["-O1", "-o"]).arg(&bin).arg(&src).output().expect("cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    bin
}

impl Holder {
    fn start(inst: &Instance, bin: &Path) -> Holder {
        let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
        let mut child = Command::new(bin)
            .env("LD_PRELOAD", &lib)
            .env("GUST_HOSTS_FILE", &inst.hosts)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the holder");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        Holder { child, stdin, stdout }
    }

    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling a child of ours.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
        if sig == libc::SIGSTOP {
            // kill() returns before every thread stopped: one may still answer a
            // recall on a loaded machine. Wait until all have (bounded).
            let pid = self.child.id();
            let stopped = || {
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
                tasks.flatten().all(|t| {
                    std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| {
                        s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
                    })
                })
            };
            assert!(gust_e2e::wait_until(Duration::from_secs(10), stopped), "the holder did not stop");
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lookups the daemons served so far (stat, stat_data).
fn lookups_served(c: &gust_client::Client) -> u64 {
    (0..c.daemon_count())
        .flat_map(|d| c.daemon_stats(d).unwrap().ops)
        .filter(|(op, _)| op == "stat" || op == "stat_data")
        .map(|(_, n)| n)
        .sum()
}

/// The holder asks until it holds the grant (a path changed lately is not granted
/// for a while: the daemon's contention rule), then 50 more lookups reach no daemon.
fn warm(h: &mut Holder, c: &gust_client::Client, cmd: &str) -> String {
    let answer = h.ask(cmd);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let before = lookups_served(c);
        for _ in 0..50 {
            assert_eq!(h.ask(cmd), answer);
        }
        let served = lookups_served(c) - before;
        if served <= 1 {
            return answer;
        }
        assert!(Instant::now() < deadline, "{cmd}: lookups of an unchanged record still reach the daemons");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn write_file(c: &gust_client::Client, p: &str, data: &[u8]) {
    let fd = c.open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644).unwrap();
    assert_eq!(c.write(fd, data).unwrap(), data.len());
    c.close(fd).unwrap();
}

/// A stat, an open-and-read of a small file: answered from the holder's memory,
/// and a chmod, an unlink, a rewrite and a create by another process are seen by
/// the holder's next operation.
#[test]
fn another_process_sees_every_change_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start(3);
    let c = inst.client();
    c.mkdir("/g", 0o755).unwrap();
    write_file(&c, "/g/f", b"one");
    let mut h = Holder::start(&inst, &bin);

    assert_eq!(warm(&mut h, &c, "stat /gustfs/g/f"), "mode 644 size 3");
    c.chmod("/g/f", 0o600).unwrap();
    assert_eq!(h.ask("stat /gustfs/g/f"), "mode 600 size 3");

    assert_eq!(warm(&mut h, &c, "read /gustfs/g/f"), "data one");
    write_file(&c, "/g/f", b"two!");
    assert_eq!(h.ask("read /gustfs/g/f"), "data two!");
    assert_eq!(h.ask("stat /gustfs/g/f"), "mode 600 size 4");

    warm(&mut h, &c, "stat /gustfs/g/f");
    c.unlink("/g/f").unwrap();
    assert_eq!(h.ask("stat /gustfs/g/f"), format!("errno {}", libc::ENOENT));
    write_file(&c, "/g/f", b"three");
    assert_eq!(h.ask("read /gustfs/g/f"), "data three");
    assert_eq!(h.ask("quit"), "");
}

/// A listing is answered from the holder's memory while no name in the directory
/// changes (every daemon granted its names, docs/DESIGN.md "Grants"); a name
/// created, removed or renamed by another process is in (or out of) the holder's
/// next listing.
#[test]
fn a_listing_is_kept_until_another_process_changes_a_name() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start(3);
    let c = inst.client();
    c.mkdir("/g", 0o755).unwrap();
    for n in ["a", "b", "c"] {
        write_file(&c, &format!("/g/{n}"), n.as_bytes());
    }
    let mut h = Holder::start(&inst, &bin);
    let ls = |h: &mut Holder| h.ask("ls /gustfs/g");
    // Until the holder holds the listing: it needs its callback connections, and a
    // directory whose names changed lately is not granted for a while (contended).
    let warm = |h: &mut Holder, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let before = common::listings_served(&c);
            for _ in 0..20 {
                assert_eq!(ls(h), want);
            }
            if common::listings_served(&c) == before {
                return;
            }
            assert!(Instant::now() < deadline, "listings of an unchanged directory still reach the daemons");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    warm(&mut h, "names a b c");
    write_file(&c, "/g/d", b"d");
    assert_eq!(ls(&mut h), "names a b c d", "a name created by another process");
    c.unlink("/g/a").unwrap();
    assert_eq!(ls(&mut h), "names b c d", "a name removed by another process");
    c.rename("/g/b", "/g/e").unwrap();
    assert_eq!(ls(&mut h), "names c d e", "a name renamed by another process");
    // A change of a file's contents or attributes changes no name: a listing of
    // names alone (the client core's `read_dir`; the preload library lists with
    // attributes, and fetches again for an entry whose record was recalled) stays
    // in memory, with no request.
    let lister = inst.client();
    lister.set_long_lived();
    let names = |l: &gust_client::Client| {
        let mut v: Vec<String> = l.read_dir("/g").unwrap().into_iter().map(|e| e.name).collect();
        v.sort();
        v.join(" ")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while {
        let sent = lister.rpcs_sent();
        assert_eq!(names(&lister), "c d e");
        lister.rpcs_sent() != sent
    } {
        assert!(Instant::now() < deadline, "a names-only listing still asks the daemons");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.chmod("/g/c", 0o600).unwrap();
    let fd = c.open("/g/d", libc::O_WRONLY | libc::O_TRUNC, 0).unwrap();
    c.write(fd, b"longer").unwrap();
    c.close(fd).unwrap();
    let sent = lister.rpcs_sent();
    assert_eq!(names(&lister), "c d e");
    assert_eq!(lister.rpcs_sent(), sent, "a chmod or a write recalled the directory's names");
    c.unlink("/g/c").unwrap();
    assert_eq!(names(&lister), "d e");
    assert_eq!(h.ask("quit"), "");
}

/// A child of fork is another client: it does not answer from the copies it
/// inherited (the daemon recalls the parent's grants, not the child's memory).
#[test]
fn a_forked_child_does_not_use_its_parents_grants() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start(2);
    let c = inst.client();
    write_file(&c, "/k", b"x");
    let mut h = Holder::start(&inst, &bin);
    assert_eq!(warm(&mut h, &c, "stat /gustfs/k"), "mode 644 size 1");
    assert_eq!(h.ask("fork"), "child");
    c.chmod("/k", 0o620).unwrap();
    assert_eq!(h.ask("stat /gustfs/k"), "mode 620 size 1", "the child");
    c.chmod("/k", 0o602).unwrap();
    assert_eq!(h.ask("stat /gustfs/k"), "mode 602 size 1", "the child, again");
    assert_eq!(h.ask("quit"), "parent");
    assert_eq!(h.ask("stat /gustfs/k"), "mode 602 size 1", "the parent");
}

/// A parent that exits while its forked child lives delays nothing: the child
/// closed its copies of the parent's callback connections at the fork, so the
/// parent's exit ends them and its grants go at once.
#[test]
fn a_holder_that_exits_leaving_a_child_delays_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start(2);
    let c = inst.client();
    write_file(&c, "/p", b"x");
    let mut h = Holder::start(&inst, &bin);
    warm(&mut h, &c, "stat /gustfs/p");
    assert_eq!(h.ask("fork-leave"), "child");
    h.child.wait().unwrap(); // the parent exited
    c.chmod("/p", 0o612).unwrap();
    let waits: usize = (0..2).map(|d| inst.daemon_log(d).matches("did not answer a recall").count()).sum();
    assert_eq!(waits, 0, "a daemon waited out the lease of a process that had exited");
    assert_eq!(h.ask("stat /gustfs/p"), "mode 612 size 1", "the child");
    assert_eq!(h.ask("quit"), "");
}

/// A stopped holder delays a change by at most its lease, and sees the change when
/// it goes on; a killed one delays nothing (its connection's end frees the grant).
#[test]
fn a_stopped_holder_delays_a_change_by_its_lease_and_a_dead_one_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start(2);
    let c = inst.client();
    write_file(&c, "/s", b"x");
    let mut h = Holder::start(&inst, &bin);
    warm(&mut h, &c, "stat /gustfs/s");
    h.signal(libc::SIGSTOP);
    let t = Instant::now();
    c.chmod("/s", 0o640).unwrap();
    let waited = t.elapsed();
    h.signal(libc::SIGCONT);
    // It went on within the bound (a generous one: a loaded machine adds its delay).
    assert!(waited < LEASE_BOUND * 5, "the chmod waited {waited:?} for a stopped holder");
    assert_eq!(h.ask("stat /gustfs/s"), "mode 640 size 1");
    let waits = |inst: &Instance| -> usize {
        (0..2).map(|d| inst.daemon_log(d).matches("did not answer a recall").count()).sum()
    };
    // At least once: a recall of the path and one of a neighbour granted with it
    // may each wait (a run beside another test binary once counted otherwise).
    let waited_out = waits(&inst);
    assert!(waited_out >= 1, "the daemon waited out the stopped holder's lease");

    warm(&mut h, &c, "stat /gustfs/s");
    drop(h); // kill -9 and wait
    c.chmod("/s", 0o604).unwrap();
    assert_eq!(waits(&inst), waited_out, "a killed holder's grants went with its connection");
    let st = c.stat("/s").unwrap();
    assert_eq!(st.mode & 0o7777, 0o604);
}

/// A daemon restarted on its root directory holds changes back for one lease:
/// its previous incarnation's holders stop using its grants by then.
#[test]
fn a_restarted_daemon_waits_out_the_old_grants() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start(1);
    let c = inst.client();
    write_file(&c, "/r", b"x");
    let mut h = Holder::start(&inst, &bin);
    warm(&mut h, &c, "stat /gustfs/r");
    inst.restart_daemon(0);
    let c2 = inst.client();
    c2.chmod("/r", 0o611).unwrap();
    assert_eq!(h.ask("stat /gustfs/r"), "mode 611 size 1");
}

/// Through the client core: 200 stats of 20 files this process created reach no
/// daemon (none is due for renewal: the loop takes far less than half a lease).
#[test]
fn stats_of_files_this_process_created_need_no_request() {
    let inst = Instance::start(2);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    for i in 0..20 {
        let fd = c.open(&format!("/d/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
    }
    // The first lookups of each daemon come before this process has a callback
    // connection there (grants.rs, CALLBACK_AFTER): the next stats ask once more,
    // and bring grants.
    for _ in 0..2 {
        for i in 0..20 {
            c.stat(&format!("/d/f{i}")).unwrap();
        }
    }
    assert_eq!(c.granted_records(), 20);
    let sent = c.rpcs_sent();
    for _ in 0..10 {
        for i in 0..20 {
            c.stat(&format!("/d/f{i}")).unwrap();
        }
    }
    let sent = c.rpcs_sent() - sent;
    assert_eq!(sent, 0, "200 stats of held records sent {sent} requests");
}

/// The recall is what keeps the holder right: with it disabled in the daemons
/// (GUST_DEBUG_NO_RECALL=1, for tests only), the holder goes on answering from its
/// stale copy after the change returned.
#[test]
fn without_the_recall_the_holder_would_answer_stale() {
    let dir = tempfile::tempdir().unwrap();
    let bin = holder_bin(&dir);
    let inst = Instance::start_with_env(1, &[], &[("GUST_DEBUG_NO_RECALL", "1")]);
    let c = inst.client();
    write_file(&c, "/f", b"x");
    let mut h = Holder::start(&inst, &bin);
    assert_eq!(warm(&mut h, &c, "stat /gustfs/f"), "mode 644 size 1");
    c.chmod("/f", 0o600).unwrap();
    assert_eq!(h.ask("stat /gustfs/f"), "mode 644 size 1");
}
