//! `gust view add|ls|status|rm`: views of an object store prefix under
//! `/.views/NAME` (gust-view). `add` makes the view's directory with its
//! definition, starts its maintainer (`gust view follow NAME`, detached, in a
//! session of its own) and waits for its first resync, so the view is complete
//! when `add` returns. The maintainer's files sit beside the hosts file:
//! `.view.NAME.pid`, `.view.NAME.log`, `.view.NAME.status` (JSON). `gust stop`
//! stops every maintainer of the instance.
//!
//! Not for: what a view holds and how it is kept (gust-view).

use crate::instance::InstanceArgs;
use clap::{Args, Subcommand};
use gust_client::{Client, Errno};
use gust_view::{Definition, Status, DEFINITION_XATTR, VIEWS_DIR};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ViewArgs {
    #[command(subcommand)]
    cmd: ViewCmd,
}

#[derive(Subcommand)]
enum ViewCmd {
    /// Make view NAME of SOURCE (s3://BUCKET/PREFIX, or a GustFS directory) under
    /// /.views/NAME, of the objects or files find's predicates match: gust view
    /// add NAME SOURCE [-name GLOB] [-size [+-]N[ckMG]] [-newer FILE] [-mmin [+-]N]
    /// [-xattr NAME[=GLOB]] [--layout LEVEL]…
    Add {
        #[command(flatten)]
        inst: InstanceArgs,
        /// The store's event source: seaweedfs://HOST:PORT (its filer's gRPC
        /// address). Without one, the view follows the store by resyncs only.
        #[arg(long)]
        events: Option<String>,
        /// Seconds between full resyncs [default: 60 without events, 600 with].
        #[arg(long)]
        resync: Option<u64>,
        /// Seconds to wait for the first resync.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        /// A level of directories by a property of each entry, outermost first
        /// (repeatable): an attribute (user.s3.tag.KEY, user.s3.meta.NAME, or any
        /// user.* of a GustFS source's files), extension, year, month or day.
        #[arg(long)]
        layout: Vec<String>,
        #[arg(
            allow_hyphen_values = true,
            trailing_var_arg = true,
            required = true,
            value_name = "NAME SOURCE [PREDICATES]"
        )]
        args: Vec<String>,
    },
    /// List the views: name, source, predicates, entries.
    Ls {
        #[command(flatten)]
        inst: InstanceArgs,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// A view's maintainer: state, entries, events and their lag, resyncs.
    Status {
        name: String,
        #[command(flatten)]
        inst: InstanceArgs,
        #[arg(long)]
        json: bool,
    },
    /// Stop a view's maintainer and remove the view (the objects stay).
    Rm {
        name: String,
        #[command(flatten)]
        inst: InstanceArgs,
    },
    /// Run a view's maintainer in the foreground (what `add` starts).
    #[command(hide = true)]
    Follow {
        name: String,
        #[command(flatten)]
        inst: InstanceArgs,
    },
}

fn side(hosts: &Path, name: &str, what: &str) -> PathBuf {
    let mut s = hosts.as_os_str().to_owned();
    s.push(format!(".view.{name}.{what}"));
    PathBuf::from(s)
}

fn alive(pid: i32) -> bool {
    pid > 0 && gust_launch::proc::pid_alive(pid as u32) && !gust_launch::proc::is_zombie(pid as u32)
}

fn pid_of(hosts: &Path, name: &str) -> Option<i32> {
    fs::read_to_string(side(hosts, name, "pid")).ok()?.trim().parse().ok().filter(|&p| alive(p))
}

fn status_of(hosts: &Path, name: &str) -> Option<Status> {
    serde_json::from_str(&fs::read_to_string(side(hosts, name, "status")).ok()?).ok()
}

fn errno(what: &str, e: Errno) -> String {
    format!("{what}: {e}")
}

/// The definition of view `name`, from its directory's attribute.
fn definition(c: &Client, name: &str) -> Result<Definition, String> {
    let dir = gust_view::dir_of(name);
    let raw = c.getxattr(&dir, DEFINITION_XATTR, false).map_err(|e| match e.0 {
        libc::ENOENT => format!("no view {name:?} (gust view ls lists them)"),
        _ => errno(&dir, e),
    })?;
    serde_json::from_slice(&raw).map_err(|e| format!("{dir}: not a view's definition ({e})"))
}

