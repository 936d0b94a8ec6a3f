//! Subscribes to a real SeaweedFS (`weed server` with filer and S3 gateway, the binary
//! named by GUST_WEED; skipped when unset) on loopback ports, writes objects through
//! the filer's HTTP API and the S3 gateway, and checks the events that come back.

use std::net::TcpListener;
use std::ops::ControlFlow;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gust_objevents::{bucket_prefix, object_key, subscribe, Entry, Error, Event};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

const KEY: &str = "GUSTTESTKEY";
const SECRET: &str = "gust-test-secret-objevents";
const WAIT: Duration = Duration::from_secs(60);
const SIGNED_FOR: Duration = Duration::from_secs(600);

/// A loopback port p with p + 10000 free too (weed's gRPC port of each service).
fn free_port_pair(used: &[u16]) -> u16 {
    for _ in 0..200 {
        let p = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if p > 55535 || used.contains(&p) || used.contains(&(p + 10000)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
    panic!("no free loopback port pair");
}

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT * 2;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// A SeaweedFS server: master, volume, filer and S3 gateway, as tests/s3/s3env.py.
struct Weed {
    proc: Child,
    ports: Vec<u16>,
    filer: u16,
    s3: u16,
    dir: tempfile::TempDir,
}

impl Weed {
    fn start(bin: &str) -> Weed {
        let dir = tempfile::Builder::new().prefix("gust-weed-").tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data")).unwrap();
        std::fs::create_dir_all(dir.path().join("log")).unwrap();
        std::fs::write(
            dir.path().join("s3.json"),
            format!(
                r#"{{"identities":[{{"name":"gust","credentials":[{{"accessKey":"{KEY}","secretKey":"{SECRET}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
            ),
        )
        .unwrap();
        let mut ports = Vec::new();
        for _ in 0..4 {
            let p = free_port_pair(&ports);
            ports.push(p);
        }
        let (master, volume, filer, s3) = (ports[0], ports[1], ports[2], ports[3]);
        let d = dir.path().display().to_string();
        let stderr = std::fs::File::create(dir.path().join("log/stderr")).unwrap();
        let proc = Command::new(bin)
            .args([
                format!("-logdir={d}/log"),
                "server".into(),
                format!("-dir={d}/data"),
                "-ip=127.0.0.1".into(),
                "-ip.bind=127.0.0.1".into(),
                format!("-master.port={master}"),
                format!("-volume.port={volume}"),
                "-filer".into(),
                format!("-filer.port={filer}"),
                "-s3".into(),
                format!("-s3.port={s3}"),
                "-s3.port.iceberg=0".into(),
                "-s3.port.lance=0".into(),
                format!("-s3.config={d}/s3.json"),
                "-master.volumeSizeLimitMB=64".into(),
                "-volume.max=1000".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .unwrap();
        let mut weed = Weed { proc, ports, filer, s3, dir };
        // Up when an object can be written through the gateway: it answers before
        // the master has volumes to write to.
        let bucket = weed.bucket("gust-ready");
        wait_for("SeaweedFS's S3 gateway", || {
            assert!(weed.proc.try_wait().unwrap().is_none(), "weed server exited: see {}/log", d);
            s3_send(bucket.create_bucket(&creds()).sign(SIGNED_FOR), "PUT", b"").is_ok()
                && s3_send(bucket.put_object(Some(&creds()), "probe").sign(SIGNED_FOR), "PUT", b"up").is_ok()
        });
        weed
    }

    fn grpc(&self) -> String {
        format!("127.0.0.1:{}", self.filer + 10000)
    }

    fn filer_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.filer)
    }

    fn bucket(&self, name: &str) -> Bucket {
        let url = format!("http://127.0.0.1:{}", self.s3).parse().unwrap();
        Bucket::new(url, UrlStyle::Path, name.to_string(), "us-east-1").unwrap()
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        // weed may hang on SIGTERM: the process group is killed.
        unsafe { libc::kill(-(self.proc.id() as i32), libc::SIGKILL) };
        let _ = self.proc.wait();
        // It writes its unix sockets to /tmp whatever the flags.
        let ends: Vec<String> = self.ports.iter().flat_map(|p| [*p, p + 10000]).map(|p| format!("-{p}.sock")).collect();
        for f in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().to_string();
            if name.starts_with("seaweedfs-") && ends.iter().any(|e| name.ends_with(e.as_str())) {
                let _ = std::fs::remove_file(f.path());
            }
        }
        let _ = &self.dir;
    }
}

fn creds() -> Credentials {
    Credentials::new(KEY, SECRET)
}

/// Sends a signed S3 request; the response's ETag header and body.
fn s3_send(url: impl AsRef<str>, method: &str, body: &[u8]) -> Result<(String, String), ureq::Error> {
    s3_send_with(url, method, body, &[])
}

fn s3_send_with(
    url: impl AsRef<str>,
    method: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Result<(String, String), ureq::Error> {
    let mut req = ureq::http::Request::builder().method(method).uri(url.as_ref());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut resp = ureq::run(req.body(body.to_vec()).unwrap())?;
    let etag = resp.headers().get("etag").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    Ok((etag, resp.body_mut().read_to_string()?))
}

fn put(weed: &Weed, path: &str, body: &[u8]) {
    ureq::put(weed.filer_url(path)).send(body).unwrap();
}

/// A subscription on its own thread: its events and, at the end, its result.
struct Sub {
    events: mpsc::Receiver<Event>,
    done: mpsc::Receiver<Result<(), Error>>,
    seen: Vec<Event>,
}

impl Sub {
    /// Follows `prefix` from `since_ns` until an event about `stop_path`.
    fn start(grpc: String, prefix: String, since_ns: i64, name: &str, stop_path: String) -> Sub {
        let (tx, events) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let name = name.to_string();
        thread::spawn(move || {
            let r = subscribe(&grpc, &prefix, since_ns, &name, |e| {
                let stop = e.path() == stop_path;
                let _ = tx.send(e);
                if stop {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            let _ = done_tx.send(r);
        });
        Sub { events, done, seen: Vec::new() }
    }

    /// The next event that `pred` accepts, the ones before it kept in `seen`.
    fn expect(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) => {
                    self.seen.push(e.clone());
                    if pred(&e) {
                        return e;
                    }
                }
                Err(_) => {
                    let err = self.done.try_recv().map(|r| r.map_err(|e| e.to_string()));
                    panic!("no event {what} within {WAIT:?}; seen {:#?}; subscription: {err:?}", self.seen);
                }
            }
        }
    }

    fn result(&self) -> Result<(), Error> {
        self.done.recv_timeout(WAIT).expect("subscribe did not return")
    }
}

fn created(path: &str) -> impl Fn(&Event) -> bool + '_ {
    move |e| e.old.is_none() && e.new.as_ref().is_some_and(|n| n.path == path)
}

fn deleted(path: &str) -> impl Fn(&Event) -> bool + '_ {
    move |e| e.new.is_none() && e.old.as_ref().is_some_and(|o| o.path == path)
}

