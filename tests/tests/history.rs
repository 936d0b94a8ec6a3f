//! Linearizability of what clients see, checked on real processes: `gust bench
//! history` runs worker processes (each its own client core) that race create,
//! chmod, unlink and stat on a few shared paths of 4 daemons, and checks the history
//! they record against the model of gust-history. Each worker also creates and
//! unlinks in a directory of its own, as the preload library does (deferred under
//! the directory's claim when it holds it: unlinks only of records it holds a grant
//! on, which a short run need not meet), where the others' stats recall the claim.

mod common;

use gust_e2e::Instance;

/// Runs `gust bench history ARGS --json`; returns its exit code and report.
fn history(inst: &Instance, args: &[&str]) -> (i32, serde_json::Value) {
    let out = inst.gust(&[&["bench", "history", "--json"], args].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("gust bench history printed no report ({e}):\n{stdout}\n--- stderr\n{stderr}"));
    (out.status.code().unwrap_or(-1), report)
}

fn count(report: &serde_json::Value, key: &str) -> u64 {
    report[key].as_u64().unwrap_or_else(|| panic!("no {key} in the report: {report}"))
}

#[test]
fn concurrent_clients_are_linearizable() {
    let inst = Instance::start(4);
    let kept = tempfile::NamedTempFile::new().unwrap();
    let kept_path = kept.path().to_str().unwrap();
    let args = ["--workers", "4", "--ops", "300", "--paths", "6", "--seed", "1", "--dir", "/h"];
    let (code, report) = history(&inst, &[&args[..], &["--keep-history", kept_path]].concat());
    assert_eq!(code, 0, "not linearizable or failed: {report}");
    assert_eq!(count(&report, "violations"), 0, "{report}");
    assert_eq!(count(&report, "operations"), 1200, "{report}");
    // The creates in the workers' own directories went out in batches: they were
    // deferred under claims, and the histories checked above include their recalls.
    assert!(common::op_total(&inst.client(), "create_inline_batch") > 0, "no create was deferred under a claim");
    assert!(count(&report, "paths") >= 6, "{report}");
    // The run left nothing behind in GustFS.
    let ls = inst.gust(&["ls", "/h"]);
    assert!(ls.status.success() && ls.stdout.is_empty(), "{}", String::from_utf8_lossy(&ls.stdout));

    // The same history, with one stat made to see a mode nobody set, must fail the
    // check: the driver and checker can say no.
    let text = std::fs::read_to_string(kept.path()).unwrap();
    let at = text.find(r#""result":{"mode":"#).expect("a stat that saw a file");
    let end = at + text[at..].find('}').unwrap();
    let doctored = format!("{}\"result\":{{\"mode\":511{}", &text[..at], &text[end..]);
    std::fs::write(kept.path(), doctored).unwrap();
    let (code, report) = history(&inst, &["--check", kept_path]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(count(&report, "violations"), 1, "{report}");
    let why = report["problems"][0]["explanation"].as_str().unwrap();
    assert!(why.contains("returned mode 0777") && why.contains("<- no order allows this"), "{why}");
}

#[test]
fn linearizable_while_workers_are_killed_and_stopped() {
    let inst = Instance::start(4);
    let (code, report) = history(
        &inst,
        &["--workers", "4", "--seconds", "4", "--paths", "6", "--seed", "2", "--dir", "/h", "--faults", "kill,stop"],
    );
    assert_eq!(code, 0, "not linearizable or failed: {report}");
    assert_eq!(count(&report, "violations"), 0, "{report}");
    assert!(count(&report, "operations") > 0, "{report}");
    let faults = &report["faults"];
    assert!(faults["kill"].as_u64().unwrap() + faults["stop"].as_u64().unwrap() > 0, "no fault injected: {report}");
    // Every kill started a replacement under a new process number.
    assert!(count(&report, "processes") >= 4 + faults["kill"].as_u64().unwrap().min(1), "{report}");
}

/// Daemons killed (kill -9) and started again on their root directories while the
/// workers run: the shared paths stay linearizable (a restarted daemon holds
/// changes back for a lease, and clients forget the grants of a daemon whose
/// connection ended), calls that met the dead daemon failed with EIO (left
/// undecided), and every daemon serves at the end.
#[test]
fn linearizable_while_daemons_are_killed_and_started_again() {
    let inst = Instance::start(4);
    let (code, report) = history(
        &inst,
        &["--workers", "4", "--seconds", "4", "--paths", "6", "--seed", "5", "--dir", "/h", "--faults", "daemon-kill"],
    );
    assert_eq!(code, 0, "not linearizable or failed: {report}");
    assert_eq!(count(&report, "violations"), 0, "{report}");
    assert!(report["faults"]["daemon_kill"].as_u64().unwrap() > 0, "no daemon killed: {report}");
    let c = inst.client();
    for id in 0..4 {
        assert!(c.ping(id).is_ok(), "daemon {id} does not serve after the run");
    }
}

/// With GUST_DEBUG_NO_RECALL=1 the daemons grant but never recall, so a client
/// keeps answering stat from its cache after another client's chmod or unlink
/// returned: the checker must find it. A stale answer needs a stat to land in
/// the window a change opens, which timing decides: up to 10 seeded runs, and one
/// must be caught (none may be undecided or fail).
#[test]
fn the_checker_catches_stale_cached_stats() {
    let inst = Instance::start_with_env(4, &[], &[("GUST_DEBUG_NO_RECALL", "1")]);
    let mut reports = Vec::new();
    for seed in 3..13 {
        let dir = format!("/h{seed}");
        let seed = seed.to_string();
        let (code, report) =
            history(&inst, &["--workers", "4", "--ops", "2000", "--paths", "4", "--seed", &seed, "--dir", &dir]);
        assert!(code == 0 || code == 1, "exit {code}: {report}");
        if code == 1 {
            assert!(count(&report, "violations") >= 1, "{report}");
            return;
        }
        reports.push(report);
    }
    panic!("stale stats went unnoticed in 10 runs: {reports:?}");
}

/// With `--node-cache` the workers take no claims and look up with `stat_data`,
/// so the node cache's holder takes what they read and they answer lookups from
/// it: on many shared paths, each changed now and then, the history stays
/// linearizable.
#[test]
fn lookups_from_the_node_cache_are_linearizable() {
    let inst = Instance::start(4);
    let args = ["--workers", "4", "--ops", "4000", "--paths", "512", "--seed", "7", "--dir", "/h", "--node-cache"];
    let (code, report) = history(&inst, &args);
    assert_eq!(code, 0, "not linearizable or failed: {report}");
    assert_eq!(count(&report, "violations"), 0, "{report}");
    assert!(count(&report, "node_cache_hits") > 0, "no lookup came from the node cache: {report}");
}

/// The same with the holder never taking a recalled entry out of its table
/// (GUST_DEBUG_NODE_CACHE_NO_RECALL=1 in the daemon it runs in): workers read what
/// the node cache held after a change returned, and the checker must say so.
#[test]
fn the_checker_catches_a_node_cache_that_keeps_recalled_entries() {
    let inst = Instance::start_with_env(4, &[], &[("GUST_DEBUG_NODE_CACHE_NO_RECALL", "1")]);
    let mut reports = Vec::new();
    for seed in 3..8 {
        let dir = format!("/h{seed}");
        let seed = seed.to_string();
        let (code, report) = history(
            &inst,
            &["--workers", "4", "--ops", "4000", "--paths", "512", "--seed", &seed, "--dir", &dir, "--node-cache"],
        );
        assert!(code == 0 || code == 1, "exit {code}: {report}");
        if code == 1 {
            assert!(count(&report, "violations") >= 1, "{report}");
            return;
        }
        reports.push(report);
    }
    panic!("stale entries of the node cache went unnoticed in 5 runs: {reports:?}");
}
