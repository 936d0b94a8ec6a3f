//! What a node offers GustFS (`gust probe`; ADA-FS's sysmap and sysquery): its
//! local storage (block-device and memory file systems: mount point, kind, capacity,
//! free space, a bounded quick write-bandwidth measurement), memory, cores and
//! network interfaces; as JSON, and as rows in an SQLite file that a site fills from
//! many nodes and queries with SQL. It also chooses where a daemon's root directory
//! goes when none is given ([`choose_storage`]).
//!
//! Not for: starting anything (gust-launch), shared or network file systems (they
//! are not node-local storage and are left out).

use serde::Serialize;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// File systems that are node-local storage. Anything else (nfs, lustre, gpfs,
/// fuse, overlay of a container, pseudo file systems) is not offered.
const LOCAL_FS: [&str; 8] = ["ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "ramfs"];
/// Mount points under these hold system state, not space for data.
const SYSTEM_PREFIXES: [&str; 6] = ["/proc", "/sys", "/run", "/boot", "/etc", "/mnt/sandboxing"];
/// Bounds of the quick bandwidth measurement.
pub const BENCH_BYTES_MAX: u64 = 1 << 30;
pub const BENCH_TIME_MAX: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Storage {
    pub mount: String,
    pub device: String,
    pub fs_type: String,
    /// "memory" (tmpfs, ramfs), "ssd", "hdd", or "disk" (rotation unknown).
    pub kind: String,
    pub total_bytes: u64,
    /// Free for an unprivileged user (f_bavail).
    pub free_bytes: u64,
    pub writable: bool,
    /// Sequential write with fdatasync, in MiB/s; None if not measured.
    pub write_mib_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Nic {
    pub name: String,
    pub addrs: Vec<String>,
    pub mtu: Option<u32>,
    pub speed_mbps: Option<u64>,
    /// "loopback", "ethernet", "infiniband", or the kernel's ARPHRD number.
    pub kind: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Node {
    pub host: String,
    pub probed_at_unix_s: u64,
    pub cores_online: u32,
    /// Cores this process may run on (cpuset, affinity).
    pub cores_usable: u32,
    pub cpu_model: String,
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    pub storage: Vec<Storage>,
    pub nics: Vec<Nic>,
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Unescapes mountinfo's octal escapes (\040 for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 4]).ok().and_then(|o| u8::from_str_radix(o, 8).ok()) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// (mount point, major:minor, fs type, source) of every mount, from mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<(String, String, String, String)> {
    let mut v = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let l: Vec<&str> = left.split_whitespace().collect();
        let r: Vec<&str> = right.split_whitespace().collect();
        if l.len() < 5 || r.len() < 2 {
            continue;
        }
        v.push((unescape(l[4]), l[2].to_string(), r[0].to_string(), unescape(r[1])));
    }
    v
}

fn kind_of(fs_type: &str, majmin: &str) -> String {
    if fs_type == "tmpfs" || fs_type == "ramfs" {
        return "memory".into();
    }
    // /sys/dev/block/MAJ:MIN is the device or a partition; rotation is the disk's.
    let dev = match fs::canonicalize(format!("/sys/dev/block/{majmin}")) {
        Ok(d) => d,
        Err(_) => return "disk".into(),
    };
    for d in [dev.clone(), dev.parent().map(Path::to_path_buf).unwrap_or_default()] {
        if let Ok(r) = fs::read_to_string(d.join("queue/rotational")) {
            return if r.trim() == "0" { "ssd".into() } else { "hdd".into() };
        }
    }
    "disk".into()
}

fn statvfs(p: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs into a zeroed struct with a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize))
}

