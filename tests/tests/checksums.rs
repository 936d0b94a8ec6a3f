//! Checksums of chunk data (docs/DESIGN.md, "Checksums"): a bit flipped in a
//! daemon's local chunk file, as a failing disk flips it, is never served. Without
//! a copy the read fails with EIO, and the daemon's log names the file, the chunk
//! and the bytes; with two replicas the read answers the right bytes from the other
//! copy, and the corrupt copy is rewritten from it. Bytes corrupted on their way
//! back to the client (a proxy flips them) are caught where they arrive. Real
//! daemons, real files.

mod common;

use common::{flip, local_file, try_get, try_put};
use gust_e2e::wire::{hosts_through, marked, CorruptingProxy};
use gust_e2e::{wait_until, Instance};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

fn byte_at(path: &Path, at: u64) -> u8 {
    let mut b = [0u8];
    std::fs::File::open(path).unwrap().read_exact_at(&mut b, at).unwrap();
    b[0]
}

/// 1 MiB of bytes no two 4 KiB blocks of which are alike (too large to be inline).
fn data() -> Vec<u8> {
    (0..1u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

#[test]
fn a_flipped_bit_without_a_copy_fails_the_read_and_is_logged() {
    let inst = Instance::start_with(1, &["--chunk-size", "256k"]);
    let c = inst.client();
    let data = data();
    try_put(&c, "/f", &data).unwrap();
    let id = c.stat("/f").unwrap().file_id;
    let at = 600_000u64; // chunk 2 (256 KiB chunks), block 146
    flip(&local_file(&inst, 0, id), at);

    assert_eq!(try_get(&c, "/f", data.len()).unwrap_err(), gust_client::Errno(libc::EIO), "the whole file");
    let why = c.last_transport_error().unwrap_or_default();
    assert!(why.contains("daemon 0") && why.contains("corrupt"), "{why}");
    // Bytes of other blocks are served; the corrupt block is not, whatever part
    // of it is asked for.
    let fd = c.open("/f", libc::O_RDONLY, 0).unwrap();
    let mut b = vec![0u8; 500_000];
    assert_eq!(c.pread(fd, &mut b, 0).unwrap(), b.len());
    assert!(b == data[..500_000]);
    let mut b = vec![0u8; 10];
    assert_eq!(c.pread(fd, &mut b, at - 3).unwrap_err(), gust_client::Errno(libc::EIO));
    assert_eq!(c.pread(fd, &mut b, at / 4096 * 4096 + 4090).unwrap_err(), gust_client::Errno(libc::EIO));
    c.close(fd).unwrap();
    let log = inst.daemon_log(0);
    assert!(
        log.contains("checksum mismatch")
            && log.contains(&format!("{id:032x}"))
            && log.contains("chunk 2")
            && log.contains(&format!("bytes {}-{}", at / 4096 * 4096, at / 4096 * 4096 + 4096)),
        "the daemon's log names the file, chunk and bytes:\n{log}"
    );
    // Rewriting the block (a whole-block write) makes the file whole again.
    let fd = c.open("/f", libc::O_WRONLY, 0).unwrap();
    let s = (at / 4096 * 4096) as usize;
    assert_eq!(c.pwrite(fd, &data[s..s + 4096], s as u64).unwrap(), 4096);
    c.close(fd).unwrap();
    assert!(try_get(&c, "/f", data.len()).unwrap() == data);
}

#[test]
fn a_flipped_bit_with_two_replicas_is_read_from_the_copy_and_repaired() {
    let inst = Instance::start_with(3, &["--chunk-size", "64k", "--replicas", "2"]);
    let c = inst.client();
    let data = data();
    try_put(&c, "/f", &data).unwrap();
    let id = c.stat("/f").unwrap().file_id;
    // Chunk 5's first copy: the member a read asks first.
    let at = 5 * 65_536 + 1234u64;
    let holders = c.chunk_holders(id, 5);
    let (first, second) = (holders[0], holders[1]);
    let bad = local_file(&inst, first, id);
    let was = flip(&bad, at);

    assert!(try_get(&c, "/f", data.len()).unwrap() == data, "the whole file, from the good copy where needed");
    assert!(
        wait_until(Duration::from_secs(10), || byte_at(&bad, at) == was),
        "daemon {first}'s copy was not rewritten from daemon {second}"
    );
    let log = inst.daemon_log(first);
    assert!(log.contains("checksum mismatch") && log.contains("rewritten from a copy"), "{log}");
    // The copy that was corrupt serves again on its own: with the other member
    // skipped, every byte reads back.
    c.skip_daemon(second);
    assert!(try_get(&c, "/f", data.len()).unwrap() == data, "daemon {first}'s repaired copy");
}

/// `gust scrub` reads every chunk: it finds a flipped bit nobody read, names the
/// file, chunk and bytes (JSON), and with two replicas rewrites the copy from the
/// other one; a second scrub finds nothing. Without `--no-repair`'s report, it
/// exits 1 only while something corrupt is left.
#[test]
fn gust_scrub_finds_and_repairs_what_no_read_met() {
    let inst = Instance::start_with(3, &["--chunk-size", "64k", "--replicas", "2"]);
    let c = inst.client();
    let data = data();
    try_put(&c, "/f", &data).unwrap();
    try_put(&c, "/g", &data[..300_000]).unwrap();
    let id = c.stat("/f").unwrap().file_id;
    let at = 9 * 65_536 + 77u64;
    let second = c.chunk_holders(id, 9)[1]; // a copy a read does not ask first
    let bad = local_file(&inst, second, id);
    let was = flip(&bad, at);

    let json = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)))
    };
    let out = inst.gust(&["scrub", "--json", "--no-repair"]);
    assert!(!out.status.success(), "a corrupt range is left: exit 1");
    let r = json(&out);
    let found = r["corrupt"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{r}");
    assert_eq!(found[0]["daemon"], second);
    assert_eq!(found[0]["file_id"], format!("{id:032x}"));
    assert_eq!(found[0]["paths"], serde_json::json!(["/f"]));
    assert_eq!(found[0]["chunk"], 9);
    assert_eq!(found[0]["offset"], at / 4096 * 4096);
    assert_eq!(found[0]["repaired"], false);
    assert!(r["bytes"].as_u64().unwrap() >= 2 * (data.len() as u64 + 300_000), "every copy read: {r}");
    assert_eq!(byte_at(&bad, at), was ^ 0x04, "--no-repair leaves it");

    let out = inst.gust(&["scrub", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = json(&out);
    assert_eq!(r["corrupt"][0]["repaired"], true, "{r}");
    assert_eq!(byte_at(&bad, at), was, "rewritten from the other copy");
    let out = inst.gust(&["scrub", "--json"]);
    assert!(out.status.success() && json(&out)["corrupt"].as_array().unwrap().is_empty());
    // Stripes are for erasure codes.
    let out = inst.gust(&["scrub", "--stripes"]);
    assert!(!out.status.success() && text(&out.stderr).contains("keeps copies, not erasure codes"));
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A client of `inst` whose connections to the daemons go through `proxies`
/// (gust-e2e's wire.rs; by daemon id, None: straight), over TCP.
fn client_through(inst: &Instance, proxies: &[Option<&CorruptingProxy>]) -> gust_client::Client {
    let hosts = hosts_through(&inst.hosts, proxies);
    let o = gust_client::ClientOptions { rpc_timeout: Duration::from_secs(5), force_tcp: true, ..Default::default() };
    gust_client::Client::open_instance(&hosts, o).unwrap()
}

/// Bytes flipped on their way back from the daemon (it verified them before they
/// left) are caught where they arrive: a read asks once more and gets them right;
/// a way that corrupts every time fails the read with EIO and says why, never
/// with the bytes; with two replicas the read goes to the other member.
#[test]
fn bytes_corrupted_on_the_way_back_are_never_served() {
    let inst = Instance::start_with(2, &["--chunk-size", "64k", "--replicas", "2"]);
    let data = marked(600_000);
    try_put(&inst.client(), "/f", &data).unwrap();
    let id = inst.client().stat("/f").unwrap().file_id;

    // Once: the second asking is intact.
    let once = CorruptingProxy::start(&inst.hosts_file().daemons[0].tcp_addr(), 1);
    let other = CorruptingProxy::start(&inst.hosts_file().daemons[1].tcp_addr(), 1);
    let c = client_through(&inst, &[Some(&once), Some(&other)]);
    assert!(try_get(&c, "/f", data.len()).unwrap() == data);
    assert_eq!(once.flipped.load(Ordering::SeqCst) + other.flipped.load(Ordering::SeqCst), 2, "both corrupted once");

    // Always, on the way from both members: EIO, and the last error says why.
    let always: Vec<CorruptingProxy> =
        inst.hosts_file().daemons.iter().map(|d| CorruptingProxy::start(&d.tcp_addr(), usize::MAX)).collect();
    let c = client_through(&inst, &[Some(&always[0]), Some(&always[1])]);
    assert_eq!(try_get(&c, "/f", data.len()).unwrap_err(), gust_client::Errno(libc::EIO));
    let why = c.last_transport_error().unwrap_or_default();
    assert!(why.contains("corrupted on the way back") && why.contains(&format!("{id:032x}")), "{why}");

    // Always, from one member only: every chunk read from the other.
    let c = client_through(&inst, &[Some(&always[0]), None]);
    assert!(try_get(&c, "/f", data.len()).unwrap() == data, "read from the member whose way is intact");
    // Nothing was wrong on the daemons: a straight client reads the same bytes
    // from the member whose answers were corrupted, and scrub finds nothing.
    let straight = inst.client();
    straight.skip_daemon(1);
    assert!(try_get(&straight, "/f", data.len()).unwrap() == data);
    let out = inst.gust(&["scrub", "--json", "--no-repair"]);
    assert!(out.status.success(), "{}", text(&out.stdout));
}
