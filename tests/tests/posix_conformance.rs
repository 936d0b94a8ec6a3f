//! POSIX where programs notice (owners, permissions on a shared mount, times and
//! link counts, error precedence, FIFOs and sockets, hard links): the same probe
//! (tests/conformance/posix.py) runs on a local directory and on GustFS in the same
//! test, through the FUSE mount and through the preload library, and every line must
//! agree, except the relaxations listed here, which docs/SEMANTICS.md documents
//! with the same errno or value. Runs as root (other users are made with
//! setresuid in the probe); needs python3, coreutils, git and tar (scripts/setup.sh).

use gust_client::{as_caller, Credentials};
use gust_e2e::mount::Mount;
use gust_e2e::{gust_bin, Instance};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

type Results = BTreeMap<String, String>;

fn probe_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/posix.py")
}

fn parse(what: &str, out: Output) -> Results {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "probe on {what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().filter_map(|l| l.split_once('\t')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Runs the probe on `dir` directly (a local directory or a FUSE mount).
fn probe(dir: &Path, mode: &str, groups: &str) -> Results {
    let out = Command::new("python3").arg(probe_script()).arg(dir).args([mode, groups]).output().expect("python3");
    parse(&dir.display().to_string(), out)
}

/// Runs the probe under the preload library on `dir` inside the instance.
fn probe_preload(inst: &Instance, dir: &str, mode: &str, groups: &str) -> Results {
    let out = Command::new(gust_bin())
        .args(["run", "--", "python3"])
        .arg(probe_script())
        .args([dir, mode, groups])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .expect("gust run");
    parse(dir, out)
}

/// Every line of `gust` equals `local`'s, except the `relaxed` ones, which must give
/// exactly the documented value (and differ from the local one, or the entry is
/// stale).
fn compare(what: &str, local: &Results, gust: &Results, relaxed: &[(&str, &str)]) {
    let mut bad = Vec::new();
    for (k, lv) in local {
        let gv = gust.get(k).map(String::as_str).unwrap_or("<missing>");
        match relaxed.iter().find(|(rk, _)| rk == k) {
            Some((_, want)) => {
                if gv != *want {
                    bad.push(format!("{k}: GustFS gives {gv}, the documented relaxation is {want} (local: {lv})"));
                }
                if lv == want {
                    bad.push(format!("{k}: listed as a relaxation, but the local directory agrees ({lv})"));
                }
            }
            None if gv != lv => bad.push(format!("{k}: local {lv}, GustFS {gv}")),
            None => {}
        }
    }
    for k in gust.keys().filter(|k| !local.contains_key(*k)) {
        bad.push(format!("{k}: only GustFS printed it"));
    }
    for (k, _) in relaxed {
        if !local.contains_key(*k) {
            bad.push(format!("{k}: a relaxation for a check the probe did not run"));
        }
    }
    assert!(local.len() > 20, "{what}: the probe printed only {} lines", local.len());
    assert!(bad.is_empty(), "{what}: {} differences from the local directory:\n{}", bad.len(), bad.join("\n"));
}

fn local_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("gust-conf-{tag}")).tempdir_in("/tmp").unwrap()
}

/// What the FUSE mount still does differently (docs/SEMANTICS.md, "Relaxed").
const FUSE_RELAXED: &[(&str, &str)] = &[
    // Entries other than directories do not touch their directory's record, which
    // lives on another daemon (mkdir, rmdir and directory renames do).
    ("times.parent_on_create", "(False, False)"),
    ("times.parent_on_rename_in", "(False, False)"),
    ("times.parent_on_rename_within", "(False, False)"),
    ("times.parent_on_unlink", "(False, False)"),
    ("times.parent_on_symlink", "(False, False)"),
    // No hard links to symlinks.
    ("links.of_symlink", "EPERM"),
];

#[test]
fn fuse_shared_mount_matches_a_local_directory() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &["--allow-other"]);
    let local = local_dir("fuse");
    let l = probe(&local.path().join("t"), "shared", "");
    let g = probe(&m.p("t"), "shared", "");
    compare("FUSE mount (--allow-other)", &l, &g, FUSE_RELAXED);
}

