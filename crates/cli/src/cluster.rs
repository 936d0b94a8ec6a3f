//! `gust start` on many nodes (ssh to a host list, or srun inside a SLURM
//! allocation) and the hidden `gust node-agent` that the launcher runs on each node.
//! The mechanics live in gust-launch; this module only maps options.

use clap::Args;
use gust_launch::{agent, hostlist, launcher};
use std::path::PathBuf;
use std::time::Duration;

/// Options of `gust start` for more than this machine.
#[derive(Args, Clone, Default)]
pub struct ClusterArgs {
    /// Start one daemon on each of these hosts over ssh, in SLURM's hostlist syntax
    /// ('node[01-16],gpu3'). Inside a SLURM allocation, without --hosts or --local,
    /// `gust start` starts one daemon on each node of the job through srun.
    #[arg(long, conflicts_with = "local")]
    pub hosts: Option<String>,
    /// The ssh command and its options for --hosts [default: $GUST_SSH, else ssh].
    #[arg(long)]
    pub ssh: Option<String>,
    /// Daemons serve on their node's address inside this network (e.g. the
    /// high-speed one, 10.10.0.0/16) [default: the address the launcher reached].
    #[arg(long)]
    pub network: Option<String>,
    /// Without --rootdir: room each daemon needs; `gust start` puts root directories
    /// on the fastest local storage with that much free (as `gust probe` sees it).
    #[arg(long, value_parser = crate::parse_size, default_value = "1GiB")]
    pub capacity: u64,
}

/// Whether `gust start` with these options launches across nodes.
pub fn wanted(c: &ClusterArgs, local_given: bool) -> bool {
    c.hosts.is_some() || (!local_given && std::env::var_os("SLURM_JOB_ID").is_some())
}

