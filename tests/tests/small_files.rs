//! Small files inline (gust-client inline.rs, daemon inline.rs): a small file created,
//! written and closed is one request, opened and read is one, and its data survives
//! everything a file goes through (growth past the bound, writers, truncate, rename
//! of it and of its directory, unlink), through the client core and through the
//! LD_PRELOAD library running real programs.

mod common;

use common::{get, op_total};
use gust_client::{Client, INLINE_BYTES_MAX};
use gust_e2e::{gust_bin, Instance};
use libc::{O_APPEND, O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
use std::process::Command;

/// Creates `p` with `data` in one request (a create deferred to the close of the
/// same call, as Python's `write_bytes`).
fn put_small(c: &Client, p: &str, data: &[u8]) {
    let fd = c.open_deferred_whole(p, O_CREAT | O_WRONLY | O_TRUNC, 0o644).unwrap();
    assert_eq!(c.write(fd, data).unwrap(), data.len());
    c.close(fd).unwrap();
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn create_write_close_and_open_read_close_are_one_request_each() {
    let inst = Instance::start(4);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    for (i, len) in [1usize, 4096, INLINE_BYTES_MAX].into_iter().enumerate() {
        let p = format!("/d/f{i}");
        let data = pattern(len, i as u8);
        let writes = op_total(&c, "write");
        let sent = c.rpcs_sent();
        put_small(&c, &p, &data);
        assert_eq!(c.rpcs_sent() - sent, 1, "create + write + close of {len} bytes");
        assert_eq!(op_total(&c, "write"), writes, "no chunk write for {len} bytes");
        let sent = c.rpcs_sent();
        let fd = c.open(&p, O_RDONLY, 0).unwrap();
        let mut buf = vec![0u8; len + 100];
        assert_eq!(c.read(fd, &mut buf).unwrap(), len);
        assert_eq!(c.read(fd, &mut buf).unwrap(), 0, "end of file");
        c.close(fd).unwrap();
        assert_eq!(c.rpcs_sent() - sent, 1, "open + read + close of {len} bytes");
        assert_eq!(&buf[..len], &data[..]);
        assert_eq!(c.stat(&p).unwrap().size, len as u64);
        // Another client, which got no data at open (O_RDWR), reads it too.
        let other = inst.client();
        assert_eq!(get(&other, &p), data);
    }
    assert!(op_total(&c, "create_inline") >= 3);
}

/// Unlink of a file whose data is inline is one request: the daemon says the data
/// was inline (`Response::Removed`), so no data daemon is asked for chunks. A file in
/// chunks still has them removed, and a file whose inline data moved to chunks too.
#[test]
fn unlink_of_an_inline_file_is_one_request() {
    let inst = Instance::start(4);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    for i in 0..20 {
        put_small(&c, &format!("/d/s{i}"), &pattern(4096, i));
    }
    let removes = op_total(&c, "remove_chunks");
    let sent = c.rpcs_sent();
    for i in 0..20 {
        c.unlink(&format!("/d/s{i}")).unwrap();
    }
    assert_eq!(c.rpcs_sent() - sent, 20, "one request per unlink of an inline file");
    assert_eq!(op_total(&c, "remove_chunks"), removes, "no chunk removal asked");
    assert_eq!(c.stat("/d/s3").unwrap_err().0, libc::ENOENT);
    // A file in chunks: its chunk daemons are asked.
    put_small(&c, "/d/big", &pattern(INLINE_BYTES_MAX + 1, 1));
    let removes = op_total(&c, "remove_chunks");
    c.unlink("/d/big").unwrap();
    assert!(op_total(&c, "remove_chunks") > removes, "a chunked file's chunks are removed");
    // Inline data moved to chunks by a writer: the file is in chunks now.
    put_small(&c, "/d/moved", b"small");
    let fd = c.open("/d/moved", O_RDWR, 0).unwrap();
    c.close(fd).unwrap();
    let removes = op_total(&c, "remove_chunks");
    c.unlink("/d/moved").unwrap();
    assert!(op_total(&c, "remove_chunks") > removes, "moved data's chunks are removed");
    // A new file at an unlinked inline file's path starts empty.
    let fd = c.open("/d/s0", O_CREAT | O_WRONLY, 0o644).unwrap();
    c.close(fd).unwrap();
    assert_eq!(get(&c, "/d/s0"), b"");
}

/// open(O_CREAT|O_TRUNC) of an existing small file (a shell's `>`, Python's "w")
/// does not fetch the data it is about to drop: no `stat_data`, and the new data is
/// what reads return.
#[test]
fn truncating_open_of_an_inline_file_does_not_fetch_its_data() {
    let inst = Instance::start(4);
    let c = inst.client();
    put_small(&c, "/f", &pattern(4096, 1));
    let stat_datas = op_total(&c, "stat_data");
    let fd = c.open("/f", O_CREAT | O_WRONLY | O_TRUNC, 0o644).unwrap();
    assert_eq!(op_total(&c, "stat_data"), stat_datas, "no data fetched to be dropped");
    c.write(fd, b"new").unwrap();
    c.close(fd).unwrap();
    assert_eq!(get(&c, "/f"), b"new");
    // The deferred open of the preload library takes the same way when it finds the file.
    put_small(&c, "/f", b"again");
    assert_eq!(get(&c, "/f"), b"again");
    assert_eq!(get(&inst.client(), "/f"), b"again", "another client reads it too");
}

/// A deferred create (under the claim on its directory) is settled by this
/// client's own operations, and by any other client's request that names the
/// directory (the claim's recall): nobody sees the file missing after its open.
#[test]
fn deferred_create_is_settled_by_own_operations_and_others_requests() {
    let inst = Instance::start(3);
    let (c, other) = (inst.claiming_client(gust_client::ClientOptions::default()), inst.client());
    c.mkdir("/d", 0o755).unwrap();
    let daemon = c.record_holders("/d/first")[0];
    let same: Vec<String> =
        (0..1000).map(|i| format!("/d/f{i}")).filter(|p| c.record_holders(p)[0] == daemon).take(2).collect();
    put_small(c, "/d/first", b"");
    assert_eq!(c.claims_held(), 1, "the first create in the directory on its daemon brings the claim");
    let (f, g) = (&same[0], &same[1]);
    let fd = c.open_deferred(f, O_CREAT | O_WRONLY, 0o600).unwrap();
    c.write(fd, b"hello").unwrap();
    assert_eq!(other.stat(f).unwrap().size, 5, "another client's stat recalls the claim");
    assert_eq!(c.claims_held(), 0);
    // Written on after settling: the ordinary way, through chunks.
    c.write(fd, b" world").unwrap();
    c.close(fd).unwrap();
    assert_eq!(get(&other, f), b"hello world");
    // Own operations settle too: fstat; mode from the open.
    let fd = c.open_deferred(g, O_CREAT | O_RDWR, 0o640).unwrap();
    c.write(fd, b"abc").unwrap();
    let st = c.fstat(fd).unwrap();
    assert_eq!((st.size, st.mode & 0o777), (3, 0o640));
    let mut b = [0u8; 3];
    assert_eq!(c.pread(fd, &mut b, 0).unwrap(), 3);
    assert_eq!(&b, b"abc");
    c.close(fd).unwrap();
}

/// Without a claim an open with O_CREAT is an ordinary open: of an existing path,
/// O_EXCL fails at once, and without it the file is opened and written as open(2)
/// would (O_TRUNC honoured, the tail kept without it).
#[test]
fn existing_paths_and_o_excl() {
    let inst = Instance::start(2);
    let c = inst.client();
    put_small(&c, "/x", b"0123456789");
    assert_err!(c.open_deferred("/x", O_CREAT | O_EXCL | O_WRONLY, 0o644), libc::EEXIST);
    c.set_defer_exclusive_create(true);
    assert_err!(c.open_deferred("/x", O_CREAT | O_EXCL | O_WRONLY, 0o644), libc::EEXIST);
    assert_eq!(get(&c, "/x"), b"0123456789");
    c.set_defer_exclusive_create(false);
    let fd = c.open_deferred("/x", O_CREAT | O_WRONLY, 0o644).unwrap();
    c.write(fd, b"ab").unwrap();
    c.close(fd).unwrap();
    assert_eq!(get(&c, "/x"), b"ab23456789", "no O_TRUNC: the tail stays");
    put_small(&c, "/x", b"new");
    assert_eq!(get(&c, "/x"), b"new", "O_TRUNC");
    let fd = c.open_deferred("/x", O_CREAT | O_WRONLY | O_APPEND, 0o644).unwrap();
    c.write(fd, b"+1").unwrap();
    c.close(fd).unwrap();
    assert_eq!(get(&c, "/x"), b"new+1");
    c.mkdir("/dir", 0o755).unwrap();
    assert_err!(c.open_deferred("/dir", O_CREAT | O_WRONLY, 0o644), libc::EISDIR);
}

/// Past the bound, or with a hole, a file goes to chunks; writers move inline data
/// to chunks; truncate, rename and directory rename keep the bytes.
#[test]
fn small_files_keep_their_data_through_everything() {
    let inst = Instance::start_with(4, &["--chunk-size", "4k"]);
    let c = inst.client();
    // Growth past the bound in pieces.
    let big = pattern(INLINE_BYTES_MAX + 5000, 3);
    let fd = c.open_deferred("/grow", O_CREAT | O_WRONLY, 0o644).unwrap();
    for piece in big.chunks(3000) {
        c.write(fd, piece).unwrap();
    }
    c.close(fd).unwrap();
    assert_eq!(get(&c, "/grow"), big);
    // A hole: written at 100 first.
    let fd = c.open_deferred("/hole", O_CREAT | O_WRONLY, 0o644).unwrap();
    c.pwrite(fd, b"x", 100).unwrap();
    c.close(fd).unwrap();
    let mut want = vec![0u8; 101];
    want[100] = b'x';
    assert_eq!(get(&c, "/hole"), want);
    // An inline file opened for writing moves to chunks, then grows.
    let small = pattern(3000, 9);
    put_small(&c, "/w", &small);
    let writes = op_total(&c, "drop_inline");
    let fd = c.open("/w", O_RDWR, 0).unwrap();
    assert_eq!(op_total(&c, "drop_inline"), writes + 1);
    c.pwrite(fd, b"END", 2998).unwrap();
    c.pwrite(fd, b"far", 20_000).unwrap();
    c.close(fd).unwrap();
    let mut want = small.clone();
    want.truncate(2998);
    want.extend_from_slice(b"END");
    want.resize(20_000, 0);
    want.extend_from_slice(b"far");
    assert_eq!(get(&c, "/w"), want);
    // Truncate cuts and grows inline data.
    put_small(&c, "/t", b"abcdef");
    c.truncate("/t", 3).unwrap();
    assert_eq!(get(&c, "/t"), b"abc");
    c.truncate("/t", 6).unwrap();
    assert_eq!(get(&c, "/t"), b"abc\0\0\0");
    // Rename of an inline file (to a path on another daemon, likely), over another.
    put_small(&c, "/r1", b"first");
    put_small(&c, "/r2", b"second");
    c.rename("/r1", "/moved").unwrap();
    c.rename("/moved", "/r2").unwrap();
    assert_eq!(get(&c, "/r2"), b"first");
    // Rename of a directory of inline files.
    c.mkdir("/dd", 0o755).unwrap();
    c.mkdir("/dd/sub", 0o755).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("/dd/{}f{i}", if i % 2 == 0 { "sub/" } else { "" }), pattern(i * 50 + 1, i as u8)))
        .collect();
    for (p, d) in &files {
        put_small(&c, p, d);
    }
    c.rename("/dd", "/ee").unwrap();
    for (p, d) in &files {
        assert_eq!(get(&c, &p.replacen("/dd", "/ee", 1)), *d, "{p}");
    }
    // Unlink, and a new file at the same path starts empty.
    c.unlink("/r2").unwrap();
    let fd = c.open("/r2", O_CREAT | O_WRONLY, 0o644).unwrap();
    c.close(fd).unwrap();
    assert_eq!(get(&c, "/r2"), b"");
}

