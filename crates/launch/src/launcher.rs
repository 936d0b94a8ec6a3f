//! The launcher side of a multi-node start: one node agent per node through ssh or
//! srun, all at once, then the hosts file back to every node; see the crate doc and
//! [`crate::agent`] for the protocol.
//!
//! Cost sketch for N nodes: the launcher's own work is O(N) small messages (one
//! `ready` line in, one hosts file of ~90 bytes per daemon out per node) and N pings
//! on 64 threads; everything on the nodes (agent start, RocksDB open, registration)
//! runs in parallel. With srun, one step launches all agents through slurmd's tree
//! fan-out. With ssh, the launcher runs N ssh clients at once, bounded by
//! [`SSH_PARALLEL_MAX`]; the key exchanges are the cost (docs/PERFORMANCE.md).

use crate::agent::{hosts_path, HOSTS_BYTES_MAX};
use crate::proc::{shell_quote, stop_child, tail_oneline};
use gust_client::{Client, ClientOptions};
use gust_hosts::{DaemonEntry, HostsFile};
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Bound on ssh clients running at once.
pub const SSH_PARALLEL_MAX: usize = 512;
/// How long agents get to clean up after the launcher gives up, before their ssh
/// clients (or srun) are signalled.
const ABORT_GRACE: Duration = Duration::from_secs(5);

pub enum Method {
    /// One ssh per host; `ssh` is the command and its options (e.g. ["ssh", "-F", cfg]).
    Ssh { hosts: Vec<String>, ssh: Vec<String> },
    /// One srun step over the allocation's nodes; `nodes` names them in task order
    /// (from SLURM_JOB_NODELIST), for messages.
    Srun { nodes: Vec<String>, srun: Vec<String> },
}

pub struct Plan {
    pub method: Method,
    /// Node-local instance directory, the same path on every node and here.
    pub base: PathBuf,
    /// Instance id, chunk size, mount directory, check_parent; no daemons.
    pub header: HostsFile,
    pub port: Option<u16>,
    /// Passed to every agent: pick the interface address inside this network.
    pub network: Option<String>,
    /// Some(bytes): each node chooses its own storage for its root directory
    /// (gust-probe) with this much room; None: root directories under `base`.
    pub auto_storage: Option<u64>,
    pub timeout: Duration,
    /// The gust binary on the nodes.
    pub gust_exe: PathBuf,
    /// Daemon options every agent passes on (`--threads 16 --request-memory 1G`).
    pub daemon_options: Vec<String>,
    /// Some(secret): bring back the instance `gust stop --keep` left on the nodes
    /// (`header` is its hosts file's, the hosts are its daemons' in id order: daemon
    /// i on host i); every agent restarts its node's daemon on its root directory.
    pub restart: Option<Vec<u8>>,
    /// Some((hosts file, secret)): grow this running instance (`gust expand`):
    /// the new daemons take ids after its daemons and join unplaced (`placed` is
    /// its daemon count); the hosts file written here and sent to the new nodes
    /// lists them all. The old nodes' copies are the caller's to update.
    pub join: Option<(HostsFile, Vec<u8>)>,
}

pub struct Started {
    pub hosts: HostsFile,
    pub hosts_path: PathBuf,
    /// Seconds from the first spawn to: all ready, hosts file on all nodes, all pinged.
    pub ready_s: f64,
    pub installed_s: f64,
    pub pinged_s: f64,
}

enum Event {
    Ready(DaemonEntry),
    Error(String, String),
    Ok(u32),
    Eof,
}

/// One launched process (an ssh client, or srun) and the daemon ids it carries.
struct Channel {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    /// Where the process's stderr goes (ssh: captured lines; srun: a log file).
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_file: Option<PathBuf>,
    ids: Vec<u32>,
    eof: bool,
}

impl Channel {
    fn send(&mut self, bytes: &[u8]) {
        if let Some(s) = self.stdin.as_mut() {
            if s.write_all(bytes).and_then(|_| s.flush()).is_err() {
                self.stdin = None;
            }
        }
    }
    fn why(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let t = match &self.stderr_file {
            Some(f) => tail_oneline(f, 4),
            None => lines[lines.len().saturating_sub(4)..].join(" | "),
        };
        if t.is_empty() {
            "no message".into()
        } else {
            t
        }
    }
}

