//! HPC networks through libfabric (gust-transport's ofi module) across test hosts
//! (network namespaces, gust_e2e::test_hosts): daemons started with `--fabric`
//! register a fabric endpoint, and clients on other hosts reach them there. To show
//! that the fabric carried the requests, the clients get a copy of the hosts file
//! whose TCP endpoints lead nowhere: a file written on host 0 reads back byte for
//! byte on host 2 (a child the reader forks in between leaves its connections be),
//! and the same client forced onto TCP fails. A daemon killed is
//! an error within the client's timeout, not a hang. Run for `tcp;ofi_rxm` (the
//! sockets provider that verbs, CXI and EFA stand in for) and `shm` (shared memory
//! between the hosts' processes). Needs root, iproute2 and libfabric
//! (scripts/setup.sh).

use gust_e2e::test_hosts::TestHosts;
use gust_transport::Endpoint;

const WRITE: &str = r#"
import hashlib, os, sys
data = bytes((i * 7 + i // 4096) % 251 for i in range(int(sys.argv[2])))
with open(sys.argv[1], "wb") as f:
    for at in range(0, len(data), 1 << 20):
        f.write(data[at:at + (1 << 20)])
os.mkdir(sys.argv[1] + ".d")
for i in range(20):
    open(sys.argv[1] + ".d/f%d" % i, "w").write(str(i))
print(hashlib.sha256(data).hexdigest())
"#;

const READ: &str = r#"
import hashlib, os, sys
try:
    names = sorted(os.listdir(sys.argv[1] + ".d"), key=lambda n: int(n[1:]))
    # A child forked with the parent's connections open uses its own and leaves
    # the parent's be.
    pid = os.fork()
    if pid == 0:
        open(sys.argv[1] + ".d/f0").read()
        os._exit(0)
    os.waitpid(pid, 0)
    small = "".join(open(sys.argv[1] + ".d/" + n).read() for n in names)
    print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest(), len(names), small)
except OSError as e:
    print("errno", e.errno)
"#;

/// A copy of the instance's hosts file (and secret) beside it whose TCP endpoints
/// name a port nothing listens on: a client that reads it reaches the daemons
/// through their fabric endpoints or not at all.
fn fabric_only_hosts_file(hosts: &TestHosts) -> std::path::PathBuf {
    let mut h = gust_hosts::HostsFile::load(&hosts.hosts_file()).unwrap();
    for d in &mut h.daemons {
        for e in &mut d.endpoints {
            if let Endpoint::Tcp(a) = e {
                a.set_port(1);
            }
        }
    }
    let copy = hosts.dir.path().join("fabric-only.hosts");
    h.store(&copy).unwrap();
    std::fs::copy(gust_hosts::secret_path(&hosts.hosts_file()), gust_hosts::secret_path(&copy)).unwrap();
    copy
}

fn across_hosts(provider: &str) {
    if let Some(why) = gust_transport::ofi::unavailable() {
        panic!("libfabric is needed (scripts/setup.sh installs it): {why}");
    }
    let mut hosts = TestHosts::create();
    hosts.daemon_args = vec!["--fabric".into(), provider.into()];
    hosts.start_instance(64 * 1024, 1);
    let registered = gust_hosts::HostsFile::load(&hosts.hosts_file()).unwrap();
    for (i, d) in registered.daemons.iter().enumerate() {
        let Some(Endpoint::Ofi(a)) = d.fabric() else { panic!("daemon {i} has no fabric endpoint: {:?}", d.endpoints) };
        assert_eq!(a.provider, provider);
        if provider != "shm" {
            assert!(a.address.starts_with(&format!("{}:", TestHosts::addr(i as u32))), "bound to its host: {a}");
        }
    }
    let only = fabric_only_hosts_file(&hosts);
    let env = |transport| {
        [("GUST_HOSTS_FILE", only.to_str().unwrap()), ("GUST_TRANSPORT", transport), ("GUST_RPC_TIMEOUT_MS", "3000")]
    };
    let sum = hosts.python(0, WRITE, &["/gustfs/data", &(3 << 20).to_string()], &env("fabric"));
    let small: String = (0..20).map(|i| i.to_string()).collect();
    let want = format!("{sum} 20 {small}");
    assert_eq!(hosts.python(2, READ, &["/gustfs/data"], &env("fabric")), want, "read on host 2 over {provider}");
    assert_eq!(hosts.python(1, READ, &["/gustfs/data"], &env("tcp")), "errno 5", "without the fabric: nowhere to go");

    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(hosts.daemon_pid(1) as i32, libc::SIGKILL) };
    let t = std::time::Instant::now();
    assert_eq!(hosts.python(2, READ, &["/gustfs/data"], &env("fabric")), "errno 5", "a chunk's daemon is gone");
    assert!(t.elapsed() < std::time::Duration::from_secs(60), "a dead daemon fails within the timeouts");
}

#[test]
fn clients_on_other_hosts_use_the_fabric_over_tcp_through_rxm() {
    across_hosts("tcp;ofi_rxm");
}

#[test]
fn clients_on_other_hosts_use_the_fabric_over_shared_memory() {
    across_hosts("shm");
}
