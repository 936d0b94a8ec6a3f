//! An object store's change events, as a blocking stream: what GustFS views follow.
//!
//! The store is SeaweedFS. Its filer keeps a log of every metadata change (create,
//! update, rename, delete of an entry) and streams it to subscribers over gRPC
//! (`filer_pb.SeaweedFiler/SubscribeMetadata`, on the filer's gRPC port: its HTTP port
//! plus 10000). S3 buckets are filer directories, `/buckets/BUCKET`, and the object KEY
//! is the entry at `/buckets/BUCKET/KEY`: [`bucket_prefix`] gives the path prefix to
//! follow, [`object_key`] turns an event's path back into a key.
//!
//! [`subscribe`] opens the subscription the way `weed filer.meta.tail` does and calls
//! back once per event, on the caller's thread, until the callback breaks (`Ok`) or
//! the stream fails or ends (`Err`). It never times out an idle stream: a quiet
//! bucket sends nothing, and the call just waits. The caller resumes after an error
//! with `since_ns` = the last [`Event::ts_ns`] it handled + 1 (the filer sends the
//! events at or after `since_ns`), and resyncs by listing if it was away longer than
//! the filer keeps its log.
//!
//! What the events of S3 writes look like (SeaweedFS 2026-11, tested): a PUT, through
//! S3 or the filer's HTTP API, is one create (or one update, old and new, when it
//! overwrites), preceded by a directory create for each parent of the key that did
//! not exist yet. Deleting an object leaves its emptied parents to the filer's
//! empty-folder cleaner, which deletes them later (tens of seconds to minutes, not
//! tested here), each one a directory delete. A multipart
//! upload's parts come and go under `/buckets/B/.uploads/` (no object keys, see
//! [`object_key`]) and the object itself is one create at completion. A recursive
//! delete of a directory is one delete per entry, children first.
//!
//! What it is not: not a general SeaweedFS client (no reads, writes or listings), not
//! an S3 event source of AWS's kind (SQS/SNS notifications), and it does not interpret
//! versioned buckets (their `KEY.versions/` entries come through as they are).
//! Plaintext gRPC only (loopback or the cluster's own network): no TLS, no
//! security.toml JWT signing.

use std::fmt;
use std::ops::ControlFlow;
use std::time::Duration;

/// Where the filer keeps S3 buckets (the filer's default `-dirBuckets`).
pub const BUCKETS_DIR: &str = "/buckets";

/// The extended attribute under which the S3 gateway stores an object's ETag.
const ETAG_KEY: &str = "Seaweed-X-Amz-ETag";
/// The prefix of S3 user metadata in an entry's extended attributes (HTTP header
/// case, `X-Amz-Meta-Foo`); compared without regard to case.
const USER_META_PREFIX: &str = "x-amz-meta-";
/// The prefix of S3 tags in an entry's extended attributes (`X-Amz-Tagging-KEY`),
/// followed by the key as written.
const TAG_PREFIX: &str = "X-Amz-Tagging-";
/// Where the S3 gateway keeps the parts of multipart uploads in progress, under a
/// bucket: not objects.
const UPLOADS_DIR: &str = ".uploads";

/// How long connecting to the filer may take (the TCP and HTTP/2 handshakes). Not a
/// limit on the stream, which may stay idle for ever.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive pings while the stream is open, as SeaweedFS's own gRPC clients
/// send them (`GrpcKeepAliveTime`, `GrpcKeepAliveTimeout`): a filer that vanished
/// without closing the connection is noticed, and the filer's ping policy (at most
/// one per 20 s) is respected.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// The largest message accepted, as SeaweedFS's clients (`Max_Message_Size`): a
/// catch-up batch holds up to 256 events, each with its entries' chunk lists.
const MAX_MESSAGE: usize = 1 << 30;

