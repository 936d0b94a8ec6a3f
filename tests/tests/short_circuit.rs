//! Short-circuit I/O (docs/DESIGN.md, "Short-circuit I/O"): a client process on
//! the daemons' node reads and writes their local chunk files itself, with
//! descriptors the daemons hand it, and the daemons take a file back before they
//! serve anyone's request for its chunks. Real daemons, real files; the daemons'
//! byte counters say which bytes crossed a socket.

mod common;

use common::{flip, local_file, pattern};
use gust_client::{Client, ClientOptions, Errno};
use gust_e2e::{wait_until, Instance};
use std::os::unix::fs::FileExt;
use std::time::Duration;

const MIB: usize = 1 << 20;

/// Bytes the daemons wrote and read for requests, summed over `n` daemons.
fn through_daemons(c: &Client, n: u32) -> (u64, u64) {
    (0..n).map(|d| c.daemon_stats(d).unwrap()).fold((0, 0), |(w, r), s| (w + s.bytes_written, r + s.bytes_read))
}

fn no_short_circuit() -> ClientOptions {
    ClientOptions { short_circuit: false, ..Default::default() }
}

fn write_all(c: &Client, fd: i32, data: &[u8], at: u64) {
    for (i, piece) in data.chunks(MIB).enumerate() {
        assert_eq!(c.pwrite(fd, piece, at + (i * MIB) as u64).unwrap(), piece.len());
    }
}

fn read_all(c: &Client, fd: i32, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    for (i, piece) in out.chunks_mut(MIB).enumerate() {
        assert_eq!(c.pread(fd, piece, (i * MIB) as u64).unwrap(), piece.len());
    }
    out
}

/// Writes 1 MiB at `at` through `fd` until one such write reaches no daemon as a
/// request (the daemon handed the file over again), within 20 s.
fn wait_for_short_circuit(c: &Client, fd: i32, n: u32, piece: &[u8], at: u64) {
    let handed = wait_until(Duration::from_secs(20), || {
        let before = through_daemons(c, n).0;
        assert_eq!(c.pwrite(fd, piece, at).unwrap(), piece.len());
        through_daemons(c, n).0 == before
    });
    assert!(handed, "the daemon never handed the file back over");
}

#[test]
fn a_process_on_the_daemons_node_reads_and_writes_their_local_files_itself() {
    let inst = Instance::start(2);
    let c = inst.client();
    let data = pattern(1, 32 * MIB);
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    write_all(&c, fd, &data, 0);
    c.fsync(fd).unwrap();
    let (written, _) = through_daemons(&c, 2);
    // The first transfers through a descriptor are requests (`ASK_AFTER`), the
    // rest go straight into the local files.
    assert!(written < 8 * MIB as u64, "{written} of 32 MiB went through the daemons as requests");
    assert!(read_all(&c, fd, data.len()) == data, "read back through the local files");
    let (_, read) = through_daemons(&c, 2);
    assert!(read < 4 * MIB as u64, "{read} bytes read through the daemons");
    assert_eq!(c.stat("/f").unwrap().size, data.len() as u64, "sizes still go to the metadata daemon");

    // Another process, all requests: the daemons take the files back first and
    // serve what the first one wrote.
    let other = inst.client_with(no_short_circuit());
    let ofd = other.open("/f", libc::O_RDONLY, 0).unwrap();
    assert!(read_all(&other, ofd, data.len()) == data);
    let (_, read_after) = through_daemons(&c, 2);
    assert!(read_after - read >= data.len() as u64, "every byte through the daemons for the other process");
    other.close(ofd).unwrap();
    c.close(fd).unwrap();
}

