//! The daemons of this machine: `gust start --local N` and the daemons `gust
//! expand` adds. They are children of the launching command, in sessions of their
//! own (they outlive it), so no node agent stands between: this module spawns them
//! and waits for them as the launcher waits for the agents' daemons, until every
//! one has registered in the hosts file and answers a ping.
//!
//! Not for: daemons on other nodes (launcher.rs), stopping (stop.rs).

use crate::proc::own_session;
use gust_client::{Client, ClientOptions};
use gust_hosts::HostsFile;
use std::fs;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One daemon to start here.
pub struct LocalDaemon {
    pub id: u32,
    pub rootdir: PathBuf,
    /// The address it listens on (`127.0.0.1:0`: a port of its choosing).
    pub listen: String,
    /// Its other `gust daemon` arguments (tuning, metrics, capacity, ...).
    pub args: Vec<String>,
}

/// Daemons to start on this machine for one instance.
pub struct LocalPlan<'a> {
    pub daemons: Vec<LocalDaemon>,
    /// The gust binary.
    pub gust_exe: PathBuf,
    pub mountdir: &'a str,
    pub hosts_path: &'a Path,
    /// Daemon `i` logs to `<log_dir>/d<i>.log`.
    pub log_dir: &'a Path,
    pub timeout: Duration,
    /// Start the logs afresh (a new instance) rather than append (a restart).
    pub fresh_logs: bool,
}

/// Starts every daemon of `p`, detached, and waits until all have registered and
/// answer. On failure (a daemon exits during start-up, or the timeout passes) the
/// daemons started here are killed (none other) and the message names the daemon
/// and its log.
pub fn start(p: &LocalPlan<'_>) -> Result<HostsFile, String> {
    let mut children = Vec::new();
    for d in &p.daemons {
        match spawn(p, d) {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(e);
            }
        }
    }
    let deadline = Instant::now() + p.timeout;
    loop {
        for (i, c, log) in children.iter_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                let msg = crate::proc::tail(log, 5);
                let i = *i;
                let log = log.display().to_string();
                kill_all(&mut children);
                return Err(format!("daemon {i} exited ({st}) during start-up; its log {log}:\n{msg}"));
            }
        }
        if let Ok(h) = HostsFile::load(p.hosts_path) {
            if registered(&h, &children) && answer(p.hosts_path, &children) {
                return Ok(h);
            }
        }
        if Instant::now() > deadline {
            kill_all(&mut children);
            return Err(format!(
                "daemons did not all answer within {} s; see the logs in {}",
                p.timeout.as_secs(),
                p.log_dir.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every daemon started here registered, as the process started here.
fn registered(h: &HostsFile, children: &[(u32, Child, PathBuf)]) -> bool {
    h.is_complete(h.daemons.len())
        && children.iter().all(|(i, c, _)| h.daemons.iter().any(|d| d.id == *i && d.pid == c.id()))
}

/// Starts daemon `d` in a session of its own, its output in its private log.
fn spawn(p: &LocalPlan<'_>, d: &LocalDaemon) -> Result<(u32, Child, PathBuf), String> {
    let log_path = p.log_dir.join(format!("d{}.log", d.id));
    let log = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(!p.fresh_logs)
        .truncate(p.fresh_logs)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    // A log kept from an older GustFS may be wider; it names paths and errors of the
    // owner's job.
    log.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot make {} private (chmod 600): {e}", log_path.display()))?;
    let mut cmd = Command::new(&p.gust_exe);
    cmd.arg("daemon")
        .arg("--rootdir")
        .arg(&d.rootdir)
        .arg("--mountdir")
        .arg(p.mountdir)
        .arg("--hosts-file")
        .arg(p.hosts_path)
        .arg("--listen")
        .arg(&d.listen)
        .arg("--id")
        .arg(d.id.to_string())
        .args(&d.args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // The daemons outlive this command.
    own_session(&mut cmd);
    let child = cmd.spawn().map_err(|e| format!("cannot start daemon {}: {e}", d.id))?;
    Ok((d.id, child, log_path))
}

/// Whether every daemon started here answers a ping (the instance's other
/// daemons, when `gust expand` adds these, are not asked: one that is down must
/// not fail the start of the new ones).
fn answer(hosts_path: &Path, children: &[(u32, Child, PathBuf)]) -> bool {
    let opts = ClientOptions { rpc_timeout: Duration::from_secs(2), ..Default::default() };
    match Client::open_instance(hosts_path, opts) {
        Ok(c) => children.iter().all(|(i, _, _)| c.ping(*i).is_ok()),
        Err(_) => false,
    }
}

/// Kills the daemons started here and waits for them, so that none registers
/// after the start failed; the instance's other daemons (`gust expand`) stay.
fn kill_all(children: &mut [(u32, Child, PathBuf)]) {
    for (_, c, _) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
