//! The node agent (`gust node-agent`): starts this node's daemon for a launcher and
//! looks after it.
//!
//! Line protocol on the agent's stdin and stdout (one launcher, one agent per node;
//! with srun, stdin is broadcast to every agent and their stdout lines are merged):
//!
//! ```text
//! launcher → agent   secret <hex>                 the instance secret (first line)
//! agent → launcher   ready <daemon line fields>   id host tcp uds pid rootdir
//!                    error <id> <message>         this node failed; it cleaned up
//! launcher → agent   hosts <n>\n<n bytes>         the complete hosts file
//! agent → launcher   ok <id>                      written on this node
//! ```
//!
//! End of input (or `abort`) before the hosts file: the agent stops its daemon,
//! removes everything it created and exits 1. That is how a launcher that fails
//! (another node did not answer, the launcher was interrupted) leaves nothing behind.
//!
//! After `ok` the agent closes its standard streams, writes its pid to
//! `base/d<id>.agent`, and stays as the daemon's parent:
//! * when the daemon exits after `gust stop` wiped its root directory, the agent
//!   removes the instance's files on this node (hosts file, secret, log);
//! * when the daemon exits after `gust stop --keep` (its root directory holds
//!   [`gust_hosts::KEPT_MARKER`]), the agent exits and leaves everything;
//! * when the daemon dies otherwise (killed, crashed) or is stopped by `gust repair`
//!   (which leaves `base/d<id>.hold`), the agent stays: SIGUSR1 (`gust repair`)
//!   starts the daemon again on its root directory and address, as the agent's
//!   child, so that it stays in the job's daemon step;
//! * on SIGTERM, SIGINT or SIGHUP (a SLURM job that ends, is cancelled or runs out of
//!   time signals its steps; `gust stop` signals the agents of daemons that did not
//!   answer, through [`clean_node`]) it stops the daemon and removes everything: a
//!   job-bound instance leaves nothing behind, also of a daemon that died. Unless
//!   the daemon was already stopped with `gust stop --keep`.
//!
//! With `--restart` the agent brings back the daemon that `gust stop --keep` left on
//! this node (the node-local hosts file names its id and root directory): the same
//! secret must come from the launcher, the root directory is used as it is, and a
//! failure stops the daemon but removes nothing.
//!
//! With ssh (`--detach`) the agent runs itself again in a new session and relays
//! the protocol to that copy until `ok`, then exits: the ssh command ends and the
//! copy stays as the daemon's parent.
//!
//! Node-local layout, the same path on every node (`base`):
//! `base/gust.hosts`, `base/gust.hosts.secret` (0600), `base/d<id>/` (the daemon's
//! root directory), `base/d<id>.log`, and on the launcher's node `base/srun.log`;
//! `base` itself is 0700.

use crate::netaddr::{choose_listen_ip, Cidr};
use crate::proc::{stop_child, tail_oneline};
use gust_hosts::{DaemonEntry, HostsFile};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on one protocol line.
pub const LINE_BYTES_MAX: usize = 64 << 10;
/// Bound on the hosts file an agent accepts (65,536 daemons of ~1 KiB each).
pub const HOSTS_BYTES_MAX: usize = 64 << 20;
/// How long the daemon gets to stop on SIGTERM before it is killed.
const DAEMON_STOP_GRACE: Duration = Duration::from_secs(20);

pub const HOSTS_NAME: &str = "gust.hosts";
/// How the launcher reached the nodes (`launcher` in the launcher's instance
/// directory: the kind, then the command's words, one a line), for `gust stop` to
/// reach a node whose daemon does not answer.
pub const LAUNCHER_NAME: &str = "launcher";
/// The deadline the site Epilog writes into a kept instance directory.
pub const KEEP_UNTIL_NAME: &str = "keep-until";
/// How long [`clean_node`] waits for an agent to stop its daemon and wipe.
const CLEAN_WAIT: Duration = Duration::from_secs(30);
/// srun's messages, kept by the launcher in its instance directory (which on the
/// first node of a job is also that node's).
pub const SRUN_LOG_NAME: &str = "srun.log";

pub fn hosts_path(base: &Path) -> PathBuf {
    base.join(HOSTS_NAME)
}

