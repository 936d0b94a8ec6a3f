//! Staging between an object store and GustFS: `gust stage in s3://BUCKET/PREFIX
//! DEST` and `gust stage out SRC… s3://BUCKET/PREFIX`.
//!
//! Keys map to paths as the AWS CLI's recursive copy maps them: the objects under
//! `PREFIX/` become the tree under DEST (a key's `/` makes directories, a key that
//! ends in `/` is an empty directory), and a URL that names one object stages that
//! object as the file DEST. On the way out every file becomes the object
//! `PREFIX/relative/path`; directories are not objects (empty ones are not kept),
//! and symlinks are reported as not staged (stores have no links).
//!
//! A stage-in is carried out by the daemons, as from a shared file system: the
//! planner presigns one GET URL per object (no daemon holds credentials) and each
//! daemon fetches the ranges of the chunks it holds (gust_objstore::presigned).
//! A stage-out, and a stage-in `--via client`, run in this process, `8 × --jobs`
//! requests in flight: large objects in ranged GETs and multipart uploads of
//! [`PART_BYTES`], pieces of one file on several threads at once. The guarantees
//! of the other stages hold:
//! * resumable: a file whose GustFS copy has the object's size and LastModified
//!   time is skipped on the way in; an object that has the file's size and was
//!   written in or after the second of the file's modification time is skipped on
//!   the way out;
//! * nothing half-written looks complete: a file staged in gets the object's time
//!   only once all its pieces are in, and every piece is fetched with `If-Match`
//!   on the ETag the listing gave (an object replaced mid-copy fails, named); an
//!   object appears only when its single PUT or its multipart upload completes (a
//!   failed upload is aborted);
//! * `--verify` recomputes each object's ETag from the GustFS bytes.
//!
//! Objects' user metadata and tags are the files' `user.s3.meta.*` and
//! `user.s3.tag.*` extended attributes (metadata.rs).
//!
//! Endpoint and credentials come from the AWS environment and files
//! (gust_objstore::config); nothing secret is in argv or the output.

mod copy;
mod metadata;
mod verify;

use crate::report::{self, Failure, Summary};
use crate::tree::{self, Existing, Filter, Item};
use crate::{batch, inbound, Direction, Options, Via};
use gust_client::{path, Client, Kind};
use gust_objstore::{Config, Object, ObjectUrl, Store};
use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

/// Size of a ranged GET and of a multipart part: the AWS CLI's default chunk size,
/// large enough that a request's latency is small beside its transfer, and what
/// `--verify` assumes when the store does not say.
pub const PART_BYTES: u64 = 8 << 20;

/// Requests in flight to the store per `--jobs`: a request to a store waits mostly
/// on latency, so it takes several to fill a link.
const REQUESTS_PER_JOB: usize = 8;

/// The object store side of a stage, if it has one: `Some(url)` when the sources
/// of a stage-in or the destination of a stage-out is an `s3://` URL.
pub(crate) fn url_of(o: &Options) -> Result<Option<ObjectUrl>, String> {
    match o.direction {
        Direction::In => {
            let urls: Vec<ObjectUrl> = o
                .sources
                .iter()
                .map(|s| ObjectUrl::parse(s))
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .flatten()
                .collect();
            match (urls.len(), o.sources.len()) {
                (0, _) => Ok(None),
                (1, 1) => Ok(urls.into_iter().next()),
                _ => Err("a stage-in from an object store takes one s3:// source".into()),
            }
        }
        Direction::Out => ObjectUrl::parse(&o.dest),
    }
}

/// One stage's plan: the items (as for file systems; `src` or `dest` is the
/// object's URL) with the key and ETag of each object.
pub(crate) struct Plan {
    pub items: Vec<Item>,
    pub keys: Vec<String>,
    pub etags: Vec<String>,
}

/// What the threads of a stage share.
pub(crate) struct Job<'a> {
    pub c: &'a Client,
    pub o: &'a Options,
    pub store: &'a Store,
    pub plan: &'a Plan,
    pub todo: &'a [usize],
    pub progress: &'a report::Progress,
    pub throttle: &'a batch::Throttle,
}

impl Job<'_> {
    pub fn threads(&self) -> usize {
        self.o.jobs.max(1) * REQUESTS_PER_JOB
    }
}

