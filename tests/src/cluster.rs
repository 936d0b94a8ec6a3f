//! Test nodes on this machine for multi-node tests: each in its own network, UTS and
//! mount namespace with its own address, host name and /tmp, created by
//! tests/cluster/testcluster.sh; sshd and SLURM on them on request. Everything is
//! removed on drop, also when the test fails.

use crate::wait_until;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

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

    /// The `gust` binary (and the preload library beside it) copied into this
    /// cluster's directory, which every node sees: the build may live under /tmp,
    /// which each node has privately.
    pub fn gust(&self) -> PathBuf {
        let bin = self.dir.join("bin");
        let gust = bin.join("gust");
        if !gust.exists() {
            std::fs::create_dir_all(&bin).unwrap();
            let built = crate::gust_bin();
            for f in ["gust", "libgust_preload.so"] {
                std::fs::copy(built.parent().unwrap().join(f), bin.join(f)).unwrap();
            }
        }
        gust
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

/// Jobs submitted to a TestCluster's SLURM as user nobody.
pub struct Jobs {
    pub nodes: u32,
    pub c: TestCluster,
    /// Shared with the nodes (not under /tmp), owned by the job user.
    pub work: PathBuf,
    /// One SLURM cluster on the machine at a time (see `machine_lock`); released
    /// after `c` went down (fields drop in order).
    _machine: fs::File,
}

/// Held while a test's SLURM cluster is up. Every cluster numbers its jobs from 1
/// and runs them as the same user, and the nodes share the machine's /dev/shm, where
/// `gust start` puts root directories (`/dev/shm/gustfs-USER-job1`): two clusters
/// at once would start in each other's directories. Across test binaries too.
fn machine_lock() -> fs::File {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/lock/gust-testcluster-slurm.lock")
        .expect("open /run/lock/gust-testcluster-slurm.lock");
    // SAFETY: flock on a descriptor this function owns; blocks until it is ours.
    let r = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) };
    assert_eq!(r, 0, "flock: {}", std::io::Error::last_os_error());
    f
}

impl Jobs {
    pub fn chown_nobody(p: &Path) {
        let ok = std::process::Command::new("chown").args(["-R", "nobody:nogroup"]).arg(p).status().unwrap();
        assert!(ok.success());
    }

    pub fn submit(&self, name: &str, sbatch_args: &[&str], body: &str) -> String {
        let script = self.work.join(format!("{name}.sh"));
        // Directive lines (#BB_LUA, like #SBATCH) go before the first command.
        let (dirs, rest): (Vec<&str>, Vec<&str>) = body.lines().partition(|l| l.starts_with("#BB_LUA"));
        let text = format!(
            "#!/bin/bash\n{}export PATH={}:$PATH\ncd {}\n{}\n",
            dirs.iter().map(|l| format!("{l}\n")).collect::<String>(),
            self.work.join("bin").display(),
            self.work.display(),
            rest.join("\n")
        );
        fs::write(&script, text).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let out = self.work.join(format!("{name}.out"));
        let mut args = vec!["--uid=nobody", "--gid=nogroup", "--parsable", "-J", name];
        let o = format!("--output={}", out.display());
        args.push(&o);
        // The job starts in the work directory, which every node sees; sbatch's
        // default is the caller's, which a node may not have (a clone under /tmp,
        // where every test node has a private /tmp).
        let cd = format!("--chdir={}", self.work.display());
        args.push(&cd);
        args.extend_from_slice(sbatch_args);
        let s = script.display().to_string();
        args.push(&s);
        let r = self.c.slurm("sbatch", &args);
        assert!(r.status.success(), "sbatch: {}", String::from_utf8_lossy(&r.stderr));
        String::from_utf8_lossy(&r.stdout).trim().split(';').next().unwrap().to_string()
    }

    pub fn state(&self, job: &str) -> String {
        let o = self.c.slurm("scontrol", &["show", "job", job]);
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        t.split_whitespace().find_map(|w| w.strip_prefix("JobState=")).unwrap_or("?").to_string()
    }

