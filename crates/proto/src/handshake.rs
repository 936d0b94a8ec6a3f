//! Mutual challenge-response over the instance secret, run once per connection
//! before any frame:
//!
//! ```text
//! client -> daemon  "GUSTHELO" | version u16 | client_nonce[32]                 (42 B)
//! daemon -> client  status u8 | version u16 | daemon_nonce[32] | daemon_mac[32] (67 B)
//!                   daemon_mac = HMAC-SHA256(secret, "gust-daemon" | client_nonce | daemon_nonce)
//! client -> daemon  client_mac[32]
//!                   client_mac = HMAC-SHA256(secret, "gust-client" | daemon_nonce | client_nonce)
//! daemon -> client  status u8 (0 = accepted)
//! ```
//!
//! Each side proves knowledge of the secret without revealing it, and fresh nonces
//! on both sides stop replay. A daemon that does not know the secret cannot
//! impersonate one, and a client that does not know it gets a refusal.

use crate::PROTOCOL_VERSION;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::io::{self, Read, Write};

pub const HELLO_MAGIC: &[u8; 8] = b"GUSTHELO";
pub const SECRET_BYTES: usize = 32;
pub const STATUS_OK: u8 = 0;
pub const STATUS_BAD_VERSION: u8 = 1;
pub const STATUS_BAD_AUTH: u8 = 2;
pub const STATUS_BUSY: u8 = 3;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug)]
pub enum HandshakeError {
    Io(io::Error),
    NotGust,
    BadVersion {
        ours: u16,
        theirs: u16,
    },
    /// The peer does not know the instance secret (or we do not).
    BadAuth,
    /// The daemon refused because it is at its connection limit.
    Busy,
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "handshake i/o error: {e}"),
            HandshakeError::NotGust => write!(f, "peer is not a GustFS client (bad hello)"),
            HandshakeError::BadVersion { ours, theirs } => {
                write!(f, "protocol version mismatch: we speak {ours}, peer speaks {theirs}")
            }
            HandshakeError::BadAuth => write!(f, "authentication failed: the instance secrets differ"),
            HandshakeError::Busy => write!(f, "daemon refused the connection: too many connections"),
        }
    }
}

impl std::error::Error for HandshakeError {}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

fn mac(secret: &[u8], label: &[u8], a: &[u8], b: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any size");
    m.update(label);
    m.update(a);
    m.update(b);
    m
}

fn nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut n);
    n
}

/// Client side. On success the stream is ready for frames.
pub fn client<S: Read + Write>(s: &mut S, secret: &[u8]) -> Result<(), HandshakeError> {
    let cn = nonce();
    let mut hello = Vec::with_capacity(42);
    hello.extend_from_slice(HELLO_MAGIC);
    hello.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    hello.extend_from_slice(&cn);
    s.write_all(&hello)?;
    let mut sh = [0u8; 67];
    s.read_exact(&mut sh[..3])?;
    let theirs = u16::from_le_bytes([sh[1], sh[2]]);
    match sh[0] {
        STATUS_OK => {}
        STATUS_BAD_VERSION => return Err(HandshakeError::BadVersion { ours: PROTOCOL_VERSION, theirs }),
        STATUS_BUSY => return Err(HandshakeError::Busy),
        _ => return Err(HandshakeError::BadAuth),
    }
    s.read_exact(&mut sh[3..])?;
    let dn = &sh[3..35];
    let dmac = &sh[35..67];
    mac(secret, b"gust-daemon", &cn, dn).verify_slice(dmac).map_err(|_| HandshakeError::BadAuth)?;
    let cmac = mac(secret, b"gust-client", dn, &cn).finalize().into_bytes();
    s.write_all(&cmac)?;
    let mut st = [0u8; 1];
    s.read_exact(&mut st)?;
    if st[0] != STATUS_OK {
        return Err(HandshakeError::BadAuth);
    }
    Ok(())
}