#[derive(Debug, Clone)]
pub struct AgentArgs {
    /// Node-local instance directory (same path on every node).
    pub base: PathBuf,
    /// Daemon id; None: SLURM_PROCID (srun) plus `id_offset`.
    pub id: Option<u32>,
    /// Added to SLURM_PROCID: the first id of daemons joining a running instance.
    pub id_offset: u32,
    pub instance: String,
    pub chunk_size_bytes: u64,
    pub mountdir: String,
    pub check_parent: bool,
    pub placement: gust_hosts::Placement,
    pub replicas: u32,
    /// The erasure code (K, M), if the instance has one.
    pub ec: Option<(u32, u32)>,
    /// TCP port of the daemon; None: a free port.
    pub port: Option<u16>,
    pub network: Option<String>,
    /// Some(bytes): no --rootdir was given; put the daemon's root directory on the
    /// fastest local storage with this much room (gust-probe), under a directory
    /// named like `base`.
    pub auto_storage: Option<u64>,
    pub timeout: Duration,
    /// Options passed to the daemon as they are (`--threads 16`).
    pub daemon_options: Vec<String>,
    /// ssh: leave the ssh session once the hosts file is written.
    pub detach: bool,
    /// Internal: this process is the re-executed, detached copy.
    pub detached_child: bool,
    /// Bring back this node's kept daemon of `instance` on its root directory.
    pub restart: bool,
}

enum Input {
    Line(String),
    Hosts(String),
    End(String),
}

/// Reads the launcher's messages on a thread, so the agent can wait with a timeout.
fn spawn_stdin_reader() -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(std::io::stdin().lock());
        loop {
            let mut line = String::new();
            match (&mut r).take(LINE_BYTES_MAX as u64).read_line(&mut line) {
                Ok(0) => {
                    let _ = tx.send(Input::End("end of input".into()));
                    return;
                }
                Err(e) => {
                    let _ = tx.send(Input::End(format!("cannot read input: {e}")));
                    return;
                }
                Ok(_) => {}
            }
            let l = line.trim_end().to_string();
            if let Some(n) = l.strip_prefix("hosts ") {
                let n: usize = match n.trim().parse() {
                    Ok(n) if n <= HOSTS_BYTES_MAX => n,
                    _ => {
                        let _ = tx.send(Input::End(format!("bad hosts header '{l}'")));
                        return;
                    }
                };
                let mut b = vec![0u8; n];
                if let Err(e) = r.read_exact(&mut b) {
                    let _ = tx.send(Input::End(format!("hosts file cut short: {e}")));
                    return;
                }
                let _ = tx.send(Input::Hosts(String::from_utf8_lossy(&b).into_owned()));
            } else if tx.send(Input::Line(l)).is_err() {
                return;
            }
        }
    });
    rx
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// Blocks SIGTERM, SIGINT, SIGHUP and SIGUSR1 in this thread (and threads spawned
/// later), so that only `wait_signal` receives them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: signal-set manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGUSR1] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: sigtimedwait on signals blocked by `block_signals`.
    let s = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (s > 0).then_some(s)
}

