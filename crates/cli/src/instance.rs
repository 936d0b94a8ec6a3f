//! Starting, stopping and inspecting an instance on this machine.

use clap::Args;
use gust_client::{Client, ClientOptions};
use gust_hosts::HostsFile;
use std::fs;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use std::time::Duration;

/// /tmp/gustfs-$USER, or /tmp/gustfs-$USER-job$SLURM_JOB_ID inside a SLURM job (two
/// jobs sharing a node get separate instances; every step finds its job's).
fn default_rootdir() -> PathBuf {
    let user = std::env::var("USER").unwrap_or_else(|_| format!("uid{}", unsafe { libc::getuid() }));
    match std::env::var("SLURM_JOB_ID") {
        Ok(j) if !j.is_empty() => PathBuf::from(format!("/tmp/gustfs-{user}-job{j}")),
        _ => PathBuf::from(format!("/tmp/gustfs-{user}")),
    }
}

#[derive(Args, Clone)]
pub struct InstanceArgs {
    /// Hosts file of the instance [default: $GUST_HOSTS_FILE, else <rootdir>/gust.hosts]
    #[arg(long)]
    pub hosts_file: Option<PathBuf>,
    /// Root directory given to `gust start` [default: /tmp/gustfs-$USER]
    #[arg(long)]
    pub rootdir: Option<PathBuf>,
}

impl InstanceArgs {
    pub fn hosts_path(&self) -> PathBuf {
        if let Some(h) = &self.hosts_file {
            return h.clone();
        }
        if let Some(r) = &self.rootdir {
            return r.join("gust.hosts");
        }
        if let Some(h) = std::env::var_os("GUST_HOSTS_FILE") {
            return PathBuf::from(h);
        }
        default_rootdir().join("gust.hosts")
    }

    pub fn client(&self) -> Result<Client, String> {
        let p = self.hosts_path();
        if !p.exists() {
            return Err(format!(
                "no instance: hosts file {} does not exist (start one with `gust start`)",
                p.display()
            ));
        }
        Client::open_instance(&p, ClientOptions::from_env())
    }
}

/// The chunk size of an instance started without `--chunk-size` (and without
/// `--ec`).
const DEFAULT_CHUNK_BYTES: u64 = 512 * 1024;

