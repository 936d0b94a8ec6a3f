//! The C API: tests/c/capi_test.c, compiled against crates/capi/include/gust.h and
//! linked with libgust.so, runs against 3 daemons; then the client core checks that
//! what the C program wrote is there.
//!
//! Fails without the library (the link step needs libgust.so) and without the
//! header. Needs cc (scripts/setup.sh).

use gust_e2e::{gust_bin, Instance};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Byte `i` of /capi/big: must match pattern() in tests/c/capi_test.c.
fn big_pattern(i: u64) -> u8 {
    let mut x = (i / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    (x >> (8 * (i % 8))) as u8
}

const BIG_BYTES: u64 = 20 * 1024 * 1024 + 12345;
const SHARED_PART_BYTES: u64 = 1024 * 1024 + 7;

fn lib_dir() -> PathBuf {
    let dir = gust_bin().parent().unwrap().to_path_buf();
    let lib = dir.join("libgust.so");
    assert!(lib.exists(), "{} missing: cargo build --release -p gust-capi", lib.display());
    dir
}

fn compile(work: &Path, src: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let include = root.join("crates/capi/include");
    let libs = lib_dir();
    let bin = work.join(src.file_stem().unwrap());
    let cc = Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(&include)
        .arg("-o")
        .arg(&bin)
        .arg(src)
        .arg("-L")
        .arg(&libs)
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .arg("-lgust")
        .output()
        .expect("run cc");
    assert!(cc.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&cc.stderr));
    bin
}

#[test]
fn c_program_uses_every_function() {
    let inst = Instance::start(3);
    let work = tempfile::Builder::new().prefix("gust-capi").tempdir_in("/tmp").unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let bin = compile(work.path(), &root.join("tests/c/capi_test.c"));
    let missing = work.path().join("no-such.hosts");
    let t = Instant::now();
    let out = Command::new(&bin)
        .arg(&inst.hosts)
        .arg("/gustfs")
        .arg(&missing)
        .env_remove("GUST_HOSTS_FILE")
        .output()
        .expect("run capi_test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "capi_test failed ({}):\n{stderr}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "CAPI-OK\n", "stderr:\n{stderr}");
    eprintln!("capi_test ran in {:?}", t.elapsed());

    // What the C program left, seen through the client core.
    let c = inst.client();
    assert!(BIG_BYTES > 16 * c.chunk_size_bytes(), "the big file must span many chunks");
    let st = c.stat("/capi/big").unwrap();
    assert_eq!(st.size, BIG_BYTES);
    assert_eq!(st.mode, 0o600);
    let fd = c.open("/capi/big", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; BIG_BYTES as usize];
    assert_eq!(c.read(fd, &mut back).unwrap(), BIG_BYTES as usize);
    c.close(fd).unwrap();
    if let Some(i) = (0..BIG_BYTES).find(|&i| back[i as usize] != big_pattern(i)) {
        panic!("/capi/big differs at byte {i}");
    }
    assert_eq!(c.readlink("/capi/link").unwrap(), "big");
    assert_eq!(c.stat("/capi/link").unwrap().size, BIG_BYTES);

    let many = c.read_dir("/capi/many").unwrap();
    assert_eq!(many.len(), 1000);
    let mut names: Vec<String> = many.into_iter().map(|e| e.name).collect();
    names.sort();
    assert_eq!(names, (0..1000).map(|i| format!("e{i:04}")).collect::<Vec<_>>());

    let shared = c.stat("/capi/shared").unwrap();
    assert_eq!(shared.size, 4 * SHARED_PART_BYTES);
    let fd = c.open("/capi/shared", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; (4 * SHARED_PART_BYTES) as usize];
    assert_eq!(c.read(fd, &mut back).unwrap(), back.len());
    c.close(fd).unwrap();
    for (t, part) in back.chunks(SHARED_PART_BYTES as usize).enumerate() {
        assert!(part.iter().all(|&b| b == b'A' + t as u8), "thread {t}'s part of /capi/shared is wrong");
        // Each thread kept files f0, f2, ..., f38 and removed the odd ones.
        let mut kept: Vec<String> = c.read_dir(&format!("/capi/t{t}")).unwrap().into_iter().map(|e| e.name).collect();
        kept.sort();
        let mut want: Vec<String> = (0..40).step_by(2).map(|i| format!("f{i}")).collect();
        want.sort();
        assert_eq!(kept, want);
        let mut b = [0u8; 64];
        let fd = c.open(&format!("/capi/t{t}/f4"), libc::O_RDONLY, 0).unwrap();
        let n = c.read(fd, &mut b).unwrap();
        c.close(fd).unwrap();
        assert_eq!(&b[..n], format!("thread {t} file 4").as_bytes());
    }
    // Removed, renamed and temporary names are gone.
    for gone in ["/capi/small", "/capi/small2", "/capi/d1", "/capi/d2", "/capi/d3", "/capi/dangling"] {
        assert_eq!(c.lstat(gone).unwrap_err(), gust_client::Errno(libc::ENOENT), "{gone}");
    }
}

/// A hosts file whose daemons are gone: gust_mount fails at once with EIO and the
/// message names the hosts file and the daemon that did not answer.
#[test]
fn mount_of_a_stopped_instance_names_the_daemon() {
    let mut inst = Instance::start(2);
    let out = Command::new(gust_bin()).args(["stop", "--keep", "--hosts-file"]).arg(&inst.hosts).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let work = tempfile::Builder::new().prefix("gust-capi").tempdir_in("/tmp").unwrap();
    let src = work.path().join("capi_mount.c");
    std::fs::write(
        &src,
        r#"#include "gust.h"
#include <errno.h>
#include <stdio.h>
int main(int argc, char **argv) {
    (void)argc;
    errno = 0;
    gust_fs *fs = gust_mount(argv[1]);
    printf("%s %d %s\n", fs ? "mounted" : "NULL", errno, gust_last_error());
    return 0;
}
"#,
    )
    .unwrap();
    let bin = compile(work.path(), &src);
    let t = Instant::now();
    let out = Command::new(&bin).arg(&inst.hosts).output().unwrap();
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(t.elapsed().as_secs() < 10, "gust_mount took {:?}", t.elapsed());
    assert!(line.starts_with(&format!("NULL {} gust_mount: ", libc::EIO)), "{line}");
    assert!(line.contains(&inst.hosts.display().to_string()) && line.contains("daemon "), "{line}");
    inst.stop();
}