pub struct Common {
    pub base: PathBuf,
    /// No --rootdir given: nodes choose storage themselves.
    pub auto_storage: bool,
    pub mountdir: String,
    pub chunk_size_bytes: u64,
    pub check_parent: bool,
    pub port: Option<u16>,
    pub timeout_s: u64,
    pub daemon_options: Vec<String>,
    pub placement: gust_hosts::Placement,
    pub replicas: u32,
    /// `--ec K+M` (records then kept `replicas` = M+1 times).
    pub ec: Option<(u32, u32)>,
    /// Bring back the instance `gust stop --keep` left under `base` on its nodes.
    pub restart: bool,
    /// Replace a stale hosts file (and the nodes' root directories of that instance).
    pub force: bool,
    /// Cache mode: the shared directory the instance mirrors (absolute).
    pub cache_of: Option<String>,
    /// `--daemons-max`: the daemons the instance may grow to.
    pub daemons_max: Option<u32>,
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

pub fn start(c: &ClusterArgs, o: Common) -> Result<(), String> {
    let method = match &c.hosts {
        Some(list) => {
            let hosts = hostlist::expand(list).map_err(|e| e.to_string())?;
            let ssh = c.ssh.clone().or_else(|| std::env::var("GUST_SSH").ok()).unwrap_or_else(|| "ssh".into());
            launcher::Method::Ssh { hosts, ssh: words(&ssh) }
        }
        None => {
            let list = std::env::var("SLURM_JOB_NODELIST")
                .or_else(|_| std::env::var("SLURM_NODELIST"))
                .map_err(|_| "inside a SLURM job but SLURM_JOB_NODELIST is not set".to_string())?;
            let nodes = hostlist::expand(&list).map_err(|e| format!("SLURM_JOB_NODELIST: {e}"))?;
            let srun = std::env::var("GUST_SRUN").unwrap_or_else(|_| "srun".into());
            launcher::Method::Srun { nodes, srun: words(&srun) }
        }
    };
    let hp = agent::hosts_path(&o.base);
    let mut kept = None;
    if hp.exists() {
        if launcher::ping_all(&hp).is_empty() {
            return Err(format!(
                "an instance is already running with hosts file {}; stop it first with `gust stop`",
                hp.display()
            ));
        }
        let old = gust_hosts::HostsFile::load(&hp).map_err(|e| format!("{e} (not a GustFS hosts file?)"))?;
        if o.restart {
            kept = Some(old);
        } else if o.force {
            eprintln!("gust: replacing the stale hosts file {} (its daemons do not answer)", hp.display());
        } else {
            return Err(format!(
                "stale hosts file {} of instance {} (no daemon answers); pass --restart to bring it back with its \
                 data, or --force to replace it and its root directories",
                hp.display(),
                old.instance
            ));
        }
    } else if o.restart {
        return Err(format!(
            "--restart: no stopped instance at {} on this host (run it on one of the instance's nodes, with the \
             --rootdir it was started with)",
            hp.display()
        ));
    }
    let method = match (kept.as_ref(), method) {
        (Some(h), m) => restart_method(h, m)?,
        (None, m) => m,
    };
    let nodes = match &method {
        launcher::Method::Ssh { hosts, .. } => hosts.len(),
        launcher::Method::Srun { nodes, .. } => nodes.len(),
    } as u32;
    if let Some((k, m)) = o.ec.filter(|(k, m)| k + m > nodes) {
        return Err(format!("--ec {k}+{m} needs at least {} nodes (a daemon each), and {nodes} were given", k + m));
    }
    let kind = match method {
        launcher::Method::Ssh { .. } => "ssh",
        launcher::Method::Srun { .. } => "srun",
    };
    let secret = match &kept {
        Some(_) => Some(gust_hosts::load_secret(&hp).map_err(|e| format!("--restart: {e}"))?),
        None => None,
    };
    let header = match kept {
        Some(h) => gust_hosts::HostsFile { daemons: Vec::new(), ..h },
        None => gust_hosts::HostsFile {
            placement: o.placement,
            replicas: o.replicas,
            ec: o.ec,
            cache_of: o.cache_of.clone(),
            daemons_max: Some(o.daemons_max.unwrap_or((4 * nodes).max(64)).max(nodes)),
            ..gust_hosts::HostsFile::new(gust_hosts::new_instance_id(), o.chunk_size_bytes, o.mountdir, o.check_parent)
        },
    };
    let restarted = secret.is_some();
    let plan = launcher::Plan {
        method,
        base: o.base,
        header,
        port: o.port,
        network: c.network.clone(),
        auto_storage: o.auto_storage.then_some(c.capacity),
        timeout: Duration::from_secs(o.timeout_s),
        gust_exe: std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?,
        daemon_options: o.daemon_options,
        restart: secret,
        join: None,
    };
    let s = launcher::start(&plan)?;
    let mut hosts: Vec<&str> = s.hosts.daemons.iter().map(|d| d.host.as_str()).collect();
    hosts.sort();
    hosts.dedup();
    eprintln!(
        "gust: instance {} {}: {} daemon(s) on {} host(s) via {kind} in {:.2} s (all ready {:.2} s, hosts file on every node {:.2} s), hosts file {} on every node",
        s.hosts.instance,
        if restarted { "up again with its data" } else { "up" },
        s.hosts.daemons.len(),
        hosts.len(),
        s.pinged_s,
        s.ready_s,
        s.installed_s,
        s.hosts_path.display()
    );
    if o.auto_storage && !restarted {
        // Which storage each node chose (`gust probe`); the reasons are in each
        // node's log d<id>.log.
        let mut places: std::collections::BTreeMap<String, usize> = Default::default();
        for d in &s.hosts.daemons {
            let parent = d.rootdir.parent().map(|p| p.display().to_string()).unwrap_or_default();
            *places.entry(parent).or_default() += 1;
        }
        let list: Vec<String> = places.iter().map(|(p, n)| format!("{p} on {n} node(s)")).collect();
        eprintln!(
            "gust: root directories on the fastest local storage with {} free: {}",
            crate::human_size(c.capacity),
            list.join(", ")
        );
    }
    if let Some(c) = &s.hosts.cache_of {
        crate::writeback::start(&s.hosts_path, c)?;
    }
    crate::instance::print_env(&s.hosts_path, &s.hosts);
    Ok(())
}

/// The launch of a restart: the kept instance's daemons, each on its own host again
/// (daemon i on the i-th host), through the launcher asked for.
fn restart_method(h: &gust_hosts::HostsFile, m: launcher::Method) -> Result<launcher::Method, String> {
    let kept: Vec<String> = h.daemons.iter().map(|d| d.host.clone()).collect();
    let mut distinct = kept.clone();
    distinct.sort();
    distinct.dedup();
    if distinct.len() != kept.len() || !h.is_complete(kept.len()) {
        return Err(format!(
            "--restart: instance {} ran several daemons on one host (a --local instance): restart it with --local",
            h.instance
        ));
    }
    let missing = |have: &[String]| -> Vec<String> { kept.iter().filter(|k| !have.contains(k)).cloned().collect() };
    match m {
        launcher::Method::Ssh { hosts, ssh } => {
            let gone = missing(&hosts);
            if !gone.is_empty() || hosts.len() != kept.len() {
                return Err(format!(
                    "--restart: instance {} ran on {}; --hosts must name those hosts (not {})",
                    h.instance,
                    kept.join(","),
                    hosts.join(",")
                ));
            }
            Ok(launcher::Method::Ssh { hosts: kept, ssh })
        }
        launcher::Method::Srun { nodes, srun } => {
            let gone = missing(&nodes);
            if !gone.is_empty() {
                return Err(format!(
                    "--restart: instance {} ran on {}; this job does not have {} (submit it with -w {})",
                    h.instance,
                    kept.join(","),
                    gone.join(","),
                    kept.join(",")
                ));
            }
            Ok(launcher::Method::Srun { nodes: kept, srun })
        }
    }
}

/// `gust node-agent`: run by `gust start` on each node (see gust_launch::agent).
#[derive(Args)]
pub struct NodeAgentArgs {
    #[arg(long)]
    base: PathBuf,
    #[arg(long)]
    id: Option<u32>,
    /// Added to SLURM_PROCID for the id (daemons joining a running instance).
    #[arg(long, default_value_t = 0)]
    id_offset: u32,
    #[arg(long)]
    instance: String,
    #[arg(long)]
    chunk_size: u64,
    #[arg(long)]
    mountdir: String,
    #[arg(long)]
    check_parent: bool,
    #[arg(long, default_value = "wide")]
    placement: gust_hosts::Placement,
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    #[arg(long, value_parser = gust_placement::ec::Code::parse)]
    ec: Option<gust_placement::ec::Code>,
    #[arg(long)]
    port: Option<u16>,
    #[arg(long)]
    network: Option<String>,
    #[arg(long)]
    auto_storage: Option<u64>,
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    #[arg(long)]
    detach: bool,
    #[arg(long)]
    detached_child: bool,
    /// Passed to the daemon (repeated).
    #[arg(long = "daemon-option", allow_hyphen_values = true)]
    daemon_options: Vec<String>,
    /// Bring back this node's daemon that `gust stop --keep` left.
    #[arg(long)]
    restart: bool,
}

pub fn node_agent(a: NodeAgentArgs) -> i32 {
    agent::run(agent::AgentArgs {
        base: a.base,
        id: a.id,
        id_offset: a.id_offset,
        instance: a.instance,
        chunk_size_bytes: a.chunk_size,
        mountdir: a.mountdir,
        check_parent: a.check_parent,
        placement: a.placement,
        replicas: a.replicas,
        ec: a.ec.map(|c| (c.k, c.m)),
        port: a.port,
        network: a.network,
        auto_storage: a.auto_storage,
        timeout: Duration::from_secs(a.timeout),
        detach: a.detach,
        detached_child: a.detached_child,
        daemon_options: a.daemon_options,
        restart: a.restart,
    })
}

/// `gust node-clean`: run by `gust stop` on a node whose daemon did not answer.
#[derive(Args)]
pub struct NodeCleanArgs {
    #[arg(long)]
    base: PathBuf,
}

pub fn node_clean(a: NodeCleanArgs) -> Result<(), String> {
    for l in agent::clean_node(&a.base)? {
        println!("{l}");
    }
    Ok(())
}
