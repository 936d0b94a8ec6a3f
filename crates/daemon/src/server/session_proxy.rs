//! The node proxy's part of a session (crate::proxy): forwards are sent on and
//! answered here, within a bound on the workers waiting for them, and a connection
//! switched to multiplexed service hands its frames to the proxy's pool.

use super::{Bulk, Flow, Outcome, Session, Worker, BUFFER_KEEP_BYTES_MAX};
use crate::state::State;
use gust_proto::frame::Header;
use gust_proto::{decode_request, encode, Reply, Request, OP_FORWARD, OP_MULTIPLEX};
use tracing::warn;

impl Session {
    /// Whether this frame may be served now: a forward waits (the connection
    /// parks) while as many event-loop workers as the proxy allows are waiting
    /// for forwards of their own.
    pub(super) fn forward_room(&mut self, state: &State, h: &Header) -> bool {
        if h.op != OP_FORWARD || self.mux.is_some() || self.forward_place {
            return true;
        }
        let Some(proxy) = state.proxy.get() else { return true };
        self.forward_place = proxy.begin_forward();
        self.forward_place
    }

    /// The node proxy's part (crate::proxy), if this frame is one for it: a forward
    /// (sent on and answered here), the switch to multiplexed service, or a frame of
    /// a multiplexed connection (handed to the proxy's pool).
    pub(super) fn serve_proxied(
        &mut self,
        state: &State,
        w: &mut Worker,
        h: Header,
        body: &[u8],
        bulk_in: &[u8],
    ) -> Option<Flow> {
        let proxy = state.proxy.get()?;
        if let Some(mux) = &self.mux {
            if proxy.mux.submit(mux, h, body, bulk_in, self.stall_timeout) {
                return Some(Flow::Continue);
            }
            warn!("closing multiplexed connection from {}: no room for its requests in time", self.peer);
            return Some(Flow::Stop(Outcome::Close));
        }
        let (op, id) = (h.op, h.request_id);
        if op == OP_MULTIPLEX && self.stream.raw_fd().is_some() {
            // From now on every write on this connection is the pool's.
            let writer = match self.stream.try_clone() {
                Ok(s) => std::sync::Arc::new(crate::proxy::MuxWriter::new(s, self.stall_timeout)),
                Err(_) => return Some(Flow::Stop(Outcome::Close)),
            };
            state.metrics.count_op(op);
            let sent = crate::proxy::answer_multiplex(&writer, op, id);
            self.mux = Some(writer);
            return Some(if sent.is_ok() { Flow::Continue } else { Flow::Stop(Outcome::Close) });
        }
        if op != OP_FORWARD {
            return None;
        }
        state.metrics.count_op(op);
        let reply = match decode_request(op, body) {
            Ok(Request::Forward { target, op: inner, timeout_ms, body }) => {
                proxy.forward(state, target, inner, h.generation, timeout_ms, &body, bulk_in)
            }
            _ => Err(libc::EPROTO),
        };
        if std::mem::take(&mut self.forward_place) {
            proxy.end_forward();
            self.forward_ended = true;
        }
        let r = match reply {
            // The remote's reply body and bulk as they came.
            Ok((body, bulk)) => {
                w.bulk_out = bulk;
                self.send_frame(w, op, id, &body, Bulk::Worker)
            }
            Err(errno) => {
                let reply: Reply = Err(errno);
                self.send_frame(w, op, id, &encode(&reply), Bulk::None)
            }
        };
        if w.bulk_out.capacity() > BUFFER_KEEP_BYTES_MAX {
            w.bulk_out = Vec::new();
        }
        Some(match r {
            Ok(()) => Flow::Continue,
            Err(e) => {
                warn!("closing connection from {}: cannot send reply: {e}", self.peer);
                Flow::Stop(Outcome::Close)
            }
        })
    }
}
