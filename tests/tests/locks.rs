//! File locks kept by the files' metadata daemons (docs/DESIGN.md, "Locks"):
//! processes under the LD_PRELOAD library contend for flock, fcntl (POSIX) and OFD
//! locks; a wait ends when the holder unlocks, closes (POSIX: any descriptor of the
//! file), is killed, or stops answering; a cycle of waits gets EDEADLK; a signal
//! interrupts a wait. Then SQLite (Python's sqlite3) in two processes at once.
//! The same through a FUSE mount is in locks_fuse.rs.

mod common;

use gust_e2e::{gust_bin, wait_until, Instance};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// Bound on waits that must end (generous: a loaded machine adds its delay).
const WAIT: Duration = Duration::from_secs(60);

/// A process answering lock commands (tests/c/lock_holder.c) under the library.
struct Locker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

fn locker_bin(dir: &Path) -> PathBuf {
    let bin = dir.join("lock_holder");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/lock_holder.c");
    let cc = Command::new("cc").args(["-O1", "-o"]).arg(&bin).arg(&src).output().expect("cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    bin
}

fn preload_lib() -> PathBuf {
    gust_bin().parent().unwrap().join("libgust_preload.so")
}

impl Locker {
    fn start(inst: &Instance, bin: &Path) -> Locker {
        let mut child = Command::new(bin)
            .env("LD_PRELOAD", preload_lib())
            .env("GUST_HOSTS_FILE", &inst.hosts)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a lock holder");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // Lines arrive on a thread: a command that blocks (a waiting lock) must not
        // block the test, which checks that it has not answered yet.
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in stdout.lines().map_while(|l| l.ok()) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let mut l = Locker { child, stdin, lines };
        assert_eq!(l.answer(), "ready");
        l
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&mut self) -> String {
        self.lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("no answer within {WAIT:?}: {e}"))
    }

    fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer()
    }

    /// Opens `path` read-write; its descriptor number.
    fn open(&mut self, path: &str) -> i32 {
        let a = self.ask(&format!("open {path}"));
        a.strip_prefix("fd ").unwrap_or_else(|| panic!("open {path}: {a}")).parse().unwrap()
    }

    fn pid(&mut self) -> i32 {
        self.ask("pid").strip_prefix("pid ").unwrap().parse().unwrap()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling a child of ours.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Whether an answer came (without waiting for one).
    fn answered(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
}

impl Drop for Locker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn eagain() -> String {
    format!("errno {}", libc::EAGAIN)
}

/// `lock` requests the daemons served so far: a waiting request has been answered
/// `Queued` once this counts it.
fn lock_requests(c: &gust_client::Client) -> u64 {
    common::op_total(c, "lock")
}

/// Sends `cmd` (a lock that must wait) to `l` and returns once the daemon queued
/// it: the `lock` count moved and no answer came.
fn send_waiting(l: &mut Locker, c: &gust_client::Client, cmd: &str) {
    let before = lock_requests(c);
    l.send(cmd);
    assert!(wait_until(WAIT, || lock_requests(c) > before), "{cmd}: the daemon never saw it");
    assert_eq!(l.answered(), None, "{cmd} answered although the lock is held by another process");
}

fn setup(n: u32) -> (tempfile::TempDir, PathBuf, Instance) {
    let dir = tempfile::tempdir().unwrap();
    let bin = locker_bin(dir.path());
    (dir, bin, Instance::start(n))
}

#[test]
fn two_processes_contend_for_flock_and_fcntl_locks() {
    let (_d, bin, inst) = setup(3);
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (fa, fb) = (a.open("/gustfs/f"), b.open("/gustfs/f"));
    // flock: exclusive against shared, both ways.
    assert_eq!(a.ask(&format!("flock {fa} ex nb")), "ok");
    assert_eq!(b.ask(&format!("flock {fb} sh nb")), eagain());
    assert_eq!(b.ask(&format!("flock {fb} ex nb")), eagain());
    assert_eq!(a.ask(&format!("flock {fa} sh nb")), "ok", "a conversion to shared");
    assert_eq!(b.ask(&format!("flock {fb} sh nb")), "ok", "two shared locks");
    assert_eq!(a.ask(&format!("flock {fa} ex nb")), eagain());
    assert_eq!(b.ask(&format!("flock {fb} un")), "ok");
    // a's failed conversion dropped its shared lock (as Linux does).
    assert_eq!(b.ask(&format!("flock {fb} ex nb")), "ok");
    assert_eq!(b.ask(&format!("flock {fb} un")), "ok");
    // fcntl byte ranges, and flock's space apart from them.
    assert_eq!(a.ask(&format!("flock {fa} ex nb")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 10")), "ok", "flock and fcntl locks do not meet");
    let pid_b = b.pid();
    assert_eq!(a.ask(&format!("getlk {fa} rd 5 1")), format!("locked wr 0 10 {pid_b}"));
    assert_eq!(a.ask(&format!("getlk {fa} wr 10 0")), "unlocked");
    assert_eq!(a.ask(&format!("lock {fa} rd 9 2")), eagain());
    assert_eq!(a.ask(&format!("lock {fa} wr 10 0")), "ok", "from 10 to the end");
    assert_eq!(b.ask(&format!("lock {fb} un 0 5")), "ok");
    assert_eq!(a.ask(&format!("lock {fa} rd 0 5")), "ok", "the unlocked head of b's range");
    assert_eq!(a.ask(&format!("lock {fa} rd 5 1")), eagain(), "b still holds 5..10");
    // lockf is a POSIX write lock from the offset.
    assert_eq!(b.ask(&format!("lockf {fb} test 5")), format!("errno {}", libc::EACCES));
    assert_eq!(b.ask(&format!("lockf {fb} tlock 5")), eagain());
    // OFD locks conflict with another process's POSIX locks.
    assert_eq!(b.ask(&format!("ofd {fb} wr 0 1")), eagain());
    assert_eq!(b.ask(&format!("ofdgetlk {fb} wr 0 1")), format!("locked rd 0 5 {}", a.pid()));
    // Bad input: an empty range is the whole file (l_len 0); a negative start is EINVAL.
    assert_eq!(a.ask(&format!("lock {fa} wr -1 1")), format!("errno {}", libc::EINVAL));
}

#[test]
fn a_waiting_lock_is_granted_when_the_holder_unlocks() {
    let (_d, bin, inst) = setup(2);
    let c = inst.client();
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (fa, fb) = (a.open("/gustfs/w"), b.open("/gustfs/w"));
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok");
    send_waiting(&mut b, &c, &format!("lock {fb} wr 100 10 wait"));
    assert_eq!(a.ask(&format!("lock {fa} un 0 0")), "ok");
    assert_eq!(b.answer(), "ok", "F_SETLKW granted after the unlock");
    assert_eq!(a.ask(&format!("lock {fa} wr 105 1")), eagain(), "b holds it now");
    // A blocking flock waits the same way.
    assert_eq!(a.ask(&format!("flock {fa} ex")), "ok");
    send_waiting(&mut b, &c, &format!("flock {fb} sh"));
    assert_eq!(a.ask(&format!("flock {fa} un")), "ok");
    assert_eq!(b.answer(), "ok", "flock granted after the unlock");
}

#[test]
fn a_cycle_of_waits_is_a_deadlock() {
    // One daemon: both files' locks on it, so it sees the whole cycle.
    let (_d, bin, inst) = setup(1);
    let c = inst.client();
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (af, ag) = (a.open("/gustfs/f"), a.open("/gustfs/g"));
    let (bf, bg) = (b.open("/gustfs/f"), b.open("/gustfs/g"));
    assert_eq!(a.ask(&format!("lock {af} wr 0 1")), "ok");
    assert_eq!(b.ask(&format!("lock {bg} wr 0 1")), "ok");
    send_waiting(&mut a, &c, &format!("lock {ag} wr 0 1 wait"));
    assert_eq!(b.ask(&format!("lock {bf} wr 0 1 wait")), format!("errno {}", libc::EDEADLK));
    assert_eq!(b.ask(&format!("lock {bg} un 0 1")), "ok");
    assert_eq!(a.answer(), "ok", "a's wait ends once b gives up");
}

#[test]
fn closing_any_descriptor_of_the_file_ends_the_posix_locks_not_the_ofd_ones() {
    let (_d, bin, inst) = setup(2);
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (a1, a2) = (a.open("/gustfs/c"), a.open("/gustfs/c"));
    let fb = b.open("/gustfs/c");
    assert_eq!(a.ask(&format!("lock {a1} wr 0 10")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 1")), eagain());
    assert_eq!(a.ask(&format!("close {a2}")), "ok", "another descriptor of the file");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 1")), "ok", "POSIX: a's locks went with that close");
    assert_eq!(b.ask(&format!("lock {fb} un 0 0")), "ok");
    // OFD locks belong to the open file description: only its last close ends them.
    let a3 = a.open("/gustfs/c");
    assert_eq!(a.ask(&format!("ofd {a1} wr 0 10")), "ok");
    assert_eq!(a.ask(&format!("close {a3}")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 1")), eagain(), "the OFD lock outlives another close");
    assert_eq!(a.ask(&format!("close {a1}")), "ok");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 1")), "ok", "and ends with its description");
}

#[test]
fn kill_9_of_a_holder_frees_its_locks_at_once() {
    let (_d, bin, inst) = setup(2);
    let c = inst.client();
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (fa, fb) = (a.open("/gustfs/k"), b.open("/gustfs/k"));
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok");
    assert_eq!(a.ask(&format!("flock {fa} ex")), "ok");
    send_waiting(&mut b, &c, &format!("lock {fb} wr 0 0 wait"));
    let t = Instant::now();
    a.signal(libc::SIGKILL);
    assert_eq!(b.answer(), "ok", "the waiter got the lock of the killed holder");
    let took = t.elapsed();
    assert_eq!(b.ask(&format!("flock {fb} ex nb")), "ok", "its flock lock went too");
    // The bound: the end of the killed process's callback connection, at once; a
    // second is far more than that takes even on a loaded machine.
    assert!(took < Duration::from_secs(5), "the lock came {took:?} after the kill");
    eprintln!("lock granted {took:?} after kill -9 of its holder");
}

#[test]
fn a_stopped_holder_loses_its_locks_within_the_bound() {
    let (_d, bin, inst) = setup(2);
    let c = inst.client();
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (fa, fb) = (a.open("/gustfs/s"), b.open("/gustfs/s"));
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok");
    a.signal(libc::SIGSTOP);
    let t = Instant::now();
    send_waiting(&mut b, &c, &format!("lock {fb} wr 0 0 wait"));
    assert_eq!(b.answer(), "ok", "the waiter got the lock of the stopped holder");
    let took = t.elapsed();
    a.signal(libc::SIGCONT);
    // PROBE_AFTER + TICK + LEASE = 3.25 s after the conflict (lock_service.rs);
    // generous here for a loaded machine, but far below "never".
    assert!(took < Duration::from_secs(20), "the lock came {took:?} after the holder stopped");
    eprintln!("lock granted {took:?} after its holder was stopped");
    assert_eq!(a.ask(&format!("lock {fa} wr 0 1")), eagain(), "the holder lost it: b holds it now");
}

#[test]
fn a_signal_interrupts_a_wait_which_then_holds_nothing() {
    let (_d, bin, inst) = setup(2);
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (fa, fb) = (a.open("/gustfs/i"), b.open("/gustfs/i"));
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok");
    assert_eq!(b.ask("alarm 1"), "ok");
    assert_eq!(b.ask(&format!("lock {fb} wr 0 0 wait")), format!("errno {}", libc::EINTR));
    assert_eq!(a.ask(&format!("lock {fa} un 0 0")), "ok");
    assert_eq!(a.ask(&format!("lock {fa} wr 0 0")), "ok", "the cancelled wait was not granted to b");
}

/// Two Python processes insert rows through sqlite3 at once, each in its own
/// transactions, into one database on GustFS (its locks are fcntl locks on the
/// database file): every row arrives once.
#[test]
fn sqlite_in_two_processes_loses_and_duplicates_nothing() {
    let inst = Instance::start(3);
    sqlite_two_writers(&inst, Path::new("/gustfs"), true);
}

/// Runs the two writers on database `dir/db.sqlite`, under the library if
/// `preload`, and checks the rows.
pub(crate) fn sqlite_two_writers(inst: &Instance, dir: &Path, preload: bool) {
    const ROWS: usize = 200;
    let db = dir.join("db.sqlite");
    // An empty file first: what "database is locked" came from before locks.
    let script = r#"
import sqlite3, sys
db, who, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = sqlite3.connect(db, timeout=60, isolation_level=None)
con.execute("create table if not exists t (who text, i integer, unique (who, i))")
for i in range(rows):
    con.execute("begin immediate")
    (n,) = con.execute("select count(*) from t").fetchone()
    con.execute("insert into t values (?, ?)", (who, i))
    con.execute("commit")
con.close()
print("done", who)
"#;
    let run = |args: &[&str]| {
        let mut cmd = Command::new("python3");
        cmd.arg("-c").arg(script).args(args).env("GUST_HOSTS_FILE", &inst.hosts);
        if preload {
            cmd.env("LD_PRELOAD", preload_lib());
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("python3")
    };
    let touch = {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", "import sys; open(sys.argv[1], 'w').close()"]).arg(&db).env("GUST_HOSTS_FILE", &inst.hosts);
        if preload {
            cmd.env("LD_PRELOAD", preload_lib());
        }
        cmd.output().unwrap()
    };
    assert!(touch.status.success(), "create the empty database: {}", String::from_utf8_lossy(&touch.stderr));
    let db_s = db.to_str().unwrap();
    let rows = ROWS.to_string();
    let t = Instant::now();
    let writers = [run(&[db_s, "a", &rows]), run(&[db_s, "b", &rows])];
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a writer failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("2 x {ROWS} transactions in {:?}", t.elapsed());
    let check = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("select who, i from t").fetchall()
print(len(rows), len(set(rows)), con.execute("pragma integrity_check").fetchone()[0])
"#;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", check]).arg(&db).env("GUST_HOSTS_FILE", &inst.hosts);
    if preload {
        cmd.env("LD_PRELOAD", preload_lib());
    }
    let out = cmd.output().unwrap();
    let got = String::from_utf8_lossy(&out.stdout);
    assert_eq!(got.trim(), format!("{} {} ok", 2 * ROWS, 2 * ROWS), "{}", String::from_utf8_lossy(&out.stderr));
}

/// With copies (`--replicas 2`) the locks live on the first live member of the
/// record's group: two processes still exclude each other.
#[test]
fn locks_with_copies() {
    let dir = tempfile::tempdir().unwrap();
    let bin = locker_bin(dir.path());
    let inst = Instance::start_with(3, &["--replicas", "2"]);
    let c = inst.client();
    let (mut a, mut b) = (Locker::start(&inst, &bin), Locker::start(&inst, &bin));
    let (fa, fb) = (a.open("/gustfs/r"), b.open("/gustfs/r"));
    assert_eq!(a.ask(&format!("flock {fa} ex nb")), "ok");
    assert_eq!(b.ask(&format!("flock {fb} ex nb")), eagain());
    send_waiting(&mut b, &c, &format!("flock {fb} ex"));
    assert_eq!(a.ask(&format!("close {fa}")), "ok");
    assert_eq!(b.answer(), "ok");
}
