//! LD_PRELOAD front end: real programs under `gust run --` on 3 daemons.
//!
//! /gustfs does not exist on the test machine, so every test fails without the
//! library. Needs bash, coreutils, tar, python3, perl, cc and fio (scripts/setup.sh).

mod common;

use gust_e2e::{gust_bin, Instance};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn lib() -> PathBuf {
    let p = gust_bin().parent().unwrap().join("libgust_preload.so");
    assert!(p.exists(), "{} missing: cargo build --release -p gust-preload", p.display());
    p
}

/// Runs `bash -c script` under `gust run`; panics with both outputs on failure.
fn sh(inst: &Instance, script: &str) -> String {
    let out = sh_out(inst, &format!("set -euo pipefail\n{script}"));
    gust_e2e::stdout_of(&format!("script\n{script}\n---"), &out)
}

fn sh_out(inst: &Instance, script: &str) -> Output {
    let _ = lib();
    Command::new(gust_bin())
        .args(["run", "--", "bash", "-c", script])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .expect("run gust run")
}

/// Compiles tests/c/NAME.c into `dir` (with -pthread: harmless where unused).
fn compile_c(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let bin = dir.path().join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("c/{name}.c"));
    let cc = Command::new("cc").args(["-O1", "-pthread", "-o"]).arg(&bin).arg(&src).output().expect("cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    bin
}

fn local_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("gust-preload-{tag}")).tempdir_in("/tmp").unwrap()
}

#[test]
fn coreutils_on_files() {
    let inst = Instance::start(3);
    let l = local_dir("files");
    let d = l.path().display();
    let out = sh(
        &inst,
        &format!(
            r#"
head -c 3000000 /dev/urandom > {d}/r.bin
seq 1 20000 > {d}/n.txt
cp {d}/r.bin /gustfs/r.bin
cp {d}/n.txt /gustfs/n.txt
cmp {d}/r.bin /gustfs/r.bin
[ "$(md5sum < /gustfs/r.bin)" = "$(md5sum < {d}/r.bin)" ]
[ "$(sha256sum < /gustfs/n.txt)" = "$(sha256sum < {d}/n.txt)" ]
cp /gustfs/r.bin {d}/back.bin && cmp {d}/r.bin {d}/back.bin
cat /gustfs/n.txt | wc -l
head -n 2 /gustfs/n.txt
tail -n 1 /gustfs/n.txt
wc -c /gustfs/n.txt
sort -rn /gustfs/n.txt > /gustfs/sorted; head -n 1 /gustfs/sorted
seq 5 | tee /gustfs/tee.txt > /dev/null
cat /gustfs/tee.txt | tr '\n' ,; echo
dd if=/dev/zero of=/gustfs/dd bs=1M count=4 status=none
dd if={d}/r.bin of=/gustfs/dd bs=4k count=3 seek=2 conv=notrunc status=none
stat -c '%s %F' /gustfs/dd
cmp -n 8192 /gustfs/dd /dev/zero
cmp -i 8192:0 -n 12288 /gustfs/dd {d}/r.bin
truncate -s 100 /gustfs/dd && stat -c %s /gustfs/dd
touch /gustfs/t && stat -c '%s %F' /gustfs/t
chmod 640 /gustfs/t && stat -c %a /gustfs/t
ln -s n.txt /gustfs/link && readlink /gustfs/link && head -n 1 /gustfs/link
mv /gustfs/t /gustfs/t2 && [ ! -e /gustfs/t ] && [ -e /gustfs/t2 ]
du -k /gustfs/r.bin | cut -f1
df /gustfs > /dev/null && echo df-ok
ls -l /gustfs | grep -c '^-'
"#
        ),
    );
    let expect = "20000\n1\n2\n20000\n108894 /gustfs/n.txt\n20000\n1,2,3,4,5,\n4194304 regular file\n100\n0 regular empty file\n640\nn.txt\n1\n2930\ndf-ok\n6\n";
    assert_eq!(out, expect);
}

