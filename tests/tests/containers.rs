//! Containers (issue 32, part 5): a containerised program uses a GustFS instance of
//! its host, through a FUSE mount bound into the container, and through the preload
//! library, hosts file and sockets bound in. Real podman (Debian's, scripts/setup.sh)
//! running the host's own programs in a container of their own (mount, PID, UTS and
//! IPC namespaces) from a root file system made here: the host's /usr bound
//! read-only, nothing else of the host's. So no image registry is needed.
//!
//! podman's runtime here is runc with cgroupfs: this machine mounts cgroups in hybrid
//! mode, which crun refuses. On a cgroup v2 machine the defaults work as well.
//! Needs root (rootful podman) and podman; without either the tests say so and pass,
//! as the netns tests do not (they need root for namespaces of their own).

mod common;

use gust_e2e::mount::Mount;
use gust_e2e::{gust_bin, Instance};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether podman runs here (and this process is root); says why not otherwise.
fn podman_here() -> bool {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("containers: not root; rootful podman is what the test exercises");
        return false;
    }
    match Command::new("podman").arg("--version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            eprintln!("containers: podman is not installed (scripts/setup.sh installs it)");
            false
        }
    }
}

/// A root file system for the host's programs: /usr bound in at run time, the
/// merged-/usr links, and empty mount points.
fn rootfs() -> tempfile::TempDir {
    let r = tempfile::Builder::new().prefix("gust-rootfs").tempdir_in("/tmp").unwrap();
    for d in ["usr", "etc", "tmp", "proc", "sys", "dev", "gustfs", "opt/gust"] {
        std::fs::create_dir_all(r.path().join(d)).unwrap();
    }
    for (link, to) in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        std::os::unix::fs::symlink(to, r.path().join(link)).unwrap();
    }
    std::fs::set_permissions(r.path().join("tmp"), std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    r
}

/// Runs `sh -c script` in a container on `root` with these binds (host path,
/// container path, options) and variables; host networking (the daemons listen on
/// the host's loopback).
fn podman(root: &Path, binds: &[(&Path, &str, &str)], env: &[(&str, String)], script: &str) -> Output {
    let mut cmd = Command::new("podman");
    cmd.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs", "run", "--rm", "--network", "host"])
        .args(["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"])
        .args(["-v", "/usr:/usr:ro"]);
    for (host, inside, opts) in binds {
        cmd.arg("-v").arg(format!("{}:{inside}{opts}", host.display()));
    }
    for (k, v) in env {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    cmd.arg("--rootfs").arg(root).args(["sh", "-c", script]);
    cmd.output().expect("run podman")
}

fn preload_lib() -> PathBuf {
    let p = gust_bin().parent().unwrap().join("libgust_preload.so");
    assert!(p.exists(), "{} missing: cargo build --release -p gust-preload", p.display());
    p
}

/// What a program in the container writes through a bound-in FUSE mount is the
/// instance's: seen by the host's client byte for byte, and what the host wrote is
/// read in the container. tar and Python run in the container.
#[test]
fn a_container_uses_a_fuse_mount_bound_in() {
    if !podman_here() {
        return;
    }
    let inst = Instance::start(2);
    let c = inst.client();
    common::put(&c, "/from-host", b"written on the host\n");
    let m = Mount::new(&inst, &[]);
    let root = rootfs();
    let out = podman(
        root.path(),
        &[(m.path(), "/gustfs", "")],
        &[],
        "set -e
         cat /gustfs/from-host
         mkdir -p /gustfs/box/src && cd /gustfs/box
         printf 'a\\n' > src/a && seq 1 2000 > src/b
         tar cf t.tar src && mkdir out && tar xf t.tar -C out
         cmp src/b out/src/b
         python3 -c \"open('/gustfs/box/py', 'w').write('from python in a container\\n')\"
         cat /proc/1/cmdline | tr '\\0' ' '",
    );
    let text = gust_e2e::stdout_of("podman run with the FUSE mount", &out);
    assert!(text.starts_with("written on the host\n"), "{text}");
    assert!(text.contains("sh -c"), "PID 1 in the container is its shell: {text}");
    assert_eq!(common::get(&c, "/box/py"), b"from python in a container\n");
    let b: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    assert_eq!(common::get(&c, "/box/out/src/b"), b.as_bytes());
}

/// The preload library, the hosts file and the instance's sockets bound in (at the
/// host's paths): an unmodified shell and coreutils in the container reach the
/// daemons with no mount at all.
#[test]
fn a_container_uses_the_preload_library_bound_in() {
    if !podman_here() {
        return;
    }
    let inst = Instance::start(2);
    let c = inst.client();
    common::put(&c, "/from-host", b"host data\n");
    let root = rootfs();
    let lib = preload_lib();
    let libdir = lib.parent().unwrap();
    let env = [
        ("LD_PRELOAD", "/opt/gust/libgust_preload.so".to_string()),
        ("GUST_HOSTS_FILE", inst.hosts.display().to_string()),
        ("GUST_MOUNTDIR", "/gustfs".to_string()),
    ];
    let here = inst.rootdir().display().to_string();
    let out = podman(
        root.path(),
        &[(libdir, "/opt/gust", ":ro"), (inst.rootdir(), &here, "")],
        &env,
        "set -e
         cat /gustfs/from-host
         mkdir /gustfs/pre && seq 1 500 > /gustfs/pre/n && sha256sum /gustfs/pre/n | cut -d' ' -f1
         ls /gustfs/pre",
    );
    let text = gust_e2e::stdout_of("podman run with the preload library", &out);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("host data"));
    let n: String = (1..=500).map(|i| format!("{i}\n")).collect();
    assert_eq!(common::get(&c, "/pre/n"), n.as_bytes());
    let sum = lines.next().unwrap_or_default().to_string();
    let host_sum = Command::new("sh").args(["-c", "seq 1 500 | sha256sum | cut -d' ' -f1"]).output().unwrap();
    assert_eq!(sum, String::from_utf8_lossy(&host_sum.stdout).trim(), "the container read back what it wrote");
    assert_eq!(lines.next(), Some("n"));
    // Nothing reached the container's own /gustfs directory: it all went to GustFS.
    assert!(std::fs::read_dir(root.path().join("gustfs")).unwrap().next().is_none());
}