/// What the preload library does differently beyond `FUSE_RELAXED` (docs/SEMANTICS.md,
/// "Relaxed"): what the kernel does for a FUSE mount but not for a library.
const PRELOAD_ONLY_RELAXED: &[(&str, &str)] = &[
    // Parents are not checked by default (`gust start --check-parent` does), so a
    // create below a file or a missing directory makes an orphan record; the kernel
    // checks them for a FUSE mount.
    ("errors.enoent_create_below_missing", "ok"),
    // A set-group-id directory's group and bit are not inherited (it would cost a
    // stat of the parent per create; the FUSE mount has the parent's attributes).
    ("owners.setgid_dir_file", "0:0"),
    ("owners.setgid_dir_subdir", "0:0 0o755"),
    ("errors.enotdir_create", "ok"),
    ("errors.enotdir_mkdir", "EEXIST"),
    ("errors.enotdir_stat", "ENOENT"),
    // Names are checked for length before the path is looked up.
    ("errors.enametoolong_below_missing", "ENAMETOOLONG"),
    // A FIFO opens only through a FUSE mount.
    ("special.open_fifo_nonblock", "ENXIO"),
];

#[test]
fn preload_matches_a_local_directory() {
    let inst = Instance::start(3);
    let local = local_dir("preload");
    let l = probe(&local.path().join("t"), "single", "");
    let g = probe_preload(&inst, "/gustfs/t", "single", "");
    compare("preload library", &l, &g, &[FUSE_RELAXED, PRELOAD_ONLY_RELAXED].concat());
}

/// chown's rules for callers other than root, through the client core (the preload
/// library and the C API act as their process, and the tests run as root).
#[test]
fn chown_rules_for_unprivileged_callers() {
    let inst = Instance::start(2);
    let c = inst.client();
    let a = Credentials { uid: 1001, gid: 1001, groups: vec![1001, 2000] };
    let b = Credentials { uid: 1002, gid: 1002, groups: vec![] };
    as_caller(a.clone(), || {
        c.mkdir("/d", 0o755).unwrap();
        let fd = c.open("/d/f", libc::O_CREAT | libc::O_WRONLY, 0o6755).unwrap();
        c.close(fd).unwrap();
    });
    let st = c.stat("/d/f").unwrap();
    assert_eq!((st.uid, st.gid, st.mode), (1001, 1001, 0o6755), "created as the caller");
    assert_eq!((c.stat("/d").unwrap().uid, c.stat("/d").unwrap().gid), (1001, 1001));
    let eperm = Err(gust_client::Errno(libc::EPERM));
    as_caller(a.clone(), || {
        assert_eq!(c.chown("/d/f", Some(1002), None, true).map(|_| ()), eperm, "only root gives a file away");
        assert_eq!(c.chown("/d/f", None, Some(3000), true).map(|_| ()), eperm, "not one of its groups");
        // To one of its groups: allowed, and the set-id bits go (group may execute).
        let st = c.chown("/d/f", Some(1001), Some(2000), true).unwrap();
        assert_eq!((st.uid, st.gid, st.mode), (1001, 2000, 0o755));
    });
    as_caller(b.clone(), || {
        assert_eq!(c.chown("/d/f", None, Some(1002), true).map(|_| ()), eperm, "not the owner");
        assert_eq!(c.chown("/d/f", Some(1001), None, true).map(|_| ()), eperm, "not the owner, even a no-op");
        // access: the others' bits for b, the owner's for a.
        assert_eq!(c.access("/d/f", libc::W_OK), Err(gust_client::Errno(libc::EACCES)));
        assert_eq!(c.access("/d/f", libc::R_OK | libc::X_OK), Ok(()));
    });
    as_caller(a.clone(), || assert_eq!(c.access("/d/f", libc::W_OK), Ok(())));
    // A write by a caller without privilege clears the set-id bits (S_ISGID only with
    // group execute); root's write keeps them.
    c.chmod("/d/f", 0o6775).unwrap();
    let write_as = |who: Option<Credentials>, p: &str| {
        let w = || {
            let fd = c.open(p, libc::O_WRONLY, 0).unwrap();
            c.write(fd, b"x").unwrap();
            c.close(fd).unwrap();
        };
        match who {
            Some(w2) => as_caller(w2, w),
            None => w(),
        }
        c.stat(p).unwrap().mode
    };
    assert_eq!(write_as(None, "/d/f"), 0o6775, "root keeps them");
    assert_eq!(write_as(Some(a.clone()), "/d/f"), 0o775, "the owner's write clears them");
    as_caller(a.clone(), || c.close(c.open("/d/lock", libc::O_CREAT | libc::O_WRONLY, 0o2664).unwrap()).unwrap());
    assert_eq!(write_as(Some(a.clone()), "/d/lock"), 0o2664, "S_ISGID without group execute stays");
    // Root may do anything; an fchown goes through the descriptor's path.
    let fd = c.open("/d/f", libc::O_RDONLY, 0).unwrap();
    let st = c.fchown(fd, Some(0), Some(0)).unwrap();
    assert_eq!((st.uid, st.gid), (0, 0));
    c.close(fd).unwrap();
}

