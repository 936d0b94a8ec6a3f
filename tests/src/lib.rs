//! Harness for the end-to-end tests: start an instance of real `gust daemon`
//! processes on loopback in a temporary directory, connect a client, stop on drop.

use gust_client::{Client, ClientOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub mod cluster;
pub mod frames;
pub mod mount;
pub mod sqlite;
pub mod test_hosts;
pub mod wire;

/// The `gust` binary of this build (target/<profile>/gust).
pub fn gust_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GUST_BIN") {
        return PathBuf::from(p);
    }
    // Test executables live in target/<profile>/deps.
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let p = dir.join("gust");
    assert!(p.exists(), "{} missing: build the workspace first (cargo build --release)", p.display());
    p
}

pub struct Instance {
    pub dir: tempfile::TempDir,
    pub hosts: PathBuf,
    pub daemons: u32,
    stopped: bool,
}

impl Instance {
    /// Starts `n` daemons with the default chunk size.
    pub fn start(n: u32) -> Instance {
        Self::start_with(n, &[])
    }

    /// Starts `n` daemons; `extra` are more `gust start` arguments
    /// (e.g. ["--chunk-size", "4k", "--check-parent"]).
    pub fn start_with(n: u32, extra: &[&str]) -> Instance {
        Self::start_under_umask(n, extra, None)
    }

    /// Starts `n` daemons with `gust start` run under `umask` (None: this process's).
    pub fn start_under_umask(n: u32, extra: &[&str], umask: Option<u32>) -> Instance {
        Self::launch(n, extra, umask, &[])
    }

    /// Starts `n` daemons with `env` added to their environment (`gust start` passes
    /// its own on), e.g. a daemon's debug switch.
    pub fn start_with_env(n: u32, extra: &[&str], env: &[(&str, &str)]) -> Instance {
        Self::launch(n, extra, None, env)
    }

    fn launch(n: u32, extra: &[&str], umask: Option<u32>, env: &[(&str, &str)]) -> Instance {
        let dir = tempfile::Builder::new().prefix("gust-e2e").tempdir_in("/tmp").expect("tempdir");
        let hosts = dir.path().join("gust.hosts");
        let mut cmd = Command::new(gust_bin());
        cmd.args(["start", "--local", &n.to_string(), "--rootdir"])
            .arg(dir.path())
            .args(["--mountdir", "/gustfs"])
            .args(extra)
            .envs(env.iter().copied());
        if let Some(m) = umask {
            with_umask(&mut cmd, m);
        }
        let out = cmd.output().expect("run gust start");
        assert!(out.status.success(), "gust start failed: {}", String::from_utf8_lossy(&out.stderr));
        Instance { dir, hosts, daemons: n, stopped: false }
    }

    pub fn client(&self) -> Client {
        self.client_with(ClientOptions::default())
    }

    pub fn client_with(&self, o: ClientOptions) -> Client {
        Client::open_instance(&self.hosts, o).expect("client")
    }

