//! Round trips over an endpoint kind, for comparing transports by hand:
//! `fabric_pingpong ENDPOINT-TO-BIND [ROUNDS] [REQUEST-BYTES]`, e.g.
//! `tcp:127.0.0.1:0`, `ofi:tcp;ofi_rxm/127.0.0.1`, `ofi:shm/-`: a request of
//! REQUEST-BYTES (default 64), a 64-byte answer. Prints microseconds per round trip.
use gust_transport::{connect, Endpoint, Listener};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ep: Endpoint = args.get(1).expect("endpoint to bind").parse().expect("an endpoint");
    let rounds: usize = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(2000);
    let size: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(64);
    let l = Listener::bind(&ep).expect("bind");
    let at = l.local().clone();
    std::thread::spawn(move || {
        let mut s = l.accept().expect("accept");
        let mut b = vec![0u8; size];
        while s.read_exact(&mut b).is_ok() {
            if s.write_all(&b[..64]).is_err() {
                break;
            }
        }
    });
    let mut c = connect(&at, Duration::from_secs(5)).expect("connect");
    let mut b = vec![7u8; size];
    let t = Instant::now();
    for _ in 0..rounds {
        c.write_all(&b).unwrap();
        c.read_exact(&mut b[..64]).unwrap();
    }
    println!("{at}: {:.1} us per round trip", t.elapsed().as_secs_f64() * 1e6 / rounds as f64);
}
