//! The hosts file and the instance secret.
//!
//! The hosts file is how a GustFS instance is found: every client reads it once and
//! computes all placement from it; every daemon registers itself in it at start.
//!
//! ```text
//! # GustFS hosts file, format 2
//! instance 6f1c...            128-bit instance id, hex
//! chunk_size 524288           bytes, fixed for the instance's life
//! mountdir /tmp/gust          the path prefix front ends serve
//! check_parent 0              1: create/mkdir verify the parent directory exists
//! cache_of /lustre/p/data     (cache mode only) the directory this instance mirrors
//! cache_of_store s3://b/p     (cache mode of an object store only) the prefix it mirrors
//! daemon 0 node17 4242 /tmp/gust-root/d0 tcp:127.0.0.1:40111 unix:/tmp/gust-root/d0/daemon.sock
//! placement capacity          only when not the default (wide): see below
//! replicas 2                  only when more than 1: copies of every record and chunk
//! ec 4+2                      only for erasure-coded instances: chunks in stripes of
//!                             K data and M parity cells (records: `replicas` M+1)
//! daemon 0 node17 4242 /tmp/gust-root/d0 tcp:127.0.0.1:40111 unix:/tmp/gust-root/d0/daemon.sock capacity:1073741824
//! ```
//!
//! `placement capacity` weights chunks by the daemons' capacities (gust-placement's
//! `CapacityWeighted`); a reader that does not know the key refuses the file rather
//! than place chunks where nobody else looks. Each daemon line then ends with
//! `capacity:BYTES`, the capacity the daemon registered with (declared, or its free
//! space at its first start); it is kept across restarts, since placement depends on
//! it. Older readers skip it as an endpoint kind they do not know.
//!
//! A daemon line is: id, host name, process id, root directory, then the endpoints
//! it listens on, each as KIND:ADDRESS (gust-transport's `Endpoint`: `tcp:`, `unix:`,
//! `shm:`; transports added later add kinds, and a reader skips kinds it does not
//! know). The first network endpoint is how other nodes reach the daemon; node-local
//! ones (`shm:` first, `unix:` as its fallback) serve clients on the daemon's own host.
//! Readers from before `shm:` skip it and use `unix:`. Paths with spaces are not
//! supported. Format 1 (id, host, TCP address, socket path or "-", pid, root
//! directory) is still read. Registration rewrites the whole file under a lock file and renames it
//! into place, so readers never see a half-written file.
//!
//! The secret lives next to the hosts file as `<hosts file>.secret`. The hosts file,
//! the secret and the lock file are all created with mode 0600: only the instance
//! owner's processes use them, and `load_secret` refuses a secret others could read.

pub use gust_transport::Endpoint;
use rand::RngCore;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

pub const FORMAT_LINE: &str = "# GustFS hosts file, format 2";
/// The first line of files written before endpoints had kinds; still read.
const FORMAT_LINE_1: &str = "# GustFS hosts file, format 1";
/// Written into a daemon's root directory when `gust stop --keep` stops it, so that
/// whoever supervises the daemon (the node agent) keeps the data instead of removing
/// it when the daemon is gone.
pub const KEPT_MARKER: &str = "kept-by-stop";
/// Bound on daemons per instance (ids are u32 on the wire; this keeps files sane).
pub const DAEMONS_MAX: usize = 65_536;
/// Bound on `replicas` (gust-placement's REPLICAS_MAX; the hosts crate does not
/// depend on placement).
const REPLICAS_MAX: u32 = 3;
/// The daemon-line field carrying a daemon's capacity in bytes.
const CAPACITY_KEY: &str = "capacity:";

