//! The node cache's holder: a client of the instance that runs in the node's
//! first daemon (the lowest id on its host), takes grants for what the node's
//! processes read, and keeps them in the table they map (see mod.rs).
//!
//! Threads: one accepts the processes' connections on the socket, one per
//! connection reads its messages of paths, one looks the paths up and writes the
//! table, one keeps the leases (published in the table for the readers, renewed
//! with a ping when half gone). Recalls are answered on the client's callback
//! threads, which take the entry out of the table first.
//!
//! Not for: what readers do (mod.rs), the table's layout (table.rs).

use super::table::{mono_ns, Table, Writer, BYTES_MIN};
use super::{hint_paths, Recent, ANSWER_BYTES, ANSWER_MAGIC, HINT_BYTES_MAX, SOCKET_NAME};
use crate::rpc::Call;
use crate::{Client, ClientOptions};
use gust_proto::{Record, Request, Response};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Paths looked up in one batch.
const FETCH_BATCH: usize = 64;
/// Messages of paths waiting for the fetching thread; more are dropped (they
/// are hints).
const QUEUE_MESSAGES: usize = 1024;
/// Processes connected at once.
const CONNECTIONS_MAX: usize = 1024;
/// How often the leases are published and renewed.
const LEASE_TICK: Duration = Duration::from_millis(50);
/// A path recalled from the holder, or not granted to it, is not looked up again
/// for this long: one that others keep changing would cost a lookup and a recall
/// each time and serve nobody.
const CONTENDED_FOR: Duration = Duration::from_secs(5);
/// Bound on the paths remembered as contended (past it, the oldest go).
const CONTENDED_MAX: usize = 1 << 16;

/// What a daemon tells the holder when it serves.
pub struct Serving {
    pub daemon_id: u32,
    pub rootdir: PathBuf,
    pub hosts_file: PathBuf,
}

/// The holder, shared by its threads.
struct Holder {
    hosts_file: PathBuf,
    client: OnceLock<&'static Client>,
    /// One thread opens the client.
    opening: Mutex<()>,
    writer: Arc<Mutex<Writer>>,
    /// Paths recalled from the holder or not granted to it lately.
    contended: Arc<Mutex<Recent>>,
    fd: OwnedFd,
    bytes: u64,
}

/// Starts the node cache if `serving` is its node's first daemon, the instance
/// takes grants and `GUST_NODE_CACHE` is not 0; where its socket is if so.
pub fn serve(serving: Serving) -> io::Result<Option<PathBuf>> {
    let bytes = super::bytes_from_env();
    if bytes == 0 {
        return Ok(None);
    }
    let hosts = gust_hosts::HostsFile::load(&serving.hosts_file).map_err(io::Error::other)?;
    let Some(me) = hosts.daemons.get(serving.daemon_id as usize) else { return Ok(None) };
    let first = hosts.daemons.iter().position(|d| d.host == me.host);
    if first != Some(serving.daemon_id as usize) || hosts.replicas > 1 || hosts.cache_of.is_some() {
        return Ok(None);
    }
    if std::env::var("GUST_GRANTS").is_ok_and(|v| v == "0") {
        return Ok(None);
    }
    let (table, fd) = Table::create(bytes.max(BYTES_MIN))?;
    let path = serving.rootdir.join(SOCKET_NAME);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<String>>(QUEUE_MESSAGES);
    let holder = Arc::new(Holder {
        hosts_file: serving.hosts_file,
        client: OnceLock::new(),
        opening: Mutex::new(()),
        writer: Arc::new(Mutex::new(Writer::new(table))),
        contended: Arc::new(Mutex::new(Recent::new(CONTENDED_FOR, CONTENDED_MAX))),
        fd,
        bytes,
    });
    let h = holder.clone();
    std::thread::Builder::new().name("gust-nc-fetch".into()).spawn(move || fetch_loop(&h, rx))?;
    let h = holder.clone();
    std::thread::Builder::new().name("gust-nc-accept".into()).spawn(move || accept_loop(&h, listener, tx))?;
    tracing::info!("node cache: up to {} MiB for this node's processes, at {}", holder.bytes >> 20, path.display());
    Ok(Some(path))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Holder {
    /// The holder's client, opened at the first need (the instance is whole by
    /// the time a process asks), with its recall listener and lease thread.
    fn client(self: &Arc<Self>) -> Option<&'static Client> {
        if let Some(c) = self.client.get() {
            return Some(c);
        }
        let _one = lock(&self.opening);
        if let Some(c) = self.client.get() {
            return Some(c);
        }
        let mut opts = ClientOptions { short_circuit: false, ..ClientOptions::default() };
        // Lookups are hints and renewals are due within a lease: a stopped daemon
        // holds neither up longer than that.
        opts.rpc_timeout = crate::grants::LEASE;
        let client = match Client::open_instance(&self.hosts_file, opts) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("node cache: cannot open the instance: {e}");
                return None;
            }
        };
        if !client.grants_on() {
            return None;
        }
        client.set_long_lived();
        client.transport.grants.set_shared();
        // Lives as long as the daemon: its callback threads refer to it.
        let client: &'static Client = Box::leak(Box::new(client));
        let writer = self.writer.clone();
        // For the test that shows the history checker sees a holder that keeps
        // what was recalled (tests/tests/history.rs), never for use.
        let keep_recalled = std::env::var("GUST_DEBUG_NODE_CACHE_NO_RECALL").is_ok_and(|v| v == "1");
        let contended = self.contended.clone();
        client.on_recall(move |p| {
            if !keep_recalled {
                lock(&writer).remove(p)
            }
            lock(&contended).note(p);
        });
        let writer = self.writer.clone();
        client.transport.grants.on_daemon_forgotten(move |d| lock(&writer).remove_daemon(d));
        if self.client.set(client).is_ok() {
            let h = self.clone();
            let _ = std::thread::Builder::new().name("gust-nc-leases".into()).spawn(move || lease_loop(&h, client));
        }
        self.client.get().copied()
    }
}