/// One filer entry, as an event carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The full filer path, e.g. `/buckets/b/dir/k`.
    pub path: String,
    /// A directory: either made explicitly (an S3 key ending in `/`) or implied by
    /// a key with `/` in it (the filer makes the parents of a new entry).
    pub is_dir: bool,
    /// The size in bytes (the larger of the recorded size and the chunks' extent,
    /// as the filer computes it); 0 for a directory.
    pub size: u64,
    /// The modification time, ns since the epoch. S3 writes record whole seconds.
    pub mtime_ns: i64,
    /// The object's S3 ETag without quotes: the one the S3 gateway recorded, else
    /// the hex MD5 of the content when the writer recorded one (filer HTTP writes
    /// do, appends and some multi-chunk writes don't); `None` when neither exists.
    pub etag: Option<String>,
    /// S3 user metadata: the name lowercased without its `x-amz-meta-` prefix, and
    /// the value, sorted by name.
    pub meta: Vec<(String, Vec<u8>)>,
    /// S3 tags: the key (as written) and the value, sorted by key.
    pub tags: Vec<(String, Vec<u8>)>,
}

/// One change. A create has `new` only, a delete `old` only, an update (same path)
/// or a rename (paths differ) both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The event's position in the filer's log, ns (distinct and increasing in one filer's log): resume
    /// after it with `since_ns = ts_ns + 1`.
    pub ts_ns: i64,
    pub old: Option<Entry>,
    pub new: Option<Entry>,
}

impl Event {
    /// The path the event is about: the new entry's, or the deleted one's.
    pub fn path(&self) -> &str {
        self.new.as_ref().or(self.old.as_ref()).map_or("", |e| e.path.as_str())
    }
}

