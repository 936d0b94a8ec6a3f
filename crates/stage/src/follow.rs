//! `gust stage out --follow`: stage-out while the job runs (ADA-FS's concurrent
//! stage-out). A first pass copies what is there; then, every second, the daemons'
//! event logs say which files were closed after writing (or renamed into place)
//! under the sources, and those are copied out, throttled by `--max-bandwidth`.
//! Files whose attributes changed are looked at too: to an object store, their
//! objects' properties (metadata, tags) follow the files' `user.s3.*` attributes.
//! On SIGINT or SIGTERM (the job script's `kill %1` when the application is done)
//! a final pass copies what is left, unthrottled, and skips everything already out
//! (the resumable check), so the end of the job waits only for the last files.
//!
//! If a daemon's event log dropped events the follower had not read (the log is
//! bounded), the next pass is a full one: nothing is missed, it only costs a walk.

use crate::report::Summary;
use crate::{run as run_once, run_throttled, Options};
use gust_client::{Client, EventCursors, EventKind};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often the event logs are read.
const INTERVAL: Duration = Duration::from_secs(1);

static STOP: AtomicBool = AtomicBool::new(false);
/// SIGUSR1: a full pass now (`gust flush`).
static FLUSH: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" fn on_flush(_: libc::c_int) {
    FLUSH.store(true, Ordering::SeqCst);
}

/// The signals a follower acts on. Whoever starts one may block them across the
/// exec (`gust start --cache-of` does): a signal sent before the handlers exist then
/// waits for them instead of killing the follower (SIGUSR1's and SIGINT's default).
pub const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1];

fn install_handlers() {
    // SAFETY: the handlers only store to atomics, which is async-signal-safe; the
    // mask is this thread's (the main thread's, before any other starts).
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGUSR1, on_flush as *const () as libc::sighandler_t);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Sleeps up to `d`, waking early when told to stop.
fn nap(d: Duration) {
    let until = Instant::now() + d;
    while !STOP.load(Ordering::SeqCst) && !FLUSH.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the event logs said since the last read.
#[derive(Default)]
struct Changed {
    /// Files closed after writing or renamed into place (a file still being
    /// written is not copied; an empty file made and never written goes with the
    /// final pass).
    written: HashSet<String>,
    /// Files whose attributes changed (their objects' properties may have to follow).
    attributes: HashSet<String>,
    /// Some events were lost: a full pass is due.
    lost: bool,
}

impl Changed {
    fn read(&mut self, cursors: &mut EventCursors, c: &Client) {
        let lost = cursors.read(c, |e| {
            if e.is_dir {
                return;
            }
            match e.kind {
                EventKind::CloseWrite | EventKind::MovedTo => {
                    self.written.insert(e.path.clone());
                }
                EventKind::Attrib => {
                    self.attributes.insert(e.path.clone());
                }
                _ => {}
            }
        });
        self.lost |= lost;
    }

    fn is_empty(&self) -> bool {
        self.written.is_empty() && self.attributes.is_empty() && !self.lost
    }

    /// A pass over what changed (every file if events were lost).
    fn pass(&self, o: &Options) -> Options {
        let mut pass = o.clone();
        if !self.lost {
            pass.only = Some(self.written.union(&self.attributes).cloned().collect());
        }
        pass.properties_changed = self.attributes.clone();
        pass
    }
}

/// Adds a pass's summary into the running one.
fn add(total: &mut Summary, pass: Summary) {
    total.files += pass.files;
    total.symlinks += pass.symlinks;
    total.bytes += pass.bytes;
    total.directories = total.directories.max(pass.directories);
    total.properties += pass.properties;
    total.failures = pass.failures; // a later pass tries every earlier failure again
}

/// Writes a flush's summary with its generation number (atomically: a temporary
/// file renamed), for `gust flush` to wait on.
fn write_flushed(file: &Path, generation: u64, s: &Summary) -> Result<(), String> {
    let mut v = serde_json::to_value(s).map_err(|e| e.to_string())?;
    v["generation"] = generation.into();
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, v.to_string())
        .and_then(|_| std::fs::rename(&tmp, file))
        .map_err(|e| format!("{}: {e}", file.display()))
}

pub fn run(c: &Client, o: &Options, max_bandwidth: Option<u64>, flush_file: Option<&Path>) -> Result<Summary, String> {
    o.check_shared_paths()?;
    install_handlers();
    let started = Instant::now();
    let prefixes = o.sources.iter().map(|s| c.internal_path(s).unwrap_or_else(|| s.clone())).collect();
    // Cursors first: whatever closes during the first pass is seen afterwards.
    let mut cursors = EventCursors::now(c, prefixes)?;
    let mut quiet = o.clone();
    quiet.progress = false;
    let mut total = run_throttled(c, &quiet, max_bandwidth)?;
    let mut flushes = 0u64;
    // What changed and has not been copied yet: a pass that fails keeps it for the
    // next, and the flushes and the final pass take it along.
    let mut pending = Changed::default();
    while !STOP.load(Ordering::SeqCst) {
        nap(INTERVAL);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        pending.read(&mut cursors, c);
        if FLUSH.swap(false, Ordering::SeqCst) {
            // Everything, now, at full speed; then say so.
            flushes += 1;
            let mut full = quiet.clone();
            full.properties_changed = pending.attributes.clone();
            match run_once(c, &full) {
                Ok(s) => {
                    if let Some(f) = flush_file {
                        if let Err(e) = write_flushed(f, flushes, &s) {
                            eprintln!("gust stage: flush: {e}");
                        }
                    }
                    add(&mut total, s);
                    pending = Changed::default();
                }
                Err(e) => eprintln!("gust stage: flush: {e}"),
            }
            continue;
        }
        if pending.is_empty() {
            continue;
        }
        match run_throttled(c, &pending.pass(&quiet), max_bandwidth) {
            Ok(s) => {
                add(&mut total, s);
                pending = Changed::default();
            }
            Err(e) => eprintln!("gust stage: following: {e} (trying again)"),
        }
    }
    // The job is done: everything that is left, at full speed.
    pending.read(&mut cursors, c);
    let mut last_pass = o.clone();
    last_pass.properties_changed = pending.attributes;
    let last = run_once(c, &last_pass)?;
    add(&mut total, last);
    total.skipped = 0;
    total.seconds = started.elapsed().as_secs_f64();
    Ok(total)
}
