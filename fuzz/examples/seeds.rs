//! Writes the seed corpus, fuzz/corpus/<target>/<name>: one meaningful input per kind
//! of message (every request op, every response, whole frames, both sides of the
//! handshake, hosts files of both formats, paths, metadata record values, trace
//! files), so that fuzzing starts from valid encodings instead of discovering the
//! formats byte by byte. Run by `scripts/fuzz.sh seeds`; the files are committed, so
//! rerun it when a format changes.

use gust_proto::handshake::{self, HELLO_BYTES};
use gust_proto::*;
use std::fs;
use std::io::{self, Read, Write};
use std::path::PathBuf;

fn rec() -> Record {
    Record {
        kind: FileKind::File,
        mode: 0o644,
        size: 5,
        file_id: 7,
        nlink: 1,
        ctime_ns: 2,
        mtime_ns: 3,
        atime_ns: 4,
        target: String::new(),
        uid: 1000,
        gid: 100,
        xattrs: Vec::new(),
    }
}

fn requests() -> Vec<Request> {
    let link = Record { kind: FileKind::Symlink, target: "/t".into(), ..rec() };
    vec![
        Request::Ping,
        Request::Create { path: "/a".into(), record: rec(), exclusive: true },
        Request::Stat { path: "/a/b".into() },
        Request::Remove { path: "/a".into(), kind: RemoveKind::Dir },
        Request::UpdateSize { path: "/a".into(), file_id: 7, end: 10, append_len: Some(4), mtime_ns: 5 },
        Request::Truncate { path: "/a".into(), size: 3, mtime_ns: 5 },
        Request::SetAttr { path: "/a".into(), mode: Some(0o600), atime_ns: None, mtime_ns: Some(6), ctime_ns: 7 },
        Request::PutRecord { path: "/b".into(), record: link, replace: false },
        Request::ReadDir { dir: "/".into(), after: Some("x".into()), max_entries: 16 },
        Request::HasChildren { dir: "/d".into() },
        Request::ScanTree { dir: "/d".into(), after: Some(vec![1, 2]), max_entries: 5 },
        Request::RemoveRecords { paths: vec!["/a".into(), "/b".into()] },
        Request::Write {
            file_id: 7,
            spans: vec![Span { offset: 0, len: 4 }],
            sums: vec![gust_proto::sums::sum_of(b"data")],
        },
        Request::Read { file_id: 7, spans: vec![Span { offset: 512, len: 8 }, Span { offset: 1 << 19, len: 2 }] },
        Request::TruncateChunks { file_id: 7, size: 100 },
        Request::RemoveChunks { file_id: 7 },
        Request::Fsync { file_id: Some(7) },
        Request::StatFs,
        Request::Stats,
        Request::PutRecords { records: vec![("/x".into(), rec())] },
        Request::Shutdown { keep: true },
        Request::CreateInline { path: "/s".into(), record: rec() },
        Request::StatData { path: "/s".into() },
        Request::DropInline { path: "/s".into(), file_id: 7 },
        Request::ReadDirPlus { dir: "/".into(), after: None, max_entries: 16 },
        Request::CreateInlineBatch { entries: vec![("/s".into(), rec()), ("/t".into(), rec())] },
        Request::SetOwner { path: "/a".into(), uid: Some(1), gid: None, ctime_ns: 7 },
        Request::DirChanged { path: "/d".into(), subdirs_delta: 1, time_ns: 8 },
        Request::SetXattr {
            path: "/a".into(),
            name: "user.k".into(),
            value: Some(b"v".to_vec()),
            flags: 0,
            ctime_ns: 9,
        },
        Request::Metrics,
        Request::CloseWrite { path: "/a".into() },
        Request::Events { after_seq: 3, prefix: "/".into(), max_entries: 16 },
        Request::Trace { on: true, names: "md,chunk".into(), dir: Some("/tmp/t".into()) },
        Request::Remove { path: "/a".into(), kind: RemoveKind::Moved },
        Request::StageCreate {
            entries: vec![StageEntry {
                path: "/a".into(),
                record: rec(),
                source: Some("/pfs/a".into()),
                replace: false,
            }],
        },
        Request::StagePull {
            items: vec![StageChunks { file_id: 7, external: "/pfs/b".into(), spans: vec![Span { offset: 0, len: 8 }] }],
        },
        Request::StagePush {
            items: vec![StageChunks { file_id: 7, external: "/pfs/c".into(), spans: vec![Span { offset: 8, len: 8 }] }],
        },
        Request::StageExportFiles { items: vec![StageExport { path: "/s".into(), file_id: 7, dest: "/pfs/s".into() }] },
        Request::StageHashSpans {
            items: vec![
                StageHash { source: HashSource::Chunks(7), spans: vec![Span { offset: 0, len: 4 }] },
                StageHash { source: HashSource::Inline("/s".into()), spans: vec![Span { offset: 0, len: 4 }] },
                StageHash { source: HashSource::External("/pfs/s".into()), spans: vec![Span { offset: 0, len: 4 }] },
            ],
        },
        Request::StageCommitFiles {
            items: vec![StageCommit { path: "/a".into(), file_id: 7, size: 5, mtime_ns: 3, atime_ns: 4 }],
        },
        Request::ReadLog { after: Some(6), max_entries: 16 },
        Request::Forward {
            target: 1,
            op: 3,
            timeout_ms: 2000,
            body: gust_proto::encode(&Request::Stat { path: "/a".into() }),
        },
        Request::Multiplex,
        Request::ReadMany { paths: vec!["/a".into(), "/b".into()] },
        Request::Heartbeat { from: 2 },
        Request::Fence { daemon: 1 },
        Request::Unfence { daemon: 1 },
    ]
}