/// Runs the agent; returns the process exit code.
pub fn run(a: AgentArgs) -> i32 {
    if a.detach && !a.detached_child {
        return relay_to_detached();
    }
    let sigset = block_signals();
    let host = gust_hosts::this_host();
    // A restart finds its daemon in this node's hosts file: id and root directory.
    let kept = if a.restart {
        match kept_daemon(&a.base, &a.instance, &host) {
            Ok(d) => Some(d),
            Err(e) => {
                say(&format!("error {} {host}: {e}", a.id.map_or("?".to_string(), |i| i.to_string())));
                return 1;
            }
        }
    } else {
        None
    };
    let id = match a
        .id
        .or(kept.as_ref().map(|d| d.id))
        .or_else(|| std::env::var("SLURM_PROCID").ok().and_then(|v| v.parse::<u32>().ok()).map(|r| r + a.id_offset))
    {
        Some(i) => i,
        None => {
            say("error ? no daemon id (pass --id, or run under srun)");
            return 1;
        }
    };
    let mut node = Node { base: a.base.clone(), data_base: a.base.clone(), id, why: None };
    if let Some(d) = &kept {
        if d.id != id {
            say(&format!("error {id} {host}: this node kept daemon {}, not {id}", d.id));
            return 1;
        }
        node.data_base = d.rootdir.parent().map(Path::to_path_buf).unwrap_or_else(|| a.base.clone());
    }
    let input = spawn_stdin_reader();
    let deadline = Instant::now() + a.timeout;
    let fail = |node: &Node, child: Option<&mut Child>, msg: String| -> i32 {
        if let Some(c) = child {
            stop_child(c, libc::SIGTERM, DAEMON_STOP_GRACE);
        }
        // A restart leaves the kept data as it found it.
        if !a.restart {
            node.wipe();
        }
        say(&format!("error {id} {host}: {msg}"));
        1
    };

    let secret = match input.recv_timeout(a.timeout) {
        Ok(Input::Line(l)) => match l.strip_prefix("secret ").and_then(gust_hosts::parse_secret) {
            Some(s) => s,
            None => return fail(&node, None, "first input line is not 'secret <hex>'".into()),
        },
        Ok(Input::End(why)) => return fail(&node, None, format!("no secret from the launcher ({why})")),
        Ok(Input::Hosts(_)) => return fail(&node, None, "hosts file before the secret".into()),
        Err(_) => return fail(&node, None, "no secret from the launcher in time".into()),
    };
    let network = match a.network.as_deref().map(Cidr::parse).transpose() {
        Ok(n) => n,
        Err(e) => return fail(&node, None, e),
    };
    let ip = match choose_listen_ip(network.as_ref()) {
        Ok(ip) => ip,
        Err(e) => return fail(&node, None, e),
    };
    if let Some(need) = a.auto_storage.filter(|_| !a.restart) {
        match gust_probe::choose_storage(&gust_probe::probe(0), need) {
            Ok(c) => {
                node.data_base = c.dir.join(a.base.file_name().unwrap_or_else(|| "gustfs".as_ref()));
                node.why = Some(c.why);
            }
            Err(e) => return fail(&node, None, e),
        }
    }
    let prepared = if a.restart { node.check_kept(&a, &secret) } else { node.prepare(&a, &secret) };
    if let Err(e) = prepared {
        return fail(&node, None, e);
    }
    let listen = std::net::SocketAddr::new(ip, a.port.unwrap_or(0));
    let mut child = match node.spawn_daemon(&a, listen, !a.restart) {
        Ok(c) => c,
        Err(e) => return fail(&node, None, e),
    };
    // Wait for the daemon's own registration in the node-local hosts file.
    let entry = loop {
        if let Ok(Some(st)) = child.try_wait() {
            let log = tail_oneline(&node.log_path(), 3);
            return fail(&node, None, format!("daemon exited during start-up ({st}): {log}"));
        }
        if let Ok(h) = HostsFile::load(&node.hosts_path()) {
            if let Some(d) = h.daemons.iter().find(|d| d.id == id && d.pid == child.id()) {
                break d.clone();
            }
        }
        if Instant::now() > deadline {
            return fail(&node, Some(&mut child), "daemon did not register in time".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    say(&format!("ready {}", entry.render()));

    // Wait for the complete hosts file.
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
    let text = match input.recv_timeout(left) {
        Ok(Input::Hosts(t)) => t,
        Ok(Input::Line(l)) if l == "abort" => return fail(&node, Some(&mut child), "aborted by the launcher".into()),
        Ok(Input::Line(l)) => return fail(&node, Some(&mut child), format!("unexpected input '{l}'")),
        Ok(Input::End(why)) => return fail(&node, Some(&mut child), format!("launcher went away ({why})")),
        Err(_) => return fail(&node, Some(&mut child), "no hosts file from the launcher in time".into()),
    };
    if let Err(e) = node.install_hosts(&a, &text, &entry) {
        return fail(&node, Some(&mut child), e);
    }
    say(&format!("ok {id}"));
    close_streams(&node.log_path());
    let _ = write_private(&node.agent_path(), format!("{}\n", std::process::id()).as_bytes());
    let listen = entry.tcp_addr().parse().unwrap_or(listen);
    supervise(&node, &a, listen, child, &sigset)
}

/// The daemon options for this node: a `--metrics` address with an unspecified IP
/// (`0.0.0.0:9400`) becomes this daemon's own serving address at that port, the one
/// the hosts file lists (one daemon per node: the same port on every node).
fn node_options(options: &[String], ip: std::net::IpAddr) -> Vec<String> {
    let mut v: Vec<String> = Vec::with_capacity(options.len());
    for o in options {
        let after_metrics = v.last().is_some_and(|p| p == "--metrics");
        match o.parse::<std::net::SocketAddr>() {
            Ok(m) if after_metrics && m.ip().is_unspecified() => {
                v.push(std::net::SocketAddr::new(ip, m.port()).to_string())
            }
            _ => v.push(o.clone()),
        }
    }
    v
}

/// This node's daemon in the kept instance's node-local hosts file.
fn kept_daemon(base: &Path, instance: &str, host: &str) -> Result<DaemonEntry, String> {
    let hp = hosts_path(base);
    let h = HostsFile::load(&hp).map_err(|e| format!("no kept instance here: {e}"))?;
    if h.instance != instance {
        return Err(format!("{} is of instance {}, not {instance}", hp.display(), h.instance));
    }
    h.daemons.into_iter().find(|d| d.host == host).ok_or(format!("{} lists no daemon of this node", hp.display()))
}

fn write_private(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o600).open(p)?;
    f.write_all(bytes)
}

/// ssh: runs this agent again as a child in a new session and relays the protocol
/// to it until `ok` or `error`, then returns, so that the ssh command ends while the
/// child stays as the daemon's parent. (Returning before `ok` would not do: sshd
/// closes a command's input when the command exits.)
fn relay_to_detached() -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            say(&format!("error ? cannot find the gust binary: {e}"));
            return 1;
        }
    };
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1))
        .arg("--detached-child")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    crate::proc::own_session(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            say(&format!("error ? cannot start the detached agent: {e}"));
            return 1;
        }
    };
    let mut to_child = child.stdin.take().expect("piped");
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_child);
        // End of our input: the child sees it too (and aborts unless done).
    });
    let from_child = BufReader::new(child.stdout.take().expect("piped"));
    for line in from_child.lines() {
        let Ok(line) = line else { break };
        say(&line);
        if line.starts_with("ok ") {
            return 0;
        }
        if line.starts_with("error ") {
            return 1;
        }
    }
    say("error ? the detached agent ended without a word");
    1
}

