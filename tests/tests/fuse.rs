//! The FUSE mount (`gust mount`) with real programs: coreutils, tar, bash, python3,
//! a static C binary, exec, shared mmap, git, fio, interoperability with the client
//! core, and a daemon dying under a live mount. Every test mounts a fresh instance of
//! three daemons and unmounts through a Drop guard, so a failure never leaves a stale
//! mount behind. Needs /dev/fuse and root (or fusermount3); scripts/setup.sh installs
//! the tools.

mod common;

use gust_e2e::mount::{mounted, Mount};
use gust_e2e::{gust_bin, wait_until, Instance};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Bound on any one shell step of a test.
const STEP_TIMEOUT_S: u32 = 600;

/// Runs a bash script (strict mode) in `dir`; panics with its output on failure.
fn sh(dir: &Path, script: &str) -> String {
    gust_e2e::stdout_of(&format!("script\n{script}\n---"), &sh_output(dir, script))
}

fn sh_output(dir: &Path, script: &str) -> Output {
    Command::new("timeout")
        .arg(STEP_TIMEOUT_S.to_string())
        .args(["bash", "-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run bash")
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().map(|o| o.status.success()).unwrap_or(false)
}

fn require(tool: &str) {
    assert!(have(tool), "{tool} is not installed; run scripts/setup.sh (this test does not skip silently)");
}

/// The mount is a FUSE file system served by gust (not the plain directory under it).
fn assert_is_gust(m: &Mount) {
    let t = sh(m.path(), "stat -f -c %T .");
    assert!(t.trim().starts_with("fuse"), "not a FUSE mount: {t}");
}

#[test]
fn coreutils() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let src = tempfile::tempdir().unwrap();
    sh(
        src.path(),
        "mkdir -p tree/a/b tree/c && for i in $(seq 1 20); do head -c $((i * 3001)) /dev/urandom > tree/a/f$i; done
         echo hello > tree/c/h.txt && head -c 3000000 /dev/urandom > tree/big && ln -s a/f1 tree/link",
    );
    let script = format!(
        r#"SRC={src}
        cp $SRC/tree/big big && cmp big $SRC/tree/big
        cp -r $SRC/tree tree && diff -r $SRC/tree tree
        [ "$(readlink tree/link)" = a/f1 ] && cmp tree/link $SRC/tree/a/f1
        cp -r tree $SRC/back && diff -r $SRC/tree $SRC/back
        mv big big2 && [ ! -e big ] && cmp big2 $SRC/tree/big
        mv tree/a tree/a2 && cmp tree/a2/f7 $SRC/tree/a/f7 && [ ! -e tree/a ]
        ls -la tree | grep -q ' a2$'
        [ "$(ls -R tree | grep -c '^f[0-9]*$')" = 20 ]
        [ "$(cat tree/c/h.txt)" = hello ]
        head -c 10 big2 | cmp - <(head -c 10 $SRC/tree/big)
        tail -c 100 big2 | cmp - <(tail -c 100 $SRC/tree/big)
        [ "$(wc -c < big2)" = 3000000 ]
        printf 'l1\nl2\nl3\n' > lines && [ "$(wc -l < lines)" = 3 ] && [ "$(head -n1 lines)" = l1 ] && [ "$(tail -n1 lines)" = l3 ]
        dd if=/dev/urandom of=dd1 bs=1M count=8 status=none && [ "$(stat -c %s dd1)" = 8388608 ]
        dd if=dd1 of=$SRC/dd1 bs=1M status=none && cmp dd1 $SRC/dd1
        dd if=/dev/zero of=dd1 bs=4k seek=5 count=3 conv=notrunc status=none
        dd if=/dev/zero of=$SRC/dd1 bs=4k seek=5 count=3 conv=notrunc status=none
        cmp dd1 $SRC/dd1 && [ "$(stat -c %s dd1)" = 8388608 ]
        mkdir -p p/q/r/s && [ -d p/q/r/s ] && rmdir p/q/r/s && [ ! -e p/q/r/s ]
        ! rmdir p 2>/dev/null
        touch t1 && [ -f t1 ] && [ "$(stat -c %s t1)" = 0 ]
        touch -d '2001-02-03 04:05:06' t1 && [ "$(stat -c %Y t1)" = "$(date -d '2001-02-03 04:05:06' +%s)" ]
        touch -d '2020-01-01' old && touch new
        stat t1 > /dev/null && stat -c '%F' p | grep -q directory
        [ "$(du -sk big2 | cut -f1)" -ge 2900 ]
        df . | tail -1 | grep -q gustfs && df -i . > /dev/null
        ln -s big2 sl && [ "$(readlink sl)" = big2 ] && cmp sl big2 && [ -L sl ]
        truncate -s 1000 dd1 && [ "$(stat -c %s dd1)" = 1000 ] && truncate -s 5000 dd1 && [ "$(tail -c 4000 dd1 | tr -d '\0' | wc -c)" = 0 ]
        [ "$(md5sum < big2)" = "$(md5sum < $SRC/tree/big)" ]
        echo teed | tee tee1 tee2 > /dev/null && [ "$(cat tee2)" = teed ] && echo more | tee -a tee1 > /dev/null && [ "$(wc -l < tee1)" = 2 ]
        printf 'c\na\nb\n' > unsorted && sort unsorted > sorted && [ "$(cat sorted | tr -d '\n')" = abc ] && sort -o unsorted unsorted && cmp sorted unsorted
        [ "$(find tree -name 'f1*' -type f | wc -l)" = 11 ]
        [ "$(find . -maxdepth 1 -size +2M -name 'big*')" = ./big2 ]
        find . -maxdepth 1 -newer old -name new | grep -q new && ! find . -maxdepth 1 -newer new -name old | grep -q old
        chmod 600 t1 && [ "$(stat -c %a t1)" = 600 ] && chmod 755 tree && [ "$(stat -c %a tree)" = 755 ]
        chmod +x lines && [ -x lines ]
        rm -r tree && [ ! -e tree ] && rm big2 sl && [ ! -e big2 ]
        echo ALL-OK
        "#,
        src = src.path().display()
    );
    assert!(sh(m.path(), &script).contains("ALL-OK"));
}

