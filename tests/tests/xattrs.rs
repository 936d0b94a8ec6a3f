//! Extended attributes (docs/DESIGN.md, "Extended attributes"): what they cost,
//! that another client's change is seen at once, their bounds, that they outlive a
//! daemon restart and stay with the file when the instance grows, and real tools
//! (setfattr, getfattr, tar, cp, rsync, Python) through the FUSE mount and the
//! preload library. POSIX's errnos against a local directory are in
//! tests/conformance/posix.py (group `xattrs`). Needs attr, tar, rsync and python3
//! (scripts/setup.sh).

mod common;

use gust_client::{Client, ClientOptions};
use gust_e2e::mount::Mount;
use gust_e2e::{gust_bin, Instance};
use gust_proto::xattr::{XATTRS_BYTES_MAX, XATTR_CREATE, XATTR_ENTRY_OVERHEAD_BYTES, XATTR_REPLACE};
use std::path::Path;
use std::process::{Command, Stdio};

/// The ops daemons served while `f` ran (name, count), leaving out the counters'
/// own "stats" and grant plumbing, and the RPCs the client sent.
fn served(c: &Client, f: impl FnOnce()) -> (Vec<(String, u64)>, u64) {
    let total = |c: &Client| {
        let mut m = std::collections::BTreeMap::new();
        for d in 0..c.daemon_count() {
            for (op, n) in c.daemon_stats(d).unwrap().ops {
                *m.entry(op).or_insert(0u64) += n;
            }
        }
        m
    };
    let before = total(c);
    let sent = c.rpcs_sent();
    f();
    let sent = c.rpcs_sent() - sent;
    let moved = total(c)
        .into_iter()
        .filter(|(op, _)| !matches!(op.as_str(), "stats" | "callback" | "recall"))
        .filter_map(|(op, n)| {
            let d = n - before.get(&op).copied().unwrap_or(0);
            (d > 0).then_some((op, d))
        })
        .collect();
    (moved, sent)
}

