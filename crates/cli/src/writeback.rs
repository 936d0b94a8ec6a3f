//! Cache mode's write-back (`gust start --cache-of DIR`): a `gust stage out --follow
//! / DIR` process started with the instance copies files closed after writing back
//! to DIR while the job runs; `gust flush` asks it for a full pass and waits for it;
//! `gust stop` lets it finish (its final pass) before the daemons stop, unless
//! `--discard`. Its files sit beside the hosts file: `.writeback.pid`,
//! `.writeback.log` (its messages and final summary), `.writeback.flushed` (the
//! summary of its last flush, JSON with a generation number).

use crate::instance::InstanceArgs;
use clap::Args;
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn side(hosts: &Path, what: &str) -> PathBuf {
    let mut s = hosts.as_os_str().to_owned();
    s.push(format!(".writeback.{what}"));
    PathBuf::from(s)
}

fn alive(pid: i32) -> bool {
    pid > 0 && gust_launch::proc::pid_alive(pid as u32) && !gust_launch::proc::is_zombie(pid as u32)
}

fn pid_of(hosts: &Path) -> Option<i32> {
    fs::read_to_string(side(hosts, "pid")).ok()?.trim().parse().ok().filter(|&p| alive(p))
}

/// The log of a process `gust` starts detached (the write-back, a view's
/// maintainer): made afresh, readable by the owner only.
pub(crate) fn create_log(path: &Path) -> Result<fs::File, String> {
    fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// Starts the write-back follower of a cache-mode instance, detached.
pub fn start(hosts: &Path, cache_of: &str) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
    let log_path = side(hosts, "log");
    let log = create_log(&log_path)?;
    let mut cmd = Command::new(exe);
    cmd.args(["stage", "out", "/", cache_of, "--follow", "--json", "--flush-file"])
        .arg(side(hosts, "flushed"))
        .arg("--hosts-file")
        .arg(hosts)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    gust_launch::proc::own_session(&mut cmd);
    // Its signals wait for its handlers: a `gust flush` or `gust stop` right after
    // the start must not kill it before it has written anything back.
    // SAFETY: only sigemptyset, sigaddset and sigprocmask between fork and exec,
    // which are async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in gust_stage::follow::SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("cannot start the write-back: {e}"))?;
    fs::write(side(hosts, "pid"), format!("{}\n", child.id()))
        .map_err(|e| format!("cannot record the write-back's pid: {e}"))?;
    eprintln!("gust: cache of {cache_of}: files written in GustFS are written back there (log {})", log_path.display());
    Ok(())
}

fn generation(hosts: &Path) -> u64 {
    fs::read_to_string(side(hosts, "flushed"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["generation"].as_u64())
        .unwrap_or(0)
}

#[derive(Args)]
pub struct FlushArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
}

/// `gust flush`: a full write-back pass, waited for.
pub fn flush(a: FlushArgs) -> Result<(), String> {
    let hosts = a.inst.hosts_path();
    let pid = pid_of(&hosts).ok_or("no write-back is running (is this a `gust start --cache-of` instance?)")?;
    let before = generation(&hosts);
    // SAFETY: signalling the follower we started.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    let started = Instant::now();
    while generation(&hosts) <= before {
        if !alive(pid) {
            return Err("the write-back stopped before flushing (see its log)".into());
        }
        if started.elapsed() > Duration::from_secs(a.timeout) {
            return Err(format!("not flushed after {} s", a.timeout));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let v: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(side(&hosts, "flushed")).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let failures = v["failures"].as_array().map(|f| f.len()).unwrap_or(0);
    eprintln!(
        "gust: flushed: {} file(s) written back, {} already there{}",
        v["files"].as_u64().unwrap_or(0),
        v["skipped"].as_u64().unwrap_or(0),
        if failures > 0 { format!(", {failures} FAILED (listed in the write-back log)") } else { String::new() }
    );
    if failures > 0 {
        return Err(format!("{failures} file(s) not written back"));
    }
    Ok(())
}

/// At `gust stop`: lets the write-back finish (or, with `discard`, kills it).
pub fn finish(hosts: &Path, discard: bool) -> Result<(), String> {
    let Some(pid) = pid_of(hosts) else { return Ok(()) };
    // SAFETY: signalling the follower we started.
    unsafe { libc::kill(pid, if discard { libc::SIGKILL } else { libc::SIGINT }) };
    if !discard {
        eprintln!("gust: writing back the files changed in GustFS ...");
    }
    while alive(pid) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = fs::remove_file(side(hosts, "pid"));
    if discard {
        return Ok(());
    }
    let log = fs::read_to_string(side(hosts, "log")).unwrap_or_default();
    let summary = log.lines().rev().find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    match summary {
        Some(v) if v["failures"].as_array().is_some_and(|f| f.is_empty()) => {
            eprintln!("gust: written back: {} file(s) in all", v["files"].as_u64().unwrap_or(0));
            Ok(())
        }
        Some(v) => Err(format!(
            "{} file(s) not written back (see {}); the data is kept: stop again with --discard to drop it",
            v["failures"].as_array().map(|f| f.len()).unwrap_or(0),
            side(hosts, "log").display()
        )),
        None => Err(format!("the write-back ended without a summary (see {})", side(hosts, "log").display())),
    }
}
