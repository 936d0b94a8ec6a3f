//! The floor under one request, through gust-transport's own streams: PAIRS client
//! processes each do ITERS round trips (a request of BYTES, default 64, and a
//! 64-byte answer) with a server thread per connection in this process, over the
//! Unix socket, the shared-memory rings, TCP on loopback, or a libfabric endpoint
//! (what bench/uds_pingpong.c measures for bare sockets).
//!
//!   cargo run --release --example pingpong -- KIND PAIRS ITERS [BYTES]
//!   KIND: unix, shm, tcp, ofi-tcp (tcp;ofi_rxm on loopback), ofi-shm (libfabric's shm)
//!
//! Prints round trips per second (wall clock) and CPU microseconds per round trip
//! (user + system of every process, from getrusage): the second is what a busy
//! machine does not distort. GUST_SHM_SPIN_US / GUST_SHM_YIELD_US apply as usual.

use gust_transport::{connect, Endpoint, Listener};
use std::io::{Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

const ANSWER_BYTES: usize = 64;

fn cpu_seconds(who: i32) -> f64 {
    // SAFETY: getrusage into a struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--client") {
        let ep: Endpoint = args[2].parse().expect("endpoint");
        let iters: u64 = args[3].parse().expect("iterations");
        let bytes: usize = args[4].parse().expect("request bytes");
        let mut s = connect(&ep, Duration::from_secs(5)).expect("connect");
        let mut buf = vec![0u8; bytes.max(ANSWER_BYTES)];
        for _ in 0..iters {
            s.write_all(&buf[..bytes]).expect("send");
            s.read_exact(&mut buf[..ANSWER_BYTES]).expect("receive");
        }
        return;
    }
    let usage = "usage: pingpong unix|shm|tcp|ofi-tcp|ofi-shm PAIRS ITERS [BYTES]";
    let kind = args.get(1).expect(usage).clone();
    let pairs: usize = args.get(2).and_then(|a| a.parse().ok()).expect(usage);
    let iters: u64 = args.get(3).and_then(|a| a.parse().ok()).expect(usage);
    let bytes: usize = args.get(4).map_or(Some(ANSWER_BYTES), |a| a.parse().ok()).expect(usage);
    let t0 = Instant::now();
    let (cpu_self0, cpu_children0) = (cpu_seconds(libc::RUSAGE_SELF), cpu_seconds(libc::RUSAGE_CHILDREN));
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for i in 0..pairs {
        let path = std::env::temp_dir().join(format!("gust-pingpong-{}-{i}.{kind}", std::process::id()));
        let ep: Endpoint = match kind.as_str() {
            "unix" => Endpoint::Unix(path),
            "shm" => Endpoint::Shm(path),
            "tcp" => "tcp:127.0.0.1:0".parse().expect("endpoint"),
            "ofi-tcp" => "ofi:tcp;ofi_rxm/127.0.0.1".parse().expect("endpoint"),
            "ofi-shm" => "ofi:shm/-".parse().expect("endpoint"),
            _ => panic!("{usage}"),
        };
        let l = Listener::bind(&ep).expect("bind");
        let at = l.local().to_string();
        let exe = std::env::current_exe().expect("own path");
        let client_args = ["--client", &at, &iters.to_string(), &bytes.to_string()];
        clients.push(Command::new(exe).args(client_args).spawn().expect("spawn"));
        servers.push(std::thread::spawn(move || {
            let mut s = l.accept().expect("accept");
            let mut buf = vec![0u8; bytes.max(ANSWER_BYTES)];
            while s.read_exact(&mut buf[..bytes]).is_ok() {
                if s.write_all(&buf[..ANSWER_BYTES]).is_err() {
                    break;
                }
            }
        }));
    }
    for mut c in clients {
        assert!(c.wait().expect("wait").success(), "a client failed");
    }
    let wall = t0.elapsed().as_secs_f64();
    for s in servers {
        s.join().expect("server thread");
    }
    let cpu = cpu_seconds(libc::RUSAGE_SELF) - cpu_self0 + cpu_seconds(libc::RUSAGE_CHILDREN) - cpu_children0;
    let trips = (pairs as u64 * iters) as f64;
    println!(
        "{kind}: {pairs} pair(s), {:.0} round trips/s, {:.1} µs CPU per round trip",
        trips / wall,
        cpu / trips * 1e6
    );
}
