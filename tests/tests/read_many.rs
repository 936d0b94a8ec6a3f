//! Whole files by the batch (gust-client read_many.rs): `read_many_into` answers
//! every file as `read_whole_into` answers it alone, with one request per daemon
//! for the files it holds (at most `READ_MANY_ENTRIES_MAX` each), over batches
//! larger than what it keeps in flight, and a lost daemon fails only the files
//! whose records it holds.

mod common;

use gust_client::{Client, Errno, Kind, WholeFile};
use gust_e2e::Instance;
use libc::{O_CREAT, O_TRUNC, O_WRONLY};

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7)) as u8).collect()
}

/// Creates `p` with `data` the way the preload library does (deferred create:
/// small files inline).
fn put_small(c: &Client, p: &str, data: &[u8]) {
    let fd = c.open_deferred_whole(p, O_CREAT | O_WRONLY | O_TRUNC, 0o644).unwrap();
    assert_eq!(c.write(fd, data).unwrap(), data.len());
    c.close(fd).unwrap();
}

/// What one entry came to: the placed bytes (data, then zeros to the size), the
/// record of a file left to the ordinary path, or the error.
#[derive(Debug, PartialEq)]
enum Got {
    Data(Vec<u8>),
    Other(Option<(Kind, u64)>),
    Failed(Errno),
}

fn got(answer: gust_client::Result<WholeFile>, buf: Vec<u8>) -> Got {
    match answer {
        Ok(WholeFile::Placed { record, len }) => {
            assert_eq!(buf.len() as u64, record.size, "the placer's buffer is the size");
            let mut b = buf;
            b[len..].fill(0);
            Got::Data(b)
        }
        Ok(WholeFile::Other(r)) => Got::Other(r.map(|r| (r.kind, r.size))),
        Err(e) => Got::Failed(e),
    }
}

fn read_many(c: &Client, paths: &[&str]) -> Vec<Got> {
    let mut bufs: Vec<Vec<u8>> = paths.iter().map(|_| Vec::new()).collect();
    let bufs_ptr = bufs.as_mut_ptr();
    let answers = c.read_many_into(paths, &mut |i, r| {
        // SAFETY (test): every entry's buffer is lent once, for its own reply, and
        // `bufs` is not touched otherwise until the call returns.
        let b = unsafe { &mut *bufs_ptr.add(i) };
        *b = vec![0xAA; r.size as usize];
        Some(unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr(), b.len()) })
    });
    assert_eq!(answers.len(), paths.len());
    answers.into_iter().zip(bufs).map(|(a, b)| got(a, b)).collect()
}

fn read_one(c: &Client, path: &str) -> Got {
    let mut buf = Vec::new();
    let a = c.read_whole_into(path, &mut |r| {
        buf = vec![0xAA; r.size as usize];
        Some(unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len()) })
    });
    got(a, buf)
}

