//! Test hosts in network namespaces: each with its own veth link to this namespace
//! and address (10.77.<i>.2), routed through this namespace as nodes through a
//! switch, a daemon in each. Faults: a link down (silence), a partial partition
//! (this namespace's own packets to a host blackholed, forwarded ones not).
//! Everything is removed on drop, daemons included. Needs root and iproute2.

use crate::gust_bin;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Test hosts of `TestHosts::create`.
pub const HOSTS: u32 = 3;
pub const PORT: u16 = 7070;

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip (iproute2)");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Network namespaces, links and daemons of the test; all removed on drop.
pub struct TestHosts {
    tag: String,
    /// How many hosts: 0..hosts.
    pub hosts: u32,
    pub dir: tempfile::TempDir,
    pids: Vec<u32>,
    /// Arguments every daemon started from now on gets too (`--fabric tcp;ofi_rxm`).
    pub daemon_args: Vec<String>,
    /// The tests of this file take turns: their hosts use the same addresses.
    _turn: std::sync::MutexGuard<'static, ()>,
}

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl TestHosts {
    pub fn ns(&self, i: u32) -> String {
        format!("gust{}n{i}", self.tag)
    }
    /// Host-side end of host i's link.
    pub fn link(&self, i: u32) -> String {
        format!("gv{}h{i}", self.tag)
    }
    pub fn addr(i: u32) -> String {
        format!("10.77.{i}.2")
    }

    pub fn create() -> TestHosts {
        Self::create_n(HOSTS)
    }

    /// `n` test hosts (at most 250: addresses 10.77.<i>.2).
    pub fn create_n(n_hosts: u32) -> TestHosts {
        assert!(n_hosts <= 250, "at most 250 test hosts");
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "this test creates network namespaces and needs root");
        // Unique per test of this process too (they run in parallel); interface
        // names stay within 15 bytes.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 10_000);
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let t = TestHosts {
            _turn: turn,
            hosts: n_hosts,
            tag,
            dir: tempfile::Builder::new().prefix("gust-netns").tempdir_in("/tmp").unwrap(),
            pids: Vec::new(),
            daemon_args: Vec::new(),
        };
        for i in 0..n_hosts {
            let (ns, h, n) = (t.ns(i), t.link(i), format!("gv{}n{i}", t.tag));
            ip(&["netns", "add", &ns]);
            ip(&["link", "add", &h, "type", "veth", "peer", "name", &n]);
            ip(&["link", "set", &n, "netns", &ns]);
            ip(&["addr", "add", &format!("10.77.{i}.1/24"), "dev", &h]);
            ip(&["link", "set", &h, "up"]);
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", Self::addr(i)), "dev", &n]);
            ip(&["-n", &ns, "link", "set", &n, "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            // Hosts reach each other through this namespace, as nodes through a
            // switch: daemons heartbeat their peers (fencing).
            ip(&["-n", &ns, "route", "add", "default", "via", &format!("10.77.{i}.1")]);
        }
        // Where packets for a host whose link is down go: a link without carrier (its
        // peer end stays down), so they vanish, as on a switch port that went dark.
        // Without it the connected route leaves with the link and the default route
        // takes them off this machine, where something else may answer (an egress
        // proxy answered HTTP here: a fast failure, not the silence tests expect).
        ip(&["link", "add", &t.sink(), "type", "veth", "peer", "name", &format!("gv{}t", t.tag)]);
        ip(&["link", "set", &t.sink(), "up"]);
        ip(&["route", "replace", "10.77.0.0/16", "dev", &t.sink()]);
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").expect("enable forwarding between the test hosts");
        t
    }

    /// The link that silently takes packets for the test hosts' range (see `create`).
    fn sink(&self) -> String {
        format!("gv{}s", self.tag)
    }

    /// Policy-routing table of the partial partition (unique per test).
    pub fn table(&self) -> String {
        (7700 + self.tag.parse::<u32>().unwrap_or(0) % 20_000).to_string()
    }

    /// A partial partition: this test process (the clients) can no longer reach
    /// host `i`, which still reaches, and is reached by, the other hosts. Packets
    /// this namespace sends itself (`iif lo`) to host i take a blackhole route;
    /// packets it forwards between hosts do not.
    pub fn cut_off_from_clients(&self, i: u32) {
        let t = self.table();
        ip(&["rule", "add", "to", &Self::addr(i), "iif", "lo", "table", &t]);
        ip(&["route", "add", "blackhole", &Self::addr(i), "table", &t]);
    }

    pub fn reconnect_clients(&self, i: u32) {
        let t = self.table();
        let _ = Command::new("ip").args(["rule", "del", "to", &Self::addr(i), "iif", "lo", "table", &t]).output();
        let _ = Command::new("ip").args(["route", "flush", "table", &t]).output();
    }

    /// The pid of host `i`'s daemon, as registered (a repaired daemon is a new one).
    pub fn daemon_pid(&self, i: u32) -> u32 {
        gust_hosts::HostsFile::load(&self.hosts_file()).unwrap().daemons[i as usize].pid
    }

    /// `program` run in host `i`'s namespace as a client of the instance: its hosts
    /// file, over TCP as from another node. The caller adds arguments and
    /// environment.
    pub fn client_command(&self, i: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(i)])
            .arg(program)
            .env("GUST_HOSTS_FILE", self.hosts_file())
            .env("GUST_TRANSPORT", "tcp");
        cmd
    }

    /// Python running `script` with `args` on host `i` under the preload library,
    /// over TCP, with `env`: its standard output, trimmed (it must succeed).
    pub fn python(&self, i: u32, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
        let lib = gust_bin().parent().unwrap().join("libgust_preload.so");
        let out = self
            .client_command(i, "python3")
            .args(["-c", script])
            .args(args)
            .env("LD_PRELOAD", &lib)
            .envs(env.iter().copied())
            .output()
            .expect("python3 in a test host");
        assert!(out.status.success(), "python on host {i}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs `gust ARGS --hosts-file H` on host `i` (in its namespace).
    pub fn gust_on(&self, i: u32, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(i)])
            .arg(gust_bin())
            .args(args)
            .arg("--hosts-file")
            .arg(self.hosts_file())
            .output()
            .expect("run gust in a test host")
    }

    /// What host `i`'s daemon has logged so far (empty if nothing yet).
    pub fn daemon_log(&self, i: u32) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("d{i}.log"))).unwrap_or_default()
    }

    pub fn hosts_file(&self) -> std::path::PathBuf {
        self.dir.path().join("gust.hosts")
    }

    /// A new instance's header (chunk size, copies of everything) and secret, then
    /// its daemons, which register into it.
    pub fn start_instance(&mut self, chunk_size_bytes: u64, replicas: u32) {
        self.start_instance_placed(chunk_size_bytes, replicas, gust_hosts::Placement::Wide);
    }

    /// `start_instance` with chunks placed by `placement`.
    pub fn start_instance_placed(&mut self, chunk_size_bytes: u64, replicas: u32, placement: gust_hosts::Placement) {
        let mut header =
            gust_hosts::HostsFile::new(gust_hosts::new_instance_id(), chunk_size_bytes, "/gustfs".into(), false);
        header.replicas = replicas;
        header.placement = placement;
        header.store(&self.hosts_file()).unwrap();
        gust_hosts::create_secret(&self.hosts_file()).unwrap();
        self.start_daemons();
    }

    /// `start_instance` of an erasure-coded instance (`ec K+M`, records kept M+1
    /// times).
    pub fn start_instance_coded(&mut self, chunk_size_bytes: u64, k: u32, m: u32) {
        let mut header =
            gust_hosts::HostsFile::new(gust_hosts::new_instance_id(), chunk_size_bytes, "/gustfs".into(), false);
        header.ec = Some((k, m));
        header.replicas = m + 1;
        header.store(&self.hosts_file()).unwrap();
        gust_hosts::create_secret(&self.hosts_file()).unwrap();
        self.start_daemons();
    }

    pub fn start_daemons(&mut self) {
        for i in 0..self.hosts {
            let log = std::fs::File::create(self.dir.path().join(format!("d{i}.log"))).unwrap();
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &self.ns(i)])
                .arg(gust_bin())
                .arg("daemon")
                .arg("--rootdir")
                .arg(self.dir.path().join(format!("d{i}")))
                .arg("--hosts-file")
                .arg(self.hosts_file())
                .arg("--listen")
                .arg(format!("{}:{PORT}", Self::addr(i)))
                .arg("--id")
                .arg(i.to_string())
                .args(&self.daemon_args)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log);
            let mut child = crate::in_own_session(&mut cmd).spawn().expect("start daemon in its namespace");
            self.pids.push(child.id());
            std::thread::spawn(move || child.wait());
        }
        let (hosts, n) = (self.hosts_file(), self.hosts);
        let up = crate::wait_until(Duration::from_secs(30), || {
            gust_hosts::HostsFile::load(&hosts).map(|h| h.is_complete(n as usize)).unwrap_or(false)
        });
        if !up {
            let logs: String = (0..self.hosts).map(|i| format!("\n--- daemon {i}:\n{}", self.daemon_log(i))).collect();
            panic!("daemons did not register within 30 s{logs}");
        }
    }
}

impl Drop for TestHosts {
    fn drop(&mut self) {
        // Daemons started here (`ip netns exec` execs the daemon, so each pid is
        // the daemon) and those `gust repair` started since (registered).
        let registered = gust_hosts::HostsFile::load(&self.hosts_file())
            .map(|h| h.daemons.iter().map(|d| d.pid).collect::<Vec<_>>())
            .unwrap_or_default();
        for p in self.pids.iter().chain(&registered) {
            // SAFETY: signals to daemons of this test.
            unsafe { libc::kill(*p as i32, libc::SIGKILL) };
        }
        for i in 0..self.hosts {
            self.reconnect_clients(i);
            let _ = Command::new("ip").args(["link", "del", &self.link(i)]).output();
            let _ = Command::new("ip").args(["netns", "del", &self.ns(i)]).output();
        }
        let _ = Command::new("ip").args(["link", "del", &self.sink()]).output();
    }
}