#[test]
fn tar_create_extract_compare() {
    require("tar");
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let src = tempfile::tempdir().unwrap();
    sh(src.path(), "mkdir -p t/x/y && for i in $(seq 1 50); do head -c $((i * 977)) /dev/urandom > t/x/y/f$i; done; ln -s x/y/f3 t/l; tar cf a.tar t");
    let out = sh(
        m.path(),
        &format!(
            "S={s}
             tar xf $S/a.tar && diff -r $S/t t
             tar cf b.tar t && tar df b.tar && tar tf b.tar | wc -l
             mkdir u && tar xf b.tar -C u && diff -r t u/t
             tar czf c.tgz t && mkdir -p $S/out && tar xzf c.tgz -C $S/out && diff -r $S/t $S/out/t
             echo TAR-OK",
            s = src.path().display()
        ),
    );
    assert!(out.contains("TAR-OK"), "{out}");
}

#[test]
fn bash_redirections_loops_globbing() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let out = sh(
        m.path(),
        r#"mkdir many
        for i in $(seq 1 1000); do echo "line $i" > many/file_$i.txt; done
        n=0; for f in many/file_*.txt; do n=$((n+1)); done; [ $n = 1000 ]
        [ "$(ls many | wc -l)" = 1000 ]
        [ "$(cat many/file_77.txt)" = "line 77" ]
        set -- many/file_1??.txt; [ $# = 100 ]
        cat many/file_{1..10}.txt > cat10 && [ "$(wc -l < cat10)" = 10 ]
        echo a > r && echo b >> r && [ "$(cat r | tr -d '\n')" = ab ]
        exec 3> fd3 && echo via3 >&3 && exec 3>&- && [ "$(cat fd3)" = via3 ]
        { echo out; echo err >&2; } > both 2>&1 && [ "$(wc -l < both)" = 2 ]
        while read -r l; do [ -n "$l" ]; done < many/file_5.txt
        cat > here <<< "doc" && grep -q doc here
        : > r && [ ! -s r ]
        for i in $(seq 1 1000); do rm many/file_$i.txt; done; rmdir many
        echo BASH-OK"#,
    );
    assert!(out.contains("BASH-OK"));
}

#[test]
fn python_io() {
    require("python3");
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let script = r#"
import os, shutil, pathlib, tempfile, mmap, hashlib, sys
os.chdir(sys.argv[1])
with open("t.txt", "w") as f: f.write("héllo\n" * 1000)
assert open("t.txt").read() == "héllo\n" * 1000
blob = os.urandom(3 << 20)
with open("b.bin", "wb") as f: f.write(blob)
with open("b.bin", "rb") as f:
    assert f.read() == blob
    f.seek(1 << 20); assert f.read(10) == blob[1 << 20:(1 << 20) + 10]
with open("b.bin", "r+b") as f:
    f.seek(100); f.write(b"XYZ"); f.flush(); os.fsync(f.fileno())
assert open("b.bin", "rb").read(103)[100:] == b"XYZ"
with open("b.bin", "rb") as f:
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert mm[100:103] == b"XYZ" and mm[-5:] == blob[-5:] and len(mm) == len(blob)
    mm.close()
for d in ["w/a/b", "w/c"]:
    os.makedirs(d, exist_ok=True)
for i in range(30):
    pathlib.Path(f"w/a/b/{i}.txt").write_text(str(i))
pathlib.Path("w/c/x").write_bytes(b"x")
seen = sorted((r, sorted(fs)) for r, ds, fs in os.walk("w"))
assert len(seen) == 4 and len(seen[2][1]) == 30, seen
shutil.copytree("w", "w2")
assert sorted(p.name for p in pathlib.Path("w2/a/b").iterdir()) == sorted(f"{i}.txt" for i in range(30))
assert pathlib.Path("w2/a/b/7.txt").read_text() == "7"
shutil.rmtree("w"); assert not os.path.exists("w")
p = pathlib.Path("w2") / "c" / "x"
assert p.exists() and p.is_file() and p.stat().st_size == 1 and p.parent.is_dir()
p.rename("moved"); assert pathlib.Path("moved").read_bytes() == b"x"
with tempfile.NamedTemporaryFile(dir=".", delete=False) as t:
    t.write(b"tmp"); name = t.name
assert open(name, "rb").read() == b"tmp"; os.unlink(name)
with tempfile.TemporaryDirectory(dir=".") as td:
    pathlib.Path(td, "f").write_text("in tmpdir")
    assert os.listdir(td) == ["f"]
with tempfile.TemporaryFile(dir=".") as t:   # unlinked while open
    t.write(b"q" * 100000); t.seek(0); assert t.read() == b"q" * 100000
import time   # release after close is asynchronous in FUSE: the hidden name goes soon after
for _ in range(250):
    if not [n for n in os.listdir(".") if n.startswith(".gust_hidden")]: break
    time.sleep(0.02)
assert not [n for n in os.listdir(".") if n.startswith(".gust_hidden")]
shutil.rmtree("w2")
print("PY-OK")
"#;
    let out = Command::new("timeout").args(["300", "python3", "-c", script]).arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("PY-OK"));
}

