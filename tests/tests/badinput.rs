//! Hostile and malformed input: raw TCP peers without the secret, garbage, truncated
//! and oversized frames, unknown ops, bad versions; bad paths through the client.
//! After each, the daemon still serves and nothing outside its root directory changed.

mod common;

use gust_client::Client;
use gust_e2e::frames::{call, header, read_reply, send_req};
use gust_e2e::{wait_until, Instance};
use gust_proto::frame::{Header, HEADER_BYTES};
use gust_proto::handshake::{self, HandshakeError, HELLO_MAGIC, STATUS_BAD_VERSION};
use gust_proto::{encode, FileKind, Record, Request, Response, Span, WholeFile, PROTOCOL_VERSION};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// The daemon closed this connection (EOF or reset) within the read timeout.
fn assert_closed(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return,
            Ok(_) => continue, // a refusal status or error reply before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e) => panic!("daemon kept the connection open: {e}"),
        }
    }
}

/// The daemon still answers and serves file-system operations.
fn assert_serving(inst: &Instance, c: &Client) {
    for d in 0..inst.daemons {
        c.ping(d).unwrap_or_else(|e| panic!("daemon {d} stopped answering: {e}"));
        // SAFETY: kill with signal 0 only checks that the process exists.
        assert_eq!(unsafe { libc::kill(inst.daemon_pid(d) as i32, 0) }, 0, "daemon {d} died");
    }
    common::put(c, "/alive", b"still here");
    assert_eq!(common::get(c, "/alive"), b"still here");
}

/// Waits for `needle` to appear in daemon `d`'s log (it is written as the
/// connection closes, which may trail our read of the close by a moment).
fn assert_logged(inst: &Instance, d: u32, needle: &str) {
    let ok = wait_until(Duration::from_secs(5), || inst.daemon_log(d).contains(needle));
    assert!(ok, "daemon {d} did not log {needle:?}; log:\n{}", inst.daemon_log(d));
}

fn frames_refused(c: &Client, d: u32) -> u64 {
    c.daemon_stats(d).unwrap().frames_refused
}

#[test]
fn wrong_secret_is_refused() {
    let inst = Instance::start(2);
    let c = inst.client();
    let before = frames_refused(&c, 0);
    let mut s = inst.connect(0);
    match handshake::client(&mut s, b"not the instance secret, not even close") {
        Err(HandshakeError::BadAuth) => {}
        other => panic!("wrong secret: {other:?}"),
    }
    assert_closed(&mut s);
    // The daemon refused before doing anything: a request on the socket gets nothing.
    assert_logged(&inst, 0, "refused connection from 127.0.0.1");
    assert!(frames_refused(&c, 0) > before);
    // A peer that proves the secret but answers the daemon's challenge wrongly: the
    // daemon's final status is a refusal.
    let mut s = inst.connect(0);
    let mut hello = Vec::new();
    hello.extend_from_slice(HELLO_MAGIC);
    hello.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    hello.extend_from_slice(&[9u8; 32]);
    s.write_all(&hello).unwrap();
    let mut reply = [0u8; 67];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], handshake::STATUS_OK);
    s.write_all(&[0u8; 32]).unwrap(); // a MAC made without the secret
    let mut st = [0u8; 1];
    s.read_exact(&mut st).unwrap();
    assert_eq!(st[0], handshake::STATUS_BAD_AUTH);
    // Anything sent after that is ignored and the connection is closed.
    let _ = s.write_all(&header(1, 0, 0));
    assert_closed(&mut s);
    assert_logged(&inst, 0, "authentication failed");
    assert_serving(&inst, &c);
}

