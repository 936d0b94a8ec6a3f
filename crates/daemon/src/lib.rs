//! The GustFS daemon: one per node (or several per node in tests).
//!
//! It owns a root directory on node-local storage holding a RocksDB metadata store
//! (`metadata/`) and a chunk store (`chunks/`), both gust-store's, registers itself
//! in the hosts file, and serves framed requests over TCP and a Unix socket. Every
//! decision about placement is the client's; daemons talk to each other only where
//! a guarantee needs it: in a replicated instance they heartbeat their peers for a
//! lease (lease.rs, fence.rs), and the node proxy forwards a node's clients'
//! requests to other daemons (proxy/).
//!
//! Not for: placement (gust-placement), client-side logic (gust-client), how
//! records, inline data and chunks are stored (gust-store).

mod create_batch;
pub mod dirs;
pub mod dispatch;
pub mod events;
pub mod exporter;
pub mod fence;
pub mod grants;
pub mod lease;
pub mod lock_service;
pub mod locks;
mod log_budget;
pub mod metrics;
pub mod moves;
pub mod proxy;
pub mod qos;
pub mod read_log;
mod read_many;
mod remove_batch;
pub mod server;
pub mod short_circuit;
pub mod stage;
pub mod state;
pub mod trace;

use gust_hosts::{DaemonEntry, HostsFile};
use gust_store::chunks::ChunkStore;
use gust_store::metadata::MetadataStore;
use gust_store::root_lock::RootLock;
use gust_transport::{Endpoint, Listener};
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Settings of one daemon, as `gust daemon` takes them.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub rootdir: PathBuf,
    pub mountdir: String,
    pub hosts_file: PathBuf,
    /// TCP address to listen on; port 0 picks a free port.
    pub listen: String,
    /// A libfabric provider to listen on as well (`--fabric tcp;ofi_rxm`), at the
    /// address of `listen` where the provider addresses by IP.
    pub fabric: Option<String>,
    /// None: take the instance's chunk size (or the default for a new instance).
    pub chunk_size_bytes: Option<u64>,
    pub clean_rootdir: bool,
    /// None: keep the id recorded in the root directory, or take the next free one.
    pub id: Option<u32>,
    /// For a new hosts file: whether create/mkdir check that the parent exists.
    pub check_parent: bool,
    /// Worker threads and the request memory bound.
    pub server: server::ServerOptions,
    /// Serve Prometheus metrics on this address (`/metrics`); None: off.
    pub metrics_listen: Option<String>,
    /// Bound on the event log's bytes (`gust events`); 0: no event log.
    pub events_cap_bytes: usize,
    /// Directory for this daemon's trace file (gust-trace); `gust trace on --dir`
    /// may give one later.
    pub trace_dir: Option<PathBuf>,
    /// Daemon tracepoints (names or groups) on from the start; needs `trace_dir`.
    pub trace: Option<String>,
    /// Declared capacity of the chunk store (`--capacity`): writes past it get
    /// ENOSPC, and it is what capacity placement weighs this daemon by. None: the
    /// root directory's free space at the daemon's first start is registered.
    pub capacity_bytes: Option<u64>,
    /// Cores, niceness and bandwidth limit from the start (`--cpus`, `--nice`,
    /// `--max-bandwidth`; qos.rs); `gust tune` changes them later.
    pub limits: qos::Limits,
}

fn ctx<T>(r: io::Result<T>, what: &str, path: &Path) -> Result<T, String> {
    r.map_err(|e| format!("{what} {}: {e}", path.display()))
}

/// The daemon's umask: files 0600, directories 0700, sockets usable by the owner only.
const OWNER_ONLY_UMASK: libc::mode_t = 0o077;