/// Bytes of the client's hello and of its MAC: what a daemon waits for at each step.
pub const HELLO_BYTES: usize = 42;
pub const CLIENT_MAC_BYTES: usize = 32;

/// The daemon's side between its reply to the hello and the client's MAC.
pub struct DaemonHandshake {
    client_nonce: [u8; 32],
    daemon_nonce: [u8; 32],
}

/// The daemon's first step, without I/O (event-driven servers): the reply to send for
/// the client's hello, and the state for the second step unless the handshake ends
/// here (not a GustFS client, another version, or `busy`: refused politely).
pub fn daemon_hello(
    hello: &[u8; HELLO_BYTES],
    secret: &[u8],
    busy: bool,
) -> (Vec<u8>, Result<DaemonHandshake, HandshakeError>) {
    if &hello[..8] != HELLO_MAGIC {
        return (Vec::new(), Err(HandshakeError::NotGust));
    }
    let theirs = u16::from_le_bytes([hello[8], hello[9]]);
    let mut reply = Vec::with_capacity(67);
    if theirs != PROTOCOL_VERSION || busy {
        reply.push(if busy { STATUS_BUSY } else { STATUS_BAD_VERSION });
        reply.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        let e = if busy { HandshakeError::Busy } else { HandshakeError::BadVersion { ours: PROTOCOL_VERSION, theirs } };
        return (reply, Err(e));
    }
    let mut client_nonce = [0u8; 32];
    client_nonce.copy_from_slice(&hello[10..42]);
    let daemon_nonce = nonce();
    reply.push(STATUS_OK);
    reply.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    reply.extend_from_slice(&daemon_nonce);
    reply.extend_from_slice(&mac(secret, b"gust-daemon", &client_nonce, &daemon_nonce).finalize().into_bytes());
    (reply, Ok(DaemonHandshake { client_nonce, daemon_nonce }))
}

impl DaemonHandshake {
    /// The second step: the status byte to send for the client's MAC, and whether
    /// the client proved it knows the secret.
    pub fn finish(self, secret: &[u8], client_mac: &[u8; CLIENT_MAC_BYTES]) -> (u8, Result<(), HandshakeError>) {
        let ok = mac(secret, b"gust-client", &self.daemon_nonce, &self.client_nonce).verify_slice(client_mac).is_ok();
        if ok {
            (STATUS_OK, Ok(()))
        } else {
            (STATUS_BAD_AUTH, Err(HandshakeError::BadAuth))
        }
    }
}

/// Daemon side over a blocking stream. `busy` refuses politely (connection limit
/// reached).
pub fn daemon<S: Read + Write>(s: &mut S, secret: &[u8], busy: bool) -> Result<(), HandshakeError> {
    let mut hello = [0u8; HELLO_BYTES];
    s.read_exact(&mut hello)?;
    let (reply, next) = daemon_hello(&hello, secret, busy);
    if !reply.is_empty() {
        s.write_all(&reply)?;
    }
    let next = next?;
    let mut cmac = [0u8; CLIENT_MAC_BYTES];
    s.read_exact(&mut cmac)?;
    let (status, r) = next.finish(secret, &cmac);
    s.write_all(&[status])?;
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn run(cs: &'static [u8], ds: &'static [u8]) -> (Result<(), HandshakeError>, Result<(), HandshakeError>) {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || daemon(&mut b, ds, false));
        let c = client(&mut a, cs);
        drop(a);
        (c, t.join().unwrap())
    }

    #[test]
    fn same_secret_accepts() {
        let (c, d) = run(b"secret-one", b"secret-one");
        assert!(c.is_ok() && d.is_ok());
    }

    #[test]
    fn different_secret_refuses_both_ways() {
        let (c, d) = run(b"secret-one", b"secret-two");
        assert!(matches!(c, Err(HandshakeError::BadAuth)));
        // The client stops at the daemon's bad MAC, so the daemon sees a closed stream.
        assert!(d.is_err());
    }
}