/// Real programs under the preload library: a shell writing small files with `>`
/// into a new directory sends its first create on each daemon at the open (which
/// brings the claim), then queues the rest (bash's `>` is open, dup2 onto stdout,
/// close, write, dup2 back: the last close queues it) and sends them in batches
/// (before it forks `cat`, which reads them back); a program that exits without
/// closing still leaves its file.
#[test]
fn preload_programs_create_small_files_in_one_request() {
    let inst = Instance::start(3);
    let c = inst.client();
    let ops = |c: &Client| op_total(c, "create") + op_total(c, "create_inline") + op_total(c, "create_inline_batch");
    let (creates, writes) = (ops(&c), op_total(&c, "write"));
    let script = "set -euo pipefail; mkdir /gustfs/s; for i in $(seq 1 50); do echo \"line $i\" > /gustfs/s/f$i; done; \
                  cat /gustfs/s/f7 /gustfs/s/f50; \
                  python3 -c 'import os; fd = os.open(\"/gustfs/s/noclose\", os.O_CREAT | os.O_WRONLY); os.write(fd, b\"kept\")'";
    let out = Command::new(gust_bin())
        .args(["run", "--", "bash", "-c", script])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "line 7\nline 50\n");
    let sent = ops(&c) - creates;
    assert!(sent <= 20, "{sent} create requests for 51 files");
    // The first file on each daemon was created at its open, so its bytes went to
    // chunks; so did the unclosed file's.
    assert!(op_total(&c, "write") - writes <= 4, "chunk writes beyond the first files");
    assert_eq!(get(&c, "/s/f1"), b"line 1\n");
    assert_eq!(get(&c, "/s/noclose"), b"kept", "settled at exit");
}

