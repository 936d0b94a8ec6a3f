//! Requests sent by hand on a raw, authenticated connection to a daemon
//! (`Instance::authed`): for tests of malformed input and of states a client
//! would not produce by itself (a parity cell written behind its stripe's back).

use gust_proto::frame::{Header, HEADER_BYTES, OP_RESPONSE_BIT};
use gust_proto::{decode, encode, Reply, Request, PROTOCOL_VERSION};
use std::io::{Read, Write};
use std::net::TcpStream;

/// A frame header of this version, request id 7.
pub fn header(op: u16, body_len: u32, bulk_len: u32) -> [u8; HEADER_BYTES] {
    Header { version: PROTOCOL_VERSION, op, request_id: 7, body_len, bulk_len, generation: 0 }.encode()
}

/// Sends a frame: header, body, bulk.
pub fn send_req(s: &mut TcpStream, op: u16, body: &[u8], bulk: &[u8]) {
    s.write_all(&header(op, body.len() as u32, bulk.len() as u32)).unwrap();
    s.write_all(body).unwrap();
    s.write_all(bulk).unwrap();
}

/// Sends `req` with `bulk` and reads its reply.
pub fn call(s: &mut TcpStream, req: &Request, bulk: &[u8]) -> Reply {
    send_req(s, req.op(), &encode(req), bulk);
    read_reply(s, req.op()).expect("a reply")
}

/// The reply to a request of op `op` (its bulk read and dropped); None if the
/// connection ended first.
pub fn read_reply(s: &mut TcpStream, op: u16) -> Option<Reply> {
    let mut hb = [0u8; HEADER_BYTES];
    s.read_exact(&mut hb).ok()?;
    let h = Header::decode(&hb).unwrap();
    assert_eq!(h.op, op | OP_RESPONSE_BIT);
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).unwrap();
    let mut bulk = vec![0u8; h.bulk_len as usize];
    s.read_exact(&mut bulk).unwrap();
    Some(decode(&body).unwrap())
}
