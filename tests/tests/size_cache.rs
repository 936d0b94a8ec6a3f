//! Size cache (gust-client size_cache.rs): writes through a descriptor send their
//! size in batches, held under a grant on the file's size key (docs/DESIGN.md,
//! "Size holds"): the writing client sees every size at once, other clients too,
//! since their look at the record recalls the hold first and its answer brings the
//! size; without grants (`GUST_GRANTS=0`), other clients see it at the flush
//! points (close, fsync, the interval).

mod common;

use common::{get, op_total};
use gust_e2e::Instance;
use libc::{O_CREAT, O_RDONLY, O_WRONLY};

#[test]
fn sizes_are_sent_in_batches_and_seen_at_the_flush_points() {
    let inst = Instance::start(3);
    let (w, other) = (inst.client(), inst.client());
    let fd = w.open("/shared", O_CREAT | O_WRONLY, 0o644).unwrap();
    let sizes = |c: &gust_client::Client| op_total(c, "update_size") + op_total(c, "hold_size");
    let updates = sizes(&other);
    for i in 0..200u64 {
        w.pwrite(fd, &[7u8; 8192], i * 8192).unwrap();
    }
    // 200 writes: the first asks for the hold (with its size), the rest send none.
    let sent = sizes(&other) - updates;
    assert!(sent <= 2, "{sent} size updates for 200 writes");
    let recalled = recalls(&other);
    assert_eq!(
        other.stat("/shared").unwrap().size,
        200 * 8192,
        "another client sees every returned write's size (its stat recalls the hold)"
    );
    assert!(recalls(&other) > recalled, "the stat recalled the writer's hold");
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

/// Recalls the daemons sent so far (`gust status`'s grant counters).
fn recalls(c: &gust_client::Client) -> u64 {
    (0..c.daemon_count()).map(|d| c.daemon_metrics(d).unwrap().grants.recalls).sum()
}

/// A writer's held size and another client's truncate: the truncate takes the
/// held size back first, so the file ends at the truncate's size, not at the
/// writer's end sent after it; and the size of a write that returned before a
/// `stat` of another client is never missing from it.
#[test]
fn a_truncate_by_another_client_lands_after_the_held_size() {
    let inst = Instance::start(3);
    let (w, other) = (inst.client(), inst.client());
    let fd = w.open("/t", O_CREAT | O_WRONLY, 0o644).unwrap();
    for round in 0..20u64 {
        let end = (round + 1) * 100_000;
        w.pwrite(fd, &[1u8; 4096], end - 4096).unwrap();
        assert_eq!(other.stat("/t").unwrap().size, end, "round {round}: a returned write's size");
        other.truncate("/t", 10).unwrap();
        assert_eq!(w.stat("/t").unwrap().size, 10, "round {round}: the truncate came last");
    }
    w.close(fd).unwrap();
    assert_eq!(other.stat("/t").unwrap().size, 10);
}
