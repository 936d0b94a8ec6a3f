//! `gust start` refuses clearly (message and non-zero exit) when it cannot work.

use gust_e2e::{gust_bin, Instance};
use std::process::{Command, Output};

fn gust_start(args: &[&str], root: &std::path::Path) -> Output {
    Command::new(gust_bin())
        .args(["start", "--timeout", "20", "--rootdir"])
        .arg(root)
        .args(args)
        .env_remove("GUST_HOSTS_FILE")
        .output()
        .expect("run gust start")
}

fn assert_fails(out: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "gust start succeeded; stderr:\n{err}");
    assert_eq!(out.status.code(), Some(1), "stderr:\n{err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}:\n{err}");
    err
}

#[test]
fn port_in_use() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let out = gust_start(&["--local", "1", "--port", &port.to_string()], tmp.path());
    let err = assert_fails(&out, "address already in use");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    // No daemon was left behind.
    if let Ok(h) = gust_hosts::HostsFile::load(&tmp.path().join("gust.hosts")) {
        for d in h.daemons {
            // SAFETY: kill with signal 0 only checks for existence.
            assert_ne!(unsafe { libc::kill(d.pid as i32, 0) }, 0, "daemon {} still running", d.pid);
        }
    }
    drop(l);
}

#[test]
fn unwritable_root_directory() {
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let root = file.join("root");
    let err = assert_fails(&gust_start(&["--local", "2"], &root), "cannot create root directory");
    assert!(err.contains(&root.display().to_string()), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

#[test]
fn hosts_file_of_a_running_instance() {
    let inst = Instance::start(2);
    let before = std::fs::read_to_string(&inst.hosts).unwrap();
    let err = assert_fails(&gust_start(&["--local", "1"], inst.rootdir()), "already running");
    assert!(err.contains("gust stop"), "{err}");
    // The running instance is untouched and still serves.
    assert_eq!(std::fs::read_to_string(&inst.hosts).unwrap(), before);
    let c = inst.client();
    for d in 0..2 {
        c.ping(d).unwrap();
    }
    let fd = c.open("/still-works", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    c.close(fd).unwrap();
}

#[test]
fn stale_hosts_file_needs_force() {
    let mut inst = Instance::start(1);
    let keep = Command::new(gust_bin()).args(["stop", "--keep", "--hosts-file"]).arg(&inst.hosts).output().unwrap();
    assert!(keep.status.success());
    let err = assert_fails(&gust_start(&["--local", "1"], inst.rootdir()), "stale hosts file");
    assert!(err.contains("--force"), "{err}");
    let out = gust_start(&["--local", "1", "--force"], inst.rootdir());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    inst.client().ping(0).unwrap();
    inst.stop();
}

#[test]
fn bad_arguments() {
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    assert_fails(&gust_start(&["--local", "0"], tmp.path()), "--local must be at least 1");
    assert_fails(&gust_start(&["--local", "1", "--chunk-size", "1k"], tmp.path()), "--chunk-size must be between");
}

/// Options of issue 12 that cannot work are refused before anything starts.
#[test]
fn replicas_and_capacity_options_that_cannot_work() {
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    assert_fails(
        &gust_start(&["--local", "2", "--replicas", "3"], tmp.path()),
        "--replicas 3 needs at least 3 daemons",
    );
    // Out of range values are refused by the option parser (usage error, exit 2).
    for (args, needle) in [
        (&["--local", "4", "--replicas", "4"][..], "4 is not in 1..=3"),
        (&["--local", "2", "--placement", "fastest"][..], "unknown placement 'fastest'"),
    ] {
        let out = gust_start(args, tmp.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: {err}");
    }
    assert_fails(
        &gust_start(&["--local", "3", "--declare-capacity", "8MiB,16MiB"], tmp.path()),
        "--declare-capacity lists 2 sizes for 3 daemons",
    );
    assert_fails(
        &gust_start(&["--local", "3", "--placement", "capacity", "--replicas", "2"], tmp.path()),
        "not supported yet",
    );
    assert!(!tmp.path().join("gust.hosts").exists(), "a refused start left a hosts file");
}

/// `eval "$(gust start)"` fails when the start fails (`gust start` prints `false`
/// for the eval, as ssh-agent-style tools do), so `bash -e` and `&&` stop there
/// instead of going on without an instance; a usage error does the same, and a
/// start that works is evaluated as before.
#[test]
fn eval_of_a_failed_start_fails() {
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let bad_root = file.join("root");
    let gust = gust_bin();
    let bash = |script: &str| {
        Command::new("bash")
            .args(["-e", "-c", script])
            .env_remove("GUST_HOSTS_FILE")
            .env_remove("SLURM_JOB_ID")
            .output()
            .expect("run bash")
    };
    let start = format!("{} start --local 1 --timeout 20", gust.display());
    for script in [
        format!("eval \"$({start} --rootdir {})\"\necho went-on", bad_root.display()),
        format!("eval \"$({start} --rootdir {})\" && echo went-on\nexit 0", bad_root.display()),
        format!("eval \"$({start} --no-such-option)\"\necho went-on"),
        format!("eval \"$({} env --rootdir {})\"\necho went-on", gust.display(), bad_root.display()),
    ] {
        let out = bash(&script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("went-on"), "the script went on after a failed start:\n{script}\n{stdout}");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty(), "no message: {script}");
    }
    // A start that works: the exports are evaluated, nothing else.
    let root = tmp.path().join("ok");
    let out = bash(&format!(
        "eval \"$({start} --rootdir {})\"\necho \"hosts=$GUST_HOSTS_FILE\"\n{} stop",
        root.display(),
        gust.display()
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("hosts={}/gust.hosts", root.display())), "{stdout}");
}