/// Makes the root directory accessible to its owner only (0700), so that other users
/// of the node can neither list it nor reach the chunk files, RocksDB files and Unix
/// socket inside, whatever their own modes (a root directory of an older GustFS holds
/// 0644 files). A wider directory of ours (a caller's umask, an older GustFS) is
/// tightened, and the log says so. A directory of another user, or a shared one with
/// the sticky bit (/tmp, /dev/shm), is refused: tightening it would lock its other
/// users out, and `--clean-rootdir` would delete their files.
fn make_private(rootdir: &Path) -> Result<(), String> {
    let mode = own_dir_mode(rootdir)?;
    if mode & 0o077 != 0 {
        ctx(
            fs::set_permissions(rootdir, fs::Permissions::from_mode(0o700)),
            "cannot make root directory private (chmod 700)",
            rootdir,
        )?;
        tracing::warn!(
            "tightened root directory {} from mode {mode:04o} to 0700: its data is the instance owner's alone",
            rootdir.display()
        );
    }
    Ok(())
}

/// The mode of an existing root directory, if it is one the daemon may make its own:
/// a directory of this user, not a shared (sticky) one.
fn own_dir_mode(rootdir: &Path) -> Result<u32, String> {
    let m = ctx(fs::metadata(rootdir), "cannot stat root directory", rootdir)?;
    if !m.is_dir() {
        return Err(format!("root directory {} is not a directory", rootdir.display()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mode = m.mode() & 0o7777;
    if m.uid() != me {
        return Err(format!(
            "root directory {} belongs to uid {}, not to this daemon's user (uid {me}); its data would not be \
             private: give the daemon a directory of its own",
            rootdir.display(),
            m.uid()
        ));
    }
    if mode & 0o1000 != 0 {
        return Err(format!(
            "root directory {} is a shared directory (mode {mode:04o}, sticky); the daemon makes its root \
             directory private (0700): give it a directory of its own inside, e.g. {}/gust-$USER",
            rootdir.display(),
            rootdir.display()
        ));
    }
    Ok(mode)
}

/// Written in the root directory when the daemon stops on a signal or `gust stop`,
/// removed when it starts: a root directory used before without it crashed.
pub const CLEAN_STOP_MARKER: &str = "stopped-cleanly";

/// Bytes available to the daemon's user under `dir` (statvfs f_bavail).
fn free_bytes(dir: &Path) -> Result<u64, String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("root directory {} has a NUL byte", dir.display()))?;
    // SAFETY: statvfs writes into a zeroed struct we own; the path is NUL-terminated.
    let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut sv) } != 0 {
        return Err(format!("cannot statvfs root directory {}: {}", dir.display(), io::Error::last_os_error()));
    }
    Ok(sv.f_bavail * sv.f_frsize)
}

/// Reads `rootdir/instance`: (instance id, daemon id), if this root directory was
/// used before.
fn read_identity(rootdir: &Path) -> Result<Option<(String, u32)>, String> {
    let p = rootdir.join("instance");
    let text = match fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", p.display())),
    };
    let mut inst = None;
    let mut id = None;
    for l in text.lines() {
        let mut it = l.split_whitespace();
        match (it.next(), it.next()) {
            (Some("instance"), Some(v)) => inst = Some(v.to_string()),
            (Some("daemon_id"), Some(v)) => id = v.parse().ok(),
            _ => {}
        }
    }
    match (inst, id) {
        (Some(i), Some(d)) => Ok(Some((i, d))),
        _ => Err(format!("{} is malformed; use --clean-rootdir to start afresh", p.display())),
    }
}

/// Runs a daemon until SIGTERM or SIGINT. Returns an error message fit for a
/// terminal if it cannot start.
pub fn run(cfg: DaemonConfig) -> Result<(), String> {
    run_with(cfg, |_| {})
}

/// What a daemon tells `run_with`'s caller once it serves.
pub struct Serving {
    pub daemon_id: u32,
    /// Its root directory, canonical.
    pub rootdir: PathBuf,
    pub hosts_file: PathBuf,
}

