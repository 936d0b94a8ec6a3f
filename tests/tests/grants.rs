//! Grants: a client caches what no other client is changing, and a change by any
//! other client is seen by every operation that starts after it returned.

mod common;

use gust_e2e::Instance;

/// A process that looked up a file enough answers its stats from memory.
#[test]
fn stats_of_an_unchanged_file_need_no_request() {
    let inst = Instance::start(2);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    for i in 0..20 {
        let fd = c.open(&format!("/d/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap();
    }
    for i in 0..20 {
        c.stat(&format!("/d/f{i}")).unwrap();
    }
    let sent = c.rpcs_sent();
    for _ in 0..10 {
        for i in 0..20 {
            c.stat(&format!("/d/f{i}")).unwrap();
        }
    }
    eprintln!("granted {} sent {}", c.granted_records(), c.rpcs_sent() - sent);
    assert!(c.rpcs_sent() - sent < 20, "200 stats sent {} requests", c.rpcs_sent() - sent);
}
