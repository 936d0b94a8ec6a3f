//! Node-local data is the instance owner's alone. Another user of the node (here
//! `nobody`, through runuser) can read no chunk file, RocksDB file, secret, hosts file
//! or log, list no daemon root directory and connect to no daemon socket, whatever
//! umask the instance was started with, while the owner's programs keep working. A
//! root directory left wider is tightened at start; a shared or foreign one is
//! refused. Staged-out files and directories get their modes from GustFS. Needs root.

mod common;

use common::{get, put};
use gust_e2e::{gust_bin, wait_until, with_umask, Instance};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn assert_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test acts as user nobody and needs root");
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every path under `dir` (not `dir` itself) with its mode, depth first. Files that
/// vanish meanwhile (RocksDB replaces some of its own) are skipped.
fn walk(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        out.push((p.clone(), m.mode() & 0o7777));
        if m.is_dir() {
            out.extend(walk(&p));
        }
    }
    out
}

fn as_nobody(args: &[&str]) -> Output {
    Command::new("runuser").args(["-u", "nobody", "--"]).args(args).output().expect("runuser")
}

/// `args`, run as nobody, must fail for want of permission.
fn assert_denied(what: &str, args: &[&str]) {
    let out = as_nobody(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "as nobody, {what} ({args:?}) succeeded ({} bytes on stdout)", out.stdout.len());
    assert!(err.contains("Permission denied"), "as nobody, {what} ({args:?}) failed, but not with EACCES: {err}");
}

/// Connects to a Unix socket (perl is part of every Debian system, perl-base).
const CONNECT: &str = "use Socket; socket(my $s, PF_UNIX, SOCK_STREAM, 0) or die \"socket: $!\\n\"; \
                       connect($s, pack_sockaddr_un($ARGV[0])) or die \"connect: $!\\n\"";