#[test]
fn coreutils_on_trees() {
    let inst = Instance::start(3);
    let l = local_dir("trees");
    let d = l.path().display();
    let out = sh(
        &inst,
        &format!(
            r#"
mkdir -p {d}/src/a/b/c {d}/src/e
for i in 1 2 3; do seq $i 999 > {d}/src/a/f$i.txt; done
head -c 200000 /dev/urandom > {d}/src/a/b/c/big.bin
ln -s f1.txt {d}/src/a/link
touch {d}/src/e/empty
mkdir -p /gustfs/x/y/z && [ -d /gustfs/x/y/z ]
cp -r {d}/src /gustfs/tree
diff -r {d}/src /gustfs/tree
both() {{ diff <(cd {d}/src && eval "$1") <(cd /gustfs/tree && eval "$1"); }}
both 'ls -R'
both "ls -la a | awk 'NR > 1 && !/^d/ {{print \$1, \$5, \$NF}}'"
both "find . -name '*.txt' | sort"
both "find . -size +100k"
touch -d '2001-01-01' {d}/src/a/f1.txt /gustfs/tree/a/f1.txt
both "find . -type f -newer a/f1.txt | sort"
find /gustfs/tree -type f -newer /gustfs/tree/a/f1.txt | wc -l
mv /gustfs/tree/a /gustfs/moved
[ ! -e /gustfs/tree/a ] && [ -f /gustfs/moved/b/c/big.bin ]
cp -r /gustfs/moved {d}/out
diff -r {d}/src/a {d}/out
[ "$(du -s /gustfs/moved | cut -f1)" -gt 190 ]
rmdir /gustfs/tree 2>/dev/null && echo wrong || echo not-empty
rm -r /gustfs/tree /gustfs/moved
rmdir /gustfs/x/y/z /gustfs/x/y /gustfs/x
ls -A /gustfs | wc -l
"#
        ),
    );
    let expect = "4\nnot-empty\n0\n";
    assert_eq!(out, expect);
}

#[test]
fn tar_create_extract_compare() {
    let inst = Instance::start(3);
    let l = local_dir("tar");
    let d = l.path().display();
    sh(
        &inst,
        &format!(
            r#"
mkdir -p {d}/src/deep/er
for i in $(seq 1 50); do head -c $((i * 1000)) /dev/urandom > {d}/src/deep/f$i; done
seq 1 10000 > {d}/src/deep/er/n
ln -s n {d}/src/deep/er/l
tar cf /gustfs/a.tar -C {d}/src .
mkdir /gustfs/x
tar xf /gustfs/a.tar -C /gustfs/x
diff -r {d}/src /gustfs/x
tar czf /gustfs/b.tgz -C /gustfs/x deep
mkdir {d}/y && tar xzf /gustfs/b.tgz -C {d}/y
diff -r {d}/src/deep {d}/y/deep
"#
        ),
    );
}

#[test]
fn bash_redirections_loop_and_glob() {
    let inst = Instance::start(3);
    let out = sh(
        &inst,
        r#"
echo one > /gustfs/r
echo two >> /gustfs/r
printf 'three\n' >> /gustfs/r
cat < /gustfs/r
read -r first < /gustfs/r; echo "first=$first"
sort -r < /gustfs/r > /gustfs/sorted; cat /gustfs/sorted | tr '\n' ' '; echo
exec 3> /gustfs/fd3; echo via-fd3 >&3; exec 3>&-; cat /gustfs/fd3
mkdir /gustfs/many
for i in $(seq 1 1000); do echo "$i" > /gustfs/many/f$i; done
ls /gustfs/many | wc -l
files=(/gustfs/many/f99*); echo "${#files[@]}"
cat /gustfs/many/f1000
cd /gustfs/many && ls f5* | wc -l && pwd && cat f7 && cd /
rm -r /gustfs/many; [ ! -e /gustfs/many ] && echo gone
"#,
    );
    assert_eq!(
        out,
        "one\ntwo\nthree\nfirst=one\ntwo three one \nvia-fd3\n1000\n11\n1000\n111\n/gustfs/many\n7\ngone\n"
    );
}

