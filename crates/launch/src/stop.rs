//! `gust stop` for every launcher: each daemon is asked over the authenticated
//! protocol to stop (and, unless kept, to remove its root directory), all at once.
//! A daemon on this host that does not answer gets SIGTERM through its pid. On other
//! nodes the node agent removes the rest of the instance's files once its daemon has
//! wiped its root directory (see [`crate::agent`]). Where a daemon did not answer
//! (dead, hung or cut off) and the instance is not kept, its node is cleaned by its
//! agent: directly on this host, and on other nodes through the launcher that
//! started them (one `srun` step over those nodes, or `ssh` to each), which runs
//! `gust node-clean` there ([`crate::agent::clean_node`]).

use crate::proc::running;
use gust_client::{Client, ClientOptions};
use gust_hosts::HostsFile;
use std::fs;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const STOP_THREADS_MAX: usize = 64;

pub struct Stopped {
    pub instance: String,
    pub daemons: usize,
    /// Daemons that neither answered nor could be signalled here: (id, host, why).
    pub unreachable: Vec<(u32, String, String)>,
    /// Daemons of this host that were not running any more (died before the stop).
    pub dead_here: Vec<u32>,
    /// What cleaning the nodes of daemons that did not answer did, one line each.
    pub cleaned: Vec<String>,
}

