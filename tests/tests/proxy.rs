//! The node proxy (docs/DESIGN.md, "The node proxy") on test nodes (own network,
//! host name and /tmp each; tests/cluster/testcluster.sh), one daemon per node
//! started over ssh, client processes on every node through the preload library
//! with `GUST_PROXY=1`:
//!
//! * every daemon holds its own node's P client connections plus k multiplexed
//!   ones from each other daemon, not N·P; with fewer workers than forwarding
//!   processes, forwards wait their turn and all finish;
//! * data written through the proxy reads back directly (TCP from here), and the
//!   other way round;
//! * a malformed forward, and a malformed frame on a multiplexed connection, get
//!   an error each and crash neither daemon;
//! * a killed remote daemon gives EIO within the bound with one copy, and is
//!   skipped with two.
//!
//! Needs root, iproute2, util-linux and openssh-server (scripts/setup.sh).

use gust_client::{Client, ClientOptions, Errno};
use gust_e2e::cluster::{skip, unavailable, TestCluster};
use gust_proto::frame::OP_RESPONSE_BIT;
use gust_proto::{decode, encode, handshake, read_frame, write_frame, Reply, Request, Response};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NODES: u32 = 3;
/// Client processes per node.
const PROCS: u32 = 4;
/// Multiplexed connections per pair of daemons (the proxy's default).
const LINKS: u64 = 2;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

struct Instance {
    c: TestCluster,
    hp: String,
}