#[derive(Args)]
pub struct StartArgs {
    /// Number of daemons to start on this machine [default: 1].
    #[arg(long)]
    local: Option<u32>,
    #[command(flatten)]
    cluster: crate::cluster::ClusterArgs,
    /// Directory under which each daemon gets a root directory d0, d1, ...
    #[arg(long)]
    rootdir: Option<PathBuf>,
    /// Path prefix the preload library and tools serve from GustFS.
    #[arg(long, default_value = "/gustfs")]
    mountdir: String,
    /// Hosts file [default: <rootdir>/gust.hosts]. --local only: on many nodes the
    /// hosts file is <rootdir>/gust.hosts, the same path on every node, because no
    /// shared file system is assumed.
    #[arg(long)]
    hosts_file: Option<PathBuf>,
    /// Bytes per chunk [default: 512KiB; with --ec K+M, 1 MiB / K: a stripe holds
    /// 1 MiB, so that 1 MiB writes cover whole stripes (256KiB for 4+2)].
    #[arg(long, value_parser = crate::parse_size)]
    chunk_size: Option<u64>,
    /// First TCP port; daemons use consecutive ports. Default: free ports.
    #[arg(long)]
    port: Option<u16>,
    /// create/mkdir check that the parent directory exists (one more RPC each).
    #[arg(long)]
    check_parent: bool,
    /// Seconds to wait for every daemon to answer.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Replace a stale hosts file and root directories left by an instance that is
    /// no longer running (on many nodes: each node's, as its agent starts).
    #[arg(long)]
    force: bool,
    /// Restart the daemons of a stopped instance (`gust stop --keep`, or a failed
    /// site stage-out) on their root directories: same instance, ids and data, e.g.
    /// for the next job of a campaign. On many nodes: the same --rootdir, on the
    /// same hosts (--hosts, or a SLURM job that has them: sbatch -w).
    #[arg(long, conflicts_with = "force")]
    restart: bool,
    /// Cores, niceness and bandwidth of each daemon (`gust tune` changes them later).
    #[command(flatten)]
    limits: crate::tune::LimitArgs,
    /// Worker threads of each daemon, serving all its connections (default: 4 per
    /// core, 8 to 64; with --local N, that divided by N, at least 2).
    #[arg(long)]
    threads: Option<usize>,
    /// Each daemon listens on this libfabric provider too ("tcp;ofi_rxm",
    /// "verbs;ofi_rxm", cxi, efa; shm for tests on one node), and clients on other
    /// nodes reach it there before TCP (docs/GUIDE.md, "HPC networks").
    #[arg(long, value_name = "PROVIDER")]
    fabric: Option<String>,
    /// Bound on each daemon's memory for requests in flight, all connections
    /// together (default 512MiB); a connection whose next frame does not fit waits.
    #[arg(long, value_parser = crate::parse_size)]
    request_memory: Option<u64>,
    /// Seconds a frame may take to arrive once started, and a reply to be taken by
    /// its client, before a daemon closes the connection (default 60).
    #[arg(long)]
    stall_timeout: Option<f64>,
    /// Serve each daemon's Prometheus metrics at http://ADDR/metrics; daemon i
    /// takes port + i (port 0: free ports; `gust status` shows them). E.g.
    /// 127.0.0.1:9400. On many nodes give 0.0.0.0:PORT: each daemon serves on its
    /// own address (the hosts file's) at PORT. Off by default.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Bound on each daemon's event log (`gust events`); 0 turns event logs off.
    #[arg(long, value_parser = crate::parse_size)]
    events_cap: Option<u64>,
    /// Cache mode: mirror this directory of the shared file system; files are
    /// fetched on first open and written back after they are written (`gust
    /// flush`, and at `gust stop`). On many nodes DIR must be on a file system
    /// every node sees; the write-back runs where `gust start` runs.
    #[arg(long, value_name = "DIR")]
    cache_of: Option<PathBuf>,
    /// Daemon tracepoints on from the start (names or groups: md, chunk, daemon);
    /// needs --trace-dir. `gust trace on|off` switches them later.
    #[arg(long, value_name = "NAMES")]
    trace: Option<String>,
    /// Directory for the daemons' trace files (one per daemon; on many nodes, DIR on
    /// each daemon's own node).
    #[arg(long, value_name = "DIR")]
    trace_dir: Option<PathBuf>,
    /// How chunks are placed: `wide` (every daemon equally), `capacity` (weighted
    /// by each daemon's capacity: its free space at start, or --declare-capacity)
    /// or `local` (a file's chunks on a daemon of the node that creates it: a
    /// checkpoint read back by its writer never crosses the network; a process
    /// with GUST_PLACEMENT=wide, and staging, stripe theirs).
    #[arg(long, default_value = "wide")]
    placement: gust_hosts::Placement,
    /// Declare the capacity of the daemons, one size for all or one per daemon
    /// (e.g. 8MiB,8MiB,16MiB,32MiB; on many nodes one size for all): a daemon
    /// refuses writes past it with ENOSPC, and capacity placement weighs it by it.
    /// For tests and trials on one disk.
    #[arg(long, value_name = "SIZES", value_delimiter = ',', value_parser = crate::parse_size)]
    declare_capacity: Vec<u64>,
    /// Copies of every record and chunk, on distinct daemons (1 to 3, fixed for the
    /// instance): with R copies, operations go on with up to R-1 daemons down.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=gust_placement::REPLICAS_MAX as i64))]
    replicas: u32,
    /// Erasure-code the chunks instead of copying them: stripes of K data and M
    /// parity cells on K+M distinct daemons (e.g. 4+2: any 2 daemons may be lost,
    /// for 1.5x the data's size). Records are kept M+1 times (M at most 2).
    #[arg(long, value_name = "K+M", value_parser = gust_placement::ec::Code::parse, conflicts_with = "replicas")]
    ec: Option<gust_placement::ec::Code>,
    /// Daemons the instance may grow to (`gust expand`): clients keep room for that
    /// many [default: 4 times the daemons started, at least 64].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=gust_hosts::DAEMONS_MAX as i64))]
    daemons_max: Option<u32>,
}

/// Options `gust start` passes on to every daemon.
struct DaemonOptions {
    /// The same for every daemon, local or on nodes (`tuning_options`).
    tuning: Vec<String>,
    metrics: Option<String>,
    events_cap: Option<u64>,
    /// --trace and --trace-dir, as daemon arguments.
    trace: Vec<String>,
    /// --declare-capacity: one size for all, or one per daemon id.
    capacities: Vec<u64>,
    /// Daemons joining a running instance (`gust expand`): no environment to print.
    joining: bool,
}

impl StartArgs {
    /// `--chunk-size`, or its default: 512 KiB, or with `--ec` a stripe of 1 MiB
    /// (gust-placement's `Code::default_cell_bytes`).
    fn chunk_bytes(&self) -> u64 {
        self.chunk_size.unwrap_or_else(|| self.ec.map_or(DEFAULT_CHUNK_BYTES, |c| c.default_cell_bytes()))
    }

