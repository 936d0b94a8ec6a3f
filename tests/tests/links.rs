//! Hard links (docs/DESIGN.md, "Hard links"): what a crash between the steps of a
//! link or an unlink leaves (a link count one too high, never lost data), and a
//! descriptor whose file another process links meanwhile moving its size updates
//! to the file's attributes record. Tools and POSIX details: posix_conformance.rs.

use gust_client::Errno;
use gust_e2e::{gust_bin, Instance};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

/// Runs a Python script under the preload library, with `env` added.
fn python(inst: &Instance, script: &str, env: &[(&str, &str)]) -> Output {
    Command::new(gust_bin())
        .args(["run", "--", "python3", "-c", script])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .envs(env.iter().copied())
        .output()
        .expect("gust run python3")
}

fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn crashed(out: &Output) -> bool {
    // `gust run` reports its child's death by a signal as 128 + the signal.
    out.status.signal() == Some(libc::SIGABRT) || out.status.code() == Some(128 + libc::SIGABRT)
}

/// Data larger than a file kept inline, so it lives in chunks by file id.
const SETUP: &str = "import os
d = '/gustfs/' + os.environ['CASE']
data = bytes(range(256)) * 1200
os.makedirs(d, exist_ok=True)
f, g = d + '/f', d + '/g'
";

#[test]
fn a_crash_between_the_steps_of_link_or_unlink_loses_nothing() {
    let inst = Instance::start(3);
    for (step, count_after_crash) in [("after-link-path", 1), ("after-mark", 2)] {
        let env = [("CASE", step)];
        ok("write", python(&inst, &format!("{SETUP}open(f, 'wb').write(data)"), &env));
        let out =
            python(&inst, &format!("{SETUP}os.link(f, g)"), &[("CASE", step), ("GUST_DEBUG_CRASH_IN_LINK", step)]);
        assert!(crashed(&out), "{step}: the link did not stop where asked: {out:?}");
        // The old name reads the same; the count is at most one too high; a link
        // and unlinks afterwards work, and the data stays until the last name goes.
        let report = ok(
            "after the crash",
            python(
                &inst,
                &format!(
                    "{SETUP}assert open(f, 'rb').read() == data
print(os.stat(f).st_nlink, os.path.exists(g))
os.link(f, g)
assert open(g, 'rb').read() == data and os.stat(f).st_ino == os.stat(g).st_ino
os.unlink(f)
assert open(g, 'rb').read() == data
print(os.stat(g).st_nlink)
os.unlink(g)
print(sorted(os.listdir(d)))"
                ),
                &env,
            ),
        );
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines[0], format!("{count_after_crash} False"), "{step}: {report}");
        // One name left, counted one too high: the leak the design accepts.
        assert_eq!(lines[1], "2", "{step}: {report}");
        assert_eq!(lines[2], "[]", "{step}: {report}");
    }
    // Unlink: the name is removed, the count not yet.
    let env = [("CASE", "unlink")];
    ok("write and link", python(&inst, &format!("{SETUP}open(f, 'wb').write(data)\nos.link(f, g)"), &env));
    let out = python(
        &inst,
        &format!("{SETUP}os.unlink(g)"),
        &[("CASE", "unlink"), ("GUST_DEBUG_CRASH_IN_LINK", "after-remove")],
    );
    assert!(crashed(&out), "unlink did not stop where asked: {out:?}");
    let report = ok(
        "after the crash",
        python(
            &inst,
            &format!("{SETUP}assert open(f, 'rb').read() == data\nprint(os.stat(f).st_nlink, os.path.exists(g))"),
            &env,
        ),
    );
    assert_eq!(report, "2 False");
}

/// A descriptor opened before another process linked its file: its writes' size
/// updates are refused at the old name (EREMOTE) and go to the attributes record,
/// so every name sees the size; appends too.
#[test]
fn a_writer_follows_its_file_into_a_link() {
    let inst = Instance::start(3);
    let a = inst.client();
    let b = inst.client();
    let fd = a.open("/f", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    a.write(fd, &[1u8; 4096]).unwrap();
    b.link("/f", "/g").unwrap();
    a.write(fd, &[2u8; 4096]).unwrap();
    // Sizes of writes are sent at the latest by fsync or close (docs/SEMANTICS.md,
    // the size cache), to the old name first.
    a.fsync(fd).unwrap();
    assert_eq!(b.stat("/g").unwrap().size, 8192);
    assert_eq!(b.stat("/f").unwrap().nlink, 2);
    a.close(fd).unwrap();
    let fd = a.open("/h", libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND, 0o644).unwrap();
    a.write(fd, b"one").unwrap();
    b.link("/h", "/i").unwrap();
    a.write(fd, b"two").unwrap();
    a.close(fd).unwrap();
    let fd = b.open("/i", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 16];
    let n = b.read(fd, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"onetwo");
    b.close(fd).unwrap();
    // The last name takes the data with it.
    for p in ["/f", "/g", "/h", "/i"] {
        b.unlink(p).unwrap();
    }
    assert_eq!(b.stat("/g").map(|_| ()), Err(Errno(libc::ENOENT)));
}