/// Runs a bash script (strict mode, bounded) in `dir`; returns its output whatever
/// its exit status.
fn bash(dir: &Path, script: &str) -> Output {
    Command::new("timeout")
        .args(["300", "bash", "-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .output()
        .expect("run bash")
}

fn ok(what: &str, out: Output) -> String {
    gust_e2e::stdout_of(what, &out)
}

/// Tools that make, copy and archive hard links (docs/SEMANTICS.md, "Hard links")
/// give the same tree on the FUSE mount and through the preload library as on a
/// local directory: `ln`, `cp -l`, `cp -al` snapshots, `cp -a` and `tar` and
/// `rsync -aH` of a tree with links (the names stay one file: same inode, link
/// count, content after a write through one name), and `git clone` of a local path
/// (which links its objects).
#[test]
fn hard_link_tools() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    let local = local_dir("links");
    let src = local_dir("links-src");
    ok(
        "source tree",
        bash(
            src.path(),
            "mkdir tree && echo shared > tree/a && ln tree/a tree/b && mkdir tree/d && ln tree/a tree/d/e
             echo c > tree/c && tar -cf with-links.tar -C tree .
             git init -q repo && cd repo && echo one > f && git add f
             git -c user.name=t -c user.email=t@t commit -qm one",
        ),
    );
    let s = src.path().display().to_string();
    // Prints, per copy: names with link counts and whether they are one file, then
    // the content after an append through one name.
    let script = "set -e
         echo x > f && ln f g && cp -l f h && stat -c '%n %h %s' f g h
         cp -a $SRC/tree cpa && cp -al cpa snap && cp -a cpa cpa2 && mkdir tx && tar -C tx -xf $SRC/with-links.tar
         rsync -aH $SRC/tree/ rs/
         for d in snap cpa2 tx rs; do
           stat -c '%n %h' $d/a $d/b $d/c $d/d/e
           [ $d/a -ef $d/b ] && [ $d/a -ef $d/d/e ] && echo \"$d: one file\"
           echo more >> $d/d/e && cat $d/a && rm $d/a && stat -c '%n %h' $d/b && cat $d/b
         done
         cat $SRC/tree/a";
    let git = "
         git clone -q $SRC/repo clone && cd clone && echo two > g && git add g
         git -c user.name=t -c user.email=t@t commit -qm two && git fsck >/dev/null 2>&1 && git log --oneline | wc -l";
    let run = |dir: &Path| ok("tools", bash(dir, &format!("{script}{git}").replace("$SRC", &s)));
    let want = run(local.path());
    assert!(want.contains("snap: one file") && want.contains("rs: one file"), "{want}");
    assert_eq!(run(m.path()), want, "FUSE mount");
    // The same through the preload library.
    let out = Command::new(gust_bin())
        .args(["run", "--", "bash", "-euo", "pipefail", "-c"])
        // rsync's receiver walks to its destination from "/" with openat and
        // fstatat on a directory outside the instance (the preload library routes
        // such names into the mount).
        .arg(format!("mkdir /gustfs/pre && cd /gustfs/pre && {}", script.replace("$SRC", &s)))
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .expect("gust run");
    // Without git: through the preload library, parents are not checked by default
    // (docs/SEMANTICS.md), and git makes an object's directory only when creating
    // the object in it fails.
    assert!(want.ends_with("shared\n2\n"), "{want}");
    assert_eq!(ok("tools through the preload library", out), want.trim_end_matches("2\n"));
}

/// A directory's link count is 2 + its subdirectories, kept by mkdir, rmdir and
/// directory renames, except the root's, which is always 2 (docs/SEMANTICS.md):
/// tree walkers that could count on it (find and du through fts, Perl's File::Find)
/// list the same tree on the FUSE mount as on a local directory, the root included.
#[test]
fn directory_link_counts_and_tree_walkers() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    let local = local_dir("walk");
    let mut outputs = Vec::new();
    for dir in [local.path(), m.path()] {
        let out = ok(
            "walk",
            bash(
                dir,
                "mkdir -p t/a/x/deep t/b/y t/c t/gone t/moved && touch t/a/x/f t/a/x/deep/g t/b/y/h t/c/i t/j
                 rmdir t/gone && mv t/moved t/a/ && mv t/a/moved t/b/y/ && mv t/b/y/moved t/b/y/renamed
                 mkdir t/b/z && mv -T t/b/y/renamed t/b/z
                 stat -c '%n %h' . t t/a t/a/x t/b t/b/y t/c
                 find t | sort
                 find t -type f | sort
                 du -a t | awk '{print $2}' | sort
                 perl -MFile::Find -e 'find(sub { print \"$File::Find::name\\n\" }, \"t\")' | sort",
            ),
        );
        outputs.push(out);
    }
    let (l, g) = (&outputs[0], &outputs[1]);
    assert_eq!(l.lines().next(), Some(". 3"), "local: the top directory has t below it");
    assert_eq!(g.lines().next(), Some(". 2"), "GustFS: the root's count is always 2");
    assert_eq!(l.lines().skip(1).collect::<Vec<_>>(), g.lines().skip(1).collect::<Vec<_>>());
    assert!(g.contains("t 5\nt/a 3\nt/a/x 3\nt/b 4\nt/b/y 2\nt/c 2\n"), "{g}");
    assert!(g.contains("t/a/x/deep/g"));
}