pub(crate) fn run(c: &Client, o: &Options, url: &ObjectUrl, max_bandwidth: Option<u64>) -> Result<Summary, String> {
    let started = Instant::now();
    let cfg = Config::from_env()?;
    let store = Store::open(&cfg, &url.bucket)?;
    let filter = Filter::new(&o.include, &o.exclude)?;
    let mut failures = Vec::new();
    let mut plan = match o.direction {
        Direction::In => plan_in(c, o, &store, url, &filter, &mut failures)?,
        Direction::Out => plan_out(c, o, url, &filter)?,
    };
    if o.direction == Direction::Out {
        // Symlinks are not objects.
        for it in plan.items.iter().filter(|i| i.is_symlink()) {
            failures.push(Failure {
                path: it.src.clone(),
                reason: "a symlink: object stores have no links (stage its target)".into(),
            });
        }
    }
    let existing = match o.direction {
        Direction::In => tree::existing_in_gust(c, &plan.items),
        Direction::Out => existing_objects(&store, url, &mut plan)?,
    };
    let wanted = |i: &Item| match o.direction {
        Direction::In => true,
        Direction::Out => i.is_file(),
    };
    let (todo, skipped): (Vec<usize>, Vec<usize>) =
        (0..plan.items.len()).filter(|&i| wanted(&plan.items[i])).partition(|&i| !existing.is_complete(&plan.items[i]));
    let files: Vec<usize> = todo.iter().copied().filter(|&i| plan.items[i].is_file()).collect();
    let bytes: u64 = files.iter().map(|&i| plan.items[i].size).sum();
    let progress = report::Progress::new(o.progress, files.len() as u64, bytes);
    let (dirs, todo) = match o.direction {
        Direction::In => {
            let (dirs, failed) = tree::make_dirs(c, Direction::In, &plan.items, &existing, &mut failures);
            let (under, rest): (Vec<usize>, Vec<usize>) =
                todo.into_iter().partition(|&i| failed.iter().any(|d| tree::is_under(&plan.items[i].dest, d)));
            for i in under.into_iter().filter(|&i| plan.items[i].is_file()) {
                failures.push(Failure {
                    path: plan.items[i].src.clone(),
                    reason: "its directory could not be created".into(),
                });
            }
            (dirs, rest)
        }
        Direction::Out => (Vec::new(), todo),
    };
    let todo = match o.direction {
        Direction::In if o.metadata => {
            metadata::fetch(&store, &mut plan, todo, o.jobs.max(1) * REQUESTS_PER_JOB, &mut failures)
        }
        _ => todo,
    };
    let throttle = batch::Throttle::new(max_bandwidth);
    let job = Job { c, o, store: &store, plan: &plan, todo: &todo, progress: &progress, throttle: &throttle };
    let via_daemons = o.direction == Direction::In && o.via != Via::Client;
    let moved = match o.direction {
        Direction::In if via_daemons => by_daemons(&job, &existing),
        Direction::In => copy::copy_in(&job),
        Direction::Out => copy::copy_out(&job),
    };
    progress.finish();
    failures.extend(moved.failures);
    let mut verified = None;
    if o.verify {
        let ok: Vec<usize> =
            moved.staged.iter().chain(skipped.iter()).copied().filter(|&i| plan.items[i].is_file()).collect();
        let (n, bad) = verify::check(&job, &ok, &moved.etags);
        verified = Some(n);
        failures.extend(bad);
    }
    // Up to date in bytes, changed in attributes: the properties alone go back.
    let recheck: Vec<usize> =
        skipped.iter().copied().filter(|&i| o.properties_changed.contains(&plan.items[i].src)).collect();
    let properties = match o.direction {
        Direction::Out if !recheck.is_empty() => metadata::write_back(&job, &recheck, &mut failures),
        _ => 0,
    };
    tree::finish_dirs(c, Direction::In, &plan.items, &dirs, &mut failures);
    failures.sort_by(|a, b| a.path.cmp(&b.path));
    let items = &plan.items;
    Ok(Summary {
        direction: match o.direction {
            Direction::In => "in",
            Direction::Out => "out",
        },
        via: if via_daemons { "daemons" } else { "client" },
        files: moved.staged.iter().filter(|&&i| items[i].is_file()).count() as u64,
        symlinks: 0,
        directories: dirs.len() as u64,
        skipped: skipped.iter().filter(|&&i| !items[i].is_dir()).count() as u64,
        bytes: moved.staged.iter().map(|&i| items[i].size).sum(),
        seconds: started.elapsed().as_secs_f64(),
        verified,
        properties,
        failures,
    })
}