    /// Waits for a final state (bounded) and returns it.
    pub fn wait_done(&self, job: &str, limit: Duration) -> String {
        let mut st = String::new();
        let done = wait_until(limit, || {
            st = self.state(job);
            // STAGE_OUT: the script ended, the burst buffer's stage-out (ours)
            // runs; the job is not done.
            !matches!(st.as_str(), "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "STAGE_OUT" | "?")
        });
        assert!(done, "job {job} still {st} after {limit:?}");
        st
    }

    pub fn output(&self, name: &str) -> String {
        fs::read_to_string(self.work.join(format!("{name}.out"))).unwrap_or_default()
    }

    /// No daemon, agent, root directory or secret of any job left on any node.
    pub fn nodes_clean(&self) -> Result<(), String> {
        for i in 0..self.nodes {
            let p = self.c.processes(i, "/gust");
            if !p.is_empty() {
                return Err(format!("gnode{i} runs {p:?}"));
            }
            // /tmp is the node's own; /dev/shm is shared by the test nodes (and
            // where `gust start` without --rootdir puts root directories).
            let ls = self.c.on_node(i, "ls /tmp /dev/shm");
            let ls = String::from_utf8_lossy(&ls.stdout).into_owned();
            if ls.contains("gustfs") {
                return Err(format!("gnode{i} has in /tmp: {ls}"));
            }
        }
        Ok(())
    }

    pub fn assert_clean_soon(&self, what: &str) {
        let mut last = Ok(());
        let clean = wait_until(Duration::from_secs(30), || {
            last = self.nodes_clean();
            last.is_ok()
        });
        assert!(clean, "{what}: {last:?}");
    }
}

/// Files of a small tree (name, bytes) written under `root`: a 1-byte file, two
/// files over one chunk, an empty one, one level of subdirectory.
pub fn write_tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for (name, len) in [("a", 1usize), ("b", 700_000), ("sub/c", 1_300_000), ("sub/d", 0)] {
        let mut x = (name.len() as u64 * 7 + len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, &data).unwrap();
        v.push((name.to_string(), data));
    }
    v
}

impl Jobs {
    /// A SLURM cluster of `nodes` test nodes on subnet `k`, with a work directory
    /// (shared with the nodes, owned by nobody) holding gust and the preload library
    /// in bin/; with `site`, GustFS's SLURM integration installed by
    /// slurm/install.sh. None (after saying why) where the machine cannot do it.
    pub fn setup(k: u32, nodes: u32, site: bool) -> Option<Jobs> {
        let test = std::thread::current().name().unwrap_or("slurm test").to_string();
        if let Some(why) = unavailable() {
            skip(&test, &why);
            return None;
        }
        for tool in ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/sbin/munged"] {
            if !Path::new(tool).exists() {
                skip(&test, &format!("{tool} missing (scripts/setup.sh installs it)"));
                return None;
            }
        }
        let machine = machine_lock();
        let c = TestCluster::up(k, nodes);
        let work = c.dir.join("work");
        fs::create_dir_all(work.join("bin")).unwrap();
        let bin = crate::gust_bin();
        for f in ["gust", "libgust_preload.so"] {
            fs::copy(bin.parent().unwrap().join(f), work.join("bin").join(f)).unwrap();
        }
        if site {
            let etc = c.dir.join("etc");
            fs::create_dir_all(&etc).unwrap();
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../slurm/install.sh");
            let out = Command::new("bash").arg(script).arg(&etc).arg(work.join("bin/gust")).arg("1").output().unwrap();
            assert!(out.status.success(), "install.sh: {}", String::from_utf8_lossy(&out.stderr));
            // The slurm.conf lines it prints (bf_interval is in the test's base config).
            let lines: String = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("SchedulerParameters"))
                .map(|l| format!("{l}\n"))
                .collect();
            fs::write(etc.join("site.conf"), lines).unwrap();
            let _ = fs::set_permissions(c.dir.join("etc/gustfs"), fs::Permissions::from_mode(0o755));
        }
        let _ = fs::set_permissions(&c.dir, fs::Permissions::from_mode(0o755));
        c.start_slurm();
        Some(Jobs { c, work, nodes, _machine: machine })
    }
}
