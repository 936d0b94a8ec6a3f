//! Size cache (gust-client size_cache.rs): writes through a descriptor send their
//! size in batches; the writing client sees every size at once, other clients at
//! the flush points (close, fsync, the interval).

mod common;

use common::{get, op_total};
use gust_e2e::Instance;
use libc::{O_CREAT, O_RDONLY, O_WRONLY};

#[test]
fn sizes_are_sent_in_batches_and_seen_at_the_flush_points() {
    let inst = Instance::start(3);
    let (w, other) = (inst.client(), inst.client());
    let fd = w.open("/shared", O_CREAT | O_WRONLY, 0o644).unwrap();
    let updates = op_total(&other, "update_size");
    for i in 0..200u64 {
        w.pwrite(fd, &[7u8; 8192], i * 8192).unwrap();
    }
    // 200 writes in well under the interval: no size update yet, data on the daemons.
    let sent = op_total(&other, "update_size") - updates;
    assert!(sent <= 2, "{sent} size updates for 200 writes");
    assert_eq!(other.stat("/shared").unwrap().size, 0, "others see the size at a flush point");
    // The writer sees its own size at once (a stat flushes first).
    assert_eq!(w.stat("/shared").unwrap().size, 200 * 8192);
    assert_eq!(other.stat("/shared").unwrap().size, 200 * 8192);
    // The interval: a write 100 ms after the oldest unsent one sends it.
    w.pwrite(fd, b"x", 200 * 8192).unwrap();
    // Not a wait for an event: the passing of the interval is what is under test.
    std::thread::sleep(gust_client::SIZE_FLUSH_INTERVAL + std::time::Duration::from_millis(20));
    w.pwrite(fd, b"y", 200 * 8192 + 1).unwrap();
    assert_eq!(other.stat("/shared").unwrap().size, 200 * 8192 + 2);
    // fsync and close flush too.
    w.pwrite(fd, b"z", 3_000_000).unwrap();
    w.fsync(fd).unwrap();
    assert_eq!(other.stat("/shared").unwrap().size, 3_000_001);
    w.pwrite(fd, b"end", 4_000_000).unwrap();
    w.close(fd).unwrap();
    assert_eq!(other.stat("/shared").unwrap().size, 4_000_003);
    let data = get(&other, "/shared");
    assert_eq!(&data[4_000_000..], b"end");
    assert!(data[..200 * 8192].iter().all(|b| *b == 7));
    // A read through another descriptor of the writer sees its writes' size.
    let a = w.open("/shared", O_WRONLY, 0).unwrap();
    let r = w.open("/shared", O_RDONLY, 0).unwrap();
    w.pwrite(a, b"more", 4_000_003).unwrap();
    let mut buf = [0u8; 7];
    assert_eq!(w.pread(r, &mut buf, 4_000_000).unwrap(), 7);
    assert_eq!(&buf, b"endmore");
    w.close(a).unwrap();
    w.close(r).unwrap();
    // A write through a descriptor whose file was replaced reports it at close.
    let fd = w.open("/gone", O_CREAT | O_WRONLY, 0o644).unwrap();
    other.unlink("/gone").unwrap();
    let fd2 = other.open("/gone", O_CREAT | O_WRONLY, 0o644).unwrap();
    other.close(fd2).unwrap();
    w.pwrite(fd, b"late", 0).unwrap();
    assert_err!(w.close(fd), libc::ESTALE);
}
