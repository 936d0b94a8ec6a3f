//! Local placement across test hosts (network namespaces, gust_e2e::test_hosts):
//! a file written by a process on one host has every chunk on that host's daemon,
//! and a process on another host reads it byte for byte over the network
//! (gust-placement's `local`). A process with GUST_PLACEMENT=wide stripes its files
//! as before. Needs root and iproute2 (scripts/setup.sh).

use gust_e2e::test_hosts::TestHosts;

const FILE_BYTES: u64 = 4 << 20;

/// Python on host `i` under the preload library, over TCP, with `env`.
fn python(hosts: &TestHosts, i: u32, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    hosts.python(i, script, args, env)
}

const WRITE: &str = r#"
import hashlib, sys
data = bytes((i * 7 + len(sys.argv[1])) % 251 for i in range(int(sys.argv[2])))
with open(sys.argv[1], "wb") as f:
    for at in range(0, len(data), 1 << 20):
        f.write(data[at:at + (1 << 20)])
print(hashlib.sha256(data).hexdigest())
"#;

const READ: &str = r#"
import hashlib, sys
print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())
"#;

/// Chunk bytes each daemon has written so far.
fn written(c: &gust_client::Client) -> Vec<u64> {
    (0..c.daemon_count()).map(|d| c.daemon_stats(d).unwrap().bytes_written).collect()
}

#[test]
fn a_writers_chunks_stay_on_its_host_and_others_read_them() {
    let mut hosts = TestHosts::create();
    hosts.start_instance_placed(512 * 1024, 1, gust_hosts::Placement::Local);
    let opts = gust_client::ClientOptions { force_tcp: true, ..Default::default() };
    let c = gust_client::Client::open_instance(&hosts.hosts_file(), opts).unwrap();
    let n = FILE_BYTES.to_string();
    for writer in 0..3u32 {
        let path = format!("/gustfs/ckpt{writer}");
        let before = written(&c);
        let sum = python(&hosts, writer, WRITE, &[&path, &n], &[]);
        let after = written(&c);
        for d in 0..3u32 {
            let grew = after[d as usize] - before[d as usize];
            let want = if d == writer { FILE_BYTES } else { 0 };
            assert_eq!(grew, want, "daemon {d} wrote {grew} bytes of the file host {writer} wrote");
        }
        for reader in (0..3u32).filter(|&r| r != writer) {
            assert_eq!(python(&hosts, reader, READ, &[&path], &[]), sum, "host {reader} reading {path}");
        }
    }
    // A process that asks for wide striping spreads its chunks over the hosts.
    let before = written(&c);
    python(&hosts, 0, WRITE, &["/gustfs/shared", &n], &[("GUST_PLACEMENT", "wide")]);
    let after = written(&c);
    let daemons_used = (0..3).filter(|&d| after[d] > before[d]).count();
    assert!(daemons_used >= 2, "a wide file's chunks went to {daemons_used} daemon(s)");
}