/// Stops a maintainer and waits until it is gone.
fn stop(pid: i32) {
    // SAFETY: signalling a process we started (its pid file names it).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let started = Instant::now();
    while alive(pid) && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if alive(pid) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Unlinks in flight while a view is removed: each is a request to the entry's
/// metadata daemon, which waits mostly on the round trip.
const REMOVE_THREADS: usize = 16;

/// Removes directory `dir` and everything under it: the entries first,
/// [`REMOVE_THREADS`] at a time, then the directories, deepest first.
fn remove_tree(c: &Client, dir: &str) -> Result<(), String> {
    let (mut dirs, mut files): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    c.find(dir, &Default::default(), |p, r| match r.kind {
        gust_client::Kind::Dir => dirs.push(p.to_string()),
        _ => files.push(p.to_string()),
    })
    .map_err(|e| errno(dir, e))?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..REMOVE_THREADS.min(files.len()) {
            s.spawn(|| {
                while let Some(p) = files.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    match c.unlink(p) {
                        Ok(()) | Err(Errno(libc::ENOENT)) => {}
                        Err(e) => *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(errno(p, e)),
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    dirs.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    for p in dirs {
        match c.rmdir(&p) {
            Ok(()) | Err(Errno(libc::ENOENT)) => {}
            Err(e) => return Err(errno(&p, e)),
        }
    }
    c.rmdir(dir).map_err(|e| errno(dir, e))
}

/// Starts the maintainer of view `name`, detached.
fn start(hosts: &Path, name: &str) -> Result<i32, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?;
    let log = crate::writeback::create_log(&side(hosts, name, "log"))?;
    let _ = fs::remove_file(side(hosts, name, "status"));
    let mut cmd = Command::new(exe);
    cmd.args(["view", "follow", name, "--hosts-file"])
        .arg(hosts)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    gust_launch::proc::own_session(&mut cmd);
    let child = cmd.spawn().map_err(|e| format!("cannot start the view's maintainer: {e}"))?;
    fs::write(side(hosts, name, "pid"), format!("{}\n", child.id()))
        .map_err(|e| format!("cannot record the maintainer's pid: {e}"))?;
    Ok(child.id() as i32)
}

/// The options of `gust view add`.
struct AddOptions {
    events: Option<String>,
    resync: Option<u64>,
    timeout: u64,
    layout: Vec<String>,
}

impl AddOptions {
    /// Takes the options given after the predicates (where find's syntax puts
    /// everything) out of `args`.
    fn among(&mut self, args: Vec<String>) -> Result<Vec<String>, String> {
        let mut rest = Vec::new();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let (opt, inline) = match a.split_once('=') {
                Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
                _ => (a.clone(), None),
            };
            if !matches!(opt.as_str(), "--events" | "--resync" | "--timeout" | "--layout") {
                rest.push(a);
                continue;
            }
            let v = inline.or_else(|| it.next()).ok_or(format!("{opt}: a value is needed"))?;
            let secs = || v.parse::<u64>().map_err(|_| format!("{opt} {v}: not a whole number of seconds"));
            match opt.as_str() {
                "--events" => self.events = Some(v.clone()),
                "--resync" => self.resync = Some(secs()?),
                "--layout" => self.layout.push(v.clone()),
                _ => self.timeout = secs()?,
            }
        }
        Ok(rest)
    }
}

fn add(inst: InstanceArgs, mut o: AddOptions, args: Vec<String>) -> Result<(), String> {
    let args = o.among(args)?;
    let AddOptions { events, resync, timeout, layout } = o;
    let [name, source, preds @ ..] = args.as_slice() else {
        return Err("gust view add NAME SOURCE [PREDICATES]: NAME and SOURCE are needed".into());
    };
    let c = inst.client()?;
    let store = source.starts_with("s3://") || source.starts_with("S3://");
    let source = if store {
        source.clone()
    } else {
        // A directory of GustFS: under the mount directory, or an internal path.
        gust_stage::refuse_url(source)?;
        let p = c.internal_path(source).unwrap_or_else(|| source.clone());
        let p = gust_client::normalize(&p).map_err(|e| format!("{source}: {e}"))?;
        match c.lstat_record(&p) {
            Ok(r) if r.kind == gust_client::Kind::Dir => p,
            Ok(_) => return Err(format!("{source}: not a directory")),
            Err(e) => {
                return Err(format!("{source}: {e} (a view's source is s3://BUCKET/PREFIX or a GustFS directory)"))
            }
        }
    };
    let query = crate::find::parse_predicates(&c, preds)?;
    let def = Definition {
        name: name.clone(),
        source,
        expression: preds.to_vec(),
        query,
        // Without events, resyncs are how a view of a store follows it.
        resync_secs: resync.unwrap_or(if events.is_some() || !store { 600 } else { 60 }),
        events,
        layout,
    };
    def.check()?;
    if store {
        gust_objstore::Config::from_env()?;
    }
    let hosts = inst.hosts_path();
    match c.mkdir(VIEWS_DIR, 0o755) {
        Ok(()) | Err(Errno(libc::EEXIST)) => {}
        Err(e) => return Err(errno(VIEWS_DIR, e)),
    }
    let dir = def.dir();
    c.mkdir(&dir, 0o755).map_err(|e| match e.0 {
        libc::EEXIST => format!("view {name} exists (gust view rm {name} first)"),
        _ => errno(&dir, e),
    })?;
    let text = serde_json::to_vec(&def).map_err(|e| e.to_string())?;
    if let Err(e) = c.setxattr(&dir, DEFINITION_XATTR, &text, 0, false) {
        let _ = c.rmdir(&dir);
        return Err(errno(&dir, e));
    }
    let pid = start(&hosts, name)?;
    // Complete when `add` returns: its first resync is waited for.
    let started = Instant::now();
    loop {
        if let Some(s) = status_of(&hosts, name).filter(|s| s.resyncs > 0) {
            let skipped = if s.skipped > 0 {
                format!(", {} object(s) skipped (keys that are no path)", s.skipped)
            } else {
                String::new()
            };
            let follows = match (&def.events, def.gust_dir()) {
                (Some(e), _) => format!("follows events from {e}"),
                (None, Some(_)) => "follows GustFS's events".to_string(),
                (None, None) => format!("resyncs every {} s", def.resync_secs),
            };
            eprintln!(
                "gust: view {name}: {} entries in {dir} ({:.1} s){skipped}; it {follows} (log {})",
                s.objects,
                s.last_resync_secs,
                side(&hosts, name, "log").display()
            );
            return Ok(());
        }
        if !alive(pid) || started.elapsed() > Duration::from_secs(timeout) {
            let log = fs::read_to_string(side(&hosts, name, "log")).unwrap_or_default();
            let why =
                log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim_start_matches("gust: ").to_string();
            if alive(pid) {
                stop(pid);
            }
            let _ = remove_tree(&c, &dir);
            for w in ["pid", "status"] {
                let _ = fs::remove_file(side(&hosts, name, w));
            }
            return Err(if why.is_empty() {
                format!("view {name}: the first resync did not end within {timeout} s")
            } else {
                format!("view {name}: {why}")
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The names of the views.
fn names(c: &Client) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    match c.opendir(VIEWS_DIR) {
        Ok(d) => {
            for e in d {
                out.push(e.map_err(|e| errno(VIEWS_DIR, e))?.name);
            }
        }
        Err(Errno(libc::ENOENT)) => {}
        Err(e) => return Err(errno(VIEWS_DIR, e)),
    }
    out.sort();
    Ok(out)
}

fn ls(inst: InstanceArgs, json: bool) -> Result<(), String> {
    let c = inst.client()?;
    let hosts = inst.hosts_path();
    let mut out = std::io::stdout().lock();
    for name in names(&c)? {
        let Ok(def) = definition(&c, &name) else { continue };
        let running = pid_of(&hosts, &name).is_some();
        let st = status_of(&hosts, &name);
        if json {
            let v = serde_json::json!({
                "name": def.name, "source": def.source, "expression": def.expression, "events": def.events,
                "layout": def.layout, "running": running, "objects": st.as_ref().map(|s| s.objects),
            });
            let _ = writeln!(out, "{v}");
        } else {
            let objects = st.map_or("?".to_string(), |s| s.objects.to_string());
            let mut expr =
                if def.expression.is_empty() { String::new() } else { format!(" {}", def.expression.join(" ")) };
            for l in &def.layout {
                expr.push_str(&format!(" --layout {l}"));
            }
            let state = if running { "" } else { " (not maintained: its maintainer is not running)" };
            let _ = writeln!(out, "{name}\t{}{expr}\t{objects} entries{state}", def.source);
        }
    }
    Ok(())
}

fn ago(ns: i64) -> String {
    if ns == 0 {
        return "never".into();
    }
    let s = (gust_proto::now_ns() - ns) as f64 / 1e9;
    format!("{} ago", gust_stage::report::human_secs(s.max(0.0)))
}

fn status(inst: InstanceArgs, name: &str, json: bool) -> Result<(), String> {
    let c = inst.client()?;
    let def = definition(&c, name)?;
    let hosts = inst.hosts_path();
    let running = pid_of(&hosts, name).is_some();
    let st = status_of(&hosts, name).unwrap_or_default();
    if json {
        let mut v = serde_json::to_value(&st).map_err(|e| e.to_string())?;
        v["running"] = running.into();
        v["source"] = def.source.clone().into();
        println!("{v}");
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "view {name}: {} → {}", def.source, def.dir());
    let _ = writeln!(out, "  maintainer: {}", if running { st.state.as_str() } else { "not running" });
    let _ = writeln!(out, "  entries: {} ({} skipped)", st.objects, st.skipped);
    let _ = writeln!(
        out,
        "  resyncs: {}, last {} (took {})",
        st.resyncs,
        ago(st.last_resync_ns),
        gust_stage::report::human_secs(st.last_resync_secs)
    );
    if def.events.is_some() || def.gust_dir().is_some() {
        let _ = writeln!(
            out,
            "  events: {}, last {}; lag {:.1} ms (median {:.1} ms, p99 {:.1} ms)",
            st.events,
            ago(st.last_event_ns),
            st.last_lag_ms,
            st.lag_p50_ms,
            st.lag_p99_ms
        );
    }
    if let Some(e) = &st.events_error {
        let _ = writeln!(out, "  event stream cut: {e} (reconnecting; a resync follows)");
    }
    if let Some(e) = &st.error {
        let _ = writeln!(out, "  last error: {e}");
    }
    Ok(())
}

fn rm(inst: InstanceArgs, name: &str) -> Result<(), String> {
    let c = inst.client()?;
    definition(&c, name)?;
    let hosts = inst.hosts_path();
    if let Some(pid) = pid_of(&hosts, name) {
        stop(pid);
    }
    remove_tree(&c, &gust_view::dir_of(name))?;
    for w in ["pid", "status", "log"] {
        let _ = fs::remove_file(side(&hosts, name, w));
    }
    eprintln!("gust: view {name} removed");
    Ok(())
}

/// Stops the maintainers of every view of the instance (`gust stop`).
pub fn stop_all(hosts: &Path) {
    let Some(dir) = hosts.parent() else { return };
    let Some(base) = hosts.file_name().and_then(|f| f.to_str()) else { return };
    let Ok(rd) = fs::read_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir }) else { return };
    let prefix = format!("{base}.view.");
    for e in rd.flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        let Some(name) = f.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".pid")) else { continue };
        if let Some(pid) = pid_of(hosts, name) {
            stop(pid);
        }
        let _ = fs::remove_file(e.path());
    }
}

/// Starts the maintainer of every view of the instance whose maintainer is not
/// running (`gust start --restart`: the views are the instance's data, their
/// maintainers processes that `gust stop` ended). Each begins with a resync, in the
/// background; one that cannot (no store setup in this environment) says so in its
/// log, and `gust view ls` shows it as not maintained.
pub fn restart_all(hosts: &Path) -> Result<(), String> {
    let c = Client::open_instance(hosts, gust_client::ClientOptions::from_env())?;
    let mut started = Vec::new();
    for name in names(&c)? {
        if definition(&c, &name).is_ok() && pid_of(hosts, &name).is_none() {
            start(hosts, &name)?;
            started.push(name);
        }
    }
    if !started.is_empty() {
        eprintln!("gust: views maintained again: {} (gust view status NAME)", started.join(", "));
    }
    Ok(())
}

pub fn run(a: ViewArgs) -> Result<(), String> {
    match a.cmd {
        ViewCmd::Add { inst, events, resync, timeout, layout, args } => {
            add(inst, AddOptions { events, resync, timeout, layout }, args)
        }
        ViewCmd::Ls { inst, json } => ls(inst, json),
        ViewCmd::Status { name, inst, json } => status(inst, &name, json),
        ViewCmd::Rm { name, inst } => rm(inst, &name),
        ViewCmd::Follow { name, inst } => {
            let c = inst.client()?;
            let def = definition(&c, &name)?;
            gust_view::follow::follow(&c, &def, &side(&inst.hosts_path(), &name, "status"))
        }
    }
}
