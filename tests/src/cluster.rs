//! Test nodes on this machine for multi-node tests: each in its own network, UTS and
//! mount namespace with its own address, host name and /tmp, created by
//! tests/cluster/testcluster.sh; sshd and SLURM on them on request. Everything is
//! removed on drop, also when the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct TestCluster {
    pub dir: PathBuf,
    /// Subnet 10.78.<k>.0/24; node i is 10.78.<k>.<i+2>, named gnode<i>.
    pub k: u32,
    pub n: u32,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/testcluster.sh")
}

/// Why this machine cannot host test nodes, if it cannot (not root, no namespaces).
pub fn unavailable() -> Option<String> {
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: creating network namespaces needs root".into());
    }
    for tool in ["ip", "nsenter", "unshare"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("{tool} is missing (scripts/setup.sh installs it)"));
        }
    }
    match Command::new("unshare").args(["--net", "--uts", "--mount", "true"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("this machine refuses namespaces: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    }
}

/// Prints why a test is skipped, loudly, so that a skip is never mistaken for a pass.
pub fn skip(test: &str, why: &str) {
    eprintln!("\n*** SKIPPED {test}: {why} ***\n");
}

impl TestCluster {
    /// Creates `n` nodes on subnet 10.78.<k>.0/24 (each test its own `k`).
    pub fn up(k: u32, n: u32) -> TestCluster {
        let dir = PathBuf::from(format!("/var/tmp/gust-cluster-{}-{k}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = TestCluster { dir, k, n };
        c.run(&["up", &k.to_string(), &n.to_string()]);
        c
    }

    fn run(&self, args: &[&str]) {
        let out = Command::new("bash").arg(script()).arg(args[0]).arg(&self.dir).args(&args[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "testcluster.sh {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn start_sshd(&self) {
        self.run(&["sshd"]);
    }

    /// munged (if none runs), slurmctld here and one slurmd per node.
    pub fn start_slurm(&self) {
        self.run(&["slurm"]);
    }

    /// SLURM_CONF for the SLURM commands of this cluster.
    pub fn slurm_conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    /// Runs a SLURM command (sbatch, scontrol, ...) against this cluster.
    pub fn slurm(&self, prog: &str, args: &[&str]) -> Output {
        Command::new(prog).args(args).env("SLURM_CONF", self.slurm_conf()).output().unwrap()
    }

    /// The ssh command for `gust start --ssh`.
    pub fn ssh_command(&self) -> String {
        format!("ssh -F {}", self.dir.join("ssh_config").display())
    }

    pub fn host(i: u32) -> String {
        format!("gnode{i}")
    }

    pub fn addr(&self, i: u32) -> String {
        format!("10.78.{}.{}", self.k, i + 2)
    }

    /// Host-side end of node i's link (down: the node is silent).
    pub fn link(&self, i: u32) -> String {
        let state = std::fs::read_to_string(self.dir.join("state")).unwrap();
        let tag = state.lines().find_map(|l| l.strip_prefix("tag=")).unwrap().to_string();
        format!("gv{tag}h{i}")
    }

    /// Runs `sh -c CMD` on node i.
    pub fn on_node(&self, i: u32, cmd: &str) -> Output {
        Command::new("bash")
            .arg(script())
            .arg("exec")
            .arg(&self.dir)
            .arg(i.to_string())
            .args(["sh", "-c", cmd])
            .output()
            .unwrap()
    }

    /// Command lines of the node's processes whose program name (argv[0]) ends
    /// with `program`, e.g. "/gust".
    pub fn processes(&self, i: u32, program: &str) -> Vec<String> {
        let state = std::fs::read_to_string(self.dir.join("state")).unwrap();
        let tag = state.lines().find_map(|l| l.strip_prefix("tag=")).unwrap().to_string();
        let out = Command::new("ip").args(["netns", "pids", &format!("gc{tag}n{i}")]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.split(' ').next().is_some_and(|a0| a0.ends_with(program)))
            .collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(script()).arg("down").arg(&self.dir).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
