//! `gust repair --id D`: brings daemon D of a replicated instance up to date after
//! it crashed and came back recovering, or was fenced (it missed changes while hung
//! or cut off: docs/DESIGN.md, Replicas and Fencing), or before a replacement takes
//! its id.
//!
//! Offline and whole: D is stopped, its stores are emptied, every record and chunk
//! whose replica group includes D is copied into them from the serving copies
//! (through the client core, which skips D; into the stores through gust-store's
//! `Rebuild`, never RocksDB directly), the fences on D's peers are cleared, and D is
//! started again on its root directory, serving. Run it on D's host while the
//! instance is quiet (between job steps): a change made meanwhile to a group of D
//! reaches the other copies only, and D would miss it. A chunk that spilled past a
//! full daemon (capacity placement) is not copied.
//!
//! A daemon started by `gust start` on many nodes has a node agent (the job's
//! daemon step with srun): repair tells the agent to hold while D is stopped, and
//! to start D again when it is rebuilt, so that D stays the agent's child, in the
//! job's step, and the job's end stops and removes it. Elsewhere (`--local`, `gust
//! daemon` by hand) D is started again detached, as `gust start` did.
//!
//! Erasure-coded instances (`--ec K+M`, whose records are replicated M+1 times):
//! D's data cells are rebuilt from the other cells of their stripes (the client's
//! degraded reads), its parity cells encoded again from their stripes' data.
//!
//! With one copy (no replicas) there is nothing to copy from: `gust repair --id D`
//! only starts a D that is down again on its root directory, with what it had
//! acknowledged.
//!
//! Not for: daemons of other hosts (run it there: `srun --overlap -w NODE -N1 -n1
//! gust repair --id D` in a job).

use crate::instance::InstanceArgs;
use clap::Args;
use gust_client::{Client, ClientOptions, FindQuery, Kind, Record};
use gust_hosts::HostsFile;
use gust_store::rebuild::Rebuild;
use gust_store::root_lock::RootLock;
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct RepairArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// The daemon to bring up to date.
    #[arg(long)]
    id: u32,
}

pub fn run(a: RepairArgs) -> Result<(), String> {
    let hp = a.inst.hosts_path();
    let h = HostsFile::load(&hp).map_err(|e| format!("{e} (is an instance running?)"))?;
    let e = h.daemons.iter().find(|d| d.id == a.id).ok_or(format!("no daemon {} in {}", a.id, hp.display()))?;
    if e.host != gust_hosts::this_host() {
        return Err(format!(
            "daemon {} runs on {}: run `gust repair` there (in a SLURM job: srun --overlap -w {} -N1 -n1 gust \
             repair --id {})",
            a.id, e.host, e.host, a.id
        ));
    }
    let opts = ClientOptions { rpc_timeout: Duration::from_secs(10), force_tcp: false, ..Default::default() };
    let c = Client::open_instance(&hp, opts.clone())?;
    let base = hp.parent().unwrap_or(Path::new("."));
    let agent = gust_launch::agent::agent_of(base, a.id);
    if h.replicas < 2 {
        if c.ping(a.id).is_ok() {
            return Err(format!(
                "daemon {} serves, and the instance keeps one copy of everything: there is nothing to repair",
                a.id
            ));
        }
        restart(&hp, &h, a.id, agent)?;
        eprintln!("gust: daemon {} started again on {} with what it had acknowledged", a.id, e.rootdir.display());
        return Ok(());
    }
    if agent.is_some() {
        // The agent must not end (nor clean up) when D stops now.
        let hold = gust_launch::agent::hold_path(base, a.id);
        std::fs::write(&hold, b"").map_err(|err| format!("cannot write {}: {err}", hold.display()))?;
    }
    if c.ping(a.id).is_ok() {
        eprintln!("gust: stopping daemon {} (pid {})", a.id, e.pid);
        c.shutdown_daemon(a.id, true).map_err(|err| format!("cannot stop daemon {}: {err}", a.id))?;
    }
    let root = hold_rootdir(&hp, a.id, &e.rootdir)?;
    // A new client: the old one skips D for a while, this one finds it down.
    let c = Client::open_instance(&hp, opts)?;
    // Known down from the start: a listing whose pages of the other daemons came in
    // before D's failure was noticed would drop the records D is first for.
    c.skip_daemon(a.id);
    let (records, bytes) = rebuild(&c, a.id, &e.rootdir, root)?;
    eprintln!(
        "gust: daemon {}: {records} records and {} of chunks copied from its replicas",
        a.id,
        crate::human_size(bytes)
    );
    // The fences clients set on D's peers go now that D holds what they hold. A
    // client remembers a fence for DOWN_SKIP and does not fence again meanwhile:
    // D serves only after that, so a D that fails again is fenced again.
    let unreached = c.unfence(a.id);
    if !unreached.is_empty() {
        let list = unreached.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        eprintln!(
            "gust: warning: daemon(s) {list} did not answer and still fence daemon {}: it stops serving when it              reaches them; run `gust repair --id {}` again once they are back",
            a.id, a.id
        );
    }
    std::thread::sleep(gust_client::DOWN_SKIP);
    restart(&hp, &h, a.id, agent)?;
    eprintln!("gust: daemon {} is serving again", a.id);
    Ok(())
}

