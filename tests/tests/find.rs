//! `gust find` against GNU find: the same tree, seen through the FUSE mount by GNU
//! find and queried from the daemons by `gust find`, gives the same set of paths for
//! every predicate and for combinations. Needs /dev/fuse (as tests/tests/fuse.rs).

use gust_e2e::{gust_bin, Instance};
use std::path::Path;
use std::process::Command;

/// A `gust mount -d` of the instance; unmounted on drop.
struct Mount<'a> {
    dir: tempfile::TempDir,
    inst: &'a Instance,
}

impl<'a> Mount<'a> {
    fn new(inst: &'a Instance) -> Mount<'a> {
        let dir = tempfile::Builder::new().prefix("gust-mnt").tempdir_in("/tmp").unwrap();
        let out = Command::new(gust_bin())
            .arg("mount")
            .arg(dir.path())
            .arg("-d")
            .arg("--hosts-file")
            .arg(&inst.hosts)
            .output()
            .unwrap();
        assert!(out.status.success(), "gust mount -d: {}", String::from_utf8_lossy(&out.stderr));
        Mount { dir, inst }
    }
}

impl Drop for Mount<'_> {
    fn drop(&mut self) {
        let _ = Command::new(gust_bin()).arg("umount").arg(self.dir.path()).output();
        let _ = &self.inst;
    }
}

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("timeout")
        .args(["300", "bash", "-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .expect("run bash");
    assert!(out.status.success(), "script failed:\n{script}\n--- stderr\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The output lines with `prefix` cut off, sorted (GNU find's order is its walk's;
/// gust find's is the daemons').
fn relative_sorted(out: &str, prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = out
        .lines()
        .map(|l| l.strip_prefix(prefix).unwrap_or_else(|| panic!("{l} does not start with {prefix}")).to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn find_matches_gnu_find_through_the_mount_for_every_predicate() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst);
    let mnt = m.dir.path().to_str().unwrap().to_string();
    // A tree with sizes around every unit boundary, symlinks, names for globs, and
    // modification times at known ages (minutes before now).
    sh(
        m.dir.path(),
        r#"mkdir -p tree/a/b/c tree/docs 'tree/sp ace' tree/[x]
        for s in 0 1 511 512 513 1023 1024 1025 3000 1048576 1048577; do head -c $s /dev/zero > tree/a/s$s; done
        for i in $(seq 1 30); do echo $i > tree/a/b/f$i.txt; echo $i > tree/docs/r$i.md; done
        echo x > tree/a/b/c/.hidden; echo y > 'tree/sp ace/q?.txt'; echo z > 'tree/[x]/star*'
        ln -s a/s1 tree/lnk; ln -s ../../docs tree/a/b/dl; ln -s /nonexistent/target/longer tree/dangling
        now=$(date +%s)
        touch -d @$((now - 45 * 60)) tree/docs/r1.md tree/a/s512
        touch -d @$((now - 30 * 60 - 30)) tree/docs/r2.md
        touch -d @$((now - 5 * 60)) tree/docs/r3.md
        touch -d @$((now - 100 * 60)) tree/a/b/c tree/ref
        touch -d @$((now - 20 * 60)) tree/ref
        touch -d @$((now - 50 * 60)) tree/a/b/f*.txt"#,
    );
    let preds: &[&str] = &[
        "",
        "-name 'f1*'",
        "-name '*.txt'",
        "-name '[rs]?'",
        "-name '[!f]*'",
        "-name '*\\**'",
        "-name '.*'",
        "-type f",
        "-type d",
        "-type l",
        "-size 0",
        "-size 1",
        "-size 2",
        "-size -2",
        "-size +2",
        "-size 1k",
        "-size -1k",
        "-size +1k",
        "-size 513c",
        "-size +1M",
        "-size 1M",
        "-size -1M",
        "-size 3w",
        "-newer tree/ref",
        "-newer tree/docs/r2.md",
        "-mmin +40",
        "-mmin -40",
        "-mmin 30",
        "-mmin 31",
        "-mmin 45",
        "-mmin 46",
        "-mmin -10",
        "-type f -name '*.md' -mmin +10",
        "-type f -size +0 -newer tree/ref -name 'r*'",
    ];
    let mut checked = 0;
    for start in ["tree", "tree/a", "tree/a/b/c"] {
        for p in preds {
            let newer_fixed = p.replace("-newer tree/", &format!("-newer {mnt}/tree/"));
            let gnu = sh(m.dir.path(), &format!("find {mnt}/{start} {newer_fixed}"));
            let ours = sh(
                m.dir.path(),
                &format!(
                    "GUST_HOSTS_FILE={} {} find /gustfs/{start} {newer_fixed}",
                    inst.hosts.display(),
                    gust_bin().display()
                ),
            );
            let (g, o) = (relative_sorted(&gnu, &mnt), relative_sorted(&ours, "/gustfs"));
            assert_eq!(o, g, "find {start} {p}: gust find (left) differs from GNU find through the mount (right)");
            if !g.is_empty() {
                checked += 1;
            }
        }
    }
    // Most queries select something (a test of empty sets would prove little).
    assert!(checked >= preds.len() * 2, "only {checked} non-empty results");
    // A file as the starting point, and errors as find reports them.
    let one = sh(
        m.dir.path(),
        &format!("GUST_HOSTS_FILE={} {} find /gustfs/tree/a/s1 -size 1", inst.hosts.display(), gust_bin().display()),
    );
    assert_eq!(one.trim(), "/gustfs/tree/a/s1");
    let out = Command::new(gust_bin())
        .args(["find", "/gustfs/nope", "-type", "f"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/gustfs/nope") && err.contains("No such file"), "{err}");
    let out = Command::new(gust_bin())
        .args(["find", "/gustfs/tree", "-frob"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown predicate"));
}