/// How an instance places chunks (the `placement` line; metadata is always
/// wide-striped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Every daemon equally (jump consistent hashing). No `placement` line.
    #[default]
    Wide,
    /// Weighted by each daemon's `capacity:` (weighted rendezvous hashing).
    Capacity,
    /// A file's chunks on a daemon of the node that created it (gust-placement's
    /// `local`).
    Local,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Wide => "wide",
            Placement::Capacity => "capacity",
            Placement::Local => "local",
        }
    }
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "wide" => Ok(Placement::Wide),
            "capacity" => Ok(Placement::Capacity),
            "local" => Ok(Placement::Local),
            _ => Err(format!("unknown placement '{s}' (wide, capacity or local)")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonEntry {
    pub id: u32,
    pub host: String,
    pub pid: u32,
    /// The daemon's root directory on its node (for `gust stop` to clean up).
    pub rootdir: PathBuf,
    /// Where it listens; at least one network endpoint.
    pub endpoints: Vec<Endpoint>,
    /// The capacity placement weighs this daemon by (`capacity:BYTES`), if any.
    pub capacity_bytes: Option<u64>,
}

impl DaemonEntry {
    /// The endpoint other processes reach the daemon at over TCP (`mem:` names a
    /// daemon inside the test's own process).
    pub fn network(&self) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| matches!(e, Endpoint::Tcp(_) | Endpoint::Mem(_)))
    }

    /// The daemon's libfabric endpoint (`gust start --fabric`), if it has one.
    pub fn fabric(&self) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| matches!(e, Endpoint::Ofi(_)))
    }

    /// What processes of other nodes try, in order: the fabric endpoint, then TCP.
    pub fn remote(&self) -> impl Iterator<Item = &Endpoint> {
        self.fabric().into_iter().chain(self.network())
    }

    /// The endpoint for clients on the daemon's own node, if it has one.
    pub fn node_local(&self) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| matches!(e, Endpoint::Unix(_)))
    }

    /// The shared-memory endpoint for clients on the daemon's own node, if it has
    /// one; [`node_local`](Self::node_local) is the fallback when it is refused.
    pub fn shared_memory(&self) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| matches!(e, Endpoint::Shm(_)))
    }

    /// The network address as `host:port`, for people and for tests.
    pub fn tcp_addr(&self) -> String {
        match self.network() {
            Some(Endpoint::Tcp(a)) => a.to_string(),
            _ => "-".into(),
        }
    }

    /// The fields of a `daemon` line (without the key).
    pub fn render(&self) -> String {
        let mut s = format!("{} {} {} {}", self.id, self.host, self.pid, self.rootdir.display());
        for e in &self.endpoints {
            s.push(' ');
            s.push_str(&e.to_string());
        }
        if let Some(c) = self.capacity_bytes {
            s.push_str(&format!(" {CAPACITY_KEY}{c}"));
        }
        s
    }

    /// Parses what [`DaemonEntry::render`] writes.
    pub fn parse(fields: &str) -> Result<DaemonEntry, String> {
        let f: Vec<&str> = fields.split_whitespace().collect();
        if f.len() < 5 {
            return Err(format!(
                "daemon line needs id, host, pid, root directory and an endpoint; has {} fields",
                f.len()
            ));
        }
        let id: u32 = f[0].parse().map_err(|_| format!("bad daemon id '{}'", f[0]))?;
        let pid: u32 = f[2].parse().map_err(|_| format!("bad pid '{}'", f[2]))?;
        let mut endpoints = Vec::new();
        let mut capacity_bytes = None;
        for e in &f[4..] {
            if let Some(c) = e.strip_prefix(CAPACITY_KEY) {
                capacity_bytes = Some(c.parse().map_err(|_| format!("daemon {id}: bad capacity '{c}'"))?);
                continue;
            }
            match e.parse::<Endpoint>() {
                Ok(ep) => endpoints.push(ep),
                // A kind a newer writer added: this reader cannot use it.
                Err(_) if e.contains(':') && !e.starts_with("tcp:") && !e.starts_with("unix:") => {}
                Err(err) => return Err(format!("daemon {id}: {err}")),
            }
        }
        let entry =
            DaemonEntry { id, host: f[1].to_string(), pid, rootdir: PathBuf::from(f[3]), endpoints, capacity_bytes };
        if entry.network().is_none() {
            return Err(format!("daemon {id} has no network endpoint (tcp:ADDRESS:PORT)"));
        }
        Ok(entry)
    }

    /// A daemon line of format 1: id, host, TCP address, socket or "-", pid, root.
    fn parse_format_1(fields: &str) -> Result<DaemonEntry, String> {
        let f: Vec<&str> = fields.split_whitespace().collect();
        if f.len() != 6 {
            return Err(format!("daemon line needs 6 fields, has {}", f.len()));
        }
        let tcp = format!("tcp:{}", f[2]);
        let unix = if f[3] == "-" { String::new() } else { format!("unix:{}", f[3]) };
        DaemonEntry::parse(&format!("{} {} {} {} {tcp} {unix}", f[0], f[1], f[4], f[5]))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostsFile {
    pub instance: String,
    pub chunk_size_bytes: u64,
    pub mountdir: String,
    pub check_parent: bool,
    /// Cache mode (`gust start --cache-of DIR`): the directory of the shared file
    /// system whose namespace this instance mirrors, filled on first use.
    pub cache_of: Option<String>,
    /// Cache mode of an object store (`gust start --cache-of s3://BUCKET/PREFIX`):
    /// the namespace holds a placeholder of every object, fetched on first open
    /// (gust-client's objects.rs), and the write-back sends files back as objects.
    pub cache_of_store: Option<String>,
    pub placement: Placement,
    /// Copies of every record and chunk (1 to 3, fixed for the instance's life). A
    /// reader that does not know the key refuses the file: it would miss copies.
    pub replicas: u32,
    /// Erasure code of the chunks, (K, M) (`ec K+M` line; gust-placement's `ec`):
    /// every stripe of K chunks has M parity chunks. A reader that does not know
    /// the key refuses the file: it would write chunks without their parity.
    pub ec: Option<(u32, u32)>,
    /// The layout's generation (`generation` line, 1 if absent): `gust expand` and
    /// `gust shrink` raise it when they change which daemons hold data, and
    /// clients stamp it on every request (docs/DESIGN.md, "Growing and shrinking").
    pub generation: u32,
    /// How many daemons (ids 0..placed) hold data (`placed` line; all if absent).
    /// Daemons past them are joining (started by `gust expand`, not yet given data).
    pub placed: Option<u32>,
    /// A move of data to this layout is under way (`moving` line): daemons serve
    /// nothing of the file system's contents until `gust expand` or `gust shrink`
    /// ends it (a daemon restarted meanwhile resumes its part).
    pub moving: bool,
    /// The highest layout generation a move attempted (`attempted` line; none if
    /// absent): a move called off used it, and the next takes a higher one, so
    /// that nothing the daemons kept of the attempt (a first pass's intent log)
    /// passes for the next move's.
    pub attempted: Option<u32>,
    /// Bound on daemons this instance may grow to (`daemons_max` line; the daemons
    /// listed if absent): clients keep room for that many.
    pub daemons_max: Option<u32>,
    /// Sorted by id.
    pub daemons: Vec<DaemonEntry>,
}

#[derive(Debug)]
pub enum HostsError {
    Io { path: PathBuf, err: io::Error },
    Parse { path: PathBuf, line: usize, msg: String },
}

impl fmt::Display for HostsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostsError::Io { path, err } => write!(f, "{}: {}", path.display(), err),
            HostsError::Parse { path, line, msg } => write!(f, "{}:{}: {}", path.display(), line, msg),
        }
    }
}