/// Points stdin and stdout at /dev/null and stderr at the log, so that neither ssh
/// nor srun waits on this process's streams any more.
fn close_streams(log: &Path) {
    let null = fs::OpenOptions::new().read(true).write(true).open("/dev/null");
    let logf = fs::OpenOptions::new().append(true).open(log);
    use std::os::unix::io::AsRawFd;
    // SAFETY: dup2 onto the standard descriptors with descriptors we own.
    unsafe {
        if let Ok(n) = &null {
            libc::dup2(n.as_raw_fd(), 0);
            libc::dup2(n.as_raw_fd(), 1);
        }
        if let Ok(l) = &logf {
            libc::dup2(l.as_raw_fd(), 2);
        } else if let Ok(n) = &null {
            libc::dup2(n.as_raw_fd(), 2);
        }
    }
}

/// Looks after the daemon until the instance ends on this node (see the module doc).
fn supervise(node: &Node, a: &AgentArgs, listen: std::net::SocketAddr, child: Child, sigset: &libc::sigset_t) -> i32 {
    let mut child = Some(child);
    loop {
        match wait_signal(sigset, Duration::from_millis(200)) {
            Some(libc::SIGUSR1) => {
                // `gust repair`: start the daemon again if it is not running.
                if child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None))) {
                    continue;
                }
                let _ = fs::remove_file(node.hold_path());
                let _ = fs::remove_file(node.rootdir().join(gust_hosts::KEPT_MARKER));
                match node.spawn_daemon(a, listen, false) {
                    Ok(c) => {
                        eprintln!("gust node-agent: daemon {} started again (pid {}) on {listen}", node.id, c.id());
                        child = Some(c);
                    }
                    Err(e) => eprintln!("gust node-agent: cannot start daemon {} again: {e}", node.id),
                }
                continue;
            }
            Some(sig) => {
                let gone = child.as_mut().is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))));
                if gone && node.rootdir().join(gust_hosts::KEPT_MARKER).exists() && !node.hold_path().exists() {
                    // `gust stop --keep` stopped it just before this signal (a job that
                    // ends right after a failed stage-out): keep the data.
                    let _ = fs::remove_file(node.agent_path());
                    return 0;
                }
                eprintln!("gust node-agent: signal {sig}: stopping daemon {} and removing its files", node.id);
                if let Some(c) = child.as_mut() {
                    stop_child(c, libc::SIGTERM, DAEMON_STOP_GRACE);
                }
                node.wipe();
                return 0;
            }
            None => {}
        }
        let Some(c) = child.as_mut() else { continue };
        match c.try_wait() {
            Ok(Some(st)) => {
                child = None;
                if !node.rootdir().exists() {
                    // `gust stop` removed the root directory: remove the rest.
                    node.wipe();
                    return st.code().unwrap_or(1);
                }
                if node.rootdir().join(gust_hosts::KEPT_MARKER).exists() && !node.hold_path().exists() {
                    // `gust stop --keep`: the data stays, and so does nothing else.
                    let _ = fs::remove_file(node.agent_path());
                    return 0;
                }
                // Killed, crashed, or stopped by `gust repair`: its files stay until
                // the instance is stopped or the job ends (a signal to this agent),
                // and `gust repair` may start it again (SIGUSR1).
                eprintln!(
                    "gust node-agent: daemon {} exited ({st}); its files stay until `gust stop` or the end of \
                     the job; `gust repair --id {}` on this node starts it again",
                    node.id, node.id
                );
            }
            Ok(None) => {}
            Err(_) => child = None,
        }
    }
}

