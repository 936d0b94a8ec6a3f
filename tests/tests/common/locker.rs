//! A process answering lock commands (tests/c/lock_holder.c), under the preload
//! library or on a FUSE mount, for the lock tests (locks.rs, locks_fuse.rs).

use gust_e2e::{gust_bin, sqlite, wait_until, Instance};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// Bound on waits that must end (generous: a loaded machine adds its delay).
pub const WAIT: Duration = Duration::from_secs(60);

/// A process answering lock commands (tests/c/lock_holder.c) under the library.
pub struct Locker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

pub fn locker_bin(dir: &Path) -> PathBuf {
    let bin = dir.join("lock_holder");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/lock_holder.c");
    let cc = Command::new("cc").args(["-O1", "-o"]).arg(&bin).arg(&src).output().expect("cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    bin
}

pub fn preload_lib() -> PathBuf {
    gust_bin().parent().unwrap().join("libgust_preload.so")
}

impl Locker {
    /// Under the preload library, on `inst`.
    pub fn preloaded(inst: &Instance, bin: &Path) -> Locker {
        Locker::start(bin, &[("LD_PRELOAD", preload_lib().as_os_str()), ("GUST_HOSTS_FILE", inst.hosts.as_os_str())])
    }

    /// With `env` added (none: a plain process, for a FUSE mount).
    pub fn start(bin: &Path, env: &[(&str, &OsStr)]) -> Locker {
        let mut cmd = Command::new(bin);
        cmd.envs(env.iter().copied());
        Locker::spawn(cmd)
    }

    /// Runs `cmd` (the lock holder, with what it needs: a prefix such as `ip netns
    /// exec NS` that execs it, so that a signal reaches it).
    pub fn spawn(mut cmd: Command) -> Locker {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start a lock holder");
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

    pub fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn answer(&mut self) -> String {
        self.lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("no answer within {WAIT:?}: {e}"))
    }

    pub fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer()
    }

    /// Opens `path` read-write; its descriptor number.
    pub fn open(&mut self, path: &str) -> i32 {
        let a = self.ask(&format!("open {path}"));
        a.strip_prefix("fd ").unwrap_or_else(|| panic!("open {path}: {a}")).parse().unwrap()
    }

    pub fn pid(&mut self) -> i32 {
        self.ask("pid").strip_prefix("pid ").unwrap().parse().unwrap()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling a child of ours.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Whether an answer came (without waiting for one).
    pub fn answered(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
}

impl Drop for Locker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn eagain() -> String {
    format!("errno {}", libc::EAGAIN)
}

/// `lock` requests the daemons served so far: a waiting request has been answered
/// `Queued` once this counts it.
pub fn lock_requests(c: &gust_client::Client) -> u64 {
    super::op_total(c, "lock")
}

/// Sends `cmd` (a lock that must wait) to `l` and returns once the daemon queued
/// it: the `lock` count moved and no answer came.
pub fn send_waiting(l: &mut Locker, c: &gust_client::Client, cmd: &str) {
    let before = lock_requests(c);
    l.send(cmd);
    assert!(wait_until(WAIT, || lock_requests(c) > before), "{cmd}: the daemon never saw it");
    assert_eq!(l.answered(), None, "{cmd} answered although the lock is held by another process");
}

/// Runs the two writers of gust_e2e::sqlite on database `dir/db.sqlite`, under the
/// library if `preload`, and checks the rows and that the locks went to the daemons.
pub fn sqlite_two_writers(inst: &Instance, dir: &Path, preload: bool) {
    let db = dir.join("db.sqlite");
    let db = db.to_str().unwrap();
    let python = |args: &[&str]| {
        let mut cmd = Command::new("python3");
        cmd.args(args).env("GUST_HOSTS_FILE", &inst.hosts);
        if preload {
            cmd.env("LD_PRELOAD", preload_lib());
        }
        cmd
    };
    let t = Instant::now();
    sqlite::run_writers(&[&python, &python], db);
    eprintln!("2 x {} transactions in {:?}", sqlite::ROWS, t.elapsed());
    // Through the daemons' locks (SQLite locks the database file for every
    // transaction), not a node's kernel.
    let locks = super::op_total(&inst.client(), "lock");
    let transactions = 2 * sqlite::ROWS as u64;
    assert!(locks >= transactions, "{locks} lock requests reached the daemons for {transactions} transactions");
    sqlite::check_rows(&python, db, 2);
}