/// A stage-in by the daemons, as from a shared file system (inbound.rs), each
/// reading from a presigned URL of its objects: the daemon holding a chunk fetches
/// its range, small objects are fetched whole by their metadata daemons.
fn by_daemons(job: &Job, existing: &Existing) -> copy::Copied {
    let plan = job.plan;
    let sources: Vec<String> = (0..plan.items.len())
        .map(|i| match plan.items[i].is_file() {
            true => job.store.presign_get(&plan.keys[i], &plan.etags[i]),
            false => String::new(),
        })
        .collect();
    let moved = inbound::copy(crate::Job {
        c: job.c,
        o: job.o,
        items: &plan.items,
        todo: job.todo,
        existing,
        progress: job.progress,
        throttle: job.throttle,
        sources: Some(&sources),
    });
    let failures = moved.failures.into_iter().map(|f| Failure { reason: object_reason(&f.reason), ..f }).collect();
    copy::Copied { staged: moved.staged, failures, etags: Default::default() }
}

/// A daemon's failure to fetch, in the words of the object store side (the
/// daemons report errnos, gust_objstore::presigned::read_range says which).
fn object_reason(why: &str) -> String {
    for (errno, says) in [
        (libc::ENOENT, "no such object (deleted while being staged?)"),
        (libc::EACCES, "access denied by the store (an expired or refused presigned URL)"),
        (libc::ECONNREFUSED, "cannot reach the object store (connection refused)"),
        (libc::ETIMEDOUT, "cannot reach the object store (timed out)"),
        (libc::ECONNRESET, "cannot reach the object store (the connection was cut)"),
    ] {
        let text = crate::reason(errno);
        if let Some(daemon) = why.strip_suffix(&text) {
            return format!("{daemon}{says}");
        }
    }
    why.to_string()
}

/// The objects under the URL as items with GustFS destinations under `o.dest`.
fn plan_in(
    c: &Client,
    o: &Options,
    store: &Store,
    url: &ObjectUrl,
    filter: &Filter,
    failures: &mut Vec<Failure>,
) -> Result<Plan, String> {
    let listed = store.list(&url.key).map_err(|e| format!("{url}: {e}"))?;
    let dest_root = c.internal_path(&o.dest).unwrap_or_else(|| o.dest.clone());
    let mut plan = Plan { items: Vec::new(), keys: Vec::new(), etags: Vec::new() };
    let prefix = url.dir_prefix();
    let under: Vec<&Object> = listed.iter().filter(|ob| ob.key.starts_with(&prefix)).collect();
    let exact = listed.iter().find(|ob| !url.key.is_empty() && ob.key == url.key);
    if let (Some(ob), true) = (exact, under.is_empty()) {
        // One object: it becomes the file DEST, as `cp` would make it.
        if only_admits(o, &dest_root) {
            push_object(&mut plan, url, ob, dest_root);
        }
        return Ok(plan);
    }
    if under.is_empty() {
        return Err(format!("{url}: no such object, and no objects under it"));
    }
    // Directories by relative path, with the newest time of what is under them.
    let mut dirs: BTreeMap<String, i64> = BTreeMap::new();
    dirs.insert(String::new(), 0);
    let mut excluded_dirs: Vec<String> = Vec::new();
    let mut files: Vec<(String, &Object)> = Vec::new();
    for ob in under {
        let rel = &ob.key[prefix.len()..];
        let (rel, is_dir) = match rel.strip_suffix('/') {
            Some(r) => (r, true),
            None => (rel, false),
        };
        if rel.is_empty() {
            continue; // the prefix's own directory marker
        }
        if rel.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
            failures.push(Failure {
                path: url.of_key(&ob.key),
                reason: "the key is not a path (an empty, `.` or `..` component)".into(),
            });
            continue;
        }
        let mut ancestors: Vec<&str> = rel.match_indices('/').map(|(i, _)| &rel[..i]).collect();
        if is_dir {
            ancestors.push(rel);
        }
        if ancestors.iter().any(|a| excluded_dirs.iter().any(|x| x == a) || !filter.admits(a, true)) {
            excluded_dirs.extend(ancestors.iter().filter(|a| !filter.admits(a, true)).map(|a| a.to_string()));
            continue;
        }
        for a in &ancestors {
            let t = dirs.entry(a.to_string()).or_insert(0);
            *t = (*t).max(ob.mtime_ns);
        }
        let root = dirs.get_mut("").expect("inserted");
        *root = (*root).max(ob.mtime_ns);
        if !is_dir && filter.admits(rel, false) {
            files.push((rel.to_string(), ob));
        }
    }
    for (rel, mtime_ns) in &dirs {
        let dest = if rel.is_empty() { dest_root.clone() } else { path::join(&dest_root, rel) };
        let src = if rel.is_empty() { url.to_string() } else { url.of_key(&format!("{prefix}{rel}/")) };
        plan.items.push(Item {
            kind: Kind::Dir,
            src,
            dest,
            size: 0,
            mode: 0o755,
            mtime_ns: *mtime_ns,
            atime_ns: *mtime_ns,
            target: String::new(),
            file_id: 0,
            xattrs: Vec::new(),
        });
        plan.keys.push(String::new());
        plan.etags.push(String::new());
    }
    for (rel, ob) in files {
        let dest = path::join(&dest_root, &rel);
        if only_admits(o, &dest) {
            push_object(&mut plan, url, ob, dest);
        }
    }
    // Parents before children (make_dirs), the files after their directories.
    let mut rows: Vec<(Item, (String, String))> =
        plan.items.into_iter().zip(plan.keys.into_iter().zip(plan.etags)).collect();
    rows.sort_by(|a, b| a.0.dest.cmp(&b.0.dest));
    let (items, (keys, etags)) = rows.into_iter().unzip();
    Ok(Plan { items, keys, etags })
}