/// `gust stop` for this node when its daemon does not answer (run through the
/// launcher: srun or ssh), and for this host's own dead daemons: every agent of
/// the instance at `base` on this host is told to stop its daemon and remove its
/// files (SIGTERM), and waited for; where no agent is left, the daemon is signalled
/// and the files are removed here. Returns one line per daemon of this host.
pub fn clean_node(base: &Path) -> Result<Vec<String>, String> {
    let hp = hosts_path(base);
    let h = HostsFile::load(&hp).map_err(|e| format!("nothing to clean: {e}"))?;
    let me = gust_hosts::this_host();
    let mut lines = Vec::new();
    for d in h.daemons.iter().filter(|d| d.host == me) {
        let node = Node {
            base: base.to_path_buf(),
            data_base: d.rootdir.parent().map(Path::to_path_buf).unwrap_or_else(|| base.to_path_buf()),
            id: d.id,
            why: None,
        };
        let agent = fs::read_to_string(node.agent_path()).ok().and_then(|t| t.trim().parse::<u32>().ok());
        let agent = agent.filter(|p| is_agent(*p));
        if let Some(pid) = agent {
            // SAFETY: signalling this user's node agent of this instance by its pid.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            let end = Instant::now() + CLEAN_WAIT;
            while crate::proc::running(pid) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
        } else if crate::proc::running(d.pid) {
            // SAFETY: as above, the daemon.
            unsafe { libc::kill(d.pid as i32, libc::SIGTERM) };
            let end = Instant::now() + DAEMON_STOP_GRACE;
            while crate::proc::running(d.pid) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        node.wipe();
        let left = node.rootdir().exists() || node.log_path().exists();
        lines.push(if left {
            format!("daemon {} on {me}: could not remove {}", d.id, node.rootdir().display())
        } else {
            format!("daemon {} on {me}: files removed", d.id)
        });
    }
    Ok(lines)
}

/// Removes the files named after the hosts file beside it (`gust.hosts.*`: secret,
/// lock, and those of tools that keep their state there, such as cache mode's
/// write-back log), so that the instance directory can go.
pub fn remove_hosts_side_files(hp: &Path) {
    let (Some(dir), Some(name)) = (hp.parent(), hp.file_name()) else { return };
    let prefix = format!("{}.", name.to_string_lossy());
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) && e.file_type().is_ok_and(|t| t.is_file()) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Whether `pid` is a `gust node-agent` (the pid file may be stale, and a pid reused).
fn is_agent(pid: u32) -> bool {
    crate::proc::running(pid)
        && fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| c.split(|b| *b == 0).any(|w| w == b"node-agent"))
            .unwrap_or(false)
}