/// `run`, calling `serving` once the daemon is registered and serves: what runs
/// beside it in its process (the node cache's holder, gust-client's node_cache).
pub fn run_with(cfg: DaemonConfig, serving: impl FnOnce(Serving)) -> Result<(), String> {
    // Everything the daemon puts on the node (root directory, RocksDB's files, chunk
    // files, the Unix socket, a hosts file and secret it creates) is for the instance's
    // owner alone, whatever umask the daemon was started with. RocksDB takes no file
    // modes, so the process umask is the one setting that covers all of it; it is set
    // before anything is created and before any thread starts.
    // SAFETY: umask has no preconditions and cannot fail.
    unsafe { libc::umask(OWNER_ONLY_UMASK) };
    server::block_termination_signals();
    let rootdir = prepare_rootdir(&cfg)?;
    let _root = hold_rootdir(&rootdir)?;
    let identity = read_identity(&rootdir)?;
    let (tcp, tcp_addr) = bind_tcp(&cfg.listen)?;
    let fabric = cfg.fabric.as_deref().map(|p| bind_fabric(p, tcp_addr)).transpose()?;
    let (metadata, chunks) = open_stores(&cfg, &rootdir)?;
    let sockets = SocketPaths::in_rootdir(&rootdir);
    let (uds, shm) = bind_node_local(&sockets)?;
    let endpoints = std::iter::once(tcp.local().clone())
        .chain(fabric.as_ref().map(|f| f.local().clone()))
        .chain(uds.as_ref().map(|u| u.local().clone()))
        .chain(shm.as_ref().map(|u| u.local().clone()))
        .collect();
    let (daemon_id, hosts) = register(&cfg, &rootdir, &identity, endpoints)?;
    let state = new_state(&cfg, &rootdir, daemon_id, &hosts, metadata, chunks)?;
    // A root directory used before and not stopped cleanly: the daemon crashed (or
    // was killed). With copies elsewhere, its own may be stale: fence it.
    let clean = rootdir.join(CLEAN_STOP_MARKER);
    resume_incarnation(&state, &hosts, identity.is_some(), &clean)?;
    // Short-circuit I/O for clients on this node (short_circuit.rs), beside the
    // Unix socket they ask it on.
    let short_circuit = uds.is_some().then_some(sockets.short_circuit.as_path());
    let listeners = std::iter::once(tcp).chain(fabric).chain(uds).chain(shm).collect();
    let fds = start_services(&cfg, &state, &hosts, &rootdir, listeners, short_circuit)?;
    serving(Serving { daemon_id, rootdir: rootdir.clone(), hosts_file: cfg.hosts_file.clone() });
    tracing::info!(
        "daemon {daemon_id} of instance {} (pid {}) serving {} (tcp {tcp_addr}), chunk size {} bytes, \
         {} worker threads, up to {} connections (descriptor limit {fds})",
        hosts.instance,
        std::process::id(),
        rootdir.display(),
        hosts.chunk_size_bytes,
        cfg.server.threads,
        server::CONNECTIONS_MAX,
    );
    let sig = server::wait_for_termination();
    tracing::info!("signal {sig}: syncing metadata and stopping");
    stop(&state, &rootdir, &sockets, &clean)
}

/// The root directory made ready: emptied first with `--clean-rootdir`, created,
/// made private, checked writable; returned canonical.
fn prepare_rootdir(cfg: &DaemonConfig) -> Result<PathBuf, String> {
    if cfg.clean_rootdir && cfg.rootdir.exists() {
        own_dir_mode(&cfg.rootdir)?; // never delete a directory that is not the daemon's own
        ctx(fs::remove_dir_all(&cfg.rootdir), "cannot clean root directory", &cfg.rootdir)?;
    }
    ctx(
        fs::DirBuilder::new().recursive(true).mode(0o700).create(&cfg.rootdir),
        "cannot create root directory",
        &cfg.rootdir,
    )?;
    make_private(&cfg.rootdir)?;
    // Fail early and clearly on an unwritable root directory.
    let probe = cfg.rootdir.join(".gust-write-probe");
    ctx(fs::write(&probe, b"x"), "root directory is not writable:", &cfg.rootdir)?;
    let _ = fs::remove_file(&probe);
    ctx(fs::canonicalize(&cfg.rootdir), "cannot resolve", &cfg.rootdir)
}

