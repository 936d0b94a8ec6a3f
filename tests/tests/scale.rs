//! A daemon under many clients: ten thousand connections served by a fixed pool of
//! threads, stalled and hostile peers that cost bounded memory and hold up no one,
//! and a bound on request memory that holds under a flood of maximum-size frames.
//! Loopback only; every loop is bounded.

mod common;

use gust_client::ClientOptions;
use gust_e2e::{wait_until, Instance};
use gust_proto::frame::{Header, HEADER_BYTES, OP_RESPONSE_BIT};
use gust_proto::handshake::{self, HELLO_MAGIC};
use gust_proto::{decode, encode, Reply, Request, Response, Span, BULK_BYTES_MAX, PROTOCOL_VERSION};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 10_000;

/// A field of /proc/PID/status, as a number (kB for sizes).
fn proc_status(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(&format!("{key}:"))).unwrap_or_else(|| panic!("no {key}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// This test process needs a descriptor per connection too.
fn raise_descriptor_limit(need: u64) {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        assert!(r.rlim_max >= need, "descriptor limit {} is below the {need} this test needs", r.rlim_max);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

fn authed(addr: &str, secret: &[u8]) -> TcpStream {
    let mut s = connect(addr);
    handshake::client(&mut s, secret).expect("handshake");
    s
}

fn frame(req: &Request, id: u64, bulk_len: u32) -> Vec<u8> {
    let body = encode(req);
    let h = Header {
        version: PROTOCOL_VERSION,
        op: req.op(),
        request_id: id,
        body_len: body.len() as u32,
        bulk_len,
        generation: 0,
    };
    let mut f = h.encode().to_vec();
    f.extend_from_slice(&body);
    f
}

/// Reads one reply frame; returns its id, decoded reply and bulk length.
fn reply(s: &mut TcpStream) -> (u64, Reply, u32) {
    let mut hb = [0u8; HEADER_BYTES];
    s.read_exact(&mut hb).unwrap();
    let h = Header::decode(&hb).unwrap();
    assert!(h.op & OP_RESPONSE_BIT != 0);
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).unwrap();
    let mut bulk = vec![0u8; h.bulk_len as usize];
    s.read_exact(&mut bulk).unwrap();
    (h.request_id, decode(&body).unwrap(), h.bulk_len)
}

#[test]
fn ten_thousand_connections_are_served_by_a_fixed_pool_of_threads() {
    raise_descriptor_limit(CONNECTIONS as u64 + 512);
    let inst = Instance::start_with(1, &["--threads", "8"]);
    let pid = inst.daemon_pid(0);
    let addr = inst.hosts_file().daemons[0].tcp_addr();
    let secret = gust_hosts::load_secret(&inst.hosts).unwrap();
    let threads_before = proc_status(pid, "Threads");
    let rss_before_kb = proc_status(pid, "VmRSS");

    // Open them from 4 threads; every one passes the handshake.
    let t0 = Instant::now();
    let mut conns: Vec<TcpStream> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4)
            .map(|_| sc.spawn(|| (0..CONNECTIONS / 4).map(|_| authed(&addr, &secret)).collect::<Vec<_>>()))
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let opened = t0.elapsed();
    // Every connection is served: a request on each, all sent before any reply is read.
    let t1 = Instant::now();
    for (i, s) in conns.iter_mut().enumerate() {
        let req = if i % 2 == 0 { Request::Ping } else { Request::Stat { path: "/".into() } };
        s.write_all(&frame(&req, i as u64, 0)).unwrap();
    }
    for (i, s) in conns.iter_mut().enumerate() {
        let (id, r, _) = reply(s);
        assert_eq!(id, i as u64);
        match r {
            Ok(Response::Ok) if i % 2 == 0 => {}
            Ok(Response::Record(_)) if i % 2 == 1 => {}
            other => panic!("connection {i}: {other:?}"),
        }
    }
    let served = t1.elapsed();
    let threads = proc_status(pid, "Threads");
    let rss_kb = proc_status(pid, "VmRSS");
    let open = inst.client().daemon_stats(0).unwrap().connections_open;
    eprintln!(
        "{CONNECTIONS} connections: opened in {opened:.1?}, one request each served in {served:.1?}; \
         daemon threads {threads_before} -> {threads}, RSS {} -> {} MiB ({:.1} KiB per connection)",
        rss_before_kb / 1024,
        rss_kb / 1024,
        (rss_kb.saturating_sub(rss_before_kb)) as f64 / CONNECTIONS as f64
    );
    assert!(open >= CONNECTIONS as u64, "daemon counts {open} open connections");
    // No thread per connection: the pool is fixed (RocksDB may start a background
    // thread or two meanwhile).
    assert!(threads <= threads_before + 4, "threads grew with connections: {threads_before} -> {threads}");
    // A connection costs its session and the kernel's buffers, not a buffer pair
    // of its own: under 8 KiB of daemon memory each (a thread per connection with
    // 64 KiB buffers each way would take over 128 KiB).
    let per_conn_kb = rss_kb.saturating_sub(rss_before_kb) / CONNECTIONS as u64;
    assert!(per_conn_kb < 8, "{per_conn_kb} KiB of daemon memory per idle connection");
    drop(conns);
    // Closed connections leave the count.
    let c = inst.client();
    assert!(
        wait_until(Duration::from_secs(20), || c.daemon_stats(0).unwrap().connections_open < 50),
        "connections not released: {}",
        c.daemon_stats(0).unwrap().connections_open
    );
}

#[test]
fn stalled_and_greedy_peers_hold_up_no_one_and_are_cut_off() {
    // Two workers only: a design where a stalled peer holds a worker would stop here.
    let inst = Instance::start_with(1, &["--threads", "2", "--stall-timeout", "3"]);
    let addr = inst.hosts_file().daemons[0].tcp_addr();
    let secret = gust_hosts::load_secret(&inst.hosts).unwrap();
    // Peers that connect and say nothing, or half a hello.
    let mut silent: Vec<TcpStream> = (0..100).map(|_| connect(&addr)).collect();
    let mut half_hello: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = connect(&addr);
            s.write_all(&HELLO_MAGIC[..5]).unwrap();
            s
        })
        .collect();
    // Authenticated peers that send half a header, or a header and part of a 1 MiB
    // write, then nothing.
    let w = Request::Write { file_id: 9, spans: vec![Span { offset: 0, len: 1 << 20 }], sums: vec![] };
    let mut half_frames: Vec<TcpStream> = (0..100)
        .map(|i| {
            let mut s = authed(&addr, &secret);
            let f = frame(&w, 1, 1 << 20);
            let cut = if i % 2 == 0 { 10 } else { f.len() };
            s.write_all(&f[..cut]).unwrap();
            if i % 2 == 1 {
                s.write_all(&[5u8; 4096]).unwrap();
            }
            s
        })
        .collect();
    // Greedy peers: 1 MiB reads, pipelined, replies never taken.
    let dir_w = Request::Write { file_id: 77, spans: vec![Span { offset: 0, len: 1 << 20 }], sums: vec![] };
    let mut setup = authed(&addr, &secret);
    setup.write_all(&frame(&dir_w, 1, 1 << 20)).unwrap();
    setup.write_all(&vec![3u8; 1 << 20]).unwrap();
    assert!(matches!(reply(&mut setup).1, Ok(Response::Written(_))));
    let r = Request::Read { file_id: 77, spans: vec![Span { offset: 0, len: 1 << 20 }] };
    let mut greedy: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = authed(&addr, &secret);
            for id in 0..8 {
                s.write_all(&frame(&r, id, 0)).unwrap();
            }
            s
        })
        .collect();

    // Meanwhile a well-behaved client works at full speed.
    let c = inst.client_with(ClientOptions { rpc_timeout: Duration::from_secs(5), ..Default::default() });
    let t0 = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..200 {
        let t = Instant::now();
        let p = format!("/f{i}");
        common::put(&c, &p, &common::pattern(i as u64, 10_000));
        assert_eq!(common::get(&c, &p), common::pattern(i as u64, 10_000));
        slowest = slowest.max(t.elapsed());
    }
    eprintln!("200 create+write+read among 340 stalled peers: {:.1?}, slowest {slowest:.1?}", t0.elapsed());
    assert!(slowest < Duration::from_secs(2), "a well-behaved client waited {slowest:?}");

    // Past the handshake timeout (5 s) and the stall timeout (3 s), every stalled
    // peer is cut off: its socket reads end of stream.
    let open_stalled = inst.client().daemon_stats(0).unwrap().connections_open;
    assert!(open_stalled >= 300, "{open_stalled} connections open while peers stall");
    let closed = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = vec![0u8; 1 << 16];
        loop {
            match s.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue, // replies or a refusal before the close
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    };
    for (what, v) in [("silent", &mut silent), ("half hello", &mut half_hello), ("half frame", &mut half_frames)] {
        for s in v.iter_mut() {
            assert!(closed(s), "a {what} peer was not cut off");
        }
    }
    // Greedy peers that never read are cut off too, once their reply stalls.
    let c2 = inst.client();
    assert!(
        wait_until(Duration::from_secs(15), || c2.daemon_stats(0).unwrap().connections_open < 20),
        "stalled connections still open: {}",
        c2.daemon_stats(0).unwrap().connections_open
    );
    drop(greedy.drain(..));
    common::put(&c, "/after", b"still serving");
    assert_eq!(common::get(&c, "/after"), b"still serving");
}