/// Why [`subscribe`] stopped: every variant names the filer, and displays as one
/// line meant for a person, e.g. `filer 127.0.0.1:18888: connection refused`.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The address is not a `host:port` (or `http://host:port`).
    Address { filer: String, reason: String },
    /// The filer could not be reached (refused, unreachable, timed out).
    Connect { filer: String, reason: String },
    /// The filer refused the subscription, or the stream broke (connection lost,
    /// filer shut down): a gRPC status.
    Stream { filer: String, reason: String },
    /// The filer ended the stream as if it were done; it never is for a
    /// subscription without an end time, so this is a failure too.
    Ended { filer: String },
    /// The runtime for the gRPC client could not be made (out of threads or fds).
    Runtime(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Address { filer, reason } => write!(f, "filer {filer}: not a host:port address: {reason}"),
            Error::Connect { filer, reason } => write!(f, "filer {filer}: {reason}"),
            Error::Stream { filer, reason } => write!(f, "filer {filer}: metadata subscription failed: {reason}"),
            Error::Ended { filer } => write!(f, "filer {filer}: the filer ended the metadata subscription"),
            Error::Runtime(e) => write!(f, "cannot start the gRPC client's runtime: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// The filer path prefix that holds the objects of `bucket` whose keys start with
/// `key_prefix` (empty: the whole bucket), for [`subscribe`]. The filer matches it
/// as a plain string prefix of an entry's full path.
pub fn bucket_prefix(bucket: &str, key_prefix: &str) -> String {
    format!("{BUCKETS_DIR}/{bucket}/{key_prefix}")
}

/// The S3 key within `bucket` of the entry at filer `path`, or `None` when the path
/// is not inside the bucket, is the bucket itself, or is the gateway's own
/// bookkeeping (the parts of multipart uploads in progress, under `.uploads/`). A
/// directory entry's key comes without a trailing `/`.
pub fn object_key(bucket: &str, path: &str) -> Option<String> {
    let key = path.strip_prefix(BUCKETS_DIR)?.strip_prefix('/')?.strip_prefix(bucket)?.strip_prefix('/')?;
    let first = key.split('/').next().unwrap_or_default();
    if key.is_empty() || first == UPLOADS_DIR {
        return None;
    }
    Some(key.to_string())
}

/// Follows the filer's metadata changes under `path_prefix` (see [`bucket_prefix`])
/// from `since_ns` on (ns since the epoch, inclusive; 0 for the filer's whole log,
/// the current time for new changes only), calling `on_event` for each in order on
/// this thread, until it returns `Break` (then `Ok`). `filer_grpc` is the filer's gRPC
/// address, `host:port`; `client_name` names the subscriber in the filer's logs.
///
/// Blocks for as long as the subscription lasts: an idle stream is not an error and
/// is never timed out (a dead connection is found by HTTP/2 pings). Returns `Err` when
/// the filer cannot be reached or the stream fails or ends; the caller reconnects
/// with `since_ns` = the last `ts_ns` it handled + 1.
///
/// The connection is driven by a runtime thread of its own, so a slow `on_event`
/// does not leave the filer's keepalive pings unanswered.
pub fn subscribe(
    filer_grpc: &str,
    path_prefix: &str,
    since_ns: i64,
    client_name: &str,
    mut on_event: impl FnMut(Event) -> ControlFlow<()>,
) -> Result<(), Error> {
    let filer = filer_grpc.to_string();
    let uri = if filer_grpc.contains("://") { filer_grpc.to_string() } else { format!("http://{filer_grpc}") };
    let endpoint = tonic::transport::Endpoint::from_shared(uri)
        .map_err(|e| Error::Address { filer: filer.clone(), reason: root_cause(&e) })?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(false);
    // One worker thread drives the connection (HTTP/2 pings, flow control) while
    // this thread runs `on_event` between reads.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gust-objevents")
        .enable_io()
        .enable_time()
        .build()
        .map_err(Error::Runtime)?;
    let request = proto::SubscribeMetadataRequest {
        client_name: client_name.to_string(),
        path_prefix: path_prefix.to_string(),
        since_ns,
        // As `weed filer.meta.tail`: a random id per subscription (the filer
        // refuses a second subscription of the same name and id), batches of
        // backlog events understood, no idle heartbeats, no log-file chunk refs.
        client_id: random_client_id(),
        client_supports_batching: true,
        ..Default::default()
    };
    let mut stream = rt.block_on(async {
        let channel =
            endpoint.connect().await.map_err(|e| Error::Connect { filer: filer.clone(), reason: root_cause(&e) })?;
        let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_MESSAGE);
        grpc.ready().await.map_err(|e| Error::Connect { filer: filer.clone(), reason: root_cause(&e) })?;
        let path = http::uri::PathAndQuery::from_static("/filer_pb.SeaweedFiler/SubscribeMetadata");
        let codec =
            tonic_prost::ProstCodec::<proto::SubscribeMetadataRequest, proto::SubscribeMetadataResponse>::default();
        grpc.server_streaming(tonic::Request::new(request), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| stream_error(&filer, &s))
    })?;
    loop {
        let resp = match rt.block_on(stream.message()) {
            Ok(Some(resp)) => resp,
            Ok(None) => return Err(Error::Ended { filer }),
            Err(s) => return Err(stream_error(&filer, &s)),
        };
        // A backlog comes in batches: the first event in the envelope, the rest in
        // `events` (each of those without a batch of its own).
        let mut batch = resp.events;
        let first = proto::SubscribeMetadataResponse { events: Vec::new(), ..resp };
        for one in std::iter::once(first).chain(batch.drain(..)) {
            if let Some(event) = one.into_event() {
                if on_event(event).is_break() {
                    return Ok(());
                }
            }
        }
    }
}

/// A subscription id, as `util.RandomInt32()` gives `weed filer.meta.tail`.
fn random_client_id() -> i32 {
    use std::hash::{BuildHasher, RandomState};
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    RandomState::new().hash_one((std::process::id(), now.as_nanos())) as i32
}

fn stream_error(filer: &str, status: &tonic::Status) -> Error {
    let mut reason = status.message().to_string();
    if let Some(source) = std::error::Error::source(status) {
        let cause = root_cause(source);
        if !reason.contains(&cause) {
            reason = if reason.is_empty() { cause } else { format!("{reason}: {cause}") };
        }
    }
    if reason.is_empty() {
        reason = status.code().description().to_lowercase();
    }
    if status.code() == tonic::Code::Unavailable && is_connect_failure(status) {
        return Error::Connect { filer: filer.to_string(), reason };
    }
    Error::Stream { filer: filer.to_string(), reason }
}

/// Whether a status is a failure to connect (rather than a stream that broke).
fn is_connect_failure(status: &tonic::Status) -> bool {
    let mut e: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = e {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return matches!(io.kind(), ConnectionRefused | TimedOut | HostUnreachable | NetworkUnreachable);
        }
        e = err.source();
    }
    false
}

