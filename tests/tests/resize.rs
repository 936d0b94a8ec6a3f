//! Growing and shrinking a running instance (`gust expand`, `gust shrink`;
//! docs/DESIGN.md, "Growing and shrinking"): the data the new layout places
//! elsewhere moves, and only it; every file reads back as written; clients that
//! run through the moves see a linearizable history and no failed operation; an
//! interrupted move is finished by `--resume`, also after a daemon restarted.

mod common;

use gust_client::Client;
use gust_e2e::Instance;
use std::process::{Command, Stdio};

/// Small chunks: a few files make many chunks.
const CHUNK: &str = "16KiB";

/// File i's bytes: a length and a pattern that differ per file.
fn content(i: usize) -> Vec<u8> {
    common::pattern(i as u64, (i * 7919) % 100_000 + 1)
}

fn path(i: usize) -> String {
    format!("/data/d{}/f{i}", i % 10)
}

fn write_all(c: &Client, files: usize) {
    c.mkdir("/data", 0o755).unwrap();
    for d in 0..10 {
        c.mkdir(&format!("/data/d{d}"), 0o755).unwrap();
    }
    for i in 0..files {
        common::put(c, &path(i), &content(i));
    }
}

/// Every file reads back as written, and each directory lists exactly its files.
fn check_all(c: &Client, files: usize, when: &str) {
    for i in 0..files {
        let got = common::get(c, &path(i));
        let want = content(i);
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "{when}: {} reads back other bytes than written ({} bytes of {}, first difference at {first:?}, zeros from there: {}, last difference {:?})",
            path(i),
            got.len(),
            want.len(),
            first.map_or(0, |f| got[f..].iter().take_while(|b| **b == 0).count()),
            got.iter().zip(&want).rposition(|(a, b)| a != b)
        );
    }
    for d in 0..10 {
        let mut want: Vec<String> = (0..files).filter(|i| i % 10 == d).map(|i| format!("f{i}")).collect();
        want.sort();
        assert_eq!(common::names(c, &format!("/data/d{d}")), want, "{when}: listing of /data/d{d}");
    }
}

/// Runs `gust ARGS` and returns its JSON summary (stdout), asserting success.
fn resize(inst: &Instance, args: &[&str]) -> serde_json::Value {
    resize_said(inst, args).0
}

/// `resize`, and what the command said on stderr.
fn resize_said(inst: &Instance, args: &[&str]) -> (serde_json::Value, String) {
    let out = inst.gust(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "gust {args:?} failed: {err}");
    let v =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("gust {args:?} printed no summary ({e}): {err}"));
    (v, err)
}

