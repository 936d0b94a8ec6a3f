//! The GustFS client core.
//!
//! Reads the hosts file, computes placement, keeps connections and the open-file
//! table, and offers a POSIX-like API with errno-style errors. Every front end (the
//! `gust` CLI, the LD_PRELOAD library, the FUSE mount, the C API) is a thin layer
//! over [`Client`].
//!
//! Paths given to the API are paths inside the file system ("/a/b"); front ends map
//! their mount directory onto them with [`Client::internal_path`]. The rules of such
//! paths are [`path`]'s (gust_proto), shared with the daemon.
//!
//! Consistency: every operation on one file goes to the daemons that own it, or is
//! answered from a record the file's metadata daemon granted this process and
//! recalls before anyone else changes it (`grants`), so operations on one file are
//! strongly consistent. Directory listings are assembled from all daemons and are
//! eventually consistent. File locks (flock, fcntl) are kept by each file's
//! metadata daemon (`locks`; docs/SEMANTICS.md).
//!
//! One module per concept: `credentials` (who calls: owners of new records, chown's
//! and access's checks), `error` and `stat` (what calls return), `routing` (which
//! daemons a request goes to; the one way to ask several), `open_files` (the
//! descriptor table), `inline` (small files: deferred creates, data with the
//! record), `listing` (listings with attributes and the stats they answer), `data`
//! (read, write, truncate, sync), `size_cache` (size updates of writes, batched),
//! `namespace` (lookups, create, remove, attributes), `xattrs` (extended
//! attributes, kept in the records), `readdir` (listings),
//! `replica` (copies of records and chunks on several daemons, down daemons),
//! `ec` (erasure-coded chunks: parity kept by the writer, lost cells rebuilt),
//! `rename`, `find` (queries the daemons evaluate), `staging` (daemons copying their
//! own chunks for `gust stage`), `cache` (cache mode: the namespace of a shared
//! file system directory, fetched on first open), `events` (the daemons' event
//! logs), `status` (capacity, daemon counters), `grants` (records cached under the
//! daemons' grants, answered until recalled), `locks` (flock and fcntl locks,
//! kept by the files' metadata daemons), `exit` (what goes out when the
//! process ends), `spill` (chunk writes and reads
//! when a full daemon's chunks go to the next), `rpc` (connections and framing),
//! `traced` (the public entry points, each a tracepoint of gust-trace).

mod cache;
mod claims;
mod create_batch;
mod credentials;
mod deferred;
mod ec;
mod error;
mod events;
mod exit;
mod fence;
mod find;
mod flight;
mod fork_local;
mod grants;
mod home;
mod inline;
mod integrity;
mod io;
mod layout;
mod links;
mod listing;
mod locks;
mod namespace;
pub mod node_cache;
mod objects;
mod open_files;
mod permissions;
mod read_many;
mod readdir;
mod remove_batch;
mod rename;
mod replica;
mod routing;
mod rpc;
mod short_circuit;
mod size_cache;
mod staging;
mod stat;
mod status;
mod traced;
mod xattrs;

use gust_hosts::HostsFile;
use gust_placement::Distributor;
use open_files::FdTable;
use rpc::Transport;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

pub use cache::{local_kind, local_time_ns, UNFETCHED_FILE_ID};
pub use credentials::{as_caller, Credentials};
pub use error::{Errno, Result};
pub use events::{EventCursors, EventsPage, Gap};
pub use exit::settle_at_exit;
/// What staging requests carry (see gust_proto::stage).
pub use gust_proto::stage as stage_types;
pub use gust_proto::CorruptRange;
pub use gust_proto::Span;
pub use gust_proto::{now_ns, path};
pub use gust_proto::{
    Cmp, DaemonMetrics, DaemonStats, DirEntry, Event, EventKind, FileKind as Kind, FindQuery, LockInfo, LockKind,
    LockMode, OpMetrics, Record, INLINE_BYTES_MAX, LOCK_END_EOF, PATH_ARG_BYTES_MAX,
};
pub use gust_proto::{MoveProgress, MoveStep};
pub use inline::WholeFile;
pub use integrity::ScrubPage;
pub use listing::{LISTING_ATTRS_ENTRIES_MAX, LISTING_ATTRS_TTL};
pub use locks::{LockDone, LockState, PROCESS_OWNER};
pub use objects::{
    placeholder_target, properties_of, split_placeholder_target, xattrs_of, ETAG_XATTR, META_XATTR_PREFIX,
    TAG_XATTR_PREFIX,
};
pub use open_files::OPEN_FILES_MAX;
pub use permissions::setid_dropped;
pub use read_many::READ_MANY_IN_FLIGHT;
pub use readdir::DirStream;
pub use rename::{RENAME_DIR_BYTES_MAX, RENAME_DIR_RECORDS_MAX};
pub use replica::{degraded_primaries, DOWN_SKIP};
pub use size_cache::SIZE_FLUSH_INTERVAL;
pub use staging::ReadLogPage;
pub use stat::{d_type, split_ns, Stat, StatFs, GUST_DEV, GUST_MAGIC, STATFS_BLOCK_BYTES};
pub use traced::flush_trace;

