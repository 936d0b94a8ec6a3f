//! `gust run -- CMD ARGS`: runs a command with the LD_PRELOAD library, so that its
//! file calls under the mount directory reach GustFS (docs/PRELOAD.md).
//!
//! The command replaces this process (exec), so its exit status and signals are the
//! caller's to see, exactly as if it had been started directly.

use crate::instance::InstanceArgs;
use clap::Args;
use gust_hosts::HostsFile;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// File name of the library, looked for next to the `gust` binary.
pub const PRELOAD_LIB_NAME: &str = "libgust_preload.so";

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// The preload library [default: $GUST_PRELOAD_LIB, else libgust_preload.so next to gust]
    #[arg(long)]
    preload_lib: Option<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    cmd: Vec<OsString>,
}

/// Finds libgust_preload.so: an explicit path, $GUST_PRELOAD_LIB, or next to the
/// running `gust` binary (where cargo and the install script put it).
pub fn preload_lib(explicit: Option<PathBuf>) -> Result<PathBuf, String> {
    let p = match explicit.or_else(|| std::env::var_os("GUST_PRELOAD_LIB").map(PathBuf::from)) {
        Some(p) => p,
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("cannot locate the gust binary: {e}"))?;
            exe.parent().map(|d| d.join(PRELOAD_LIB_NAME)).ok_or("gust binary has no directory")?
        }
    };
    if !p.exists() {
        return Err(format!(
            "{}: not found; build it with `cargo build --release -p gust-preload` or pass --preload-lib",
            p.display()
        ));
    }
    std::fs::canonicalize(&p).map_err(|e| format!("{}: {e}", p.display()))
}

/// The environment a preloaded process needs: (name, value) pairs.
pub fn preload_env(hosts_path: &std::path::Path, lib: &std::path::Path) -> Result<Vec<(String, OsString)>, String> {
    let h = HostsFile::load(hosts_path).map_err(|e| format!("{e} (is an instance running? `gust start`)"))?;
    let hosts_abs = std::fs::canonicalize(hosts_path).map_err(|e| format!("{}: {e}", hosts_path.display()))?;
    let mut ld = OsString::from(lib.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        ld.push(":");
        ld.push(old);
    }
    Ok(vec![
        ("LD_PRELOAD".into(), ld),
        ("GUST_HOSTS_FILE".into(), hosts_abs.into_os_string()),
        ("GUST_MOUNTDIR".into(), OsString::from(&h.mountdir)),
    ])
}

pub fn run(a: RunArgs) -> Result<(), String> {
    let lib = preload_lib(a.preload_lib)?;
    let env = preload_env(&a.inst.hosts_path(), &lib)?;
    let (prog, args) = a.cmd.split_first().ok_or("no command given (gust run -- CMD ARGS)")?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let e = cmd.exec();
    Err(format!("cannot run {}: {e}", prog.to_string_lossy()))
}