fn agent_args(p: &Plan, id: Option<u32>, detach: bool) -> Vec<String> {
    let h = &p.header;
    let mut v = vec![
        p.gust_exe.display().to_string(),
        "node-agent".into(),
        "--base".into(),
        p.base.display().to_string(),
        "--instance".into(),
        h.instance.clone(),
        "--chunk-size".into(),
        h.chunk_size_bytes.to_string(),
        "--mountdir".into(),
        h.mountdir.clone(),
        "--timeout".into(),
        p.timeout.as_secs().max(1).to_string(),
    ];
    if let Some(i) = id {
        v.extend(["--id".into(), i.to_string()]);
    }
    if h.check_parent {
        v.push("--check-parent".into());
    }
    // The node's own hosts file says them too: a daemon reads both when it starts.
    if h.placement != gust_hosts::Placement::Wide {
        v.extend(["--placement".into(), h.placement.name().into()]);
    }
    if h.replicas != 1 {
        v.extend(["--replicas".into(), h.replicas.to_string()]);
    }
    if let Some((k, m)) = h.ec {
        v.extend(["--ec".into(), format!("{k}+{m}")]);
    }
    if let Some(port) = p.port {
        v.extend(["--port".into(), port.to_string()]);
    }
    if let Some(n) = &p.network {
        v.extend(["--network".into(), n.clone()]);
    }
    if let Some(b) = p.auto_storage {
        v.extend(["--auto-storage".into(), b.to_string()]);
    }
    for o in &p.daemon_options {
        // `=` keeps a value that starts with "--" attached to its flag.
        v.push(format!("--daemon-option={o}"));
    }
    if p.restart.is_some() {
        v.push("--restart".into());
    }
    if detach {
        v.push("--detach".into());
    }
    v
}

fn spawn_channel(
    mut cmd: Command,
    label: String,
    ids: Vec<u32>,
    idx: usize,
    stderr_file: Option<PathBuf>,
    tx: &mpsc::Sender<(usize, Event)>,
) -> Result<Channel, String> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    match &stderr_file {
        Some(f) => {
            let file = fs::File::create(f).map_err(|e| format!("cannot create {}: {e}", f.display()))?;
            cmd.stderr(file);
        }
        None => {
            cmd.stderr(Stdio::piped());
        }
    }
    // A terminal's Ctrl-C after `gust start` returned must not reach srun (it would
    // end the daemons' step).
    crate::proc::own_session(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("{label}: cannot run {:?}: {e}", cmd.get_program()))?;
    let stdout = child.stdout.take().expect("piped");
    let txc = tx.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let l = line.trim();
            let ev = if let Some(rest) = l.strip_prefix("ready ") {
                match DaemonEntry::parse(rest) {
                    Ok(d) => Event::Ready(d),
                    Err(e) => Event::Error("?".into(), format!("bad ready line '{l}': {e}")),
                }
            } else if let Some(rest) = l.strip_prefix("error ") {
                let (id, msg) = rest.split_once(' ').unwrap_or((rest, ""));
                Event::Error(id.to_string(), msg.to_string())
            } else if let Some(rest) = l.strip_prefix("ok ") {
                match rest.trim().parse() {
                    Ok(i) => Event::Ok(i),
                    Err(_) => continue,
                }
            } else {
                continue; // banners and other noise
            };
            if txc.send((idx, ev)).is_err() {
                return;
            }
        }
        let _ = txc.send((idx, Event::Eof));
    });
    let stderr = Arc::new(Mutex::new(Vec::new()));
    if let Some(e) = child.stderr.take() {
        let s = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(e).lines().map_while(Result::ok) {
                let mut v = s.lock().unwrap_or_else(|e| e.into_inner());
                if v.len() < 64 {
                    v.push(line);
                }
            }
        });
    }
    let stdin = child.stdin.take();
    Ok(Channel { label, child, stdin, stderr, stderr_file, ids, eof: false })
}