fn only_admits(o: &Options, dest: &str) -> bool {
    o.only.as_ref().is_none_or(|only: &HashSet<String>| only.contains(dest))
}

fn push_object(plan: &mut Plan, url: &ObjectUrl, ob: &Object, dest: String) {
    plan.items.push(Item {
        kind: Kind::File,
        src: url.of_key(&ob.key),
        dest,
        size: ob.size,
        mode: 0o644,
        mtime_ns: ob.mtime_ns,
        atime_ns: ob.mtime_ns,
        target: String::new(),
        file_id: 0,
        xattrs: Vec::new(),
    });
    plan.keys.push(ob.key.clone());
    plan.etags.push(ob.etag.clone());
}

/// The GustFS files under the sources, each with the key it becomes: the tree is
/// walked with `/KEY` as its destination root, so a destination path is `/` and
/// the object's key.
fn plan_out(c: &Client, o: &Options, url: &ObjectUrl, filter: &Filter) -> Result<Plan, String> {
    let root = format!("/{}", url.key.trim_end_matches('/'));
    let mut items = Vec::new();
    for src in &o.sources {
        let dest = if o.sources.len() > 1 { tree::join_name(&root, src, Direction::Out) } else { root.clone() };
        tree::walk_gust(c, src, &dest, filter, o.only.as_ref(), &mut items)?;
    }
    let mut keys = Vec::new();
    for it in &mut items {
        let key = it.dest.trim_start_matches('/').to_string();
        if it.is_file() && key.is_empty() {
            return Err(format!("{url}: a file needs a key: give s3://{}/NAME", url.bucket));
        }
        it.dest = url.of_key(&key);
        keys.push(key);
    }
    let etags = vec![String::new(); items.len()];
    Ok(Plan { items, keys, etags })
}

/// What the store holds under the destination: an object is complete if it has
/// the file's size and was written at or after the file's modification time (the
/// store keeps no mtime of ours), to the second. Fills the plan's ETags of what exists (for
/// --verify of skipped files).
fn existing_objects(store: &Store, url: &ObjectUrl, plan: &mut Plan) -> Result<Existing, String> {
    let listed = store.list(url.key.trim_end_matches('/')).map_err(|e| format!("{url}: {e}"))?;
    let by_key: std::collections::HashMap<&str, &Object> = listed.iter().map(|o| (o.key.as_str(), o)).collect();
    let mut e = Existing::default();
    for (i, it) in plan.items.iter().enumerate() {
        let Some(ob) = by_key.get(plan.keys[i].as_str()) else { continue };
        plan.etags[i] = ob.etag.clone();
        // Stores keep LastModified in whole seconds: the file's time is compared at
        // that precision (a file changed in the second of its upload is missed).
        let second = it.mtime_ns - it.mtime_ns.rem_euclid(1_000_000_000);
        let mtime = if ob.mtime_ns >= second { it.mtime_ns } else { ob.mtime_ns.min(it.mtime_ns - 1) };
        e.insert(it.dest.clone(), Kind::File, ob.size, mtime);
    }
    Ok(e)
}