fn writable(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: access with a valid C string.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The node's local storage: one entry per file system (the top mount of each mount
/// point, each device once), system mount points left out.
pub fn storage() -> Vec<Storage> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounts = parse_mountinfo(&text);
    let mut out: Vec<Storage> = Vec::new();
    let mut seen_dev = Vec::new();
    // Later lines mount over earlier ones at the same point: walk backwards.
    let mut seen_mount = std::collections::HashSet::new();
    for (mount, majmin, fs_type, source) in mounts.iter().rev() {
        if !seen_mount.insert(mount.clone()) || !LOCAL_FS.contains(&fs_type.as_str()) {
            continue;
        }
        let system = SYSTEM_PREFIXES.iter().any(|p| mount == p || mount.starts_with(&format!("{p}/")));
        let dev_other = mount == "/dev" || (mount.starts_with("/dev/") && mount != "/dev/shm");
        if system || dev_other {
            continue;
        }
        let p = Path::new(mount);
        let Ok(meta) = fs::metadata(p) else { continue };
        if !meta.is_dir() || seen_dev.contains(&meta.dev()) {
            continue;
        }
        seen_dev.push(meta.dev());
        let Some((total, free)) = statvfs(p) else { continue };
        out.push(Storage {
            mount: mount.clone(),
            device: source.clone(),
            fs_type: fs_type.clone(),
            kind: kind_of(fs_type, majmin),
            total_bytes: total,
            free_bytes: free,
            writable: writable(p),
            write_mib_s: None,
        });
    }
    out.sort_by(|a, b| a.mount.cmp(&b.mount));
    out
}

/// Writes up to `bytes` (bounded by BENCH_BYTES_MAX, a tenth of the free space and
/// BENCH_TIME_MAX) in 1 MiB blocks into a temporary file under `dir`, syncs, removes
/// it; MiB/s.
pub fn write_bandwidth(dir: &Path, bytes: u64, free_bytes: u64) -> Option<f64> {
    let bytes = bytes.min(BENCH_BYTES_MAX).min(free_bytes / 10);
    if bytes < 1 << 20 {
        return None;
    }
    let p = dir.join(format!(".gust-probe-{}", std::process::id()));
    let mut f = fs::OpenOptions::new().create_new(true).write(true).open(&p).ok()?;
    let block = vec![0xA5u8; 1 << 20];
    let t = Instant::now();
    let mut written = 0u64;
    let r = (|| {
        while written < bytes && t.elapsed() < BENCH_TIME_MAX {
            f.write_all(&block)?;
            written += block.len() as u64;
        }
        f.sync_data()
    })();
    let secs = t.elapsed().as_secs_f64();
    drop(f);
    let _ = fs::remove_file(&p);
    r.ok()?;
    Some(written as f64 / (1 << 20) as f64 / secs.max(1e-6))
}

fn meminfo() -> (u64, u64) {
    let t = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let get = |k: &str| {
        t.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .unwrap_or(0)
    };
    (get("MemTotal:"), get("MemAvailable:"))
}

/// The node's interfaces: (name, address) (gust-hosts, which clients share).
pub use gust_hosts::interfaces;

fn nics() -> Vec<Nic> {
    let mut names: Vec<String> = fs::read_dir("/sys/class/net")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    let addrs = interfaces();
    names
        .into_iter()
        .map(|n| {
            let sys =
                |f: &str| fs::read_to_string(format!("/sys/class/net/{n}/{f}")).ok().map(|s| s.trim().to_string());
            let kind = match sys("type").as_deref() {
                Some("772") => "loopback".to_string(),
                Some("1") => "ethernet".to_string(),
                Some("32") => "infiniband".to_string(),
                Some(t) => t.to_string(),
                None => "?".to_string(),
            };
            Nic {
                addrs: addrs.iter().filter(|(i, _)| *i == n).map(|(_, a)| a.to_string()).collect(),
                mtu: sys("mtu").and_then(|v| v.parse().ok()),
                // -1 (unknown, virtual links) reads as an error: None.
                speed_mbps: sys("speed").and_then(|v| v.parse().ok()),
                kind,
                name: n,
            }
        })
        .collect()
}

/// Probes this node. `bench_bytes`: how much to write per writable storage for the
/// bandwidth measurement (0: do not measure).
pub fn probe(bench_bytes: u64) -> Node {
    let mut storage = storage();
    if bench_bytes > 0 {
        for s in storage.iter_mut().filter(|s| s.writable) {
            s.write_mib_s = write_bandwidth(Path::new(&s.mount), bench_bytes, s.free_bytes);
        }
    }
    // SAFETY: sysconf and sched_getaffinity on a zeroed set.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
    let usable = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            libc::CPU_COUNT(&set) as u32
        } else {
            online
        }
    };
    let cpu_model = fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let (mt, ma) = meminfo();
    Node {
        host: host_name(),
        probed_at_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        cores_online: online,
        cores_usable: usable,
        cpu_model,
        memory_total_bytes: mt,
        memory_available_bytes: ma,
        storage,
        nics: nics(),
    }
}