#[test]
fn read_many_answers_each_file_as_reading_it_alone_one_request_per_daemon() {
    let inst = Instance::start(4);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    // More files than a batch keeps in flight, of sizes from empty to 120 KiB.
    let n = gust_client::READ_MANY_IN_FLIGHT * 2 + 13;
    let mut want = Vec::new();
    for i in 0..n {
        let data = pattern((i * 997) % (120 << 10), i);
        put_small(&c, &format!("/d/f{i}"), &data);
        want.push(data);
    }
    // Not inline: a file written through an ordinary open; grown by truncate; a
    // directory; a missing path; a path through a file.
    let fd = c.open("/d/chunked", O_CREAT | O_WRONLY, 0o644).unwrap();
    c.write(fd, b"in chunks").unwrap();
    c.close(fd).unwrap();
    c.truncate("/d/f5", 200 << 10).unwrap();
    let mut paths: Vec<String> = (0..n).map(|i| format!("/d/f{i}")).collect();
    for (at, extra) in [(3, "/d/chunked"), (40, "/d"), (70, "/d/missing"), (90, "/d/f1/below"), (100, "/d/f7")] {
        paths.insert(at, extra.to_string());
    }
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();

    // Per group in flight, one request per daemon for each READ_MANY_ENTRIES_MAX
    // files it holds (a path that does not normalize is sent nowhere; there is none).
    let mut want_requests = 0;
    for group in paths.chunks(gust_client::READ_MANY_IN_FLIGHT) {
        let mut per_daemon = std::collections::BTreeMap::<u32, usize>::new();
        for p in group {
            *per_daemon.entry(c.metadata_daemon(p)).or_default() += 1;
        }
        want_requests += per_daemon.values().map(|n| n.div_ceil(gust_proto::READ_MANY_ENTRIES_MAX)).sum::<usize>();
    }
    assert!(want_requests < paths.len() / 16, "{want_requests} requests for {} files", paths.len());
    // Another process, which holds no grant on what `c` wrote, and does not look
    // in the node cache (its holder would take what it reads).
    let r = inst.client_with(gust_client::ClientOptions { node_cache: false, ..Default::default() });
    let sent = r.rpcs_sent();
    let many = read_many(&r, &paths);
    assert_eq!(r.rpcs_sent() - sent, want_requests as u64, "one request per daemon and READ_MANY_ENTRIES_MAX files");

    for (p, g) in paths.iter().zip(&many) {
        assert_eq!(*g, read_one(&r, p), "{p}");
    }
    // The writer holds grants on what it wrote, with the data: the same answers,
    // fewer requests.
    let sent = c.rpcs_sent();
    assert_eq!(read_many(&c, &paths), many);
    assert!(c.rpcs_sent() - sent < want_requests as u64, "the writer's grants answered none of its files");
    // And what they are, not only that both ways agree.
    for (p, g) in paths.iter().zip(&many) {
        if let Some(i) = p.strip_prefix("/d/f").and_then(|i| i.parse::<usize>().ok()) {
            let mut w = want[i].clone();
            if i == 5 {
                w.resize(200 << 10, 0);
            }
            if w.is_empty() {
                // An empty file has no inline data: left to the ordinary path.
                assert_eq!(*g, Got::Other(Some((Kind::File, 0))), "{p}");
            } else {
                assert!(*g == Got::Data(w), "{p}: wrong data");
            }
        }
    }
    let at = |p: &str| &many[paths.iter().position(|q| *q == p).unwrap()];
    assert_eq!(*at("/d/chunked"), Got::Other(Some((Kind::File, 9))));
    assert!(matches!(at("/d"), Got::Other(Some((Kind::Dir, _)))));
    assert_eq!(*at("/d/missing"), Got::Failed(Errno(libc::ENOENT)));
    assert!(matches!(at("/d/f1/below"), Got::Failed(Errno(libc::ENOTDIR | libc::ENOENT))));
    assert_eq!(read_many(&c, &[]), Vec::new());
}

#[test]
fn a_lost_daemon_fails_only_the_files_it_holds_the_records_of() {
    let inst = Instance::start(4);
    let c = inst.client();
    let paths: Vec<String> = (0..48).map(|i| format!("/f{i}")).collect();
    for (i, p) in paths.iter().enumerate() {
        put_small(&c, p, &pattern(1000 + i, i));
    }
    const VICTIM: u32 = 2;
    let lost: Vec<bool> = paths.iter().map(|p| c.metadata_daemon(p) == VICTIM).collect();
    assert!(lost.iter().any(|&l| l) && lost.iter().any(|&l| !l));
    let pid = inst.daemon_pid(VICTIM);
    // SAFETY: a signal to a daemon process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let dead = || match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name: gone, or a zombie.
        Ok(stat) => stat.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z"),
        Err(_) => true,
    };
    assert!(gust_e2e::wait_until(std::time::Duration::from_secs(5), dead), "daemon did not die");
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    // Read by another process: the writer holds grants on what it wrote, and
    // answers from them until it notices the daemon is gone.
    let r = inst.client_with(gust_client::ClientOptions { node_cache: false, ..Default::default() });
    for (i, (g, lost)) in read_many(&r, &refs).into_iter().zip(&lost).enumerate() {
        if *lost {
            assert_eq!(g, Got::Failed(Errno(libc::EIO)), "{}", paths[i]);
        } else {
            assert_eq!(g, Got::Data(pattern(1000 + i, i)), "{}", paths[i]);
        }
    }
}
