//! `gust expand` and `gust shrink`: grow or shrink a running instance, moving
//! exactly the records and chunks whose daemon the new layout changes
//! (docs/DESIGN.md, "Growing and shrinking"; the daemons' side is gust-daemon's
//! moves/).
//!
//! This command coordinates: it starts the new daemons (expand), then sends every
//! daemon the steps of the move in order (prepare, freeze, copy, adopt), writing
//! the hosts file's new generation between them, and stops the daemons that left
//! (shrink). If it is killed, or a daemon is, the same command with `--resume`
//! finishes the move (`gust status` says one is under way).
//!
//! Not for: what daemons do with the steps (gust-daemon), placement.

use crate::instance::InstanceArgs;
use clap::Args;
use gust_client::{Client, ClientOptions, MoveProgress, MoveStep};
use gust_hosts::{HostsFile, Placement};
use gust_launch::{hostlist, launcher};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ExpandArgs {
    #[command(flatten)]
    pub inst: InstanceArgs,
    /// Daemons to add on this machine.
    #[arg(long, required_unless_present_any = ["resume", "hosts", "nodes"], conflicts_with_all = ["hosts", "nodes"])]
    pub local: Option<u32>,
    /// Add one daemon on each of these hosts over ssh, in SLURM's hostlist syntax
    /// ('node[17-20]').
    #[arg(long, conflicts_with = "nodes")]
    pub hosts: Option<String>,
    /// Add one daemon on each of these nodes of this SLURM allocation through srun
    /// (an allocation that grew).
    #[arg(long)]
    pub nodes: Option<String>,
    /// The ssh command and its options for --hosts [default: $GUST_SSH, else ssh].
    #[arg(long)]
    pub ssh: Option<String>,
    /// The new daemons serve on their node's address inside this network.
    #[arg(long)]
    pub network: Option<String>,
    /// Directory of the new daemons' root directories [default: where daemon 0's is].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Finish a move that was interrupted (the coordinating `gust` or a daemon
    /// killed), or, if it stopped before its move began, send the joining daemons
    /// away again.
    #[arg(long)]
    pub resume: bool,
    /// Seconds to wait for the new daemons to answer.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Declare the new daemons' capacity, one size for all or one per new daemon
    /// (as `gust start --declare-capacity`): capacity placement weighs them by it.
    #[arg(long, value_name = "SIZES", value_delimiter = ',', value_parser = crate::parse_size)]
    pub declare_capacity: Vec<u64>,
}

#[derive(Args)]
pub struct ShrinkArgs {
    #[command(flatten)]
    pub inst: InstanceArgs,
    /// Daemons to remove: those with the highest ids.
    #[arg(long, required_unless_present = "resume")]
    pub count: Option<u32>,
    /// Finish a move that was interrupted.
    #[arg(long)]
    pub resume: bool,
}

/// How long a daemon that does not answer during a copy is waited for.
const REJOIN_WAIT: Duration = Duration::from_secs(60);

fn load(p: &Path) -> Result<HostsFile, String> {
    HostsFile::load(p).map_err(|e| format!("{e} (is an instance running?)"))
}

/// What an instance must be for its layout to change now.
fn check(h: &HostsFile, resume: bool) -> Result<(), String> {
    if h.moving && !resume {
        return Err(format!(
            "a move to layout generation {} ({} daemons) is under way; finish it with --resume",
            h.generation,
            h.placed_count()
        ));
    }
    if !h.moving && resume {
        return Err("no move is under way (nothing to resume)".into());
    }
    if h.replicas > 1 {
        return Err("an instance with --replicas above 1 cannot grow or shrink yet (docs/DESIGN.md)".into());
    }
    if h.placement == Placement::Local {
        return Err(
            "placement local cannot grow or shrink: a file's chunks live on the daemon of its creator's node, \
             which no move changes (docs/DESIGN.md)"
                .into(),
        );
    }
    check_where(h)
}

/// What any move needs: every listed daemon placed (or a move under way).
fn check_where(h: &HostsFile) -> Result<(), String> {
    if h.placed_count() as usize != h.daemons.len() && !h.moving {
        return Err(format!(
            "{} daemons are listed but {} hold data: an earlier `gust expand` stopped before its move \
             began; the instance serves on with the {} (`gust expand --resume` sends the others away)",
            h.daemons.len(),
            h.placed_count(),
            h.placed_count()
        ));
    }
    Ok(())
}

