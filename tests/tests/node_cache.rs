//! The node cache (docs/DESIGN.md, "The node cache"): what one process of a node
//! read, another reads from the holder's shared memory without a request, until
//! a change, which recalls the holder's grant first; a holder killed with its
//! daemon is waited out for its lease, so nobody reads what it held after a
//! change returned.

use gust_client::Client;
use gust_e2e::{wait_until, Instance};
use std::time::Duration;

const FILES: usize = 200;

/// Writes a small file whole, as Python's `write_bytes` does: its data is kept
/// inline with its record.
fn write(c: &Client, p: &str, data: &[u8]) {
    let fd = c.open_deferred_whole(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644).unwrap();
    assert_eq!(c.write(fd, data).unwrap(), data.len());
    c.close(fd).unwrap();
}

fn content(p: &str, version: u32) -> Vec<u8> {
    format!("v{version} {p} ").into_bytes().repeat(200)
}

/// The whole file, read as a program reads it: open, read, close.
fn data(c: &Client, p: &str) -> Vec<u8> {
    let fd = c.open(p, libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let n = c.read(fd, &mut buf).unwrap();
    c.close(fd).unwrap();
    buf.truncate(n);
    buf
}

/// A new process whose lookups may use the node cache: it connects to the holder
/// once it has 32 reads to tell it of (`ls` and `cat` never do), here of /warm.
fn warmed(inst: &Instance) -> Client {
    let c = inst.client();
    for i in 0..32 {
        data(&c, &format!("/warm/w{i}"));
    }
    c
}

#[test]
fn what_one_process_read_another_reads_from_the_node_cache_until_a_change() {
    let inst = Instance::start(4);
    let w = inst.client();
    w.mkdir("/warm", 0o755).unwrap();
    w.mkdir("/data", 0o755).unwrap();
    for i in 0..32 {
        write(&w, &format!("/warm/w{i}"), b"warm");
    }
    let paths: Vec<String> = (0..FILES).map(|i| format!("/data/f{i}")).collect();
    for p in &paths {
        write(&w, p, &content(p, 1));
    }
    // One process reads them all: it tells the holder, which looks them up.
    let a = inst.client();
    for p in &paths {
        assert!(data(&a, p) == content(p, 1), "{p}: wrong contents");
    }
    // Told 32 to a message: all but the last few (still waiting in `a`).
    let told = &paths[FILES / 2];
    assert!(
        wait_until(Duration::from_secs(20), || {
            let probe = warmed(&inst);
            data(&probe, told);
            probe.node_cache_hits() > 0
        }),
        "the holder never took what a process read"
    );
    // Another process reads them without a request.
    let b = warmed(&inst);
    let (hits, rpcs) = (b.node_cache_hits(), b.rpcs_sent());
    for p in &paths {
        assert!(data(&b, p) == content(p, 1), "{p}: wrong contents");
    }
    let (hits, rpcs) = (b.node_cache_hits() - hits, b.rpcs_sent() - rpcs);
    assert!(hits >= FILES as u64 - 32, "{hits} of {FILES} from the node cache\n{}", inst.daemon_log(0));
    assert!(
        rpcs <= FILES as u64 - hits + 2,
        "{rpcs} requests for {} files the node cache did not hold",
        FILES as u64 - hits
    );

    // A change recalls the holder's grant before it is applied: the next lookup
    // anywhere finds the new contents.
    write(&w, &paths[5], &content(&paths[5], 2));
    assert!(data(&b, &paths[5]) == content(&paths[5], 2), "read what was there before the change");

    // The holder runs in daemon 0 (the node's first). Killed, its callback
    // connections end, and its grants are still waited out for their lease: a
    // change on another daemon returns only once no process may use the entry.
    let others: Vec<&String> = paths[10..].iter().filter(|p| w.record_holders(p)[0] != 0).take(20).collect();
    let mode = |p: &str| b.stat(p).unwrap().mode & 0o777;
    let hits = b.node_cache_hits();
    for p in &others {
        assert_eq!(mode(p), 0o644, "{p}");
    }
    assert!(b.node_cache_hits() > hits, "nothing was in the node cache before the kill");
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(inst.daemon_pid(0) as i32, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || inst.daemon_gone(0)));
    for p in &others {
        w.chmod(p, 0o600).unwrap();
        assert_eq!(mode(p), 0o600, "{p}: the mode the killed holder held, after the change returned");
    }
}