/// Accepts processes of this node (the instance owner's only): each gets the
/// table's descriptor, then its messages are read on a thread of their own.
fn accept_loop(holder: &Arc<Holder>, listener: UnixListener, tx: SyncSender<Vec<String>>) {
    let served = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if served.load(Ordering::Relaxed) >= CONNECTIONS_MAX {
            continue; // dropped: the process asks its daemons
        }
        if let Err(why) = gust_transport::handoff::same_user(&conn) {
            tracing::warn!("node cache: {why}");
            continue;
        }
        if holder.client().is_none() {
            continue;
        }
        let mut answer = [0u8; ANSWER_BYTES];
        answer[..8].copy_from_slice(&ANSWER_MAGIC);
        answer[8..].copy_from_slice(&holder.bytes.to_le_bytes());
        if gust_transport::handoff::send(&conn, &answer, &[holder.fd.as_raw_fd()]).is_err() {
            continue;
        }
        let (tx, served) = (tx.clone(), served.clone());
        served.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new().name("gust-nc-conn".into()).spawn(move || {
            read_hints(conn, &tx);
            served.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            tracing::warn!("node cache: no thread for a connection");
        }
    }
}

/// One process's messages of paths, until it closes or sends a malformed one.
fn read_hints(mut conn: UnixStream, tx: &SyncSender<Vec<String>>) {
    let _ = conn.set_read_timeout(None);
    let mut len = [0u8; 4];
    loop {
        if conn.read_exact(&mut len).is_err() {
            return;
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > HINT_BYTES_MAX {
            tracing::warn!("node cache: a message of {n} bytes: connection closed");
            return;
        }
        let mut body = vec![0u8; n];
        if conn.read_exact(&mut body).is_err() {
            return;
        }
        // Full: dropped, the processes read those files from their daemons.
        let _ = tx.try_send(hint_paths(&body));
    }
}

/// Looks up the paths processes read and keeps what the daemons grant.
fn fetch_loop(holder: &Arc<Holder>, rx: Receiver<Vec<String>>) {
    while let Ok(first) = rx.recv() {
        let mut paths = first;
        while paths.len() < FETCH_BATCH {
            match rx.try_recv() {
                Ok(more) => paths.extend(more),
                Err(_) => break,
            }
        }
        let Some(client) = holder.client() else { continue };
        paths.sort();
        paths.dedup();
        paths.retain(|p| !lock(&holder.contended).contains(p) && !lock(&holder.writer).contains(p));
        for batch in paths.chunks(FETCH_BATCH) {
            fetch(client, holder, batch);
        }
    }
}

/// Callback connections to `daemons` first (opening one forgets what an earlier
/// one held, which moves the generation), then the ticket replies install with.
fn ticket_for(client: &Client, daemons: &[u32]) -> Option<crate::grants::Ticket> {
    let mut asked: Vec<u32> = daemons.to_vec();
    asked.sort_unstable();
    asked.dedup();
    let mut ticket = None;
    for &d in &asked {
        ticket = client.lookup_ticket(d);
    }
    ticket
}

/// Writes one looked-up entry, unless a recall came in between (the grants'
/// generation moved since `ticket`) or `daemon`'s lease is over.
fn keep(
    client: &Client,
    holder: &Holder,
    ticket: crate::grants::Ticket,
    daemon: u32,
    p: &str,
    record: &Record,
    data: Option<&[u8]>,
) {
    if record.linked_to().is_some() || record.unfetched_object().is_some() {
        return;
    }
    let grants = &client.transport.grants;
    let encoded = gust_proto::encode(record);
    // Before the writer's lock: a lease found over forgets the daemon's grants,
    // whose listener takes that lock.
    let leased = grants.lease(daemon).is_some();
    let mut w = lock(&holder.writer);
    // Under the writer's lock: a recall that forgot anything since the request
    // went out either moved the generation already, or removes this entry after
    // it is written (the listener takes the same lock).
    if leased && grants.unchanged_since(ticket) {
        w.put(p, daemon, &encoded, data);
    }
}

/// `read_many` of `paths`, one request per daemon and `READ_MANY_ENTRIES_MAX`
/// paths: a daemon grants such a request of a holder whole or not at all. The
/// paths of a request not granted (one of them contended) are looked up one by
/// one (`fetch_each`).
fn fetch(client: &Client, holder: &Holder, paths: &[String]) {
    let mut by_daemon: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for p in paths {
        by_daemon.entry(client.md_daemon(p)).or_default().push(p.clone());
    }
    let daemons: Vec<u32> = by_daemon.keys().copied().collect();
    let Some(ticket) = ticket_for(client, &daemons) else { return };
    let mut groups = Vec::new();
    for (d, ps) in by_daemon {
        for part in ps.chunks(gust_proto::READ_MANY_ENTRIES_MAX) {
            groups.push((d, part.to_vec()));
        }
    }
    let calls: Vec<Call<'_>> = groups
        .iter()
        .map(|(d, ps)| Call { daemon: *d, req: Request::ReadMany { paths: ps.clone() }, bulk: Vec::new() })
        .collect();
    let answers = client.transport.batch(calls);
    let mut one_by_one = Vec::new();
    for (k, (answer, (daemon, ps))) in answers.into_iter().zip(groups).enumerate() {
        let granted = crate::grants::batch_flags(k) & gust_proto::frame::REPLY_GRANTED != 0;
        match answer {
            Ok((Response::Files(files), bulk)) if granted && files.len() == ps.len() => {
                let mut at = 0usize;
                for (f, p) in files.into_iter().zip(&ps) {
                    let gust_proto::WholeFile::Found { record, inline_len } = f else { continue };
                    let data = match inline_len {
                        Some(n) => match bulk.get(at..at + n as usize) {
                            Some(d) => {
                                at += n as usize;
                                Some(d)
                            }
                            None => break, // a reply that does not add up: the rest is not kept
                        },
                        None => None,
                    };
                    keep(client, holder, ticket, daemon, p, &record, data);
                }
            }
            Ok(_) => one_by_one.extend(ps),
            Err(_) => {}
        }
    }
    if !one_by_one.is_empty() {
        fetch_each(client, holder, &one_by_one);
    }
}

/// `stat_data` of `paths` in one batch; what came back granted goes in the
/// table, and what did not is contended for a while.
fn fetch_each(client: &Client, holder: &Holder, paths: &[String]) {
    let daemons: Vec<u32> = paths.iter().map(|p| client.md_daemon(p)).collect();
    let Some(ticket) = ticket_for(client, &daemons) else { return };
    let calls: Vec<Call<'_>> = paths
        .iter()
        .zip(&daemons)
        .map(|(p, &daemon)| Call { daemon, req: Request::StatData { path: p.clone() }, bulk: Vec::new() })
        .collect();
    let answers = client.transport.batch(calls);
    for (i, (answer, p)) in answers.into_iter().zip(paths).enumerate() {
        if crate::grants::batch_flags(i) & gust_proto::frame::REPLY_GRANTED == 0 {
            if answer.is_ok() {
                lock(&holder.contended).note(p); // contended at its daemon
            }
            continue;
        }
        let Ok((Response::RecordData { record, inline }, data)) = answer else { continue };
        keep(client, holder, ticket, daemons[i], p, &record, inline.then_some(&data[..]));
    }
}

/// Publishes every daemon's lease in the table, and renews those half gone.
fn lease_loop(holder: &Holder, client: &Client) {
    let mut renew = Vec::new();
    loop {
        std::thread::sleep(LEASE_TICK);
        // Read each time: the instance may have grown.
        for d in 0..client.transport.links_len() {
            // The clock read before the lease: a pause of this process (its daemon
            // stopped) between the two must not carry the lease past its end, as
            // the clock read after it would.
            let now = mono_ns();
            let left = client.transport.grants.lease_left(d);
            let w = lock(&holder.writer);
            match left {
                // A millisecond off, for the rounding of the client's clock.
                Some(left) if left > Duration::from_millis(1) => {
                    w.set_lease(d, now + (left - Duration::from_millis(1)).as_nanos() as u64)
                }
                _ => w.set_lease(d, 0),
            }
            drop(w);
            if left.is_some_and(|l| l < crate::grants::LEASE / 2) {
                renew.push(Call { daemon: d, req: Request::Ping, bulk: Vec::new() });
            }
        }
        // All at once: a stopped daemon holds the others' renewals up for one RPC
        // timeout (the holder's is a lease), not one each.
        if !renew.is_empty() {
            let _ = client.transport.batch(std::mem::take(&mut renew));
        }
    }
}
