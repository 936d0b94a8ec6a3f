//! Tracing (gust-trace, `gust trace`): a real program traced under the preload
//! library, daemons switched on and off while running, damaged trace files.
//!
//! Needs tar (scripts/setup.sh).

mod common;

use common::output_text as text;
use gust_e2e::{gust_bin, Instance};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// `gust trace report DIR --json` (plots and trace.json into `out`): the summary.
fn report(dir: &Path, out: &Path) -> Value {
    let o = Command::new(gust_bin())
        .args(["trace", "report", "--json", "--out"])
        .arg(out)
        .arg(dir)
        .output()
        .expect("gust trace report");
    assert!(o.status.success(), "report failed: {}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("report JSON: {e}\n{}", text(&o)))
}

/// The calls of `name` the report counts over all processes.
fn op_count(summary: &Value, name: &str) -> u64 {
    summary["ops"].as_array().unwrap().iter().find(|o| o["name"] == name).map_or(0, |o| o["count"].as_u64().unwrap())
}

/// The paths of the Chrome trace's events named `name`.
fn event_paths(trace_json: &Path, name: &str) -> BTreeSet<String> {
    let v: Value = serde_json::from_slice(&std::fs::read(trace_json).unwrap()).expect("trace.json is JSON");
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == name && e["ph"] == "X")
        .filter_map(|e| e["args"]["path"].as_str().map(str::to_string))
        .collect()
}

