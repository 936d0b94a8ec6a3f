//! The connection handshake from either side, with the peer's bytes from the input.
//!
//! Input: a flags byte (bit 0: the daemon is busy; bit 1: play the client instead of
//! the daemon; bit 2: on the daemon side, answer with an honest client's MAC), a
//! secret length (mod 65), the secret, then what the peer sends.
//!
//! Daemon side (`daemon_hello`, `DaemonHandshake::finish`; short input is padded with
//! zeros): a hello that is not GustFS gets no reply, another version or a busy daemon
//! a 3-byte refusal, a good one a 67-byte reply carrying the right MAC; then an
//! honest client's MAC is accepted and any other refused. Client side (`client` over
//! a stream whose reads come from the input): it must fail (the input cannot know the
//! MAC over the client's fresh nonce), and it writes only its hello and its MAC.
#![no_main]

use gust_proto::handshake::{self, DaemonHandshake, CLIENT_MAC_BYTES, HELLO_BYTES, HELLO_MAGIC, STATUS_BAD_AUTH};
use gust_proto::PROTOCOL_VERSION;
use hmac::{Hmac, Mac};
use libfuzzer_sys::fuzz_target;
use sha2::Sha256;
use std::io::{self, Read, Write};

fn mac(secret: &[u8], label: &[u8], a: &[u8], b: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    m.update(label);
    m.update(a);
    m.update(b);
    m.finalize().into_bytes().into()
}

/// A stream whose reads come from the input (in pieces) and whose writes are kept.
struct Peer<'a> {
    input: &'a [u8],
    piece: usize,
    written: Vec<u8>,
}

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.piece).min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.written.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn daemon_side(secret: &[u8], busy: bool, honest: bool, peer: &[u8]) {
    let mut hello = [0u8; HELLO_BYTES];
    let n = peer.len().min(HELLO_BYTES);
    hello[..n].copy_from_slice(&peer[..n]);
    let mut cmac = [0u8; CLIENT_MAC_BYTES];
    let rest = &peer[n..];
    let m = rest.len().min(CLIENT_MAC_BYTES);
    cmac[..m].copy_from_slice(&rest[..m]);

    let (reply, next) = handshake::daemon_hello(&hello, secret, busy);
    if &hello[..8] != HELLO_MAGIC {
        assert!(reply.is_empty() && next.is_err(), "no reply to a stranger");
        return;
    }
    assert_eq!(&reply[1..3], &PROTOCOL_VERSION.to_le_bytes());
    let theirs = u16::from_le_bytes([hello[8], hello[9]]);
    let next: DaemonHandshake = match next {
        Err(_) => {
            assert!(busy || theirs != PROTOCOL_VERSION, "refused a good hello");
            assert_eq!(reply.len(), 3);
            assert_ne!(reply[0], 0);
            return;
        }
        Ok(next) => next,
    };
    assert!(!busy && theirs == PROTOCOL_VERSION);
    assert_eq!(reply.len(), 67);
    assert_eq!(reply[0], 0);
    let dn = &reply[3..35];
    assert_eq!(&reply[35..67], &mac(secret, b"gust-daemon", &hello[10..42], dn), "the daemon's MAC");
    if honest {
        let good = mac(secret, b"gust-client", dn, &hello[10..42]);
        let (status, r) = next.finish(secret, &good);
        assert!(status == 0 && r.is_ok(), "an honest client is accepted");
    } else {
        let (status, r) = next.finish(secret, &cmac);
        assert!(status == STATUS_BAD_AUTH && r.is_err(), "a guessed MAC is refused");
    }
}

fn client_side(secret: &[u8], peer: &[u8]) {
    let mut s = Peer { input: peer, piece: 1 + peer.len() % 67, written: Vec::new() };
    let r = handshake::client(&mut s, secret);
    assert!(r.is_err(), "the input cannot know the MAC over a fresh nonce");
    assert_eq!(&s.written[..8], HELLO_MAGIC);
    assert!(s.written.len() == HELLO_BYTES || s.written.len() == HELLO_BYTES + CLIENT_MAC_BYTES);
}

fuzz_target!(|data: &[u8]| {
    let Some((&[flags, len], rest)) = data.split_first_chunk::<2>() else { return };
    let len = (len as usize % 65).min(rest.len());
    let (secret, peer) = rest.split_at(len);
    if flags & 2 == 0 {
        daemon_side(secret, flags & 1 != 0, flags & 4 != 0, peer);
    } else {
        client_side(secret, peer);
    }
});