    /// The options of the daemons of a local start: `here` daemons share this
    /// machine's cores.
    fn daemon_options(&self, here: usize) -> Result<DaemonOptions, String> {
        if let Some(m) = &self.metrics {
            metrics_addr(m, 0)?;
        }
        let mut trace = Vec::new();
        if let Some(d) = &self.trace_dir {
            let abs = std::path::absolute(d).map_err(|e| format!("--trace-dir {}: {e}", d.display()))?;
            trace.extend(["--trace-dir".to_string(), abs.display().to_string()]);
        }
        if let Some(t) = &self.trace {
            if self.trace_dir.is_none() {
                return Err("--trace needs --trace-dir (where the daemons' trace files go)".into());
            }
            gust_trace::registry::select(t).map_err(|e| format!("--trace: {e}"))?;
            trace.extend(["--trace".to_string(), t.clone()]);
        }
        Ok(DaemonOptions {
            tuning: self.tuning_options(here),
            metrics: self.metrics.clone(),
            events_cap: self.events_cap,
            trace,
            capacities: self.declare_capacity.clone(),
            joining: false,
        })
    }

    /// Worker threads, request memory, stall timeout and limits, as daemon arguments, for
    /// daemons of which `here` share this machine's cores.
    ///
    /// Daemons that share the cores share the default's threads too (at least 2
    /// each): workers beyond what the cores run make the epoll set wake another
    /// sleeping worker for each request that arrives while one is busy, instead
    /// of the busy one taking it next. On 2 cores, 4 daemons with 8 workers each
    /// against 2 each: 10-20% fewer metadata operations per second and 20% fewer
    /// data-loader files per second (docs/PERFORMANCE.md, "Workers per daemon").
    fn tuning_options(&self, here: usize) -> Vec<String> {
        let mut v = Vec::new();
        let shared = (here > 1).then(|| (gust_daemon::server::default_threads() / here).max(2));
        if let Some(t) = self.threads.or(shared) {
            v.extend(["--threads".to_string(), t.to_string()]);
        }
        if let Some(p) = &self.fabric {
            v.extend(["--fabric".to_string(), p.clone()]);
        }
        if let Some(m) = self.request_memory {
            v.extend(["--request-memory".to_string(), m.to_string()]);
        }
        if let Some(s) = self.stall_timeout {
            v.extend(["--stall-timeout".to_string(), s.to_string()]);
        }
        v.extend(self.limits.daemon_args());
        v
    }
}

impl StartArgs {
    /// The options every node's daemon gets on a multi-node start (one daemon per
    /// node): tuning, event log bound, tracepoints, one declared capacity, and
    /// metrics at `0.0.0.0:PORT`, which each daemon serves on its own address.
    fn node_daemon_options(&self) -> Result<Vec<String>, String> {
        if self.declare_capacity.len() > 1 {
            return Err(format!(
                "--declare-capacity lists {} sizes: on many nodes give one size, for every node's daemon",
                self.declare_capacity.len()
            ));
        }
        if let Some(m) = &self.metrics {
            let a: std::net::SocketAddr = m.parse().map_err(|_| format!("--metrics {m}: not an address"))?;
            if !a.ip().is_unspecified() {
                return Err(format!(
                    "--metrics {m}: on many nodes give 0.0.0.0:PORT; each daemon serves its metrics on its own \
                     address (the one in the hosts file) at PORT"
                ));
            }
        }
        self.daemon_options(1)?.args(0)
    }
}

impl DaemonOptions {
    /// The `gust daemon` arguments of daemon `id`.
    fn args(&self, id: u32) -> Result<Vec<String>, String> {
        let mut v = self.tuning.clone();
        if let Some(m) = &self.metrics {
            v.extend(["--metrics".to_string(), metrics_addr(m, id)?]);
        }
        if let Some(c) = self.events_cap {
            v.extend(["--events-cap".to_string(), c.to_string()]);
        }
        v.extend(self.trace.iter().cloned());
        let capacity =
            if self.capacities.len() == 1 { self.capacities.first() } else { self.capacities.get(id as usize) };
        if let Some(c) = capacity {
            v.extend(["--capacity".to_string(), c.to_string()]);
        }
        Ok(v)
    }
}

/// The metrics address of daemon `id` for `gust start --metrics ADDR`.
fn metrics_addr(base: &str, id: u32) -> Result<String, String> {
    let a: std::net::SocketAddr =
        base.parse().map_err(|_| format!("--metrics {base}: not an address (use IP:PORT, e.g. 127.0.0.1:9400)"))?;
    if a.port() == 0 {
        return Ok(a.to_string());
    }
    let port = u16::try_from(a.port() as u32 + id)
        .map_err(|_| format!("--metrics {base}: port {} + {id} is past 65535", a.port()))?;
    Ok(std::net::SocketAddr::new(a.ip(), port).to_string())
}