/// Starts the instance on every node; on any failure stops what it started and
/// returns a message naming the host(s).
pub fn start(p: &Plan) -> Result<Started, String> {
    let t0 = Instant::now();
    let deadline = t0 + p.timeout;
    fs::create_dir_all(&p.base).map_err(|e| format!("cannot create {}: {e}", p.base.display()))?;
    fs::set_permissions(&p.base, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot make {} private: {e}", p.base.display()))?;
    let first = p.join.as_ref().map_or(0, |(h, _)| h.daemons.len() as u32);
    let secret = p.restart.clone().or_else(|| p.join.as_ref().map(|(_, s)| s.clone())).unwrap_or_else(|| {
        use rand::RngCore;
        let mut b = vec![0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut b);
        b
    });
    let (tx, rx) = mpsc::channel();
    let mut chans: Vec<Channel> = Vec::new();
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    let spawned: Result<(), String> = (|| {
        match &p.method {
            Method::Ssh { hosts, ssh } => {
                if hosts.len() > SSH_PARALLEL_MAX {
                    return Err(format!(
                        "{} hosts: the ssh launcher starts at most {SSH_PARALLEL_MAX}; use srun in a SLURM allocation",
                        hosts.len()
                    ));
                }
                let mut seen = std::collections::HashSet::new();
                for h in hosts {
                    if !seen.insert(h) {
                        return Err(format!("host {h} is listed twice (one daemon per host)"));
                    }
                }
                for (i, h) in hosts.iter().enumerate() {
                    let i = first as usize + i;
                    let (prog, opts) = ssh.split_first().ok_or("empty ssh command")?;
                    let mut cmd = Command::new(prog);
                    cmd.args(opts)
                        .args(["-o", "BatchMode=yes", "-T", "-o"])
                        .arg(format!("ConnectTimeout={}", p.timeout.as_secs().max(1)))
                        .arg(h);
                    let remote: Vec<String> =
                        agent_args(p, Some(i as u32), true).iter().map(|a| shell_quote(a)).collect();
                    cmd.arg(remote.join(" "));
                    names.insert(i as u32, h.clone());
                    chans.push(spawn_channel(cmd, format!("ssh to {h}"), vec![i as u32], i, None, &tx)?);
                }
            }
            Method::Srun { nodes, srun } => {
                let (prog, opts) = srun.split_first().ok_or("empty srun command")?;
                let n = nodes.len();
                let mut cmd = Command::new(prog);
                cmd.args(opts)
                    .arg("--overlap")
                    .arg(format!("--nodes={n}"))
                    .arg(format!("--ntasks={n}"))
                    .arg("--ntasks-per-node=1")
                    .arg("--input=all")
                    .arg("--kill-on-bad-exit=0")
                    .arg("--job-name=gustfs-daemons")
                    // A restart: each kept daemon on its own node; a join: the new nodes.
                    .args((p.restart.is_some() || p.join.is_some()).then(|| format!("--nodelist={}", nodes.join(","))))
                    // Lets a site's TaskProlog (slurm/) tell GustFS's own step apart.
                    .arg("--export=ALL,GUST_NODE_AGENT=1")
                    .args(agent_args(p, None, false))
                    .args((first > 0).then(|| format!("--id-offset={first}")));
                for (i, h) in nodes.iter().enumerate() {
                    names.insert(first + i as u32, h.clone());
                }
                let log = p.base.join(crate::agent::SRUN_LOG_NAME);
                let ids = (first..first + n as u32).collect();
                chans.push(spawn_channel(cmd, "srun".into(), ids, 0, Some(log), &tx)?);
            }
        }
        Ok(())
    })();
    let name = |id: u32| names.get(&id).cloned().unwrap_or_else(|| format!("daemon {id}"));
    if let Err(e) = spawned {
        abort(&mut chans, &rx);
        return Err(e);
    }
    let secret_line = format!("secret {}\n", gust_hosts::hex(&secret));
    for c in chans.iter_mut() {
        c.send(secret_line.as_bytes());
    }

    // Gather `ready` from every daemon.
    let n = names.len();
    let mut ready: BTreeMap<u32, DaemonEntry> = BTreeMap::new();
    let gathered = gather(&rx, &mut chans, deadline, |ev, chans| match ev {
        (_, Event::Ready(d)) => {
            ready.insert(d.id, d);
            Ok(ready.len() == n)
        }
        (_, Event::Error(id, msg)) => Err(format!("{} (daemon {id}): {msg}", id_name(&id, &name))),
        (i, Event::Eof) => {
            chans[i].eof = true;
            let missing: Vec<u32> = chans[i].ids.iter().copied().filter(|d| !ready.contains_key(d)).collect();
            if missing.is_empty() {
                Ok(false)
            } else {
                Err(format!("{} ended before {} was ready: {}", chans[i].label, what(&missing, &name), chans[i].why()))
            }
        }
        (_, Event::Ok(_)) => Ok(false),
    });
    if let Err(e) = gathered {
        let missing: Vec<u32> = names.keys().copied().filter(|d| !ready.contains_key(d)).collect();
        abort(&mut chans, &rx);
        return Err(not_started(e, &missing, &name, p.timeout));
    }
    let ready_s = t0.elapsed().as_secs_f64();

    // The complete hosts file, back to every node.
    let mut hosts = match &p.join {
        Some((h, _)) => HostsFile { placed: Some(first), ..h.clone() },
        None => p.header.clone(),
    };
    hosts.daemons.extend(ready.into_values());
    let text = hosts.render();
    if text.len() > HOSTS_BYTES_MAX {
        abort(&mut chans, &rx);
        return Err(format!("hosts file of {} bytes is over the bound of {HOSTS_BYTES_MAX}", text.len()));
    }
    let msg = format!("hosts {}\n{text}", text.len());
    for c in chans.iter_mut() {
        c.send(msg.as_bytes());
    }
    let mut oks = std::collections::BTreeSet::new();
    let installed = gather(&rx, &mut chans, deadline, |ev, chans| match ev {
        (_, Event::Ok(i)) => {
            oks.insert(i);
            Ok(oks.len() == n)
        }
        (_, Event::Error(id, msg)) => Err(format!("{} (daemon {id}): {msg}", id_name(&id, &name))),
        (i, Event::Eof) => {
            chans[i].eof = true;
            let missing: Vec<u32> = chans[i].ids.iter().copied().filter(|d| !oks.contains(d)).collect();
            if missing.is_empty() {
                Ok(false)
            } else {
                Err(format!(
                    "{} ended before {} took the hosts file: {}",
                    chans[i].label,
                    what(&missing, &name),
                    chans[i].why()
                ))
            }
        }
        (_, Event::Ready(_)) => Ok(false),
    });
    let installed = installed.map_err(|e| {
        let missing: Vec<u32> = names.keys().copied().filter(|d| !oks.contains(d)).collect();
        not_started(e, &missing, &name, p.timeout)
    });
    let hp = hosts_path(&p.base);
    if let Some((old, _)) = &p.join {
        let local = installed.and_then(|()| store_locked(&hosts, &hp));
        return finish_join(p, &mut chans, &rx, old, hosts, local, t0, ready_s);
    }
    // A restart's launcher may be on one of the nodes: its agent holds the hosts lock
    // no longer, and the files it wrote are the same.
    let local = gust_hosts::store_secret(&hp, &secret)
        .and_then(|_| hosts.store(&hp))
        .map_err(|e| format!("cannot write the hosts file here: {e}"));
    if let Err(e) = installed.and(local) {
        // Agents that took the hosts file no longer read their input: stop their
        // daemons over the protocol as well (a restart's data stays).
        let kept = p.restart.is_some();
        let _ = crate::stop::stop(&hp, kept, Duration::from_secs(5));
        abort(&mut chans, &rx);
        if !kept {
            remove_local(&hp);
        }
        return Err(e);
    }
    let installed_s = t0.elapsed().as_secs_f64();

    // Every daemon answers from here.
    let down = ping_all(&hp);
    if !down.is_empty() {
        let kept = p.restart.is_some();
        let _ = crate::stop::stop(&hp, kept, Duration::from_secs(5));
        abort(&mut chans, &rx);
        if !kept {
            remove_local(&hp);
        }
        let list: Vec<String> = down
            .iter()
            .map(|(d, e)| format!("{} (daemon {d}, {}): {e}", name(*d), hosts.daemons[*d as usize].tcp_addr()))
            .collect();
        return Err(format!(
            "daemons started but do not answer from {}: {}; all stopped",
            gust_hosts::this_host(),
            list.join("; ")
        ));
    }
    let pinged_s = t0.elapsed().as_secs_f64();
    record_launcher(&p.base, &p.method);
    release(p, &mut chans);
    Ok(Started { hosts, hosts_path: hp, ready_s, installed_s, pinged_s })
}

/// Done: ssh clients end as their agents close their streams; srun stays, it
/// holds the daemons' step.
fn release(p: &Plan, chans: &mut [Channel]) {
    for c in chans.iter_mut() {
        c.stdin = None;
    }
    if matches!(p.method, Method::Ssh { .. }) {
        let end = Instant::now() + Duration::from_secs(5);
        for c in chans.iter_mut() {
            while Instant::now() < end && matches!(c.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = c.child.kill();
            let _ = c.child.wait();
        }
    }
}

/// Writes `hosts` at `hp` under the hosts file's lock.
fn store_locked(hosts: &HostsFile, hp: &Path) -> Result<(), String> {
    let _lock = gust_hosts::lock(hp).map_err(|e| e.to_string())?;
    hosts.store(hp).map_err(|e| format!("cannot write the hosts file here: {e}"))
}

/// The end of a join (`Plan::join`): the new daemons answer, or they are stopped
/// (only they: the instance serves on) and this host's hosts file is the old one
/// again.
#[allow(clippy::too_many_arguments)]
fn finish_join(
    p: &Plan,
    chans: &mut [Channel],
    rx: &mpsc::Receiver<(usize, Event)>,
    old: &HostsFile,
    hosts: HostsFile,
    local: Result<(), String>,
    t0: Instant,
    ready_s: f64,
) -> Result<Started, String> {
    let hp = hosts_path(&p.base);
    let first = old.daemons.len() as u32;
    let installed_s = t0.elapsed().as_secs_f64();
    let down: Vec<String> = match &local {
        Ok(()) => ping_all(&hp)
            .into_iter()
            .filter(|(d, _)| *d >= first)
            .map(|(d, e)| format!("{} (daemon {d}): {e}", hosts.daemons[d as usize].host))
            .collect(),
        Err(_) => Vec::new(),
    };
    if local.is_err() || !down.is_empty() {
        // Stopped through a hosts file of theirs alone, beside this one.
        let only = HostsFile { daemons: hosts.daemons[first as usize..].to_vec(), placed: None, ..hosts.clone() };
        let tmp = p.base.join("joining.hosts");
        let secret = p.join.as_ref().map(|(_, s)| s.as_slice()).unwrap_or_default();
        if gust_hosts::store_secret(&tmp, secret).and_then(|_| only.store(&tmp)).is_ok() {
            let _ = crate::stop::stop(&tmp, false, Duration::from_secs(5));
        }
        remove_local(&tmp);
        abort(chans, rx);
        let _ = store_locked(old, &hp);
        return Err(match local {
            Err(e) => e,
            Ok(()) => format!("new daemons started but do not answer: {}; stopped them", down.join("; ")),
        });
    }
    let pinged_s = t0.elapsed().as_secs_f64();
    if !p.base.join(crate::agent::LAUNCHER_NAME).exists() {
        record_launcher(&p.base, &p.method);
    }
    release(p, chans);
    Ok(Started { hosts, hosts_path: hp, ready_s, installed_s, pinged_s })
}

fn id_name(id: &str, name: &impl Fn(u32) -> String) -> String {
    id.parse().map(name).unwrap_or_else(|_| "a node".into())
}

/// "its daemon" for the one daemon of an ssh channel, else the names.
fn what(ids: &[u32], name: &impl Fn(u32) -> String) -> String {
    if ids.len() == 1 {
        "its daemon".into()
    } else {
        format!("the daemons of {}", list_names(ids, name))
    }
}

fn list_names(ids: &[u32], name: &impl Fn(u32) -> String) -> String {
    let v: Vec<String> = ids.iter().take(16).map(|&i| name(i)).collect();
    let more = if ids.len() > 16 { format!(" and {} more", ids.len() - 16) } else { String::new() };
    format!("{}{more}", v.join(", "))
}

const TIMED_OUT: &str = "timed out";

fn not_started(e: String, missing: &[u32], name: &impl Fn(u32) -> String, timeout: Duration) -> String {
    if e == TIMED_OUT {
        format!(
            "{} did not answer within {} s (--timeout); stopped every daemon that had started",
            list_names(missing, name),
            timeout.as_secs()
        )
    } else if missing.is_empty() {
        format!("{e}; stopped every daemon that had started")
    } else {
        format!("{e}; stopped every daemon that had started (not ready then: {})", list_names(missing, name))
    }
}

/// Feeds events to `f` until it returns Ok(true) (done), an error, or the deadline.
fn gather(
    rx: &mpsc::Receiver<(usize, Event)>,
    chans: &mut [Channel],
    deadline: Instant,
    mut f: impl FnMut((usize, Event), &mut [Channel]) -> Result<bool, String>,
) -> Result<(), String> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(ev) => {
                if f(ev, chans)? {
                    return Ok(());
                }
            }
            Err(_) => return Err(TIMED_OUT.into()),
        }
    }
}