/// Programs that copy trees with their owners, as root: `cp -a` and `tar -p` into
/// GustFS and back keep every owner, group and mode (set-id bits included), through
/// the FUSE mount and through the preload library.
#[test]
fn root_copies_trees_with_owners() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    let src = local_dir("owners-src");
    ok(
        "source tree",
        bash(
            src.path(),
            "mkdir -p tree/sub && echo a > tree/a && echo b > tree/sub/b && ln -s a tree/l && mkfifo tree/p
             chown 1001:2000 tree/a && chown -h 1002:1002 tree/l && chown 1003:1003 tree/sub tree/p
             chmod 4755 tree/a && chown 1001:1001 tree/sub/b && chmod 2750 tree/sub",
        ),
    );
    let listing = "find . -printf '%p %U:%G %m %y\\n' | sort";
    let want = ok("local listing", bash(&src.path().join("tree"), listing));
    assert!(want.contains("./a 1001:2000 4755 f") && want.contains("./p 1003:1003 644 p"), "{want}");
    let s = src.path().display();
    // FUSE: cp -a in, then tar -p out of it into a local directory.
    let back = local_dir("owners-back");
    let b = back.path().display();
    ok(
        "cp -a and tar -p through FUSE",
        bash(
            m.path(),
            &format!("cp -a {s}/tree cp && tar -C cp -cpf {b}/t.tar . && mkdir {b}/x && tar -C {b}/x -xpf {b}/t.tar"),
        ),
    );
    assert_eq!(ok("FUSE listing", bash(&m.p("cp"), listing)), want, "cp -a into the FUSE mount");
    assert_eq!(ok("round trip", bash(&back.path().join("x"), listing)), want, "tar -p out of the FUSE mount");
    // Preload: cp -a and tar -xp into GustFS, listed through the FUSE mount.
    let out = Command::new(gust_bin())
        .args(["run", "--", "bash", "-c"])
        .arg(format!("set -e; cp -a {s}/tree /gustfs/pcp; mkdir /gustfs/ptar; tar -C {s}/tree -cf - . | tar -C /gustfs/ptar -xpf -"))
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    ok("cp -a and tar -xp under the preload library", out);
    assert_eq!(ok("preload cp listing", bash(&m.p("pcp"), listing)), want, "cp -a under the preload library");
    assert_eq!(ok("preload tar listing", bash(&m.p("ptar"), listing)), want, "tar -xp under the preload library");
}

