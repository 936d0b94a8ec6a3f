//! A daemon's own client of other daemons: one connection per peer, one request at a
//! time, every step bounded by a short timeout. Daemons talk to each other only
//! where a guarantee needs it (ARCHITECTURE.md): this carries the lease heartbeats
//! (lease.rs); the node proxy has its own multiplexed links (proxy/link.rs).
//!
//! Not for: clients' requests (gust-client, with its pools, replicas and retries).

use gust_hosts::DaemonEntry;
use gust_proto::{decode, encode, handshake, read_frame, write_frame, Reply, Request, Response};
use gust_transport::Stream;
use std::io;
use std::time::Duration;

/// How a request to a peer ended.
#[derive(Debug)]
pub enum PeerAnswer {
    Reply(Reply),
    /// The connection was refused: nothing listens at the peer's address, the
    /// process is gone (its host answered for it).
    Refused,
    /// Anything else: a timeout, an unreachable network, a broken connection.
    Failed(String),
}

/// A connection to one peer daemon, opened on first use and again after a failure.
pub struct PeerLink {
    entry: DaemonEntry,
    stream: Option<Box<dyn Stream>>,
    next_request_id: u64,
}

impl PeerLink {
    pub fn new(entry: DaemonEntry) -> Self {
        PeerLink { entry, stream: None, next_request_id: 1 }
    }

    pub fn entry(&self) -> &DaemonEntry {
        &self.entry
    }

    /// Sends `req` and waits for its reply, `timeout` at most per step (connect,
    /// handshake, each read and write). Over the network endpoint always: a peer on
    /// the same host answers there too, and the Unix socket may be another test
    /// host's path.
    pub fn call(&mut self, secret: &[u8], req: &Request, timeout: Duration) -> PeerAnswer {
        if self.stream.is_none() {
            match self.connect(secret, timeout) {
                Ok(s) => self.stream = Some(s),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return PeerAnswer::Refused,
                Err(e) => return PeerAnswer::Failed(format!("connect: {e}")),
            }
        }
        let s = self.stream.as_mut().expect("connected above");
        let id = self.next_request_id;
        self.next_request_id += 1;
        let r = (|| -> Result<Reply, String> {
            write_frame(s, req.op(), id, &encode(req), &[]).map_err(|e| format!("send: {e}"))?;
            let mut bulk = Vec::new();
            let f = read_frame(s, &mut bulk).map_err(|e| format!("reply: {e}"))?;
            if f.header.request_id != id {
                return Err(format!("reply to request {} while waiting for {id}", f.header.request_id));
            }
            decode::<Reply>(&f.body).map_err(|e| format!("reply: {e}"))
        })();
        match r {
            Ok(reply) => PeerAnswer::Reply(reply),
            Err(e) => {
                // A late reply would be taken for the next request's: start afresh.
                self.stream = None;
                PeerAnswer::Failed(e)
            }
        }
    }

    fn connect(&self, secret: &[u8], timeout: Duration) -> io::Result<Box<dyn Stream>> {
        let ep = self
            .entry
            .network()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no network endpoint in the hosts file"))?;
        let mut s = gust_transport::connect(ep, timeout)?;
        s.set_timeout(Some(timeout))?;
        handshake::client(&mut s, secret).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(s)
    }
}

/// Whether a reply says the peer considers the asking daemon fenced; None if the
/// reply is no heartbeat answer (the peer is recovering from an older build, or
/// refused the request).
pub fn lease_answer(reply: &Reply) -> Option<bool> {
    match reply {
        Ok(Response::Lease { fenced }) => Some(*fenced),
        _ => None,
    }
}