#[test]
fn shared_writable_mmap_reaches_the_daemons() {
    require("python3");
    let inst = Instance::start_with(3, &["--chunk-size", "64k"]);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let script = r#"
import mmap, os, sys
p = os.path.join(sys.argv[1], "shared.bin")
with open(p, "wb") as f: f.truncate(1 << 20)
with open(p, "r+b") as f:
    mm = mmap.mmap(f.fileno(), 1 << 20, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    for i in range(16):
        mm[i * 65536:i * 65536 + 8] = b"chunk%03d" % i
    mm.flush(); mm.close()
print("MMAP-OK")
"#;
    let out = Command::new("timeout").args(["120", "python3", "-c", script]).arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Read back through the client core, not the page cache of this node.
    let c = inst.client();
    let fd = c.open("/shared.bin", libc::O_RDONLY, 0).unwrap();
    assert_eq!(c.fstat(fd).unwrap().size, 1 << 20);
    for i in 0..16u64 {
        let mut b = [0u8; 8];
        assert_eq!(c.pread(fd, &mut b, i * 65536).unwrap(), 8);
        assert_eq!(&b, format!("chunk{i:03}").as_bytes());
    }
    c.close(fd).unwrap();
}

#[test]
fn static_binary_and_exec_from_the_mount() {
    require("cc");
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let build = tempfile::tempdir().unwrap();
    std::fs::write(
        build.path().join("t.c"),
        r#"
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "line %d: %s failed\n", __LINE__, #c); return 1; } } while (0)
int main(int argc, char **argv) {
    CHECK(argc == 2 && chdir(argv[1]) == 0);
    CHECK(mkdir("cdir", 0755) == 0);
    int fd = open("cdir/f", O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0);
    static char buf[1 << 20], back[1 << 20];
    for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)(i * 7);
    CHECK(write(fd, buf, sizeof buf) == (ssize_t)sizeof buf);
    CHECK(pread(fd, back, sizeof back, 0) == (ssize_t)sizeof back && memcmp(buf, back, sizeof buf) == 0);
    CHECK(lseek(fd, 0, SEEK_END) == (off_t)sizeof buf);
    CHECK(fsync(fd) == 0 && close(fd) == 0);
    struct stat st;
    CHECK(stat("cdir/f", &st) == 0 && st.st_size == (off_t)sizeof buf && S_ISREG(st.st_mode));
    CHECK(rename("cdir/f", "cdir/g") == 0 && stat("cdir/f", &st) != 0);
    CHECK(symlink("g", "cdir/l") == 0);
    char t[16] = {0};
    CHECK(readlink("cdir/l", t, sizeof t) == 1 && t[0] == 'g');
    DIR *d = opendir("cdir");
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n++;
    CHECK(closedir(d) == 0 && n == 4);
    CHECK(truncate("cdir/g", 10) == 0 && stat("cdir/g", &st) == 0 && st.st_size == 10);
    CHECK(unlink("cdir/l") == 0 && unlink("cdir/g") == 0 && rmdir("cdir") == 0);
    puts("STATIC-OK");
    return 0;
}
"#,
    )
    .unwrap();
    sh(build.path(), "cc -static -O1 -o t t.c && ! ldd t >/dev/null 2>&1");
    // Run the static binary (raw system calls, no preload possible) against the mount.
    let out = sh(build.path(), &format!("./t {}", m.path().display()));
    assert!(out.contains("STATIC-OK"), "{out}");
    // Execute a binary and a script stored in the mount.
    let out = sh(
        m.path(),
        &format!(
            "cp {b}/t ./t && mkdir sub && ./t \"$PWD/sub\"
             cp /bin/echo ./myecho && ./myecho exec-ok
             printf '#!/bin/bash\\necho script-ok \"$@\"\\n' > s.sh && chmod +x s.sh && ./s.sh 1",
            b = build.path().display()
        ),
    );
    assert!(out.contains("STATIC-OK") && out.contains("exec-ok") && out.contains("script-ok 1"), "{out}");
}

