//! `gust events` with real daemons: two concurrent writers' events arrive complete
//! and in per-file order with inotify's names (renames paired by cookie), a consumer
//! resuming from a printed cursor misses nothing and repeats nothing, and one
//! resuming past a bounded log's dropped events is told exactly how many it missed.

use gust_client::Client;
use gust_e2e::{gust_bin, wait_until, Instance};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Files each writer makes.
const FILES: usize = 150;

fn events(inst: &Instance, args: &[&str]) -> Vec<Value> {
    let out = inst.gust(&[&["events"], args].concat());
    assert!(out.status.success(), "gust events: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

/// What writer `w` does to each of its files: create, write, close (IN_CLOSE_WRITE),
/// chmod (IN_ATTRIB), rename f -> g, and for every other file delete g.
fn writer(c: &Client, w: usize) {
    c.mkdir(&format!("/w{w}"), 0o755).unwrap();
    for i in 0..FILES {
        let f = format!("/w{w}/f{i}");
        let fd = c.open(&f, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.write(fd, b"data").unwrap();
        c.close(fd).unwrap();
        c.chmod(&f, 0o600).unwrap();
        c.rename(&f, &format!("/w{w}/g{i}")).unwrap();
        if i % 2 == 0 {
            c.unlink(&format!("/w{w}/g{i}")).unwrap();
        }
    }
}

/// Event names per path, in stream order.
fn by_path(ev: &[Value]) -> HashMap<String, Vec<String>> {
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    for e in ev {
        if let Some(p) = e["path"].as_str() {
            m.entry(p.to_string()).or_default().push(e["event"].as_str().unwrap().to_string());
        }
    }
    m
}

fn check_complete_and_ordered(ev: &[Value]) {
    assert!(ev.iter().all(|e| e["event"] != "IN_Q_OVERFLOW"), "nothing may be missed here");
    let m = by_path(ev);
    let mut cookies: HashMap<u64, Vec<String>> = HashMap::new();
    for e in ev.iter().filter(|e| e["cookie"].is_u64()) {
        cookies.entry(e["cookie"].as_u64().unwrap()).or_default().push(e["event"].as_str().unwrap().to_string());
    }
    for w in 0..2 {
        assert_eq!(m[&format!("/gustfs/w{w}")], vec!["IN_CREATE"], "mkdir of writer {w}");
        for i in 0..FILES {
            let f = &m[&format!("/gustfs/w{w}/f{i}")];
            assert_eq!(f, &vec!["IN_CREATE", "IN_CLOSE_WRITE", "IN_ATTRIB", "IN_MOVED_FROM"], "events of w{w}/f{i}");
            let g = &m[&format!("/gustfs/w{w}/g{i}")];
            let want: Vec<&str> = if i % 2 == 0 { vec!["IN_MOVED_TO", "IN_DELETE"] } else { vec!["IN_MOVED_TO"] };
            assert_eq!(g, &want, "events of w{w}/g{i}");
        }
    }
    // Every rename's two halves share a cookie.
    assert_eq!(cookies.len(), 2 * FILES);
    assert!(cookies.values().all(|v| v.len() == 2 && v.contains(&"IN_MOVED_TO".to_string())));
    // The directory flag on mkdir.
    let mk = ev.iter().find(|e| e["path"] == "/gustfs/w0").unwrap();
    assert_eq!(mk["mask"], serde_json::json!(["IN_CREATE", "IN_ISDIR"]));
}

#[test]
fn concurrent_writers_complete_in_order_and_resumable() {
    let inst = Instance::start(3);
    // A follower from now on, reading while the writers run.
    let mut child = Command::new(gust_bin())
        .args(["events", "--follow", "--since", "now"])
        .env("GUST_HOSTS_FILE", &inst.hosts)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<Value>::new()));
    let reader = {
        let lines = lines.clone();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(serde_json::from_str(&l).unwrap());
            }
        })
    };
    // The follower has its "now" before the writers start: it asks each daemon for
    // the end of its log, then starts its rounds with daemon 0, so a second events
    // request at daemon 0 means every "now" was answered.
    let probe = inst.client();
    let events_served = || {
        let s = probe.daemon_stats(0).expect("stats of daemon 0");
        s.ops.iter().find(|(op, _)| op == "events").expect("an events counter").1
    };
    assert!(
        wait_until(Duration::from_secs(30), || events_served() >= 2),
        "gust events --follow --since now never began to follow"
    );
    std::thread::scope(|s| {
        for w in 0..2 {
            let inst = &inst;
            s.spawn(move || writer(&inst.client(), w));
        }
    });
    // mkdir + per file 5 events + a delete for half of them, per writer.
    let total = 2 * (1 + 5 * FILES + FILES / 2);
    let done = wait_until(Duration::from_secs(60), || lines.lock().unwrap().len() >= total);
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let followed = lines.lock().unwrap().clone();
    assert!(done, "follower saw {} of {total} events", followed.len());
    assert_eq!(followed.len(), total, "no event twice");
    check_complete_and_ordered(&followed);

    // The whole log read at once gives the same, and so does a consumer that stops
    // halfway and resumes from the cursor of the last line it saw.
    let all = events(&inst, &[]);
    assert_eq!(all.len(), total);
    check_complete_and_ordered(&all);
    let first_part: Vec<Value> = all[..total / 3].to_vec();
    let cursor = first_part.last().unwrap()["cursor"].as_str().unwrap().to_string();
    let rest = events(&inst, &["--since", &cursor]);
    let resumed: Vec<Value> = first_part.into_iter().chain(rest).collect();
    assert_eq!(resumed.len(), total, "resumed consumer: nothing missed, nothing repeated");
    check_complete_and_ordered(&resumed);

    // A prefix: one writer's events only.
    let w1 = events(&inst, &["/gustfs/w1"]);
    assert_eq!(w1.len(), total / 2);
    assert!(w1.iter().all(|e| e["path"].as_str().unwrap().starts_with("/gustfs/w1")));
}

#[test]
fn bounded_log_reports_what_a_late_consumer_missed() {
    // Room for about 100 events of short paths per daemon.
    let inst = Instance::start_with(3, &["--events-cap", "8KiB"]);
    let c = inst.client();
    let files = 1000;
    for i in 0..files {
        let fd = c.open(&format!("/f{i}"), libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.close(fd).unwrap(); // no write: IN_CREATE only
    }
    // A consumer from the very start: every daemon dropped some; missed + shown is
    // exactly what happened.
    let ev = events(&inst, &["--since", "0:0,1:0,2:0"]);
    let missed: u64 = ev.iter().filter(|e| e["event"] == "IN_Q_OVERFLOW").map(|e| e["missed"].as_u64().unwrap()).sum();
    let shown = ev.iter().filter(|e| e["event"] == "IN_CREATE").count() as u64;
    assert_eq!(ev.iter().filter(|e| e["event"] == "IN_Q_OVERFLOW").count(), 3, "one notice per daemon");
    assert!(missed > 0 && shown > 0 && shown < files);
    assert_eq!(missed + shown, files, "missed {missed} + shown {shown}");
    // Each notice comes before that daemon's events.
    for d in 0..3 {
        let first = ev.iter().position(|e| e["daemon"] == d).unwrap();
        assert_eq!(ev[first]["event"], "IN_Q_OVERFLOW");
    }
}