fn kind_rank(k: &str) -> u32 {
    match k {
        "memory" => 3,
        "ssd" => 2,
        "disk" => 1,
        _ => 0,
    }
}

/// Node-local scratch directories a root directory may go under, best known first;
/// every other local mount point (say /mnt/nvme0) is a candidate too. The root of a
/// file system is never used itself (only its /tmp or /var/tmp).
pub const SCRATCH_DIRS: [&str; 6] = ["/dev/shm", "/local", "/scratch", "/lscratch", "/tmp", "/var/tmp"];

/// A place for root directories: a writable directory and the storage it is on.
#[derive(Debug, Clone)]
pub struct Choice {
    pub dir: PathBuf,
    pub storage: Storage,
    /// Why this one, for the person at the terminal.
    pub why: String,
}

/// Where root directories go when none is given: among writable node-local scratch
/// directories ([`SCRATCH_DIRS`], other local mount points) whose storage has at
/// least `need_bytes` free (a memory file system also at most half of the node's
/// available memory, so the job keeps the rest), the fastest kind (memory, SSD,
/// unknown, HDD), then the most free space.
pub fn choose_storage(node: &Node, need_bytes: u64) -> Result<Choice, String> {
    let mut dirs: Vec<PathBuf> = SCRATCH_DIRS.iter().map(PathBuf::from).collect();
    dirs.extend(node.storage.iter().filter(|s| s.mount != "/").map(|s| PathBuf::from(&s.mount)));
    let mut cands: Vec<(PathBuf, &Storage)> = Vec::new();
    for d in dirs {
        if !d.is_dir() || !writable(&d) {
            continue;
        }
        if let Some(s) = storage_of(node, &d) {
            if !cands.iter().any(|(_, o)| o.mount == s.mount) {
                cands.push((d, s));
            }
        }
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let fits = |s: &Storage| {
        s.free_bytes >= need_bytes && (s.kind != "memory" || need_bytes <= node.memory_available_bytes / 2)
    };
    let mut ok: Vec<&(PathBuf, &Storage)> = cands.iter().filter(|(_, s)| fits(s)).collect();
    ok.sort_by(|a, b| kind_rank(&b.1.kind).cmp(&kind_rank(&a.1.kind)).then(b.1.free_bytes.cmp(&a.1.free_bytes)));
    let describe = |d: &Path, s: &Storage| {
        format!("{} ({} {}, {:.1} GiB free)", d.display(), s.kind, s.fs_type, gib(s.free_bytes))
    };
    match ok.first() {
        Some((d, s)) => {
            let others: Vec<String> = ok.iter().skip(1).map(|(d, s)| describe(d, s)).collect();
            Ok(Choice {
                dir: d.clone(),
                storage: (*s).clone(),
                why: format!(
                    "{}: the fastest local storage with {:.1} GiB free{}",
                    describe(d, s),
                    gib(need_bytes),
                    if others.is_empty() { String::new() } else { format!(" (also possible: {})", others.join(", ")) }
                ),
            })
        }
        None => Err(format!(
            "no writable local storage with {:.1} GiB free on {} (candidates: {}); pass --rootdir or a smaller --capacity",
            gib(need_bytes),
            node.host,
            if cands.is_empty() { "none".to_string() } else { cands.iter().map(|(d, s)| describe(d, s)).collect::<Vec<_>>().join(", ") }
        )),
    }
}

/// Adds a probe result to an SQLite file (created if missing), replacing earlier
/// rows of the same host: tables `nodes`, `storage`, `nics` (see docs/GUIDE.md).
pub fn store(db: &Path, n: &Node) -> Result<(), String> {
    let err = |e: rusqlite::Error| format!("{}: {e}", db.display());
    let mut c = rusqlite::Connection::open(db).map_err(err)?;
    c.busy_timeout(Duration::from_secs(30)).map_err(err)?;
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS nodes (host TEXT PRIMARY KEY, probed_at_unix_s INTEGER, cores_online INTEGER,
           cores_usable INTEGER, cpu_model TEXT, memory_total_bytes INTEGER, memory_available_bytes INTEGER, json TEXT);
         CREATE TABLE IF NOT EXISTS storage (host TEXT, mount TEXT, device TEXT, fs_type TEXT, kind TEXT,
           total_bytes INTEGER, free_bytes INTEGER, writable INTEGER, write_mib_s REAL, PRIMARY KEY (host, mount));
         CREATE TABLE IF NOT EXISTS nics (host TEXT, name TEXT, kind TEXT, addrs TEXT, mtu INTEGER, speed_mbps INTEGER,
           PRIMARY KEY (host, name));",
    )
    .map_err(err)?;
    let t = c.transaction().map_err(err)?;
    for table in ["nodes", "storage", "nics"] {
        t.execute(&format!("DELETE FROM {table} WHERE host = ?1"), [&n.host]).map_err(err)?;
    }
    let json = serde_json::to_string(n).map_err(|e| e.to_string())?;
    t.execute(
        "INSERT INTO nodes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        rusqlite::params![
            n.host,
            n.probed_at_unix_s as i64,
            n.cores_online,
            n.cores_usable,
            n.cpu_model,
            n.memory_total_bytes as i64,
            n.memory_available_bytes as i64,
            json
        ],
    )
    .map_err(err)?;
    for s in &n.storage {
        t.execute(
            "INSERT INTO storage VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params![
                n.host,
                s.mount,
                s.device,
                s.fs_type,
                s.kind,
                s.total_bytes as i64,
                s.free_bytes as i64,
                s.writable,
                s.write_mib_s
            ],
        )
        .map_err(err)?;
    }
    for x in &n.nics {
        t.execute(
            "INSERT INTO nics VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![n.host, x.name, x.kind, x.addrs.join(" "), x.mtu, x.speed_mbps.map(|v| v as i64)],
        )
        .map_err(err)?;
    }
    t.commit().map_err(err)
}

