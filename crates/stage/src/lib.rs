//! Staging between the shared (parallel) file system and GustFS: `gust stage in|out`.
//!
//! A stage is planned in this process and carried out by the daemons: each daemon
//! copies the chunks it holds directly from (stage-in) or to (stage-out) the file on
//! the shared file system, so staging bandwidth grows with the node count, and the
//! metadata of many files travels in batches (one request per daemon per batch).
//! A path only this node sees is staged through this process instead
//! ([`Via::Client`]); the daemons are faster for everything else, even one small file.
//!
//! Every run is resumable: a file whose destination already has its size and
//! modification time is skipped. Nothing half-written is reported as staged: a file
//! staged in shows its size only once all its chunks are in, a file staged out gets
//! its name only once complete. A failure on one file does not stop the others; the
//! summary lists each with its reason.
//!
//! Modules: `tree` (walking and filtering both sides), `inbound` and `outbound` (the
//! daemons' copies), `through_client` (the copy through this process), `batch` (per
//! daemon batches and the threads that send them), `verify` (checksums end to end),
//! `report` (progress bar, summary, JSON), `reads` (the read record of a run and
//! stage-in from it), `follow` (stage-out while the job runs).

mod batch;
pub mod follow;
mod inbound;
mod object;
mod outbound;
pub mod reads;
pub mod report;
mod through_client;
pub mod tree;
mod verify;

use gust_client::Client;
pub use report::{Failure, Summary};
use std::collections::HashSet;
use std::time::Instant;
use tree::{Filter, Item};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Shared file system -> GustFS.
    In,
    /// GustFS -> shared file system.
    Out,
}

/// Who copies the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The daemons (measured faster on every size here, down to one file of 3
    /// bytes: docs/PERFORMANCE.md, "Staging").
    Auto,
    /// Each daemon copies the chunks it holds.
    Daemons,
    /// This process copies everything through the client core: for a source or
    /// destination that only this node sees (a login node's disk, a path not
    /// mounted where the daemons run).
    Client,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub direction: Direction,
    /// Sources: local paths (in) or GustFS paths (out). With one source the
    /// destination is its copy; with several, each is copied into the destination
    /// directory under its own name.
    pub sources: Vec<String>,
    pub dest: String,
    pub via: Via,
    /// Requests in flight per daemon (daemons) or copy threads (client).
    pub jobs: usize,
    /// Compare checksums of every selected file's source and destination after the
    /// copy (reading both again).
    pub verify: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    /// Stage only the files and symlinks with these GustFS paths (the destinations
    /// of a stage-in, the sources of a stage-out): a read record's files, or the
    /// files `--follow` saw closed.
    pub only: Option<HashSet<String>>,
    /// Show a progress bar (when stderr is a terminal).
    pub progress: bool,
    /// From an object store: give each file its object's user metadata and tags as
    /// `user.s3.meta.*` and `user.s3.tag.*` attributes (one HEAD request per object).
    pub metadata: bool,
    /// To an object store: files (GustFS paths) whose attributes changed (`--follow`
    /// saw it). An object whose bytes are up to date has its properties compared
    /// with the file's and written back alone if they differ.
    pub properties_changed: HashSet<String>,
}

impl Options {
    pub fn new(direction: Direction, sources: Vec<String>, dest: String) -> Self {
        Options {
            direction,
            sources,
            dest,
            via: Via::Auto,
            jobs: 2,
            verify: false,
            include: Vec::new(),
            exclude: Vec::new(),
            only: None,
            progress: true,
            metadata: true,
            properties_changed: HashSet::new(),
        }
    }

    /// The shared file system's side of the stage (the sources of a stage-in, the
    /// destination of a stage-out) must be paths once the object store's side
    /// (`s3://`, object/mod.rs) is taken out: every other `SCHEME://` is refused,
    /// never taken for a local directory named `gs:`.
    pub fn check_shared_paths(&self) -> Result<(), String> {
        let shared: Vec<&String> = match self.direction {
            Direction::In => self.sources.iter().collect(),
            Direction::Out => vec![&self.dest],
        };
        shared
            .into_iter()
            .filter(|p| !matches!(gust_objstore::ObjectUrl::parse(p), Ok(Some(_))))
            .try_for_each(|p| refuse_url(p))
    }
}

/// `Err` for a `SCHEME://…` argument (RFC 3986 scheme: a letter, then letters,
/// digits, `+`, `-` or `.`) where a path is wanted.
pub fn refuse_url(arg: &str) -> Result<(), String> {
    let Some((scheme, _)) = arg.split_once("://") else { return Ok(()) };
    let mut chars = scheme.chars();
    let is_scheme = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if is_scheme {
        return Err(format!(
            "{arg}: a {scheme}:// URL, but GustFS stages to and from file systems and s3:// object \
             stores only; give a path (for a directory named {scheme}:, write ./{arg})"
        ));
    }
    Ok(())
}

