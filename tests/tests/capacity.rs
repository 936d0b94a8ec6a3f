//! Capacity-aware placement (`gust start --placement capacity`): daemons of unequal
//! capacities fill in proportion, and a full daemon's chunks go to the next daemon
//! of their order instead of failing the write. Capacities are declared
//! (`--declare-capacity`): a test cannot make disks of different sizes, and a daemon
//! with a declared capacity refuses writes past it with ENOSPC as a full disk does.

use gust_client::{Client, Errno};
use gust_e2e::Instance;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const FILE_BYTES: usize = 8 << 20;
/// Capacities 1:1:2:4, 256 MiB in all.
const CAPACITIES_MIB: [u64; 4] = [32, 32, 64, 128];
/// The chunk size the instance runs with.
const CHUNK_BYTES: u64 = 4096;

fn start(caps_mib: &[u64]) -> Instance {
    let caps: Vec<String> = caps_mib.iter().map(|c| format!("{c}MiB")).collect();
    Instance::start_with(
        caps_mib.len() as u32,
        &["--chunk-size", &CHUNK_BYTES.to_string(), "--placement", "capacity", "--declare-capacity", &caps.join(",")],
    )
}

/// File i's bytes: a pattern that differs per file and per position.
fn content(i: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
    (0..FILE_BYTES)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write_file(c: &Client, p: &str, data: &[u8]) -> Result<(), Errno> {
    let fd = c.open(p, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644)?;
    let mut r = Ok(());
    for (k, piece) in data.chunks(MIB as usize).enumerate() {
        r = c.pwrite(fd, piece, k as u64 * MIB).map(|_| ());
        if r.is_err() {
            break;
        }
    }
    c.close(fd)?;
    r
}

fn read_file(c: &Client, p: &str) -> Vec<u8> {
    let fd = c.open(p, libc::O_RDONLY, 0).unwrap();
    let mut b = vec![0u8; FILE_BYTES + 1];
    let n = c.pread(fd, &mut b, 0).unwrap();
    c.close(fd).unwrap();
    b.truncate(n);
    b
}

/// (declared capacity, bytes held) of each daemon's chunk store.
fn usage(c: &Client) -> Vec<(u64, u64)> {
    (0..c.daemon_count())
        .map(|d| {
            let s = c.daemon_statfs(d).unwrap();
            (s.total_bytes, s.total_bytes - s.free_bytes)
        })
        .collect()
}

fn used(c: &Client) -> Vec<u64> {
    usage(c).into_iter().map(|u| u.1).collect()
}

#[test]
fn daemons_fill_in_proportion_to_capacity() {
    let inst = start(&CAPACITIES_MIB);
    let h = inst.hosts_file();
    assert_eq!(h.placement, gust_hosts::Placement::Capacity);
    let caps: Vec<u64> = h.daemons.iter().map(|d| d.capacity_bytes.unwrap()).collect();
    assert_eq!(caps, CAPACITIES_MIB.map(|c| c * MIB).to_vec(), "capacities registered in the hosts file");
    let c = inst.client();
    let total: u64 = CAPACITIES_MIB.iter().sum::<u64>() * MIB;
    assert_eq!(usage(&c).iter().map(|u| u.0).collect::<Vec<_>>(), caps, "daemons report their declared capacity");

    // Half full: every daemon holds its capacity's share of the bytes, within what
    // chance allows. Each chunk picks its daemon independently (weighted rendezvous
    // hashing), so a daemon's count of the n chunks is binomial with its share p:
    // off by sqrt((1 - p) / (n p)) of its share in one sigma. That is 1.5% for the
    // smallest daemons (p = 1/8, n = 32,768), 0.6% for the largest; the bound is five
    // of them (7.3%, 2.8%), not to be met by chance in millions of runs. Placement
    // that ignored capacity would put the smallest daemons 100% off.
    let files = (total / 2) as usize / FILE_BYTES;
    for i in 0..files {
        write_file(&c, &format!("/f{i}"), &content(i)).unwrap();
    }
    let u = used(&c);
    let sum: u64 = u.iter().sum();
    let chunks = (files * FILE_BYTES) as f64 / CHUNK_BYTES as f64;
    for d in 0..4 {
        let p = CAPACITIES_MIB[d] as f64 / (total / MIB) as f64;
        let want = sum as f64 * p;
        let off = (u[d] as f64 - want).abs() / want;
        let bound = 5.0 * ((1.0 - p) / (chunks * p)).sqrt();
        assert!(
            off < bound,
            "daemon {d} holds {} bytes, its share is {want:.0} ({:.1}% off, bound {:.1}%); all: {u:?}",
            u[d],
            off * 100.0,
            bound * 100.0
        );
    }
    for i in [0, files - 1] {
        assert!(read_file(&c, &format!("/f{i}")) == content(i), "file {i} reads back different bytes");
    }
    // `gust status` names the placement.
    let out = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("placement capacity"), "{text}");
}