/// Ends every launched process: end of input first (each agent then stops its
/// daemon, removes its files and closes its output), then, after a grace period,
/// signals for processes that are still there (an ssh client killed here closes its
/// session, and the remote agent sees the end of its input all the same).
fn abort(chans: &mut [Channel], rx: &mpsc::Receiver<(usize, Event)>) {
    for c in chans.iter_mut() {
        c.stdin = None;
    }
    let end = Instant::now() + ABORT_GRACE;
    while chans.iter().any(|c| !c.eof) {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok((i, Event::Eof)) => chans[i].eof = true,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    for c in chans.iter_mut() {
        stop_child(&mut c.child, libc::SIGTERM, Duration::from_secs(5));
    }
}

/// Writes how the nodes were reached (kind, then the command's words, one a line)
/// for `gust stop`, which cleans a node whose daemon does not answer through it.
fn record_launcher(base: &Path, m: &Method) {
    let (kind, words) = match m {
        Method::Ssh { ssh, .. } => ("ssh", ssh),
        Method::Srun { srun, .. } => ("srun", srun),
    };
    let text: String =
        std::iter::once(kind).chain(words.iter().map(String::as_str)).map(|w| format!("{w}\n")).collect();
    let p = base.join(crate::agent::LAUNCHER_NAME);
    let _ = fs::write(&p, text).and_then(|_| fs::set_permissions(&p, fs::Permissions::from_mode(0o600)));
}

fn remove_local(hp: &Path) {
    for p in [hp.to_path_buf(), gust_hosts::secret_path(hp), PathBuf::from(format!("{}.lock", hp.display()))] {
        let _ = fs::remove_file(p);
    }
}

/// Pings every daemon of the hosts file at `hp` (`Client::unanswered`);
/// returns the ones that did not answer.
pub fn ping_all(hp: &Path) -> Vec<(u32, String)> {
    unanswered(hp, Duration::from_secs(5))
}

/// The daemons of the hosts file at `hp` that do not answer a ping within
/// `rpc_timeout`, with why; the whole instance if it cannot be opened.
pub fn unanswered(hp: &Path, rpc_timeout: Duration) -> Vec<(u32, String)> {
    match Client::open_instance(hp, ClientOptions { rpc_timeout, force_tcp: false, ..Default::default() }) {
        Ok(c) => c.unanswered(),
        Err(e) => vec![(0, e)],
    }
}