/// The directory of `--cache-of`, absolute.
fn cache_dir(c: &Path) -> Result<String, String> {
    let arg = c.to_string_lossy();
    gust_stage::refuse_url(&arg).map_err(|e| format!("--cache-of {e}"))?;
    let abs = fs::canonicalize(c).map_err(|e| format!("--cache-of {}: {e}", c.display()))?;
    if !abs.is_dir() {
        return Err(format!("--cache-of {}: not a directory", c.display()));
    }
    let abs = abs.to_str().ok_or("--cache-of: not a UTF-8 path")?.to_string();
    if abs.contains(char::is_whitespace) {
        return Err(format!("--cache-of {abs}: paths with spaces are not supported"));
    }
    Ok(abs)
}

/// What `--ec` cannot go with (docs/DESIGN.md, "Erasure codes", "Not yet").
fn check_erasure_code(a: &StartArgs) -> Result<(), String> {
    let Some(code) = a.ec else { return Ok(()) };
    if code.m + 1 > gust_placement::REPLICAS_MAX {
        return Err(format!(
            "--ec {code}: records are kept M+1 times, and at most {} copies are supported: M at most {}",
            gust_placement::REPLICAS_MAX,
            gust_placement::REPLICAS_MAX - 1
        ));
    }
    if a.placement == gust_hosts::Placement::Local {
        return Err(format!(
            "--ec {code} with --placement local: a stripe's cells are on K+M distinct daemons, not on the writer's node"
        ));
    }
    if a.cache_of.is_some() {
        return Err(format!("--ec {code} with --cache-of is not supported yet"));
    }
    if crate::cluster::wanted(&a.cluster, a.local.is_some()) {
        // The nodes are counted where they are known (cluster.rs).
        return Ok(());
    }
    let local = a.local.unwrap_or(1);
    if code.width() > local {
        return Err(format!("--ec {code} needs at least {} daemons (--local {local})", code.width()));
    }
    Ok(())
}

/// Creates a directory (and missing parents) with mode 0700; an existing one is left
/// as it is.
fn private_dir(p: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(p)
}

use gust_launch::local::{LocalDaemon, LocalPlan};
use gust_launch::proc::{is_zombie, pid_alive};