impl std::error::Error for HostsError {}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> HostsError + '_ {
    move |err| HostsError::Io { path: path.to_path_buf(), err }
}

pub fn new_instance_id() -> String {
    let mut b = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex(&b)
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex digits only: `from_str_radix` alone would also take a sign ("+a" is 10), so a
/// damaged secret such as "+a+b..." would pass as another secret (found by fuzzing).
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

/// The node's interfaces (in this network namespace): (name, address), from
/// getifaddrs, loopback included.
pub fn interfaces() -> Vec<(String, std::net::IpAddr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we walk read-only and free once.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            if !ifa.ifa_addr.is_null() {
                let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
                match (*ifa.ifa_addr).sa_family as i32 {
                    libc::AF_INET => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        out.push((name, std::net::IpAddr::from(u32::from_be(sa.sin_addr.s_addr).to_be_bytes())));
                    }
                    libc::AF_INET6 => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        out.push((name, std::net::IpAddr::from(sa.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            p = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

pub fn this_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl HostsFile {
    pub fn new(instance: String, chunk_size_bytes: u64, mountdir: String, check_parent: bool) -> Self {
        HostsFile {
            instance,
            chunk_size_bytes,
            mountdir,
            check_parent,
            cache_of: None,
            cache_of_store: None,
            placement: Placement::Wide,
            replicas: 1,
            ec: None,
            generation: 1,
            placed: None,
            attempted: None,
            moving: false,
            daemons_max: None,
            daemons: Vec::new(),
        }
    }

    /// The generation the next move takes: past the layout's and any attempted.
    pub fn next_generation(&self) -> u32 {
        self.generation.max(self.attempted.unwrap_or(0)) + 1
    }

    /// How many daemons hold data: ids 0..placed_count().
    pub fn placed_count(&self) -> u32 {
        self.placed.unwrap_or(self.daemons.len() as u32).min(self.daemons.len() as u32)
    }

    /// Room clients keep for daemons: at least those listed.
    pub fn room(&self) -> u32 {
        self.daemons_max.unwrap_or(0).max(self.daemons.len() as u32)
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(FORMAT_LINE);
        s.push('\n');
        s.push_str(&format!("instance {}\n", self.instance));
        s.push_str(&format!("chunk_size {}\n", self.chunk_size_bytes));
        s.push_str(&format!("mountdir {}\n", self.mountdir));
        s.push_str(&format!("check_parent {}\n", self.check_parent as u8));
        if let Some(c) = &self.cache_of {
            s.push_str(&format!("cache_of {c}\n"));
        }
        if let Some(c) = &self.cache_of_store {
            s.push_str(&format!("cache_of_store {c}\n"));
        }
        if self.placement != Placement::Wide {
            s.push_str(&format!("placement {}\n", self.placement.name()));
        }
        if self.replicas != 1 {
            s.push_str(&format!("replicas {}\n", self.replicas));
        }
        if let Some((k, m)) = self.ec {
            s.push_str(&format!("ec {k}+{m}\n"));
        }
        if self.generation != 1 {
            s.push_str(&format!("generation {}\n", self.generation));
        }
        if let Some(p) = self.placed {
            s.push_str(&format!("placed {p}\n"));
        }
        if self.moving {
            s.push_str("moving 1\n");
        }
        if let Some(a) = self.attempted {
            s.push_str(&format!("attempted {a}\n"));
        }
        if let Some(m) = self.daemons_max {
            s.push_str(&format!("daemons_max {m}\n"));
        }
        for d in &self.daemons {
            s.push_str(&format!("daemon {}\n", d.render()));
        }
        s
    }

    pub fn parse(path: &Path, text: &str) -> Result<HostsFile, HostsError> {
        let perr = |line: usize, msg: String| HostsError::Parse { path: path.to_path_buf(), line, msg };
        let mut lines = text.lines().enumerate();
        let format_1 = match lines.next() {
            Some((_, l)) if l.trim() == FORMAT_LINE => false,
            Some((_, l)) if l.trim() == FORMAT_LINE_1 => true,
            _ => return Err(perr(1, format!("not a GustFS hosts file (first line must be '{FORMAT_LINE}')"))),
        };
        let mut h = HostsFile::new(String::new(), 0, String::new(), false);
        for (i, line) in lines {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut it = line.splitn(2, ' ');
            let key = it.next().unwrap_or("");
            let rest = it.next().unwrap_or("").trim();
            match key {
                "instance" => h.instance = rest.to_string(),
                "chunk_size" => {
                    h.chunk_size_bytes = rest.parse().map_err(|_| perr(n, format!("bad chunk_size '{rest}'")))?
                }
                "mountdir" => h.mountdir = rest.to_string(),
                "check_parent" => h.check_parent = rest == "1",
                "cache_of" => h.cache_of = Some(rest.to_string()),
                "cache_of_store" => h.cache_of_store = Some(rest.to_string()),
                "placement" => h.placement = rest.parse().map_err(|m| perr(n, m))?,
                "replicas" => {
                    h.replicas = rest
                        .parse()
                        .ok()
                        .filter(|r| (1..=REPLICAS_MAX).contains(r))
                        .ok_or_else(|| perr(n, format!("bad replicas '{rest}' (1 to {REPLICAS_MAX})")))?
                }
                "ec" => {
                    let code = rest.split_once('+').and_then(|(k, m)| Some((k.parse().ok()?, m.parse().ok()?)));
                    h.ec = Some(
                        code.filter(|&(k, m): &(u32, u32)| k >= 1 && m >= 1 && k + m <= 255)
                            .ok_or_else(|| perr(n, format!("bad ec '{rest}' (K+M, e.g. 4+2)")))?,
                    );
                }
                "generation" => {
                    h.generation = rest
                        .parse()
                        .ok()
                        .filter(|g| *g >= 1)
                        .ok_or_else(|| perr(n, format!("bad generation '{rest}'")))?
                }
                "placed" | "daemons_max" => {
                    let count = rest
                        .parse()
                        .ok()
                        .filter(|c| (1..=DAEMONS_MAX as u32).contains(c))
                        .ok_or_else(|| perr(n, format!("bad {key} '{rest}' (1 to {DAEMONS_MAX})")))?;
                    *if key == "placed" { &mut h.placed } else { &mut h.daemons_max } = Some(count);
                }
                "moving" => h.moving = rest == "1",
                "attempted" => {
                    h.attempted =
                        Some(rest.parse().ok().ok_or_else(|| perr(n, format!("bad attempted generation '{rest}'")))?)
                }
                "daemon" => {
                    if h.daemons.len() >= DAEMONS_MAX {
                        return Err(perr(n, format!("more than {DAEMONS_MAX} daemons")));
                    }
                    let d = if format_1 { DaemonEntry::parse_format_1(rest) } else { DaemonEntry::parse(rest) };
                    h.daemons.push(d.map_err(|m| perr(n, m))?);
                }
                other => return Err(perr(n, format!("unknown key '{other}'"))),
            }
        }
        if h.instance.is_empty() {
            return Err(perr(0, "missing 'instance' line".into()));
        }
        if h.chunk_size_bytes == 0 {
            return Err(perr(0, "missing 'chunk_size' line".into()));
        }
        h.daemons.sort_by_key(|d| d.id);
        if h.placement == Placement::Capacity {
            if let Some(d) = h.daemons.iter().find(|d| d.capacity_bytes.is_none()) {
                return Err(perr(0, format!("placement capacity, but daemon {} has no capacity: field", d.id)));
            }
        }
        Ok(h)
    }

    pub fn load(path: &Path) -> Result<HostsFile, HostsError> {
        let text = fs::read_to_string(path).map_err(io_err(path))?;
        HostsFile::parse(path, &text)
    }

    /// Writes atomically: temporary file in the same directory, then rename. The file
    /// is the owner's alone (0600): only the owner's clients and daemons read it.
    pub fn store(&self, path: &Path) -> Result<(), HostsError> {
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        {
            // A leftover of a crashed writer with this pid would keep its own mode.
            let _ = fs::remove_file(&tmp);
            let mut f =
                fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io_err(&tmp))?;
            f.write_all(self.render().as_bytes()).map_err(io_err(&tmp))?;
            f.sync_all().map_err(io_err(&tmp))?;
        }
        fs::rename(&tmp, path).map_err(io_err(path))
    }

    /// Daemons with ids 0..n-1 all present: the instance is complete.
    pub fn is_complete(&self, n: usize) -> bool {
        self.daemons.len() == n && self.daemons.iter().enumerate().all(|(i, d)| d.id as usize == i)
    }
}

/// An exclusive lock on `<hosts file>.lock`, held while a registration rewrites the file.
pub struct HostsLock {
    _file: fs::File,
}

pub fn lock(hosts_path: &Path) -> Result<HostsLock, HostsError> {
    let lp = PathBuf::from(format!("{}.lock", hosts_path.display()));
    let f =
        fs::OpenOptions::new().create(true).write(true).truncate(false).mode(0o600).open(&lp).map_err(io_err(&lp))?;
    // SAFETY: valid descriptor owned by `f`.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        return Err(HostsError::Io { path: lp, err: io::Error::last_os_error() });
    }
    Ok(HostsLock { _file: f })
}

/// Changes the hosts file at `path` under its lock: loads it, lets `f` change it,
/// stores it (atomically); returns what `f` returned.
pub fn update<T>(path: &Path, f: impl FnOnce(&mut HostsFile) -> T) -> Result<T, HostsError> {
    let _lock = lock(path)?;
    let mut h = HostsFile::load(path)?;
    let r = f(&mut h);
    h.store(path)?;
    Ok(r)
}

pub fn secret_path(hosts_path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.secret", hosts_path.display()))
}

/// Creates a fresh 256-bit secret (mode 0600) next to the hosts file.
pub fn create_secret(hosts_path: &Path) -> Result<Vec<u8>, HostsError> {
    let p = secret_path(hosts_path);
    let mut b = vec![0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    let _ = fs::remove_file(&p);
    let mut f = fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&p).map_err(io_err(&p))?;
    f.write_all(format!("{}\n", hex(&b)).as_bytes()).map_err(io_err(&p))?;
    Ok(b)
}

/// Writes a given secret (mode 0600) next to the hosts file, atomically (temporary
/// file, then rename), so that a reader never sees half of it and two writers of the
/// same secret (a launcher that is also a node) do not collide.
pub fn store_secret(hosts_path: &Path, secret: &[u8]) -> Result<(), HostsError> {
    let p = secret_path(hosts_path);
    let tmp = PathBuf::from(format!("{}.tmp.{}", p.display(), std::process::id()));
    let _ = fs::remove_file(&tmp);
    {
        let mut f = fs::OpenOptions::new().create_new(true).write(true).mode(0o600).open(&tmp).map_err(io_err(&tmp))?;
        f.write_all(format!("{}\n", hex(secret)).as_bytes()).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    fs::rename(&tmp, &p).map_err(io_err(&p))
}

/// Parses a secret as it is written in the secret file and sent to node agents: hex,
/// at least 16 bytes.
pub fn parse_secret(text: &str) -> Option<Vec<u8>> {
    unhex(text.trim()).filter(|b| b.len() >= 16)
}

/// Reads the secret; refuses one readable by group or others.
pub fn load_secret(hosts_path: &Path) -> Result<Vec<u8>, HostsError> {
    let p = secret_path(hosts_path);
    let meta = fs::metadata(&p).map_err(io_err(&p))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(HostsError::Parse {
            path: p,
            line: 0,
            msg: "instance secret is readable by others; chmod 600 it".into(),
        });
    }
    let text = fs::read_to_string(&p).map_err(io_err(&p))?;
    parse_secret(&text).ok_or(HostsError::Parse {
        path: p,
        line: 1,
        msg: "instance secret is not a hex string of at least 16 bytes".into(),
    })
}

/// Parses sizes like 4096, 4k, 512KiB, 1M, 2g, 2TiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("bad size '{s}'"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("bad size unit in '{s}' (use k, m, g, t)")),
    };
    n.checked_mul(mult).ok_or(format!("size '{s}' too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_parse_roundtrip() {
        let mut h = HostsFile::new(new_instance_id(), 524288, "/tmp/gust".into(), true);
        h.daemons.push(DaemonEntry {
            id: 1,
            host: "n1".into(),
            pid: 9,
            rootdir: "/r1".into(),
            endpoints: vec!["tcp:127.0.0.1:2".parse().unwrap()],
            capacity_bytes: None,
        });
        h.daemons.push(DaemonEntry {
            id: 0,
            host: "n0".into(),
            pid: 8,
            rootdir: "/r0".into(),
            endpoints: vec!["shm:/x/m".parse().unwrap(), "tcp:[::1]:1".parse().unwrap(), "unix:/x/s".parse().unwrap()],
            capacity_bytes: None,
        });
        let p = Path::new("h");
        let text = h.render();
        assert!(text.contains("daemon 0 n0 8 /r0 shm:/x/m tcp:[::1]:1 unix:/x/s\n"), "{text}");
        let back = HostsFile::parse(p, &text).unwrap();
        assert_eq!(back.daemons[0].id, 0);
        assert_eq!(back.daemons[0].tcp_addr(), "[::1]:1");
        assert_eq!(back.daemons[0].node_local(), Some(&Endpoint::Unix("/x/s".into())));
        assert_eq!(back.daemons[0].shared_memory(), Some(&Endpoint::Shm("/x/m".into())));
        assert_eq!(back.daemons[1].node_local(), None);
        assert_eq!(back.daemons[1].shared_memory(), None);
        assert!(back.is_complete(2));
        assert!(back.check_parent);
    }

    /// A layout's lines (generation, placed daemons, a move under way, room to
    /// grow) survive a round trip; without them a file means what it meant before
    /// they existed: generation 1, every daemon placed, room for those listed.
    #[test]
    fn layout_lines_roundtrip_and_default_to_every_daemon() {
        let p = Path::new("h");
        let one = |id: u32| DaemonEntry {
            id,
            host: format!("n{id}"),
            pid: 1,
            rootdir: "/r".into(),
            endpoints: vec![format!("tcp:127.0.0.1:{}", 100 + id).parse().unwrap()],
            capacity_bytes: None,
        };
        let mut h = HostsFile::new(new_instance_id(), 4096, "/g".into(), false);
        h.daemons = (0..3).map(one).collect();
        let plain = HostsFile::parse(p, &h.render()).unwrap();
        assert_eq!((plain.generation, plain.placed_count(), plain.moving, plain.room()), (1, 3, false, 3));
        assert!(!h.render().contains("generation"), "generation 1 writes no line");
        h.generation = 4;
        h.placed = Some(2);
        h.moving = true;
        h.attempted = Some(6);
        h.daemons_max = Some(64);
        let back = HostsFile::parse(p, &h.render()).unwrap();
        assert_eq!(back, h);
        assert_eq!((back.placed_count(), back.room()), (2, 64));
        assert_eq!(back.next_generation(), 7, "past the attempted one");
        for bad in ["generation 0", "generation x", "placed 0", "daemons_max 70000", "attempted x"] {
            let text = h.render().replace("placed 2", bad);
            assert!(HostsFile::parse(p, &text).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn endpoints_of_unknown_kinds_are_skipped_and_format_1_is_read() {
        let p = Path::new("h");
        let v2 = format!(
            "{FORMAT_LINE}\ninstance ab\nchunk_size 4096\nmountdir /g\ncheck_parent 0\n\
             daemon 0 n0 8 /r0 ucx:ib0/4 tcp:10.0.0.1:7000\n"
        );
        let h = HostsFile::parse(p, &v2).unwrap();
        assert_eq!(h.daemons[0].endpoints, vec!["tcp:10.0.0.1:7000".parse::<Endpoint>().unwrap()]);
        let v1 = "# GustFS hosts file, format 1\ninstance ab\nchunk_size 4096\nmountdir /g\n\
                  daemon 0 n0 127.0.0.1:1 /x/s 8 /r0\ndaemon 1 n1 127.0.0.1:2 - 9 /r1\n";
        let h = HostsFile::parse(p, v1).unwrap();
        assert_eq!(h.daemons[0].render(), "0 n0 8 /r0 tcp:127.0.0.1:1 unix:/x/s");
        assert_eq!(h.daemons[1].render(), "1 n1 9 /r1 tcp:127.0.0.1:2");
        // A daemon nobody can reach from another node is damage, said so.
        let bad = format!("{FORMAT_LINE}\ninstance ab\nchunk_size 4096\ndaemon 0 n0 8 /r0 unix:/x/s\n");
        let e = HostsFile::parse(p, &bad).unwrap_err().to_string();
        assert!(e.contains("no network endpoint"), "{e}");
    }

    #[test]
    fn placement_and_capacities_roundtrip() {
        let p = Path::new("h");
        let mut h = HostsFile::new("ab".into(), 4096, "/g".into(), false);
        assert!(!h.render().contains("placement"), "the default writes no line, as before");
        h.placement = Placement::Capacity;
        h.daemons.push(DaemonEntry {
            id: 0,
            host: "n0".into(),
            pid: 8,
            rootdir: "/r0".into(),
            endpoints: vec!["tcp:10.0.0.1:7000".parse().unwrap()],
            capacity_bytes: Some(8 << 20),
        });
        let text = h.render();
        assert!(text.contains("placement capacity\n"), "{text}");
        assert!(text.contains("tcp:10.0.0.1:7000 capacity:8388608\n"), "{text}");
        assert_eq!(HostsFile::parse(p, &text).unwrap(), h);
        // Capacity placement without a daemon's capacity cannot place: refused.
        let e = HostsFile::parse(p, &text.replace(" capacity:8388608", "")).unwrap_err().to_string();
        assert!(e.contains("daemon 0 has no capacity"), "{e}");
        let e = HostsFile::parse(p, &text.replace("placement capacity", "placement fastest")).unwrap_err();
        assert!(e.to_string().contains("unknown placement 'fastest'"), "{e}");
        let e = HostsFile::parse(p, &text.replace("capacity:8388608", "capacity:8M")).unwrap_err();
        assert!(e.to_string().contains("bad capacity '8M'"), "{e}");
        h.replicas = 2;
        let text = h.render();
        assert!(text.contains("replicas 2\n"), "{text}");
        assert_eq!(HostsFile::parse(p, &text).unwrap().replicas, 2);
        h.ec = Some((4, 2));
        let text = h.render();
        assert!(text.contains("ec 4+2\n"), "{text}");
        assert_eq!(HostsFile::parse(p, &text).unwrap().ec, Some((4, 2)));
        let e = HostsFile::parse(p, &text.replace("ec 4+2", "ec 4")).unwrap_err();
        assert!(e.to_string().contains("bad ec '4'"), "{e}");
        h.ec = None;
        let e = HostsFile::parse(p, &text.replace("replicas 2", "replicas 4")).unwrap_err();
        assert!(e.to_string().contains("bad replicas '4' (1 to 3)"), "{e}");
    }

    #[test]
    fn rejects_foreign_files() {
        assert!(HostsFile::parse(Path::new("h"), "hello\n").is_err());
        let bad = format!("{FORMAT_LINE}\ninstance x\nchunk_size 4096\ndaemon 0 a b\n");
        let e = HostsFile::parse(Path::new("h"), &bad).unwrap_err().to_string();
        assert!(e.contains("needs id, host, pid, root directory and an endpoint"), "{e}");
    }

    #[test]
    fn secret_roundtrip_and_mode() {
        let d = tempfile::tempdir().unwrap();
        let hp = d.path().join("hosts");
        let s = create_secret(&hp).unwrap();
        assert_eq!(load_secret(&hp).unwrap(), s);
        fs::set_permissions(secret_path(&hp), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_secret(&hp).is_err());
        store_secret(&hp, &s).unwrap();
        assert_eq!(fs::metadata(secret_path(&hp)).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_secret(&hp).unwrap(), s);
        assert_eq!(parse_secret(&hex(&s)), Some(s));
        assert_eq!(parse_secret("abcd"), None);
    }

    /// Only hex digits make a secret: u8::from_str_radix takes a sign, so "+a" once
    /// parsed as the byte 10 (the hosts fuzz target found "...57+02..." accepted).
    #[test]
    fn secret_with_signs_or_other_characters_is_refused() {
        let good = "00112233445566778899aabbccddeeff";
        assert_eq!(parse_secret(good).map(|s| s.len()), Some(16));
        assert_eq!(parse_secret(&good.to_uppercase()).map(|s| s.len()), Some(16));
        assert_eq!(parse_secret(&"+a".repeat(16)), None);
        assert_eq!(parse_secret(&format!("{}+1", &good[..30])), None);
        assert_eq!(parse_secret(&format!("{}-1", &good[..30])), None);
        assert_eq!(parse_secret(&format!("{} 1", &good[..30])), None);
        assert_eq!(parse_secret(&format!("{}é", &good[..30])), None);
    }

    #[test]
    fn hosts_secret_and_lock_files_are_the_owners_alone() {
        let d = tempfile::tempdir().unwrap();
        let hp = d.path().join("hosts");
        HostsFile::new(new_instance_id(), 4096, "/g".into(), false).store(&hp).unwrap();
        create_secret(&hp).unwrap();
        drop(lock(&hp).unwrap());
        for p in [hp.clone(), secret_path(&hp), PathBuf::from(format!("{}.lock", hp.display()))] {
            assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o7777, 0o600, "{}", p.display());
        }
    }
}