/// Device nodes are records with their device number, listed and removed like any
/// other, and never opened: the FUSE mount is nodev (the kernel says EACCES) and the
/// preload library answers the same (docs/SEMANTICS.md, "Device nodes").
#[test]
fn device_nodes_are_kept_and_never_opened() {
    let inst = Instance::start(2);
    let m = Mount::new(&inst, &["--allow-other"]);
    let script = "import os, stat, sys
d = sys.argv[1]
os.mknod(d + '/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))
st = os.lstat(d + '/null')
print(stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), sorted(os.listdir(d)))
try:
    os.open(d + '/null', os.O_RDONLY)
    print('opened')
except OSError as e:
    print(os.strerror(e.errno))
os.unlink(d + '/null')
print(sorted(os.listdir(d)))";
    let fuse = Command::new("python3").args(["-c", script]).arg(m.path()).output().unwrap();
    let want = "True 1 3 ['null']\nPermission denied\n[]";
    assert_eq!(ok("device node through FUSE", fuse).trim(), want);
    std::fs::create_dir(m.path().join("pre")).unwrap();
    let pre = Command::new(gust_bin())
        .args(["run", "--", "python3", "-c", script])
        .arg("/gustfs/pre")
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert_eq!(ok("device node through the preload library", pre).trim(), want);
}

