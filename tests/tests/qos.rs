//! Sharing the node with the job (gust-daemon qos.rs): `gust start --cpus --nice
//! --max-bandwidth` reach every thread of a real daemon (read back from /proc),
//! `gust tune` changes them while it runs, bad values are refused clearly and
//! change nothing, and a bandwidth limit paces chunk transfers.

mod common;

use common::{output_text as text, pattern};
use gust_e2e::{gust_bin, Instance};
use std::process::Command;
use std::time::{Duration, Instant};

/// The cores this test process may run on (the daemon starts with the same).
fn own_cpus() -> Vec<usize> {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
    parse_cpu_list(&list)
}

fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// Per thread of process `pid`: (its cores, its niceness).
fn threads_of(pid: u32) -> Vec<(Vec<usize>, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let dir = e.path();
        let (Ok(status), Ok(stat)) =
            (std::fs::read_to_string(dir.join("status")), std::fs::read_to_string(dir.join("stat")))
        else {
            continue; // ended meanwhile
        };
        let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
        // Fields after the command name, which ends at the last ')': state is
        // field 3, nice field 19 (proc(5)).
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let nice: i32 = rest.split(' ').nth(19 - 3).unwrap().parse().unwrap();
        out.push((parse_cpu_list(cpus), nice));
    }
    out
}

/// The niceness of process `pid`'s autogroup, where the kernel has autogroups.
fn autogroup_nice(pid: u32) -> Option<i64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).ok()?;
    s.split_whitespace().last()?.parse().ok()
}

/// `gust tune --json ARGS` on `inst`: per daemon (cpus, nice, max_bandwidth).
fn tune(inst: &Instance, args: &[&str]) -> Vec<(Vec<usize>, i64, u64)> {
    let mut all = vec!["tune", "--json"];
    all.extend_from_slice(args);
    let o = inst.gust(&all);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (
                parse_cpu_list(v["cpus"].as_str().unwrap()),
                v["nice"].as_i64().unwrap(),
                v["max_bandwidth"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// This process's niceness (the daemons start with it; raising it needs no
/// privilege, lowering it does).
fn own_nice() -> i64 {
    // SAFETY: getpriority has no preconditions.
    i64::from(unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) })
}

#[test]
fn limits_reach_every_thread_and_change_while_running() {
    let cpus = own_cpus();
    let last = vec![*cpus.last().unwrap()];
    let (n1, n2) = ((own_nice() + 7).min(19), (own_nice() + 12).min(19));
    let inst = Instance::start_with(2, &["--cpus", "1", &format!("--nice={n1}")]);
    let c = inst.client();
    // Work on both daemons, so their lazily started threads exist too.
    for i in 0..16 {
        common::put(&c, &format!("/f{i}"), &pattern(i, 300_000));
    }
    for d in 0..2 {
        let threads = threads_of(inst.daemon_pid(d));
        assert!(threads.len() > 4, "daemon {d}: {} threads", threads.len());
        for (t_cpus, nice) in &threads {
            assert_eq!(t_cpus, &last, "daemon {d}: a thread on other cores");
            assert_eq!(i64::from(*nice), n1, "daemon {d}: a thread's niceness");
        }
    }
    for d in 0..2 {
        // A daemon leads its own session, so its autogroup's niceness is the one the
        // scheduler weighs it by against the application's session.
        if let Some(n) = autogroup_nice(inst.daemon_pid(d)) {
            assert_eq!(n, n1, "daemon {d}'s autogroup");
        }
    }
    assert_eq!(tune(&inst, &[]), vec![(last.clone(), n1, 0); 2], "tune without options shows the limits");

    // Changed while it runs: every thread follows, new threads too.
    assert_eq!(tune(&inst, &["--cpus", "0", &format!("--nice={n2}")]), vec![(cpus.clone(), n2, 0); 2]);
    for i in 0..16 {
        assert_eq!(common::get(&c, &format!("/f{i}")), pattern(i, 300_000));
    }
    for d in 0..2 {
        for (t_cpus, nice) in threads_of(inst.daemon_pid(d)) {
            assert_eq!((t_cpus, i64::from(nice)), (cpus.clone(), n2), "daemon {d}");
        }
        if let Some(n) = autogroup_nice(inst.daemon_pid(d)) {
            assert_eq!(n, n2, "daemon {d}'s autogroup");
        }
    }

    // Refused clearly, and nothing changes.
    let o = inst.gust(&["tune", "--cpus", "100000"]);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--cpus 100000") && err.contains("kept their limits"), "{err}");
    let o = inst.gust(&["tune", "--nice", "40"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("-20 to 19"), "{}", text(&o));
    assert_eq!(tune(&inst, &[]), vec![(cpus.clone(), n2, 0); 2]);
}

#[test]
fn start_refuses_more_cores_than_it_has() {
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let n = (own_cpus().len() + 1).to_string();
    let o = Command::new(gust_bin())
        .args(["start", "--local", "1", "--timeout", "20", "--cpus", &n, "--rootdir"])
        .arg(tmp.path())
        .env_remove("GUST_HOSTS_FILE")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("--cpus {n}")) && err.contains("started on"), "{err}");
}

/// A daemon limited to 4 MiB/s takes at least 12 MiB / (4 MiB/s), less the pacer's
/// burst, to take in 12 MiB, as long to give it back, through requests (it hands
/// out no local files while limited), and as long to scrub it; lifted, the same
/// read is not paced.
#[test]
fn bandwidth_limit_paces_chunk_transfers() {
    let inst = Instance::start_with(1, &["--max-bandwidth", "4MiB"]);
    let c = inst.client();
    let data = pattern(3, 12 << 20);
    let t = Instant::now();
    common::put(&c, "/big", &data);
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(2900), "12 MiB written in {took:?} at 4 MiB/s");
    let t = Instant::now();
    assert!(common::get(&c, "/big") == data, "read back");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(2900), "12 MiB read in {took:?} at 4 MiB/s");
    let stats = c.daemon_stats(0).unwrap();
    assert!(stats.bytes_read >= 12 << 20, "the daemon served the reads: {} bytes", stats.bytes_read);
    // A scrub's reads count too (its page's answer is held back).
    let t = Instant::now();
    let o = inst.gust(&["scrub", "--rate-mib", "1000"]);
    let took = t.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(took >= Duration::from_millis(2900), "12 MiB scrubbed in {took:?} at 4 MiB/s");
    assert_eq!(tune(&inst, &["--max-bandwidth", "0"]), vec![(own_cpus(), own_nice(), 0)]);
    assert!(common::get(&c, "/big") == data);
}