/// 48 inline files /d/f0.. of INLINE_BYTES_MAX bytes less `shrink` times their
/// number (12 MiB in all, more than socket buffers hold), each its own pattern.
fn inline_files(c: &Client, shrink: usize) -> Vec<(String, Vec<u8>)> {
    c.mkdir("/d", 0o755).unwrap();
    let files: Vec<(String, Vec<u8>)> =
        (0..48u8).map(|i| (format!("/d/f{i}"), pattern(INLINE_BYTES_MAX - shrink * i as usize, i))).collect();
    for (p, data) in &files {
        put_small(c, p, data);
    }
    files
}

/// Sends `req` as request `id`; returns its op.
fn send_request(s: &mut std::net::TcpStream, id: u64, req: &gust_proto::Request) -> u16 {
    use gust_proto::frame::Header;
    use std::io::Write;
    let body = gust_proto::encode(req);
    let h = Header {
        version: gust_proto::PROTOCOL_VERSION,
        op: req.op(),
        request_id: id,
        body_len: body.len() as u32,
        bulk_len: 0,
        generation: 0,
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&body).unwrap();
    req.op()
}

/// Reads the header and body of the reply to request `id` of `op` (both checked);
/// returns the reply and its bulk length, the bulk left for the caller to read.
fn read_reply_head(s: &mut std::net::TcpStream, id: u64, op: u16) -> (gust_proto::Reply, usize) {
    use gust_proto::frame::{Header, HEADER_BYTES, OP_RESPONSE_BIT};
    use std::io::Read;
    let mut hb = [0u8; HEADER_BYTES];
    s.read_exact(&mut hb).unwrap();
    let h = Header::decode(&hb).unwrap();
    assert_eq!((h.request_id, h.op), (id, op | OP_RESPONSE_BIT));
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).unwrap();
    (gust_proto::decode(&body).unwrap(), h.bulk_len as usize)
}