#[test]
fn python_file_api() {
    let inst = Instance::start(3);
    let l = local_dir("py");
    let script = l.path().join("t.py");
    std::fs::write(
        &script,
        r#"
import os, shutil, pathlib, tempfile, mmap, sys
b = "/gustfs/py"
os.makedirs(b + "/sub", exist_ok=True)
with open(b + "/t.txt", "w") as f:
    f.write("line1\nline2\n")
with open(b + "/t.txt") as f:
    assert f.read() == "line1\nline2\n"
with open(b + "/t.txt", "a") as f:
    f.write("line3\n")
assert open(b + "/t.txt").readlines()[-1] == "line3\n"
data = bytes(range(256)) * 1000
with open(b + "/b.bin", "wb") as f:
    f.write(data)
with open(b + "/b.bin", "r+b") as f:
    f.seek(1000)
    assert f.read(3) == data[1000:1003]
    f.seek(0, 2)
    assert f.tell() == len(data)
    f.seek(10)
    f.write(b"XYZ")
with open(b + "/b.bin", "rb") as f:
    assert f.read(13)[10:] == b"XYZ"
assert sorted(os.listdir(b)) == ["b.bin", "sub", "t.txt"]
assert sorted(e.name for e in os.scandir(b) if e.is_file()) == ["b.bin", "t.txt"]
src = sys.argv[1]
shutil.copytree(src, b + "/tree", symlinks=True)
walk = sorted((os.path.relpath(r, b + "/tree"), sorted(ds), sorted(fs)) for r, ds, fs in os.walk(b + "/tree"))
want = sorted((os.path.relpath(r, src), sorted(ds), sorted(fs)) for r, ds, fs in os.walk(src))
assert walk == want, (walk, want)
shutil.copytree(b + "/tree", src + "/../back", symlinks=True)
shutil.rmtree(b + "/tree")
assert not os.path.exists(b + "/tree")
p = pathlib.Path(b) / "p.txt"
p.write_text("pathlib")
assert p.read_text() == "pathlib" and p.stat().st_size == 7 and p.is_file()
assert sorted(x.name for x in pathlib.Path(b).glob("*.txt")) == ["p.txt", "t.txt"]
with tempfile.TemporaryDirectory(dir=b) as d:
    with tempfile.NamedTemporaryFile(dir=d, delete=False) as t:
        t.write(b"abc")
    assert os.path.getsize(t.name) == 3
    fd, name = tempfile.mkstemp(dir=d)
    os.write(fd, b"12345")
    os.close(fd)
    assert os.stat(name).st_size == 5
assert not os.path.exists(d)
with open(b + "/b.bin", "rb") as f:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert m[256:259] == bytes([0, 1, 2]) and m[10:13] == b"XYZ" and len(m) == len(data)
    m.close()
os.chdir(b)
assert os.getcwd() == b and os.path.exists("t.txt")
os.rename("p.txt", "sub/q.txt")
assert os.listdir("sub") == ["q.txt"]
print("PY-OK")
"#,
    )
    .unwrap();
    let src = l.path().join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/x.txt"), "x").unwrap();
    std::fs::write(src.join("a/b/y.bin"), vec![7u8; 100_000]).unwrap();
    std::os::unix::fs::symlink("x.txt", src.join("a/l")).unwrap();
    let out = sh(&inst, &format!("python3 {} {}", script.display(), src.display()));
    assert_eq!(out, "PY-OK\n");
    assert_eq!(std::fs::read(l.path().join("back/a/b/y.bin")).unwrap(), vec![7u8; 100_000]);
}

#[test]
fn c_program_api_errors_threads_fork() {
    let inst = Instance::start(3);
    let l = local_dir("c");
    let bin = compile_c(&l, "preload_api");
    // Control: the same program on a local directory without the library.
    let local = l.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let plain = Command::new(&bin).arg(&local).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "C-OK\n", "{}", String::from_utf8_lossy(&plain.stderr));
    let out = sh(&inst, &format!("mkdir /gustfs/c && {} /gustfs/c gust", bin.display()));
    assert_eq!(out, "C-OK\n");
}

/// POSIX asynchronous I/O on GustFS files (OMPIO's non-blocking and split
/// collective I/O use it): glibc's helper threads would call the kernel on the
/// library's placeholder descriptor (EBADF); the same program on a local directory
/// first.
#[test]
fn c_program_posix_aio() {
    let inst = Instance::start(2);
    let l = local_dir("aio");
    let bin = compile_c(&l, "preload_aio");
    let plain = Command::new(&bin).arg(l.path()).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "C-OK\n", "{}", String::from_utf8_lossy(&plain.stderr));
    let out = sh(&inst, &format!("mkdir /gustfs/aio && {} /gustfs/aio", bin.display()));
    assert_eq!(out, "C-OK\n");
    assert_eq!(inst.client().stat("/aio/aio.dat").unwrap().size, 16384);
}