/// One stage's files for a mover (inbound.rs, outbound.rs, through_client.rs):
/// the items, which of them to copy, what the destination holds, and the
/// progress bar and bandwidth bound they share.
#[derive(Clone, Copy)]
pub(crate) struct Job<'a> {
    pub c: &'a Client,
    pub o: &'a Options,
    pub items: &'a [Item],
    pub todo: &'a [usize],
    pub existing: &'a tree::Existing,
    pub progress: &'a report::Progress,
    pub throttle: &'a batch::Throttle,
    /// What the daemons read each item from, where that is not its `src`: the
    /// presigned URLs of a stage-in from an object store (object/mod.rs).
    pub sources: Option<&'a [String]>,
}

impl Job<'_> {
    /// The external source the daemons read item `i` from.
    pub fn source(&self, i: usize) -> &str {
        self.sources.map_or(&self.items[i].src, |s| &s[i])
    }
}

/// What a mover reports back: files done with their bytes, failures.
pub(crate) struct Moved {
    pub staged: Vec<usize>,
    pub failures: Vec<Failure>,
}

/// Runs one stage. Errors that stop it before any file is tried (an unreadable
/// source root, a destination that is a file, no instance) are `Err`; failures of
/// single files are in the summary.
pub fn run(c: &Client, o: &Options) -> Result<Summary, String> {
    run_throttled(c, o, None)
}

/// [`run`], copying at most `max_bandwidth` bytes per second if given (requests of
/// an eighth of a second's worth, each waiting for its turn).
pub fn run_throttled(c: &Client, o: &Options, max_bandwidth: Option<u64>) -> Result<Summary, String> {
    if let Some(url) = object::url_of(o)? {
        return object::run(c, o, &url, max_bandwidth);
    }
    let started = Instant::now();
    let items = plan(c, o)?;
    if o.direction == Direction::In {
        check_parents(c, &items)?;
    }
    let mut failures = Vec::new();
    let existing = match o.direction {
        Direction::In => tree::existing_in_gust(c, &items),
        Direction::Out => tree::existing_local(&items),
    };
    let (todo, skipped): (Vec<usize>, Vec<usize>) = (0..items.len()).partition(|&i| !existing.is_complete(&items[i]));
    let files: Vec<usize> = todo.iter().copied().filter(|&i| items[i].is_file()).collect();
    let bytes: u64 = files.iter().map(|&i| items[i].size).sum();
    // Daemons copy into and out of their own chunk files; an erasure-coded file's
    // parity is the writing client's (gust-client's ec/), so its bytes go through one.
    let via = if o.via == Via::Client || c.erasure_code().is_some() { Via::Client } else { Via::Daemons };
    let progress = report::Progress::new(o.progress, files.len() as u64, bytes);
    // Directories first (parents before children), private to the owner until the
    // end, when they get their own modes and times (children first).
    let (dirs, failed_dirs) = tree::make_dirs(c, o.direction, &items, &existing, &mut failures);
    let todo: Vec<usize> = if failed_dirs.is_empty() {
        todo
    } else {
        let (under, rest): (Vec<usize>, Vec<usize>) =
            todo.into_iter().partition(|&i| failed_dirs.iter().any(|d| tree::is_under(&items[i].dest, d)));
        for i in under.into_iter().filter(|&i| !items[i].is_dir()) {
            failures.push(Failure { path: items[i].src.clone(), reason: "its directory could not be created".into() });
        }
        rest
    };
    let throttle = batch::Throttle::new(max_bandwidth);
    let job = Job {
        c,
        o,
        items: &items,
        todo: &todo,
        existing: &existing,
        progress: &progress,
        throttle: &throttle,
        sources: None,
    };
    let moved = match (via, o.direction) {
        (Via::Client, _) => through_client::copy(job),
        (_, Direction::In) => inbound::copy(job),
        (_, Direction::Out) => outbound::copy(job),
    };
    progress.finish();
    failures.extend(moved.failures);
    let mut verified = None;
    if o.verify {
        let mut ok: Vec<usize> = moved.staged.iter().copied().filter(|&i| items[i].is_file()).collect();
        ok.extend(skipped.iter().copied().filter(|&i| items[i].is_file()));
        let (n, bad) = verify::check(c, o.direction, &items, &ok);
        verified = Some(n);
        failures.extend(bad);
    }
    tree::finish_dirs(c, o.direction, &items, &dirs, &mut failures);
    failures.sort_by(|a, b| a.path.cmp(&b.path));
    let staged_bytes = moved.staged.iter().map(|&i| items[i].size).sum();
    Ok(Summary {
        direction: match o.direction {
            Direction::In => "in",
            Direction::Out => "out",
        },
        via: match via {
            Via::Client => "client",
            _ => "daemons",
        },
        files: moved.staged.iter().filter(|&&i| items[i].is_file()).count() as u64,
        symlinks: moved.staged.iter().filter(|&&i| items[i].is_symlink()).count() as u64,
        directories: dirs.len() as u64,
        skipped: skipped.iter().filter(|&&i| !items[i].is_dir()).count() as u64,
        bytes: staged_bytes,
        seconds: started.elapsed().as_secs_f64(),
        verified,
        properties: 0,
        failures,
    })
}