/// Files of varied sizes (empty ones excluded: they write nothing), some spanning
/// several 64 KiB chunks, in nested directories; returns (relative path, size).
fn make_tree(root: &Path) -> Vec<(String, u64)> {
    let mut files = Vec::new();
    for i in 0..24u64 {
        let rel = format!("src/d{}/f{i}", i % 3);
        let size = match i % 4 {
            0 => 1 + i * 37,
            1 => 4096 * i + 3,
            2 => 150_000 + i * 1000,
            _ => 700_000 + i,
        };
        let p = root.join(&rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let data: Vec<u8> = (0..size).map(|b| (b * 31 + i) as u8).collect();
        std::fs::write(&p, data).unwrap();
        files.push((rel, size));
    }
    files
}

/// tar extracting into GustFS and archiving from it, each traced (GUST_TRACE) under
/// the preload library: the report counts exactly the files and bytes tar wrote
/// and read, and the Chrome trace names exactly those files; the plots are PNGs.
#[test]
fn tar_under_preload_is_traced_file_by_file() {
    let inst = Instance::start_with(3, &["--chunk-size", "64k"]);
    let local = tempfile::Builder::new().prefix("gust-trace-tar").tempdir_in("/tmp").unwrap();
    let files = make_tree(local.path());
    let total: u64 = files.iter().map(|f| f.1).sum();
    let archive = local.path().join("in.tar");
    let st = Command::new("tar").arg("cf").arg(&archive).arg("-C").arg(local.path()).arg("src").status().unwrap();
    assert!(st.success());
    let run = |trace: &str, dir: &Path, script: &str| {
        let o = Command::new(gust_bin())
            .args(["run", "--", "bash", "-c", script])
            .env("GUST_HOSTS_FILE", &inst.hosts)
            .env("GUST_TRACE", trace)
            .env("GUST_TRACE_DIR", dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{script}: {}", text(&o));
    };
    let wdir = local.path().join("trace-x");
    run("data,meta", &wdir, &format!("mkdir /gustfs/x && exec tar xf {} -C /gustfs/x", archive.display()));
    let wout = local.path().join("report-x");
    let s = report(&wdir, &wout);
    assert_eq!(s["files_written"], files.len(), "{s:#}");
    assert_eq!(s["bytes_written"], total, "{s:#}");
    assert_eq!(s["bytes_read"], 0);
    // One trace file per process: bash's (mkdir) and tar's (exec replaces bash: the
    // same pid, a second file).
    assert!(s["trace_files"].as_u64().unwrap() >= 1);
    let want: BTreeSet<String> = files.iter().map(|(rel, _)| format!("/x/{rel}")).collect();
    assert_eq!(event_paths(&wout.join("trace.json"), "write"), want);
    assert!(op_count(&s, "mkdir") >= 4, "mkdir /gustfs/x and tar's three directories: {s:#}");
    // Every file opened for writing is closed.
    assert!(op_count(&s, "close") >= files.len() as u64, "{s:#}");
    let outputs: Vec<&str> = s["outputs"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    for png in outputs.iter().filter(|o| o.ends_with(".png")) {
        let b = std::fs::read(png).unwrap();
        assert!(b.starts_with(b"\x89PNG\r\n\x1a\n") && b.len() > 1000, "{png} is not a PNG");
    }
    assert!(
        outputs.iter().any(|o| o.ends_with("request-sizes.png"))
            && outputs.iter().any(|o| o.ends_with("daemon-load.png"))
    );
    assert!(outputs.iter().any(|o| o.contains("timeline-client-tar")), "{outputs:?}");

    // Reading back: only `read` is on, so nothing else is recorded.
    let rdir = local.path().join("trace-c");
    run("read", &rdir, &format!("tar cf {} -C /gustfs/x src", local.path().join("out.tar").display()));
    let rout = local.path().join("report-c");
    let s = report(&rdir, &rout);
    assert_eq!(s["files_read"], files.len(), "{s:#}");
    assert_eq!(s["bytes_read"], total, "{s:#}");
    assert_eq!(s["bytes_written"], 0);
    let names: Vec<&str> = s["ops"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["read"], "GUST_TRACE=read records reads only");
    assert_eq!(event_paths(&rout.join("trace.json"), "read"), want);
}

/// lseek, readlink, access and statfs have tracepoints of their own: Python under
/// the preload library calls each a known number of times, and the report counts
/// exactly those calls, with their paths in the Chrome trace.
#[test]
fn lseek_readlink_access_and_statfs_are_traced() {
    let inst = Instance::start(2);
    let dir = tempfile::Builder::new().prefix("gust-trace-misc").tempdir_in("/tmp").unwrap();
    let script = "import os\n\
        fd = os.open('/gustfs/f', os.O_CREAT | os.O_RDWR, 0o644)\n\
        os.write(fd, b'0123456789')\n\
        assert os.lseek(fd, 3, os.SEEK_SET) == 3\n\
        assert os.lseek(fd, -2, os.SEEK_END) == 8\n\
        os.close(fd)\n\
        os.symlink('f', '/gustfs/l')\n\
        assert os.readlink('/gustfs/l') == 'f'\n\
        assert os.access('/gustfs/f', os.R_OK) and not os.access('/gustfs/nothing', os.F_OK)\n\
        os.statvfs('/gustfs')\n";
    let o = Command::new(gust_bin())
        .args(["run", "--", "python3", "-c", script])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .env("GUST_TRACE", "lseek,readlink,access,statfs")
        .env("GUST_TRACE_DIR", dir.path().join("t"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = dir.path().join("report");
    let s = report(&dir.path().join("t"), &out);
    let names: BTreeSet<&str> = s["ops"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, BTreeSet::from(["lseek", "readlink", "access", "statfs"]), "{s:#}");
    assert_eq!(op_count(&s, "lseek"), 2, "{s:#}");
    assert_eq!(op_count(&s, "readlink"), 1, "{s:#}");
    assert_eq!(op_count(&s, "access"), 2, "{s:#}");
    assert!(op_count(&s, "statfs") >= 1, "{s:#}");
    let trace = out.join("trace.json");
    assert_eq!(event_paths(&trace, "readlink"), BTreeSet::from(["/l".to_string()]));
    assert_eq!(event_paths(&trace, "access"), BTreeSet::from(["/f".to_string(), "/nothing".to_string()]));
    assert_eq!(event_paths(&trace, "lseek"), BTreeSet::from(["/f".to_string()]));
}

/// `gust trace on md --dir D` on a running instance makes its daemons record the
/// metadata requests that follow, and `off` stops them and writes what they
/// buffered: exactly the files created while on appear, with no chunk records.
#[test]
fn trace_on_and_off_switch_running_daemons() {
    let inst = Instance::start(2);
    let c = inst.client();
    let dir = inst.rootdir().join("daemon-trace");
    let create = |name: &str| {
        let fd = c.open(name, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.write(fd, b"some bytes").unwrap();
        c.close(fd).unwrap();
    };
    create("/before");

    // Clear errors first: a client tracepoint, no directory.
    let o = inst.gust(&["trace", "on", "write"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("GUST_TRACE=write"), "{}", text(&o));
    let o = inst.gust(&["trace", "on", "md"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no trace directory"), "{}", text(&o));
    let o = inst.gust(&["trace", "on", "bogus", "--dir", dir.to_str().unwrap()]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("'bogus'"), "{}", text(&o));

    let o = inst.gust(&["trace", "on", "md", "--dir", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let during: Vec<String> = (0..10).map(|i| format!("/during-{i}")).collect();
    for p in &during {
        create(p);
    }
    let o = inst.gust(&["trace", "off", "md"]);
    assert!(o.status.success(), "{}", text(&o));
    create("/after");

    // The daemons are still running: their files hold what `off` flushed.
    let out = inst.rootdir().join("daemon-report");
    let s = report(&dir, &out);
    assert_eq!(s["trace_files"], 2, "one file per daemon: {s:#}");
    assert_eq!(op_count(&s, "chunk_write"), 0, "chunk tracepoints stayed off: {s:#}");
    let updated = event_paths(&out.join("trace.json"), "md_update");
    assert_eq!(updated, during.iter().cloned().collect::<BTreeSet<_>>(), "exactly the files made while on");
    let served: u64 = s["daemons"].as_array().unwrap().iter().map(|d| d["served_requests"].as_u64().unwrap()).sum();
    assert_eq!(served, s["records"].as_u64().unwrap());
    // Each create is one create and one size update, both at its daemon.
    assert_eq!(op_count(&s, "md_update"), 2 * during.len() as u64, "{s:#}");
}

/// A trace file cut short or damaged is named in a clear error, never a panic, and
/// a directory without trace files says so.
#[test]
fn damaged_trace_files_are_reported_clearly() {
    let inst = Instance::start(1);
    let c = inst.client();
    let dir = inst.rootdir().join("t");
    assert!(inst.gust(&["trace", "on", "all", "--dir", dir.to_str().unwrap()]).status.success());
    for i in 0..50 {
        c.mkdir(&format!("/d{i}"), 0o755).unwrap();
    }
    assert!(inst.gust(&["trace", "off", "all"]).status.success());
    let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let good = std::fs::read(&file).unwrap();
    assert!(good.len() > 200);

    let check = |bytes: &[u8], want: &str| {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("client-x-1.gtrace");
        std::fs::write(&p, bytes).unwrap();
        let o = Command::new(gust_bin()).args(["trace", "report"]).arg(d.path()).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{want}: {}", text(&o));
        assert!(err.contains(want) && err.contains("client-x-1.gtrace"), "want '{want}': {}", text(&o));
        assert!(!err.contains("panicked"), "{}", text(&o));
    };
    check(&good[..good.len() - 7], "truncated: the file ends inside a block");
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 10] ^= 0x40;
    check(&bad, "corrupt: block checksum mismatch");
    check(b"this is not a trace file at all", "not a GustFS trace file");
    check(&good[..20], "truncated");

    let empty = tempfile::tempdir().unwrap();
    let o = Command::new(gust_bin()).args(["trace", "report"]).arg(empty.path()).output().unwrap();
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("no trace files"), "{}", text(&o));
}

/// `gust start --trace chunk --trace-dir D` traces the daemons from their start,
/// and a daemon stopped by `gust stop` writes what it buffered at exit: its chunk
/// records count exactly the bytes written, and nothing else is recorded.
#[test]
fn daemons_traced_from_start_write_their_records_at_exit() {
    let dir = tempfile::Builder::new().prefix("gust-trace-start").tempdir_in("/tmp").unwrap();
    let d = dir.path().join("t");
    let mut inst =
        Instance::start_with(2, &["--chunk-size", "64k", "--trace", "chunk", "--trace-dir", d.to_str().unwrap()]);
    let c = inst.client();
    let data: Vec<u8> = (0..1_000_003u32).map(|i| i as u8).collect();
    let fd = c.open("/big", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert_eq!(c.write(fd, &data).unwrap(), data.len());
    c.close(fd).unwrap();
    let fd = c.open("/big", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len() + 10];
    assert_eq!(c.read(fd, &mut back).unwrap(), data.len());
    c.close(fd).unwrap();
    drop(c);
    inst.stop();
    let s = report(&d, &dir.path().join("report"));
    assert_eq!(s["trace_files"], 2, "{s:#}");
    let names: Vec<&str> = s["ops"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["chunk_read", "chunk_write"], "only the chunk group: {s:#}");
    let bytes =
        |n: &str| s["ops"].as_array().unwrap().iter().find(|o| o["name"] == n).unwrap()["bytes"].as_u64().unwrap();
    assert_eq!(bytes("chunk_write"), data.len() as u64);
    assert_eq!(bytes("chunk_read"), data.len() as u64);
    // 1,000,003 bytes in 64 KiB chunks over 2 daemons: both served some.
    let served: Vec<u64> =
        s["daemons"].as_array().unwrap().iter().map(|d| d["served_bytes"].as_u64().unwrap()).collect();
    assert!(served.len() == 2 && served.iter().all(|b| *b > 0), "{s:#}");
}

/// A forked child (a bash subshell) records into a file of its own and does not
/// write its parent's buffered records again: every write is counted once.
#[test]
fn forked_children_trace_into_their_own_files() {
    let inst = Instance::start(2);
    let local = tempfile::Builder::new().prefix("gust-trace-fork").tempdir_in("/tmp").unwrap();
    let dir = local.path().join("t");
    // The parent writes first (its record is buffered when the subshells fork).
    let script = "echo p > /gustfs/p; for i in 1 2 3; do ( echo $i > /gustfs/f$i ); done; echo q >> /gustfs/p";
    let o = Command::new(gust_bin())
        .args(["run", "--", "bash", "-c", script])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .env("GUST_TRACE", "write")
        .env("GUST_TRACE_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = local.path().join("report");
    let s = report(&dir, &out);
    assert_eq!(op_count(&s, "write"), 5, "{s:#}");
    assert_eq!(s["trace_files"], 4, "the shell and three subshells: {s:#}");
    assert_eq!(s["bytes_written"], 10, "{s:#}");
    let v: Value = serde_json::from_slice(&std::fs::read(out.join("trace.json")).unwrap()).unwrap();
    let mut writes: Vec<(u64, String)> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "write")
        .map(|e| (e["pid"].as_u64().unwrap(), e["args"]["path"].as_str().unwrap().to_string()))
        .collect();
    writes.sort();
    let pids: BTreeSet<u64> = writes.iter().map(|w| w.0).collect();
    assert_eq!(pids.len(), 4, "{writes:?}");
    let paths: Vec<&str> = writes.iter().map(|w| w.1.as_str()).collect();
    assert_eq!(paths.iter().filter(|p| **p == "/p").count(), 2, "{writes:?}");
    for f in ["/f1", "/f2", "/f3"] {
        assert_eq!(paths.iter().filter(|p| **p == f).count(), 1, "{writes:?}");
    }
}