/// A child forked while another thread of its parent sends a descriptor's size
/// (fsync in a loop) makes path calls at once: it must not wait for a lock the
/// sending thread, which the child does not have, held at the fork (it did, 1 in
/// ~20 runs of the test above, before the size lock was released during the send).
#[test]
fn a_child_forked_while_a_size_is_sent_does_not_hang() {
    let inst = Instance::start(2);
    let l = local_dir("forksend");
    let bin = compile_c(&l, "fork_while_sending");
    let out = sh(&inst, &format!("mkdir /gustfs/f && {} /gustfs/f 300", bin.display()));
    assert_eq!(out, "C-OK\n");
    assert!(inst.client().stat("/f/written").unwrap().size > 0);
}

/// copy_file_range and sendfile emulation: cp's huge lengths, offsets, /proc sources,
/// pipes, copies longer than one call; the same program on a local directory first.
#[test]
fn c_program_copy_file_range_sendfile() {
    let inst = Instance::start(3);
    let l = local_dir("copy");
    let bin = compile_c(&l, "preload_copy");
    let scratch = l.path().join("scratch");
    let local = l.path().join("local");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::create_dir(&local).unwrap();
    let plain = Command::new(&bin).arg(&local).arg(&scratch).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stdout), "C-OK\n", "{}", String::from_utf8_lossy(&plain.stderr));
    let out = sh(&inst, &format!("mkdir /gustfs/cp && {} /gustfs/cp {} gust", bin.display(), scratch.display()));
    assert_eq!(out, "C-OK\n");
    // The copies really are in GustFS.
    assert_eq!(inst.client().stat("/cp/offout").unwrap().size, 31_050);
}

#[test]
fn c_program_scandir_readdir_r_freopen() {
    let inst = Instance::start(2);
    let l = local_dir("c2");
    let bin = compile_c(&l, "preload_dirstdio");
    let local = l.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let plain = Command::new(&bin).arg(&local).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&plain.stderr), "C-OK\n");
    let out = sh_out(&inst, &format!("mkdir /gustfs/d2 && {} /gustfs/d2", bin.display()));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "C-OK\n", "status {}", out.status);
    // The files really are in GustFS.
    let c = inst.client();
    assert_eq!(c.stat("/d2/out").unwrap().size, "to the file 42\n".len() as u64);
    assert_eq!(c.stat("/d2/y").unwrap().size, 4);
}

#[test]
fn fio_psync_verify() {
    let inst = Instance::start(3);
    for rw in ["randwrite", "write"] {
        let out = sh(
            &inst,
            &format!(
                "fio --name=v --filename=/gustfs/fio.{rw} --size=32M --bs=64k --rw={rw} --ioengine=psync --verify=crc32c \
                 --do_verify=1 --verify_fatal=1 --output-format=terse --terse-version=3 | cut -d';' -f5"
            ),
        );
        assert_eq!(out.trim(), "0", "fio {rw} reported an error");
    }
}

#[test]
fn eight_processes_share_one_file() {
    let inst = Instance::start(3);
    let l = local_dir("shared");
    let script = l.path().join("w.py");
    std::fs::write(
        &script,
        r#"
import os, sys
rank, n, region = int(sys.argv[1]), 8, 1 << 20
path = "/gustfs/shared.dat"
if sys.argv[2] == "write":
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    for k in range(0, region, 65536):
        os.pwrite(fd, bytes([rank + 1]) * 65536, rank * region + k)
    os.close(fd)
else:
    fd = os.open(path, os.O_RDONLY)
    assert os.fstat(fd).st_size == n * region
    for r in range(n):
        got = os.pread(fd, region, r * region)
        assert got == bytes([r + 1]) * region, (rank, r)
    os.close(fd)
"#,
    )
    .unwrap();
    let s = script.display();
    sh(
        &inst,
        &format!(
            "for r in $(seq 0 7); do python3 {s} $r write & done; wait\n\
             pids=(); for r in $(seq 0 7); do python3 {s} $r read & pids+=($!); done\n\
             for p in \"${{pids[@]}}\"; do wait $p; done"
        ),
    );
}