/// Options a client is built with; `from_env` reads them from GUST_* variables.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Bound on any one RPC; a dead daemon surfaces as EIO within it.
    pub rpc_timeout: Duration,
    /// Reach even daemons on this host over the network (benchmarks, tests):
    /// `GUST_TRANSPORT=tcp` over TCP, `GUST_TRANSPORT=fabric` over the daemons'
    /// fabric endpoints.
    pub force_tcp: bool,
    /// Reach daemons of other nodes at their fabric endpoint (`gust start
    /// --fabric`) before TCP; `GUST_TRANSPORT=tcp` turns it off.
    pub fabric: bool,
    /// Take grants and answer lookups from them (grants.rs); `GUST_GRANTS=0` turns
    /// it off (benchmarks compare, tests count requests).
    pub grants: bool,
    /// Check mode bits for callers other than root and the instance's owner
    /// (permissions.rs); a FUSE mount leaves them to the kernel.
    pub check_permissions: bool,
    /// Read and write the chunks a daemon of this node holds in its local file
    /// itself (short_circuit.rs); `GUST_SHORT_CIRCUIT=0` turns it off.
    pub short_circuit: bool,
    /// Answer lookups from the node cache and tell its holder what this process
    /// read (node_cache/); `GUST_NODE_CACHE=0` turns it off (tests that count
    /// requests).
    pub node_cache: bool,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            rpc_timeout: Duration::from_secs(30),
            force_tcp: false,
            fabric: true,
            grants: true,
            check_permissions: true,
            short_circuit: true,
            node_cache: true,
        }
    }
}

impl ClientOptions {
    pub fn from_env() -> Self {
        let mut o = ClientOptions::default();
        if let Some(ms) = std::env::var("GUST_RPC_TIMEOUT_MS").ok().and_then(|v| v.parse::<u64>().ok()) {
            o.rpc_timeout = Duration::from_millis(ms.max(1));
        }
        let transport = std::env::var("GUST_TRANSPORT").unwrap_or_default();
        o.force_tcp = transport == "tcp" || transport == "fabric";
        o.fabric = transport != "tcp";
        o.grants = std::env::var("GUST_GRANTS").map_or(true, |v| v != "0");
        o.short_circuit = std::env::var("GUST_SHORT_CIRCUIT").map_or(true, |v| v != "0");
        o.node_cache = node_cache::bytes_from_env() != 0;
        o
    }
}