pub fn expand(a: ExpandArgs) -> Result<(), String> {
    let p = a.inst.hosts_path();
    let h = load(&p)?;
    if a.resume && !h.moving && (h.placed_count() as usize) < h.daemons.len() {
        return call_off(&p, &h);
    }
    if a.resume && !h.moving && readopt(&p, &h)? {
        return Ok(());
    }
    check(&h, a.resume)?;
    if a.resume {
        return drive(&p, None, None);
    }
    let n = h.daemons.len() as u32;
    if let Some(method) = remote_method(&a)? {
        return expand_remote(&a, &p, &h, method);
    }
    let add = a.local.unwrap_or(0);
    if add == 0 {
        return Err("--local must be at least 1".into());
    }
    if n + add > h.room() {
        return Err(format!(
            "the instance was started with room for {} daemons (`gust start --daemons-max`); {n} run and {add} more \
             would exceed it",
            h.room()
        ));
    }
    // Clients route by the placed daemons only: the new ones join unplaced.
    gust_hosts::update(&p, |h| h.placed = Some(n)).map_err(|e| e.to_string())?;
    let data_dir = match a.data_dir.clone() {
        Some(d) => d,
        None => h.daemons[0].rootdir.parent().map(Path::to_path_buf).ok_or("cannot tell where daemon 0's root is")?,
    };
    let mut plan = Vec::new();
    for i in n..n + add {
        let droot = data_dir.join(format!("d{i}"));
        if droot.exists() {
            std::fs::remove_dir_all(&droot).map_err(|e| format!("cannot clean {}: {e}", droot.display()))?;
        }
        std::fs::create_dir_all(&droot).map_err(|e| format!("cannot create {}: {e}", droot.display()))?;
        plan.push((i, droot, "127.0.0.1:0".to_string()));
    }
    let log_dir = p.parent().map(Path::to_path_buf).unwrap_or_else(|| data_dir.clone());
    let capacities = new_capacities(&a.declare_capacity, n, add)?;
    if let Err(e) = crate::instance::launch_more(&plan, &h.mountdir, &p, &log_dir, a.timeout, capacities) {
        // The instance goes on as it was: the daemons that did start leave again.
        let c = Client::open_instance(&p, ClientOptions::default()).ok();
        send_away_joining(c.as_ref(), &p, n)?;
        return Err(format!("{e}; the instance goes on with its {n} daemons"));
    }
    drive(&p, Some(n + add), None)
}

/// `--declare-capacity` of `add` daemons joining `n`, by daemon id (one size: for
/// all of them).
fn new_capacities(sizes: &[u64], n: u32, add: u32) -> Result<Vec<u64>, String> {
    match sizes.len() {
        0 | 1 => Ok(sizes.to_vec()),
        k if k == add as usize => Ok(std::iter::repeat_n(0, n as usize).chain(sizes.iter().copied()).collect()),
        k => Err(format!("--declare-capacity lists {k} sizes for {add} new daemons (give one for all, or one each)")),
    }
}

pub fn shrink(a: ShrinkArgs) -> Result<(), String> {
    let p = a.inst.hosts_path();
    let h = load(&p)?;
    if a.resume && !h.moving && readopt(&p, &h)? {
        return Ok(());
    }
    check(&h, a.resume)?;
    if a.resume {
        return drive(&p, None, None);
    }
    let n = h.daemons.len() as u32;
    let remove = a.count.unwrap_or(0);
    if remove == 0 || remove >= n {
        return Err(format!("--count must be between 1 and {} (the instance has {n} daemons)", n.saturating_sub(1)));
    }
    drive(&p, Some(n - remove), None)
}

/// Changes the placement of a running instance (`gust tune --placement`): a move
/// to the same daemons laid out by the other distributor. Wide and capacity
/// placement move (capacity weighs each daemon by the capacity it registered at
/// start); local placement keeps chunks where they were written and does not.
pub fn change_placement(p: &Path, to: Placement) -> Result<(), String> {
    let h = load(p)?;
    check_where(&h)?;
    if h.moving {
        return Err(format!(
            "a move to layout generation {} is under way; finish it first (gust expand --resume)",
            h.generation
        ));
    }
    if h.replicas > 1 {
        return Err("an instance with --replicas above 1 cannot change its placement yet (docs/DESIGN.md)".into());
    }
    if h.placement == to {
        return Err(format!("the placement is {} already", to.name()));
    }
    if h.placement == Placement::Local || to == Placement::Local {
        return Err(format!(
            "placement {} -> {}: local placement keeps each file's chunks on the node that wrote it, which no \
             move recomputes; only wide and capacity placement change at run time",
            h.placement.name(),
            to.name()
        ));
    }
    if let Some(d) = h.daemons.iter().find(|d| to == Placement::Capacity && d.capacity_bytes.unwrap_or(0) == 0) {
        return Err(format!("daemon {} has no registered capacity to weigh it by", d.id));
    }
    drive(p, Some(h.placed_count()), Some(to))
}