/// D's root directory's lock, once no process serves from it: a daemon that
/// answers (one that was still starting when asked first, or one started since) is
/// asked to stop, and the lock waited for, at most 20 s.
fn hold_rootdir(hp: &Path, id: u32, rootdir: &Path) -> Result<RootLock, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut asked = false;
    let mut round = 0u32;
    loop {
        round += 1;
        let taken = RootLock::try_take(rootdir).map_err(|err| format!("cannot lock {}: {err}", rootdir.display()))?;
        if let Some(lock) = taken {
            return Ok(lock);
        }
        if round == 1 {
            eprintln!("gust: waiting for the process that holds {} (a daemon still starting?)", rootdir.display());
        }
        if Instant::now() > deadline {
            return Err(format!("daemon {id} did not stop: a process still holds {}", rootdir.display()));
        }
        if !asked && round % 10 == 1 {
            // A new client each time: a daemon that did not answer is skipped a while.
            let opts = ClientOptions { rpc_timeout: Duration::from_secs(2), force_tcp: false, ..Default::default() };
            let c = Client::open_instance(hp, opts)?;
            if c.ping(id).is_ok() {
                eprintln!("gust: stopping daemon {id}, which started meanwhile");
                asked = c.shutdown_daemon(id, true).is_ok();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Empties D's stores and fills them from the serving copies (gust-store's
/// `Rebuild`); returns the records and chunk bytes copied.
fn rebuild(c: &Client, id: u32, rootdir: &Path, root: RootLock) -> Result<(usize, u64), String> {
    let mut store = Rebuild::start(rootdir, root)?;
    let mut all: Vec<(String, Record)> = Vec::new();
    c.find_stored("/", &FindQuery::default(), |p, r| all.push((p.to_string(), r.clone())))
        .map_err(|err| format!("cannot list the instance's records: {err}"))?;
    let cs = c.chunk_size_bytes();
    let mut buf = vec![0u8; cs as usize];
    for (path, rec) in &all {
        if c.record_holders(path).contains(&id) {
            if rec.kind == Kind::File {
                // Small files keep their data in the record (inline).
                let (r, data) = c.stat_data(path).map_err(|err| format!("{path}: {err}"))?;
                if let Some(d) = data {
                    store.put_inline(path, &r, &d).map_err(|err| format!("{path}: errno {err}"))?;
                    continue;
                }
            }
            store.put_record(path, rec).map_err(|err| format!("storing records: errno {err}"))?;
        }
        if rec.kind != Kind::File || rec.size == 0 {
            continue;
        }
        let mine: Vec<u64> =
            (0..rec.size.div_ceil(cs)).filter(|k| c.chunk_holders(rec.file_id, *k).contains(&id)).collect();
        let parity = parity_cells(c, rec, id);
        if mine.is_empty() && parity.is_empty() {
            continue;
        }
        let fd = c.open(path, libc::O_RDONLY, 0).map_err(|err| format!("{path}: {err}"))?;
        for k in mine {
            // Erasure-coded: a data cell of D is rebuilt from its stripe (the client
            // skips D).
            let n = c.pread(fd, &mut buf, k * cs).map_err(|err| format!("{path}: {err}"))?;
            if n > 0 {
                store.put_chunk(rec.file_id, k * cs, &buf[..n]).map_err(|err| format!("{path}: errno {err}"))?;
            }
        }
        for stripe in parity {
            // Encoded again from the stripe's data, without its trailing zeros (a hole).
            let mut cell =
                c.parity_bytes(rec.file_id, stripe, id, 0, cs as u32).map_err(|err| format!("{path}: {err}"))?;
            cell.truncate(cell.iter().rposition(|b| *b != 0).map_or(0, |p| p + 1));
            if !cell.is_empty() {
                let pid = gust_placement::ec::parity_file_id(rec.file_id);
                store.put_chunk(pid, stripe * cs, &cell).map_err(|err| format!("{path}: errno {err}"))?;
            }
        }
        let _ = c.close(fd);
    }
    let copied = store.finish().map_err(|err| format!("storing and syncing records: errno {err}"))?;
    // Repaired: the next start serves.
    let marker = rootdir.join(gust_daemon::CLEAN_STOP_MARKER);
    std::fs::write(&marker, b"").map_err(|err| format!("cannot mark {}: {err}", marker.display()))?;
    Ok(copied)
}

/// The stripes of `rec` whose parity cell daemon `id` of an erasure-coded
/// instance holds.
fn parity_cells(c: &Client, rec: &Record, id: u32) -> Vec<u64> {
    let Some((k, _)) = c.erasure_code() else { return Vec::new() };
    let cells = c.cells_on(rec.file_id, rec.size, id).into_iter();
    cells.filter(|(_, cell)| *cell >= k as usize).map(|(stripe, _)| stripe).collect()
}

/// Starts D again on its root directory and address: through its node agent
/// (`agent`: SIGUSR1), else as `gust start` did, detached, logging next to the hosts
/// file; then waits until it serves.
fn restart(hp: &Path, h: &HostsFile, id: u32, agent: Option<u32>) -> Result<(), String> {
    let log_path = hp.parent().unwrap_or(Path::new(".")).join(format!("d{id}.log"));
    match agent {
        Some(pid) => {
            // SAFETY: signalling this user's node agent of this instance by its pid.
            if unsafe { libc::kill(pid as i32, libc::SIGUSR1) } != 0 {
                return Err(format!("cannot reach the node agent (pid {pid}) of daemon {id}"));
            }
        }
        None => spawn_detached(hp, h, id, &log_path)?,
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = Client::open_instance(
            hp,
            ClientOptions { rpc_timeout: Duration::from_secs(2), force_tcp: false, ..Default::default() },
        )?;
        if c.daemon_recovering(id) == Ok(false) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("daemon {id} did not come back serving; see {}", log_path.display()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts D detached from this command (no node agent looks after it).
fn spawn_detached(hp: &Path, h: &HostsFile, id: u32, log_path: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let e = &h.daemons[id as usize];
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_path)
        .map_err(|err| format!("cannot open {}: {err}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|err| format!("cannot find the gust binary: {err}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("daemon")
        .arg("--rootdir")
        .arg(&e.rootdir)
        .args(["--mountdir", &h.mountdir])
        .arg("--hosts-file")
        .arg(hp)
        .args(["--listen", &e.tcp_addr(), "--id", &id.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|err| err.to_string())?)
        .stderr(log);
    gust_launch::proc::own_session(&mut cmd);
    cmd.spawn().map_err(|err| format!("cannot start daemon {id}: {err}"))?;
    Ok(())
}