#[test]
fn git_repository_in_the_mount() {
    require("git");
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let out = sh(
        m.path(),
        "export GIT_CONFIG_NOSYSTEM=1 HOME=$PWD
         git init -q repo && cd repo
         git config user.email t@example.com && git config user.name T
         mkdir src && for i in $(seq 1 20); do echo \"content $i\" > src/f$i.txt; done
         git add -A && git commit -qm first
         echo changed >> src/f3.txt && git commit -qam second
         git mv src/f1.txt src/one.txt && git commit -qm third
         [ \"$(git rev-list --count HEAD)\" = 3 ]
         git fsck --strict 2>&1 && git status --porcelain | wc -l
         git log --oneline | cat
         git gc -q && git fsck && git show HEAD~1:src/f3.txt | grep -q changed
         echo GIT-OK",
    );
    assert!(out.contains("GIT-OK"), "{out}");
}

/// One name of a hard-linked file unlinked while a descriptor on it is open, as git
/// does with each new object (it links the temporary file to the object's name and
/// unlinks the temporary name, whose release the kernel sends later): the other
/// name reaches the file, from new processes too, before and after the last close.
/// Long entry and attribute timeouts keep the kernel's entry of the other name
/// (from the link) in use, whatever the machine's speed. Before the fix the hidden
/// name took the place of the inode's other name, and once the release removed it
/// the other name reached nothing: git's "invalid object" of
/// `git_repository_in_the_mount` under load.
#[test]
fn unlinking_one_name_of_an_open_linked_file_keeps_the_other() {
    let inst = Instance::start(2);
    let m = Mount::new(&inst, &["--entry-timeout", "60", "--attr-timeout", "60"]);
    assert_is_gust(&m);
    let out = sh(m.path(), "exec 3> a; echo data >&3; ln a b; rm a; cat b; exec 3>&-; echo CLOSED");
    assert_eq!(out, "data\nCLOSED\n");
    // The release comes after close(2) returned: wait for the hidden name to go,
    // looking from outside the mount (a listing through it would tell the mount
    // the names again).
    let c = inst.client();
    let hidden_gone =
        || c.read_dir("/").map(|es| es.iter().all(|e| !e.name.starts_with(".gust_hidden"))).unwrap_or(false);
    assert!(wait_until(Duration::from_secs(30), hidden_gone), "the hidden name stayed");
    let out = sh(m.path(), "cat b; stat -c %h b; echo LINK-OK");
    assert_eq!(out, "data\n1\nLINK-OK\n");
    assert_eq!(c.stat("/b").unwrap().size, 5);
}

#[test]
fn fio_psync_verify() {
    require("fio");
    let inst = Instance::start_with(3, &["--chunk-size", "64k"]);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let out = sh(
        m.path(),
        "fio --name=seq --ioengine=psync --rw=write --bs=1M --size=32M --numjobs=2 --verify=crc32c --do_verify=1 \
             --directory=. --output-format=terse --minimal >/dev/null
         fio --name=rnd --ioengine=psync --rw=randwrite --bs=4k --size=4M --numjobs=2 --verify=md5 --do_verify=1 \
             --directory=. --minimal >/dev/null
         fio --name=rw --ioengine=psync --rw=randrw --bs=64k --size=8M --verify=crc32c --directory=. --minimal >/dev/null
         echo FIO-OK",
    );
    assert!(out.contains("FIO-OK"), "{out}");
}

#[test]
fn interoperability_with_the_client_core() {
    let inst = Instance::start_with(3, &["--chunk-size", "64k"]);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    let c = inst.client();
    let data: Vec<u8> = (0..1_500_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    // Mount -> API.
    std::fs::create_dir(m.p("dir")).unwrap();
    std::fs::write(m.p("dir/from_mount"), &data).unwrap();
    let fd = c.open("/dir/from_mount", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len() + 100];
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), data.len());
    assert!(back[..data.len()] == data[..]);
    c.close(fd).unwrap();
    // API -> mount.
    let fd = c.open("/dir/from_api", libc::O_CREAT | libc::O_WRONLY, 0o640).unwrap();
    assert_eq!(c.pwrite(fd, &data, 0).unwrap(), data.len());
    c.close(fd).unwrap();
    assert!(std::fs::read(m.p("dir/from_api")).unwrap() == data);
    assert_eq!(std::fs::metadata(m.p("dir/from_api")).unwrap().len(), data.len() as u64);
    // An API overwrite is seen at the next open through the mount (no stale page cache).
    let fd = c.open("/dir/from_api", libc::O_WRONLY, 0).unwrap();
    c.pwrite(fd, b"OVERWRITTEN", 1000).unwrap();
    c.close(fd).unwrap();
    let again = std::fs::read(m.p("dir/from_api")).unwrap();
    assert_eq!(&again[1000..1011], b"OVERWRITTEN");
    // Names made by one side are listed by the other.
    c.mkdir("/dir/api_dir", 0o755).unwrap();
    let names: Vec<String> =
        std::fs::read_dir(m.p("dir")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    for n in ["from_mount", "from_api", "api_dir"] {
        assert!(names.iter().any(|x| x == n), "{n} missing in {names:?}");
    }
    std::fs::rename(m.p("dir"), m.p("dir2")).unwrap();
    assert!(c.lstat("/dir").is_err());
    assert_eq!(c.stat("/dir2/from_mount").unwrap().size, data.len() as u64);
}

#[test]
fn inode_table_follows_renames_and_open_unlinked_files() {
    require("python3");
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &["--entry-timeout", "30", "--attr-timeout", "30"]);
    assert_is_gust(&m);
    // The kernel keeps using cached inodes (cwd, open files) across a directory
    // rename; the table must map them to the new paths.
    let script = r#"
import os, sys
root = sys.argv[1]
os.makedirs(f"{root}/a/b/c")
open(f"{root}/a/b/c/f", "w").write("deep")
f = open(f"{root}/a/b/c/open", "w+")
f.write("before ")
os.chdir(f"{root}/a/b")
os.rename(f"{root}/a", f"{root}/z")
assert open("c/f").read() == "deep"            # relative to the renamed cwd
f.write("after"); f.flush(); f.seek(0)
assert f.read() == "before after"
os.rename("c/open", "c/moved")                 # rename of an open file
f.write("!"); f.flush(); f.close()
assert open(f"{root}/z/b/c/moved").read() == "before after!"
g = open(f"{root}/z/b/c/f", "r+")
os.unlink(f"{root}/z/b/c/f")                   # unlinked while open
assert not os.path.exists(f"{root}/z/b/c/f")
g.seek(0); assert g.read() == "deep"; g.write("er"); g.seek(0); assert g.read() == "deeper"
g.close()
import time   # release after close is asynchronous in FUSE: the hidden name goes soon after
for _ in range(250):
    if sorted(os.listdir(f"{root}/z/b/c")) == ["moved"]: break
    time.sleep(0.02)
assert sorted(os.listdir(f"{root}/z/b/c")) == ["moved"], os.listdir(f"{root}/z/b/c")
os.chdir(root)
print("TABLE-OK")
"#;
    let out = Command::new("timeout").args(["120", "python3", "-c", script]).arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let c = inst.client();
    assert!(c.lstat("/a").is_err());
    assert_eq!(c.read_dir("/z/b/c").unwrap().len(), 1);
}