/// A daemon whose disk is smaller than its weight says (here: restarted with a
/// quarter of the capacity it registered, as a node already three-quarters full
/// would be) fills first; its chunks then go to their next daemons, writes go on
/// until the instance is full, and everything reads back.
#[test]
fn a_full_daemon_spills_to_the_next_and_loses_nothing() {
    let inst = start(&[32, 32, 32, 32]);
    let pid = inst.daemon_pid(0) as i32;
    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(gust_e2e::wait_until(Duration::from_secs(10), || unsafe { libc::kill(pid, 0) } != 0
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z"))));
    let addr = inst.hosts_file().daemons[0].tcp_addr();
    inst.restart_daemon_with(0, &addr, &["--capacity", "8MiB"]);
    let c = inst.client();
    assert!(gust_e2e::wait_until(Duration::from_secs(20), || c.ping(0).is_ok()), "daemon 0 did not come back");
    assert_eq!(inst.hosts_file().daemons[0].capacity_bytes, Some(32 * MIB), "placement keeps the registered weight");
    let real: u64 = usage(&c).iter().map(|u| u.0).sum();
    assert_eq!(real, (8 + 3 * 32) * MIB);

    // Without spilling, daemon 0 (a quarter of the chunks) would refuse writes from
    // about 32 MiB on.
    let mut written = 0;
    loop {
        match write_file(&c, &format!("/f{written}"), &content(written)) {
            Ok(()) => written += 1,
            Err(Errno(libc::ENOSPC)) => break,
            Err(e) => panic!("file {written}: {e} (used {:?})", used(&c)),
        }
        assert!(written * FILE_BYTES < 2 * real as usize, "never full? used {:?}", used(&c));
    }
    let u = used(&c);
    assert!(u[0] > 7 * MIB && u[0] <= 8 * MIB + 64 * 1024, "daemon 0 is full at its real capacity: {u:?}");
    let fill = u.iter().sum::<u64>() as f64 / real as f64;
    assert!(fill > 0.95, "only {:.1}% of the capacity was used before ENOSPC: {u:?}", fill * 100.0);
    assert!(written * FILE_BYTES > 80 * MIB as usize, "{written} files written");

    // Everything acknowledged reads back, spilled chunks included.
    for i in 0..written {
        assert!(read_file(&c, &format!("/f{i}")) == content(i), "file {i} reads back different bytes");
    }

    // A hole reads as zeros (the reader asks the chunk's next daemons and finds
    // nothing) and costs no error.
    c.unlink("/f0").unwrap();
    let fd = c.open("/sparse", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.pwrite(fd, b"head", 0).unwrap();
    c.pwrite(fd, b"tail", 3 * MIB).unwrap();
    let mut b = vec![1u8; 3 * MIB as usize + 4];
    assert_eq!(c.pread(fd, &mut b, 0).unwrap(), b.len());
    assert_eq!(&b[..4], b"head");
    assert!(b[4..3 * MIB as usize].iter().all(|x| *x == 0), "the hole reads as zeros");
    assert_eq!(&b[3 * MIB as usize..], b"tail");
    c.close(fd).unwrap();
    c.unlink("/sparse").unwrap();

    // Removing every file frees every daemon: spilled chunks are found and removed.
    // (The file whose write failed holds the chunks that fitted: it goes too.)
    for i in 1..=written {
        c.unlink(&format!("/f{i}")).unwrap();
    }
    let u = used(&c);
    assert!(u.iter().all(|b| *b < MIB), "chunks left behind after unlink: {u:?}");
}

/// Local placement (gust-placement's `local`): a file's chunks go to its home, a
/// daemon of this node, until it is full; then each chunk goes to its wide-striped
/// daemon, and everything reads back. Without the spill the write fails with ENOSPC
/// once the home is full.
#[test]
fn a_full_home_spills_to_wide_striping() {
    // Every daemon 256 KiB; a file of 512 KiB in 4 KiB chunks: half fits its home.
    let inst = Instance::start_with(
        3,
        &[
            "--chunk-size",
            &CHUNK_BYTES.to_string(),
            "--placement",
            "local",
            "--declare-capacity",
            "256KiB,256KiB,256KiB",
        ],
    );
    let c = inst.client();
    let data: Vec<u8> = (0..512 * 1024u32).map(|i| (i * 13 % 251) as u8).collect();
    let fd = c.open("/ckpt", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    for (k, piece) in data.chunks(64 * 1024).enumerate() {
        c.pwrite(fd, piece, k as u64 * 64 * 1024).unwrap_or_else(|e| panic!("write {k}: {e}"));
    }
    c.close(fd).unwrap();
    let fd = c.open("/ckpt", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len() + 1];
    let n = c.pread(fd, &mut back, 0).unwrap();
    c.close(fd).unwrap();
    assert!(n == data.len() && back[..n] == data[..], "the file reads back different bytes");
    let held = used(&c);
    let full = held.iter().filter(|&&b| b >= 250 * 1024).count();
    assert_eq!(full, 1, "one daemon (the home) is full: {held:?}");
    assert!(held.iter().filter(|&&b| b > 0).count() >= 2, "the rest spilled to other daemons: {held:?}");
    // More than the room left anywhere: ENOSPC, and the first file is untouched.
    let fd = c.open("/more", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert_eq!(c.pwrite(fd, &[7u8; 300 * 1024], 0), Err(Errno(libc::ENOSPC)));
    let _ = c.close(fd);
    let fd = c.open("/ckpt", libc::O_RDONLY, 0).unwrap();
    let n = c.pread(fd, &mut back, 0).unwrap();
    c.close(fd).unwrap();
    assert!(n == data.len() && back[..n] == data[..], "the file changed after a refused write");
}