/// The daemon writes inline data from where RocksDB holds it, not from a copy of
/// its own; a reply the socket cannot take at once is kept (its rest copied) until
/// the peer reads it. A raw peer pipelines 48 reads of 256 KiB inline files
/// (12 MiB of replies, more than the socket buffers hold) before reading any reply:
/// every reply comes back whole, in order, byte for byte, and the daemon serves on.
#[test]
fn inline_replies_the_peer_does_not_take_at_once_arrive_whole() {
    use gust_proto::{Request, Response};
    use std::io::Read;

    let inst = Instance::start(1);
    let c = inst.client();
    let files = inline_files(&c, 1);
    let mut s = inst.authed(0);
    let mut op = 0;
    for (i, (p, _)) in files.iter().enumerate() {
        op = send_request(&mut s, i as u64, &Request::StatData { path: p.clone() });
    }
    // The daemon has filled the socket and keeps the rest: its side holds replies
    // we have not taken (our receive window is closed).
    assert!(
        gust_e2e::wait_until(std::time::Duration::from_secs(30), || unsent_replies(&s) > 0),
        "the daemon never had more replies than the socket holds"
    );
    for (i, (p, data)) in files.iter().enumerate() {
        let (reply, bulk_len) = read_reply_head(&mut s, i as u64, op);
        let mut bulk = vec![0u8; bulk_len];
        s.read_exact(&mut bulk).unwrap();
        match reply {
            Ok(Response::RecordData { record, inline: true }) => assert_eq!(record.size, data.len() as u64),
            other => panic!("{p}: {other:?}"),
        }
        assert!(bulk == *data, "{p}: inline data differs");
    }
    drop(s);
    assert_eq!(get(&c, &files[0].0), files[0].1, "the daemon serves on");
}