pub fn start(a: StartArgs) -> Result<(), String> {
    check_erasure_code(&a)?;
    if let (Some(p), Some(why)) = (&a.fabric, gust_transport::ofi::unavailable()) {
        return Err(format!("--fabric {p}: {why}"));
    }
    if a.replicas > 1 && a.placement == gust_hosts::Placement::Capacity {
        // A copy refused for space would have to move on while its sibling stays:
        // the copies would differ. Not built yet (docs/DESIGN.md).
        return Err("--placement capacity with --replicas above 1 is not supported yet".into());
    }
    if crate::cluster::wanted(&a.cluster, a.local.is_some()) {
        if a.hosts_file.is_some() {
            return Err("--hosts-file is for --local instances: on many nodes the hosts file is \
                        <rootdir>/gust.hosts, the same path on every node (give --rootdir)"
                .into());
        }
        let cache_of = match &a.cache_of {
            Some(c) if store_url(c).is_some() => {
                return Err(format!(
                    "--cache-of {}: cache mode of an object store is for --local instances in this version; \
                     stage its objects in with `gust stage in URL DEST`, or show them with `gust view add`",
                    c.display()
                ))
            }
            Some(c) => Some(cache_dir(c)?),
            None => None,
        };
        let common = crate::cluster::Common {
            base: a.rootdir.clone().unwrap_or_else(default_rootdir),
            auto_storage: a.rootdir.is_none(),
            mountdir: a.mountdir.clone(),
            chunk_size_bytes: a.chunk_bytes(),
            check_parent: a.check_parent,
            port: a.port,
            timeout_s: a.timeout,
            daemon_options: a.node_daemon_options()?,
            placement: a.placement,
            replicas: a.ec.map_or(a.replicas, |c| c.m + 1),
            ec: a.ec.map(|c| (c.k, c.m)),
            restart: a.restart,
            force: a.force,
            cache_of,
            daemons_max: a.daemons_max,
        };
        return crate::cluster::start(&a.cluster, common);
    }
    let local = a.local.unwrap_or(1);
    if local == 0 {
        return Err("--local must be at least 1".into());
    }
    if a.replicas > local {
        return Err(format!("--replicas {} needs at least {} daemons (--local {local})", a.replicas, a.replicas));
    }
    if a.declare_capacity.len() > 1 && a.declare_capacity.len() != local as usize {
        return Err(format!(
            "--declare-capacity lists {} sizes for {local} daemons (give one for all, or one per daemon)",
            a.declare_capacity.len()
        ));
    }
    let rootdir = a.rootdir.clone().unwrap_or_else(default_rootdir);
    let hosts_path = a.hosts_file.clone().unwrap_or_else(|| rootdir.join("gust.hosts"));
    if !(gust_placement::CHUNK_SIZE_BYTES_MIN..=gust_placement::CHUNK_SIZE_BYTES_MAX).contains(&a.chunk_bytes()) {
        return Err(format!(
            "--chunk-size must be between {} and {} bytes",
            gust_placement::CHUNK_SIZE_BYTES_MIN,
            gust_placement::CHUNK_SIZE_BYTES_MAX
        ));
    }
    if hosts_path.exists() {
        let old = HostsFile::load(&hosts_path)
            .map_err(|e| format!("{e} (not a GustFS hosts file? refusing to overwrite it)"))?;
        // A daemon that exited but is not yet reaped (its parent, often init in a
        // container, reaps lazily) is not running.
        let alive: Vec<u32> = old
            .daemons
            .iter()
            .filter(|d| d.host == gust_hosts::this_host() && pid_alive(d.pid) && !is_zombie(d.pid))
            .map(|d| d.pid)
            .collect();
        if !alive.is_empty() {
            return Err(format!(
                "instance {} is already running with hosts file {} (daemon pids {alive:?}); stop it first with `gust stop`",
                old.instance,
                hosts_path.display()
            ));
        }
        if a.restart {
            let me = gust_hosts::this_host();
            let plan: Vec<(u32, PathBuf, String)> = old
                .daemons
                .iter()
                .filter(|d| d.host == me)
                .map(|d| {
                    (
                        d.id,
                        d.rootdir.clone(),
                        match a.port {
                            Some(p) => format!("127.0.0.1:{}", p as u32 + d.id),
                            None => "127.0.0.1:0".into(),
                        },
                    )
                })
                .collect();
            if plan.len() != old.daemons.len() {
                return Err(format!(
                    "{} lists daemons on other hosts: restart the instance with `gust start --restart --rootdir \
                     DIR --hosts HOSTS` (ssh), or in a SLURM job on those nodes",
                    hosts_path.display()
                ));
            }
            let log_dir = hosts_path.parent().map(Path::to_path_buf).unwrap_or_else(|| rootdir.clone());
            launch(&plan, &old.mountdir, &hosts_path, &log_dir, a.timeout, false, &a.daemon_options(plan.len())?)?;
            if let Some(c) = old.cache_of.as_ref().or(old.cache_of_store.as_ref()) {
                crate::writeback::start(&hosts_path, c)?;
            }
            crate::view::restart_all(&hosts_path)?;
            return Ok(());
        }
        if !a.force {
            return Err(format!(
                "stale hosts file {} of instance {} (no daemon running); pass --restart to bring it back with its data, \
                 or --force to replace it and its root directories",
                hosts_path.display(),
                old.instance
            ));
        }
        for d in &old.daemons {
            let _ = fs::remove_dir_all(&d.rootdir);
        }
        let _ = fs::remove_file(&hosts_path);
    }
    if a.restart {
        return Err(format!("--restart: no stopped instance at {} (nothing to restart)", hosts_path.display()));
    }
    // Directories this creates are the owner's alone (0700), whatever the umask. An
    // existing --rootdir keeps its mode (it may be shared): what goes into it is
    // private by itself (daemon root directories 0700; logs, hosts file, secret 0600).
    private_dir(&rootdir).map_err(|e| format!("cannot create root directory {}: {e}", rootdir.display()))?;
    if let Some(parent) = hosts_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        private_dir(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    // Create the instance (header and secret) before any daemon, so all join it.
    let mut hosts = HostsFile::new(gust_hosts::new_instance_id(), a.chunk_bytes(), a.mountdir.clone(), a.check_parent);
    if let Some(c) = &a.cache_of {
        match store_url(c) {
            Some(url) => {
                gust_objstore::ObjectUrl::parse(&url)?;
                gust_objstore::Config::from_env().map_err(|e| format!("--cache-of {url}: {e}"))?;
                hosts.cache_of_store = Some(url);
            }
            None => hosts.cache_of = Some(cache_dir(c)?),
        }
    }
    hosts.placement = a.placement;
    hosts.replicas = a.replicas;
    if let Some(code) = a.ec {
        hosts.ec = Some((code.k, code.m));
        hosts.replicas = code.m + 1;
    }
    hosts.daemons_max = Some(a.daemons_max.unwrap_or((4 * local).max(64)).max(local));
    hosts.store(&hosts_path).map_err(|e| e.to_string())?;
    gust_hosts::create_secret(&hosts_path).map_err(|e| e.to_string())?;

    // Without --rootdir the root directories go on the fastest local storage with
    // room (gust probe); the hosts file and logs stay in the default directory.
    let data_dir = match &a.rootdir {
        Some(r) => r.clone(),
        None => {
            let c = gust_probe::choose_storage(&gust_probe::probe(0), a.cluster.capacity.saturating_mul(local as u64))?;
            eprintln!("gust: root directories in {}", c.why);
            let d = c.dir.join(rootdir.file_name().unwrap_or_else(|| "gustfs".as_ref()));
            fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&d, fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot make {} private: {e}", d.display()))?;
            d
        }
    };
    let mut plan = Vec::new();
    for i in 0..local {
        let droot = data_dir.join(format!("d{i}"));
        if droot.exists() {
            fs::remove_dir_all(&droot).map_err(|e| format!("cannot clean {}: {e}", droot.display()))?;
        }
        private_dir(&droot).map_err(|e| format!("cannot create {}: {e}", droot.display()))?;
        let listen = match a.port {
            Some(p) => format!("127.0.0.1:{}", p as u32 + i),
            None => "127.0.0.1:0".to_string(),
        };
        plan.push((i, droot, listen));
    }
    launch(&plan, &a.mountdir, &hosts_path, &rootdir, a.timeout, true, &a.daemon_options(plan.len())?)?;
    if let Some(c) = &hosts.cache_of {
        crate::writeback::start(&hosts_path, c)?;
    }
    if let Some(url) = &hosts.cache_of_store {
        fill_from_store(&hosts_path, url)?;
        crate::writeback::start(&hosts_path, url)?;
    }
    Ok(())
}

/// `--cache-of s3://…`: the URL, if the argument is one.
fn store_url(c: &Path) -> Option<String> {
    let arg = c.to_string_lossy();
    (arg.starts_with("s3://") || arg.starts_with("S3://")).then(|| arg.into_owned())
}

/// Cache mode of a store: a placeholder of every object under the prefix (its
/// size and time, fetched on first open).
fn fill_from_store(hosts_path: &Path, url: &str) -> Result<(), String> {
    let started = std::time::Instant::now();
    let c = Client::open_instance(hosts_path, ClientOptions::from_env())?;
    let cfg = gust_objstore::Config::from_env().map_err(|e| format!("--cache-of {url}: {e}"))?;
    let mut view = gust_view::sync::View::at(&c, "/", url)?;
    let store = gust_objstore::Store::open(&cfg, view.source().0)?;
    let n = view.fill(&store).map_err(|e| format!("--cache-of {e}"))?;
    let skipped = if n.skipped > 0 {
        format!(" ({} left out: their paths are taken or are no paths)", n.skipped)
    } else {
        String::new()
    };
    eprintln!(
        "gust: cache of {url}: {} objects listed in {}{skipped}, fetched on first open",
        n.objects,
        gust_stage::report::human_secs(started.elapsed().as_secs_f64())
    );
    Ok(())
}

/// Starts one daemon per (id, root directory, listen address) through gust-launch's
/// local launcher (detached, each logging to `<log_dir>/d<id>.log`), and tells the
/// user once all have registered and answer.
fn launch(
    plan: &[(u32, PathBuf, String)],
    mountdir: &str,
    hosts_path: &Path,
    log_dir: &Path,
    timeout_s: u64,
    fresh_logs: bool,
    options: &DaemonOptions,
) -> Result<(), String> {
    let gust_exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
    let mut daemons = Vec::new();
    for (id, rootdir, listen) in plan {
        daemons.push(LocalDaemon {
            id: *id,
            rootdir: rootdir.clone(),
            listen: listen.clone(),
            args: options.args(*id)?,
        });
    }
    let h = gust_launch::local::start(&LocalPlan {
        daemons,
        gust_exe,
        mountdir,
        hosts_path,
        log_dir,
        timeout: Duration::from_secs(timeout_s),
        fresh_logs,
    })?;
    let n = plan.len();
    if options.joining {
        eprintln!("gust: {n} daemon(s) joined instance {}", h.instance);
        return Ok(());
    }
    eprintln!(
        "gust: instance {} up: {n} daemon(s), chunk size {} bytes, hosts file {}",
        h.instance,
        h.chunk_size_bytes,
        hosts_path.display()
    );
    print_env(hosts_path, &h);
    Ok(())
}

/// Starts more daemons for an instance that runs (`gust expand`), as `launch`;
/// `capacities` as `--declare-capacity` (one for all, or by daemon id).
pub(crate) fn launch_more(
    plan: &[(u32, PathBuf, String)],
    mountdir: &str,
    hosts_path: &Path,
    log_dir: &Path,
    timeout_s: u64,
    capacities: Vec<u64>,
) -> Result<(), String> {
    let options = DaemonOptions {
        tuning: Vec::new(),
        metrics: None,
        events_cap: None,
        trace: Vec::new(),
        capacities,
        joining: true,
    };
    launch(plan, mountdir, hosts_path, log_dir, timeout_s, true, &options)
}

pub(crate) fn print_env(hosts_path: &Path, h: &HostsFile) {
    let abs = fs::canonicalize(hosts_path).unwrap_or_else(|_| hosts_path.to_path_buf());
    println!("export GUST_HOSTS_FILE={}", abs.display());
    println!("export GUST_MOUNTDIR={}", h.mountdir);
}

pub fn env(a: InstanceArgs) -> Result<(), String> {
    let p = a.hosts_path();
    let h = HostsFile::load(&p).map_err(|e| format!("{e} (is an instance running? `gust start`)"))?;
    print_env(&p, &h);
    Ok(())
}

#[derive(Args)]
pub struct StopArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// Keep the daemons' root directories (data and metadata) and the hosts file.
    #[arg(long)]
    keep: bool,
    /// Before stopping, write the job's I/O statistics to FILE as JSON (operations
    /// and bytes by type, per daemon, busiest directories) and print a summary.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// Before stopping, write which files (and byte ranges) the job read to FILE,
    /// for `gust stage in --from-record FILE` in the next run of the workflow.
    #[arg(long, value_name = "FILE")]
    record_reads: Option<PathBuf>,
    /// Cache mode: stop without writing back what changed in GustFS.
    #[arg(long)]
    discard: bool,
}

