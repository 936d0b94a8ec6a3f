use super::*;
use std::io::{Read, Write};

/// Providers whose endpoints tests here may open: tcp through rxm on loopback
/// (never another address), and shared memory.
fn bindable(provider: &str) -> Option<OfiAddr> {
    if let Some(why) = unavailable() {
        eprintln!("skipping: {why}");
        return None;
    }
    let address = if provider == "shm" { "-" } else { "127.0.0.1" };
    Some(OfiAddr { provider: provider.into(), address: address.into() })
}

#[test]
fn addresses_parse_and_encode_both_ways() {
    let a = OfiAddr::parse("tcp;ofi_rxm/127.0.0.1:7100").unwrap();
    assert_eq!(a.provider, "tcp;ofi_rxm");
    assert_eq!(a.to_string(), "tcp;ofi_rxm/127.0.0.1:7100");
    for bad in ["tcp", "/x", "tcp/", "tc p/1.2.3.4:5", "tcp/1.2.3.4 :5"] {
        assert!(OfiAddr::parse(bad).is_err(), "{bad}");
    }
    for text in ["127.0.0.1:7100", "[::1]:9"] {
        let b = encode(AddrKind::Socket, text).unwrap();
        assert_eq!(decode(AddrKind::Socket, &b), text);
    }
    assert_eq!(encode(AddrKind::Text, "fi_shm://77").unwrap(), b"fi_shm://77\0");
    assert_eq!(decode(AddrKind::Text, b"fi_shm://77\0\0"), "fi_shm://77");
    assert_eq!(encode(AddrKind::Opaque, "0x0aff").unwrap(), vec![0x0a, 0xff]);
    assert_eq!(decode(AddrKind::Opaque, &[0x0a, 0xff]), "0x0aff");
    assert!(encode(AddrKind::Opaque, "0x0g").is_err());
    assert!(encode(AddrKind::Socket, "fi_shm://1").is_err());
}

/// A request out, a reply of several pieces back, many connections at once, and
/// end of stream when the other side closes.
fn exchange(provider: &str) {
    let Some(at) = bindable(provider) else { return };
    let l = OfiListener::bind(&at).unwrap();
    let local = l.local().clone();
    assert_eq!(local.provider, provider);
    let server = std::thread::spawn(move || {
        for _ in 0..4 {
            let mut s = l.accept().unwrap();
            std::thread::spawn(move || {
                let mut n = [0u8; 8];
                s.read_exact(&mut n).unwrap();
                let n = u64::from_le_bytes(n) as usize;
                let reply: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
                s.write_all(&reply).unwrap();
                s.shutdown();
            });
        }
    });
    // 262,244: a whole piece and a tail small enough to go eagerly, which rxm
    // lets overtake the rendezvous piece before it (the numbers put it back).
    let sizes = [5usize, 262_244, 300_000, 3 << 20];
    let clients: Vec<_> = sizes
        .iter()
        .map(|&n| {
            let local = local.clone();
            std::thread::spawn(move || {
                let mut c = connect(&local, Duration::from_secs(10)).unwrap();
                c.set_timeout(Some(Duration::from_secs(30))).unwrap();
                c.write_all(&(n as u64).to_le_bytes()).unwrap();
                let mut all = Vec::new();
                c.read_to_end(&mut all).unwrap();
                assert_eq!(all.len(), n);
                assert!(all.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8), "bytes arrive in order");
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    server.join().unwrap();
}

#[test]
fn tcp_through_rxm_carries_streams() {
    exchange("tcp;ofi_rxm");
}

#[test]
fn shared_memory_carries_streams() {
    exchange("shm");
}

#[test]
fn connecting_to_nothing_times_out_with_the_address() {
    let Some(at) = bindable("tcp;ofi_rxm") else { return };
    // A port no one listens on, on loopback.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let to = OfiAddr { provider: at.provider, address: format!("127.0.0.1:{port}") };
    let t = std::time::Instant::now();
    let e = connect(&to, Duration::from_secs(2)).err().expect("nobody listens");
    assert!(e.to_string().contains(&to.to_string()), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_unknown_provider_is_named_in_the_error() {
    if unavailable().is_some() {
        return;
    }
    let e = OfiListener::bind(&OfiAddr { provider: "no-such-provider".into(), address: "127.0.0.1".into() })
        .err()
        .expect("no such provider");
    assert!(e.to_string().contains("no-such-provider"), "{e}");
}

/// A peer that sends damaged messages (too short, unknown kinds, CONNECTs with no
/// or a bogus address or one nothing listens at, data and closes for connections
/// that do not exist, pieces numbered far ahead) is ignored: the listener goes on
/// serving a proper client.
#[test]
fn damaged_messages_from_a_peer_are_dropped() {
    use fabric::{header, KIND_ACCEPT, KIND_CLOSE, KIND_CONNECT, KIND_DATA};
    let Some(at) = bindable("tcp;ofi_rxm") else { return };
    let l = OfiListener::bind(&at).unwrap();
    let local = l.local().clone();
    // Another endpoint of this process, outside the registry: the damaging peer.
    let evil = Fabric::open("tcp;ofi_rxm", Some("127.0.0.1")).unwrap();
    let to = encode(evil.ep.addr_kind(), &local.address).unwrap();
    let with = |mut h: Vec<u8>, body: &[u8]| {
        h.extend_from_slice(body);
        h
    };
    let mut far = header(KIND_DATA, 7);
    far[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    let damaged = vec![
        vec![1u8],
        vec![0u8; 15],
        header(99, 0),
        header(KIND_CONNECT, 0),
        with(header(KIND_CONNECT, 0), &[1, 2, 3]),
        with(header(KIND_CONNECT, 0), &[0u8; 8]),
        with(header(KIND_CONNECT, 0), &[7u8; 400]),
        with(with(header(KIND_CONNECT, 0), &5u64.to_le_bytes()), &[0xffu8; 3]),
        // Well formed, but nothing listens there: its ACCEPT cannot go out.
        with(with(header(KIND_CONNECT, 0), &6u64.to_le_bytes()), &sockaddr("127.0.0.1:1".parse().unwrap())),
        with(header(KIND_ACCEPT, 42), &[1, 2]),
        with(header(KIND_DATA, 42), b"for no one"),
        with(far, b"far ahead"),
        header(KIND_CLOSE, 42),
    ];
    for m in damaged {
        evil.send_raw(&to, m).unwrap();
    }
    // Each connection served on its own, as the daemon does: the damaged CONNECT
    // that named an unreachable address was accepted too, and sends nothing.
    std::thread::spawn(move || loop {
        let mut s = l.accept().unwrap();
        std::thread::spawn(move || {
            s.set_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut b = [0u8; 5];
            if s.read_exact(&mut b).is_ok() && &b == b"hello" {
                s.write_all(b"world").unwrap();
            }
        });
    });
    let mut c = connect(&local, Duration::from_secs(10)).unwrap();
    c.set_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"hello").unwrap();
    let mut b = [0u8; 5];
    c.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"world");
}