/// Bytes the daemon at the other end of `s` has written to its socket that `s` has
/// not taken yet (the send queue of the daemon's side, from /proc/net/tcp and tcp6:
/// local port the daemon's, remote port ours). On loopback they stay queued only
/// while our receive window is closed.
fn unsent_replies(s: &std::net::TcpStream) -> u64 {
    let (daemon_port, our_port) = (s.peer_addr().unwrap().port(), s.local_addr().unwrap().port());
    let port = |field: &str| field.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .flat_map(|text| text.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx_queue:rx_queue ...
            if f.len() > 4 && port(f[1]) == Some(daemon_port) && port(f[2]) == Some(our_port) {
                u64::from_str_radix(f[4].split(':').next()?, 16).ok()
            } else {
                None
            }
        })
        .sum()
}

/// Client::read_whole_into: an inline file's data goes into the caller's buffer
/// (one request); past the stored data the caller zeroes (a truncate grew it);
/// anything else comes back as Other with its record, or an error.
#[test]
fn read_whole_into_places_inline_data_and_declines_the_rest() {
    use gust_client::{Kind, WholeFile};
    let inst = Instance::start(3);
    let c = inst.client();
    c.mkdir("/d", 0o755).unwrap();
    let data = pattern(100 << 10, 7);
    put_small(&c, "/d/inline", &data);
    let mut buf = Vec::new();
    let sent = c.rpcs_sent();
    match c.read_whole_into("/d/inline", &mut |r| {
        buf.resize(r.size as usize, 0xAA);
        // SAFETY (test): buf outlives the call and is not touched meanwhile.
        Some(unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len()) })
    }) {
        Ok(WholeFile::Placed { record, len }) => assert_eq!((record.size, len), (data.len() as u64, data.len())),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.rpcs_sent() - sent, 1);
    assert!(buf == data);
    c.truncate("/d/inline", 200 << 10).unwrap();
    let mut size = 0;
    match c.read_whole_into("/d/inline", &mut |r| {
        size = r.size;
        buf = vec![0xAA; r.size as usize];
        Some(unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len()) })
    }) {
        Ok(WholeFile::Placed { len, .. }) => assert_eq!((len, size), (data.len(), 200 << 10)),
        other => panic!("{other:?}"),
    }
    assert!(buf[..data.len()] == data[..]);
    // In chunks (written through an ordinary open): declined, with its record.
    let fd = c.open("/d/chunked", O_CREAT | O_WRONLY, 0o644).unwrap();
    c.write(fd, b"chunked").unwrap();
    c.close(fd).unwrap();
    match c.read_whole_into("/d/chunked", &mut |_| panic!("not inline")) {
        Ok(WholeFile::Other(Some(r))) => assert_eq!((r.kind, r.size), (Kind::File, 7)),
        other => panic!("{other:?}"),
    }
    match c.read_whole_into("/d", &mut |_| panic!("a directory")) {
        Ok(WholeFile::Other(Some(r))) => assert_eq!(r.kind, Kind::Dir),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.read_whole_into("/d/missing", &mut |_| None).err(), Some(gust_client::Errno(libc::ENOENT)));
}