#[test]
fn large_directory_is_listed_completely() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    assert_is_gust(&m);
    // More entries than one readdir page per daemon and than one kernel readdir
    // buffer, created through the API so the test stays quick.
    let c = inst.client();
    c.mkdir("/big", 0o755).unwrap();
    let n = 20_000;
    for i in 0..n {
        let fd =
            c.open(&format!("/big/entry_with_a_longish_name_{i:06}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
    }
    let out = sh(m.path(), "ls big | wc -l; ls -f big | sort | uniq -d | wc -l; find big -type f | wc -l");
    let v: Vec<&str> = out.lines().map(|l| l.trim()).collect();
    assert_eq!(v, [n.to_string().as_str(), "0", n.to_string().as_str()], "{out}");
    // telldir/seekdir/rewinddir go through the offset path.
    let script = r#"
import os, sys
d = sys.argv[1]
a = sorted(os.listdir(d)); b = sorted(e.name for e in os.scandir(d))
assert a == b and len(a) == int(sys.argv[2])
print("DIR-OK")
"#;
    let out = Command::new("python3").args(["-c", script]).arg(m.p("big")).arg(n.to_string()).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("DIR-OK"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn options_read_only_direct_io_writeback() {
    let inst = Instance::start(3);
    {
        let c = inst.client();
        let fd = c.open("/ro.txt", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.pwrite(fd, b"read only", 0).unwrap();
        c.close(fd).unwrap();
    }
    {
        let m = Mount::new(&inst, &["--read-only"]);
        assert_eq!(std::fs::read(m.p("ro.txt")).unwrap(), b"read only");
        let e = std::fs::write(m.p("new.txt"), b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        assert_eq!(std::fs::remove_file(m.p("ro.txt")).unwrap_err().raw_os_error(), Some(libc::EROFS));
    }
    for opt in ["--direct-io", "--writeback-cache"] {
        let m = Mount::new(&inst, &[opt, "--attr-timeout", "0", "--entry-timeout", "0"]);
        let out = sh(
            m.path(),
            &format!(
                "d=dir{opt}; mkdir $d && head -c 5000000 /dev/urandom > /tmp/gust-src$$ && cp /tmp/gust-src$$ $d/f && cmp $d/f /tmp/gust-src$$
                 echo a >> $d/app && echo b >> $d/app && [ \"$(cat $d/app | tr -d '\\n')\" = ab ]
                 dd if=/dev/zero of=$d/f bs=4k count=1 seek=3 conv=notrunc status=none && [ \"$(stat -c %s $d/f)\" = 5000000 ]
                 rm /tmp/gust-src$$ && echo OPT-OK"
            ),
        );
        assert!(out.contains("OPT-OK"), "{opt}: {out}");
    }
}

#[test]
fn unmount_by_gust_umount_fusermount_signal_and_background() {
    let inst = Instance::start(3);
    // gust umount
    let mut m = Mount::new(&inst, &[]);
    std::fs::write(m.p("x"), b"1").unwrap();
    let out = Command::new(gust_bin()).arg("umount").arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!mounted(m.path()) && m.wait_exit(Duration::from_secs(10)), "mount process did not end after gust umount");
    drop(m);
    // fusermount3 -u
    let mut m = Mount::new(&inst, &[]);
    assert_eq!(std::fs::read(m.p("x")).unwrap(), b"1");
    let out = Command::new("fusermount3").arg("-u").arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(m.wait_exit(Duration::from_secs(10)) && !mounted(m.path()));
    drop(m);
    // SIGTERM, with a file open in the mount (busy): still unmounts, never hangs.
    let mut m = Mount::new(&inst, &[]);
    let held = std::fs::File::open(m.p("x")).unwrap();
    let pid = m.pid().unwrap();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    assert!(m.wait_exit(Duration::from_secs(15)), "mount process hung on SIGTERM");
    assert!(!mounted(m.path()));
    drop(held);
    drop(m);
    // --background returns once mounted; gust umount ends the detached process.
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let out = Command::new(gust_bin())
        .arg("mount")
        .arg("-d")
        .arg(dir.path())
        .arg("--hosts-file")
        .arg(&inst.hosts)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(mounted(dir.path()));
    assert_eq!(std::fs::read(dir.path().join("x")).unwrap(), b"1");
    let out = Command::new(gust_bin()).arg("umount").arg(dir.path()).output().unwrap();
    assert!(out.status.success() && !mounted(dir.path()), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn dead_daemon_gives_eio_promptly_and_unmount_succeeds() {
    let inst = Instance::start(3);
    // No attribute or entry cache in the kernel: every lookup below asks the daemons
    // (with the default 1 s caches, the test would have to wait for them to expire).
    let mut m = Mount::new(&inst, &["--rpc-timeout", "3", "--attr-timeout", "0", "--entry-timeout", "0"]);
    assert_is_gust(&m);
    std::fs::create_dir(m.p("k")).unwrap();
    for i in 0..40 {
        std::fs::write(m.p(&format!("k/f{i}")), format!("file {i}")).unwrap();
    }
    let victim = inst.daemon_pid(1) as i32;
    let read_all = |what: &str| -> (usize, usize) {
        let (mut ok, mut eio) = (0, 0);
        for i in 0..40 {
            let t = Instant::now();
            let out = Command::new("timeout").args(["30", "cat"]).arg(m.p(&format!("k/f{i}"))).output().unwrap();
            assert!(t.elapsed() < Duration::from_secs(10), "{what}: reading k/f{i} took {:?}", t.elapsed());
            if out.status.success() {
                assert_eq!(String::from_utf8_lossy(&out.stdout), format!("file {i}"));
                ok += 1;
            } else {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!(err.contains("Input/output error"), "{what}: k/f{i}: {err}");
                eio += 1;
            }
        }
        (ok, eio)
    };
    // A hung daemon (stopped): callers get EIO after the RPC timeout (3 s), not never.
    unsafe { libc::kill(victim, libc::SIGSTOP) };
    let t = Instant::now();
    let out = Command::new("timeout").args(["30", "ls"]).arg(m.p("k")).output().unwrap();
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Input/output error"),
        "ls with a hung daemon: {}, stderr {:?}, {} bytes listed",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        out.stdout.len()
    );
    assert!(t.elapsed() < Duration::from_secs(10), "listing with a hung daemon took {:?}", t.elapsed());
    // A dead daemon: EIO at once for what it owns; the rest keeps working.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(5), || unsafe { libc::kill(victim, 0) } != 0 || is_zombie(victim)));
    let t = Instant::now();
    let (ok, eio) = read_all("dead daemon");
    assert!(ok > 0 && eio > 0, "ok {ok} eio {eio}");
    assert!(t.elapsed() < Duration::from_secs(20), "40 reads took {:?}", t.elapsed());
    // New files on live daemons can still be written.
    let written = (0..20).filter(|i| std::fs::write(m.p(&format!("k/new{i}")), b"n").is_ok()).count();
    assert!(written > 0, "no file could be created with 2 of 3 daemons alive");
    // Unmount succeeds and the mount process ends.
    let t = Instant::now();
    let out = Command::new(gust_bin()).arg("umount").arg(m.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(m.wait_exit(Duration::from_secs(10)), "mount process did not end");
    assert!(t.elapsed() < Duration::from_secs(10));
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2) == Some("Z"))
        .unwrap_or(true)
}

#[test]
fn open_within_the_attribute_timeout_asks_no_daemon() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &["--attr-timeout", "30", "--entry-timeout", "30"]);
    let p = m.p("f");
    std::fs::write(&p, b"hello").unwrap();
    let c = inst.client();
    std::fs::metadata(&p).unwrap();
    let before = common::daemon_requests(&c);
    for _ in 0..20 {
        drop(std::fs::File::open(&p).unwrap());
    }
    assert_eq!(common::daemon_requests(&c) - before, 0, "opens with fresh attributes went to the daemons");
    assert_eq!(std::fs::read(&p).unwrap(), b"hello");
    // The file replaced by another client: its daemon recalled the mount's grant,
    // and the mount had the kernel drop the name and the attributes before the
    // replacement went ahead (crates/fuse/src/coherence.rs), so the next open, well
    // within the 30 s timeouts, finds the new file.
    c.unlink("/f").unwrap();
    let fd = c.open("/f", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    c.write(fd, b"other").unwrap();
    c.close(fd).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"other", "the mount served the replaced file");
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    use std::io::Write;
    f.write_all(b"+").and_then(|_| f.sync_all()).unwrap();
    assert_eq!(c.stat("/f").unwrap().size, 6);
    drop(f);
    drop(m);

    // Without grants the kernel keeps what it was told for the whole timeout: I/O
    // through the stale attributes fails cleanly (ESTALE) instead of reaching
    // another file's data.
    let m = Mount::new_with_env(&inst, &["--attr-timeout", "30", "--entry-timeout", "30"], &[("GUST_GRANTS", "0")]);
    let p = m.p("g");
    std::fs::write(&p, b"hello").unwrap();
    std::fs::metadata(&p).unwrap();
    c.unlink("/g").unwrap();
    let fd = c.open("/g", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    c.write(fd, b"other").unwrap();
    c.close(fd).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    let e = f.write_all(b"x").and_then(|_| f.sync_all()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}");
}

/// Restores /dev/fuse's mode when dropped.
struct DevFuseMode(u32);

impl Drop for DevFuseMode {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(self.0));
    }
}

/// An ordinary user starts an instance and mounts it through the setuid fusermount3
/// helper, writes and reads a file, and unmounts. Needs root to act as `nobody`; on
/// machines where /dev/fuse is not world-accessible (this CI's container makes it
/// 0600, distributions ship 0666) the test opens it up for its duration.
#[test]
fn ordinary_user_mounts_through_fusermount3() {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test switches to user nobody and needs root");
    assert!(Path::new("/usr/bin/fusermount3").exists(), "fusermount3 missing: run scripts/setup.sh");
    let mode = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
    let _restore = DevFuseMode(mode);
    std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).unwrap();
    // Everything nobody touches lives in one directory it owns, binary included
    // (the build directory may sit under root's home).
    let dir = tempfile::Builder::new().prefix("gust-user").tempdir_in("/tmp").unwrap();
    let bin = dir.path().join("gust");
    std::fs::copy(gust_bin(), &bin).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = dir.path().display();
    let script = format!(
        "set -e
         {d}/gust start --local 2 --rootdir {d}/fs >/dev/null 2>&1
         export GUST_HOSTS_FILE={d}/fs/gust.hosts
         mkdir {d}/mnt
         {d}/gust mount -d {d}/mnt --log {d}/mount.log >/dev/null 2>&1
         echo written-by-nobody > {d}/mnt/f
         cat {d}/mnt/f
         stat -c %u:%g {d}/mnt/f
         chmod 400 {d}/mnt/f && echo more >> {d}/mnt/f && echo wrote-a-read-only-file
         grep ' {d}/mnt ' /proc/self/mountinfo | grep -o 'user_id=[0-9]*'
         {d}/gust umount {d}/mnt"
    );
    let out = Command::new("runuser").args(["-u", "nobody", "--", "bash", "-c", &script]).output().expect("runuser");
    let still_mounted = mounted(&dir.path().join("mnt"));
    if still_mounted {
        let _ = Command::new("umount").arg("-l").arg(dir.path().join("mnt")).status();
    }
    let _ = Command::new("runuser")
        .args(["-u", "nobody", "--", &format!("{d}/gust"), "stop", "--rootdir", &format!("{d}/fs")])
        .output();
    let log = std::fs::read_to_string(dir.path().join("mount.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "as nobody: {}\nstdout: {}\nstderr: {}\nmount log: {log}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The file is nobody's; a mount of one user leaves mode bits unchecked
    // (docs/SEMANTICS.md, "A mount of one user"); the mount belonged to nobody (uid
    // 65534), and `gust umount` removed it.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "written-by-nobody\n65534:65534\nwrote-a-read-only-file\nuser_id=65534\n"
    );
    assert!(!still_mounted, "gust umount as an ordinary user left the mount in place");
}

/// `ls -l` through the mount: READDIRPLUS brings every entry's attributes with the
/// listing's pages, so no stat request per entry reaches the daemons.
#[test]
fn ls_l_uses_readdirplus() {
    let inst = Instance::start(3);
    let c = inst.client();
    c.mkdir("/big", 0o755).unwrap();
    let n = 2_000;
    for i in 0..n {
        let fd = c.open(&format!("/big/f{i:05}"), libc::O_CREAT | libc::O_WRONLY, 0o640).unwrap();
        c.pwrite(fd, b"abc", 0).unwrap();
        c.close(fd).unwrap();
    }
    let m = Mount::new(&inst, &[]);
    let stats = common::op_total(&c, "stat");
    let out = Command::new("ls").arg("-l").arg(m.p("big")).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let files: Vec<&str> = text.lines().filter(|l| l.starts_with("-rw-r-----")).collect();
    assert_eq!(files.len(), n);
    assert!(files.iter().all(|l| l.split_whitespace().nth(4) == Some("3")), "sizes from the listing");
    let stat_requests = common::op_total(&c, "stat") - stats;
    assert!(stat_requests < 50, "ls -l of {n} entries sent {stat_requests} stat requests");
    assert!(common::op_total(&c, "readdir_plus") > 0);
}

/// `--readdirplus never`: the kernel lists names only (READDIR; the default mount
/// asks READDIRPLUS), and what programs see is the same: `ls -l` stats each entry
/// by LOOKUP and prints what the default mount prints, and `find -name` finds the
/// same names. Judged from fuser's own request log.
#[test]
fn readdirplus_never_lists_names_only() {
    let inst = Instance::start(2);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    c.mkdir("/d/sub", 0o700).unwrap();
    for i in 0..300 {
        let fd = c.open(&format!("/d/f{i:03}"), libc::O_CREAT | libc::O_WRONLY, 0o640).unwrap();
        c.pwrite(fd, &vec![b'x'; i], 0).unwrap();
        c.close(fd).unwrap();
    }
    let env = [("GUST_LOG", "fuser=debug")];
    let plus = Mount::new_with_env(&inst, &[], &env);
    let names = Mount::new_with_env(&inst, &["--readdirplus", "never"], &env);
    let ls = |m: &Mount| sh(m.path(), "ls -l --time-style=+%s d | tail -n +2; find d -name 'f2*' | sort");
    let (a, b) = (ls(&plus), ls(&names));
    assert_eq!(a, b, "the two mounts show the same");
    assert_eq!(a.lines().count(), 301 + 100, "{a}");
    let count = |m: &Mount, op: &str| m.log().matches(&format!(" {op} fh ")).count();
    assert!(count(&plus, "READDIRPLUS") > 0 && count(&plus, "READDIR") == 0, "the default mount lists with attributes");
    assert!(count(&names, "READDIR") > 0, "the names-only mount lists");
    assert_eq!(count(&names, "READDIRPLUS"), 0, "the names-only mount never asks for attributes");
}

/// Requests served by all daemons per op, not counting the `stats` requests that
/// read them.
fn daemon_ops(c: &gust_client::Client) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for d in 0..c.daemon_count() {
        for (op, n) in c.daemon_stats(d).expect("daemon stats").ops {
            if !matches!(op.as_str(), "stats" | "callback") {
                *m.entry(op).or_insert(0) += n;
            }
        }
    }
    m
}

/// The requests `f` made the daemons serve, per op (ops that did not move left out).
fn ops_of(c: &gust_client::Client, f: impl FnOnce()) -> std::collections::BTreeMap<String, u64> {
    let before = daemon_ops(c);
    f();
    daemon_ops(c)
        .into_iter()
        .filter_map(|(op, n)| {
            let d = n - before.get(&op).copied().unwrap_or(0);
            (d > 0).then_some((op, d))
        })
        .collect()
}

/// Issue 14 part 4: with `--negative-timeout`, creating a file in a directory the
/// mount made is one request (the create; the LOOKUP the kernel sends first is
/// answered from negative.rs), and a name found absent once is created without a
/// second lookup. Without the option a create costs the failed lookup too.
#[test]
fn create_through_the_mount_is_one_request_with_negative_entries() {
    let inst = Instance::start(3);
    let c = inst.client();
    let one = |n: u64| std::collections::BTreeMap::from([("create".to_string(), n)]);
    {
        let m = Mount::new(&inst, &["--negative-timeout", "30", "--entry-timeout", "30", "--attr-timeout", "30"]);
        std::fs::create_dir(m.p("fresh")).unwrap();
        for i in 0..20 {
            let p = m.p(&format!("fresh/f{i}"));
            let ops = ops_of(&c, || drop(std::fs::File::create(&p).unwrap()));
            assert_eq!(ops, one(1), "create of {} served {ops:?}", p.display());
        }
        // Created names are found (the mount does not take its own creates for absent).
        for i in 0..20 {
            assert!(m.p(&format!("fresh/f{i}")).exists());
        }
        // A name looked up and found absent in a directory the mount did not make:
        // the stat costs one lookup, the create that follows only the create.
        c.mkdir("/api", 0o755).unwrap();
        assert!(m.p("api").is_dir());
        let p = m.p("api/g");
        let ops = ops_of(&c, || assert!(!p.exists()));
        assert_eq!(ops, std::collections::BTreeMap::from([("stat".to_string(), 1)]));
        let ops = ops_of(&c, || drop(std::fs::File::create(&p).unwrap()));
        assert_eq!(ops, one(1), "create after a failed stat served {ops:?}");
        // A create is never wrong about existence: the daemon decides it. A file made
        // by another client in the fresh directory, unseen by this mount's lookups,
        // fails an exclusive create and is opened (data kept) by a plain one.
        let fd = c.open("/fresh/other", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.write(fd, b"from the API").unwrap();
        c.close(fd).unwrap();
        let e = std::fs::OpenOptions::new().write(true).create_new(true).open(m.p("fresh/other")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}");
        let f = std::fs::OpenOptions::new().append(true).create(true).open(m.p("fresh/other")).unwrap();
        drop(f);
        assert_eq!(std::fs::read(m.p("fresh/other")).unwrap(), b"from the API");
        // Removed names are absent again without asking.
        std::fs::remove_file(m.p("fresh/f0")).unwrap();
        let ops = ops_of(&c, || assert!(!m.p("fresh/f0").exists()));
        assert!(ops.is_empty(), "lookup of a name this mount removed served {ops:?}");
    }
    {
        // The bound: a name created elsewhere in a directory this mount made is seen
        // once the negative timeout has passed.
        let m = Mount::new(&inst, &["--negative-timeout", "1"]);
        std::fs::create_dir(m.p("late")).unwrap();
        let made = Instant::now();
        let fd = c.open("/late/x", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
        assert!(wait_until(Duration::from_secs(10), || m.p("late/x").exists()), "never seen");
        assert!(
            made.elapsed() >= Duration::from_millis(900),
            "seen before the timeout: names in the fresh directory were not answered as absent"
        );
    }
    // Default options: negative entries are off, a file created elsewhere is found at
    // once, and a create costs its failed lookup.
    let m = Mount::new(&inst, &[]);
    std::fs::create_dir(m.p("plain")).unwrap();
    let fd = c.open("/plain/x", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    c.close(fd).unwrap();
    assert!(m.p("plain/x").exists());
    let ops = ops_of(&c, || drop(std::fs::File::create(m.p("plain/y")).unwrap()));
    assert_eq!(ops, std::collections::BTreeMap::from([("create".to_string(), 1), ("stat".to_string(), 1)]));
}

/// A file written through the mount has its size on the metadata daemon when
/// close(2) returns (close-to-open for other clients, docs/SEMANTICS.md): a writable
/// handle gets a FLUSH at close, which sends the size the client batched. With
/// FOPEN_NOFLUSH on writable handles the size went at RELEASE, after close returned,
/// and another client's stat saw the old size for most files.
#[test]
fn size_written_through_the_mount_is_seen_by_others_when_close_returns() {
    let inst = Instance::start(3);
    let m = Mount::new(&inst, &[]);
    let other = inst.client();
    let mut stale = Vec::new();
    for i in 0..100 {
        std::fs::write(m.p(&format!("f{i}")), vec![7u8; 100_000]).unwrap();
        let size = other.stat(&format!("/f{i}")).unwrap().size;
        if size != 100_000 {
            stale.push((i, size));
        }
    }
    assert!(stale.is_empty(), "sizes seen right after close: {stale:?}");
}