/// The mount point a path lives on, from this node's storage list.
pub fn storage_of<'a>(node: &'a Node, p: &Path) -> Option<&'a Storage> {
    let p: PathBuf = fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    node.storage.iter().filter(|s| p.starts_with(&s.mount)).max_by_key(|s| s.mount.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let t = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                 27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                 30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=1k\n\
                 31 25 0:28 / /mnt/with\\040space rw shared:1 - xfs /dev/sdb1 rw\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 4);
        assert_eq!(m[1], ("/".into(), "254:0".into(), "ext4".into(), "/dev/vda".into()));
        assert_eq!(m[3].0, "/mnt/with space");
        assert_eq!(m[3].2, "xfs");
    }

    #[test]
    fn probes_this_node_and_chooses() {
        let n = probe(0);
        assert!(n.cores_online >= 1 && n.cores_usable >= 1 && n.memory_total_bytes > 0);
        assert!(n.nics.iter().any(|x| x.kind == "loopback" && x.addrs.iter().any(|a| a == "127.0.0.1")));
        assert!(!n.storage.is_empty(), "no local storage found");
        assert!(n.storage.iter().all(|s| !s.mount.starts_with("/proc") && !s.mount.starts_with("/sys")));
        let c = choose_storage(&n, 1 << 20).unwrap();
        assert!(c.why.starts_with(&c.dir.display().to_string()), "{}", c.why);
        assert!(c.dir.starts_with(&c.storage.mount) && c.dir != Path::new("/"));
        if Path::new("/dev/shm").is_dir() && writable(Path::new("/dev/shm")) {
            assert_eq!(c.storage.kind, "memory", "memory beats disks for 1 MiB: {}", c.why);
        }
        assert!(choose_storage(&n, u64::MAX / 2).unwrap_err().contains("no writable local storage"));
    }

    #[test]
    fn bandwidth_is_bounded_and_cleans_up() {
        let d = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let bw = write_bandwidth(d.path(), 8 << 20, u64::MAX).unwrap();
        assert!(bw > 0.0 && t.elapsed() < Duration::from_secs(5));
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0);
        assert_eq!(write_bandwidth(d.path(), 8 << 20, 1 << 20), None, "must not fill a nearly full disk");
    }

    #[test]
    fn sqlite_rows_replace_a_hosts_earlier_ones() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("nodes.db");
        let mut n = probe(0);
        store(&db, &n).unwrap();
        n.cpu_model = "changed".into();
        store(&db, &n).unwrap();
        let c = rusqlite::Connection::open(&db).unwrap();
        let (count, model): (i64, String) =
            c.query_row("SELECT count(*), max(cpu_model) FROM nodes", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        assert_eq!((count, model.as_str()), (1, "changed"));
        let rows: i64 = c.query_row("SELECT count(*) FROM storage", [], |r| r.get(0)).unwrap();
        assert_eq!(rows as usize, n.storage.len());
    }
}