/// The pid of the node agent looking after daemon `id` of the instance at `base`
/// on this host, if one runs (for `gust repair`).
pub fn agent_of(base: &Path, id: u32) -> Option<u32> {
    let p = base.join(format!("d{id}.agent"));
    fs::read_to_string(p).ok().and_then(|t| t.trim().parse().ok()).filter(|p| is_agent(*p))
}

/// Where `gust repair` says the agent of daemon `id` must not end when its daemon
/// stops.
pub fn hold_path(base: &Path, id: u32) -> PathBuf {
    base.join(format!("d{id}.hold"))
}

struct Node {
    /// The instance directory: hosts file, secret, log.
    base: PathBuf,
    /// Where the daemon's root directory d<id> goes (`base` unless chosen by probe).
    data_base: PathBuf,
    id: u32,
    /// Why `data_base` was chosen, for the log.
    why: Option<String>,
}

impl Node {
    fn hosts_path(&self) -> PathBuf {
        hosts_path(&self.base)
    }
    fn rootdir(&self) -> PathBuf {
        self.data_base.join(format!("d{}", self.id))
    }
    fn log_path(&self) -> PathBuf {
        self.base.join(format!("d{}.log", self.id))
    }
    fn agent_path(&self) -> PathBuf {
        self.base.join(format!("d{}.agent", self.id))
    }
    fn hold_path(&self) -> PathBuf {
        hold_path(&self.base, self.id)
    }

    /// A restart: the kept root directory is there and the launcher's secret is the
    /// one this node kept.
    fn check_kept(&self, _a: &AgentArgs, secret: &[u8]) -> Result<(), String> {
        let root = self.rootdir();
        if !root.is_dir() {
            return Err(format!("the kept root directory {} is gone", root.display()));
        }
        let hp = self.hosts_path();
        let mine = gust_hosts::load_secret(&hp).map_err(|e| e.to_string())?;
        if mine != secret {
            return Err(format!("the secret next to {} is not the instance's", hp.display()));
        }
        // Started again: `gust stop --keep`'s mark no longer holds.
        let _ = fs::remove_file(root.join(gust_hosts::KEPT_MARKER));
        Ok(())
    }