/// A connection to one GustFS instance. Cheap to share across threads (`&self`
/// everywhere); no global lock on the I/O path.
pub struct Client {
    hosts: HostsFile,
    hosts_path: PathBuf,
    dist: layout::Layout,
    chunk_size: u64,
    transport: Transport,
    files: FdTable,
    /// Deferred creates not yet sent (inline.rs).
    pending: open_files::FileSet,
    /// Closed deferred creates queued for a batch (create_batch.rs, under claims).
    creates: create_batch::CreateBatch,
    /// Unlinks deferred under claims, queued for a batch (remove_batch.rs).
    removes: remove_batch::RemoveBatch,
    /// One flush of those queues at a time, which other threads wait for (flight.rs).
    flight: flight::Flight,
    listing: listing::ListingAttrs,
    /// Descriptors with unsent sizes (size_cache.rs).
    /// Sizes held back (size_cache.rs): shared with the recall handlers.
    sizes: std::sync::Arc<size_cache::SizeHolds>,
    /// Descriptors with buffered writes (io/write.rs).
    buffered: open_files::FileSet,
    /// Write-behind buffer per descriptor in bytes; 0: off (io/write.rs).
    write_behind_bytes: AtomicUsize,
    /// `open_deferred` defers O_EXCL creates too (see `set_defer_exclusive_create`).
    defer_exclusive_create: AtomicBool,
    /// Largest file this client creates inline (inline.rs): INLINE_BYTES_MAX, or
    /// less from $GUST_INLINE_BYTES_MAX (benchmarks compare thresholds with one build).
    inline_bytes_max: usize,
    /// The process is ending: nothing is held back any more (exit.rs).
    ending: AtomicBool,
    /// Whose mode bits are checked (permissions.rs): `None` when the front end
    /// leaves them to the kernel, else the instance owner's uid (the hosts file's
    /// owner), whom no check applies to (as root).
    permissions_owner: Option<u32>,
    /// The erasure code's layout, in an erasure-coded instance (ec/).
    ec: Option<ec::Stripes>,
    /// This node's cache of what its processes read (node_cache/).
    node: node_cache::Reader,
}

/// Lexically normalizes an absolute path ([`path::normalize`], errors as [`Errno`]).
pub fn normalize(p: &str) -> Result<String> {
    path::normalize(p).map_err(Errno)
}

impl Client {
    /// Connects to the instance described by `$GUST_HOSTS_FILE`.
    pub fn from_env() -> std::result::Result<Client, String> {
        let p = std::env::var_os("GUST_HOSTS_FILE")
            .ok_or("GUST_HOSTS_FILE is not set; run `eval \"$(gust env)\"` or pass --hosts-file")?;
        Client::open_instance(Path::new(&p), ClientOptions::from_env())
    }

    /// Reads the hosts file and secret. Connections open lazily on first use.
    pub fn open_instance(hosts_path: &Path, opts: ClientOptions) -> std::result::Result<Client, String> {
        // GUST_TRACE names the tracepoints this process records (gust-trace); every
        // front end's client comes through here.
        gust_trace::init_from_env("client")?;
        let hosts = load_hosts(hosts_path)?;
        let secret = gust_hosts::load_secret(hosts_path).map_err(|e| e.to_string())?;
        let n = hosts.placed_count();
        let entries = daemon_slots(&hosts);
        let transport = Transport::new(
            entries,
            Some(hosts_path.to_path_buf()),
            secret,
            rpc::TransportOptions {
                timeout: opts.rpc_timeout,
                force_tcp: opts.force_tcp,
                fabric: opts.fabric,
                replicas: hosts.replicas,
                proxy: false,
                grants: opts.grants && hosts.cache_of.is_none(),
                chunk_bytes: hosts.chunk_size_bytes,
                // Cut read spans where a hole follows, as the daemons of placements
                // that spill do (gust-daemon's lib.rs).
                short_circuit: opts.short_circuit.then_some(layout::spills(&hosts)),
                erasure_coded: hosts.ec.is_some(),
            },
        );
        let dist = layout::Layout::new(layout::distributor(&hosts));
        let ec = match hosts.ec {
            Some((k, m)) => {
                let weights = (hosts.placement == gust_hosts::Placement::Capacity).then(|| layout::capacities(&hosts));
                Some(ec::Stripes::new(n, k, m, hosts.chunk_size_bytes, weights.as_deref())?)
            }
            None => None,
        };
        transport.set_layout(hosts.generation, n);
        let write_behind_bytes = io::bytes_from_env(hosts.chunk_size_bytes);
        let sizes = std::sync::Arc::new(size_cache::SizeHolds::default());
        transport.grants.set_size_holder(sizes.clone());
        Ok(Client {
            chunk_size: hosts.chunk_size_bytes,
            hosts,
            hosts_path: hosts_path.to_path_buf(),
            dist,
            transport,
            files: FdTable::new(OPEN_FILES_MAX),
            pending: open_files::FileSet::default(),
            creates: create_batch::CreateBatch::from_env(),
            removes: remove_batch::RemoveBatch::from_env(),
            flight: flight::Flight::default(),
            listing: listing::ListingAttrs::default(),
            sizes,
            buffered: open_files::FileSet::default(),
            write_behind_bytes: AtomicUsize::new(write_behind_bytes),
            defer_exclusive_create: AtomicBool::new(false),
            inline_bytes_max: std::env::var("GUST_INLINE_BYTES_MAX")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .map_or(INLINE_BYTES_MAX, |n| n.min(INLINE_BYTES_MAX)),
            ending: AtomicBool::new(false),
            permissions_owner: opts.check_permissions.then(|| {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(hosts_path).map_or(0, |m| m.uid())
            }),
            ec,
            node: node_cache::Reader::new(opts.grants && opts.node_cache),
        })
    }