fn show(e: &Event) -> String {
    let one = |x: &Option<Entry>| {
        x.as_ref().map_or("-".to_string(), |e| {
            format!(
                "{}{} size={} etag={:?} meta={:?}",
                e.path,
                if e.is_dir { "/" } else { "" },
                e.size,
                e.etag,
                e.meta.iter().map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v))).collect::<Vec<_>>()
            )
        })
    };
    format!("ts={} old={} new={}", e.ts_ns, one(&e.old), one(&e.new))
}

#[test]
fn wrong_address_is_a_clear_error() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let err = subscribe(&addr, "/buckets/bkt/", 0, "gust-test", |_| ControlFlow::Continue(())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Connect { .. }), "{msg}");
    assert_eq!(msg, format!("filer {addr}: connection refused"));
}

#[test]
fn events_of_a_real_seaweedfs() {
    let Ok(bin) = std::env::var("GUST_WEED") else {
        eprintln!("skipped: no SeaweedFS binary (set GUST_WEED; scripts/seaweedfs.sh prints it)");
        return;
    };
    let weed = Weed::start(&bin);
    let b = weed.bucket("bkt");
    let creds = creds();
    s3_send(b.create_bucket(&creds).sign(SIGNED_FOR), "PUT", b"").unwrap();

    let t0 = now_ns();
    // Idle from the start: nothing happens under this prefix until the very end.
    let mut idle = Sub::start(weed.grpc(), bucket_prefix("idle", ""), t0, "gust-test-idle", String::new());
    let mut live = Sub::start(weed.grpc(), bucket_prefix("bkt", ""), t0, "gust-test-live", "/buckets/bkt/stop".into());

    // A filer HTTP write: its implied directory, then the object.
    let before = now_ns();
    put(&weed, "/buckets/bkt/dir/k", b"hello");
    let after = now_ns();
    let e = live.expect("creating /buckets/bkt/dir/k", created("/buckets/bkt/dir/k"));
    let n = e.new.as_ref().unwrap();
    assert!(!n.is_dir);
    assert_eq!(n.size, 5);
    assert!(n.mtime_ns >= before / 1_000_000_000 * 1_000_000_000 && n.mtime_ns <= after, "{}", show(&e));
    assert!(e.ts_ns >= before, "{}", show(&e));
    assert_eq!(n.etag.as_deref(), Some("5d41402abc4b2a76b9719d911017c592"), "MD5 of hello: {}", show(&e));
    assert_eq!(object_key("bkt", &n.path).as_deref(), Some("dir/k"));

    // An S3 PUT with user metadata.
    let mut action = b.put_object(Some(&creds), "s3/obj");
    action.headers_mut().insert("x-amz-meta-color", "Red");
    action.headers_mut().insert("x-amz-meta-two-words", "x y");
    let url = action.sign(SIGNED_FOR);
    let (etag, _) =
        s3_send_with(url, "PUT", b"0123456789", &[("x-amz-meta-color", "Red"), ("x-amz-meta-two-words", "x y")])
            .unwrap();
    let e = live
        .expect("creating /buckets/bkt/s3/obj", |e| e.new.as_ref().is_some_and(|n| n.path == "/buckets/bkt/s3/obj"));
    let n = e.new.as_ref().unwrap();
    assert_eq!(n.size, 10);
    assert_eq!(n.etag.as_deref(), Some(etag.trim_matches('"')), "{}", show(&e));
    assert_eq!(n.meta, vec![("color".to_string(), b"Red".to_vec()), ("two-words".to_string(), b"x y".to_vec())]);

    // An S3 multipart upload of two parts.
    let (_, xml) = s3_send(b.create_multipart_upload(Some(&creds), "mp/big").sign(SIGNED_FOR), "POST", b"").unwrap();
    let upload = rusty_s3::actions::CreateMultipartUpload::parse_response(&xml).unwrap();
    let id = upload.upload_id();
    let part1 = vec![b'a'; 5 << 20];
    let (etag1, _) = s3_send(b.upload_part(Some(&creds), "mp/big", 1, id).sign(SIGNED_FOR), "PUT", &part1).unwrap();
    let (etag2, _) = s3_send(b.upload_part(Some(&creds), "mp/big", 2, id).sign(SIGNED_FOR), "PUT", b"tail").unwrap();
    let complete =
        b.complete_multipart_upload(Some(&creds), "mp/big", id, [etag1.as_str(), etag2.as_str()].into_iter());
    let url = complete.sign(SIGNED_FOR);
    let (_, xml) = s3_send(url, "POST", complete.body().as_bytes()).unwrap();
    let done = rusty_s3::actions::CompleteMultipartUploadResponse::parse(&xml).unwrap();
    let e = live.expect("the multipart object", |e| e.new.as_ref().is_some_and(|n| n.path == "/buckets/bkt/mp/big"));
    let n = e.new.as_ref().unwrap();
    assert_eq!(n.size, (5 << 20) + 4);
    assert_eq!(n.etag.as_deref(), Some(done.etag().trim_matches('"')), "{}", show(&e));

    // An overwrite, a rename and a delete through the filer.
    put(&weed, "/buckets/bkt/dir/k", b"hello again");
    let e = live
        .expect("overwriting /buckets/bkt/dir/k", |e| e.new.as_ref().is_some_and(|n| n.path == "/buckets/bkt/dir/k"));
    eprintln!("overwrite: {}", show(&e));
    ureq::post(weed.filer_url("/buckets/bkt/dir/k2?mv.from=/buckets/bkt/dir/k")).send_empty().unwrap();
    let e =
        live.expect("renaming dir/k to dir/k2", |e| e.new.as_ref().is_some_and(|n| n.path == "/buckets/bkt/dir/k2"));
    assert_eq!(e.old.as_ref().map(|o| o.path.as_str()), Some("/buckets/bkt/dir/k"), "{}", show(&e));
    ureq::delete(weed.filer_url("/buckets/bkt/dir/k2")).call().unwrap();
    let e = live.expect("deleting /buckets/bkt/dir/k2", deleted("/buckets/bkt/dir/k2"));
    assert_eq!(e.old.as_ref().unwrap().size, 11);
    let delete_ts = e.ts_ns;

    // An S3 delete: the old entry only, with its metadata.
    s3_send(b.delete_object(Some(&creds), "s3/obj").sign(SIGNED_FOR), "DELETE", b"").unwrap();
    let e = live.expect("deleting s3/obj", deleted("/buckets/bkt/s3/obj"));
    assert_eq!(e.old.as_ref().unwrap().meta.len(), 2, "{}", show(&e));

    // A recursive delete through the filer: an event per entry, children first.
    ureq::delete(weed.filer_url("/buckets/bkt/mp?recursive=true")).call().unwrap();
    live.expect("deleting mp/big", deleted("/buckets/bkt/mp/big"));
    live.expect("deleting mp", deleted("/buckets/bkt/mp"));

    // Break ends the subscription with Ok.
    put(&weed, "/buckets/bkt/stop", b"");
    live.expect("the stop object", created("/buckets/bkt/stop"));
    live.result().unwrap();
    for e in &live.seen {
        eprintln!("live: {}", show(e));
    }
    // A key's parent directories come as directory creates, before the object.
    let dir = live.seen.iter().position(created("/buckets/bkt/dir")).expect("no event creating the directory dir");
    let k = live.seen.iter().position(created("/buckets/bkt/dir/k")).unwrap();
    assert!(dir < k && live.seen[dir].new.as_ref().unwrap().is_dir);
    // A multipart upload: its parts come and go under .uploads/ (no object keys),
    // the object itself in one create.
    let mp: Vec<&Event> = live.seen.iter().filter(|e| e.path() == "/buckets/bkt/mp/big").collect();
    assert!(mp.len() == 2 && created("/buckets/bkt/mp/big")(mp[0]) && deleted("/buckets/bkt/mp/big")(mp[1]));
    let uploads = live.seen.iter().filter(|e| e.path().starts_with("/buckets/bkt/.uploads")).count();
    assert!(uploads >= 4, "the parts and their directory, made and removed");
    assert!(live
        .seen
        .iter()
        .all(|e| e.path().starts_with("/buckets/bkt/.uploads") == object_key("bkt", e.path()).is_none()));

    // Resuming from before the writes replays them, in the same order.
    let mut replay =
        Sub::start(weed.grpc(), bucket_prefix("bkt", ""), t0, "gust-test-replay", "/buckets/bkt/stop".into());
    replay.expect("the stop object again", created("/buckets/bkt/stop"));
    replay.result().unwrap();
    assert_eq!(replay.seen, live.seen);

    // Resuming from an event's ts_ns + 1 starts right after it.
    let mut resume = Sub::start(
        weed.grpc(),
        bucket_prefix("bkt", ""),
        delete_ts + 1,
        "gust-test-resume",
        "/buckets/bkt/stop".into(),
    );
    resume.expect("the stop object again", created("/buckets/bkt/stop"));
    let at = live.seen.iter().position(|e| e.ts_ns == delete_ts).unwrap();
    assert_eq!(resume.seen, live.seen[at + 1..]);

    // The idle subscription is still there and gets what comes.
    put(&weed, "/buckets/idle/x", b"x");
    let e = idle.expect("creating /buckets/idle/x", |e| e.path() == "/buckets/idle/x");
    assert_eq!(e.new.as_ref().unwrap().size, 1);
    assert_eq!(idle.seen.len(), 1, "{:?}", idle.seen.iter().map(show).collect::<Vec<_>>());

    // The filer going away ends the subscription with an error that names it.
    let grpc = weed.grpc();
    drop(weed);
    let err = idle.result().unwrap_err();
    eprintln!("filer killed: {err}");
    assert!(err.to_string().starts_with(&format!("filer {grpc}: ")), "{err}");
}