    /// Creates the instance directory (0700), the secret (0600) and a hosts file
    /// with the instance's header, which the daemon registers in.
    fn prepare(&self, a: &AgentArgs, secret: &[u8]) -> Result<(), String> {
        let b = &self.base;
        fs::create_dir_all(b).map_err(|e| format!("cannot create {}: {e}", b.display()))?;
        fs::set_permissions(b, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", b.display()))?;
        if self.data_base != self.base {
            let d = &self.data_base;
            fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            fs::set_permissions(d, fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot make {} private: {e}", d.display()))?;
        }
        let hp = self.hosts_path();
        let _lock = gust_hosts::lock(&hp).map_err(|e| e.to_string())?;
        match HostsFile::load(&hp) {
            Ok(h) if h.instance == a.instance => {} // a shared base: another node wrote it
            Ok(h) => {
                let me = gust_hosts::this_host();
                let live: Vec<u32> =
                    h.daemons.iter().filter(|d| d.host == me && crate::proc::running(d.pid)).map(|d| d.pid).collect();
                if !live.is_empty() {
                    return Err(format!(
                        "{} belongs to instance {}, still running here (daemon pids {live:?}); stop it first \
                         or choose another --rootdir",
                        hp.display(),
                        h.instance
                    ));
                }
                // Stale: a previous instance's leftovers on this node.
                for d in h.daemons.iter().filter(|d| d.host == me) {
                    let _ = fs::remove_dir_all(&d.rootdir);
                }
                self.write_header(a, &hp)?;
            }
            Err(_) => self.write_header(a, &hp)?,
        }
        gust_hosts::store_secret(&hp, secret).map_err(|e| e.to_string())
    }

    fn write_header(&self, a: &AgentArgs, hp: &Path) -> Result<(), String> {
        let mut h = HostsFile::new(a.instance.clone(), a.chunk_size_bytes, a.mountdir.clone(), a.check_parent);
        h.placement = a.placement;
        h.replicas = a.replicas;
        h.ec = a.ec;
        h.store(hp).map_err(|e| e.to_string())
    }

    /// Starts the daemon: `fresh`, on an emptied root directory with a new log;
    /// else on the root directory as it is (restart, repair), appending to the log.
    fn spawn_daemon(&self, a: &AgentArgs, listen: std::net::SocketAddr, fresh: bool) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
        let lp = self.log_path();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(!fresh)
            .write(true)
            .truncate(fresh)
            .mode(0o600)
            .open(&lp)
            .map_err(|e| format!("cannot create {}: {e}", lp.display()))?;
        if let Some(why) = &self.why {
            let _ = writeln!(&log, "gust node-agent: root directory in {}", why);
        }
        let mut cmd = Command::new(exe);
        cmd.arg("daemon")
            .arg("--rootdir")
            .arg(self.rootdir())
            .arg("--mountdir")
            .arg(&a.mountdir)
            .arg("--hosts-file")
            .arg(self.hosts_path())
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--id")
            .arg(self.id.to_string())
            .args(fresh.then_some("--clean-rootdir"))
            .args(node_options(&a.daemon_options, listen.ip()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        // The daemon must not inherit our blocked signal mask: it waits for SIGTERM
        // with sigwait after blocking it itself, and a job's end must reach it.
        // SAFETY: async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        cmd.spawn().map_err(|e| format!("cannot start the daemon: {e}"))
    }

    /// Checks the launcher's hosts file (same instance, our line as we reported it)
    /// and writes it over the node-local one.
    fn install_hosts(&self, a: &AgentArgs, text: &str, mine: &DaemonEntry) -> Result<(), String> {
        let hp = self.hosts_path();
        let h = HostsFile::parse(&hp, text).map_err(|e| format!("bad hosts file from the launcher: {e}"))?;
        if h.instance != a.instance {
            return Err(format!("hosts file from the launcher is of instance {}, not {}", h.instance, a.instance));
        }
        if h.daemons.iter().find(|d| d.id == self.id) != Some(mine) {
            return Err(format!("hosts file from the launcher does not list daemon {} as it registered", self.id));
        }
        let _lock = gust_hosts::lock(&hp).map_err(|e| e.to_string())?;
        h.store(&hp).map_err(|e| e.to_string())
    }

    /// Removes what this agent created: root directory, log, hosts file, secret,
    /// lock, and the instance directory if that leaves it empty.
    fn wipe(&self) {
        let _ = fs::remove_dir_all(self.rootdir());
        let _ = fs::remove_file(self.log_path());
        let hp = self.hosts_path();
        for p in [
            hp.clone(),
            gust_hosts::secret_path(&hp),
            PathBuf::from(format!("{}.lock", hp.display())),
            self.base.join(SRUN_LOG_NAME),
            self.base.join(LAUNCHER_NAME),
            self.agent_path(),
            self.hold_path(),
            // The site Epilog's deadline for data kept after a failed stage-out
            // (slurm/gust-epilog.sh): stopped without --keep, nothing is kept.
            self.base.join(KEEP_UNTIL_NAME),
        ] {
            let _ = fs::remove_file(p);
        }
        remove_hosts_side_files(&hp);
        let _ = fs::remove_dir(&self.base);
        let _ = fs::remove_dir(&self.data_base);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn metrics_on_the_daemons_own_address() {
        let o: Vec<String> = ["--threads", "8", "--metrics", "0.0.0.0:9400"].iter().map(|s| s.to_string()).collect();
        let v = super::node_options(&o, "10.0.0.7".parse().unwrap());
        assert_eq!(v, ["--threads", "8", "--metrics", "10.0.0.7:9400"]);
        let o: Vec<String> = ["--metrics", "127.0.0.1:9400"].iter().map(|s| s.to_string()).collect();
        assert_eq!(super::node_options(&o, "10.0.0.7".parse().unwrap()), o);
    }
}