fn replies() -> Vec<(&'static str, Reply)> {
    vec![
        ("ok", Ok(Response::Ok)),
        ("record", Ok(Response::Record(rec()))),
        ("maybe-record", Ok(Response::MaybeRecord(Some(rec())))),
        ("offset", Ok(Response::Offset(9))),
        (
            "dir-page",
            Ok(Response::DirPage {
                entries: vec![
                    DirEntry { name: "f".into(), kind: FileKind::Dir },
                    DirEntry { name: "g".into(), kind: FileKind::File },
                ],
                done: true,
            }),
        ),
        ("bool", Ok(Response::Bool(true))),
        ("tree", Ok(Response::Tree { records: vec![("/x".into(), rec())], last_key: Some(vec![9]), done: false })),
        ("written", Ok(Response::Written(4))),
        ("data", Ok(Response::Data { span_lens: vec![8, 0] })),
        ("record-data", Ok(Response::RecordData { record: rec(), inline: true })),
        ("dir-page-plus", Ok(Response::DirPagePlus { entries: vec![("f".into(), rec())], done: true })),
        ("statfs", Ok(Response::StatFs { total_bytes: 1, free_bytes: 2, avail_bytes: 3, files: 4 })),
        (
            "stats",
            Ok(Response::Stats(DaemonStats {
                daemon_id: 3,
                uptime_ms: 5,
                ops: vec![("ping".into(), 2)],
                connections_open: 1,
                frames_refused: 0,
                bytes_written: 6,
                bytes_read: 7,
            })),
        ),
        ("staged", Ok(Response::Staged(vec![StageOutcome { errno: 0, bytes: 5, replaced: Some(rec()) }]))),
        ("hashes", Ok(Response::Hashes(vec![SpanHashes { errno: 0, hashes: vec![1, 2] }]))),
        (
            "read-log",
            Ok(Response::ReadLog {
                entries: vec![ReadLogEntry { file_id: 7, chunks: vec![(0, 8)] }],
                done: true,
                dropped: 0,
            }),
        ),
        ("lease", Ok(Response::Lease { fenced: true })),
        ("fenced", Ok(Response::Fenced { lease_left_ms: 1500 })),
        (
            "files",
            Ok(Response::Files(vec![
                WholeFile::Found { record: rec(), inline_len: Some(3) },
                WholeFile::Found { record: rec(), inline_len: None },
                WholeFile::Failed(2),
            ])),
        ),
        ("removed", Ok(Response::Removed { record: rec(), inline: true })),
        ("enoent", Err(2)),
    ]
}

