//! Linearizability across test hosts (network namespaces, gust_e2e::test_hosts):
//! `gust bench history` with one worker process on each of three hosts, each
//! reaching the three daemons over TCP as from separate nodes, with workers killed
//! (kill -9) and stopped (SIGSTOP) while they run. Grants, claims and their recalls
//! then travel between hosts. Needs root and iproute2 (scripts/setup.sh).

use gust_e2e::{gust_bin, test_hosts::TestHosts};
use std::process::Command;

#[test]
fn clients_on_three_test_hosts_are_linearizable_while_killed_and_stopped() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test creates network namespaces and needs root");
    let mut hosts = TestHosts::create();
    hosts.start_instance(512 * 1024, 1);
    let netns: Vec<String> = (0..3).map(|i| hosts.ns(i)).collect();
    let out = Command::new(gust_bin())
        .args(["bench", "history", "--json", "--workers", "3", "--seconds", "4", "--paths", "6", "--seed", "7"])
        .args(["--dir", "/h", "--faults", "kill,stop", "--netns", &netns.join(",")])
        .arg("--hosts-file")
        .arg(hosts.hosts_file())
        // The coordinator's own client (which makes the run's directories) too.
        .env("GUST_TRANSPORT", "tcp")
        .output()
        .expect("run gust bench history");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("no report ({e}):\n{stdout}\n--- stderr\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "not linearizable or failed: {report}");
    assert_eq!(report["violations"].as_u64(), Some(0), "{report}");
    assert!(report["operations"].as_u64().unwrap() > 0, "{report}");
    let faults = &report["faults"];
    assert!(faults["kill"].as_u64().unwrap() + faults["stop"].as_u64().unwrap() > 0, "no fault injected: {report}");
    // Every host's daemon served the run's requests: the workers' own
    // directories and the shared paths spread over all three.
    let c = gust_client::Client::open_instance(
        &hosts.hosts_file(),
        gust_client::ClientOptions { force_tcp: true, ..Default::default() },
    )
    .unwrap();
    for d in 0..3 {
        let served: u64 = c.daemon_stats(d).unwrap().ops.iter().map(|(_, k)| *k).sum();
        assert!(served > 100, "daemon {d} served {served} requests");
    }
}
