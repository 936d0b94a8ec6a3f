//! `gust probe` on this machine: JSON with local storage (never /proc or /sys),
//! memory, cores and the loopback interface; `--db` writes an SQLite file;
//! `--choose` says which storage `gust start` would pick and why.

use gust_e2e::gust_bin;
use std::process::Command;

#[test]
fn probe_prints_json_writes_sqlite_and_explains_its_choice() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("nodes.db");
    let out = Command::new(gust_bin())
        .args(["probe", "--bench-mib", "4", "--choose", "1MiB", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["cores_online"].as_u64().unwrap() >= 1);
    assert!(v["memory_total_bytes"].as_u64().unwrap() > 0);
    let storage = v["storage"].as_array().unwrap();
    assert!(!storage.is_empty());
    for s in storage {
        let m = s["mount"].as_str().unwrap();
        assert!(!m.starts_with("/proc") && !m.starts_with("/sys"), "{m}");
        assert!(["memory", "ssd", "hdd", "disk"].contains(&s["kind"].as_str().unwrap()), "{s}");
        if s["writable"].as_bool().unwrap() && s["free_bytes"].as_u64().unwrap() > 1 << 30 {
            assert!(s["write_mib_s"].as_f64().unwrap() > 0.0, "{s}");
        }
    }
    let nics = v["nics"].as_array().unwrap();
    assert!(nics.iter().any(|n| n["kind"] == "loopback"));
    let head = std::fs::read(&db).unwrap();
    assert!(head.starts_with(b"SQLite format 3\0"), "not an SQLite file");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would choose") && err.contains("the fastest local storage with"), "{err}");

    let out = Command::new(gust_bin()).args(["probe", "--bench-mib", "0", "--choose", "1000000GiB"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no writable local storage"));
}