#[test]
fn another_user_of_the_node_reads_nothing() {
    assert_root();
    // Started with umask 0000: privacy must not depend on the caller's umask.
    // Small chunks, so that both daemons surely hold some of the file.
    let inst = Instance::start_under_umask(2, &["--chunk-size", "64k"], Some(0o000));
    let top = inst.rootdir();
    // Let other users as far as the directory that holds the instance (an existing
    // --rootdir keeps its mode), so that only GustFS's own modes stand in their way.
    chmod(top, 0o755);
    let c = inst.client();
    let data = b"node-local job data; ".repeat(100_000); // 2.1 MB, 33 chunks
    put(&c, "/f", &data);

    // Everything the instance put on the node is the owner's alone.
    let everything = walk(top);
    for (p, m) in &everything {
        assert_eq!(m & 0o077, 0, "{} has mode {m:04o}", p.display());
    }
    let everything: Vec<PathBuf> = everything.into_iter().map(|(p, _)| p).collect();
    let d0 = top.join("d0");
    assert_eq!(mode(&d0), 0o700, "{} has mode {:04o}", d0.display(), mode(&d0));
    let chunk_files: Vec<&PathBuf> = everything
        .iter()
        .filter(|p| p.parent().and_then(Path::parent).is_some_and(|q| q.ends_with("chunks")) && p.is_file())
        .filter(|p| p.extension().is_none_or(|x| x != "sum"))
        .collect();
    assert_eq!(chunk_files.len(), 2, "one chunk file per daemon (besides its checksums): {chunk_files:?}");
    let needle = b"node-local job data";
    let holds_data = |p: &Path| std::fs::read(p).unwrap().windows(needle.len()).any(|w| w == needle);
    assert!(chunk_files.iter().all(|p| holds_data(p)), "the chunk files hold the file's bytes");
    let wal = everything
        .iter()
        .find(|p| p.starts_with(d0.join("metadata")) && p.extension().is_some_and(|x| x == "log"))
        .expect("a RocksDB write-ahead log in d0/metadata");
    let sock = d0.join("daemon.sock");
    assert!(std::fs::symlink_metadata(&sock).is_ok(), "{} missing", sock.display());

    // nobody gets as far as the instance's directory ...
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let out = as_nobody(&["ls", &s(top)]);
    assert!(out.status.success(), "as nobody, ls {}: {}", top.display(), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("d0.log"));
    // ... and no further.
    for p in &chunk_files {
        assert_denied("reading a chunk file", &["cat", &s(p)]);
    }
    assert_denied("reading RocksDB's CURRENT", &["cat", &s(&d0.join("metadata/CURRENT"))]);
    assert_denied("reading RocksDB's log", &["cat", &s(wal)]);
    assert_denied("reading the secret", &["cat", &s(&top.join("gust.hosts.secret"))]);
    assert_denied("reading the hosts file", &["cat", &s(&inst.hosts)]);
    assert_denied("reading a daemon log", &["cat", &s(&top.join("d1.log"))]);
    assert_denied("listing a daemon root directory", &["ls", &s(&d0)]);
    assert_denied("connecting to the daemon socket", &["perl", "-e", CONNECT, &s(&sock)]);

    // The owner's programs keep working, over the socket as before.
    let out = Command::new("perl").args(["-e", CONNECT, &s(&sock)]).output().unwrap();
    assert!(out.status.success(), "the owner cannot connect: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(get(&c, "/f"), data);
    let out = inst.gust(&["cat", "/f"]);
    assert!(out.status.success(), "gust cat: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, data);
}

#[test]
fn a_wider_root_directory_is_tightened_at_start() {
    let inst = Instance::start(1);
    let c = inst.client();
    put(&c, "/kept", b"kept");
    let old = inst.hosts_file().daemons[0].clone();
    // SAFETY: plain kill(2) of the daemon's pid.
    unsafe { libc::kill(old.pid as i32, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(old.tcp_addr()).is_err()));
    // As an older GustFS or a careless chmod left it.
    chmod(&old.rootdir, 0o755);
    let log = inst.restart_daemon_at(0, "127.0.0.1:0");
    assert!(wait_until(Duration::from_secs(20), || {
        let e = inst.hosts_file().daemons[0].clone();
        e.pid != old.pid && std::net::TcpStream::connect(e.tcp_addr()).is_ok()
    }));
    assert_eq!(mode(&old.rootdir), 0o700, "root directory mode {:04o} after the restart", mode(&old.rootdir));
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("tightened root directory") && log.contains("from mode 0755 to 0700"), "log:\n{log}");
    assert_eq!(get(&c, "/kept"), b"kept");
}

/// `gust daemon` on `rootdir` must refuse with `needle` in its message and leave the
/// directory as it was.
fn assert_daemon_refuses(rootdir: &Path, needle: &str) {
    let hosts = tempfile::tempdir_in("/tmp").unwrap();
    let log = hosts.path().join("daemon.log");
    let before = mode(rootdir);
    let mut child = Command::new(gust_bin())
        .args(["daemon", "--clean-rootdir", "--listen", "127.0.0.1:0", "--rootdir"])
        .arg(rootdir)
        .arg("--hosts-file")
        .arg(hosts.path().join("gust.hosts"))
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // A daemon that accepted the directory serves until stopped: bound the wait.
    let mut status = None;
    wait_until(Duration::from_secs(20), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "gust daemon accepted {}: {err}", rootdir.display());
    assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    assert_eq!(mode(rootdir), before, "{} was changed", rootdir.display());
    assert!(rootdir.join("theirs").exists(), "--clean-rootdir deleted another user's file");
    assert!(!hosts.path().join("gust.hosts").exists(), "a refused daemon registered");
}

#[test]
fn a_shared_or_foreign_root_directory_is_refused() {
    assert_root();
    let d = tempfile::tempdir_in("/tmp").unwrap();
    // Shared like /tmp: tightening it would lock its other users out.
    let shared = d.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("theirs"), b"x").unwrap();
    chmod(&shared, 0o1777);
    assert_daemon_refuses(&shared, "is a shared directory (mode 1777, sticky)");
    // Another user's: the daemon cannot make it private.
    let foreign = d.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("theirs"), b"x").unwrap();
    std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
    assert_daemon_refuses(&foreign, "belongs to uid 65534");
}

#[test]
fn staged_out_files_and_directories_keep_their_gustfs_modes() {
    let inst = Instance::start(2);
    let c = inst.client();
    let dirs = [("/d", 0o755), ("/d/sub", 0o750), ("/d/ro", 0o555)];
    for (p, m) in dirs {
        c.mkdir(p, 0o700).unwrap();
        c.chmod(p, m).unwrap();
    }
    let files = [("/d/a", 0o640), ("/d/p", 0o600), ("/d/sub/x", 0o755), ("/d/ro/r", 0o444)];
    for (p, m) in files {
        put(&c, p, p.as_bytes());
        c.chmod(p, m).unwrap();
    }
    let out_dir = tempfile::tempdir_in("/tmp").unwrap();
    let dest = out_dir.path().join("out");
    // A umask that would give every new file 0600 and directory 0700.
    let out = with_umask(
        Command::new(gust_bin()).args(["stage", "out", "/d"]).arg(&dest).env("GUST_HOSTS_FILE", &inst.hosts),
        0o077,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "gust stage out: {}", String::from_utf8_lossy(&out.stderr));
    for (p, m) in dirs.iter().chain(&files) {
        let local = dest.join(p.strip_prefix("/d").unwrap().trim_start_matches('/'));
        assert_eq!(mode(&local), *m, "{} (from {p}) has mode {:04o}, want {m:04o}", local.display(), mode(&local));
    }
    for (p, _) in files {
        let local = dest.join(p.strip_prefix("/d/").unwrap());
        assert_eq!(std::fs::read(&local).unwrap(), p.as_bytes());
    }
}
