//! SQLite across test hosts (network namespaces, gust_e2e::test_hosts): two writers,
//! each in its own host's namespace, over TCP, under the preload library. It passes
//! alone; it is left out of the suite (`#[ignore]`; run it with
//! `cargo test --release -p gust-e2e --test netns_sqlite -- --ignored`) because
//! netns.rs's partition tests failed one run in four after it, in the same process
//! or the next one (a read or write during a partition answered EIO), and five in
//! five without it: not understood yet (the issue note says so).
//! Needs root and iproute2 (scripts/setup.sh).

use gust_e2e::test_hosts::TestHosts;

/// SQLite's multi-process pattern across nodes: two Python processes, each in its
/// own test host's network namespace and reaching the daemons over TCP (as from two
/// nodes), under the preload library, insert rows in transactions into one database
/// in the instance. The daemons' locks (docs/DESIGN.md, "Locks") keep them apart: no
/// row is lost or duplicated and the database checks out.
#[test]
#[ignore = "disturbs netns.rs's partition tests run after it; run alone with --ignored"]
fn sqlite_from_two_test_hosts_through_the_preload_library() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test creates network namespaces and needs root");
    let mut hosts = TestHosts::create();
    hosts.start_instance(512 * 1024, 1);
    let lib = gust_e2e::gust_bin().parent().unwrap().join("libgust_preload.so");
    let on = |i: u32, script: &str, args: &[&str]| {
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", &hosts.ns(i), "python3", "-c", script])
            .args(args)
            .env("LD_PRELOAD", &lib)
            .env("GUST_HOSTS_FILE", hosts.hosts_file())
            .env("GUST_TRANSPORT", "tcp")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    let db = "/gustfs/db.sqlite";
    let out = on(0, "import sys; open(sys.argv[1], 'w').close()", &[db]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let writer = r#"
import sqlite3, sys
db, who = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db, timeout=60, isolation_level=None)
con.execute("create table if not exists t (who text, i integer, unique (who, i))")
for i in range(100):
    con.execute("begin immediate")
    con.execute("insert into t values (?, ?)", (who, i))
    con.execute("commit")
print("done", who)
"#;
    let writers = [on(0, writer, &[db, "a"]).spawn().unwrap(), on(1, writer, &[db, "b"]).spawn().unwrap()];
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a writer failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let check = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("select who, i from t").fetchall()
print(len(rows), len(set(rows)), con.execute("pragma integrity_check").fetchone()[0])
"#;
    let out = on(2, check, &[db]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 200 ok", "{}", String::from_utf8_lossy(&out.stderr));
}
