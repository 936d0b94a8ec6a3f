//! The maintainer of one view (`gust view follow NAME`, run detached by `gust view
//! add`): it keeps the view's entries what the store says, until it is killed.
//!
//! * A full resync first, then every `resync_secs`, and at once after the event
//!   stream was cut (events may have been lost meanwhile).
//! * With an event source, a thread follows the store's events from just before
//!   the first resync began, so nothing that happens during the listing is missed,
//!   and applies each to the one entry it concerns. Events and resyncs take turns
//!   on the view (one lock): an event waits for a resync, and the resync's listing
//!   is never older than an event already applied.
//! * Its status (`Status`) is written to a file four times a second and after each
//!   resync: state, entries, events applied and their lag behind the store.
//!
//! Not for: what an event or a resync changes (sync.rs), starting and stopping the
//! process (gust-cli).

use crate::links::LinkView;
use crate::sync::View;
use crate::{event_address, Definition, Status};
use gust_client::{Client, EventCursors, EventKind};
use gust_objevents::{bucket_prefix, object_key, subscribe};
use gust_objstore::{Config, Object, Properties, Store};
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the status file is rewritten.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// Lags kept for the status's percentiles.
const LAGS_KEPT: usize = 10_000;
/// Waits between reconnects of a cut event stream (doubling up to the last).
const RECONNECT_FIRST: Duration = Duration::from_millis(200);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

struct Shared {
    status: Status,
    lags: VecDeque<f64>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn write_status(path: &Path, s: &Mutex<Shared>) {
    let text = {
        let mut g = s.lock().unwrap_or_else(|e| e.into_inner());
        let mut lags: Vec<f64> = g.lags.iter().copied().collect();
        lags.sort_by(|a, b| a.total_cmp(b));
        g.status.lag_p50_ms = percentile(&lags, 0.5);
        g.status.lag_p99_ms = percentile(&lags, 0.99);
        serde_json::to_string_pretty(&g.status).unwrap_or_default()
    };
    let tmp = path.with_extension("status.tmp");
    if std::fs::write(&tmp, text + "\n").is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// The properties an event's entry carries (SeaweedFS keeps them in the entry).
fn properties_of(e: &gust_objevents::Entry) -> Properties {
    let text = |v: &[(String, Vec<u8>)]| -> Vec<(String, String)> {
        v.iter().map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned())).collect()
    };
    Properties { meta: text(&e.meta), tags: text(&e.tags) }
}