/// Programs on /tmp paths behave byte for byte as without the library.
#[test]
fn local_paths_unchanged() {
    let inst = Instance::start(3);
    let script = r#"
cd "$1"
seq 1 3000 > a; cp a b; mkdir -p d/e; mv b d/e/c; ln -s a s
dd if=a of=dd bs=1k count=3 status=none
tar cf t.tar d a s; mkdir x; tar xf t.tar -C x
echo hi > r; echo there >> r; sort -r < r > r2
python3 -c 'import os; print(sorted(os.listdir(".")), os.stat("a").st_size, open("d/e/c").read()[:20])'
ls -la --time-style=+ . | awk '{print $1, $5, $NF}'
find . | sort; du -ab . | sort -k2; md5sum a d/e/c dd x/a r2; readlink s; cat r2; stat -c '%s %a %F %N' a s d
rm -r d x; ls
"#;
    let a = local_dir("plain");
    let b = local_dir("pre");
    let plain = Command::new("bash").args(["-c", script, "bash"]).arg(a.path()).output().unwrap();
    let pre = Command::new(gust_bin())
        .args(["run", "--", "bash", "-c", script, "bash"])
        .arg(b.path())
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert!(plain.status.success() && pre.status.success(), "{}", String::from_utf8_lossy(&pre.stderr));
    assert_eq!(String::from_utf8_lossy(&plain.stdout), String::from_utf8_lossy(&pre.stdout));
    assert_eq!(plain.stderr, pre.stderr);
}

/// No daemon: GustFS calls fail with EIO at once, one line on stderr (or none with
/// GUST_QUIET=1), and local files still work.
#[test]
fn no_daemon_eio_promptly() {
    let inst = Instance::start(3);
    sh(&inst, "echo x > /gustfs/f");
    for id in 0..inst.daemons {
        // SAFETY: signalling a daemon this test started.
        unsafe { libc::kill(inst.daemon_pid(id) as i32, libc::SIGKILL) };
    }
    let t0 = Instant::now();
    let out = sh_out(&inst, "cat /gustfs/f; echo rc=$?; cat /gustfs/f 2>/dev/null; echo rc=$?; echo local > /tmp/gust-preload-eio.$$; cat /tmp/gust-preload-eio.$$; rm /tmp/gust-preload-eio.$$");
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(so.contains("rc=1\nrc=1\nlocal\n"), "{so}");
    assert!(se.contains("Input/output error"), "{se}");
    assert!(se.lines().filter(|l| l.starts_with("gust-preload:")).count() >= 1, "{se}");
    let quiet = Command::new(gust_bin())
        .args(["run", "--", "bash", "-c", "cat /gustfs/f 2>&1 >/dev/null | grep -c gust-preload || true"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .env("GUST_QUIET", "1")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&quiet.stdout).trim(), "0");
}

/// Loading the library costs well under 5 ms for a program that never touches GustFS.
#[test]
fn load_cost_small() {
    let inst = Instance::start(1);
    let once = |preload: bool| {
        let mut c = Command::new("/bin/true");
        if preload {
            c.env("LD_PRELOAD", lib()).env("GUST_HOSTS_FILE", &inst.hosts);
        }
        let t = Instant::now();
        assert!(c.status().unwrap().success());
        t.elapsed()
    };
    // Interleaved, so a burst of load from a concurrent test hits both sides alike.
    let (mut plain, mut pre): (Vec<Duration>, Vec<Duration>) = (0..40).map(|_| (once(false), once(true))).unzip();
    plain.sort();
    pre.sort();
    let (plain, pre) = (plain[plain.len() / 2], pre[pre.len() / 2]);
    assert!(pre < plain + Duration::from_millis(5), "median /bin/true: {pre:?} with the library, {plain:?} without");
}