pub fn stop(a: StopArgs) -> Result<(), String> {
    let p = a.inst.hosts_path();
    if let Some(file) = &a.record_reads {
        let c = Client::open_instance(
            &p,
            ClientOptions { rpc_timeout: Duration::from_secs(30), force_tcp: false, ..Default::default() },
        )?;
        let r = gust_stage::reads::record(&c, file)?;
        eprintln!(
            "gust: the job read {} file(s), {} in all; record written to {}{}",
            r.files,
            human(r.bytes),
            file.display(),
            if r.dropped > 0 {
                format!(" ({} file(s) not logged: the read logs were full)", r.dropped)
            } else {
                String::new()
            }
        );
    }
    crate::writeback::finish(&p, a.discard)?;
    crate::view::stop_all(&p);
    if let Some(file) = &a.stats {
        let h = HostsFile::load(&p).map_err(|e| format!("{e} (is an instance running?)"))?;
        let c = Client::open_instance(
            &p,
            ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: false, ..Default::default() },
        )?;
        let v = crate::stats::job_stats(&h, &crate::stats::gather(&c, &h));
        let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())? + "\n";
        fs::write(file, text).map_err(|e| format!("cannot write statistics to {}: {e}", file.display()))?;
        crate::stats::print_summary(&v);
        eprintln!("gust: statistics written to {}", file.display());
    }
    let r = gust_launch::stop::stop(&p, a.keep, Duration::from_secs(10))?;
    let me = gust_hosts::this_host();
    let fate = |host: &str| {
        if a.keep {
            format!("its files on {host} stay (--keep)")
        } else {
            format!("its files on {host} are removed (below)")
        }
    };
    for id in &r.dead_here {
        eprintln!("gust: daemon {id} on {me} was not running (it had died before the stop); {}", fate(&me));
    }
    for (id, host, why) in &r.unreachable {
        eprintln!("gust: daemon {id} on {host} did not answer ({why}); {}", fate(host));
    }
    for l in &r.cleaned {
        eprintln!("gust: {l}");
    }
    eprintln!("gust: instance {} stopped{}", r.instance, if a.keep { " (data kept)" } else { "" });
    let missing = r.dead_here.len() + r.unreachable.len();
    if missing > 0 {
        return Err(format!(
            "{missing} of {} daemon(s) had died or did not answer before the stop (their data was lost to this \
             stop; with --replicas the other copies served it until then)",
            r.daemons
        ));
    }
    Ok(())
}