fn n(v: &serde_json::Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// 2 -> 3 daemons moves a third of the records and chunks (jump hashing moves
/// 1/N' to the new daemon and nothing between old ones), 3 -> 2 moves them back,
/// and every file reads back after each move.
#[test]
fn expand_and_shrink_move_the_ideal_fraction_and_lose_nothing() {
    let inst = Instance::start_with(2, &["--chunk-size", CHUNK]);
    let c = inst.client();
    let files = 1500;
    write_all(&c, files);
    // Records: files, their 10 directories and /data; chunks of 16 KiB.
    let records = (files + 11) as f64;
    let chunks: f64 = (0..files).map(|i| content(i).len().div_ceil(16 << 10) as f64).sum();

    let grown = resize(&inst, &["expand", "--local", "1"]);
    assert_eq!(n(&grown, "daemons"), 3.0, "{grown}");
    let (fr, fc) = (n(&grown, "records_moved") / records, n(&grown, "chunks_moved") / chunks);
    // Binomial: 1/3 of each, within 5 standard deviations.
    assert!((fr - 1.0 / 3.0).abs() < 5.0 * (2.0 / 9.0 / records).sqrt(), "moved {fr:.3} of the records: {grown}");
    assert!((fc - 1.0 / 3.0).abs() < 5.0 * (2.0 / 9.0 / chunks).sqrt(), "moved {fc:.3} of the chunks: {grown}");
    // The client opened before the move routes by the new layout on its next call.
    check_all(&c, files, "after expand");
    assert_eq!(c.layout_generation(), 2);
    check_all(&inst.client(), files, "after expand, new client");
    let third = inst.hosts_file().daemons[2].rootdir.clone();
    assert!(third.exists());

    let shrunk = resize(&inst, &["shrink", "--count", "1"]);
    assert_eq!(n(&shrunk, "daemons"), 2.0, "{shrunk}");
    // Exactly what daemon 2 held moves back.
    assert_eq!(n(&shrunk, "records_moved"), n(&grown, "records_moved"), "{shrunk} after {grown}");
    assert_eq!(n(&shrunk, "chunks_moved"), n(&grown, "chunks_moved"), "{shrunk} after {grown}");
    check_all(&c, files, "after shrink");
    let h = inst.hosts_file();
    assert_eq!((h.daemons.len(), h.generation, h.moving), (2, 3, false));
    assert!(common_wait(|| !third.exists()), "the daemon that left keeps its root directory {}", third.display());
}

/// `gust expand --local 2` whose coordinator stops before `step` (as if killed
/// there: GUST_DEBUG_MOVE_STOP_BEFORE).
fn grow_stopped_before(inst: &Instance, step: &str) {
    let out = Command::new(gust_e2e::gust_bin())
        .args(["expand", "--local", "2"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .env("GUST_DEBUG_MOVE_STOP_BEFORE", step)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the coordinator should have stopped: {}", String::from_utf8_lossy(&out.stderr));
}

fn common_wait(f: impl FnMut() -> bool) -> bool {
    gust_e2e::wait_until(std::time::Duration::from_secs(10), f)
}

/// Clients keep working through moves: `gust bench history`'s workers race
/// creates, chmods, unlinks and stats while the instance grows and shrinks again
/// and again; their history is linearizable and no operation failed.
#[test]
fn clients_run_through_moves_linearizably_and_without_errors() {
    let inst = Instance::start_with(2, &["--chunk-size", CHUNK]);
    let c = inst.client();
    let files = 200;
    write_all(&c, files);
    let bench = Command::new(gust_e2e::gust_bin())
        .args(["bench", "history", "--json", "--workers", "3", "--seconds", "8", "--paths", "6", "--seed", "3"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut moves = 0;
    // Bounded: at most 60 moves, while the bench runs.
    let mut bench = bench;
    while moves < 60 && bench.try_wait().unwrap().is_none() {
        let (verb, arg, count) = if moves % 2 == 0 { ("expand", "--local", "2") } else { ("shrink", "--count", "2") };
        resize(&inst, &[verb, arg, count]);
        moves += 1;
    }
    let out = bench.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("no report ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert!(moves >= 2, "the bench ended before two moves: {report}");
    assert_eq!(report["violations"].as_u64(), Some(0), "{report}");
    assert_eq!(report["indeterminate"].as_u64(), Some(0), "operations failed during the moves: {report}");
    assert!(out.status.success(), "{report}");
    eprintln!("{moves} moves under {} operations", report["operations"]);
    check_all(&c, files, "after the moves");
}

/// A move whose coordinator stopped after the daemons froze (as if killed) is
/// under way: `gust status` says so, clients wait, a daemon restarted meanwhile
/// starts frozen, and `--resume` finishes it.
#[test]
fn an_interrupted_move_is_resumed() {
    let inst = Instance::start_with(2, &["--chunk-size", CHUNK]);
    let c = inst.client();
    let files = 300;
    write_all(&c, files);
    grow_stopped_before(&inst, "copy");
    let h = inst.hosts_file();
    assert!(h.moving && h.placed_count() == 4, "the move is under way in the hosts file");
    let status = inst.gust(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("moving") && text.contains("--resume"), "{text}");
    // A daemon killed and started again during the move serves nothing yet.
    unsafe { libc::kill(inst.daemon_pid(1) as i32, libc::SIGKILL) };
    assert!(common_wait(|| inst.daemon_gone(1)));
    inst.restart_daemon(1);
    assert!(common_wait(|| inst.client().ping(1).is_ok()), "daemon 1 did not start again");
    // A client that reads while the move is under way waits for it.
    let reader = {
        let hosts = inst.hosts.clone();
        std::thread::spawn(move || {
            let c = Client::open_instance(&hosts, Default::default()).unwrap();
            check_all(&c, files, "read during the move");
        })
    };
    let done = resize(&inst, &["expand", "--resume"]);
    assert_eq!(n(&done, "daemons"), 4.0, "{done}");
    reader.join().unwrap();
    check_all(&c, files, "after the resumed move");
    assert!(!inst.hosts_file().moving);
}

/// A grow's first pass sends the new daemons their part while clients are
/// served; what changes between it and the copy (files rewritten, shortened,
/// shortened and lengthened again, removed, renamed, created) arrives as it is
/// at the copy, and nothing the first pass sent and is gone since shows up: a
/// removed file stays removed, the bytes past a shortened file's end read as
/// zeros when it grows again, the stored bytes are the files' bytes. Daemon 1
/// is killed and started again in between, so its copy works from its intent
/// log, daemon 0's from what it noted.
#[test]
fn what_changes_after_a_first_pass_arrives_as_it_is() {
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader};
    let inst = Instance::start_with(2, &["--chunk-size", CHUNK]);
    let c = inst.client();
    let files = 600;
    write_all(&c, files);
    let gate = inst.dir.path().join("gate");
    let mut grow = Command::new(gust_e2e::gust_bin())
        .args(["expand", "--local", "2"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .env("GUST_DEBUG_MOVE_GATE", &gate)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    let mut err = BufReader::new(grow.stderr.take().unwrap());
    while !said.contains("first pass done") {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "gust expand ended before its first pass: {said}");
        said.push_str(&line);
    }
    let mut want: BTreeMap<String, Vec<u8>> = (0..files).map(|i| (path(i), content(i))).collect();
    for i in (0..files).step_by(7) {
        let new = common::pattern(1_000_000 + i as u64, (i * 31) % 90_000 + 1);
        common::put(&c, &path(i), &new);
        want.insert(path(i), new);
    }
    for i in (1..files).step_by(11) {
        let keep = want[&path(i)].len() / 3;
        c.truncate(&path(i), keep as u64).unwrap();
        let w = want.get_mut(&path(i)).unwrap();
        w.truncate(keep);
        if i % 2 == 1 {
            // Longer again: what was past the shortened end must read as zeros.
            c.truncate(&path(i), (keep + 40_000) as u64).unwrap();
            w.resize(keep + 40_000, 0);
        }
    }
    for i in (2..files).step_by(13) {
        c.unlink(&path(i)).unwrap();
        want.remove(&path(i));
    }
    for i in (3..files).step_by(17) {
        if let Some(d) = want.remove(&path(i)) {
            let to = format!("{}.renamed", path(i));
            c.rename(&path(i), &to).unwrap();
            want.insert(to, d);
        }
    }
    for i in 0..40 {
        let p = format!("/data/d{}/new{i}", i % 10);
        let d = common::pattern(2_000_000 + i, i as usize * 3_001 + 1);
        common::put(&c, &p, &d);
        want.insert(p, d);
    }
    unsafe { libc::kill(inst.daemon_pid(1) as i32, libc::SIGKILL) };
    assert!(common_wait(|| inst.daemon_gone(1)));
    inst.restart_daemon(1);
    assert!(common_wait(|| inst.client().ping(1).is_ok()), "daemon 1 did not start again");
    std::fs::write(&gate, b"").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let out = grow.wait_with_output().unwrap();
    assert!(out.status.success(), "gust expand failed: {said}{rest}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(n(&summary, "daemons"), 4.0, "{summary}");

    for c in [&c, &inst.client()] {
        for (p, d) in &want {
            assert!(common::get(c, p) == *d, "{p} reads back other bytes than it holds ({} bytes)", d.len());
        }
        for dir in 0..10 {
            let prefix = format!("/data/d{dir}/");
            let names: Vec<String> = want.keys().filter_map(|p| p.strip_prefix(&prefix)).map(str::to_string).collect();
            assert_eq!(common::names(c, &format!("/data/d{dir}")), names, "listing of /data/d{dir}");
        }
    }
    // Nothing of what went is kept anywhere: the chunk bytes stored are the
    // files' bytes (rounded up to 4 KiB blocks per chunk of 16 KiB).
    let stored: f64 = stored_bytes(&inst).iter().sum();
    let live: f64 = want.values().map(|d| d.len() as f64).sum();
    let rounding = want.values().map(|d| d.len().div_ceil(16 << 10) as f64 * 4096.0).sum::<f64>();
    assert!(stored <= live + rounding, "{stored} bytes stored for {live} bytes of files");
    eprintln!("{said}{rest}stored {stored} bytes for {live}");
}

/// A grow whose coordinator stopped after the first pass, before the move
/// began (as if killed), leaves the instance serving as it was; `--resume`
/// sends the joining daemons away and the daemons forget the pass (its intent
/// logs go); a grow after that moves everything as if the first had not been.
#[test]
fn a_grow_stopped_in_its_first_pass_is_called_off() {
    let inst = Instance::start_with(2, &["--chunk-size", CHUNK]);
    let c = inst.client();
    let files = 300;
    write_all(&c, files);
    grow_stopped_before(&inst, "prepare");
    let logs = || inst.hosts_file().daemons[..2].iter().filter(|d| d.rootdir.join("move-precopy.log").exists()).count();
    assert_eq!(logs(), 2, "each daemon that holds data keeps an intent log of its first pass");
    // Served as before, by the two.
    check_all(&c, files, "after the first pass");
    common::put(&c, "/later", b"written after the first pass");
    let refused = inst.gust(&["expand", "--local", "1"]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--resume"));
    let off = inst.gust(&["expand", "--resume"]);
    assert!(off.status.success(), "{}", String::from_utf8_lossy(&off.stderr));
    let h = inst.hosts_file();
    assert_eq!((h.daemons.len(), h.placed_count(), h.moving, h.generation), (2, 2, false, 1));
    assert_eq!(logs(), 0, "the intent logs go with the first pass");
    let grown = resize(&inst, &["expand", "--local", "2"]);
    assert_eq!(n(&grown, "daemons"), 4.0, "{grown}");
    check_all(&c, files, "after the grow");
    assert_eq!(common::get(&c, "/later"), b"written after the first pass");
}

/// Moves with daemons killed at random points (kill -9, then started again):
/// `gust expand` and `gust shrink` either finish or stop with the move under
/// way (or called off), and `--resume` finishes it or sends the joining daemons
/// away; after each move every file reads back and lists as written, and the
/// history of `gust bench history`'s workers through all of it is linearizable.
/// The daemons killed are those the instance had before the command (sources
/// of a first pass and a copy, daemons that leave). `GUST_SOAK_SECONDS` (15)
/// and `GUST_SOAK_SEED` (1) set its length and choices, and `GUST_SOAK_LOGS` a
/// directory for the daemons' whole logs if a move does not end:
/// bench/run_resize_soak.sh runs it for ten minutes.
#[test]
fn moves_with_daemons_killed_lose_nothing() {
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (seconds, mut x) = (env("GUST_SOAK_SECONDS", 15), env("GUST_SOAK_SEED", 1) | 1);
    let mut rand = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n.max(1)
    };
    let inst = Instance::start_with(2, &["--chunk-size", CHUNK]);
    let files = 200;
    write_all(&inst.client(), files);
    let secs = seconds.to_string();
    let mut bench = Command::new(gust_e2e::gust_bin())
        .args(["bench", "history", "--json", "--workers", "3", "--seconds", &secs, "--paths", "6", "--seed", "5"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut moves, mut kills) = (0, 0);
    // Bounded: at most 500 moves, while the bench runs.
    while moves < 500 && bench.try_wait().unwrap().is_none() {
        let before = inst.hosts_file().daemons.len() as u64;
        let grow = before <= 2 || (before < 6 && rand(2) == 0);
        let args = if grow { ["expand", "--local", "2"] } else { ["shrink", "--count", "2"] };
        let said = inst.dir.path().join("move.err");
        let mut cmd = Command::new(gust_e2e::gust_bin())
            .args(args)
            .env("GUST_HOSTS_FILE", &inst.hosts)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&said).unwrap())
            .spawn()
            .unwrap();
        // The fault lands at a random point of the command (or not at all).
        let at = std::time::Instant::now() + std::time::Duration::from_millis(rand(400));
        while std::time::Instant::now() < at && cmd.try_wait().unwrap().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // One of the daemons from before the command that the hosts file still
        // lists (a shrink may have let some go already).
        let listed = |id: u32| inst.hosts_file().daemons.iter().find(|d| d.id == id).cloned();
        let victim = rand(before) as u32;
        if let Some(d) = listed(victim).filter(|_| cmd.try_wait().unwrap().is_none() && rand(3) != 0) {
            unsafe { libc::kill(d.pid as i32, libc::SIGKILL) };
            let addr = d.tcp_addr();
            assert!(common_wait(|| gust_e2e::refuses_connections(&addr)), "daemon {victim} did not die");
            // Started again if it is still part of the instance (a daemon a shrink
            // let go meanwhile refuses to start).
            if listed(victim).is_some() {
                inst.restart_daemon(victim);
                let back = common_wait(|| listed(victim).is_none() || inst.client().ping(victim).is_ok());
                assert!(back, "daemon {victim} did not start again");
            }
            kills += 1;
        }
        assert!(
            gust_e2e::wait_until(std::time::Duration::from_secs(180), || cmd.try_wait().unwrap().is_some()),
            "gust {args:?} did not end"
        );
        if let Err(e) = Client::open_instance(&inst.hosts, Default::default()) {
            panic!(
                "{e}\n{}\ncmd: {}",
                std::fs::read_to_string(&inst.hosts).unwrap(),
                std::fs::read_to_string(&said).unwrap_or_default()
            );
        }
        settle(&inst);
        check_all(&inst.client(), files, &format!("after move {moves} ({args:?}, {kills} daemons killed so far)"));
        moves += 1;
    }
    let out = bench.wait_with_output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("no report ({e}): {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    assert_eq!(report["violations"].as_u64(), Some(0), "{report}");
    assert!(moves >= 2, "the bench ended before two moves: {report}");
    eprintln!(
        "{moves} moves, {kills} daemons killed, {} operations ({} indeterminate), 0 violations",
        report["operations"], report["indeterminate"]
    );
}

/// A move that stopped (its coordinator failed when a daemon died) finished
/// with `--resume`, or a grow stopped before its move began called off.
fn settle(inst: &Instance) {
    let mut why = String::new();
    for _ in 0..20 {
        let h = inst.hosts_file();
        let out = inst.gust(&["expand", "--resume"]);
        if !h.moving && h.placed_count() as usize == h.daemons.len() {
            // Ended, and every daemon serves it (or now does: `--resume` sends
            // `adopt` to one that did not answer it).
            return;
        }
        why = String::from_utf8_lossy(&out.stderr).into_owned();
    }
    let h = inst.hosts_file();
    let logs: Vec<String> = h.daemons.iter().map(|d| inst.daemon_log(d.id)).collect();
    if let Ok(dir) = std::env::var("GUST_SOAK_LOGS") {
        for (d, l) in h.daemons.iter().zip(&logs) {
            let _ = std::fs::write(format!("{dir}/d{}.log", d.id), l);
        }
    }
    panic!(
        "no end to the move: {} daemons, {} placed, moving {}; gust expand --resume said: {why}\n{}",
        h.daemons.len(),
        h.placed_count(),
        h.moving,
        logs.iter().map(|l| l.lines().rev().take(12).collect::<Vec<_>>().join("\n")).collect::<Vec<_>>().join("\n--\n")
    );
}

/// Bytes of chunk data each daemon stores: allocated blocks of the local chunk
/// files under its chunks directory (named by the file id's 32 hex digits; their
/// checksum files, one per file whatever its size, are not counted).
fn stored_bytes(inst: &Instance) -> Vec<f64> {
    use std::os::unix::fs::MetadataExt;
    fn walk(p: &std::path::Path) -> u64 {
        std::fs::read_dir(p).map_or(0, |rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) if e.file_name().len() == 32 => m.blocks() * 512,
                    Ok(_) => 0,
                    Err(_) => 0,
                })
                .sum()
        })
    }
    inst.hosts_file().daemons.iter().map(|d| walk(&d.rootdir.join("chunks")) as f64).collect()
}

/// `gust tune --placement capacity` moves a running wide-striped instance's chunks
/// to where the capacity placement puts them (shares in proportion to the
/// daemons' capacities), `--placement wide` moves them back to equal shares, every
/// file reads back after each (also through a client opened before), and what
/// cannot change is refused with a reason.
#[test]
fn the_placement_changes_while_the_instance_runs() {
    // Capacities 1 : 1 : 4 (declared; the store bounds each daemon by its own).
    let inst = Instance::start_with(3, &["--chunk-size", CHUNK, "--declare-capacity", "256MiB,256MiB,1GiB"]);
    let c = inst.client();
    let files = 600;
    write_all(&c, files);
    let share = |b: &[f64]| -> Vec<f64> { b.iter().map(|x| x / b.iter().sum::<f64>()).collect() };
    let before = share(&stored_bytes(&inst));
    assert!(before.iter().all(|s| (s - 1.0 / 3.0).abs() < 0.06), "wide: equal shares, {before:?}");

    // What `gust status` shows as used, asked now (the daemons cache it for 10 s).
    let used = |c: &Client| (0..3).map(|d| c.daemon_metrics(d).unwrap().chunk_store_bytes as f64).collect::<Vec<_>>();
    let used_before = used(&c);

    let moved = resize(&inst, &["tune", "--placement", "capacity"]);
    assert_eq!(moved["placement"], "capacity", "{moved}");
    assert!(n(&moved, "chunks_moved") > 0.0 && n(&moved, "records_moved") == 0.0, "metadata stays wide: {moved}");
    check_all(&inst.client(), files, "after the change to capacity, new client");
    check_all(&c, files, "after the change to capacity, client opened before");
    let weighted = share(&stored_bytes(&inst));
    for (s, want) in weighted.iter().zip([1.0 / 6.0, 1.0 / 6.0, 4.0 / 6.0]) {
        assert!((s - want).abs() < 0.06, "capacity: shares {weighted:?}, want 1:1:4");
    }
    assert_eq!(inst.hosts_file().placement, gust_hosts::Placement::Capacity);
    // ... and after the move at once, not the usage from before it.
    let used_after = used(&c);
    assert!(used_after[2] > 1.5 * used_before[2], "daemon 2's usage, before {used_before:?}, after {used_after:?}");

    // Refused, with the reason: the same placement, local placement.
    for (args, says) in [
        (vec!["tune", "--placement", "capacity"], "already"),
        (vec!["tune", "--placement", "local"], "local placement"),
    ] {
        let out = inst.gust(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }

    let back = resize(&inst, &["tune", "--placement", "wide"]);
    assert_eq!(back["placement"], "wide", "{back}");
    check_all(&c, files, "after the change back to wide");
    let again = share(&stored_bytes(&inst));
    assert!(again.iter().all(|s| (s - 1.0 / 3.0).abs() < 0.06), "wide again: equal shares, {again:?}");
    eprintln!("shares of chunk bytes: wide {before:.3?}, capacity {weighted:.3?}, wide again {again:.3?}");
}

/// A capacity-placed instance grows and shrinks: a daemon joining with twice the
/// others' capacity takes half of the chunks (weighted rendezvous hashing moves
/// chunks only to it) and a third of the records (metadata is jump-hashed), sent
/// by a first pass; every file reads back; the shrink moves exactly those back.
#[test]
fn a_capacity_placed_instance_grows_and_shrinks() {
    let inst =
        Instance::start_with(2, &["--chunk-size", CHUNK, "--placement", "capacity", "--declare-capacity", "256MiB"]);
    let c = inst.client();
    let files = 900;
    write_all(&c, files);
    let records = (files + 11) as f64;
    let chunks: f64 = (0..files).map(|i| content(i).len().div_ceil(16 << 10) as f64).sum();
    let share = |b: &[f64]| -> Vec<f64> { b.iter().map(|x| x / b.iter().sum::<f64>()).collect() };

    let (grown, said) = resize_said(&inst, &["expand", "--local", "1", "--declare-capacity", "512MiB"]);
    assert_eq!((n(&grown, "daemons"), grown["placement"].as_str()), (3.0, Some("capacity")), "{grown}");
    assert!(!said.contains("its copy sends"), "a first pass ran on every daemon: {said}");
    assert!(n(&grown, "first_pass_seconds") > 0.0, "{grown}");
    let (fr, fc) = (n(&grown, "records_moved") / records, n(&grown, "chunks_moved") / chunks);
    assert!((fr - 1.0 / 3.0).abs() < 5.0 * (2.0 / 9.0 / records).sqrt(), "moved {fr:.3} of the records: {grown}");
    assert!((fc - 0.5).abs() < 5.0 * (0.25 / chunks).sqrt(), "moved {fc:.3} of the chunks: {grown}");
    assert_eq!(inst.hosts_file().daemons[2].capacity_bytes, Some(512 << 20));
    let weighted = share(&stored_bytes(&inst));
    for (s, want) in weighted.iter().zip([0.25, 0.25, 0.5]) {
        assert!((s - want).abs() < 0.06, "shares {weighted:?}, want 1:1:2");
    }
    check_all(&c, files, "after the capacity grow");
    check_all(&inst.client(), files, "after the capacity grow, new client");

    let shrunk = resize(&inst, &["shrink", "--count", "1"]);
    assert_eq!(n(&shrunk, "chunks_moved"), n(&grown, "chunks_moved"), "{shrunk} after {grown}");
    assert_eq!(n(&shrunk, "records_moved"), n(&grown, "records_moved"), "{shrunk} after {grown}");
    check_all(&c, files, "after the capacity shrink");
    let even = share(&stored_bytes(&inst));
    assert!(even.iter().all(|s| (s - 0.5).abs() < 0.06), "two equal daemons again: {even:?}");
}
