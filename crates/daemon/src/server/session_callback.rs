//! A client's `callback` connection (crate::grants): the session answers the
//! request, then hands the stream over to a gust-rpc connection, on which this
//! daemon sends recalls and reads their answers, and leaves the event loop.

use super::{Bulk, Flow, Outcome, Session, Worker};
use crate::state::State;
use gust_proto::{encode, Reply, Response};
use std::sync::Arc;

impl Session {
    pub(super) fn become_callback(
        &mut self,
        state: &State,
        op: u16,
        id: u64,
        client: u64,
        claims: bool,
        shared: bool,
    ) -> Flow {
        let refuse = |s: &mut Session, errno: i32| {
            let reply: Reply = Err(errno);
            let mut w = Worker::new();
            match s.send_frame(&mut w, op, id, &encode(&reply), Bulk::None) {
                Ok(()) => Flow::Continue,
                Err(_) => Flow::Stop(Outcome::Close),
            }
        };
        // Only a socket can leave the event loop (shared memory is served by a thread).
        if self.stream.raw_fd().is_none() || !self.pending.is_empty() {
            return refuse(self, libc::ENOTSUP);
        }
        let Some(holder) = state.grants.hello(client) else { return refuse(self, libc::EBUSY) };
        holder.claims.store(claims, std::sync::atomic::Ordering::Relaxed);
        holder.shared.store(shared, std::sync::atomic::Ordering::Relaxed);
        let Ok(s) = self.stream.try_clone() else { return Flow::Stop(Outcome::Close) };
        // Blocking from now on, every write bounded (a recall's caller bounds its wait).
        if s.set_nonblocking(false).is_err() || s.set_timeout(Some(crate::grants::LEASE)).is_err() {
            return Flow::Stop(Outcome::Close);
        }
        let (grants, locks) = (state.grants.clone(), state.locks.clone());
        let mut opts = gust_rpc::Options::new(crate::grants::LEASE);
        opts.name = "gust-callback";
        opts.on_end = Some(Arc::new(move |by_peer| {
            // A shared holder's grants serve processes that may still read them:
            // they are waited out like a silent holder's.
            grants.link_ended(client, by_peer && !shared);
            // Locks last as long as the connection, whoever ended it.
            locks.link_ended(client);
        }));
        let Ok(conn) = gust_rpc::Connection::established(s, opts) else { return Flow::Stop(Outcome::Close) };
        // A client opens a new callback connection only once it lost the old one,
        // and forgot its locks with it: whatever the old one still holds goes.
        state.locks.release_client(client);
        // The link is the client's before the answer leaves: its next request, on
        // another connection, may be granted.
        let conn = state.grants.set_link(&holder, conn);
        let _ = conn.reply(op, id, &Ok(Response::Ok));
        // The stream is the connection's now: the session ends without shutting it.
        self.detached = true;
        Flow::Stop(Outcome::Close)
    }
}