/// Paths as long as the kernel allows in one argument work below a directory of
/// the mount (the path inside the file system is then longer than PATH_MAX), and
/// one byte more is ENAMETOOLONG, through FUSE and the preload library
/// (docs/SEMANTICS.md, "Long paths").
#[test]
fn paths_as_long_as_the_kernel_allows() {
    let inst = Instance::start(2);
    let m = Mount::new(&inst, &[]);
    // From the working directory: components of 255 bytes, then one that makes
    // the relative path 4,095 bytes (PATH_MAX with its NUL).
    let script = "import os, sys
os.makedirs(sys.argv[1], exist_ok=True)
os.chdir(sys.argv[1])
parts = []
while len('/'.join(parts)) + 1 + 255 < 4095:
    parts.append('d' * 255)
dirs = '/'.join(parts)
os.makedirs(dirs)
last = 'f' * (4095 - len(dirs) - 1)
p = dirs + '/' + last
assert len(p) == 4095
with open(p, 'w') as f:
    f.write('deep')
print(open(p).read(), len(os.path.abspath(p)) > 4096)
try:
    os.stat(p + 'x')
except OSError as e:
    print(os.strerror(e.errno))
os.unlink(p)";
    let want = "deep True\nFile name too long";
    let fuse = Command::new("python3").args(["-c", script]).arg(m.path().join("long/below/here")).output().unwrap();
    assert_eq!(ok("long paths through FUSE", fuse).trim(), want);
    let pre = Command::new(gust_bin())
        .args(["run", "--", "python3", "-c", script, "/gustfs/pre/long/below/here"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert_eq!(ok("long paths through the preload library", pre).trim(), want);
}

/// A Unix socket bound at a path of the instance through the preload library is a
/// socket record naming an abstract address on the node: a process of the node
/// connects to it by the path; bind of a taken name is EADDRINUSE; after unlink,
/// connect is ENOENT (docs/SEMANTICS.md, the preload library's sockets).
#[test]
fn unix_sockets_named_in_the_instance_through_the_preload_library() {
    let inst = Instance::start(2);
    let script = "import os, socket, stat, sys
p = sys.argv[1] + '/s'
os.makedirs(sys.argv[1])
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(p)
srv.listen(1)
print(stat.S_ISSOCK(os.lstat(p).st_mode))
pid = os.fork()
if pid == 0:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(p)
    c.sendall(b'ping')
    os._exit(0)
conn, _ = srv.accept()
print(conn.recv(10))
os.waitpid(pid, 0)
for what in (lambda: socket.socket(socket.AF_UNIX).bind(p), lambda: (os.unlink(p), socket.socket(socket.AF_UNIX).connect(p))):
    try:
        what()
    except OSError as e:
        print(os.strerror(e.errno))";
    let out = Command::new(gust_bin())
        .args(["run", "--", "python3", "-c", script, "/gustfs/sock"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert_eq!(
        ok("sockets through the preload library", out).trim(),
        "True\nb'ping'\nAddress already in use\nNo such file or directory"
    );
}

/// Mode bits through the preload library for a process that drops from root to
/// another user (as services and test suites do): the library connects before the
/// switch, and from then on the process is checked as the kernel would check it:
/// EACCES on a directory it may not write or a file it may not read, EPERM in a
/// sticky directory and for chmod of another's file (permissions.rs). The owner of
/// the instance (here root) is not checked.
#[test]
fn a_process_that_drops_to_another_user_is_checked() {
    let inst = Instance::start(2);
    let script = "import os, sys
d = sys.argv[1]
os.makedirs(d + '/mine')
os.chown(d + '/mine', 65534, 65534)
os.mkdir(d + '/tmp', 0o777)
os.chmod(d + '/tmp', 0o1777)
with open(d + '/secret', 'w') as f:
    f.write('x')
os.chmod(d + '/secret', 0o600)
with open(d + '/tmp/roots', 'w') as f:
    f.write('x')
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
def res(fn):
    try:
        fn()
        return 'ok'
    except OSError as e:
        return os.strerror(e.errno)
print(res(lambda: open(d + '/new', 'w')))
print(res(lambda: open(d + '/secret')))
print(res(lambda: open(d + '/mine/f', 'w').write('y')))
print(res(lambda: os.unlink(d + '/tmp/roots')))
print(res(lambda: os.chmod(d + '/secret', 0o644)))
print(res(lambda: os.rename(d + '/mine/f', d + '/mine/g')))";
    let out = Command::new(gust_bin())
        .args(["run", "--", "python3", "-c", script, "/gustfs/perm"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert_eq!(
        ok("a process that drops to another user", out).trim(),
        "Permission denied\nPermission denied\nok\nOperation not permitted\nOperation not permitted\nok"
    );
}

/// h5py (Debian's python3-h5py, serial, HDF5's file locking on: flock through the
/// daemons) gives the same on GustFS, through FUSE and the preload library, as on a
/// local directory (tests/conformance/h5py_roundtrip.py).
#[test]
fn h5py_with_file_locking_round_trips() {
    let inst = Instance::start(2);
    let m = Mount::new(&inst, &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/h5py_roundtrip.py");
    let local = local_dir("h5");
    let py = |f: &Path| Command::new("/usr/bin/python3").arg(&script).arg(f).output().unwrap();
    let want = ok("h5py on a local directory", py(&local.path().join("x.h5")));
    assert_eq!(ok("h5py through FUSE", py(&m.path().join("x.h5"))), want);
    let pre = Command::new(gust_bin())
        .args(["run", "--", "/usr/bin/python3"])
        .arg(&script)
        .arg("/gustfs/x.h5")
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert_eq!(ok("h5py through the preload library", pre), want);
}
