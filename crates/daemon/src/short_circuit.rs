//! Short-circuit I/O, the daemon's side: a client process on this node asks, at
//! the socket `<root directory>/short-circuit.sock`, for the local file of a
//! file's chunks here, and gets its two descriptors (data and sums, SCM_RIGHTS;
//! gust-proto's `short_circuit` has the messages). It then reads and writes the
//! file itself, without a request per transfer, verifying and summing its blocks
//! as the chunk store does (gust-store's `chunk_file`).
//!
//! The daemon keeps control through a grant on the file's data key
//! (`gust_proto::path::data_key`, grants.rs): one client holds it at a time; any
//! request that reads or changes the file's chunks here (`Request::chunk_files`,
//! whoever sends it) recalls it first, and the holder answers only once its
//! transfers under way have ended and it has closed the descriptors. A holder that
//! does not answer has its lease waited out, as for any grant. Sizes, metadata,
//! permissions and placement stay with the daemons: the holder sends its size
//! updates as every writer does.
//!
//! Who gets a file: a process of the user the daemon runs as (SO_PEERCRED; the
//! root directory is that user's alone anyway), with a callback connection to this
//! daemon (so that it can be recalled), in an instance without copies (a copy's
//! writes go through the daemons that fence them) and without a declared capacity
//! (the store counts the bytes it writes). Anything else is refused with an errno
//! and the client uses requests.

use crate::state::State;
use gust_proto::short_circuit::{self as sc, Ask};
use gust_transport::handoff;
use std::io;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bound on connections served at once (a thread each; a client process keeps
/// one per daemon of its node).
const CONNECTIONS_MAX: usize = 256;

/// Binds the socket at `path` and serves it on a thread of its own.
pub(crate) fn start(state: Arc<State>, path: &Path, replicas: u32) -> io::Result<PathBuf> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    let served = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new().name("gust-short-circuit".into()).spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            if served.load(Ordering::Relaxed) >= CONNECTIONS_MAX {
                continue; // dropped: the client uses requests
            }
            let (state, served) = (state.clone(), served.clone());
            served.fetch_add(1, Ordering::Relaxed);
            let spawned = std::thread::Builder::new().name("gust-sc-conn".into()).spawn(move || {
                serve(&state, conn, replicas);
                served.fetch_sub(1, Ordering::Relaxed);
            });
            if spawned.is_err() {
                tracing::warn!("short-circuit: no thread for a connection; the client uses requests");
            }
        }
    })?;
    Ok(path.to_path_buf())
}

/// One client's connection: its asks, one at a time, until it closes.
fn serve(state: &State, conn: UnixStream, replicas: u32) {
    if let Err(why) = handoff::same_user(&conn) {
        tracing::warn!("short-circuit: {why}");
        return;
    }
    let mut buf = [0u8; sc::ASK_BYTES];
    loop {
        let n = match handoff::recv(&conn, &mut buf) {
            Ok((0, _)) => return,
            Ok((n, _)) => n,
            Err(e) => {
                tracing::debug!("short-circuit: connection ended: {e}");
                return;
            }
        };
        let Some(ask) = Ask::decode(&buf[..n]) else {
            tracing::warn!("short-circuit: a malformed ask ({n} bytes): connection closed");
            return;
        };
        let sent = match hand(state, ask, replicas) {
            Ok(local) => {
                let (data, sums) = local.files();
                handoff::send(&conn, &sc::encode_answer(0), &[data.as_raw_fd(), sums.as_raw_fd()])
            }
            Err(e) => handoff::send(&conn, &sc::encode_answer(e), &[]),
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Grants `ask`'s client the local file of its file (recalling any other
/// holder first) and opens it, or says why not.
fn hand(state: &State, ask: Ask, replicas: u32) -> Result<Arc<gust_store::chunk_file::Local>, i32> {
    if replicas > 1 || state.chunks.has_quota() {
        return Err(libc::EOPNOTSUPP);
    }
    if crate::dispatch::out_of_service(state) {
        return Err(libc::EHOSTDOWN);
    }
    // A bandwidth limit paces the requests this daemon serves; a client's own
    // transfers would escape it (qos.rs). Asked again later: a limit may be lifted.
    if state.qos.limits_bandwidth() {
        return Err(libc::EBUSY);
    }
    // Only a client that can be recalled.
    let holder = state.grants.holder(ask.client).filter(|h| h.leased()).ok_or(libc::ENOLINK)?;
    state.grants.handing_data();
    let key = gust_proto::path::data_key(ask.file_id);
    let change = state.grants.begin_keys(vec![(key.clone(), Some(ask.client))]);
    let granted = state.grants.grant(&key, &holder);
    state.grants.end_change(change, false);
    if granted == crate::grants::Grant::No {
        return Err(libc::EBUSY);
    }
    match state.chunks.local_file(ask.file_id, true) {
        Ok(Some(local)) => Ok(local),
        Ok(None) => unreachable!("create=true always yields a file"),
        Err(e) => {
            state.grants.ungrant(&key, &holder);
            Err(e)
        }
    }
}