/// How long a daemon waits for its root directory's lock: a predecessor killed a
/// moment ago lets go of it within that (a restart right after a kill -9).
const ROOT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The root directory's lock (gust-store's root_lock.rs), held while the daemon
/// runs: a second daemon on it, or a `gust repair` rebuilding it, is refused (after
/// `ROOT_LOCK_WAIT`).
fn hold_rootdir(rootdir: &Path) -> Result<RootLock, String> {
    match ctx(RootLock::take_within(rootdir, ROOT_LOCK_WAIT), "cannot lock root directory", rootdir)? {
        Some(lock) => Ok(lock),
        None => Err(format!(
            "root directory {} is in use by another process (a daemon serving it, or `gust repair` rebuilding it)",
            rootdir.display()
        )),
    }
}

/// The TCP listener on `listen` (`--listen`) and the address it is bound to.
fn bind_tcp(listen: &str) -> Result<(Listener, std::net::SocketAddr), String> {
    let tcp_ep = gust_transport::tcp_endpoint(listen).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let tcp = Listener::bind(&tcp_ep).map_err(|e| {
        if e.kind() == io::ErrorKind::AddrInUse {
            format!("cannot listen on {listen}: address already in use (another daemon? pick another --listen port)")
        } else {
            format!("cannot listen on {listen}: {e}")
        }
    })?;
    let Endpoint::Tcp(tcp_addr) = tcp.local().clone() else { unreachable!("bound a TCP endpoint") };
    Ok((tcp, tcp_addr))
}

/// Opens the metadata store and the chunk store in `rootdir` (the chunk store with
/// its declared capacity, `--capacity`).
fn open_stores(cfg: &DaemonConfig, rootdir: &Path) -> Result<(MetadataStore, ChunkStore), String> {
    let metadata = MetadataStore::open(&rootdir.join(gust_store::METADATA_DIR)).map_err(|e| {
        if e.contains("lock") {
            format!("{e}\n(is another daemon already running on root directory {}?)", rootdir.display())
        } else {
            e
        }
    })?;
    let chunks_dir = rootdir.join(gust_store::CHUNKS_DIR);
    let mut chunks = ctx(ChunkStore::open(&chunks_dir), "cannot create chunk store in", rootdir)?;
    if let Some(c) = cfg.capacity_bytes {
        chunks.declare_capacity(c);
    }
    Ok((metadata, chunks))
}

/// The libfabric endpoint of `provider` (gust-transport's ofi.rs): bound to the TCP
/// listener's address for providers that address by IP (a daemon listening on every
/// address lets the provider pick one), to a name of the provider's choosing for
/// the others (shm).
fn bind_fabric(provider: &str, tcp: std::net::SocketAddr) -> Result<Listener, String> {
    let by_ip = !provider.split(';').any(|p| p == "shm");
    let node = if by_ip && !tcp.ip().is_unspecified() { tcp.ip().to_string() } else { "-".to_string() };
    let ep = Endpoint::Ofi(gust_transport::ofi::OfiAddr { provider: provider.to_string(), address: node });
    Listener::bind(&ep).map_err(|e| format!("cannot listen on fabric {provider}: {e}"))
}

/// The sockets of clients on this node, in the root directory; removed when the
/// daemon stops.
struct SocketPaths {
    uds: PathBuf,
    shm: PathBuf,
    short_circuit: PathBuf,
}

impl SocketPaths {
    fn in_rootdir(rootdir: &Path) -> SocketPaths {
        SocketPaths {
            uds: rootdir.join("daemon.sock"),
            shm: rootdir.join("daemon.shm"),
            short_circuit: rootdir.join(gust_proto::short_circuit::SOCKET_NAME),
        }
    }
}

