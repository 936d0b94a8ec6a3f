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
//! After `ok` the agent closes its standard streams and stays as the daemon's parent:
//! * when the daemon exits after `gust stop` wiped its root directory, the agent
//!   removes the instance's files on this node (hosts file, secret, log);
//! * on SIGTERM, SIGINT or SIGHUP (a SLURM job that ends, is cancelled or runs out of
//!   time signals its steps) it stops the daemon and removes everything: a job-bound
//!   instance leaves nothing behind. Unless the daemon was already stopped with
//!   `gust stop --keep` (its root directory holds [`gust_hosts::KEPT_MARKER`]).
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
    /// Daemon id; None: SLURM_PROCID (srun).
    pub id: Option<u32>,
    pub instance: String,
    pub chunk_size_bytes: u64,
    pub mountdir: String,
    pub check_parent: bool,
    pub placement: gust_hosts::Placement,
    pub replicas: u32,
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

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and threads spawned later), so
/// that only `wait_signal` receives them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: signal-set manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
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
    let id = match a.id.or_else(|| std::env::var("SLURM_PROCID").ok().and_then(|v| v.parse().ok())) {
        Some(i) => i,
        None => {
            say("error ? no daemon id (pass --id, or run under srun)");
            return 1;
        }
    };
    let host = gust_hosts::this_host();
    let mut node = Node { base: a.base.clone(), data_base: a.base.clone(), id, why: None };
    let input = spawn_stdin_reader();
    let deadline = Instant::now() + a.timeout;
    let fail = |node: &Node, child: Option<&mut Child>, msg: String| -> i32 {
        if let Some(c) = child {
            stop_child(c, libc::SIGTERM, DAEMON_STOP_GRACE);
        }
        node.wipe();
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
    if let Some(need) = a.auto_storage {
        match gust_probe::choose_storage(&gust_probe::probe(0), need) {
            Ok(c) => {
                node.data_base = c.dir.join(a.base.file_name().unwrap_or_else(|| "gustfs".as_ref()));
                node.why = Some(c.why);
            }
            Err(e) => return fail(&node, None, e),
        }
    }
    if let Err(e) = node.prepare(&a, &secret) {
        return fail(&node, None, e);
    }
    let mut child = match node.spawn_daemon(&a, ip) {
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
    supervise(&node, child, &sigset)
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
    // SAFETY: setsid in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
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

fn supervise(node: &Node, mut child: Child, sigset: &libc::sigset_t) -> i32 {
    loop {
        if let Some(sig) = wait_signal(sigset, Duration::from_millis(200)) {
            let gone = matches!(child.try_wait(), Ok(Some(_)));
            if gone && node.rootdir().join(gust_hosts::KEPT_MARKER).exists() {
                // `gust stop --keep` stopped it just before this signal (a job that
                // ends right after a failed stage-out): keep the data.
                return 0;
            }
            eprintln!("gust node-agent: signal {sig}: stopping daemon {} and removing its files", node.id);
            stop_child(&mut child, libc::SIGTERM, DAEMON_STOP_GRACE);
            node.wipe();
            return 0;
        }
        match child.try_wait() {
            Ok(Some(st)) => {
                if !node.rootdir().exists() {
                    // `gust stop` removed the root directory: remove the rest.
                    node.wipe();
                }
                return st.code().unwrap_or(1);
            }
            Ok(None) => {}
            Err(_) => return 1,
        }
    }
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
        h.store(hp).map_err(|e| e.to_string())
    }

    fn spawn_daemon(&self, a: &AgentArgs, ip: std::net::IpAddr) -> Result<Child, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
        let lp = self.log_path();
        let log = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&lp)
            .map_err(|e| format!("cannot create {}: {e}", lp.display()))?;
        if let Some(why) = &self.why {
            let _ = writeln!(&log, "gust node-agent: root directory in {}", why);
        }
        let listen = std::net::SocketAddr::new(ip, a.port.unwrap_or(0));
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
            .arg("--clean-rootdir")
            .args(&a.daemon_options)
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
        ] {
            let _ = fs::remove_file(p);
        }
        let _ = fs::remove_dir(&self.base);
        let _ = fs::remove_dir(&self.data_base);
    }
}