/// Builds the item list of a stage without copying: for `--dry-run`-like tools and
/// the read record (which needs the destination path of every source file).
pub fn plan(c: &Client, o: &Options) -> Result<Vec<Item>, String> {
    o.check_shared_paths()?;
    let filter = Filter::new(&o.include, &o.exclude)?;
    let mut items = Vec::new();
    for src in &o.sources {
        let dest = if o.sources.len() > 1 { tree::join_name(&o.dest, src, o.direction) } else { o.dest.clone() };
        match o.direction {
            Direction::In => tree::walk_local(c, src, &dest, &filter, o.only.as_ref(), &mut items)?,
            // A few named files (--follow's passes): looked up, not walked for.
            Direction::Out if o.only.as_ref().is_some_and(|s| s.len() <= tree::NAMED_FILES_MAX) => {
                let only = o.only.as_ref().expect("checked");
                tree::named_gust(c, src, &dest, &filter, only, &mut items)?
            }
            Direction::Out => tree::walk_gust(c, src, &dest, &filter, o.only.as_ref(), &mut items)?,
        }
    }
    Ok(items)
}

/// A stage-in's destination roots must have a parent directory in GustFS (as `cp`
/// wants one): records are made in batches, without a parent check per file.
fn check_parents(c: &Client, items: &[Item]) -> Result<(), String> {
    let dirs: HashSet<&str> = items.iter().filter(|i| i.is_dir()).map(|i| i.dest.as_str()).collect();
    for root in items.iter().filter(|i| i.dest != "/" && !dirs.contains(gust_client::path::parent(&i.dest))) {
        let parent = gust_client::path::parent(&root.dest);
        match c.stat(parent) {
            Ok(st) if st.kind == gust_client::Kind::Dir => {}
            Ok(_) => return Err(format!("{parent}: not a directory in GustFS")),
            Err(e) => return Err(format!("{parent}: {e}")),
        }
    }
    Ok(())
}

/// A readable reason for an errno ("No such file or directory"), without Rust's
/// "(os error N)" tail.
pub(crate) fn reason(errno: i32) -> String {
    match errno {
        libc::ENODATA => "the source changed while being staged".into(),
        libc::ESTALE => "the destination was replaced while being staged".into(),
        e => {
            let s = std::io::Error::from_raw_os_error(e).to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_refused_where_a_shared_path_is_wanted() {
        for url in ["s3://reads/copy", "S3://b", "gs://b/p", "file:///tmp/x", "https://host/x", "swift+v2://c"] {
            let e = refuse_url(url).unwrap_err();
            assert!(e.starts_with(url) && e.contains("s3:// object stores only"), "{e}");
        }
        for path in ["/scratch/in", "./s3://x", "rel/dir", "a:b", "/x://y", "1s3://b", "://x"] {
            assert_eq!(refuse_url(path), Ok(()), "{path}");
        }
        let out = Options::new(Direction::Out, vec!["/in".into()], "gs://reads/copy".into());
        assert!(out.check_shared_paths().is_err());
        let out = Options::new(Direction::Out, vec!["/in".into()], "s3://reads/copy".into());
        assert_eq!(out.check_shared_paths(), Ok(()), "the object store's side");
        // GustFS's side is not the shared file system's: its paths are checked by the client.
        let out = Options::new(Direction::Out, vec!["/in".into()], "/scratch/copy".into());
        assert_eq!(out.check_shared_paths(), Ok(()));
        let stage_in = Options::new(Direction::In, vec!["/a".into(), "gs://b/p".into()], "/gustfs/in".into());
        assert!(stage_in.check_shared_paths().is_err());
        // s3:// goes to the object store's side, alone.
        let stage_in = Options::new(Direction::In, vec!["s3://b/p".into()], "/gustfs/in".into());
        assert_eq!(object::url_of(&stage_in).unwrap().unwrap().key, "p");
        let mixed = Options::new(Direction::In, vec!["/a".into(), "s3://b/p".into()], "/gustfs/in".into());
        assert!(object::url_of(&mixed).unwrap_err().contains("one s3:// source"));
        let out = Options::new(Direction::Out, vec!["/in".into()], "s3://b".into());
        assert_eq!(object::url_of(&out).unwrap().unwrap().bucket, "b");
    }
}