/// Binds the Unix socket and the shared-memory socket of clients on this node:
/// each None where its path would not fit a socket address.
fn bind_node_local(sockets: &SocketPaths) -> Result<(Option<Listener>, Option<Listener>), String> {
    // Unix socket for clients on this node. sun_path holds 108 bytes; skip the
    // socket (TCP still works) if the root directory's path is too long.
    let uds_path = &sockets.uds;
    let uds = if uds_path.as_os_str().len() < 100 {
        Some(ctx(Listener::bind(&Endpoint::Unix(uds_path.clone())), "cannot bind Unix socket", uds_path)?)
    } else {
        tracing::warn!("root directory path too long for a Unix socket; TCP only ({})", uds_path.display());
        None
    };
    // Shared-memory rings for clients on this node (gust_transport::shm), handed out
    // at a socket of their own; clients fall back to the Unix socket without it.
    let shm_path = &sockets.shm;
    let shm = if shm_path.as_os_str().len() < 100 {
        Some(ctx(Listener::bind(&Endpoint::Shm(shm_path.clone())), "cannot bind shared-memory socket", shm_path)?)
    } else {
        None
    };
    Ok((uds, shm))
}

/// Registers this daemon in the hosts file under its lock (creating the file, and
/// the instance's secret, for the first daemon of an instance), records the
/// instance and daemon id in the root directory, and returns the id and the hosts
/// file as stored.
fn register(
    cfg: &DaemonConfig,
    rootdir: &Path,
    identity: &Option<(String, u32)>,
    endpoints: Vec<Endpoint>,
) -> Result<(u32, HostsFile), String> {
    let _lock = gust_hosts::lock(&cfg.hosts_file).map_err(|e| e.to_string())?;
    let mut hosts = load_or_create_hosts(cfg)?;
    let id = daemon_id(cfg, rootdir, identity, &hosts)?;
    let ident = format!("instance {}\ndaemon_id {id}\n", hosts.instance);
    ctx(fs::write(rootdir.join("instance"), ident), "cannot write", &rootdir.join("instance"))?;
    let capacity_bytes = placement_capacity(cfg, rootdir, id, &hosts)?;
    hosts.daemons.retain(|d| d.id != id);
    hosts.daemons.push(DaemonEntry {
        capacity_bytes: Some(capacity_bytes),
        id,
        host: gust_hosts::this_host(),
        pid: std::process::id(),
        rootdir: rootdir.to_path_buf(),
        endpoints,
    });
    hosts.daemons.sort_by_key(|d| d.id);
    hosts.store(&cfg.hosts_file).map_err(|e| e.to_string())?;
    Ok((id, hosts))
}

/// The hosts file (a new instance's, and its secret, if there is none yet),
/// checked against `--chunk-size`. The caller holds the hosts file's lock.
fn load_or_create_hosts(cfg: &DaemonConfig) -> Result<HostsFile, String> {
    let hosts = if cfg.hosts_file.exists() {
        HostsFile::load(&cfg.hosts_file).map_err(|e| e.to_string())?
    } else {
        let cs = cfg.chunk_size_bytes.unwrap_or(gust_placement::CHUNK_SIZE_BYTES_DEFAULT);
        gust_hosts::create_secret(&cfg.hosts_file).map_err(|e| e.to_string())?;
        HostsFile::new(gust_hosts::new_instance_id(), cs, cfg.mountdir.clone(), cfg.check_parent)
    };
    if let Some(cs) = cfg.chunk_size_bytes {
        if cs != hosts.chunk_size_bytes {
            return Err(format!(
                "--chunk-size {cs} differs from the instance's chunk size {} in {}",
                hosts.chunk_size_bytes,
                cfg.hosts_file.display()
            ));
        }
    }
    if !(gust_placement::CHUNK_SIZE_BYTES_MIN..=gust_placement::CHUNK_SIZE_BYTES_MAX).contains(&hosts.chunk_size_bytes)
    {
        return Err(format!("chunk size {} out of range", hosts.chunk_size_bytes));
    }
    Ok(hosts)
}