/// Pipes the daemon process holds (/proc/PID/fd).
fn pipes_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().starts_with("pipe:"))
        .count()
}

/// Inline data in table files goes to the socket by reference (daemon
/// server/splice.rs: through a pipe the connection gets for it); a reply larger
/// than the pipe and the socket together, to a client that does not read yet, is
/// finished from a copy behind the pipe; the bytes arrive whole and in order, and
/// the connection serves on.
#[test]
fn inline_replies_from_tables_go_by_reference_and_arrive_whole() {
    use gust_proto::{Request, Response, WholeFile};
    use std::io::Read;
    use std::net::TcpStream;
    use std::time::Duration;

    let inst = Instance::start(1);
    let c = inst.client();
    let files = inline_files(&c, 1000);
    drop(c);
    // A restart replays the log into a table (RocksDB flushes what it recovers):
    // the data is in a mapped table file, not in a memtable.
    let old = inst.daemon_pid(0);
    // SAFETY: plain kill(2) of the daemon's pid.
    assert_eq!(unsafe { libc::kill(old as i32, libc::SIGKILL) }, 0);
    // The restart listens on the same address: the killed process must have let go of it.
    assert!(
        gust_e2e::wait_until(Duration::from_secs(10), || inst.daemon_gone(0)),
        "daemon 0 still accepts connections after kill -9"
    );
    let log = inst.restart_daemon(0);
    assert!(
        gust_e2e::wait_until(Duration::from_secs(20), || inst.daemon_pid(0) != old && inst.client().ping(0).is_ok()),
        "no restart:\n{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let pid = inst.daemon_pid(0);
    let pipes_before = pipes_of(pid);

    let mut s = inst.authed(0);
    let ask = |s: &mut TcpStream, id: u64| {
        send_request(s, id, &Request::ReadMany { paths: files.iter().map(|(p, _)| p.clone()).collect() })
    };
    let check = |s: &mut TcpStream, id: u64, op: u16, slow: bool| {
        let (reply, bulk_len) = read_reply_head(s, id, op);
        let Ok(Response::Files(found)) = reply else { panic!("not a Files reply") };
        let mut bulk = vec![0u8; bulk_len];
        let mut got = 0;
        while got < bulk.len() {
            // A slow reader: small reads with pauses.
            let end = if slow { (got + 100_000).min(bulk.len()) } else { bulk.len() };
            s.read_exact(&mut bulk[got..end]).unwrap();
            got = end;
            if slow {
                // Not a wait for anything: the slow reader under test.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let mut at = 0;
        for ((p, data), f) in files.iter().zip(found) {
            let WholeFile::Found { record, inline_len: Some(n) } = f else { panic!("{p}: {f:?}") };
            assert_eq!((record.size, n as usize), (data.len() as u64, data.len()), "{p}");
            assert!(bulk[at..at + data.len()] == data[..], "{p}: data differs");
            at += data.len();
        }
        assert_eq!(at, bulk.len());
    };
    // 12 MiB in one reply: more than the pipe (1 MiB) and the socket hold.
    let op = ask(&mut s, 1);
    assert!(
        gust_e2e::wait_until(Duration::from_secs(30), || pipes_of(pid) >= pipes_before + 2),
        "the daemon made no pipe for the connection: the reply did not go by reference"
    );
    // A client that does not read yet: the daemon filled the socket and keeps the rest.
    assert!(
        gust_e2e::wait_until(Duration::from_secs(30), || unsent_replies(&s) > 0),
        "the daemon never had more of the reply than the socket holds"
    );
    check(&mut s, 1, op, true);
    // The connection serves on, by reference again.
    let op = ask(&mut s, 2);
    check(&mut s, 2, op, false);
    drop(s);
    assert_eq!(get(&inst.client(), &files[3].0), files[3].1, "the daemon serves on");
}