use crate::human_size as human;

pub fn status(a: InstanceArgs) -> Result<(), String> {
    let p = a.hosts_path();
    let h = HostsFile::load(&p).map_err(|e| format!("{e} (is an instance running?)"))?;
    let c = Client::open_instance(
        &p,
        ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: false, ..Default::default() },
    )?;
    println!(
        "instance {}  chunk size {}  placement {}  replicas {}  mountdir {}  hosts file {}",
        h.instance,
        human(h.chunk_size_bytes),
        h.placement.name(),
        h.replicas,
        h.mountdir,
        p.display()
    );
    if h.moving {
        println!(
            "moving: data is moving to layout generation {} ({} daemons hold it when done); \
             `gust expand --resume` or `gust shrink --resume` finishes an interrupted move",
            h.generation,
            h.placed_count()
        );
    }
    let all = crate::stats::gather(&c, &h);
    // A daemon that answers but refuses contents (restarted after a crash, or
    // fenced) is not `up`.
    let recovering: Vec<u32> = if h.replicas > 1 {
        all.iter().filter(|(d, r)| r.is_ok() && c.daemon_recovering(*d) == Ok(true)).map(|(d, _)| *d).collect()
    } else {
        Vec::new()
    };
    let down = crate::stats::print_status(&h, &all, &recovering);
    if h.replicas > 1 {
        print_replication(&c, &h, &all, &recovering);
    }
    if down > 0 {
        return Err(format!("{down} daemon(s) not answering"));
    }
    Ok(())
}