/// This daemon's id: the one its root directory holds (which must be of this
/// instance, and `--id` if given), else `--id`, else the next free one; a new root
/// directory may not take an id another one registered.
fn daemon_id(
    cfg: &DaemonConfig,
    rootdir: &Path,
    identity: &Option<(String, u32)>,
    hosts: &HostsFile,
) -> Result<u32, String> {
    let id = match (identity, cfg.id) {
        (Some((inst, _)), _) if *inst != hosts.instance => {
            return Err(format!(
                "root directory {} belongs to instance {inst}, but hosts file {} is of instance {}; \
                 use --clean-rootdir to discard the old data, or the matching hosts file",
                rootdir.display(),
                cfg.hosts_file.display(),
                hosts.instance
            ));
        }
        (Some((_, old)), Some(want)) if *old != want => {
            return Err(format!("root directory {} holds daemon {old}, not {want}", rootdir.display()));
        }
        (Some((_, old)), _) => *old,
        (None, Some(want)) => want,
        (None, None) => hosts.daemons.iter().map(|d| d.id + 1).max().unwrap_or(0),
    };
    // A daemon the instance let go in a move (`gust shrink`) does not come back
    // by registering again: its data is elsewhere, and the layout has no place
    // for it.
    if identity.is_some() && hosts.generation > 1 && !hosts.daemons.iter().any(|d| d.id == id) {
        return Err(format!(
            "daemon {id} left instance {} when its layout changed (gust shrink); root directory {} holds \
             nothing the instance serves",
            hosts.instance,
            rootdir.display()
        ));
    }
    if identity.is_none() && hosts.daemons.iter().any(|d| d.id == id) {
        return Err(format!(
            "daemon id {id} is already registered in {} by another root directory",
            cfg.hosts_file.display()
        ));
    }
    Ok(id)
}

/// The capacity placement weighs daemon `id` by: what it first registered stays
/// (placement depends on it); a new daemon registers its declared capacity or the
/// free space it starts with.
fn placement_capacity(cfg: &DaemonConfig, rootdir: &Path, id: u32, hosts: &HostsFile) -> Result<u64, String> {
    let registered = hosts.daemons.iter().find(|d| d.id == id).and_then(|d| d.capacity_bytes);
    Ok(match (registered, cfg.capacity_bytes) {
        (Some(old), Some(new)) if old != new => {
            tracing::warn!("daemon {id}: --capacity {new} ignored for placement: registered with {old} bytes");
            old
        }
        (Some(old), _) => old,
        (None, Some(new)) => new,
        (None, None) => free_bytes(rootdir)?,
    })
}

/// The daemon's state over its stores, set up for the layout of `hosts`: moves
/// started, held sizes applied through dispatch, `--cpus`/`--nice`/
/// `--max-bandwidth` and tracing applied.
fn new_state(
    cfg: &DaemonConfig,
    rootdir: &Path,
    daemon_id: u32,
    hosts: &HostsFile,
    metadata: MetadataStore,
    mut chunks: ChunkStore,
) -> Result<Arc<state::State>, String> {
    let secret = gust_hosts::load_secret(&cfg.hosts_file).map_err(|e| e.to_string())?;
    // Placements that spill: reads probe the next daemon past a hole (client io/chunks.rs).
    chunks.set_trim_holes(moves::spills(hosts));
    chunks.set_identity(format!("daemon {daemon_id}"), hosts.chunk_size_bytes);

    let state =
        Arc::new(state::State::new(daemon_id, rootdir.to_path_buf(), metadata, chunks, secret, cfg.events_cap_bytes));
    state.moves.start(&state, cfg.hosts_file.clone(), hosts);
    {
        let weak = Arc::downgrade(&state);
        state.grants.set_size_applier(Box::new(move |sizes| {
            if let Some(st) = weak.upgrade() {
                dispatch::apply_held_sizes(&st, sizes);
            }
        }));
    }
    if cfg.limits != qos::Limits::default() {
        state.qos.apply(cfg.limits).map_err(|e| state.qos.explain(cfg.limits, e))?;
    }
    start_tracing(cfg, &state)?;
    Ok(state)
}

/// Tracing from the start: the trace file's directory (`--trace-dir`) and the
/// tracepoints on (`--trace`).
fn start_tracing(cfg: &DaemonConfig, state: &state::State) -> Result<(), String> {
    if let Some(d) = &cfg.trace_dir {
        trace::set_output(state, d)
            .map_err(|e| format!("--trace-dir {}: {}", d.display(), io::Error::from_raw_os_error(e)))?;
    }
    if let Some(names) = &cfg.trace {
        if cfg.trace_dir.is_none() {
            return Err("--trace needs --trace-dir (where the trace file goes)".into());
        }
        gust_trace::registry::select(names).map_err(|e| format!("--trace: {e}"))?;
        trace::control(state, true, names, None)
            .map_err(|_| format!("--trace {names}: no daemon tracepoint named (daemon groups: daemon, md, chunk)"))?;
    }
    Ok(())
}