#[test]
fn a_change_is_one_request_and_a_read_comes_from_the_record() {
    let inst = Instance::start(3);
    let c = inst.client_with(ClientOptions { grants: false, ..Default::default() });
    c.mkdir("/d", 0o755).unwrap();
    let fd = c.open("/d/f", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    c.close(fd).unwrap();
    // Without a grant, a change looks the record up first (its kind, the caller's
    // permission), then changes it.
    let (ops, sent) = served(&c, || c.setxattr("/d/f", "user.k", b"v", 0, true).unwrap());
    assert_eq!((ops, sent), (vec![("set_xattr".to_string(), 1), ("stat".to_string(), 1)], 2));
    // Without a grant, a get is the record's lookup.
    let (ops, sent) = served(&c, || assert_eq!(c.getxattr("/d/f", "user.k", true).unwrap(), b"v"));
    assert_eq!((ops, sent), (vec![("stat".to_string(), 1)], 1));
    // Other namespaces cost nothing (ls -l asks two per file).
    let (ops, sent) = served(&c, || assert_err!(c.getxattr("/d/f", "security.selinux", false), libc::EOPNOTSUPP));
    assert_eq!((ops, sent), (vec![], 0));

    // With grants: after a stat, gets and lists are answered from memory.
    let g = inst.client();
    g.set_long_lived();
    let granted = |g: &Client| {
        gust_e2e::wait_until(std::time::Duration::from_secs(10), || {
            g.stat("/d/f").unwrap();
            g.granted_lstat("/d/f").is_some()
        })
    };
    assert!(granted(&g), "no grant on /d/f");
    let (_, sent) = served(&g, || {
        assert_eq!(g.getxattr("/d/f", "user.k", true).unwrap(), b"v");
        assert_eq!(g.listxattr("/d/f", true).unwrap(), b"user.k\0");
    });
    assert_eq!(sent, 0, "gets under a grant sent requests");
    // A change under a grant is the one request.
    let (ops, sent) = served(&g, || g.setxattr("/d/f", "user.g", b"1", 0, true).unwrap());
    assert_eq!((ops, sent), (vec![("set_xattr".to_string(), 1)], 1));
    assert!(granted(&g), "no grant on /d/f");
    // Another client's change recalls that grant first: the next get sees it.
    c.setxattr("/d/f", "user.k", b"changed", XATTR_REPLACE, true).unwrap();
    assert_eq!(g.getxattr("/d/f", "user.k", true).unwrap(), b"changed");
    c.removexattr("/d/f", "user.k", true).unwrap();
    assert_err!(g.getxattr("/d/f", "user.k", true), libc::ENODATA);
    assert_eq!(g.listxattr("/d/f", true).unwrap(), b"user.g\0");
}

#[test]
fn bounds_flags_and_kinds() {
    let inst = Instance::start(2);
    let c = inst.client();
    let fd = c.open("/f", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    // By descriptor, on a file this process has not sent yet.
    c.fsetxattr(fd, "user.fd", b"1", XATTR_CREATE).unwrap();
    assert_eq!(c.fgetxattr(fd, "user.fd").unwrap(), b"1");
    c.close(fd).unwrap();
    assert_err!(c.setxattr("/f", "user.fd", b"2", XATTR_CREATE, true), libc::EEXIST);
    assert_err!(c.setxattr("/f", "user.new", b"2", XATTR_REPLACE, true), libc::ENODATA);
    assert_err!(c.setxattr("/f", "user.x", b"2", XATTR_CREATE | XATTR_REPLACE, true), libc::EINVAL);
    assert_err!(c.setxattr("/f", "trusted.x", b"2", 0, true), libc::EOPNOTSUPP);
    assert_err!(c.setxattr("/", "user.x", b"2", 0, true), libc::EOPNOTSUPP);
    assert_err!(c.setxattr("/nothing", "user.x", b"2", 0, true), libc::ENOENT);
    // The bound: everything of one file, 16 bytes per entry besides name and value.
    let room = XATTRS_BYTES_MAX - (XATTR_ENTRY_OVERHEAD_BYTES + "user.fd".len() + 1);
    let big = vec![7u8; room - XATTR_ENTRY_OVERHEAD_BYTES - "user.big".len()];
    c.setxattr("/f", "user.big", &big, 0, true).unwrap();
    assert_err!(c.setxattr("/f", "user.c", b"", 0, true), libc::ENOSPC);
    assert_err!(c.setxattr("/f", "user.big", &[big.clone(), vec![1]].concat(), 0, true), libc::ENOSPC);
    assert_eq!(c.getxattr("/f", "user.big", true).unwrap(), big, "a refused change changed nothing");
    // Symlinks and FIFOs carry none; a get through a symlink reads its target's.
    c.symlink("f", "/s").unwrap();
    assert_err!(c.setxattr("/s", "user.x", b"1", 0, false), libc::EPERM);
    assert_err!(c.getxattr("/s", "user.fd", false), libc::ENODATA);
    assert_eq!(c.getxattr("/s", "user.fd", true).unwrap(), b"1");
    c.mknod("/p", gust_proto::FileKind::Fifo, 0o644).unwrap();
    assert_err!(c.setxattr("/p", "user.x", b"1", 0, true), libc::EPERM);
}

#[test]
fn attributes_outlive_a_restart_and_move_when_the_instance_grows() {
    let inst = Instance::start(2);
    {
        let c = inst.client();
        c.mkdir("/d", 0o755).unwrap();
        for i in 0..40 {
            let p = format!("/d/f{i:02}");
            c.close(c.open(&p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap()).unwrap();
            c.setxattr(&p, "user.i", i.to_string().as_bytes(), 0, true).unwrap();
        }
        c.setxattr("/d", "user.dir", b"d", 0, true).unwrap();
    }
    // Daemon 1 stops and starts again on its stores.
    let pid = inst.daemon_pid(1);
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert!(gust_e2e::wait_until(std::time::Duration::from_secs(10), || inst.daemon_gone(1)));
    inst.restart_daemon(1);
    let c = inst.client();
    assert!(gust_e2e::wait_until(std::time::Duration::from_secs(10), || c.stat("/d/f01").is_ok()));
    // Then a third daemon joins: records move between daemons, with their attributes.
    let out = inst.gust(&["expand", "--local", "1"]);
    assert!(out.status.success(), "expand: {}", String::from_utf8_lossy(&out.stderr));
    let c = inst.client();
    assert_eq!(c.daemon_count(), 3);
    for i in 0..40 {
        assert_eq!(c.getxattr(&format!("/d/f{i:02}"), "user.i", true).unwrap(), i.to_string().as_bytes());
    }
    assert_eq!(c.getxattr("/d", "user.dir", true).unwrap(), b"d");
}

/// Runs a bash script (strict mode) with `envs`; panics with its output on failure.
fn sh(script: &str, envs: &[(&str, &str)], preload: bool) -> String {
    let mut cmd = if preload {
        let mut c = Command::new(gust_bin());
        c.args(["run", "--", "bash", "-euo", "pipefail", "-c", script]);
        c
    } else {
        let mut c = Command::new("bash");
        c.args(["-euo", "pipefail", "-c", script]);
        c
    };
    let out = cmd.envs(envs.iter().copied()).stdin(Stdio::null()).output().expect("bash");
    gust_e2e::stdout_of(&format!("script\n{script}\n---"), &out)
}

/// What the tools do, in directory `g` of GustFS and `l` on the local file system:
/// attributes set with setfattr come back through getfattr, tar, cp -a, rsync -X and
/// Python's shutil.copy2, in both directions.
const TOOLS: &str = r#"
mkdir -p "$G/src/sub"
echo data > "$G/src/f"
echo more > "$G/src/sub/g"
setfattr -n user.color -v blue "$G/src/f"
setfattr -n user.bin -v 0x00ff10 "$G/src/f"
setfattr -n user.dir -v yes "$G/src/sub"
dump() { (cd "$1" && getfattr -d -m '^user\.' f sub sub/g); }
want=$(dump "$G/src")
[ -n "$want" ]
# Out of GustFS and back in, each tool.
tar --xattrs --xattrs-include='user.*' -C "$G/src" -cf "$L/t.tar" .
mkdir "$G/untar" && tar --xattrs --xattrs-include='user.*' -C "$G/untar" -xf "$L/t.tar"
cp -a "$G/src" "$L/cp" && cp -a "$L/cp" "$G/cp"
rsync -aX "$G/src/" "$L/rs/" && rsync -aX "$L/rs/" "$G/rs/"
python3 -c "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])" "$G/src" "$G/py"
for d in "$G/untar" "$L/cp" "$G/cp" "$L/rs" "$G/rs" "$G/py"; do
  got=$(dump "$d")
  [ "$got" = "$want" ] || { echo "differs in $d:"; echo "$got"; echo "want:"; echo "$want"; exit 1; }
done
# Removal, and a listing that asks for ACLs and labels.
setfattr -x user.color "$G/src/f"
getfattr -d "$G/src/f" | grep -c user. 
ls -l "$G/src" > /dev/null
"#;

#[test]
fn tools_through_the_fuse_mount() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    let l = tempfile::tempdir_in("/tmp").unwrap();
    let out = sh(TOOLS, &[("G", &m.path().display().to_string()), ("L", &l.path().display().to_string())], false);
    assert_eq!(out.trim(), "1", "user.bin is left");
}

#[test]
fn tools_through_the_preload_library() {
    let inst = Instance::start(3);
    let l = tempfile::tempdir_in("/tmp").unwrap();
    let hosts = inst.hosts.display().to_string();
    let envs = [("G", "/gustfs/t"), ("L", &*l.path().display().to_string()), ("GUST_HOSTS_FILE", &*hosts)];
    assert!(!Path::new("/gustfs").exists());
    let out = sh(&format!("mkdir -p /gustfs/t\n{TOOLS}"), &envs, true);
    assert_eq!(out.trim(), "1", "user.bin is left");
}