/// Moves the instance to `placed` daemons, and to placement `placement` if given
/// (None, None: finish the move under way).
fn drive(p: &Path, placed: Option<u32>, placement: Option<Placement>) -> Result<(), String> {
    let started = Instant::now();
    // What the summary tells apart: until the first pass ended, and from the
    // freeze on (clients held off).
    let (mut first_pass_s, mut held_from) = (0.0, started);
    let c = Client::open_instance(p, ClientOptions { rpc_timeout: Duration::from_secs(120), ..Default::default() })?;
    let h = load(p)?;
    publish(&c, p)?;
    let all: Vec<u32> = h.daemons.iter().map(|d| d.id).collect();
    let from = if h.moving { None } else { Some(h.placed_count()) };
    let generation = if h.moving { h.generation } else { h.next_generation() };
    if !h.moving {
        gust_hosts::update(p, |h| h.attempted = Some(generation)).map_err(|e| e.to_string())?;
    }
    // A daemon that does not answer during the copy may be starting again (it
    // resumes its part): asked again for up to `REJOIN_WAIT`.
    let step = |d: u32, s: MoveStep| -> Result<MoveProgress, String> {
        let asked = Instant::now();
        loop {
            match c.move_step(d, s, generation) {
                Ok(st) => return Ok(st),
                Err(e) => {
                    let why = c.last_transport_error().unwrap_or_else(|| e.to_string());
                    // A daemon that does not answer during the copy or at adopt may
                    // be starting again (it resumes its part, or serves the new
                    // layout, as the hosts file says): asked again.
                    let copying = matches!(s, MoveStep::Copy | MoveStep::Status | MoveStep::Adopt);
                    if !copying || asked.elapsed() > REJOIN_WAIT {
                        return Err(format!("daemon {d}: {} step: {why}", step_name(s)));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    };
    if let (Some(placed), Some(from)) = (placed, from) {
        match placement {
            Some(to) => eprintln!(
                "gust: moving the instance from placement {} to {} (layout generation {generation})",
                h.placement.name(),
                to.name()
            ),
            None => {
                eprintln!("gust: moving the instance from {from} to {placed} daemons (layout generation {generation})")
            }
        }
        if placement.is_none() && placed > from {
            first_pass(&c, &all[..from as usize], generation);
        }
        first_pass_s = started.elapsed().as_secs_f64();
        // Tests stop here, as a coordinator killed during the first pass would.
        if std::env::var("GUST_DEBUG_MOVE_STOP_BEFORE").is_ok_and(|v| v == "prepare") {
            return Err("stopped before prepare (GUST_DEBUG_MOVE_STOP_BEFORE=prepare)".into());
        }
        held_from = Instant::now();
        let mut frozen = Vec::new();
        let begun = all.iter().try_for_each(|&d| step(d, MoveStep::Prepare).map(|_| ())).and_then(|()| {
            all.iter().try_for_each(|&d| {
                step(d, MoveStep::Freeze).map(|_| frozen.push(d)).map_err(|e| {
                    if e.contains("EBUSY") {
                        format!("{e}: file locks are held there (or requests did not end); try again once they are released")
                    } else {
                        e
                    }
                })
            })
        });
        if let Err(e) = begun {
            for &d in &all {
                let _ = c.move_step(d, MoveStep::Abort, generation);
            }
            send_away_joining(Some(&c), p, from)?;
            return Err(format!("{e}; nothing moved"));
        }
        gust_hosts::update(p, |h| {
            h.generation = generation;
            h.placed = Some(placed);
            h.moving = true;
            if let Some(to) = placement {
                h.placement = to;
            }
        })
        .map_err(|e| e.to_string())?;
        publish(&c, p)?;
    } else {
        eprintln!("gust: resuming the move to layout generation {generation} ({} daemons)", h.placed_count());
    }
    // Tests stop here, as a coordinator killed at this point would.
    if std::env::var("GUST_DEBUG_MOVE_STOP_BEFORE").is_ok_and(|v| v == "copy") {
        return Err("stopped before the copy (GUST_DEBUG_MOVE_STOP_BEFORE=copy)".into());
    }
    // Copy, watching every daemon's part until all are done.
    for &d in &all {
        step(d, MoveStep::Copy)?;
    }
    let mut last_shown = Instant::now();
    let states = loop {
        let mut states = Vec::new();
        for &d in &all {
            let mut s = step(d, MoveStep::Status)?;
            if s.generation != generation || s.step != MoveStep::Copy {
                // Restarted meanwhile: it resumes its part.
                s = step(d, MoveStep::Copy)?;
            }
            if !s.error.is_empty() {
                return Err(format!(
                    "daemon {d}: {}; the move stays under way: `gust expand --resume` (or shrink) finishes it",
                    s.error
                ));
            }
            states.push(s);
        }
        if states.iter().all(|s| s.done) {
            break states;
        }
        if last_shown.elapsed() > Duration::from_secs(2) {
            let (r, b) = states.iter().fold((0, 0), |(r, b), s| (r + s.records, b + s.bytes));
            eprintln!("gust: moved {r} record(s) and {} so far", crate::human_size(b));
            last_shown = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The new layout, without the daemons that left, then every daemon serves it.
    // The leaving daemons as the hosts file lists them now: one started again
    // during the move has another pid than at the start of this command.
    let gone: Vec<gust_hosts::DaemonEntry> = gust_hosts::update(p, |h| {
        let placed = h.placed_count();
        let leaving = h.daemons.iter().filter(|d| d.id >= placed).cloned().collect();
        h.daemons.retain(|d| d.id < placed);
        h.moving = false;
        h.placed = None;
        leaving
    })
    .map_err(|e| e.to_string())?;
    let leaving: Vec<u32> = gone.iter().map(|d| d.id).collect();
    publish(&c, p)?;
    for &d in all.iter().filter(|d| !leaving.contains(d)) {
        step(d, MoveStep::Adopt)?;
    }
    let held_s = held_from.elapsed().as_secs_f64();
    for &d in &leaving {
        if let Err(e) = c.shutdown_daemon(d, false) {
            eprintln!("gust: daemon {d} (it holds nothing now) did not stop: {e}");
        }
    }
    wait_gone(&gone);
    let (records, chunks, bytes) =
        states.iter().fold((0, 0, 0), |(r, k, b), s| (r + s.records, k + s.chunks, b + s.bytes));
    let summary = serde_json::json!({
        "generation": generation,
        "placement": load(p)?.placement.name(),
        "daemons": all.len() - leaving.len(),
        "records_moved": records,
        "chunks_moved": chunks,
        "bytes_moved": bytes,
        "seconds": started.elapsed().as_secs_f64(),
        "first_pass_seconds": first_pass_s,
        "held_seconds": held_s,
    });
    eprintln!(
        "gust: now {} daemons (layout generation {generation}); moved {records} record(s), {chunks} chunk(s), {} in {:.1} s",
        all.len() - leaving.len(),
        crate::human_size(bytes),
        started.elapsed().as_secs_f64()
    );
    println!("{summary}");
    Ok(())
}

/// A grow's first pass: the daemons that hold data send the joining ones what
/// the new layout places on them while clients are still served, so that the
/// copy with clients held off sends only what changed meanwhile. A daemon whose
/// pass fails is only slower at `copy`, which sends what the pass did not.
fn first_pass(c: &Client, daemons: &[u32], generation: u32) {
    let started = Instant::now();
    let mut running: Vec<u32> = Vec::new();
    for &d in daemons {
        match c.move_step(d, MoveStep::Precopy, generation) {
            Ok(_) => running.push(d),
            Err(e) => eprintln!("gust: daemon {d}: no first pass ({e}); its copy sends everything"),
        }
    }
    let mut last_shown = Instant::now();
    while !running.is_empty() {
        std::thread::sleep(Duration::from_millis(20));
        let mut sent = (0, 0);
        running.retain(|&d| match c.move_step(d, MoveStep::Status, generation) {
            Ok(s) if s.step == MoveStep::Precopy && !s.done => {
                sent = (sent.0 + s.records, sent.1 + s.bytes);
                true
            }
            Ok(s) if !s.error.is_empty() => {
                eprintln!("gust: daemon {d}: first pass stopped: {}; its copy sends the rest", s.error);
                false
            }
            Ok(_) => false,
            Err(e) => {
                eprintln!("gust: daemon {d}: first pass: {e}; its copy sends the rest");
                false
            }
        });
        if last_shown.elapsed() > Duration::from_secs(2) {
            eprintln!("gust: first pass: {} record(s) and {} sent so far", sent.0, crate::human_size(sent.1));
            last_shown = Instant::now();
        }
    }
    eprintln!(
        "gust: first pass done in {:.1} s; holding clients off for what changed",
        started.elapsed().as_secs_f64()
    );
    // Tests change files here, between the pass and the copy.
    if let Ok(gate) = std::env::var("GUST_DEBUG_MOVE_GATE") {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !Path::new(&gate).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A move whose coordinator stopped after the hosts file said it ended, before
/// every daemon took the new layout (one did not answer `adopt`): those that did
/// not are sent it now. Whether any was.
fn readopt(p: &Path, h: &HostsFile) -> Result<bool, String> {
    let c = Client::open_instance(p, ClientOptions::default())?;
    let mut sent = Vec::new();
    for d in h.daemons.iter().map(|d| d.id) {
        let s = c.move_step(d, MoveStep::Status, h.generation).map_err(|e| format!("daemon {d}: {e}"))?;
        if s.step != MoveStep::Adopt || s.generation != h.generation {
            c.move_step(d, MoveStep::Adopt, h.generation).map_err(|e| format!("daemon {d}: adopt: {e}"))?;
            sent.push(d.to_string());
        }
    }
    if !sent.is_empty() {
        eprintln!(
            "gust: the move to layout generation {} had ended but daemon(s) {} did not serve it yet; they do now",
            h.generation,
            sent.join(", ")
        );
    }
    Ok(!sent.is_empty())
}

/// An expand that stopped before its move began (its coordinator killed during
/// the first pass, say): the daemons that hold data forget the first pass, the
/// joining ones leave again, and the instance serves on as it was.
fn call_off(p: &Path, h: &HostsFile) -> Result<(), String> {
    let placed = h.placed_count();
    let c = Client::open_instance(p, ClientOptions::default())?;
    for d in h.daemons.iter().map(|d| d.id).filter(|id| *id < placed) {
        // One that does not answer keeps what it noted of the first pass, which
        // no later move takes for its own (`attempted` generations).
        if let Err(e) = c.move_step(d, MoveStep::Abort, h.attempted.unwrap_or(h.generation + 1)) {
            eprintln!("gust: daemon {d}: abort: {e}");
        }
    }
    send_away_joining(Some(&c), p, placed)?;
    eprintln!(
        "gust: the expand to {} daemons stopped before its move began: the {} that joined left again, and the \
         instance serves on with its {placed}; run `gust expand` again to grow it",
        h.daemons.len(),
        h.daemons.len() as u32 - placed
    );
    Ok(())
}

/// Daemons that joined for a move that does not happen (ids from `from` on)
/// leave again: stopped (through `c`, if any) and off the hosts file.
fn send_away_joining(c: Option<&Client>, p: &Path, from: u32) -> Result<(), String> {
    let h = load(p)?;
    let joined: Vec<u32> = h.daemons.iter().map(|d| d.id).filter(|id| *id >= from).collect();
    if let Some(c) = c {
        for &d in &joined {
            let _ = c.shutdown_daemon(d, false);
        }
        wait_gone(&h.daemons.iter().filter(|d| d.id >= from).cloned().collect::<Vec<_>>());
    }
    gust_hosts::update(p, |h| {
        h.daemons.retain(|d| d.id < from);
        h.placed = None;
    })
    .map_err(|e| e.to_string())?;
    match c {
        Some(c) => publish(c, p),
        None => Ok(()),
    }
}

/// Every other node's copy of the hosts file made this one (each node keeps
/// its own: its daemons read it at the steps of a move, its clients when a
/// daemon answers MOVED): given to a daemon on each other host (`put_hosts`).
fn publish(c: &Client, p: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let h = HostsFile::parse(p, &text).map_err(|e| e.to_string())?;
    let me = gust_hosts::this_host();
    let mut by_host: std::collections::BTreeMap<&str, Vec<u32>> = std::collections::BTreeMap::new();
    for d in h.daemons.iter().filter(|d| d.host != me) {
        by_host.entry(&d.host).or_default().push(d.id);
    }
    for (host, ids) in by_host {
        let mut why = String::new();
        if !ids.iter().any(|&d| match c.put_hosts(d, text.clone()) {
            Ok(()) => true,
            Err(e) => {
                why = c.last_transport_error().unwrap_or_else(|| e.to_string());
                false
            }
        }) {
            return Err(format!("cannot give {host} the new hosts file: {why}"));
        }
    }
    Ok(())
}

/// The launcher for `--hosts` (ssh) or `--nodes` (srun), if one was asked for.
fn remote_method(a: &ExpandArgs) -> Result<Option<launcher::Method>, String> {
    let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    if let Some(list) = &a.hosts {
        let hosts = hostlist::expand(list).map_err(|e| e.to_string())?;
        let ssh = a.ssh.clone().or_else(|| std::env::var("GUST_SSH").ok()).unwrap_or_else(|| "ssh".into());
        return Ok(Some(launcher::Method::Ssh { hosts, ssh: words(&ssh) }));
    }
    if let Some(list) = &a.nodes {
        let nodes = hostlist::expand(list).map_err(|e| e.to_string())?;
        let srun = std::env::var("GUST_SRUN").unwrap_or_else(|_| "srun".into());
        return Ok(Some(launcher::Method::Srun { nodes, srun: words(&srun) }));
    }
    Ok(None)
}

/// `gust expand --hosts` or `--nodes`: a daemon on each new node through its
/// launcher (gust-launch's join: node agents as at `gust start`, ids after the
/// instance's), then the move.
fn expand_remote(a: &ExpandArgs, p: &Path, h: &HostsFile, method: launcher::Method) -> Result<(), String> {
    let n = h.daemons.len() as u32;
    let add = match &method {
        launcher::Method::Ssh { hosts, .. } => hosts.len(),
        launcher::Method::Srun { nodes, .. } => nodes.len(),
    } as u32;
    if add == 0 || n + add > h.room() {
        return Err(format!(
            "{add} new daemon(s): the instance has {n} and room for {} (`gust start --daemons-max`)",
            h.room()
        ));
    }
    let secret = gust_hosts::load_secret(p).map_err(|e| e.to_string())?;
    let plan = launcher::Plan {
        method,
        base: p.parent().map(Path::to_path_buf).ok_or("the hosts file has no directory")?,
        header: HostsFile { daemons: Vec::new(), placed: None, moving: false, ..h.clone() },
        port: None,
        network: a.network.clone(),
        auto_storage: None,
        timeout: Duration::from_secs(a.timeout),
        gust_exe: std::env::current_exe().map_err(|e| format!("cannot find the gust binary: {e}"))?,
        daemon_options: match a.declare_capacity[..] {
            [] => Vec::new(),
            [c] => vec!["--capacity".to_string(), c.to_string()],
            _ => return Err("--declare-capacity: on other nodes give one size, for every new daemon".into()),
        },
        restart: None,
        join: Some((h.clone(), secret)),
    };
    let s = launcher::start(&plan).map_err(|e| format!("{e}; the instance goes on with its {n} daemons"))?;
    eprintln!("gust: {add} daemon(s) joined in {:.1} s", s.pinged_s);
    drive(p, Some(n + add), None)
}

/// Waits (up to 10 s each) until the daemons `gone` of this host (as the hosts
/// file listed them: their pids) have exited, with their root directories: a
/// next expand may use the same names.
fn wait_gone(gone: &[gust_hosts::DaemonEntry]) {
    let me = gust_hosts::this_host();
    for e in gone.iter().filter(|e| e.host == me) {
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: kill with signal 0 only asks whether the process exists.
        while unsafe { libc::kill(e.pid as i32, 0) } == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn step_name(s: MoveStep) -> &'static str {
    match s {
        MoveStep::Prepare => "prepare",
        MoveStep::Freeze => "freeze",
        MoveStep::Copy => "copy",
        MoveStep::Status => "status",
        MoveStep::Adopt => "adopt",
        MoveStep::Abort => "abort",
        MoveStep::Precopy => "first pass",
    }
}