#[test]
fn request_memory_stays_under_its_bound_with_a_thousand_maximum_frames() {
    const PEERS: usize = 1000;
    const CAP_MIB: u64 = 64;
    raise_descriptor_limit(PEERS as u64 + 512);
    let inst = Instance::start_with(1, &["--threads", "4", "--request-memory", "64MiB"]);
    let pid = inst.daemon_pid(0);
    let addr = inst.hosts_file().daemons[0].tcp_addr();
    let secret = gust_hosts::load_secret(&inst.hosts).unwrap();
    let c = inst.client();
    common::put(&c, "/warm", &common::pattern(1, 1 << 20));
    let rss_before_kb = proc_status(pid, "VmRSS");

    // Every peer sends the header of a maximum-size write, then its bulk bytes as
    // fast as its socket takes them.
    let len = BULK_BYTES_MAX;
    let w = Request::Write { file_id: 5, spans: vec![Span { offset: 0, len }], sums: vec![] };
    let mut peers: Vec<(TcpStream, usize)> = (0..PEERS)
        .map(|i| {
            let mut s = authed(&addr, &secret);
            s.write_all(&frame(&w, i as u64, len)).unwrap();
            s.set_nonblocking(true).unwrap();
            (s, 0)
        })
        .collect();
    let data = vec![0x5au8; 1 << 20];
    let t0 = Instant::now();
    let (mut sent_total, mut completed) = (0u64, 0usize);
    let mut probe_slowest = Duration::ZERO;
    while t0.elapsed() < Duration::from_secs(8) {
        for (s, sent) in peers.iter_mut() {
            while *sent < len as usize {
                let n = (len as usize - *sent).min(data.len());
                match s.write(&data[..n]) {
                    Ok(k) => {
                        *sent += k;
                        sent_total += k as u64;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("peer write: {e}"),
                }
            }
            if *sent == len as usize {
                *sent += 1; // counted once
                completed += 1;
            }
        }
        // Small requests never wait for request memory.
        let t = Instant::now();
        assert_eq!(common::get(&c, "/warm").len(), 1 << 20);
        probe_slowest = probe_slowest.max(t.elapsed());
    }
    let hwm_kb = proc_status(pid, "VmHWM");
    let grew_mib = hwm_kb.saturating_sub(rss_before_kb) / 1024;
    eprintln!(
        "{PEERS} peers sending {} MiB frames for 8 s: {} MiB sent, {completed} frames whole; daemon peak RSS \
         grew {grew_mib} MiB over {} MiB (bound {CAP_MIB} MiB); slowest small read {probe_slowest:.1?}",
        len >> 20,
        sent_total >> 20,
        rss_before_kb / 1024
    );
    // Only frames that fit under the bound are held: peak growth stays within the
    // bound plus the workers' buffers and allocator slack (stated: 48 MiB). Without
    // the bound, every peer's frame would be allocated and filled in parallel.
    assert!(grew_mib <= CAP_MIB + 48, "daemon memory grew {grew_mib} MiB under a {CAP_MIB} MiB bound");
    assert!(sent_total > 4 * (len as u64), "the flood barely ran ({sent_total} bytes): the test proves nothing");
    assert!(probe_slowest < Duration::from_secs(2), "a small read waited {probe_slowest:?}");
    drop(peers);
    common::put(&c, "/after", b"still serving");
    assert_eq!(common::get(&c, "/after"), b"still serving");
}
