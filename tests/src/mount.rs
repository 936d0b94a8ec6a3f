//! A live `gust mount` for tests: a child process mounting an instance at a fresh
//! directory under /tmp, unmounted on drop (so a failing test never leaves a stale
//! mount behind). Needs /dev/fuse and root (or fusermount3).

use crate::{gust_bin, wait_until, Instance};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Mount {
    child: Option<Child>,
    dir: tempfile::TempDir,
    log: PathBuf,
}

/// Whether `dir` is a GustFS FUSE mount point in this process's mount namespace.
pub fn mounted(dir: &Path) -> bool {
    let want = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .any(|l| l.split(' ').nth(4) == Some(want.as_str()) && l.contains(" - fuse") && l.contains("gustfs"))
        })
        .unwrap_or(false)
}

impl Mount {
    /// Mounts `inst` with `gust mount DIR --hosts-file H EXTRA...`; panics with the
    /// mount's output if it does not come up within 30 s.
    pub fn new(inst: &Instance, extra: &[&str]) -> Mount {
        Mount::new_with_env(inst, extra, &[])
    }

    /// As `new`, with these variables in the mount process's environment.
    pub fn new_with_env(inst: &Instance, extra: &[&str], env: &[(&str, &str)]) -> Mount {
        let dir = tempfile::Builder::new().prefix("gust-mnt").tempdir_in("/tmp").expect("mount dir");
        let log_path = inst.rootdir().join(format!("mount-{}.log", dir.path().file_name().unwrap().to_string_lossy()));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(gust_bin())
            .arg("mount")
            .arg(dir.path())
            .arg("--hosts-file")
            .arg(&inst.hosts)
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run gust mount");
        let mut m = Mount { child: Some(child), dir, log: log_path.clone() };
        let up = wait_until(Duration::from_secs(30), || mounted(m.path()) || m.exited());
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        assert!(up && mounted(m.path()), "gust mount did not come up; its output:\n{log}");
        m
    }

    /// The `gust mount` process's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// What the mount process wrote so far (its log and messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn exited(&mut self) -> bool {
        self.child.as_mut().map(|c| matches!(c.try_wait(), Ok(Some(_)))).unwrap_or(true)
    }

    /// Waits (bounded) for the mount process to end; true if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let ok = wait_until(timeout, || self.exited());
        if ok {
            self.child = None;
        }
        ok
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            // SAFETY: signalling our own child process.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            if !wait_until(Duration::from_secs(10), || matches!(c.try_wait(), Ok(Some(_)))) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if mounted(self.dir.path()) {
            let _ = Command::new(gust_bin()).arg("umount").arg("--lazy").arg(self.dir.path()).output();
        }
    }
}