#[test]
fn a_file_is_taken_back_before_a_truncate_or_an_unlink_and_never_written_after() {
    let inst = Instance::start(1);
    let c = inst.client();
    let other = inst.client_with(no_short_circuit());
    let data = pattern(2, 8 * MIB);
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    write_all(&c, fd, &data, 0);
    wait_for_short_circuit(&c, fd, 1, &data[..MIB], 0);
    // Its size where other processes see it (sizes are batched: size_cache.rs).
    c.fsync(fd).unwrap();

    // Truncated by another process while handed: the holder's next write lands
    // in the file the daemon serves, after the truncate.
    other.truncate("/f", MIB as u64).unwrap();
    let late = pattern(3, MIB);
    assert_eq!(c.pwrite(fd, &late, 4 * MIB as u64).unwrap(), MIB);
    c.fsync(fd).unwrap();
    let ofd = other.open("/f", libc::O_RDONLY, 0).unwrap();
    let got = read_all(&other, ofd, 5 * MIB);
    other.close(ofd).unwrap();
    assert!(got[..MIB] == data[..MIB], "what the truncate kept");
    assert!(got[MIB..4 * MIB].iter().all(|&b| b == 0), "the hole the truncate left");
    assert!(got[4 * MIB..] == late[..], "the holder's write after the truncate");

    // Handed again, then unlinked by the other process: the holder's write
    // through its open descriptor goes where the daemon keeps the file's chunks
    // (a descriptor of the removed local file would write into nothing anyone
    // reads), and reads back.
    wait_for_short_circuit(&c, fd, 1, &late, 4 * MIB as u64);
    let id = c.fstat(fd).unwrap().file_id;
    other.unlink("/f").unwrap();
    assert!(!local_file(&inst, 0, id).exists(), "the unlink removed the local file");
    let after = pattern(4, MIB);
    assert_eq!(c.pwrite(fd, &after, 0).unwrap(), MIB);
    let mut on_disk = vec![0u8; MIB];
    std::fs::File::open(local_file(&inst, 0, id)).unwrap().read_exact_at(&mut on_disk, 0).unwrap();
    assert!(on_disk == after, "the write after the unlink is in the daemon's local file");
    // The close reports the removed path (its batched size has nowhere to go:
    // docs/SEMANTICS.md, size_cache.rs).
    assert_eq!(c.close(fd).unwrap_err(), Errno(libc::ENOENT));
}

#[test]
fn a_corrupt_block_of_a_handed_file_is_found_by_the_daemon_and_never_served() {
    let inst = Instance::start(1);
    let c = inst.client();
    let data = pattern(5, 8 * MIB);
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    write_all(&c, fd, &data, 0);
    wait_for_short_circuit(&c, fd, 1, &data[..MIB], 0);
    let id = c.fstat(fd).unwrap().file_id;
    let at = 3 * MIB as u64 + 1000;
    flip(&local_file(&inst, 0, id), at);

    let mut buf = vec![0u8; MIB];
    assert_eq!(c.pread(fd, &mut buf, 3 * MIB as u64).unwrap_err(), Errno(libc::EIO));
    let why = c.last_transport_error().unwrap_or_default();
    assert!(why.contains("daemon 0") && why.contains("corrupt"), "{why}");
    assert!(inst.daemon_log(0).contains(&format!("{id:032x}")), "the daemon's log names the file");
    // The blocks around it are served.
    assert_eq!(c.pread(fd, &mut buf, 0).unwrap(), MIB);
    assert!(buf == data[..MIB]);
    c.close(fd).unwrap();
}

/// Descriptors of this process, counted in /proc.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn local_files_go_back_at_close_and_do_not_crowd_the_descriptor_table() {
    let inst = Instance::start(1);
    let c = inst.client();
    let piece = pattern(6, 64 << 10);
    // The first file brings the callback connection and the socket.
    let touch = |name: &str| {
        let fd = c.open(name, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        for i in 0..16u64 {
            assert_eq!(c.pwrite(fd, &piece, i * piece.len() as u64).unwrap(), piece.len());
        }
        let mut back = vec![0u8; piece.len()];
        assert_eq!(c.pread(fd, &mut back, 0).unwrap(), piece.len());
        assert!(back == piece);
        c.close(fd).unwrap();
    };
    touch("/first");
    let written = through_daemons(&c, 1).0;
    assert!(written < 16 * piece.len() as u64 / 2, "the first file went short-circuit: {written} bytes as requests");
    let before = open_descriptors();
    for i in 0..40 {
        touch(&format!("/f{i}"));
    }
    let after = open_descriptors();
    assert!(after < before + 10, "{before} descriptors before 40 files, {after} after");
    // And they did go short-circuit (the first `ASK_AFTER` writes of each are
    // requests).
    let more = through_daemons(&c, 1).0 - written;
    assert!(more < 40 * 16 * piece.len() as u64 / 2, "{more} bytes of 40 files as requests");
}