/// Output that programs write as they end (issue 27): gnulib's `close_stdout`
/// flushes stdout from an exit handler that ls, sort, md5sum, ... register before
/// the preload library's hook exists; what each writes to a GustFS file must equal
/// what it writes to a local file, whatever the order of the handlers.
#[test]
fn output_written_at_exit_by_gnulib_programs() {
    let inst = Instance::start(3);
    let l = local_dir("exit-gnulib");
    let input = l.path().join("in.txt");
    std::fs::write(&input, (0..400).map(|i| format!("{} row{}\tcol{}\n", i % 37, i % 11, i)).collect::<String>())
        .unwrap();
    let i = input.display();
    let commands = [
        ("ls", "ls /".to_string()),
        ("ls-l", "ls -l /usr".to_string()),
        ("ls-m", "ls -m /usr/bin".to_string()),
        ("dir", "dir /usr".to_string()),
        ("sort", format!("sort {i}")),
        ("uniq", format!("cut -d' ' -f1 {i} | sort -n | uniq -c")),
        ("tee", format!("tee /dev/null < {i}")),
        ("cut", format!("cut -f2 {i}")),
        ("head", format!("head -n 50 {i}")),
        ("tail", format!("tail -n 50 {i}")),
        ("md5sum", format!("md5sum {i}")),
    ];
    let mut script = String::from("mkdir -p /gustfs/out\n");
    for (name, cmd) in &commands {
        script.push_str(&format!("{{ {cmd}; }} > /gustfs/out/{name}\n{{ {cmd}; }} > {}/{name}\n", l.path().display()));
    }
    // The same through `>>` and through a program's own file (tee writes both).
    script.push_str(&format!("ls / >> /gustfs/out/appended\ntee /gustfs/out/tee-file < {i} > /dev/null\n"));
    sh(&inst, &script);
    let c = inst.client();
    for (name, _) in &commands {
        let want = std::fs::read(l.path().join(name)).unwrap();
        assert!(!want.is_empty(), "{name}: no local output");
        let got = common::get(&c, &format!("/out/{name}"));
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want), "{name}");
    }
    assert_eq!(common::get(&c, "/out/appended"), std::fs::read(l.path().join("ls")).unwrap());
    assert_eq!(common::get(&c, "/out/tee-file"), std::fs::read(&input).unwrap());
}

/// Writes from a C program's own atexit handler, from glibc's last flush of a
/// stdio stream, before `_exit`, and through a descriptor a forked child shares
/// (tests/c/preload_exit.c): none lost, none written twice.
#[test]
fn c_program_writes_at_exit_and_exit_underscore() {
    let inst = Instance::start(3);
    let l = local_dir("exit-c");
    let bin = compile_c(&l, "preload_exit");
    sh(&inst, &format!("mkdir /gustfs/x\nfor m in atexit _exit fork; do {} /gustfs/x $m; done", bin.display()));
    let c = inst.client();
    assert_eq!(common::get(&c, "/x/kept"), b"from-main\nfrom-handler\n");
    assert_eq!(common::get(&c, "/x/made-in-handler"), b"made\n");
    assert_eq!(common::get(&c, "/x/stream"), b"buffered-in-stdio\n");
    assert_eq!(common::get(&c, "/x/small"), b"before-_exit\n");
    let big = common::get(&c, "/x/big");
    assert_eq!(big.len(), (1 << 20) + 3);
    assert!(big[..600 * 1024].iter().all(|b| *b == b'b'));
    assert!(big[600 * 1024..1 << 20].iter().all(|b| *b == 0));
    assert_eq!(&big[1 << 20..], b"end");
    assert_eq!(common::get(&c, "/x/appended"), b"parent-1\nchild\nparent-2\n");
}

/// Python's and Perl's exit paths: a normal exit with a file left open, and
/// `os._exit` / `POSIX::_exit` after a flushed write. A shell's redirection that a
/// forked command writes through keeps what both wrote.
#[test]
fn python_perl_and_shell_exit_paths() {
    let inst = Instance::start(3);
    sh(
        &inst,
        r#"
mkdir /gustfs/e
python3 -c 'f = open("/gustfs/e/py-open", "w"); f.write("left open\n")'
python3 -c 'import os
f = open("/gustfs/e/py-exit", "w"); f.write("flushed\n"); f.flush(); os._exit(0)'
perl -e 'open(my $f, ">", "/gustfs/e/pl-open") or die; print $f "left open\n"; exit 0'
perl -MPOSIX -e 'open(my $f, ">", "/gustfs/e/pl-exit") or die; syswrite($f, "syswrite\n"); POSIX::_exit(0)'
{ echo first; /bin/echo second; } > /gustfs/e/group
{ echo a; /bin/echo b; echo c; } >> /gustfs/e/group-append
"#,
    );
    let c = inst.client();
    assert_eq!(common::get(&c, "/e/py-open"), b"left open\n");
    assert_eq!(common::get(&c, "/e/py-exit"), b"flushed\n");
    assert_eq!(common::get(&c, "/e/pl-open"), b"left open\n");
    assert_eq!(common::get(&c, "/e/pl-exit"), b"syswrite\n");
    assert_eq!(common::get(&c, "/e/group"), b"first\nsecond\n");
    assert_eq!(common::get(&c, "/e/group-append"), b"a\nb\nc\n");
}