    /// A client that takes claims on directories (gust-client claims.rs), as the
    /// preload library's: it lives as long as the test process.
    pub fn claiming_client(&self, o: ClientOptions) -> &'static Client {
        let c: &'static Client = Box::leak(Box::new(self.client_with(o)));
        c.arm_claims();
        c
    }

    /// A raw TCP connection to daemon `d` (loopback only, 10 s timeouts), for tests
    /// that send bytes and frames by hand, before any handshake.
    pub fn connect(&self, d: u32) -> std::net::TcpStream {
        let addr = self.hosts_file().daemons[d as usize].tcp_addr();
        assert!(addr.starts_with("127.0.0.1:"), "daemons must listen on loopback only: {addr}");
        let s = std::net::TcpStream::connect(&addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        s
    }

    /// `connect`, past the handshake with the instance's real secret.
    pub fn authed(&self, d: u32) -> std::net::TcpStream {
        let mut s = self.connect(d);
        let secret = gust_hosts::load_secret(&self.hosts).unwrap();
        gust_proto::handshake::client(&mut s, &secret).expect("handshake with the real secret");
        s
    }

    pub fn hosts_file(&self) -> gust_hosts::HostsFile {
        gust_hosts::HostsFile::load(&self.hosts).expect("hosts file")
    }

    pub fn daemon_pid(&self, id: u32) -> u32 {
        self.hosts_file().daemons[id as usize].pid
    }

    pub fn rootdir(&self) -> &Path {
        self.dir.path()
    }

    /// What daemon `id` has logged so far (`gust start` and `restart_daemon` send
    /// its output to d<id>.log in the root directory); empty if nothing yet.
    pub fn daemon_log(&self, id: u32) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("d{id}.log"))).unwrap_or_default()
    }

    /// Whether daemon `id`'s process is gone: its TCP address refuses connections.
    pub fn daemon_gone(&self, id: u32) -> bool {
        refuses_connections(&self.hosts_file().daemons[id as usize].tcp_addr())
    }

    /// Runs `gust ARGS` with this instance's hosts file in the environment.
    pub fn gust(&self, args: &[&str]) -> std::process::Output {
        Command::new(gust_bin()).args(args).env("GUST_HOSTS_FILE", &self.hosts).output().expect("run gust")
    }

    /// Restarts daemon `id` as `gust start` ran it (same root directory, address and
    /// id), detached, appending to its log, whose path it returns. The daemon must be
    /// dead.
    pub fn restart_daemon(&self, id: u32) -> PathBuf {
        let addr = self.hosts_file().daemons[id as usize].tcp_addr();
        self.restart_daemon_at(id, &addr)
    }

    /// Restarts daemon `id` on its root directory, listening on `listen` (port 0: a
    /// new port, registered in the hosts file).
    pub fn restart_daemon_at(&self, id: u32, listen: &str) -> PathBuf {
        self.restart_daemon_with(id, listen, &[])
    }

    /// `restart_daemon_at` with more `gust daemon` arguments (e.g. ["--capacity", "4MiB"]).
    pub fn restart_daemon_with(&self, id: u32, listen: &str, extra: &[&str]) -> PathBuf {
        use std::os::unix::fs::OpenOptionsExt;
        let e = self.hosts_file().daemons[id as usize].clone();
        let log_path = self.dir.path().join(format!("d{id}.log"));
        let log = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&log_path).unwrap();
        let mut cmd = Command::new(gust_bin());
        cmd.arg("daemon")
            .arg("--rootdir")
            .arg(&e.rootdir)
            .arg("--hosts-file")
            .arg(&self.hosts)
            .arg("--listen")
            .arg(listen)
            .arg("--id")
            .arg(id.to_string())
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let mut child = in_own_session(&mut cmd).spawn().expect("spawn gust daemon");
        // The daemon outlives this handle; `gust stop` (on drop of the instance) ends
        // it through the pid it records in the hosts file. Reap it in the background.
        std::thread::spawn(move || child.wait());
        log_path
    }

    pub fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let _ = Command::new(gust_bin()).arg("stop").arg("--hosts-file").arg(&self.hosts).output();
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes `cmd` run under `umask` (set in the child before exec).
/// `cmd` made to run in a session of its own (setsid before exec): a daemon a test
/// starts is not in the test's process group, so signals to that group pass it by.
pub fn in_own_session(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe, called in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    }
}

pub fn with_umask(cmd: &mut Command, umask: u32) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: umask is async-signal-safe and has no preconditions.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask);
            Ok(())
        })
    }
}

/// The standard output of a finished command, which must have succeeded: else a
/// panic that names `what` (a step, or a script with its text) and shows both
/// outputs. The one way the tests check a command they ran.
pub fn stdout_of(what: &str, out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `f` is true, asking every 20 ms, for at most `timeout`; returns
/// whether it became true. The one way the tests wait for a condition: call it as
/// `assert!(wait_until(generous, || condition), "what did not happen")`, never a
/// fixed sleep that stands for the condition. The deadline only bounds a failing
/// run: make it generous (many times the usual wait) so that a loaded machine
/// does not fail the test.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + timeout;
    loop {
        // Asked once more at the deadline: a condition that became true while this
        // thread slept past it counts.
        let last = std::time::Instant::now() >= end;
        if f() {
            return true;
        }
        if last {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether nothing accepts connections at `addr` (a killed daemon's TCP address:
/// its process is gone and its port free once the connection is refused). A
/// connection not answered within a second counts as refused too (a host that is
/// cut off).
pub fn refuses_connections(addr: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Some(a) = addr.to_socket_addrs().ok().and_then(|mut a| a.next()) else { return true };
    std::net::TcpStream::connect_timeout(&a, Duration::from_secs(1)).is_err()
}