    /// Lets `open_deferred` defer O_EXCL creates too: EEXIST then comes from close,
    /// not open (front ends set it from GUST_DEFER_EXCL=1; docs/SEMANTICS.md).
    pub fn set_defer_exclusive_create(&self, on: bool) {
        self.defer_exclusive_create.store(on, Ordering::Relaxed);
    }

    pub fn hosts(&self) -> &HostsFile {
        &self.hosts
    }
    pub fn hosts_path(&self) -> &Path {
        &self.hosts_path
    }
    pub fn daemon_count(&self) -> u32 {
        self.dist.daemon_count()
    }
    /// The prefix under which front ends show this instance's paths.
    pub fn mountdir(&self) -> &str {
        &self.hosts.mountdir
    }
    pub fn chunk_size_bytes(&self) -> u64 {
        self.chunk_size
    }
    /// RPCs this client has sent (each request to each daemon counts once).
    pub fn rpcs_sent(&self) -> u64 {
        self.transport.rpcs_sent.load(Ordering::Relaxed)
    }
    /// What the last transport failure was (daemon, address, cause), for messages.
    pub fn last_transport_error(&self) -> Option<String> {
        self.transport.last_error()
    }

    /// Maps a path under the mount directory to a path inside the file system.
    /// `None` if `p` is not under the mount directory.
    pub fn internal_path(&self, p: &str) -> Option<String> {
        let m = self.hosts.mountdir.trim_end_matches('/');
        if m.is_empty() {
            return normalize(p).ok();
        }
        let rest = p.strip_prefix(m)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        normalize(if rest.is_empty() { "/" } else { rest }).ok()
    }
}

/// The hosts file at `path`, refused when it cannot describe a working instance: no
/// daemon yet, ids with a gap, more replicas than daemons.
fn load_hosts(path: &Path) -> std::result::Result<HostsFile, String> {
    let hosts = HostsFile::load(path).map_err(|e| e.to_string())?;
    if hosts.daemons.is_empty() {
        return Err(format!("{}: no daemon registered yet", path.display()));
    }
    // The daemons that hold data are 0..placed; those joining (`gust expand`)
    // register in any order, and none is routed to yet.
    let n = hosts.placed_count();
    if !hosts.daemons.iter().take(n as usize).enumerate().all(|(i, d)| d.id as usize == i) {
        return Err(format!("{}: daemon ids are not 0..{n} (a daemon missing?)", path.display()));
    }
    if hosts.replicas > n {
        return Err(format!(
            "{}: {} replicas need at least as many daemons, and {n} are registered",
            path.display(),
            hosts.replicas
        ));
    }
    Ok(hosts)
}

/// One transport slot per daemon id, with room for the daemons the instance may grow
/// to (layout.rs): the ids not registered yet have no endpoint until a new layout
/// names them.
fn daemon_slots(hosts: &HostsFile) -> Vec<gust_hosts::DaemonEntry> {
    let slots = hosts.daemons.iter().map(|d| d.id + 1).max().unwrap_or(0).max(hosts.room());
    let mut entries: Vec<gust_hosts::DaemonEntry> = (0..slots)
        .map(|id| gust_hosts::DaemonEntry {
            id,
            host: String::new(),
            pid: 0,
            rootdir: PathBuf::new(),
            endpoints: Vec::new(),
            capacity_bytes: None,
        })
        .collect();
    for d in &hosts.daemons {
        entries[d.id as usize] = d.clone();
    }
    entries
}
