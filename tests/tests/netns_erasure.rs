//! Erasure codes across test hosts (network namespaces, gust_e2e::test_hosts): three
//! hosts with `ec 2+1`, so every stripe has a cell on each. A file written through
//! the preload library on host 0 reads back byte for byte on host 2 over TCP while
//! host 1's link is down (silence: the client's timeout decides, not a refused
//! connection), its cells rebuilt from the other two; with host 0's daemon killed
//! too, two of each stripe's three cells are gone, and the read fails with EIO
//! rather than returning other bytes. The issue's shape too: six hosts with `ec
//! 4+2`, any two lost (one silent, one killed) and nothing lost, a third and a
//! clean EIO. Needs root and iproute2 (scripts/setup.sh).

use gust_e2e::test_hosts::ip;
use gust_e2e::test_hosts::TestHosts;

const WRITE: &str = r#"
import hashlib, sys
data = bytes((i * 7 + i // 4096) % 251 for i in range(int(sys.argv[2])))
with open(sys.argv[1], "wb") as f:
    for at in range(0, len(data), 1 << 20):
        f.write(data[at:at + (1 << 20)])
print(hashlib.sha256(data).hexdigest())
"#;

const READ: &str = r#"
import hashlib, sys
try:
    print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())
except OSError as e:
    print("errno", e.errno)
"#;

/// Python on host `i` under the preload library, over TCP, a short RPC timeout.
fn python(hosts: &TestHosts, i: u32, script: &str, args: &[&str]) -> String {
    hosts.python(i, script, args, &[("GUST_RPC_TIMEOUT_MS", "2000")])
}

#[test]
fn a_file_outlives_one_lost_host_and_fails_cleanly_with_two() {
    let mut hosts = TestHosts::create();
    hosts.start_instance_coded(64 * 1024, 2, 1);
    let sum = python(&hosts, 0, WRITE, &["/gustfs/data", &(3 << 20).to_string()]);
    assert_eq!(python(&hosts, 2, READ, &["/gustfs/data"]), sum, "all hosts up");

    ip(&["link", "set", &hosts.link(1), "down"]);
    assert_eq!(python(&hosts, 2, READ, &["/gustfs/data"]), sum, "host 1 silent");

    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(hosts.daemon_pid(0) as i32, libc::SIGKILL) };
    assert_eq!(python(&hosts, 2, READ, &["/gustfs/data"]), "errno 5", "two of three cells gone");
    ip(&["link", "set", &hosts.link(1), "up"]);
}

/// Six hosts, `ec 4+2`: every stripe has a cell on each host. Two lost (host 1
/// silent, host 3's daemon killed), every byte reads back on host 5; a third
/// (host 4's daemon killed) and the reads fail with EIO.
#[test]
fn six_hosts_with_four_plus_two_lose_any_two() {
    let mut hosts = TestHosts::create_n(6);
    hosts.start_instance_coded(64 * 1024, 4, 2);
    let sum = python(&hosts, 0, WRITE, &["/gustfs/data", &(5 << 20).to_string()]);
    assert_eq!(python(&hosts, 5, READ, &["/gustfs/data"]), sum, "all hosts up");

    ip(&["link", "set", &hosts.link(1), "down"]);
    // SAFETY: signals to daemons this test started.
    unsafe { libc::kill(hosts.daemon_pid(3) as i32, libc::SIGKILL) };
    assert_eq!(python(&hosts, 5, READ, &["/gustfs/data"]), sum, "host 1 silent, host 3's daemon gone");

    unsafe { libc::kill(hosts.daemon_pid(4) as i32, libc::SIGKILL) };
    assert_eq!(python(&hosts, 5, READ, &["/gustfs/data"]), "errno 5", "three of six cells gone");
    ip(&["link", "set", &hosts.link(1), "up"]);
}
