//! Helpers shared by the end-to-end test files (each file is its own crate and uses
//! only some of them).
#![allow(dead_code)]

use gust_client::{Client, Result};

pub mod locker;
use gust_e2e::Instance;

/// Instance sizes every POSIX scenario runs on: one daemon, a few, and more daemons
/// than a small file has chunks.
pub const SIZES: [u32; 3] = [1, 3, 8];

/// Runs `f` on a fresh instance of each size in `SIZES`, started with `extra`.
pub fn each_size(extra: &[&str], f: impl Fn(&Instance, &Client)) {
    for n in SIZES {
        eprintln!("--- {n} daemon(s), options {extra:?}");
        let inst = Instance::start_with(n, extra);
        let c = inst.client();
        f(&inst, &c);
    }
}

/// The errno of a call that must fail.
pub fn errno_of<T: std::fmt::Debug>(r: Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.0,
    }
}

pub fn errname(e: i32) -> String {
    format!("{} ({e})", std::io::Error::from_raw_os_error(e))
}

/// Asserts that `$call` fails with `$errno`.
#[macro_export]
macro_rules! assert_err {
    ($call:expr, $errno:expr) => {{
        let got = $crate::common::errno_of($call);
        assert_eq!(
            got,
            $errno,
            "{}: got {}, want {}",
            stringify!($call),
            $crate::common::errname(got),
            $crate::common::errname($errno)
        );
    }};
}

/// Daemon `d`'s local chunk file of `file_id` (its sums sit beside it).
pub fn local_file(inst: &Instance, d: u32, file_id: u128) -> std::path::PathBuf {
    let hex = format!("{file_id:032x}");
    inst.rootdir().join(format!("d{d}")).join("chunks").join(&hex[..2]).join(hex)
}

/// Flips one bit of byte `at` of `path`, as a failing disk would; returns the
/// byte it held.
pub fn flip(path: &std::path::Path, at: u64) -> u8 {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x04], at).unwrap();
    b[0]
}

/// Deterministic test bytes: different for each `seed` and offset.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Creates (or truncates) `path` and writes `data` to it.
pub fn put(c: &Client, path: &str, data: &[u8]) {
    let fd = c
        .open(path, libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY, 0o644)
        .unwrap_or_else(|e| panic!("open {path}: {e}"));
    assert_eq!(c.write(fd, data).unwrap_or_else(|e| panic!("write {path}: {e}")), data.len());
    c.close(fd).unwrap();
}

/// A finished command's status and both outputs, for an assertion's message.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The whole content of `path`, read in one pread sized from stat.
pub fn get(c: &Client, path: &str) -> Vec<u8> {
    let size = c.stat(path).unwrap_or_else(|e| panic!("stat {path}: {e}")).size as usize;
    let fd = c.open(path, libc::O_RDONLY, 0).unwrap_or_else(|e| panic!("open {path}: {e}"));
    let mut buf = vec![0u8; size + 17];
    let n = c.pread(fd, &mut buf, 0).unwrap_or_else(|e| panic!("read {path}: {e}"));
    c.close(fd).unwrap();
    assert_eq!(n, size, "{path}: read returned {n} bytes, stat says {size}");
    buf.truncate(n);
    buf
}

/// Names in a directory, sorted.
pub fn names(c: &Client, dir: &str) -> Vec<String> {
    let mut v: Vec<String> =
        c.read_dir(dir).unwrap_or_else(|e| panic!("readdir {dir}: {e}")).into_iter().map(|e| e.name).collect();
    v.sort();
    v
}

/// Sum of one op counter ("create", "stat", ...) over all daemons of `c`.
pub fn op_total(c: &Client, op: &str) -> u64 {
    (0..c.daemon_count()).map(|d| op_count(c, d, op)).sum()
}

/// Requests served by all daemons, not counting the `stats` requests that read them
/// (nor the callback connections' setup).
pub fn daemon_requests(c: &Client) -> u64 {
    (0..c.daemon_count())
        .map(|d| {
            let s = c.daemon_stats(d).unwrap_or_else(|e| panic!("stats of daemon {d}: {e}"));
            s.ops.iter().filter(|x| !matches!(x.0.as_str(), "stats" | "callback")).map(|x| x.1).sum::<u64>()
        })
        .sum()
}

/// Listings the daemons served (pages of `readdir` and `readdir_plus`).
pub fn listings_served(c: &Client) -> u64 {
    op_total(c, "readdir") + op_total(c, "readdir_plus")
}

pub fn op_count(c: &Client, d: u32, op: &str) -> u64 {
    let s = c.daemon_stats(d).unwrap_or_else(|e| panic!("stats of daemon {d}: {e}"));
    s.ops.iter().find(|x| x.0 == op).unwrap_or_else(|| panic!("daemon {d} has no counter {op}")).1
}

/// Creates (or truncates) `path` and writes `data`, reporting failure instead of
/// panicking (tests of failures: dead daemons, partitions, fences).
pub fn try_put(c: &Client, path: &str, data: &[u8]) -> Result<()> {
    let fd = c.open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)?;
    let r = c.pwrite(fd, data, 0).map(|_| ());
    c.close(fd)?;
    r
}

/// Up to `max` bytes of `path` from its start, in one pread, reporting failure
/// instead of panicking. A buffer larger than the file also asks the daemons of the
/// chunks past its end.
pub fn try_get(c: &Client, path: &str, max: usize) -> Result<Vec<u8>> {
    let fd = c.open(path, libc::O_RDONLY, 0)?;
    let mut b = vec![0u8; max];
    let n = c.pread(fd, &mut b, 0);
    c.close(fd)?;
    b.truncate(n?);
    Ok(b)
}
