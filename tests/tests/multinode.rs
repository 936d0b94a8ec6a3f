//! `gust start --hosts` over ssh to test nodes (own network, host name and /tmp each;
//! tests/cluster/testcluster.sh): no shared file system between them, so the hosts
//! file and secret reach each node only through the launcher. Reads and writes
//! through the instance from here and from a node, `gust stop` leaves nothing on any
//! node; a host that does not answer, an unknown host and a node whose daemon cannot
//! start give a clear error naming the host and leave nothing running anywhere.
//! Needs root, iproute2, util-linux and openssh-server (scripts/setup.sh).

use gust_client::{Client, ClientOptions};
use gust_e2e::cluster::{skip, unavailable, TestCluster};
use std::process::{Command, Output};
use std::time::Duration;

const NODES: u32 = 3;

fn base(tag: &str) -> String {
    format!("/tmp/gust-mn-{}-{tag}", std::process::id())
}

fn gust_start(c: &TestCluster, hosts: &str, base: &str, extra: &[&str]) -> Output {
    Command::new(c.gust())
        .args(["start", "--hosts", hosts, "--ssh", &c.ssh_command(), "--rootdir", base])
        .args(extra)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Nothing of the instance left on node i: no gust process, no instance directory.
fn assert_clean(c: &TestCluster, i: u32, base: &str) {
    let procs = c.processes(i, "/gust");
    assert!(procs.is_empty(), "gnode{i} still runs {procs:?}");
    let ls = c.on_node(i, &format!("ls -a {base} 2>&1 || true"));
    assert!(text(&ls.stdout).contains("No such file"), "gnode{i} still has {base}: {}", text(&ls.stdout));
}

#[test]
fn ssh_start_read_write_status_stop() {
    if let Some(why) = unavailable() {
        return skip("ssh_start_read_write_status_stop", &why);
    }
    let c = TestCluster::up(11, NODES);
    c.start_sshd();
    let base = base("rw");
    let out = gust_start(&c, "gnode[0-2]", &base, &[]);
    assert!(out.status.success(), "gust start: {}", text(&out.stderr));
    let hp = format!("{base}/gust.hosts");
    assert!(text(&out.stdout).contains(&format!("GUST_HOSTS_FILE={hp}")), "{}", text(&out.stdout));
    eprintln!("{}", text(&out.stderr));

    // One daemon per node, on the node's own address and under its own host name.
    let h = gust_hosts::HostsFile::load(std::path::Path::new(&hp)).unwrap();
    assert_eq!(h.daemons.len(), NODES as usize);
    for d in &h.daemons {
        assert_eq!(d.host, TestCluster::host(d.id));
        assert!(d.tcp_addr().starts_with(&format!("{}:", c.addr(d.id))), "{d:?}");
    }
    // Every node holds the same hosts file and a private secret, written by its agent.
    let mine = std::fs::read_to_string(&hp).unwrap();
    for i in 0..NODES {
        let o = c.on_node(i, &format!("cat {hp}; stat -c '%a' {base} {hp}.secret"));
        let t = text(&o.stdout);
        assert!(t.starts_with(&mine), "gnode{i}'s hosts file differs:\n{t}");
        assert!(t.ends_with("700\n600\n"), "gnode{i}: modes {t}");
    }

    // Data through every daemon, from here over TCP.
    let cl = Client::open_instance(std::path::Path::new(&hp), ClientOptions::default()).unwrap();
    let data: Vec<u8> = (0..6u32 << 20).map(|i| (i % 251) as u8).collect();
    // Chunks go where their file id hashes: 12 chunks miss one of 3 daemons in 2%
    // of files. More files until every daemon holds some (8 files miss one with
    // odds of 1 in 10^16).
    for n in 0..8 {
        let fd = cl
            .open(
                if n == 0 { "/big".into() } else { format!("/big{n}") }.as_str(),
                libc::O_CREAT | libc::O_WRONLY,
                0o644,
            )
            .unwrap();
        assert_eq!(cl.write(fd, &data).unwrap(), data.len());
        cl.close(fd).unwrap();
        if (0..NODES).all(|d| cl.daemon_stats(d).unwrap().bytes_written > 0) {
            break;
        }
    }
    for d in 0..NODES {
        assert!(cl.daemon_stats(d).unwrap().bytes_written > 0, "daemon {d} got no data");
    }
    // ... and read back on a node, through that node's own copy of the hosts file.
    let o = c.on_node(1, &format!("GUST_HOSTS_FILE={hp} {} cat /big | md5sum", c.gust().display()));
    let here = Command::new("md5sum").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn();
    let mut here = here.unwrap();
    std::io::Write::write_all(here.stdin.as_mut().unwrap(), &data).unwrap();
    let sum = text(&here.wait_with_output().unwrap().stdout);
    assert_eq!(text(&o.stdout), sum, "gnode1 read other bytes: {}", text(&o.stderr));
    drop(cl);

    let st = Command::new(c.gust()).args(["status", "--hosts-file", &hp]).output().unwrap();
    assert!(st.status.success(), "{}", text(&st.stderr));
    let st = text(&st.stdout);
    for i in 0..NODES {
        assert!(st.contains(&format!("gnode{i}")) && st.contains(&c.addr(i)), "status lacks gnode{i}:\n{st}");
    }
    assert_eq!(st.matches(" up ").count(), NODES as usize, "{st}");

    // A second start on the same directory is refused while this one runs.
    let again = gust_start(&c, "gnode[0-2]", &base, &[]);
    assert!(!again.status.success() && text(&again.stderr).contains("already running"), "{}", text(&again.stderr));

    // Kept (`gust stop --keep`), then brought back on the same hosts with its data.
    let keep = Command::new(c.gust()).args(["stop", "--keep", "--hosts-file", &hp]).output().unwrap();
    assert!(keep.status.success(), "gust stop --keep: {}", text(&keep.stderr));
    let gone = gust_e2e::wait_until(Duration::from_secs(10), || (0..NODES).all(|i| c.processes(i, "/gust").is_empty()));
    assert!(gone, "daemons left after gust stop --keep");
    let wrong = gust_start(&c, "gnode[0-1]", &base, &["--restart"]);
    assert!(
        !wrong.status.success() && text(&wrong.stderr).contains("--hosts must name those hosts"),
        "{}",
        text(&wrong.stderr)
    );
    let back = gust_start(&c, "gnode[0-2]", &base, &["--restart"]);
    assert!(back.status.success(), "gust start --restart: {}", text(&back.stderr));
    assert!(text(&back.stderr).contains("up again with its data"), "{}", text(&back.stderr));
    let cl = Client::open_instance(std::path::Path::new(&hp), ClientOptions::default()).unwrap();
    let fd = cl.open("/big", libc::O_RDONLY, 0).unwrap();
    let mut got = vec![0u8; data.len() + 1];
    assert_eq!(cl.pread(fd, &mut got, 0).unwrap(), data.len());
    assert!(got[..data.len()] == data[..], "/big differs after the restart");
    cl.close(fd).unwrap();
    drop(cl);

    let stop = Command::new(c.gust()).args(["stop", "--hosts-file", &hp]).output().unwrap();
    assert!(stop.status.success(), "gust stop: {}", text(&stop.stderr));
    let gone = gust_e2e::wait_until(Duration::from_secs(10), || (0..NODES).all(|i| c.processes(i, "/gust").is_empty()));
    assert!(gone, "daemons left after gust stop");
    for i in 0..NODES {
        assert_clean(&c, i, &base);
    }
    assert!(!std::path::Path::new(&hp).exists(), "hosts file left here");
}

#[test]
fn ssh_start_failures_name_the_host_and_leave_nothing() {
    if let Some(why) = unavailable() {
        return skip("ssh_start_failures_name_the_host_and_leave_nothing", &why);
    }
    let c = TestCluster::up(12, NODES);
    c.start_sshd();
    let base = base("fail");

    // A host that does not answer at all: its link is down, packets vanish.
    let out = Command::new("ip").args(["link", "set", &c.link(2), "down"]).output().unwrap();
    assert!(out.status.success());
    let t = std::time::Instant::now();
    let out = gust_start(&c, "gnode[0-2]", &base, &["--timeout", "3"]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "start with a silent host succeeded");
    assert!(err.contains("gnode2") && !err.contains("gnode0") && !err.contains("gnode1"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?}", t.elapsed());
    eprintln!("silent host: {err}");
    for i in 0..2 {
        assert_clean(&c, i, &base);
    }
    Command::new("ip").args(["link", "set", &c.link(2), "up"]).output().unwrap();

    // A host name nobody knows.
    let out = gust_start(&c, "gnode[0-1],nosuchnode", &base, &["--timeout", "5"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("nosuchnode"), "{err}");
    eprintln!("unknown host: {err}");

    // A node whose daemon cannot start: its instance directory is taken by a file.
    assert!(c.on_node(1, &format!("touch {base}")).status.success());
    let out = gust_start(&c, "gnode[0-2]", &base, &["--timeout", "5"]);
    let err = text(&out.stderr);
    assert!(!out.status.success() && err.contains("gnode1") && err.contains(&base), "{err}");
    eprintln!("daemon cannot start: {err}");
    c.on_node(1, &format!("rm -f {base}"));

    // A bad host list is refused before anything starts.
    let out = gust_start(&c, "gnode[2-0]", &base, &[]);
    assert!(!out.status.success() && text(&out.stderr).contains("backwards"), "{}", text(&out.stderr));

    for i in 0..NODES {
        assert_clean(&c, i, &base);
    }
    assert!(!std::path::Path::new(&format!("{base}/gust.hosts")).exists());
}

/// A running instance on two nodes grows by a third over ssh (`gust expand
/// --hosts`) and shrinks back (`gust shrink`): every node's copy of the hosts
/// file follows each step (the nodes share no file system), the files read back
/// here and on the nodes after each, the new daemon holds its part, and the
/// node that left keeps nothing.
#[test]
fn ssh_grow_and_shrink_a_running_instance() {
    if let Some(why) = unavailable() {
        return skip("ssh_grow_and_shrink_a_running_instance", &why);
    }
    let c = TestCluster::up(17, NODES);
    c.start_sshd();
    let base = base("grow");
    let out = gust_start(&c, "gnode[0-1]", &base, &[]);
    assert!(out.status.success(), "gust start: {}", text(&out.stderr));
    let hp = format!("{base}/gust.hosts");
    let files: Vec<(String, Vec<u8>)> =
        (0..12u32).map(|i| (format!("/f{i}"), (0..(i + 1) << 18).map(|b| (b * 7 + i) as u8).collect())).collect();
    let cl = Client::open_instance(std::path::Path::new(&hp), ClientOptions::default()).unwrap();
    for (p, d) in &files {
        let fd = cl.open(p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        assert_eq!(cl.write(fd, d).unwrap(), d.len());
        cl.close(fd).unwrap();
    }
    let check = |when: &str, nodes: &[u32]| {
        let cl = Client::open_instance(std::path::Path::new(&hp), ClientOptions::default()).unwrap();
        for (p, d) in &files {
            let fd = cl.open(p, libc::O_RDONLY, 0).unwrap();
            let mut got = vec![0u8; d.len() + 1];
            assert_eq!(cl.pread(fd, &mut got, 0).unwrap(), d.len(), "{when}: {p}");
            assert!(got[..d.len()] == d[..], "{when}: {p} reads back other bytes");
            cl.close(fd).unwrap();
        }
        // Each node reads through its own copy of the hosts file, which must be
        // this one.
        let mine = std::fs::read_to_string(&hp).unwrap();
        let want = md5_of(&files[11].1);
        for &i in nodes {
            let o = c.on_node(i, &format!("cat {hp}"));
            assert_eq!(text(&o.stdout), mine, "{when}: gnode{i}'s hosts file differs");
            let o = c.on_node(i, &format!("GUST_HOSTS_FILE={hp} {} cat /f11 | md5sum", c.gust().display()));
            assert!(text(&o.stdout).starts_with(&want), "{when}: gnode{i} read other bytes: {}", text(&o.stderr));
        }
    };
    let grow = Command::new(c.gust())
        .args(["expand", "--hosts", "gnode2", "--ssh", &c.ssh_command(), "--hosts-file", &hp])
        .output()
        .unwrap();
    assert!(grow.status.success(), "gust expand: {}", text(&grow.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&grow.stdout).unwrap();
    assert_eq!(summary["daemons"], 3, "{summary}");
    assert!(summary["chunks_moved"].as_u64().unwrap() > 0, "{summary}");
    check("after the grow", &[0, 1, 2]);
    let cl = Client::open_instance(std::path::Path::new(&hp), ClientOptions::default()).unwrap();
    assert!(cl.daemon_stats(2).unwrap().bytes_written > 0, "the new daemon got no chunks");
    drop(cl);

    let shrink = Command::new(c.gust()).args(["shrink", "--count", "1", "--hosts-file", &hp]).output().unwrap();
    assert!(shrink.status.success(), "gust shrink: {}", text(&shrink.stderr));
    check("after the shrink", &[0, 1]);
    assert!(
        gust_e2e::wait_until(Duration::from_secs(10), || c.processes(2, "/gust").is_empty()),
        "gnode2 still runs gust after the shrink"
    );
    assert_clean(&c, 2, &base);

    let stop = Command::new(c.gust()).args(["stop", "--hosts-file", &hp]).output().unwrap();
    assert!(stop.status.success(), "gust stop: {}", text(&stop.stderr));
    let gone = gust_e2e::wait_until(Duration::from_secs(10), || (0..NODES).all(|i| c.processes(i, "/gust").is_empty()));
    assert!(gone, "daemons left after gust stop");
    for i in 0..NODES {
        assert_clean(&c, i, &base);
    }
}

/// md5 of `data` by the md5sum program (what the nodes print).
fn md5_of(data: &[u8]) -> String {
    let mut p = Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(p.stdin.as_mut().unwrap(), data).unwrap();
    text(&p.wait_with_output().unwrap().stdout).split_whitespace().next().unwrap_or_default().to_string()
}

/// `--ec 2+1` over ssh on three nodes: every node's hosts file says the code, a
/// file written from here reads back with one node's daemon killed (its cells
/// rebuilt from the other two), and `gust stop` still leaves nothing. A code
/// wider than the nodes is refused before anything starts.
#[test]
fn ssh_start_with_erasure_codes_survives_a_lost_node() {
    if let Some(why) = unavailable() {
        return skip("ssh_start_with_erasure_codes_survives_a_lost_node", &why);
    }
    let c = TestCluster::up(19, NODES);
    c.start_sshd();
    let base = base("ec");
    let wide = gust_start(&c, "gnode[0-2]", &base, &["--ec", "4+2"]);
    assert!(!wide.status.success() && text(&wide.stderr).contains("needs at least 6 nodes"), "{}", text(&wide.stderr));
    assert!((0..NODES).all(|i| c.processes(i, "/gust").is_empty()), "a refused start left processes");

    let out = gust_start(&c, "gnode[0-2]", &base, &["--ec", "2+1"]);
    assert!(out.status.success(), "gust start: {}", text(&out.stderr));
    let hp = format!("{base}/gust.hosts");
    let h = gust_hosts::HostsFile::load(std::path::Path::new(&hp)).unwrap();
    assert_eq!((h.ec, h.replicas, h.chunk_size_bytes), (Some((2, 1)), 2, 512 << 10), "the code's defaults");
    for i in 0..NODES {
        let t = text(&c.on_node(i, &format!("cat {hp}")).stdout);
        assert!(t.lines().any(|l| l == "ec 2+1"), "gnode{i}'s hosts file lacks the code:\n{t}");
    }
    let data: Vec<u8> = (0..5u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let o = ClientOptions { rpc_timeout: Duration::from_secs(3), ..Default::default() };
    let cl = Client::open_instance(std::path::Path::new(&hp), o.clone()).unwrap();
    let fd = cl.open("/data", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    assert_eq!(cl.write(fd, &data).unwrap(), data.len());
    cl.close(fd).unwrap();
    drop(cl);

    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(h.daemons[1].pid as i32, libc::SIGKILL) };
    assert!(gust_e2e::wait_until(Duration::from_secs(10), || c
        .processes(1, "/gust")
        .iter()
        .all(|p| !p.contains(" daemon "))));
    let cl = Client::open_instance(std::path::Path::new(&hp), o).unwrap();
    let fd = cl.open("/data", libc::O_RDONLY, 0).unwrap();
    let mut got = vec![0u8; data.len() + 1];
    assert_eq!(cl.pread(fd, &mut got, 0).unwrap(), data.len());
    assert!(got[..data.len()] == data[..], "/data differs with gnode1's daemon lost");
    cl.close(fd).unwrap();
    drop(cl);

    let stop = Command::new(c.gust()).args(["stop", "--hosts-file", &hp]).output().unwrap();
    assert!(stop.status.success() || text(&stop.stderr).contains("had died"), "gust stop: {}", text(&stop.stderr));
    let gone = gust_e2e::wait_until(Duration::from_secs(10), || (0..NODES).all(|i| c.processes(i, "/gust").is_empty()));
    assert!(gone, "processes left after gust stop");
    for i in 0..NODES {
        assert_clean(&c, i, &base);
    }
}