impl Instance {
    fn start(k: u32, extra: &[&str]) -> Instance {
        let c = TestCluster::up(k, NODES);
        c.start_sshd();
        let base = format!("/tmp/gust-proxy-{}-{k}", std::process::id());
        let out = Command::new(c.gust())
            .args(["start", "--hosts", "gnode[0-2]", "--ssh", &c.ssh_command(), "--rootdir", &base])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "gust start: {}", text(&out.stderr));
        Instance { c, hp: format!("{base}/gust.hosts") }
    }

    fn client(&self) -> Client {
        let opts = ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: true, ..Default::default() };
        Client::open_instance(Path::new(&self.hp), opts).unwrap()
    }

    /// `sh -c SCRIPT` on node i through the preload library, with the node proxy.
    fn run_cmd(&self, script: &str) -> String {
        self.run_cmd_with(1, script)
    }

    fn run_cmd_with(&self, proxy: u32, script: &str) -> String {
        format!(
            "GUST_HOSTS_FILE={} GUST_PROXY={proxy} GUST_RPC_TIMEOUT_MS=3000 {} run -- sh -c '{script}'",
            self.hp,
            self.c.gust().display()
        )
    }

    fn run(&self, i: u32, script: &str) -> Output {
        self.c.on_node(i, &self.run_cmd(script))
    }

    /// As `run`, without the node proxy (straight to every daemon).
    fn run_direct(&self, i: u32, script: &str) -> Output {
        self.c.on_node(i, &self.run_cmd_with(0, script))
    }

    /// `run` in the background, its standard input a pipe the test holds.
    fn spawn(&self, i: u32, script: &str) -> Child {
        Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster/testcluster.sh"))
            .arg("exec")
            .arg(&self.c.dir)
            .arg(i.to_string())
            .args(["sh", "-c", &self.run_cmd(script)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn mountdir(&self) -> String {
        gust_hosts::HostsFile::load(Path::new(&self.hp)).unwrap().mountdir
    }

    fn pid(&self, d: u32) -> i32 {
        gust_hosts::HostsFile::load(Path::new(&self.hp)).unwrap().daemons[d as usize].pid as i32
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = Command::new(self.c.gust()).args(["stop", "--hosts-file", &self.hp]).output();
    }
}

/// Files named f0..f{n} whose records lie on every daemon.
fn make_files(c: &Client, n: u32) -> Vec<String> {
    let names: Vec<String> = (0..n).map(|i| format!("/f{i}")).collect();
    for p in &names {
        let fd = c.open(p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
        c.write(fd, p.as_bytes()).unwrap();
        c.close(fd).unwrap();
    }
    for d in 0..NODES {
        assert!(names.iter().any(|p| c.record_holders(p)[0] == d), "no record on daemon {d}");
    }
    names
}

#[test]
fn proxy_connections_data_and_bad_frames() {
    if let Some(why) = unavailable() {
        return skip("proxy_connections_data_and_bad_frames", &why);
    }
    // Three workers per daemon: one may wait for a forward at a time, so the 4
    // processes per node queue for it (parked connections), and every one of them
    // must still finish.
    let inst = Instance::start(31, &["--threads", "3"]);
    let c = inst.client();
    make_files(&c, 30);
    let m = inst.mountdir();

    // P processes on every node stat every file (each of them reaches every
    // daemon), say "ready", then hold their connections (reading their standard
    // input, a shell builtin: no new process, no new connection) while the counts
    // are read, until their input closes.
    // This test's own client holds connections to every daemon: counted before.
    let open = || (0..NODES).map(|d| c.daemon_stats(d).unwrap().connections_open).collect::<Vec<u64>>();
    let before = open();
    let script = format!("for i in $(seq 0 29); do [ -e {m}/f$i ] || echo missing $i; done; echo ready; read x; true");
    let mut procs: Vec<Child> =
        (0..NODES).flat_map(|i| (0..PROCS).map(move |_| i)).map(|i| inst.spawn(i, &script)).collect();
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let readers: Vec<_> = procs
        .iter_mut()
        .map(|p| {
            let (out, ready) = (p.stdout.take().unwrap(), ready.clone());
            std::thread::spawn(move || {
                use std::io::BufRead;
                let mut text = String::new();
                for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    if line == "ready" {
                        ready.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    text += &line;
                    text.push('\n');
                }
                text
            })
        })
        .collect();
    let all_ready = gust_e2e::wait_until(Duration::from_secs(120), || {
        ready.load(std::sync::atomic::Ordering::Relaxed) == NODES * PROCS
    });
    let counts: Vec<u64> = open().iter().zip(&before).map(|(now, b)| now - b).collect();
    for p in procs.iter_mut() {
        drop(p.stdin.take());
    }
    for (p, r) in procs.iter_mut().zip(readers) {
        let stdout = r.join().unwrap();
        let out = p.wait_with_output_ref();
        assert!(out.0.success() && stdout == "ready\n", "client process: {} {} {}", out.0, stdout, out.2);
    }
    assert!(all_ready, "not every client process got ready in 120 s");
    // Each daemon: its node's P processes and k links from each other daemon.
    // Without the proxy it would be N·P.
    let want = PROCS as u64 + (NODES as u64 - 1) * LINKS;
    let direct = (NODES * PROCS) as u64;
    for (d, n) in counts.iter().enumerate() {
        assert_eq!(*n, want, "daemon {d}: {n} connections, the proxy's design says {want} (direct: {direct})");
    }

    // Written through the proxy on node 1, read back directly from here.
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(inst.c.dir.join("src.bin"), &data).unwrap();
    let src = inst.c.dir.join("src.bin");
    let o = inst.run(1, &format!("cat {} > {m}/via-proxy", src.display()));
    assert!(o.status.success(), "write through the proxy: {}", text(&o.stderr));
    let fd = c.open("/via-proxy", libc::O_RDONLY, 0).unwrap();
    let mut back = vec![0u8; data.len() + 1];
    let n = c.pread(fd, &mut back, 0).unwrap();
    c.close(fd).unwrap();
    assert!(n == data.len() && back[..n] == data[..], "read back directly: {n} bytes, differs");
    // Written directly, read through the proxy on node 2.
    let fd = c.open("/direct", libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
    let rev: Vec<u8> = data.iter().rev().copied().collect();
    c.write(fd, &rev).unwrap();
    c.close(fd).unwrap();
    let dst = inst.c.dir.join("dst.bin");
    let o = inst.run(2, &format!("cat {m}/direct > {}", dst.display()));
    assert!(o.status.success(), "read through the proxy: {}", text(&o.stderr));
    assert!(std::fs::read(&dst).unwrap() == rev, "read through the proxy differs");
    for d in 0..NODES {
        let st = c.daemon_stats(d).unwrap();
        let fwd = st.ops.iter().find(|(n, _)| n == "forward").map_or(0, |x| x.1);
        assert!(fwd > 0, "daemon {d} forwarded nothing");
    }

    // Malformed forwards to daemon 0, malformed frames on a multiplexed connection
    // to daemon 1: errors each, both daemons keep serving.
    let h = gust_hosts::HostsFile::load(Path::new(&inst.hp)).unwrap();
    let secret = gust_hosts::load_secret(Path::new(&inst.hp)).unwrap();
    let connect = |d: usize| {
        let mut s = std::net::TcpStream::connect(h.daemons[d].tcp_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        handshake::client(&mut s, &secret).unwrap();
        s
    };
    let ask = |s: &mut std::net::TcpStream, op: u16, id: u64, body: &[u8]| -> Reply {
        write_frame(s, op, id, body, &[]).unwrap();
        let mut bulk = Vec::new();
        let f = read_frame(s, &mut bulk).unwrap();
        assert_eq!((f.header.op, f.header.request_id), (op | OP_RESPONSE_BIT, id));
        decode(&f.body).unwrap()
    };
    let mut s0 = connect(0);
    let fwd = |target, op, body: Vec<u8>| encode(&Request::Forward { target, op, timeout_ms: 2000, body });
    let garbage = vec![3, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    assert_eq!(ask(&mut s0, 49, 1, &fwd(1, 3, garbage.clone())), Err(libc::EPROTO), "inner body that does not decode");
    assert_eq!(ask(&mut s0, 49, 2, &fwd(1, 999, vec![0; 4])), Err(libc::EPROTO), "unknown inner op");
    let nested = encode(&Request::Forward { target: 2, op: 1, timeout_ms: 1, body: encode(&Request::Ping) });
    assert_eq!(ask(&mut s0, 49, 3, &fwd(1, 49, nested)), Err(libc::EPROTO), "a forward in a forward");
    assert_eq!(ask(&mut s0, 49, 4, &fwd(77, 1, encode(&Request::Ping))), Err(libc::EHOSTUNREACH), "unknown daemon");
    assert_eq!(ask(&mut s0, 49, 5, &fwd(0, 1, encode(&Request::Ping))), Err(libc::EINVAL), "itself");
    assert_eq!(ask(&mut s0, 49, 6, &fwd(1, 1, encode(&Request::Ping))), Ok(Response::Ok), "a good forward after");
    let mut s1 = connect(1);
    assert_eq!(ask(&mut s1, 50, 1, &encode(&Request::Multiplex)), Ok(Response::Ok));
    assert_eq!(ask(&mut s1, 3, 2, &garbage), Err(libc::EPROTO), "bad body on a multiplexed connection");
    assert_eq!(ask(&mut s1, 999, 3, &[0; 4]), Err(libc::ENOSYS), "unknown op on a multiplexed connection");
    assert_eq!(ask(&mut s1, 1, 4, &encode(&Request::Ping)), Ok(Response::Ok), "the connection still serves");
    for d in 0..NODES {
        assert!(c.daemon_stats(d).is_ok(), "daemon {d} stopped answering");
    }
    assert!(c.stat("/f1").is_ok());
}

/// One copy: a killed remote daemon gives EIO within the connection bound through
/// the proxy; two copies: the killed daemon is skipped and every file reads.
#[test]
fn proxy_and_a_killed_remote_daemon() {
    if let Some(why) = unavailable() {
        return skip("proxy_and_a_killed_remote_daemon", &why);
    }
    for replicas in [1u32, 2] {
        let r = replicas.to_string();
        let inst = Instance::start(32 + replicas, &["--replicas", &r]);
        let c = inst.client();
        let names = make_files(&c, 30);
        let m = inst.mountdir();
        unsafe { libc::kill(inst.pid(2), libc::SIGKILL) };
        let addr2 = gust_hosts::HostsFile::load(Path::new(&inst.hp)).unwrap().daemons[2].tcp_addr();
        assert!(
            gust_e2e::wait_until(Duration::from_secs(10), || gust_e2e::refuses_connections(&addr2)),
            "daemon 2 still accepts connections after kill -9"
        );
        let on2: Vec<&String> = names.iter().filter(|p| c.record_holders(p)[0] == 2).collect();
        let others: Vec<&String> = names.iter().filter(|p| c.record_holders(p)[0] != 2).collect();
        for p in on2.iter().take(3).chain(others.iter().take(3)) {
            let t = Instant::now();
            let o = inst.run(0, &format!("cat {m}{p}"));
            let took = t.elapsed();
            // A refused connection is immediate; allow for process start-up on a
            // busy machine, far below the 3 s RPC timeout the clients use.
            assert!(took < Duration::from_secs(3), "cat {p} took {took:?}");
            // Through the proxy as the same program straight to the daemons: EIO
            // where the dead daemon is needed (with one copy: the file's record, or
            // its data's chunk, which lies where its file id hashes), else the data.
            let direct = inst.run_direct(0, &format!("cat {m}{p}"));
            let held_by_2 = c.record_holders(p)[0] == 2;
            if replicas == 1 && held_by_2 {
                assert!(!direct.status.success(), "direct cat of {p} with its daemon dead succeeded");
                assert_eq!(read_direct(&c, p), Err(Errno(libc::EIO)), "read of {p} with its daemon dead");
            }
            if replicas == 2 {
                assert!(direct.status.success() && direct.stdout == p.as_bytes(), "direct cat of {p}, replicas 2");
            }
            if direct.status.success() {
                assert!(o.status.success(), "cat {p} (replicas {replicas}): {}", text(&o.stderr));
                assert_eq!(o.stdout, direct.stdout, "cat {p}");
            } else {
                assert!(
                    text(&direct.stderr).contains("Input/output error"),
                    "direct cat {p}: {}",
                    text(&direct.stderr)
                );
                assert!(!o.status.success(), "cat {p} through the proxy succeeded where the direct one failed");
                assert!(text(&o.stderr).contains("Input/output error"), "cat {p}: {}", text(&o.stderr));
            }
        }
    }
}

fn read_direct(c: &Client, p: &str) -> Result<Vec<u8>, Errno> {
    let fd = c.open(p, libc::O_RDONLY, 0)?;
    let mut b = vec![0u8; 4096];
    let r = c.pread(fd, &mut b, 0);
    let _ = c.close(fd);
    b.truncate(r?);
    Ok(b)
}

trait WaitRef {
    fn wait_with_output_ref(&mut self) -> (std::process::ExitStatus, String, String);
}

impl WaitRef for Child {
    fn wait_with_output_ref(&mut self) -> (std::process::ExitStatus, String, String) {
        use std::io::Read;
        let (mut o, mut e) = (String::new(), String::new());
        if let Some(s) = self.stdout.as_mut() {
            let _ = s.read_to_string(&mut o);
        }
        if let Some(s) = self.stderr.as_mut() {
            let _ = s.read_to_string(&mut e);
        }
        (self.wait().unwrap(), o, e)
    }
}
