//! Views (issue 35; DelveFS, seed thesis 000, chapter 5): a filtered picture of an
//! object store prefix, kept current, as a directory of GustFS.
//!
//! `gust view add NAME s3://BUCKET/PREFIX [find's predicates]` makes the directory
//! `/.views/NAME` (under a FUSE mount or the preload library's mount directory,
//! `/gustfs/.views/NAME`). Every object under the prefix that the predicates match
//! has an entry there, named by its key below the prefix (a key's `/` makes
//! subdirectories). An entry is a placeholder until its first open fetches the
//! object (gust-client's objects.rs): a listing, `ls -l` and `stat` are served by
//! GustFS's metadata alone, never by the store.
//!
//! The view is kept current by a maintainer process (`gust view follow`, started by
//! `gust view add`, [`follow`]): a full resync against the store's listing when it
//! starts and whenever events were lost or are not available, and in between the
//! store's own change events (for SeaweedFS, its filer's metadata subscription,
//! gust-objevents), each applied to the one entry it concerns.
//!
//! The view's definition is an attribute of its directory (`user.gust.view`, JSON),
//! so every node of the instance sees it; the maintainer's status is a JSON file
//! beside the hosts file ([`Status`]).
//!
//! Not for: fetching objects (gust-client), staging (gust-stage), the CLI's process
//! handling (gust-cli's view.rs).

pub mod follow;
pub mod layout;
pub mod links;
pub mod sync;
mod tree;

use gust_client::Client;
use gust_objstore::ObjectUrl;
use gust_proto::xattr::Xattrs;
use gust_proto::{FileKind, FindQuery};
use serde::{Deserialize, Serialize};

/// The directory of every view.
pub use gust_proto::path::VIEWS_DIR;
/// The attribute of a view's directory that holds its definition.
pub const DEFINITION_XATTR: &str = "user.gust.view";

/// What `gust view add` defines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub name: String,
    /// `s3://BUCKET/PREFIX`, or a GustFS directory (an internal path).
    pub source: String,
    /// The predicates, as given (for people: `gust view ls`).
    pub expression: Vec<String>,
    /// The predicates, as evaluated (`now_ns` is set at each evaluation: `-mmin`
    /// is judged when an object is seen).
    pub query: FindQuery,
    /// The store's event source (`seaweedfs://HOST:GRPC_PORT` of its filer), if any.
    pub events: Option<String>,
    /// Seconds between full resyncs (without events, the only way the view follows
    /// the store; with them, a safety net).
    pub resync_secs: u64,
    /// Directories by property above the entries (`--layout`, layout.rs), outermost
    /// first.
    #[serde(default)]
    pub layout: Vec<String>,
}

impl Definition {
    /// The view's directory.
    pub fn dir(&self) -> String {
        dir_of(&self.name)
    }

    /// The bucket and key prefix (`key/` or empty) of the source.
    pub fn object_source(&self) -> Result<(String, String), String> {
        let u = ObjectUrl::parse(&self.source)?.ok_or_else(|| format!("{}: not an s3:// URL", self.source))?;
        let prefix = u.dir_prefix();
        Ok((u.bucket, prefix))
    }

    /// The GustFS directory the view shows (an internal path), if its source is one.
    pub fn gust_dir(&self) -> Option<&str> {
        self.source.starts_with('/').then_some(self.source.as_str())
    }

    /// Whether a layout level or a predicate looks at the entries' attributes: a
    /// view of a store then needs its objects' properties (metadata, tags), which
    /// a listing does not carry; a view of a GustFS directory follows its files'
    /// attribute changes.
    pub fn uses_attributes(&self) -> bool {
        let levels = layout::parse(&self.layout).unwrap_or_default();
        levels.iter().any(|l| l.needs_properties()) || !self.query.xattrs.is_empty()
    }

    /// Checks a new definition: the name, the source, the layout and the event source.
    pub fn check(&self) -> Result<(), String> {
        check_name(&self.name)?;
        layout::parse(&self.layout)?;
        if let Some(d) = self.gust_dir() {
            let views = gust_proto::path::VIEWS_DIR;
            if d == "/" || d == views || d.starts_with(&format!("{views}/")) {
                return Err(format!("{d}: a view's source cannot hold the views ({views}); name a directory below /"));
            }
            if self.events.is_some() {
                return Err(
                    "--events is for object stores: a view of a GustFS directory follows GustFS's own events".into()
                );
            }
            return Ok(());
        }
        self.object_source()?;
        if let Some(e) = &self.events {
            event_address(e)?;
        }
        Ok(())
    }
}

/// The directory of view `name`.
pub fn dir_of(name: &str) -> String {
    format!("{VIEWS_DIR}/{name}")
}

/// A view's name: one path component, no leading dot, printable.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.+@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?}: not a view name (letters, digits and -_.+@, not starting with a dot)"))
    }
}