/// A stream that reads end of file and keeps what is written.
struct Sink(Vec<u8>);

impl Read for Sink {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Ok(0)
    }
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Corpus(PathBuf);

impl Corpus {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.0.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
    }
}

fn main() {
    let c = Corpus(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus"));
    let _ = fs::remove_dir_all(&c.0);

    for req in requests() {
        let body = encode(&req);
        let mut input = req.op().to_le_bytes().to_vec();
        input.extend_from_slice(&body);
        c.put("request", req.name(), &input);
        let mut frame = Vec::new();
        let bulk: &[u8] = if matches!(req, Request::Write { .. }) { b"data" } else { b"" };
        write_frame(&mut frame, req.op(), 1, &body, bulk).unwrap();
        if matches!(req, Request::Ping | Request::Write { .. } | Request::Create { .. }) {
            c.put("frame", &format!("request-{}", req.name()), &frame);
        }
    }
    for (name, reply) in replies() {
        let body = encode(&reply);
        c.put("reply", name, &body);
        if name == "ok" || name == "data" {
            let mut frame = Vec::new();
            let bulk: &[u8] = if name == "data" { &[7; 8] } else { b"" };
            write_frame(&mut frame, 14 | frame::OP_RESPONSE_BIT, 1, &body, bulk).unwrap();
            c.put("frame", &format!("reply-{name}"), &frame);
        }
    }
    // Two frames back to back, as a connection carries them.
    let mut two = Vec::new();
    write_frame(&mut two, 3, 1, &encode(&Request::Stat { path: "/a".into() }), b"").unwrap();
    write_frame(&mut two, 1, 2, &encode(&Request::Ping), b"").unwrap();
    c.put("frame", "two-frames", &two);

    // Handshake: flags, secret length, secret, then the peer's bytes.
    let secret = [0x5a; 32];
    let with = |flags: u8, peer: &[u8]| {
        let mut v = vec![flags, secret.len() as u8];
        v.extend_from_slice(&secret);
        v.extend_from_slice(peer);
        v
    };
    let mut sink = Sink(Vec::new());
    let _ = handshake::client(&mut sink, &secret);
    let hello: [u8; HELLO_BYTES] = sink.0[..HELLO_BYTES].try_into().unwrap();
    c.put("handshake", "daemon-hello-then-mac", &with(0, &[&hello[..], &[0x11; 32]].concat()));
    c.put("handshake", "daemon-honest-client", &with(4, &hello));
    c.put("handshake", "daemon-busy", &with(1, &hello));
    let mut old = hello;
    old[8..10].copy_from_slice(&1u16.to_le_bytes());
    c.put("handshake", "daemon-old-version", &with(0, &old));
    let (reply, _) = handshake::daemon_hello(&hello, &secret, false);
    c.put("handshake", "client-daemon-reply", &with(2, &[&reply[..], &[0]].concat()));
    let (busy, _) = handshake::daemon_hello(&hello, &secret, true);
    c.put("handshake", "client-busy", &with(2, &busy));
    let (refused, _) = handshake::daemon_hello(&old, &secret, false);
    c.put("handshake", "client-bad-version", &with(2, &refused));

    c.put(
        "hosts",
        "format-2",
        b"# GustFS hosts file, format 2\ninstance 6f1c00aa11bb22cc33dd44ee55ff6677\nchunk_size 524288\n\
          mountdir /tmp/gust\ncheck_parent 0\n\
          daemon 0 node17 4242 /tmp/gust-root/d0 tcp:127.0.0.1:40111 unix:/tmp/gust-root/d0/daemon.sock\n\
          daemon 1 node18 4243 /tmp/gust-root/d1 tcp:[::1]:40112 rdma:node18:7 mem:d1\n",
    );
    c.put(
        "hosts",
        "placement-replicas",
        b"# GustFS hosts file, format 2\ninstance 6f1c00aa11bb22cc33dd44ee55ff6677\nchunk_size 524288\n\
          mountdir /tmp/gust\ncheck_parent 0\nplacement capacity\nreplicas 2\n\
          daemon 0 node17 4242 /tmp/gust-root/d0 tcp:127.0.0.1:40111 capacity:8388608\n\
          daemon 1 node18 4243 /tmp/gust-root/d1 tcp:[::1]:40112 capacity:33554432\n",
    );
    c.put(
        "hosts",
        "format-1",
        b"# GustFS hosts file, format 1\ninstance 6f1c\nchunk_size 4096\nmountdir /g\ncheck_parent 1\n\
          # a comment\ndaemon 0 n0 127.0.0.1:5000 /tmp/s.sock 11 /r0\ndaemon 1 n1 10.0.0.2:5000 - 12 /r1\n",
    );
    c.put("hosts", "secret", b"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n");
    c.put("hosts", "endpoints", b"tcp:127.0.0.1:1 unix:/s mem:x tcp:[fe80::1%2]:80 bogus:1");

    c.put("path", "normalize", b"//a/./b/../c/\n/a\n/z");
    c.put("path", "rebase", b"/a/b/c\n/a/b\n/x/y");
    c.put("path", "dots", b"/../..\n/.hidden/...\n/");
    c.put("path", "long-name", format!("/{}\n/", "x".repeat(256)).as_bytes());

    // Metadata record values (gust-store): each kind, a symlink's target, a format-1
    // value, a tombstone, a value of an unknown kind.
    use gust_store::record::{encode_record, VALUE_FIXED_BYTES_1, VALUE_FORMAT_1};
    let link = Record { kind: FileKind::Symlink, target: "../x/y".into(), ..rec() };
    c.put("record", "file", &encode_record(&rec()));
    c.put("record", "dir", &encode_record(&Record { kind: FileKind::Dir, nlink: 3, ..rec() }));
    c.put("record", "symlink", &encode_record(&link));
    c.put("record", "fifo", &encode_record(&Record { kind: FileKind::Fifo, ..rec() }));
    let xattrs = vec![("user.a".into(), b"1".to_vec()), ("user.s3.etag".into(), b"\"0123\"".to_vec())];
    c.put("record", "file-xattrs", &encode_record(&Record { xattrs, ..rec() }));
    let v2 = encode_record(&link);
    let mut v1 = vec![VALUE_FORMAT_1];
    v1.extend_from_slice(&v2[1..VALUE_FIXED_BYTES_1 - 2]);
    v1.extend_from_slice(&v2[VALUE_FIXED_BYTES_1 + 6..]);
    c.put("record", "format-1-symlink", &v1);
    c.put("record", "tombstone", b"");
    let mut bad = encode_record(&rec());
    bad[1] = 9;
    c.put("record", "unknown-kind", &bad);

    // Trace files (gust-trace): two threads' records, as a writer makes them, and the
    // same cut inside its last block.
    use gust_trace::codec::{encode_block, encode_header, encode_record as encode_trace, Header};
    let base_ns = 1_700_000_000_000_000_000;
    let header = Header {
        pid: 4242,
        base_ns,
        role: "client tar".into(),
        tracepoints: vec![(1, "open".into()), (2, "write".into()), (9, "md.create".into())],
    };
    let mut trace = encode_header(&header);
    for (tid, n) in [(7u32, 3u64), (8, 2)] {
        let mut payload = Vec::new();
        for i in 0..n {
            let r = gust_trace::Record {
                tp: 1 + i as u16,
                ts_ns: base_ns + 1000 * i,
                dur_ns: 5000,
                daemon: if i == 0 { None } else { Some(i as u32) },
                result: if i == 2 { -2 } else { 0 },
                arg: 0o100,
                offset: 4096 * i,
                size: 512,
                file_id: (0xfeed_u128 << 64) | i as u128,
                path: format!("/data/f{i}"),
            };
            encode_trace(&mut payload, &r, base_ns);
        }
        trace.extend_from_slice(&encode_block(tid, n as u32, &payload));
    }
    c.put("trace", "two-threads", &trace);
    c.put("trace", "cut-in-a-block", &trace[..trace.len() - 5]);
    c.put("trace", "header-only", &encode_header(&header));
    println!("seed corpus written to {}", c.0.display());
}
