//! `gust mount` and `gust umount`: the FUSE front end (crates/fuse) wired to the CLI.

use crate::instance::InstanceArgs;
use clap::Args;
use gust_client::{Client, ClientOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Default bound on one RPC for a mount: a dead daemon surfaces as EIO within it. Shorter
/// than the library default because a kernel request blocked on it blocks its caller.
const MOUNT_RPC_TIMEOUT_S: f64 = 10.0;
/// How long `--background` waits for the mount to appear.
const BACKGROUND_WAIT_S: u64 = 30;

#[derive(Args)]
pub struct MountArgs {
    /// Directory to mount the instance on (must exist).
    mountpoint: PathBuf,
    #[command(flatten)]
    inst: InstanceArgs,
    /// Seconds the kernel caches attributes (stat) before asking again.
    #[arg(long, default_value_t = 1.0)]
    attr_timeout: f64,
    /// Seconds the kernel caches name lookups before asking again.
    #[arg(long, default_value_t = 1.0)]
    entry_timeout: f64,
    /// Seconds a name this mount knows to be absent (a failed lookup, a name in a
    /// directory it made) is answered as absent without asking: a create is then one
    /// request, but a name created by another node is seen up to this late. 0: off.
    #[arg(long, default_value_t = 0.0)]
    negative_timeout: f64,
    /// Buffer writes in the kernel page cache and send them in large pieces.
    #[arg(long)]
    writeback_cache: bool,
    /// Bypass the page cache for file data (every read/write goes to the daemons).
    #[arg(long)]
    direct_io: bool,
    /// Let other users access the mount (the kernel checks mode bits).
    #[arg(long)]
    allow_other: bool,
    /// Mount read-only.
    #[arg(long)]
    read_only: bool,
    /// Threads serving kernel requests concurrently.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Whether listings carry each entry's attributes (READDIRPLUS): always (fast
    /// `ls -l`, `du`, scandir + stat) or never (walks that want only names, such as
    /// `find -name` and `os.walk`, run several times faster; `ls -l` of a large
    /// directory several times slower).
    #[arg(long, value_enum, default_value = "always")]
    readdirplus: ReaddirplusArg,
    /// Leave file locks (flock, fcntl) to this node's kernel, as before GustFS had
    /// locks: they then hold between processes of this node only, and a close of a
    /// read-only file costs no request to the mount.
    #[arg(long)]
    local_locks: bool,
    /// Seconds before an RPC to an unresponsive daemon fails with EIO
    /// [default: $GUST_RPC_TIMEOUT_MS, else 10].
    #[arg(long)]
    rpc_timeout: Option<f64>,
    /// Detach and serve in the background once the mount is up.
    #[arg(short = 'd', long)]
    background: bool,
    /// With --background: where the serving process writes its messages.
    #[arg(long)]
    log: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ReaddirplusArg {
    Always,
    Never,
}

fn secs(name: &str, v: f64) -> Result<Duration, String> {
    if !(0.0..=86_400.0).contains(&v) {
        return Err(format!("--{name} must be between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(v))
}

pub fn mount(a: MountArgs) -> Result<(), String> {
    let opts = gust_fuse::MountOptions {
        attr_timeout: secs("attr-timeout", a.attr_timeout)?,
        entry_timeout: secs("entry-timeout", a.entry_timeout)?,
        negative_timeout: secs("negative-timeout", a.negative_timeout)?,
        writeback_cache: a.writeback_cache,
        direct_io: a.direct_io,
        allow_other: a.allow_other,
        read_only: a.read_only,
        threads: a.threads,
        readdirplus: match a.readdirplus {
            ReaddirplusArg::Always => gust_fuse::Readdirplus::Always,
            ReaddirplusArg::Never => gust_fuse::Readdirplus::Never,
        },
        local_locks: a.local_locks,
    };
    let hosts = a.inst.hosts_path();
    if !hosts.exists() {
        return Err(format!(
            "no instance: hosts file {} does not exist (start one with `gust start`)",
            hosts.display()
        ));
    }
    if !a.mountpoint.is_dir() {
        return Err(format!("mount point {} is not a directory (create it first)", a.mountpoint.display()));
    }
    if gust_fuse::is_mounted(&a.mountpoint) {
        return Err(format!("{} is already a GustFS mount (unmount it with `gust umount`)", a.mountpoint.display()));
    }
    if a.background {
        return background(&a);
    }
    let mut copts = ClientOptions::from_env();
    // The kernel checks mode bits for a shared mount (default_permissions); a mount
    // of one user is its owner's (crates/client/src/permissions.rs).
    copts.check_permissions = false;
    copts.rpc_timeout = match a.rpc_timeout {
        Some(s) => secs("rpc-timeout", s)?.max(Duration::from_millis(1)),
        None if std::env::var_os("GUST_RPC_TIMEOUT_MS").is_some() => copts.rpc_timeout,
        None => Duration::from_secs_f64(MOUNT_RPC_TIMEOUT_S),
    };
    let client = Client::open_instance(&hosts, copts)?;
    // Fail early and clearly if the daemons are not there, rather than at first use.
    if let Some((d, why)) = client.unanswered().into_iter().next() {
        return Err(format!("daemon {d} does not answer ({why}); is the instance running? `gust status`"));
    }
    let mp = a.mountpoint.clone();
    gust_fuse::run(client, &a.mountpoint, opts, || {
        eprintln!(
            "gust: mounted {} at {} (stop with Ctrl-C or `gust umount {}`)",
            hosts.display(),
            mp.display(),
            mp.display()
        );
    })
}

/// Re-runs this command without --background as a detached process and returns once
/// the mount is up (or reports why it did not come up).
fn background(a: &MountArgs) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
    let args: Vec<String> = std::env::args().skip(1).filter(|x| x != "-d" && x != "--background").collect();
    let log_path = a.log.clone().unwrap_or_else(|| PathBuf::from("/dev/null"));
    // The owner's alone, like the daemons' logs (an existing file keeps its mode).
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| format!("cannot open log {}: {e}", log_path.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(&args).stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| e.to_string())?).stderr(log);
    gust_launch::proc::own_session(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the mount process: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(BACKGROUND_WAIT_S);
    while Instant::now() < deadline {
        if gust_fuse::is_mounted(&a.mountpoint) {
            eprintln!(
                "gust: mounted at {} (pid {}); unmount with `gust umount {}`",
                a.mountpoint.display(),
                child.id(),
                a.mountpoint.display()
            );
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!(
                "the mount process exited ({st}) before the mount came up; see {}",
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    Err(format!("the mount did not come up within {BACKGROUND_WAIT_S} s; see {}", log_path.display()))
}

#[derive(Args)]
pub struct UmountArgs {
    /// Mount point given to `gust mount`.
    mountpoint: PathBuf,
    /// Detach a busy mount now; the kernel finishes when its last user goes away.
    #[arg(long, short = 'z')]
    lazy: bool,
}

pub fn umount(a: UmountArgs) -> Result<(), String> {
    gust_fuse::unmount(&a.mountpoint, a.lazy)
}