/// The filer address of an event source `seaweedfs://HOST:PORT`.
pub fn event_address(events: &str) -> Result<&str, String> {
    match events.strip_prefix("seaweedfs://") {
        Some(a) if a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) => Ok(a),
        _ => Err(format!(
            "{events}: not an event source this build knows (seaweedfs://HOST:PORT, the filer's gRPC address)"
        )),
    }
}

/// The entry of the object `key` in a view whose source prefix is `prefix`: the
/// path below the view's directory, or None for a key that cannot be a path (a
/// directory marker `a/`, an empty, `.` or `..` component, a component longer
/// than a name may be, a NUL).
pub fn entry_of(prefix: &str, key: &str) -> Option<String> {
    let rel = key.strip_prefix(prefix)?;
    if rel.is_empty() || rel.ends_with('/') || rel.contains('\0') {
        return None;
    }
    let ok = rel.split('/').all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= gust_proto::NAME_BYTES_MAX);
    ok.then(|| rel.to_string())
}

/// Whether an object (size, time, properties as attributes) at view path `path`
/// matches the view's query.
pub fn matches(query: &FindQuery, path: &str, size: u64, mtime_ns: i64, xattrs: &Xattrs) -> bool {
    let mut r = Client::staged_record(FileKind::File, 0o444, size, mtime_ns, mtime_ns, String::new());
    r.xattrs = xattrs.clone();
    let q = FindQuery { now_ns: gust_proto::now_ns(), ..query.clone() };
    q.matches(path, &r)
}

/// What the maintainer says of itself (`<hosts file>.view.NAME.status`, JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub name: String,
    pub pid: u32,
    /// `resyncing`, `following events`, `polling` (no events: resyncs only), or
    /// `events lost` (reconnecting; a resync follows).
    pub state: String,
    /// Entries in the view.
    pub objects: u64,
    /// Objects under the prefix whose key cannot be a path.
    pub skipped: u64,
    pub events: u64,
    /// The store's time of the last event applied (ns since the epoch; 0: none yet).
    pub last_event_ns: i64,
    /// How long after the store's event time it was applied, of the last event
    /// (milliseconds).
    pub last_lag_ms: f64,
    /// Median and 99th percentile of that lag over the last events (at most 10,000).
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub resyncs: u64,
    /// When the last full resync ended (ns since the epoch) and what it took (s).
    pub last_resync_ns: i64,
    pub last_resync_secs: f64,
    /// The last error of a resync or of applying an event, if the last attempt failed.
    pub error: Option<String>,
    /// Why the store's event stream was cut, while it is (cleared by the next event
    /// or resync once it is back).
    pub events_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_paths_or_are_skipped() {
        assert_eq!(entry_of("p/", "p/a/b.txt").as_deref(), Some("a/b.txt"));
        assert_eq!(entry_of("", "top").as_deref(), Some("top"));
        assert_eq!(entry_of("p/", "q/a"), None, "outside the prefix");
        assert_eq!(entry_of("p/", "p/dir/"), None, "a directory marker");
        assert_eq!(entry_of("p/", "p/a//b"), None);
        assert_eq!(entry_of("p/", "p/../etc"), None);
        assert_eq!(entry_of("p/", "p/./x"), None);
        assert_eq!(entry_of("", &"n".repeat(256)), None);
        assert_eq!(entry_of("", &"n".repeat(255)).map(|s| s.len()), Some(255));
    }

    #[test]
    fn names_and_event_sources_are_checked() {
        assert!(check_name("reads-2026").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", "..", &"x".repeat(201)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(event_address("seaweedfs://127.0.0.1:18888"), Ok("127.0.0.1:18888"));
        for bad in ["kafka://x:1", "seaweedfs://nohost", "seaweedfs://:1", "seaweedfs://h:port"] {
            assert!(event_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_query_is_find_s() {
        let q = FindQuery {
            name: Some("*.fastq".into()),
            size: Some((gust_proto::Cmp::More, 1, 1024)),
            ..Default::default()
        };
        let none = Xattrs::new();
        assert!(matches(&q, "/.views/v/run1/a.fastq", 4096, 0, &none));
        assert!(!matches(&q, "/.views/v/run1/a.fastq", 1024, 0, &none), "-size +1k is more than one KiB");
        assert!(!matches(&q, "/.views/v/run1/a.bam", 4096, 0, &none));
        let q = FindQuery { mmin: Some((gust_proto::Cmp::Less, 60)), ..Default::default() };
        assert!(matches(&q, "/x", 1, gust_proto::now_ns(), &none));
        assert!(!matches(&q, "/x", 1, gust_proto::now_ns() - 2 * 3_600_000_000_000, &none));
        let q = FindQuery { xattrs: vec![("user.s3.tag.stage".into(), Some("raw".into()))], ..Default::default() };
        assert!(!matches(&q, "/x", 1, 0, &none), "a predicate on a property the object lacks");
        assert!(matches(&q, "/x", 1, 0, &vec![("user.s3.tag.stage".into(), b"raw".to_vec())]));
    }
}