/// The innermost cause of an error, for a person: an I/O error's kind ("connection
/// refused") rather than tonic's "transport error" wrappers.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest = err;
    let mut e = Some(err);
    while let Some(cur) = e {
        if let Some(io) = cur.downcast_ref::<std::io::Error>() {
            // "connection refused" beats "Connection refused (os error 111)";
            // kinds without a message of their own keep the OS's wording.
            use std::io::ErrorKind::*;
            return match io.kind() {
                kind @ (ConnectionRefused | ConnectionReset | ConnectionAborted | TimedOut | HostUnreachable
                | NetworkUnreachable | AddrNotAvailable | BrokenPipe) => kind.to_string(),
                _ => io.to_string(),
            };
        }
        deepest = cur;
        e = cur.source();
    }
    deepest.to_string()
}

/// The few messages of SeaweedFS's `weed/pb/filer.proto` used here, with its field
/// numbers and types; prost skips the fields left out.
mod proto {
    use std::collections::HashMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SubscribeMetadataRequest {
        #[prost(string, tag = "1")]
        pub client_name: String,
        #[prost(string, tag = "2")]
        pub path_prefix: String,
        #[prost(int64, tag = "3")]
        pub since_ns: i64,
        #[prost(int32, tag = "4")]
        pub signature: i32,
        #[prost(string, repeated, tag = "6")]
        pub path_prefixes: Vec<String>,
        #[prost(int32, tag = "7")]
        pub client_id: i32,
        #[prost(int64, tag = "8")]
        pub until_ns: i64,
        #[prost(int32, tag = "9")]
        pub client_epoch: i32,
        #[prost(string, repeated, tag = "10")]
        pub directories: Vec<String>,
        #[prost(bool, tag = "11")]
        pub client_supports_batching: bool,
        #[prost(bool, tag = "12")]
        pub client_supports_metadata_chunks: bool,
        #[prost(bool, tag = "13")]
        pub client_supports_idle_heartbeat: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SubscribeMetadataResponse {
        #[prost(string, tag = "1")]
        pub directory: String,
        #[prost(message, optional, tag = "2")]
        pub event_notification: Option<EventNotification>,
        #[prost(int64, tag = "3")]
        pub ts_ns: i64,
        #[prost(message, repeated, tag = "4")]
        pub events: Vec<SubscribeMetadataResponse>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EventNotification {
        #[prost(message, optional, tag = "1")]
        pub old_entry: Option<Entry>,
        #[prost(message, optional, tag = "2")]
        pub new_entry: Option<Entry>,
        #[prost(string, tag = "4")]
        pub new_parent_path: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Entry {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(bool, tag = "2")]
        pub is_directory: bool,
        #[prost(message, repeated, tag = "3")]
        pub chunks: Vec<FileChunk>,
        #[prost(message, optional, tag = "4")]
        pub attributes: Option<FuseAttributes>,
        #[prost(map = "string, bytes", tag = "5")]
        pub extended: HashMap<String, Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FileChunk {
        #[prost(int64, tag = "2")]
        pub offset: i64,
        #[prost(uint64, tag = "3")]
        pub size: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct FuseAttributes {
        #[prost(uint64, tag = "1")]
        pub file_size: u64,
        #[prost(int64, tag = "2")]
        pub mtime: i64,
        #[prost(bytes = "vec", tag = "14")]
        pub md5: Vec<u8>,
        #[prost(int32, tag = "19")]
        pub mtime_ns: i32,
    }
}

impl proto::SubscribeMetadataResponse {
    /// The event, or `None` for what carries no entry: the filer's control messages
    /// (no notification: heartbeats, flush reports) and its "this many events were
    /// filtered out" markers (an empty notification).
    fn into_event(self) -> Option<Event> {
        let n = self.event_notification?;
        let new_dir = if n.new_parent_path.is_empty() { &self.directory } else { &n.new_parent_path };
        let old = n.old_entry.map(|e| e.into_entry(&self.directory));
        let new = n.new_entry.map(|e| e.into_entry(new_dir));
        if old.is_none() && new.is_none() {
            return None;
        }
        Some(Event { ts_ns: self.ts_ns, old, new })
    }
}

impl proto::Entry {
    fn into_entry(self, dir: &str) -> Entry {
        let path = if dir.ends_with('/') { format!("{dir}{}", self.name) } else { format!("{dir}/{}", self.name) };
        let attr = self.attributes.unwrap_or_default();
        // As the filer's FileSize: the recorded size or the chunks' extent.
        let extent = self.chunks.iter().map(|c| (c.offset.max(0) as u64).saturating_add(c.size)).max().unwrap_or(0);
        let size = if self.is_directory { 0 } else { attr.file_size.max(extent) };
        let mtime_ns = attr.mtime.saturating_mul(1_000_000_000).saturating_add(i64::from(attr.mtime_ns));
        let etag = match self.extended.get(ETAG_KEY) {
            Some(v) if !v.is_empty() => Some(String::from_utf8_lossy(v).trim_matches('"').to_string()),
            _ if !attr.md5.is_empty() => Some(attr.md5.iter().map(|b| format!("{b:02x}")).collect()),
            _ => None,
        };
        let (mut meta, mut tags) = (Vec::new(), Vec::new());
        for (k, v) in self.extended {
            let head = k.get(..USER_META_PREFIX.len()).unwrap_or("");
            if head.eq_ignore_ascii_case(USER_META_PREFIX) {
                meta.push((k[USER_META_PREFIX.len()..].to_lowercase(), v));
            } else if let Some(key) = k.strip_prefix(TAG_PREFIX).filter(|key| !key.is_empty()) {
                tags.push((key.to_string(), v));
            }
        }
        meta.sort();
        tags.sort();
        Entry { path, is_dir: self.is_directory, size, mtime_ns, etag, meta, tags }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_prefixes() {
        assert_eq!(bucket_prefix("b", ""), "/buckets/b/");
        assert_eq!(bucket_prefix("b", "dir/x"), "/buckets/b/dir/x");
        assert_eq!(object_key("b", "/buckets/b/dir/k").as_deref(), Some("dir/k"));
        assert_eq!(object_key("b", "/buckets/b/k").as_deref(), Some("k"));
        assert_eq!(object_key("b", "/buckets/b/dir").as_deref(), Some("dir"));
        assert_eq!(object_key("b", "/buckets/b"), None);
        assert_eq!(object_key("b", "/buckets/b/"), None);
        assert_eq!(object_key("b", "/buckets/bb/k"), None);
        assert_eq!(object_key("b", "/buckets/c/k"), None);
        assert_eq!(object_key("b", "/other/b/k"), None);
        assert_eq!(object_key("b", "/buckets/b/.uploads/abc/0001_x.part"), None);
        assert_eq!(object_key("b", "/buckets/b/.uploads"), None);
        assert_eq!(object_key("b", "/buckets/b/x/.uploads").as_deref(), Some("x/.uploads"));
        for (bucket, key) in [("b", "a/b/c"), ("my-bucket", "k with spaces"), ("b", "ü/ñ")] {
            assert_eq!(object_key(bucket, &bucket_prefix(bucket, key)).as_deref(), Some(key));
        }
    }

    fn entry(name: &str) -> proto::Entry {
        proto::Entry { name: name.to_string(), ..Default::default() }
    }

    #[test]
    fn events_from_responses() {
        let resp = |n: Option<proto::EventNotification>| proto::SubscribeMetadataResponse {
            directory: "/buckets/b/d".into(),
            event_notification: n,
            ts_ns: 7,
            events: Vec::new(),
        };
        // Control messages and filtered-out markers carry no event.
        assert_eq!(resp(None).into_event(), None);
        assert_eq!(resp(Some(Default::default())).into_event(), None);
        // A create: the new entry under `directory` when new_parent_path is empty.
        let e = resp(Some(proto::EventNotification { new_entry: Some(entry("k")), ..Default::default() }))
            .into_event()
            .unwrap();
        assert_eq!((e.ts_ns, e.old, e.new.unwrap().path.as_str()), (7, None, "/buckets/b/d/k"));
        // A rename: old under `directory`, new under new_parent_path.
        let e = resp(Some(proto::EventNotification {
            old_entry: Some(entry("k")),
            new_entry: Some(entry("k2")),
            new_parent_path: "/buckets/b/e".into(),
        }))
        .into_event()
        .unwrap();
        assert_eq!(e.old.unwrap().path, "/buckets/b/d/k");
        assert_eq!(e.new.unwrap().path, "/buckets/b/e/k2");
        // The root directory does not double its slash.
        let r = proto::SubscribeMetadataResponse {
            directory: "/".into(),
            event_notification: Some(proto::EventNotification { old_entry: Some(entry("x")), ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(r.into_event().unwrap().path(), "/x");
    }

    #[test]
    fn entry_fields() {
        let mut e = entry("k");
        e.attributes = Some(proto::FuseAttributes { file_size: 3, mtime: 5, mtime_ns: 6, md5: vec![0xab, 0x01] });
        e.chunks = vec![proto::FileChunk { offset: 0, size: 2 }];
        e.extended.insert("X-Amz-Meta-Color".into(), b"Red".to_vec());
        e.extended.insert("x-amz-meta-a".into(), b"1".to_vec());
        e.extended.insert("Seaweed-X-Amz-Owner".into(), b"me".to_vec());
        e.extended.insert("X-Amz-Tagging-project".into(), b"ocean".to_vec());
        e.extended.insert("X-Amz-Tagging".into(), b"not a tag".to_vec());
        let got = e.clone().into_entry("/buckets/b");
        assert_eq!(got.tags, vec![("project".to_string(), b"ocean".to_vec())]);
        assert_eq!(got.size, 3);
        assert_eq!(got.mtime_ns, 5_000_000_006);
        assert_eq!(got.etag.as_deref(), Some("ab01"));
        assert_eq!(got.meta, vec![("a".to_string(), b"1".to_vec()), ("color".to_string(), b"Red".to_vec())]);
        // The gateway's recorded ETag wins, quotes dropped; chunks past the size count.
        e.extended.insert(ETAG_KEY.into(), b"\"abc-2\"".to_vec());
        e.chunks.push(proto::FileChunk { offset: 2, size: 8 });
        let got = e.into_entry("/buckets/b");
        assert_eq!((got.etag.as_deref(), got.size), (Some("abc-2"), 10));
        assert_eq!(entry("k").into_entry("/").etag, None);
    }

    #[test]
    fn bad_address() {
        let err = subscribe("not an address", "/", 0, "t", |_| ControlFlow::Break(())).unwrap_err();
        assert!(matches!(err, Error::Address { .. }), "{err}");
        assert!(err.to_string().starts_with("filer not an address: "), "{err}");
    }
}