/// What a degraded replicated instance has lost: daemons down or recovering, and
/// whose records and chunks (named by the daemon placement puts them on first)
/// have fewer copies, or none.
fn print_replication(
    c: &Client,
    h: &HostsFile,
    all: &[(u32, Result<gust_client::DaemonMetrics, String>)],
    recovering: &[u32],
) {
    let mut bad = Vec::new();
    let mut why = Vec::new();
    for (d, r) in all {
        if r.is_err() {
            bad.push(*d);
            why.push(format!("daemon {d} down"));
        } else if recovering.contains(d) {
            bad.push(*d);
            let by = c.fenced_by(*d);
            if by.is_empty() {
                why.push(format!("daemon {d} recovering (restarted after a crash, or cut off from its peers)"));
            } else {
                let list = by.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
                why.push(format!("daemon {d} FENCED by daemon(s) {list} (it missed changes while skipped)"));
            }
        }
    }
    if bad.is_empty() {
        println!("replicas: {} copies of everything, all daemons serving", h.replicas);
        return;
    }
    let n = h.daemons.len() as u32;
    let (under, lost) = gust_client::degraded_primaries(&bad, h.replicas, n);
    let list = |v: &[u32]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
    println!("replicas: DEGRADED: {}", why.join(", "));
    if why.iter().any(|w| !w.ends_with(" down")) {
        println!("  bring a recovering or fenced daemon D up to date on its host: gust repair --id D");
    }
    println!(
        "  under-replicated: records and chunks placed first on daemon(s) {} ({} of {n} shares)",
        list(&under),
        under.len()
    );
    if !lost.is_empty() {
        println!(
            "  UNAVAILABLE: records and chunks placed first on daemon(s) {} have no serving copy (EIO)",
            list(&lost)
        );
    }
}

pub fn ls(a: InstanceArgs, path: &str) -> Result<(), String> {
    let c = a.client()?;
    let p = c.internal_path(path).unwrap_or_else(|| path.to_string());
    let mut names: Vec<(String, char)> = Vec::new();
    for e in c.opendir(&p).map_err(|e| format!("{path}: {e}"))? {
        let e = e.map_err(|e| format!("{path}: {e}"))?;
        let k = match e.kind {
            gust_client::Kind::Dir => '/',
            gust_client::Kind::Symlink => '@',
            gust_client::Kind::File => ' ',
            gust_client::Kind::Fifo => '|',
            gust_client::Kind::Socket => '=',
            gust_client::Kind::BlockDevice | gust_client::Kind::CharDevice => ' ',
        };
        names.push((e.name, k));
    }
    names.sort();
    let mut out = std::io::stdout().lock();
    for (n, k) in names {
        let _ = writeln!(out, "{n}{}", if k == ' ' { String::new() } else { k.to_string() });
    }
    Ok(())
}

pub fn cat(a: InstanceArgs, path: &str) -> Result<(), String> {
    let c = a.client()?;
    let p = c.internal_path(path).unwrap_or_else(|| path.to_string());
    let fd = c.open(&p, libc::O_RDONLY, 0).map_err(|e| format!("{path}: {e}"))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut out = std::io::stdout().lock();
    loop {
        let n = c.read(fd, &mut buf).map_err(|e| format!("{path}: {e}"))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n]).map_err(|e| e.to_string())?;
    }
    let _ = c.close(fd);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_addresses_per_daemon() {
        assert_eq!(metrics_addr("127.0.0.1:9400", 3).unwrap(), "127.0.0.1:9403");
        assert_eq!(metrics_addr("127.0.0.1:0", 3).unwrap(), "127.0.0.1:0");
        assert_eq!(metrics_addr("[::1]:9400", 1).unwrap(), "[::1]:9401");
        assert!(metrics_addr("127.0.0.1:65535", 1).unwrap_err().contains("past 65535"));
        assert!(metrics_addr("localhost", 0).unwrap_err().contains("not an address"));
    }
}