/// Takes over from the previous incarnation of this root directory (`used_before`):
/// its clients' grants get their grace, and after a crash (no `clean` marker) in a
/// replicated instance the daemon refuses to serve until repaired. Loads the
/// fences, and requires a lease with replicas.
fn resume_incarnation(state: &state::State, hosts: &HostsFile, used_before: bool, clean: &Path) -> Result<(), String> {
    let crashed = used_before && !clean.exists();
    if used_before && hosts.replicas == 1 {
        // Clients of the previous incarnation may still use its grants until their
        // leases run out (grants.rs; with copies, clients take no grants).
        state.grants.start_grace();
    }
    let _ = fs::remove_file(clean);
    if crashed && hosts.replicas > 1 {
        state.recovering.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::warn!(
            "daemon {} restarted after a crash in an instance with {} replicas: refusing to serve \
             (EHOSTDOWN) until `gust repair` brings its copies up to date",
            state.daemon_id,
            hosts.replicas
        );
    }
    state.fences.load(&state.metadata)?;
    if hosts.replicas > 1 {
        state.lease.require();
    }
    Ok(())
}

/// Starts serving: the short-circuit socket (at `sc_path`, given when there is a
/// Unix socket), the node proxy, the server on `listeners`, the lease's heartbeats
/// and the metrics exporter. Returns the descriptor limit raised.
fn start_services(
    cfg: &DaemonConfig,
    state: &Arc<state::State>,
    hosts: &HostsFile,
    rootdir: &Path,
    listeners: Vec<Listener>,
    sc_path: Option<&Path>,
) -> Result<u64, String> {
    if let Some(sc_path) = sc_path {
        ctx(short_circuit::start(state.clone(), sc_path, hosts.replicas), "cannot bind short-circuit socket", sc_path)?;
    }
    let fds = server::raise_descriptor_limit();
    ctx(proxy::start(state, cfg.hosts_file.clone(), cfg.server.threads), "cannot start the node proxy in", rootdir)?;
    ctx(server::start(state.clone(), listeners, &cfg.server), "cannot start the server in", rootdir)?;
    // After the server: peers heartbeat this daemon as it heartbeats them.
    lease::start(state.clone(), &cfg.hosts_file, hosts.replicas)?;
    if let Some(addr) = &cfg.metrics_listen {
        let bound = exporter::spawn(state.clone(), addr)?;
        tracing::info!("daemon {}: Prometheus metrics on http://{bound}/metrics", state.daemon_id);
    }
    Ok(fds)
}

/// After the termination signal: syncs the metadata, removes the sockets, marks a
/// clean stop unless recovering, and removes the root directory if `gust stop`
/// asked for it.
fn stop(state: &state::State, rootdir: &Path, sockets: &SocketPaths, clean: &Path) -> Result<(), String> {
    if let Err(e) = state.metadata.sync() {
        tracing::error!("metadata sync at shutdown failed: errno {e}");
    }
    let _ = fs::remove_file(&sockets.uds);
    if !state.recovering.load(std::sync::atomic::Ordering::SeqCst) {
        // A stop (not a crash): the next start serves at once. A recovering daemon
        // stays recovering across restarts until repaired.
        let _ = fs::write(clean, b"");
    }
    let _ = fs::remove_file(&sockets.shm);
    let _ = fs::remove_file(&sockets.short_circuit);
    if state.wipe_on_exit.load(std::sync::atomic::Ordering::SeqCst) {
        tracing::info!("removing root directory {} (gust stop)", rootdir.display());
        ctx(fs::remove_dir_all(rootdir), "cannot remove root directory", rootdir)?;
    }
    Ok(())
}
