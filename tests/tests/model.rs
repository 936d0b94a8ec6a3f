//! Randomized model test: seeded sequences of operations, each checked against an
//! in-memory model of the file system right after it runs.
//!
//! Every thread (and every worker process) works in its own subtree, so its results
//! do not depend on the others and the model is exact. A failure prints the seed;
//! `GUST_TEST_SEED=<seed> cargo test --release -p gust-e2e --test model` replays it.

mod common;

use gust_client::{Client, Kind};
use gust_e2e::Instance;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const OPTIONS: &[&str] = &["--chunk-size", "4k", "--check-parent"];
const THREADS: u64 = 4;
const OPS_PER_THREAD: usize = 500;
const WORKERS: u64 = 3;
const OPS_PER_WORKER: usize = 400;
/// A small name space, so operations collide on the same paths often.
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
const DEPTH_MAX: usize = 3;
/// Offsets and lengths span several 4 KiB chunks (and so several daemons).
const OFFSET_MAX: u64 = 24_000;
const LEN_MAX: usize = 9_000;

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Write(String, u64, usize, u64),
    Append(String, usize, u64),
    Read(String, u64, usize),
    Truncate(String, u64),
    Unlink(String),
    Mkdir(String),
    Rmdir(String),
    Rename(String, String),
    Stat(String),
    ReadDir(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Out {
    Unit,
    Len(usize),
    Data(Vec<u8>),
    Stat(Kind, u64),
    Names(Vec<String>),
}

fn short(r: &Result<Out, i32>) -> String {
    match r {
        Ok(Out::Data(d)) => {
            format!("Ok(Data: {} bytes, xxh {:x})", d.len(), d.iter().fold(0u64, |h, &b| h.wrapping_mul(31) ^ b as u64))
        }
        Ok(o) => format!("Ok({o:?})"),
        Err(e) => format!("Err({})", common::errname(*e)),
    }
}

fn data_for(seed: u64, len: usize) -> Vec<u8> {
    common::pattern(seed, len)
}

fn parent_of(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Dir,
    File(Vec<u8>),
}

/// The expected state of one subtree, with the rules GustFS documents: paths are
/// looked up whole (a missing path is ENOENT, whatever its ancestors are), and with
/// --check-parent, creating needs an existing parent directory.
struct Model {
    root: String,
    nodes: BTreeMap<String, Node>,
}

impl Model {
    fn new(root: &str) -> Model {
        let mut nodes = BTreeMap::new();
        nodes.insert(root.to_string(), Node::Dir);
        Model { root: root.to_string(), nodes }
    }

    fn check_parent(&self, p: &str) -> Result<(), i32> {
        let parent = parent_of(p);
        if parent == "/" {
            return Ok(());
        }
        match self.nodes.get(parent) {
            Some(Node::Dir) => Ok(()),
            Some(Node::File(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn children(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k[prefix.len()..].contains('/'))
            .map(|(k, _)| k[prefix.len()..].to_string())
            .collect()
    }

    fn file_mut(&mut self, p: &str) -> Result<&mut Vec<u8>, i32> {
        match self.nodes.get_mut(p) {
            None => Err(libc::ENOENT),
            Some(Node::Dir) => Err(libc::EISDIR),
            Some(Node::File(d)) => Ok(d),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<Out, i32> {
        match op {
            Op::Create(p) => {
                self.check_parent(p)?;
                if self.nodes.contains_key(p) {
                    return Err(libc::EEXIST);
                }
                self.nodes.insert(p.clone(), Node::File(Vec::new()));
                Ok(Out::Unit)
            }
            Op::Write(p, off, len, seed) => {
                let d = self.file_mut(p)?;
                let end = *off as usize + len;
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[*off as usize..end].copy_from_slice(&data_for(*seed, *len));
                Ok(Out::Len(*len))
            }
            Op::Append(p, len, seed) => {
                let d = self.file_mut(p)?;
                d.extend_from_slice(&data_for(*seed, *len));
                Ok(Out::Len(*len))
            }
            Op::Read(p, off, len) => {
                let d = self.file_mut(p)?;
                let off = (*off as usize).min(d.len());
                let end = (off + len).min(d.len());
                Ok(Out::Data(d[off..end].to_vec()))
            }
            Op::Truncate(p, size) => {
                self.file_mut(p)?.resize(*size as usize, 0);
                Ok(Out::Unit)
            }
            Op::Unlink(p) => match self.nodes.get(p) {
                None => Err(libc::ENOENT),
                Some(Node::Dir) => Err(libc::EISDIR),
                Some(Node::File(_)) => {
                    self.nodes.remove(p);
                    Ok(Out::Unit)
                }
            },
            Op::Mkdir(p) => {
                self.check_parent(p)?;
                if self.nodes.contains_key(p) {
                    return Err(libc::EEXIST);
                }
                self.nodes.insert(p.clone(), Node::Dir);
                Ok(Out::Unit)
            }
            Op::Rmdir(p) => match self.nodes.get(p) {
                None => Err(libc::ENOENT),
                Some(Node::File(_)) => Err(libc::ENOTDIR),
                Some(Node::Dir) if !self.children(p).is_empty() => Err(libc::ENOTEMPTY),
                Some(Node::Dir) => {
                    self.nodes.remove(p);
                    Ok(Out::Unit)
                }
            },
            Op::Rename(a, b) => {
                let src = self.nodes.get(a).cloned().ok_or(libc::ENOENT)?;
                if a == b {
                    return Ok(Out::Unit);
                }
                match src {
                    Node::Dir => {
                        if b.starts_with(&format!("{a}/")) {
                            return Err(libc::EINVAL);
                        }
                        match self.nodes.get(b) {
                            Some(Node::File(_)) => return Err(libc::ENOTDIR),
                            Some(Node::Dir) if !self.children(b).is_empty() => return Err(libc::ENOTEMPTY),
                            Some(Node::Dir) => {}
                            None => self.check_parent(b)?,
                        }
                        let prefix = format!("{a}/");
                        let moved: Vec<(String, Node)> = self
                            .nodes
                            .iter()
                            .filter(|(k, _)| *k == a || k.starts_with(&prefix))
                            .map(|(k, v)| (format!("{b}{}", &k[a.len()..]), v.clone()))
                            .collect();
                        self.nodes.retain(|k, _| !(k == a || k.starts_with(&prefix)));
                        self.nodes.extend(moved);
                    }
                    Node::File(_) => {
                        self.check_parent(b)?;
                        if let Some(Node::Dir) = self.nodes.get(b) {
                            return Err(libc::EISDIR);
                        }
                        self.nodes.remove(a);
                        self.nodes.insert(b.clone(), src);
                    }
                }
                Ok(Out::Unit)
            }
            Op::Stat(p) => match self.nodes.get(p) {
                None => Err(libc::ENOENT),
                Some(Node::Dir) => Ok(Out::Stat(Kind::Dir, 0)),
                Some(Node::File(d)) => Ok(Out::Stat(Kind::File, d.len() as u64)),
            },
            Op::ReadDir(p) => match self.nodes.get(p) {
                None => Err(libc::ENOENT),
                Some(Node::File(_)) => Err(libc::ENOTDIR),
                Some(Node::Dir) => Ok(Out::Names(self.children(p))),
            },
        }
    }

    /// Mostly a path of the wanted kind (`Some(true)`: file, `Some(false)`:
    /// directory, `None`: a new name), sometimes any path, so error cases stay common
    /// but most operations do something.
    fn pick(&self, rng: &mut StdRng, want_file: Option<bool>) -> String {
        if rng.gen_bool(0.8) {
            let existing: Vec<&String> = self
                .nodes
                .iter()
                .filter(|(k, v)| *k != &self.root && Some(matches!(v, Node::File(_))) == want_file)
                .map(|(k, _)| k)
                .collect();
            if !existing.is_empty() {
                return existing[rng.gen_range(0..existing.len())].clone();
            }
            if want_file.is_none() || rng.gen_bool(0.5) {
                // A new name in an existing directory, bounded in depth.
                let dirs: Vec<&String> = self
                    .nodes
                    .iter()
                    .filter(|(k, v)| **v == Node::Dir && k[self.root.len()..].matches('/').count() < DEPTH_MAX)
                    .map(|(k, _)| k)
                    .collect();
                let d = dirs[rng.gen_range(0..dirs.len())];
                return format!("{d}/{}", NAMES[rng.gen_range(0..NAMES.len())]);
            }
        }
        if rng.gen_bool(0.5) && self.nodes.len() > 1 {
            return self.nodes.keys().nth(rng.gen_range(1..self.nodes.len())).unwrap().clone();
        }
        let mut p = self.root.clone();
        for _ in 0..rng.gen_range(1..=DEPTH_MAX) {
            p.push('/');
            p.push_str(NAMES[rng.gen_range(0..NAMES.len())]);
        }
        p
    }

    fn random_op(&self, rng: &mut StdRng) -> Op {
        let (file, dir, new) = (Some(true), Some(false), None);
        match rng.gen_range(0..100) {
            0..=11 => Op::Create(self.pick(rng, new)),
            12..=25 => {
                Op::Write(self.pick(rng, file), rng.gen_range(0..OFFSET_MAX), rng.gen_range(1..LEN_MAX), rng.gen())
            }
            26..=30 => Op::Append(self.pick(rng, file), rng.gen_range(1..LEN_MAX), rng.gen()),
            31..=42 => {
                Op::Read(self.pick(rng, file), rng.gen_range(0..OFFSET_MAX + 4_000), rng.gen_range(1..LEN_MAX * 2))
            }
            43..=49 => Op::Truncate(self.pick(rng, file), rng.gen_range(0..OFFSET_MAX + LEN_MAX as u64)),
            50..=55 => Op::Unlink(self.pick(rng, file)),
            56..=65 => Op::Mkdir(self.pick(rng, new)),
            66..=70 => Op::Rmdir(self.pick(rng, dir)),
            71..=80 => {
                let src = if rng.gen_bool(0.5) { self.pick(rng, dir) } else { self.pick(rng, file) };
                let dst = match rng.gen_range(0..3) {
                    0 => self.pick(rng, file),
                    1 => self.pick(rng, dir),
                    _ => self.pick(rng, new),
                };
                Op::Rename(src, dst)
            }
            81..=90 => {
                let kind = if rng.gen() { file } else { dir };
                Op::Stat(if rng.gen_bool(0.1) { self.root.clone() } else { self.pick(rng, kind) })
            }
            _ => Op::ReadDir(if rng.gen_bool(0.3) { self.root.clone() } else { self.pick(rng, dir) }),
        }
    }
}

fn errno<T>(r: gust_client::Result<T>) -> Result<T, i32> {
    r.map_err(|e| e.0)
}

/// Runs `op` against the real file system.
fn exec(c: &Client, op: &Op) -> Result<Out, i32> {
    use libc::{O_APPEND, O_CREAT, O_EXCL, O_RDONLY, O_WRONLY};
    let with_fd = |p: &str, flags: i32, f: &dyn Fn(i32) -> gust_client::Result<Out>| -> Result<Out, i32> {
        let fd = errno(c.open(p, flags, 0o644))?;
        let r = errno(f(fd));
        errno(c.close(fd))?;
        r
    };
    match op {
        Op::Create(p) => with_fd(p, O_CREAT | O_EXCL | O_WRONLY, &|_| Ok(Out::Unit)),
        Op::Write(p, off, len, seed) => {
            with_fd(p, O_WRONLY, &|fd| c.pwrite(fd, &data_for(*seed, *len), *off).map(Out::Len))
        }
        Op::Append(p, len, seed) => {
            with_fd(p, O_WRONLY | O_APPEND, &|fd| c.write(fd, &data_for(*seed, *len)).map(Out::Len))
        }
        Op::Read(p, off, len) => with_fd(p, O_RDONLY, &|fd| {
            let mut b = vec![0u8; *len];
            let n = c.pread(fd, &mut b, *off)?;
            b.truncate(n);
            Ok(Out::Data(b))
        }),
        Op::Truncate(p, size) => errno(c.truncate(p, *size)).map(|_| Out::Unit),
        Op::Unlink(p) => errno(c.unlink(p)).map(|_| Out::Unit),
        Op::Mkdir(p) => errno(c.mkdir(p, 0o755)).map(|_| Out::Unit),
        Op::Rmdir(p) => errno(c.rmdir(p)).map(|_| Out::Unit),
        Op::Rename(a, b) => errno(c.rename(a, b)).map(|_| Out::Unit),
        Op::Stat(p) => errno(c.stat(p)).map(|s| Out::Stat(s.kind, if s.kind == Kind::File { s.size } else { 0 })),
        Op::ReadDir(p) => errno(c.read_dir(p)).map(|v| {
            let mut n: Vec<String> = v.into_iter().map(|e| e.name).collect();
            n.sort();
            Out::Names(n)
        }),
    }
}

/// Compares the whole subtree with the model: every path's kind and content, and
/// every directory's listing.
fn check_tree(c: &Client, m: &Model) -> Result<(), String> {
    for (p, node) in &m.nodes {
        match node {
            Node::Dir => {
                let want = Ok(Out::Names(m.children(p)));
                let got = exec(c, &Op::ReadDir(p.clone()));
                if got != want {
                    return Err(format!("tree check: readdir {p}: got {got:?}, model {want:?}"));
                }
            }
            Node::File(d) => {
                let got = exec(c, &Op::Read(p.clone(), 0, d.len() + 10));
                if got != Ok(Out::Data(d.clone())) {
                    return Err(format!("tree check: content of {p}: got {}, model {} bytes", short(&got), d.len()));
                }
            }
        }
    }
    Ok(())
}

/// Runs `ops` random operations in `root` and checks each against the model.
fn run_model(c: &Client, root: &str, seed: u64, ops: usize) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut m = Model::new(root);
    let mut trail: Vec<String> = Vec::new();
    let mut succeeded = 0usize;
    for step in 0..ops {
        let op = m.random_op(&mut rng);
        let got = exec(c, &op);
        let want = m.apply(&op);
        succeeded += want.is_ok() as usize;
        trail.push(format!("#{step} {op:?} -> {}", short(&want)));
        if trail.len() > 12 {
            trail.remove(0);
        }
        if got != want {
            return Err(format!(
                "{root}, step {step}: {op:?}\n  got:   {}\n  model: {}\n  last operations:\n    {}",
                short(&got),
                short(&want),
                trail.join("\n    ")
            ));
        }
        if step % 100 == 99 {
            check_tree(c, &m).map_err(|e| format!("{root}, after step {step}: {e}"))?;
        }
    }
    check_tree(c, &m).map_err(|e| format!("{root}, at the end: {e}"))?;
    eprintln!("{root}: {ops} operations, {succeeded} succeeded, {} paths at the end", m.nodes.len());
    // A sequence where almost everything fails (ENOENT) would test little.
    if succeeded * 3 < ops {
        return Err(format!("{root}: only {succeeded} of {ops} operations succeeded; the generator is degenerate"));
    }
    Ok(())
}

fn base_seed() -> u64 {
    match std::env::var("GUST_TEST_SEED") {
        Ok(s) => s.trim().parse().expect("GUST_TEST_SEED must be an integer"),
        Err(_) => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
                % 1_000_000_007
        }
    }
}

#[test]
fn model_from_several_threads() {
    let seed = base_seed();
    eprintln!("model seed {seed} (GUST_TEST_SEED={seed} to replay)");
    let inst = Instance::start_with(3, OPTIONS);
    let c = Arc::new(inst.client());
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = c.clone();
            let root = format!("/t{t}");
            c.mkdir(&root, 0o755).unwrap();
            std::thread::spawn(move || run_model(&c, &root, seed.wrapping_add(t), OPS_PER_THREAD))
        })
        .collect();
    let failures: Vec<String> = hs.into_iter().filter_map(|h| h.join().unwrap().err()).collect();
    assert!(failures.is_empty(), "model mismatch with GUST_TEST_SEED={seed}:\n{}", failures.join("\n\n"));
    // The subtrees did not leak into each other.
    assert_eq!(common::names(&c, "/"), (0..THREADS).map(|t| format!("t{t}")).collect::<Vec<_>>());
}

/// A worker process of `model_from_several_processes`; does nothing unless that
/// test started this binary with GUST_MODEL_WORKER set.
#[test]
fn model_worker() {
    let Ok(root) = std::env::var("GUST_MODEL_WORKER") else {
        return;
    };
    let hosts = std::env::var("GUST_MODEL_HOSTS").expect("GUST_MODEL_HOSTS");
    let seed: u64 = std::env::var("GUST_MODEL_SEED").expect("GUST_MODEL_SEED").parse().unwrap();
    let c = Client::open_instance(std::path::Path::new(&hosts), Default::default()).expect("client");
    if let Err(e) = run_model(&c, &root, seed, OPS_PER_WORKER) {
        panic!(
            "model mismatch in worker process (GUST_TEST_SEED={}):\n{e}",
            std::env::var("GUST_MODEL_BASE_SEED").unwrap_or_default()
        );
    }
}

#[test]
fn model_from_several_processes() {
    let seed = base_seed();
    eprintln!("model seed {seed} (GUST_TEST_SEED={seed} to replay)");
    let inst = Instance::start_with(3, OPTIONS);
    let c = inst.client();
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for w in 0..WORKERS {
        let root = format!("/p{w}");
        c.mkdir(&root, 0o755).unwrap();
        let child = Command::new(&exe)
            .args(["--exact", "model_worker", "--nocapture", "--test-threads", "1"])
            .env("GUST_MODEL_WORKER", &root)
            .env("GUST_MODEL_HOSTS", &inst.hosts)
            .env("GUST_MODEL_SEED", (seed.wrapping_add(1000 + w)).to_string())
            .env("GUST_MODEL_BASE_SEED", seed.to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn worker");
        children.push((w, child));
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut failures = Vec::new();
    for (w, mut child) in children {
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        if !out.status.success() {
            failures.push(format!(
                "worker {w} ({}):\n{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        } else {
            // The worker must really have run its sequence, not returned at once.
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("1 passed"), "worker {w} did not run model_worker:\n{text}");
        }
    }
    assert!(failures.is_empty(), "GUST_TEST_SEED={seed}:\n{}", failures.join("\n"));
    // Each worker left a non-trivial subtree behind, visible to this process.
    assert_eq!(common::names(&c, "/"), (0..WORKERS).map(|w| format!("p{w}")).collect::<Vec<_>>());
}

/// The model itself must catch a wrong answer: feed it a run where the file system
/// and the model disagree and make sure the checker reports it.
#[test]
fn model_detects_a_divergence() {
    let inst = Instance::start_with(1, OPTIONS);
    let c = inst.client();
    c.mkdir("/x", 0o755).unwrap();
    let mut m = Model::new("/x");
    m.apply(&Op::Create("/x/a".into())).unwrap();
    // The real file system has no /x/a: the tree check must say so.
    assert!(check_tree(&c, &m).is_err());
    exec(&c, &Op::Create("/x/a".into())).unwrap();
    check_tree(&c, &m).unwrap();
    exec(&c, &Op::Write("/x/a".into(), 5, 10, 1)).unwrap();
    assert!(check_tree(&c, &m).is_err(), "content difference not detected");
}