#[test]
fn garbage_and_bad_versions_before_the_handshake() {
    let inst = Instance::start(1);
    let c = inst.client();
    // Random garbage instead of a hello.
    let mut s = inst.connect(0);
    s.write_all(&common::pattern(42, 4096)).unwrap();
    assert_closed(&mut s);
    assert_logged(&inst, 0, "not a GustFS client");
    // An HTTP request, a classic stray peer.
    let mut s = inst.connect(0);
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\r\n\r\n\r\n\r\n").unwrap();
    assert_closed(&mut s);
    // A hello from another protocol version gets a clear status, then the close.
    let mut s = inst.connect(0);
    let mut hello = Vec::new();
    hello.extend_from_slice(HELLO_MAGIC);
    hello.extend_from_slice(&(PROTOCOL_VERSION + 41).to_le_bytes());
    hello.extend_from_slice(&[1u8; 32]);
    s.write_all(&hello).unwrap();
    let mut st = [0u8; 3];
    s.read_exact(&mut st).unwrap();
    assert_eq!(st[0], STATUS_BAD_VERSION);
    assert_eq!(u16::from_le_bytes([st[1], st[2]]), PROTOCOL_VERSION);
    assert_closed(&mut s);
    assert_logged(&inst, 0, "protocol version mismatch");
    // A truncated hello, then the peer goes away.
    let mut s = inst.connect(0);
    s.write_all(&HELLO_MAGIC[..5]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_closed(&mut s);
    // A peer that connects and says nothing is dropped after the handshake timeout,
    // and meanwhile others are served.
    let mut silent = inst.connect(0);
    assert_serving(&inst, &c);
    silent.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    assert_closed(&mut silent);
    assert_serving(&inst, &c);
}

#[test]
fn malformed_frames_after_the_handshake() {
    let inst = Instance::start(1);
    let c = inst.client();
    let before = frames_refused(&c, 0);

    // Oversized declared lengths: refused before any allocation, connection closed.
    for (body, bulk) in [(u32::MAX, 0), ((1 << 20) + 1, 0), (0, u32::MAX), (16, (32 << 20) + 1)] {
        let mut s = inst.authed(0);
        s.write_all(&header(3, body, bulk)).unwrap();
        assert_closed(&mut s);
    }
    assert_logged(&inst, 0, "exceeds the limit");

    // Bad magic and bad version in a frame header.
    let mut s = inst.authed(0);
    let mut h = header(1, 0, 0);
    h[0..4].copy_from_slice(b"HTTP");
    s.write_all(&h).unwrap();
    assert_closed(&mut s);
    assert_logged(&inst, 0, "bad frame magic");
    let mut s = inst.authed(0);
    s.write_all(&Header { version: 77, op: 1, request_id: 1, body_len: 0, bulk_len: 0, generation: 0 }.encode())
        .unwrap();
    assert_closed(&mut s);
    assert_logged(&inst, 0, "protocol version 77 not supported");

    // Truncated frames: a partial header, a header with half its body, a body with
    // half its bulk; then the peer closes its side.
    let full = {
        let req = Request::Write { file_id: 5, spans: vec![Span { offset: 0, len: 100 }], sums: vec![] };
        let body = encode(&req);
        let mut f = header(req.op(), body.len() as u32, 100).to_vec();
        f.extend_from_slice(&body);
        f.extend_from_slice(&[7u8; 100]);
        f
    };
    for cut in [10, HEADER_BYTES + 3, full.len() - 50] {
        let mut s = inst.authed(0);
        s.write_all(&full[..cut]).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        assert_closed(&mut s);
    }
    assert_logged(&inst, 0, "truncated frame header");

    // Unknown op codes get ENOSYS, then the connection closes.
    for op in [0u16, gust_proto::OP_MAX + 1, 999, 0x7fff] {
        let mut s = inst.authed(0);
        send_req(&mut s, op, &encode(&Request::Ping), &[]);
        assert_eq!(read_reply(&mut s, op), Some(Err(libc::ENOSYS)), "op {op}");
        assert_closed(&mut s);
    }
    assert_logged(&inst, 0, "unknown op code 999");

    // A body that does not decode, or decodes to another op than the header's.
    let mut s = inst.authed(0);
    send_req(&mut s, 3, &common::pattern(1, 40), &[]);
    assert_eq!(read_reply(&mut s, 3), Some(Err(libc::EPROTO)));
    assert_closed(&mut s);
    let mut s = inst.authed(0);
    send_req(&mut s, 2, &encode(&Request::Stat { path: "/x".into() }), &[]);
    assert_eq!(read_reply(&mut s, 2), Some(Err(libc::EPROTO)));
    assert_closed(&mut s);
    assert_logged(&inst, 0, "malformed message body");
    // A string length far beyond the body.
    let mut evil = encode(&Request::Stat { path: "/x".into() });
    evil[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut s = inst.authed(0);
    send_req(&mut s, 3, &evil, &[]);
    assert_eq!(read_reply(&mut s, 3), Some(Err(libc::EPROTO)));

    assert!(frames_refused(&c, 0) >= before + 15, "frames_refused did not count the refusals");
    assert_serving(&inst, &c);
}

#[test]
fn bad_requests_get_errors_and_keep_the_connection() {
    let inst = Instance::start(1);
    let c = inst.client();
    let mut s = inst.authed(0);
    let rec = Record {
        kind: FileKind::File,
        mode: 0o644,
        size: 0,
        file_id: 77,
        nlink: 1,
        ctime_ns: 0,
        mtime_ns: 0,
        atime_ns: 0,
        target: String::new(),
        uid: 0,
        gid: 0,
        xattrs: Vec::new(),
    };
    let create = |p: &str| Request::Create { path: p.to_string(), record: rec.clone(), exclusive: true };
    // Paths are validated by the daemon too, not only by well-behaved clients.
    for (p, want) in [
        ("/../../escape", libc::EINVAL),
        ("/a/../../escape", libc::EINVAL),
        ("relative", libc::EINVAL),
        ("", libc::EINVAL),
        ("/a//b", libc::EINVAL),
        ("/a/./b", libc::EINVAL),
        ("/a\0b", libc::EINVAL),
    ] {
        assert_eq!(call(&mut s, &create(p), &[]), Err(want), "create {p:?}");
    }
    assert_eq!(call(&mut s, &create(&"/x".repeat(5_000)), &[]), Err(libc::ENAMETOOLONG));
    assert_eq!(call(&mut s, &create(&format!("/{}", "n".repeat(300))), &[]), Err(libc::ENAMETOOLONG));
    assert_eq!(call(&mut s, &Request::Stat { path: "/..".into() }, &[]), Err(libc::EINVAL));
    assert_eq!(
        call(&mut s, &Request::RemoveRecords { paths: vec!["/ok".into(), "/../x".into()] }, &[]),
        Err(libc::EINVAL)
    );
    let mut link = rec.clone();
    link.target = "t".repeat(5_000);
    assert_eq!(
        call(&mut s, &Request::Create { path: "/l".into(), record: link, exclusive: true }, &[]),
        Err(libc::ENAMETOOLONG)
    );
    // Spans that do not match the bulk, overflow, or ask for too much.
    let w = |spans: Vec<Span>| Request::Write { file_id: 5, spans, sums: vec![] };
    assert_eq!(call(&mut s, &w(vec![Span { offset: 0, len: 10 }]), &[1u8; 4]), Err(libc::EINVAL));
    assert_eq!(call(&mut s, &w(vec![Span { offset: u64::MAX - 2, len: 4 }]), &[1u8; 4]), Err(libc::EFBIG));
    assert_eq!(call(&mut s, &w(vec![Span { offset: 0, len: 0 }; 5_000]), &[]), Err(libc::EINVAL));
    // Bytes that do not match the writer's sums (corrupted on the way) write
    // nothing; sums that do not count the pieces are refused.
    let summed = |sums: Vec<u64>| Request::Write { file_id: 6, spans: vec![Span { offset: 4000, len: 200 }], sums };
    let bytes = [3u8; 200];
    let good = vec![gust_proto::sums::sum_of(&bytes[..96]), gust_proto::sums::sum_of(&bytes[96..])];
    assert_eq!(call(&mut s, &summed(vec![good[0], good[1] ^ 1]), &bytes), Err(libc::EBADMSG));
    let read6 = Request::Read { file_id: 6, spans: vec![Span { offset: 0, len: 8192 }] };
    assert!(
        matches!(call(&mut s, &read6, &[]), Ok(Response::Data { span_lens, sums }) if span_lens == vec![0] && sums.is_empty())
    );
    assert_logged(&inst, 0, "do not match the writer's checksums");
    assert_eq!(call(&mut s, &summed(vec![good[0]]), &bytes), Err(libc::EINVAL));
    assert!(matches!(call(&mut s, &summed(good), &bytes), Ok(Response::Written(200))));
    let huge_read = Request::Read { file_id: 5, spans: vec![Span { offset: 0, len: u32::MAX }; 16] };
    assert_eq!(call(&mut s, &huge_read, &[]), Err(libc::EINVAL));
    // A batch of creates whose sizes do not add up to its data, or with too many
    // entries, or with a symlink target, creates nothing; a bad path fails its entry.
    let sized = |n: u64| Record { size: n, ..rec.clone() };
    let batch = |entries: Vec<(&str, Record)>| Request::CreateInlineBatch {
        entries: entries.into_iter().map(|(p, r)| (p.to_string(), r)).collect(),
    };
    assert_eq!(call(&mut s, &batch(vec![("/b1", sized(4)), ("/b2", sized(4))]), &[1u8; 6]), Err(libc::EINVAL));
    assert_eq!(call(&mut s, &batch(vec![("/b1", sized(u64::MAX))]), &[1u8; 6]), Err(libc::EINVAL));
    let many = (0..gust_proto::CREATE_BATCH_ENTRIES_MAX + 1).map(|_| ("/b1", sized(0))).collect();
    assert_eq!(call(&mut s, &batch(many), &[]), Err(libc::EINVAL));
    let mut target = sized(0);
    target.target = "t".into();
    assert_eq!(call(&mut s, &batch(vec![("/b1", target)]), &[]), Err(libc::EINVAL));
    assert_eq!(c.stat("/b1").err(), Some(gust_client::Errno(libc::ENOENT)), "nothing created");
    match call(&mut s, &batch(vec![("/../b", sized(2)), ("/b3", sized(2))]), b"xxyy") {
        Ok(Response::Staged(o)) => assert_eq!(o.iter().map(|o| o.errno).collect::<Vec<_>>(), vec![libc::EINVAL, 0]),
        r => panic!("{r:?}"),
    }
    assert_eq!(c.stat("/b3").unwrap().size, 2);
    // A batch of whole-file reads past its bound fails whole; a bad path fails only
    // its own entry.
    let read_many = |paths: &[&str]| Request::ReadMany { paths: paths.iter().map(|p| p.to_string()).collect() };
    let too_many: Vec<&str> = vec!["/b3"; gust_proto::READ_MANY_ENTRIES_MAX + 1];
    assert_eq!(call(&mut s, &read_many(&too_many), &[]), Err(libc::EINVAL));
    match call(&mut s, &read_many(&["/../b", "/b3", "/nothing", "", "/b3/below"]), &[]) {
        Ok(Response::Files(f)) => {
            assert_eq!(f[0], WholeFile::Failed(libc::EINVAL));
            assert!(matches!(&f[1], WholeFile::Found { record, inline_len: Some(2) } if record.size == 2), "{f:?}");
            assert_eq!(f[2], WholeFile::Failed(libc::ENOENT));
            assert_eq!(f[3], WholeFile::Failed(libc::EINVAL));
            assert!(matches!(f[4], WholeFile::Failed(libc::ENOTDIR | libc::ENOENT)), "{f:?}");
            assert_eq!(f.len(), 5);
        }
        r => panic!("{r:?}"),
    }
    assert_eq!(call(&mut s, &read_many(&[]), &[]), Ok(Response::Files(Vec::new())));
    // The same connection still works.
    assert_eq!(call(&mut s, &Request::Ping, &[]), Ok(Response::Ok));
    assert_eq!(call(&mut s, &create("/fine"), &[]), Ok(Response::Record(rec.clone())));
    assert_eq!(c.stat("/fine").unwrap().file_id, 77);
    assert_serving(&inst, &c);
}

#[test]
fn bad_paths_through_the_client() {
    let inst = Instance::start(3);
    let c = inst.client();
    let parent = inst.rootdir().parent().unwrap().to_path_buf();
    let name = format!("escape-{}", std::process::id());
    let outside: Vec<std::path::PathBuf> =
        vec![parent.join(&name), inst.rootdir().join(&name), std::path::PathBuf::from("/").join(&name)];
    for p in &outside {
        assert!(!p.exists(), "{} exists before the test", p.display());
    }
    // ".." is resolved lexically and never climbs above the file system's root.
    let up = format!("/../../{name}");
    common::put(&c, &up, b"inside");
    assert_eq!(common::get(&c, &format!("/{name}")), b"inside");
    c.mkdir(&format!("/d/../../../{name}.dir"), 0o755).unwrap();
    assert_eq!(c.stat(&format!("/{name}.dir")).unwrap().kind, gust_client::Kind::Dir);
    c.symlink(&format!("../../../{name}"), "/sneaky").unwrap();
    assert_eq!(common::get(&c, "/sneaky"), b"inside");
    c.symlink("/etc/passwd", "/outside-link").unwrap();
    assert_err!(c.open("/outside-link", libc::O_RDONLY, 0), libc::EXDEV);
    for p in &outside {
        assert!(!p.exists(), "{} was created outside GustFS", p.display());
        assert!(!p.with_extension("dir").exists());
    }
    // NUL bytes, overlong paths and components.
    let long_path = format!("/{}", "abcdefghi/".repeat(1_000));
    let long_name = format!("/{}", "n".repeat(300));
    let nul = "/a\0b";
    for (p, want) in
        [(nul, libc::EINVAL), (long_path.as_str(), libc::ENAMETOOLONG), (long_name.as_str(), libc::ENAMETOOLONG)]
    {
        assert_err!(c.open(p, libc::O_CREAT | libc::O_WRONLY, 0o644), want);
        assert_err!(c.stat(p), want);
        assert_err!(c.lstat(p), want);
        assert_err!(c.mkdir(p, 0o755), want);
        assert_err!(c.unlink(p), want);
        assert_err!(c.rmdir(p), want);
        assert_err!(c.truncate(p, 0), want);
        assert_err!(c.rename(&format!("/{name}"), p), want);
        assert_err!(c.symlink("x", p), want);
        assert_err!(c.opendir(p).map(|_| ()), want);
    }
    assert_err!(c.symlink(&"t".repeat(10_000), "/long-target"), libc::ENAMETOOLONG);
    // A 255-byte component is fine.
    let max_name = format!("/{}", "m".repeat(255));
    common::put(&c, &max_name, b"ok");
    assert_eq!(common::get(&c, &max_name), b"ok");
    // Nothing appeared outside, and inside the daemons' root directories only their
    // own layout exists (no client path ever becomes a local path).
    for p in &outside {
        assert!(!p.exists(), "{} was created outside GustFS", p.display());
    }
    for d in inst.hosts_file().daemons {
        for e in std::fs::read_dir(&d.rootdir).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            assert!(
                [
                    "metadata",
                    "chunks",
                    "instance",
                    "lock",
                    "daemon.sock",
                    "daemon.shm",
                    "short-circuit.sock",
                    "node-cache.sock"
                ]
                .contains(&n.as_str()),
                "unexpected {n} in {}",
                d.rootdir.display()
            );
        }
    }
    assert_serving(&inst, &c);
}