/// Follows the store for view `def` with client `c`, writing its status to
/// `status_path`. Returns only if the first resync fails (no store setup, no
/// such bucket, access denied, no store at the endpoint); otherwise runs until
/// the process ends.
pub fn follow(c: &Client, def: &Definition, status_path: &Path) -> Result<(), String> {
    if def.gust_dir().is_some() {
        return follow_links(c, def, status_path);
    }
    let cfg = Config::from_env()?;
    let view = View::new(c, def)?;
    let (bucket, prefix) = (view.source().0.to_string(), view.source().1.to_string());
    let store = Store::open(&cfg, &bucket)?;
    let view = Mutex::new(view);
    let shared = Mutex::new(Shared {
        status: Status { name: def.name.clone(), pid: std::process::id(), ..Default::default() },
        lags: VecDeque::new(),
    });
    let resync_now = AtomicBool::new(true);
    let since = gust_proto::now_ns() - 1_000_000_000;
    let set = |f: &dyn Fn(&mut Status)| f(&mut shared.lock().unwrap_or_else(|e| e.into_inner()).status);

    let last_resync = std::cell::Cell::new(Instant::now());
    let resync = || -> Result<(), String> {
        set(&|s| s.state = "resyncing".into());
        write_status(status_path, &shared);
        let started = Instant::now();
        let r = view.lock().unwrap_or_else(|e| e.into_inner()).resync(&store);
        last_resync.set(Instant::now());
        let r = match r {
            Ok(n) => {
                let secs = started.elapsed().as_secs_f64();
                let following = def.events.is_some();
                set(&|s| {
                    s.objects = n.objects;
                    s.skipped = n.skipped;
                    s.resyncs += 1;
                    s.last_resync_ns = gust_proto::now_ns();
                    s.last_resync_secs = secs;
                    s.error = None;
                    s.state = if following { "following events" } else { "polling" }.into();
                });
                Ok(())
            }
            Err(e) => {
                resync_now.store(true, Ordering::Relaxed);
                set(&|s| {
                    s.error = Some(e.clone());
                    s.state = "resync failed (retrying)".into();
                });
                Err(e)
            }
        };
        write_status(status_path, &shared);
        r
    };
    // The first resync is what `gust view add` waits for: its failure (no such
    // bucket, access denied, no store there) is the answer to the user. It runs
    // before the events are followed (from `since`, taken before it: none is
    // missed), so a failure leaves no thread behind. Later ones are tried again.
    resync_now.store(false, Ordering::Relaxed);
    resync()?;
    std::thread::scope(|scope| {
        if let Some(events) = &def.events {
            let addr = event_address(events)?.to_string();
            let (view, shared, resync_now, store) = (&view, &shared, &resync_now, &store);
            let (bucket, prefix, name) = (bucket.clone(), prefix.clone(), def.name.clone());
            scope.spawn(move || {
                let mut since = since;
                let mut pause = RECONNECT_FIRST;
                loop {
                    let mut last = since;
                    let r =
                        subscribe(&addr, &bucket_prefix(&bucket, &prefix), since, &format!("gust-view-{name}"), |ev| {
                            last = last.max(ev.ts_ns);
                            let as_object = |e: &gust_objevents::Entry| {
                                let key = object_key(&bucket, &e.path)?;
                                (!e.is_dir).then(|| {
                                    let o = Object {
                                        key,
                                        size: e.size,
                                        mtime_ns: e.mtime_ns,
                                        etag: e.etag.clone().unwrap_or_default(),
                                    };
                                    (o, properties_of(e))
                                })
                            };
                            let old = ev.old.as_ref().and_then(as_object);
                            let new = ev.new.as_ref().and_then(as_object);
                            let mut v = view.lock().unwrap_or_else(|e| e.into_inner());
                            let mut delta = 0;
                            let mut error = None;
                            if let Some((o, _)) =
                                old.as_ref().filter(|(o, _)| new.as_ref().is_none_or(|(n, _)| n.key != o.key))
                            {
                                v.apply(store, &o.key, None).map(|d| delta += d).unwrap_or_else(|e| error = Some(e));
                            }
                            if let Some((n, props)) = &new {
                                v.apply(store, &n.key, Some((n, Some(props))))
                                    .map(|d| delta += d)
                                    .unwrap_or_else(|e| error = Some(e));
                            }
                            drop(v);
                            let lag_ms = (gust_proto::now_ns() - ev.ts_ns) as f64 / 1e6;
                            let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
                            g.status.events += 1;
                            g.status.objects = (g.status.objects as i64 + delta).max(0) as u64;
                            g.status.last_event_ns = ev.ts_ns;
                            g.status.last_lag_ms = lag_ms;
                            g.status.state = "following events".into();
                            g.status.events_error = None;
                            if let Some(e) = error {
                                // The entry is mended by the next resync.
                                g.status.error = Some(e);
                                resync_now.store(true, Ordering::Relaxed);
                            }
                            if g.lags.len() == LAGS_KEPT {
                                g.lags.pop_front();
                            }
                            g.lags.push_back(lag_ms);
                            ControlFlow::Continue(())
                        });
                    if let Err(e) = r {
                        let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
                        g.status.state = "events lost".into();
                        g.status.events_error = Some(e.to_string());
                    }
                    // Resumed where it was cut; a resync mends what the gap lost.
                    // The pause grows while nothing comes through, and starts
                    // over once events did.
                    if last > since {
                        pause = RECONNECT_FIRST;
                    }
                    since = last + 1;
                    resync_now.store(true, Ordering::Relaxed);
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(RECONNECT_MAX);
                }
            });
        }
        let every = Duration::from_secs(def.resync_secs.max(1));
        let mut last_status = Instant::now();
        loop {
            if resync_now.swap(false, Ordering::Relaxed) || last_resync.get().elapsed() >= every {
                let _ = resync();
            }
            if last_status.elapsed() >= STATUS_EVERY {
                write_status(status_path, &shared);
                last_status = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// How often a view of a GustFS directory reads the event logs.
const EVENTS_EVERY: Duration = Duration::from_millis(50);

/// `follow` of a view of a GustFS directory: GustFS's own event logs (one cursor
/// per daemon, taken before the first resync), read every `EVENTS_EVERY`.
fn follow_links(c: &Client, def: &Definition, status_path: &Path) -> Result<(), String> {
    let mut view = LinkView::new(c, def)?;
    let mut prefixes = vec![view.source().to_string()];
    if def.uses_attributes() {
        // An attribute of a file the view links changes at its link path.
        prefixes.push(format!("{}/", gust_proto::path::LINKS_DIR));
    }
    let mut cursors = EventCursors::now(c, prefixes)?;
    let shared = Mutex::new(Shared {
        status: Status { name: def.name.clone(), pid: std::process::id(), ..Default::default() },
        lags: VecDeque::new(),
    });
    let set = |f: &mut dyn FnMut(&mut Shared)| f(&mut shared.lock().unwrap_or_else(|e| e.into_inner()));
    let every = Duration::from_secs(def.resync_secs.max(1));
    let mut due = true;
    let mut first = true;
    let mut last_resync = Instant::now();
    let mut last_status = Instant::now();
    loop {
        if due || last_resync.elapsed() >= every {
            set(&mut |g| g.status.state = "resyncing".into());
            let started = Instant::now();
            match view.resync() {
                Ok(n) => {
                    let secs = started.elapsed().as_secs_f64();
                    set(&mut |g| {
                        g.status.objects = n.objects;
                        g.status.resyncs += 1;
                        g.status.last_resync_ns = gust_proto::now_ns();
                        g.status.last_resync_secs = secs;
                        g.status.error = None;
                        g.status.state = "following events".into();
                    });
                    due = false;
                }
                Err(e) if first => return Err(e),
                Err(e) => set(&mut |g| {
                    g.status.error = Some(e.clone());
                    g.status.state = "resync failed (retrying)".into();
                }),
            }
            first = false;
            last_resync = Instant::now();
            write_status(status_path, &shared);
        }
        std::thread::sleep(EVENTS_EVERY);
        // Files to look at again (with their events' times); a directory removed
        // or renamed, or events lost, call for a resync.
        let mut paths: Vec<(String, i64)> = Vec::new();
        let mut dirs_changed = false;
        let lost = cursors.read(c, |e| {
            if e.is_dir {
                dirs_changed |= matches!(e.kind, EventKind::Delete | EventKind::MovedFrom | EventKind::MovedTo);
            } else if let Some(src) = view.source_of_link(&e.path) {
                paths.push((src, e.time_ns));
            } else if !gust_proto::path::is_link_path(&e.path) {
                paths.push((e.path.clone(), e.time_ns));
            }
        });
        due |= lost || dirs_changed;
        let mut seen = std::collections::HashSet::new();
        for (p, time_ns) in paths {
            if !seen.insert(p.clone()) {
                continue;
            }
            let r = view.apply(&p);
            let lag_ms = (gust_proto::now_ns() - time_ns) as f64 / 1e6;
            set(&mut |g| {
                g.status.events += 1;
                g.status.last_event_ns = time_ns;
                g.status.last_lag_ms = lag_ms;
                match &r {
                    Ok(d) => g.status.objects = (g.status.objects as i64 + d).max(0) as u64,
                    Err(e) => g.status.error = Some(e.clone()),
                }
                if g.lags.len() == LAGS_KEPT {
                    g.lags.pop_front();
                }
                g.lags.push_back(lag_ms);
            });
            due |= r.is_err();
        }
        if last_status.elapsed() >= STATUS_EVERY {
            write_status(status_path, &shared);
            last_status = Instant::now();
        }
    }
}