/// Stops every daemon of the instance at `hosts_path`, waits up to `wait` for them
/// to be gone, and (unless `keep`) removes this host's files of the instance.
pub fn stop(hosts_path: &Path, keep: bool, wait: Duration) -> Result<Stopped, String> {
    let h = HostsFile::load(hosts_path).map_err(|e| format!("{e} (nothing to stop?)"))?;
    let me = gust_hosts::this_host();
    // Without a usable secret no daemon can be asked; those on this host still get
    // SIGTERM below, the others are reported.
    let client = Client::open_instance(
        hosts_path,
        ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: false, ..Default::default() },
    );
    let no_client = client.as_ref().err().cloned();
    let asked = Mutex::new(Vec::new());
    let unreachable = Mutex::new(Vec::new());
    let dead_here = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..h.daemons.len().min(STOP_THREADS_MAX) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(d) = h.daemons.get(i) else { return };
                let r = match &client {
                    Ok(c) => c
                        .shutdown_daemon(d.id, keep)
                        .map_err(|e| c.last_transport_error().unwrap_or_else(|| e.to_string())),
                    Err(_) => Err(no_client.clone().unwrap_or_default()),
                };
                match r {
                    Ok(()) => asked.lock().unwrap_or_else(|e| e.into_inner()).push(d.id),
                    Err(why) => {
                        if d.host == me && running(d.pid) {
                            // SAFETY: signalling a daemon of this instance by its pid.
                            unsafe { libc::kill(d.pid as i32, libc::SIGTERM) };
                        } else if d.host == me && !d.rootdir.join(gust_hosts::KEPT_MARKER).exists() {
                            // Not running, and not stopped by `gust stop --keep`
                            // either: it died. Nothing to stop, but say so.
                            dead_here.lock().unwrap_or_else(|e| e.into_inner()).push(d.id);
                        } else if d.host == me {
                            // Kept by an earlier `gust stop --keep`: removed below.
                        } else {
                            unreachable.lock().unwrap_or_else(|e| e.into_inner()).push((d.id, d.host.clone(), why));
                        }
                    }
                }
            });
        }
    });
    drop(client);
    // Wait until they are gone: local ones by pid, remote ones until they refuse
    // connections.
    let end = Instant::now() + wait;
    let asked = asked.into_inner().unwrap();
    loop {
        let local_left: Vec<u32> = h.daemons.iter().filter(|d| d.host == me && running(d.pid)).map(|d| d.pid).collect();
        let remote_left = remote_still_up(&h, &asked, &me);
        if local_left.is_empty() && remote_left == 0 {
            break;
        }
        if Instant::now() > end {
            for p in &local_left {
                eprintln!("gust: daemon pid {p} did not stop within {} s; killing it", wait.as_secs());
                // SAFETY: as above.
                unsafe { libc::kill(*p as i32, libc::SIGKILL) };
            }
            if remote_left > 0 {
                eprintln!(
                    "gust: {remote_left} remote daemon(s) still answer {} s after being asked to stop",
                    wait.as_secs()
                );
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut unreachable = unreachable.into_inner().unwrap();
    unreachable.sort();
    let mut dead_here = dead_here.into_inner().unwrap();
    dead_here.sort();
    let mut cleaned = Vec::new();
    if !keep {
        let base = hosts_path.parent().unwrap_or(Path::new("."));
        // Other nodes first: this node's agent removes the launcher record with the
        // rest of its files.
        if !unreachable.is_empty() {
            let hosts: Vec<String> = unreachable.iter().map(|u| u.1.clone()).collect();
            cleaned.extend(clean_remote(base, &hosts));
        }
        if !dead_here.is_empty() {
            // Their agents (of an srun or ssh start) wait for the stop or the job's end.
            cleaned.extend(crate::agent::clean_node(base).unwrap_or_default());
        }
        for d in h.daemons.iter().filter(|d| d.host == me) {
            let _ = fs::remove_dir_all(&d.rootdir);
            // A directory chosen by gust-probe that held only root directories.
            if let Some(parent) = d.rootdir.parent() {
                let _ = fs::remove_dir(parent);
            }
        }
        let _ = fs::remove_file(hosts_path);
        crate::agent::remove_hosts_side_files(hosts_path);
        if let Some(dir) = hosts_path.parent() {
            // A multi-node instance directory: srun's log, then the directory if empty.
            let _ = fs::remove_file(dir.join(crate::agent::SRUN_LOG_NAME));
            let _ = fs::remove_file(dir.join(crate::agent::LAUNCHER_NAME));
            let _ = fs::remove_file(dir.join(crate::agent::KEEP_UNTIL_NAME));
            let _ = fs::remove_dir(dir);
        }
    }
    Ok(Stopped { instance: h.instance.clone(), daemons: h.daemons.len(), unreachable, dead_here, cleaned })
}

/// Runs `gust node-clean` on `hosts` through the launcher recorded in `base`
/// (srun: one step over them; ssh: one connection each); returns what each said,
/// or why it could not run.
fn clean_remote(base: &Path, hosts: &[String]) -> Vec<String> {
    let mut hosts = hosts.to_vec();
    hosts.sort();
    hosts.dedup();
    let rec = fs::read_to_string(base.join(crate::agent::LAUNCHER_NAME)).unwrap_or_default();
    let mut words = rec.lines().map(str::to_string);
    let kind = words.next().unwrap_or_default();
    let cmd: Vec<String> = words.collect();
    let exe = match std::env::current_exe() {
        Ok(e) => e.display().to_string(),
        Err(e) => return vec![format!("cannot find the gust binary: {e}")],
    };
    let clean = [exe, "node-clean".into(), "--base".into(), base.display().to_string()];
    let run = |mut c: std::process::Command, what: &str| -> Vec<String> {
        c.stdin(std::process::Stdio::null());
        match c.output() {
            Ok(o) => {
                let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
                if !o.status.success() {
                    let err = String::from_utf8_lossy(&o.stderr).lines().take(3).collect::<Vec<_>>().join(" | ");
                    v.push(format!("{what} failed ({}): {err}", o.status));
                }
                v
            }
            Err(e) => vec![format!("cannot run {what}: {e}")],
        }
    };
    match (kind.as_str(), cmd.split_first()) {
        ("srun", Some((prog, opts))) => {
            let n = hosts.len().to_string();
            let mut c = std::process::Command::new(prog);
            c.args(opts)
                .args(["--overlap", "--nodes", &n, "--ntasks", &n, "--ntasks-per-node=1", "--kill-on-bad-exit=0"])
                .arg(format!("--nodelist={}", hosts.join(",")))
                .args(["--job-name=gustfs-clean", "--export=ALL,GUST_NODE_AGENT=1"])
                .args(&clean);
            run(c, "srun")
        }
        ("ssh", Some((prog, opts))) => {
            let quoted: Vec<String> = clean.iter().map(|w| crate::proc::shell_quote(w)).collect();
            std::thread::scope(|s| {
                let runs: Vec<_> = hosts
                    .iter()
                    .map(|h| {
                        let mut c = std::process::Command::new(prog);
                        c.args(opts).args(["-o", "BatchMode=yes", "-T", "-o", "ConnectTimeout=10"]).arg(h);
                        c.arg(quoted.join(" "));
                        let run = &run;
                        let what = format!("ssh to {h}");
                        s.spawn(move || run(c, &what))
                    })
                    .collect();
                runs.into_iter().flat_map(|r| r.join().unwrap_or_default()).collect()
            })
        }
        _ => vec![format!("no launcher recorded in {}: clean {} by hand", base.display(), hosts.join(", "))],
    }
}

/// How many of the remote daemons asked to stop still accept TCP connections.
fn remote_still_up(h: &HostsFile, asked: &[u32], me: &str) -> usize {
    h.daemons
        .iter()
        .filter(|d| d.host != me && asked.contains(&d.id))
        .filter(|d| {
            d.tcp_addr()
                .parse::<std::net::SocketAddr>()
                .map(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok())
                .unwrap_or(false)
        })
        .count()
}
