//! Write-behind (gust-client write_behind.rs; opt-in with $GUST_WRITE_BEHIND):
//! adjacent writes of a descriptor go out as one chunk write; the writing client
//! reads them at once, another client from the flush (close, fsync, any other use
//! of the descriptor, a path operation); a failed flush is reported by fsync or
//! close; real programs keep their data.

mod common;

use common::{get, op_total};
use gust_client::Client;
use gust_e2e::{gust_bin, Instance};
use libc::{O_CREAT, O_RDONLY, O_RDWR, O_WRONLY};
use std::process::Command;

const KIB: usize = 1024;
const CHUNK: usize = 512 * KIB;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

fn read_all(c: &Client, fd: i32, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len + 1];
    let n = c.pread(fd, &mut b, 0).unwrap();
    b.truncate(n);
    b
}

/// 64 writes of 8 KiB (one chunk) through a descriptor: one chunk write instead of
/// 64. Until the flush another client sees none of the buffer; this client's other
/// descriptor reads everything (its read sends the buffer first).
#[test]
fn adjacent_writes_are_one_request_and_visible_from_the_flush() {
    let inst = Instance::start(4);
    let (c, other) = (inst.client(), inst.client());
    c.set_write_behind(CHUNK);
    let data = pattern(CHUNK + 80 * KIB, 1);
    let fd = c.open("/f", O_CREAT | O_WRONLY, 0o644).unwrap();
    let writes = op_total(&c, "write");
    for piece in data[..CHUNK].chunks(8 * KIB) {
        assert_eq!(c.write(fd, piece).unwrap(), piece.len());
    }
    assert_eq!(op_total(&c, "write") - writes, 1, "64 writes of 8 KiB: one chunk write");
    for piece in data[CHUNK..].chunks(8 * KIB) {
        c.write(fd, piece).unwrap();
    }
    assert_eq!(op_total(&c, "write") - writes, 1, "the last 80 KiB are buffered");
    // The first chunk write is on the daemons and its size held (size holds:
    // another client's stat takes it back); the buffer is not.
    assert_eq!(other.stat("/f").unwrap().size, CHUNK as u64, "another client sees what was sent, not the buffer");
    let rd = c.open("/f", O_RDONLY, 0).unwrap();
    assert_eq!(read_all(&c, rd, data.len()), data, "this client reads its own writes");
    c.close(rd).unwrap();
    assert_eq!(get(&other, "/f"), data, "sent by that read");
    // A write that does not follow the buffer sends it first; pwrite is gathered too.
    let fd2 = c.open("/g", O_CREAT | O_RDWR, 0o644).unwrap();
    let writes = op_total(&c, "write");
    c.pwrite(fd2, b"BBBB", 4).unwrap();
    c.pwrite(fd2, b"AAAA", 0).unwrap();
    c.pwrite(fd2, b"CCCC", 8).unwrap();
    assert_eq!(op_total(&c, "write") - writes, 2, "two sent, the third buffered");
    c.fsync(fd2).unwrap();
    assert_eq!(op_total(&c, "write") - writes, 3, "fsync sends it");
    assert_eq!(get(&other, "/g"), b"AAAABBBBCCCC");
    c.close(fd2).unwrap();
    c.close(fd).unwrap();
}

/// A buffered write past a daemon's declared capacity returns its length; the flush
/// at fsync fails with ENOSPC and reports it; without write-behind the write itself
/// would. A later buffered write that fails is reported by close; what was written
/// before stays readable.
#[test]
fn a_failed_flush_is_reported_by_fsync_and_close() {
    let inst = Instance::start_with(1, &["--placement", "capacity", "--declare-capacity", "1MiB"]);
    let c = inst.client();
    c.set_write_behind(CHUNK);
    let fd = c.open("/big", O_CREAT | O_WRONLY, 0o644).unwrap();
    let first = pattern(CHUNK, 3);
    for piece in first.chunks(64 * KIB) {
        c.write(fd, piece).unwrap();
    }
    c.fsync(fd).unwrap();
    // 2 MiB more: past the 1 MiB capacity, but buffered below one chunk per write.
    let mut failed = None;
    for (i, piece) in pattern(2 * 1024 * KIB, 5).chunks(64 * KIB).enumerate() {
        if let Err(e) = c.write(fd, piece) {
            failed = Some((i, e));
            break;
        }
        // 512 KiB + 10 x 64 KiB: past 1 MiB, the last 128 KiB still buffered.
        if i == 9 {
            assert_err!(c.fsync(fd), libc::ENOSPC);
            break;
        }
    }
    assert!(failed.is_none(), "buffered writes return their length: {failed:?}");
    // Reported once, as Linux reports a write-back error once per descriptor; the
    // next buffered write that cannot be sent is reported by close.
    assert_eq!(c.write(fd, &[1u8; 64 * KIB]).unwrap(), 64 * KIB);
    assert_err!(c.close(fd), libc::ENOSPC);
    assert_eq!(get(&c, "/big")[..CHUNK], first[..], "what was written before stays");
}

/// Real programs under the preload library with GUST_WRITE_BEHIND=1: dd writing
/// 8 KiB blocks and python writing out of order and reading back in the same
/// process, then `cmp` in another process.
#[test]
fn preload_programs_keep_their_data() {
    let inst = Instance::start(3);
    let c = inst.client();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::write(&src, pattern(3 * CHUNK + 12_345, 7)).unwrap();
    let run = |script: &str| {
        let out = Command::new(gust_bin())
            .args(["run", "--", "bash", "-c", script])
            .env("GUST_HOSTS_FILE", &inst.hosts)
            .env("GUST_WRITE_BEHIND", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let writes = op_total(&c, "write");
    run(&format!(
        "set -euo pipefail; dd if={0} of=/gustfs/copy bs=8k status=none; cmp {0} /gustfs/copy",
        src.display()
    ));
    // 1,580 KiB in 198 writes of 8 KiB, gathered per chunk: 4 buffers, each one or
    // two chunk-write requests.
    let sent = op_total(&c, "write") - writes;
    assert!(sent <= 8, "{sent} chunk writes for dd's 198 writes");
    assert_eq!(get(&c, "/copy"), std::fs::read(&src).unwrap());
    // Out of order: every write sends the one before; read back in the process.
    run("python3 -c 'import os\nfd = os.open(\"/gustfs/py\", os.O_CREAT | os.O_RDWR)\n\
         for i in range(200): os.pwrite(fd, bytes([i % 251]) * 4096, (i * 4096 * 7) % (200 * 4096))\n\
         assert os.pread(fd, 4096, 0) == bytes([0]) * 4096\nos.close(fd)'");
    let py = get(&c, "/py");
    for i in 0..200usize {
        let at = (i * 4096 * 7) % (200 * 4096);
        assert!(py[at..at + 4096].iter().all(|b| *b == (i % 251) as u8), "block {i}");
    }
}
