//! One bucket of an S3-compatible store and the requests staging makes of it, each
//! signed (SigV4, presigned for a minute) and sent on a pooled connection.
//!
//! Failures are [`Error`]s that say what happened in words (no such bucket, access
//! denied, the store cannot be reached), with the store's code. A request that failed
//! in a way a second try can cure (a connection cut, a 5xx, a 429) is sent again, up
//! to [`TRIES`] times with a growing pause.

use crate::config::Config;
use crate::properties::{self, Metadata, Properties, Tags};
use rusty_s3::actions::{CreateMultipartUpload, ListObjectsV2, S3Action};
use rusty_s3::Map;
use rusty_s3::{Bucket, Credentials, UrlStyle};
use std::time::Duration;

/// Sends of one request before its failure is final.
pub const TRIES: u32 = 4;
const SIGNED_FOR: Duration = Duration::from_secs(600);

/// An object as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    pub key: String,
    pub size: u64,
    /// Its last modification, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Its ETag without quotes.
    pub etag: String,
}

/// What a HEAD request says of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    pub size: u64,
    /// Its ETag without quotes.
    pub etag: String,
    /// Its last modification (whole seconds: an HTTP date), nanoseconds since the epoch.
    pub mtime_ns: i64,
    pub meta: Metadata,
    /// How many tags it has (`x-amz-tagging-count`; the tags need a request of
    /// their own).
    pub tag_count: usize,
}

/// A failed request: an HTTP status with the store's error code and message, or
/// (status 0) no answer at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl Error {
    fn transport(endpoint: &str, e: &ureq::Error) -> Error {
        let why = match e {
            ureq::Error::Io(io) => {
                let s = io.to_string();
                s.split(" (os error").next().unwrap_or(&s).to_string()
            }
            e => e.to_string(),
        };
        Error { status: 0, code: String::new(), message: format!("cannot reach the object store at {endpoint}: {why}") }
    }

    /// Whether a second send may succeed.
    pub fn is_transient(&self) -> bool {
        self.status == 0 || self.status == 429 || self.status >= 500
    }

    pub fn is_not_found(&self) -> bool {
        self.status == 404
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match (self.status, self.code.as_str()) {
            (0, _) => return f.write_str(&self.message),
            (_, "NoSuchBucket") => "no such bucket",
            (_, "NoSuchKey") | (404, "") => "no such object",
            (_, "InvalidAccessKeyId") => "access denied: the store does not know this access key",
            (_, "SignatureDoesNotMatch") => "access denied: the secret key does not match the access key",
            (_, "AccessDenied") | (403, _) => "access denied",
            (412, _) => "the object changed while being staged",
            (_, "EntityTooSmall") => "a part is smaller than the store accepts",
            _ => "",
        };
        let detail = match (self.code.is_empty(), self.message.is_empty()) {
            (true, true) => format!("HTTP {}", self.status),
            (false, true) => self.code.clone(),
            (true, false) => self.message.clone(),
            (false, false) => format!("{}: {}", self.code, self.message),
        };
        if what.is_empty() {
            write!(f, "the store refused the request ({detail})")
        } else {
            write!(f, "{what} ({detail})")
        }
    }
}

/// The HTTP client of every request to a store (this process's and a daemon's):
/// statuses as answers (the store's error body says why), bounded waits, a pool
/// of connections as large as the threads that share it.
pub(crate) fn http_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_recv_response(Some(Duration::from_secs(120)))
        .timeout_per_read(Some(Duration::from_secs(60)))
        .max_idle_connections_per_host(64)
        .build()
        .new_agent()
}

/// One bucket of one store, shared by the copy threads.
pub struct Store {
    agent: ureq::Agent,
    bucket: Bucket,
    credentials: Credentials,
    endpoint: String,
}

impl Store {
    pub fn open(cfg: &Config, bucket: &str) -> Result<Store, String> {
        let endpoint: url::Url = cfg.endpoint.parse().map_err(|e| format!("{}: not a URL: {e}", cfg.endpoint))?;
        let style = if cfg.aws_endpoint { UrlStyle::VirtualHost } else { UrlStyle::Path };
        let bucket = Bucket::new(endpoint, style, bucket.to_string(), cfg.region.clone())
            .map_err(|e| format!("s3://{bucket}: not a bucket name this endpoint can address ({e})"))?;
        let credentials = match &cfg.session_token {
            Some(t) => Credentials::new_with_token(&cfg.access_key, &cfg.secret_key, t),
            None => Credentials::new(&cfg.access_key, &cfg.secret_key),
        };
        Ok(Store { agent: http_agent(), bucket, credentials, endpoint: cfg.endpoint.clone() })
    }

    pub fn bucket(&self) -> &str {
        self.bucket.name()
    }

    /// Every object whose key starts with `prefix`, in key order (all pages).
    pub fn list(&self, prefix: &str) -> Result<Vec<Object>, Error> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut a = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
            if !prefix.is_empty() {
                a.with_prefix(prefix);
            }
            if let Some(t) = &token {
                a.with_continuation_token(t.clone());
            }
            let url = a.sign(SIGNED_FOR);
            let body = self.retry(|| self.text(self.agent.get(url.as_str()).call()))?;
            let page = ListObjectsV2::parse_response(&body).map_err(|e| Error {
                status: 200,
                code: "MalformedListing".into(),
                message: format!("a listing the client cannot read: {e}"),
            })?;
            for o in page.contents {
                out.push(Object {
                    size: o.size.unwrap_or(0),
                    mtime_ns: o.last_modified.as_deref().map(parse_time).unwrap_or(0),
                    etag: o.etag.as_deref().map(unquote).unwrap_or_default(),
                    key: o.key,
                });
            }
            match page.next_continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(out),
            }
        }
    }

    /// `len` bytes of `key` from `offset`, only from the version whose ETag is
    /// `etag` (412 otherwise): every piece of a copy comes from one version.
    pub fn get_range(&self, key: &str, offset: u64, len: u64, etag: &str) -> Result<Vec<u8>, Error> {
        let range = format!("bytes={}-{}", offset, offset + len.max(1) - 1);
        let quoted = format!("\"{etag}\"");
        let mut a = self.bucket.get_object(Some(&self.credentials), key);
        if len > 0 {
            a.headers_mut().insert("range", range.clone());
        }
        if !etag.is_empty() {
            a.headers_mut().insert("if-match", quoted.clone());
        }
        let url = a.sign(SIGNED_FOR);
        self.retry(|| {
            let mut r = self.agent.get(url.as_str());
            if len > 0 {
                r = r.header("range", &range);
            }
            if !etag.is_empty() {
                r = r.header("if-match", &quoted);
            }
            let mut resp = r.call().map_err(|e| Error::transport(&self.endpoint, &e))?;
            let status = resp.status().as_u16();
            if status != 200 && status != 206 {
                return Err(error_of(status, &mut resp));
            }
            let data = resp
                .body_mut()
                .with_config()
                .limit(len + 1)
                .read_to_vec()
                .map_err(|e| Error::transport(&self.endpoint, &e))?;
            if data.len() as u64 != len {
                return Err(Error {
                    status: 0,
                    code: String::new(),
                    message: format!("the store sent {} bytes where {len} were asked (connection cut?)", data.len()),
                });
            }
            Ok(data)
        })
    }

    /// A GET URL of `key` that needs no credentials for [`presigned::VALID_FOR`],
    /// pinned to the version with `etag` (presigned.rs).
    pub fn presign_get(&self, key: &str, etag: &str) -> String {
        let url = self.bucket.get_object(Some(&self.credentials), key).sign(crate::presigned::VALID_FOR);
        crate::presigned::with_etag(url.as_str(), etag)
    }

    /// The user metadata and tags of `key`: one HEAD request, and a second one for
    /// the tags if it has any.
    pub fn properties(&self, key: &str) -> Result<Properties, Error> {
        let h = self.head(key)?;
        let tags = if h.tag_count > 0 { self.tags(key)? } else { Tags::new() };
        Ok(Properties { meta: h.meta, tags })
    }

    /// The tags of `key` (GetObjectTagging).
    pub fn tags(&self, key: &str) -> Result<Tags, Error> {
        let mut a = self.bucket.get_object(Some(&self.credentials), key);
        a.query_mut().insert("tagging", "");
        let url = a.sign(SIGNED_FOR);
        let body = self.retry(|| self.text(self.agent.get(url.as_str()).call()))?;
        Ok(properties::parse_tagging(&body))
    }

    /// Sets the tags of `key` to `tags` (PutObjectTagging; DeleteObjectTagging when
    /// there are none).
    pub fn put_tags(&self, key: &str, tags: &Tags) -> Result<(), Error> {
        if tags.is_empty() {
            let mut a = self.bucket.delete_object(Some(&self.credentials), key);
            a.query_mut().insert("tagging", "");
            let url = a.sign(SIGNED_FOR);
            return self.retry(|| self.text(self.agent.delete(url.as_str()).call()).map(|_| ()));
        }
        let mut a = self.bucket.put_object(Some(&self.credentials), key);
        a.query_mut().insert("tagging", "");
        let url = a.sign(SIGNED_FOR);
        let body = properties::tagging_document(tags);
        // AWS asks a tagging request for the body's digest.
        let md5 = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            <md5::Md5 as md5::Digest>::digest(body.as_bytes()),
        );
        self.retry(|| {
            self.text(self.agent.put(url.as_str()).header("content-md5", md5.as_str()).send(body.as_bytes()))
                .map(|_| ())
        })
    }

    /// Replaces the user metadata of `key`, if it is still the version with `etag`,
    /// by `meta`: the object copied onto itself with `x-amz-metadata-directive:
    /// REPLACE` (the store's only way; it keeps the bytes and the tags, and gives the
    /// object a new time). Objects past 5 GiB cannot be copied in one request and
    /// are refused by the store.
    pub fn replace_metadata(&self, key: &str, etag: &str, meta: &Metadata) -> Result<(), Error> {
        let mut a = self.bucket.put_object(Some(&self.credentials), key);
        const KEEP: &percent_encoding::AsciiSet =
            &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
        let source = percent_encoding::utf8_percent_encode(&format!("{}/{key}", self.bucket.name()), KEEP).to_string();
        let mut headers = meta_headers(meta);
        headers.push(("x-amz-copy-source".into(), source));
        headers.push(("x-amz-copy-source-if-match".into(), format!("\"{etag}\"")));
        headers.push(("x-amz-metadata-directive".into(), "REPLACE".into()));
        sign_headers(a.headers_mut(), &headers);
        let url = a.sign(SIGNED_FOR);
        let reply = self.retry(|| self.text(with_headers(self.agent.put(url.as_str()), &headers).send_empty()))?;
        error_in_200(reply).map(|_| ())
    }

    /// What a HEAD request says of `key`: its size, ETag, time and user metadata.
    pub fn head(&self, key: &str) -> Result<Head, Error> {
        let url = self.bucket.head_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        self.retry(|| {
            let resp = self.agent.head(url.as_str()).call().map_err(|e| Error::transport(&self.endpoint, &e))?;
            let status = resp.status().as_u16();
            if !(200..300).contains(&status) {
                // A HEAD has no body to say why: the status does.
                return Err(Error { status, code: String::new(), message: String::new() });
            }
            let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
            let mut meta: Metadata = resp
                .headers()
                .iter()
                .filter_map(|(k, v)| {
                    let name = k.as_str().strip_prefix(META_HEADER)?;
                    Some((name.to_string(), v.to_str().ok()?.to_string()))
                })
                .collect();
            meta.sort();
            Ok(Head {
                size: header("content-length").parse().unwrap_or(0),
                etag: unquote(header("etag")),
                mtime_ns: parse_http_time(header("last-modified")),
                meta,
                tag_count: header("x-amz-tagging-count").parse().unwrap_or(0),
            })
        })
    }

    /// Writes `key` whole in one request, with properties `props`; its ETag.
    pub fn put(&self, key: &str, body: &[u8], props: &Properties) -> Result<String, Error> {
        let mut a = self.bucket.put_object(Some(&self.credentials), key);
        let headers = property_headers(props);
        sign_headers(a.headers_mut(), &headers);
        let url = a.sign(SIGNED_FOR);
        self.retry(|| self.etag_of(with_headers(self.agent.put(url.as_str()), &headers).send(body)))
    }

    /// Starts a multipart upload of `key`, with properties `props`; its upload id.
    pub fn create_multipart(&self, key: &str, props: &Properties) -> Result<String, Error> {
        let mut a = self.bucket.create_multipart_upload(Some(&self.credentials), key);
        let headers = property_headers(props);
        sign_headers(a.headers_mut(), &headers);
        let url = a.sign(SIGNED_FOR);
        let body = self.retry(|| self.text(with_headers(self.agent.post(url.as_str()), &headers).send_empty()))?;
        CreateMultipartUpload::parse_response(&body).map(|r| r.upload_id().to_string()).map_err(|e| Error {
            status: 200,
            code: "MalformedReply".into(),
            message: format!("a multipart reply the client cannot read: {e}"),
        })
    }

    /// Sends part `n` (from 1) of an upload; its ETag.
    pub fn upload_part(&self, key: &str, upload_id: &str, n: u16, body: &[u8]) -> Result<String, Error> {
        let url = self.bucket.upload_part(Some(&self.credentials), key, n, upload_id).sign(SIGNED_FOR);
        self.retry(|| self.etag_of(self.agent.put(url.as_str()).send(body)))
    }

    /// Ends an upload with its parts' ETags in part order; the object's ETag.
    pub fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<String, Error> {
        let a = self.bucket.complete_multipart_upload(
            Some(&self.credentials),
            key,
            upload_id,
            etags.iter().map(|e| e.as_str()),
        );
        let url = a.sign(SIGNED_FOR);
        let body = a.body();
        let reply = self.retry(|| self.text(self.agent.post(url.as_str()).send(body.as_bytes())))?;
        Ok(unquote(&tag(&error_in_200(reply)?, "ETag")))
    }

    /// Drops an unfinished upload and its parts.
    pub fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), Error> {
        let url = self.bucket.abort_multipart_upload(Some(&self.credentials), key, upload_id).sign(SIGNED_FOR);
        self.retry(|| self.text(self.agent.delete(url.as_str()).call()).map(|_| ()))
    }

    /// Removes `key` (no error if it is not there).
    pub fn delete(&self, key: &str) -> Result<(), Error> {
        let url = self.bucket.delete_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        self.retry(|| self.text(self.agent.delete(url.as_str()).call()).map(|_| ()))
    }

    /// The size of part 1 of a multipart object (what its ETag was computed over),
    /// if the store says.
    pub fn first_part_size(&self, key: &str) -> Option<u64> {
        let mut a = self.bucket.head_object(Some(&self.credentials), key);
        a.query_mut().insert("partNumber", "1");
        let url = a.sign(SIGNED_FOR);
        let resp = self.agent.head(url.as_str()).call().ok()?;
        if resp.status().as_u16() != 206 && resp.status().as_u16() != 200 {
            return None;
        }
        resp.headers().get("content-length")?.to_str().ok()?.parse().ok()
    }

    fn retry<T>(&self, mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
        let mut pause = Duration::from_millis(100);
        for _ in 1..TRIES {
            match f() {
                Err(e) if e.is_transient() => {
                    std::thread::sleep(pause);
                    pause *= 4;
                }
                r => return r,
            }
        }
        f()
    }

    fn text(&self, r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<String, Error> {
        let mut resp = r.map_err(|e| Error::transport(&self.endpoint, &e))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(error_of(status, &mut resp));
        }
        resp.body_mut().read_to_string().map_err(|e| Error::transport(&self.endpoint, &e))
    }

    fn etag_of(&self, r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<String, Error> {
        let mut resp = r.map_err(|e| Error::transport(&self.endpoint, &e))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(error_of(status, &mut resp));
        }
        let etag = resp.headers().get("etag").and_then(|v| v.to_str().ok()).map(unquote).unwrap_or_default();
        let _ = resp.body_mut().read_to_vec();
        Ok(etag)
    }
}

/// Header names start so for user metadata.
const META_HEADER: &str = "x-amz-meta-";

/// `meta` as request headers.
fn meta_headers(meta: &[(String, String)]) -> Vec<(String, String)> {
    meta.iter().map(|(n, v)| (format!("{META_HEADER}{}", n.to_ascii_lowercase()), v.clone())).collect()
}

/// `props` as request headers: the metadata's, and the tags' as one query string.
fn property_headers(props: &Properties) -> Vec<(String, String)> {
    let mut h = meta_headers(&props.meta);
    if !props.tags.is_empty() {
        h.push(("x-amz-tagging".into(), properties::tagging_header(&props.tags)));
    }
    h
}

/// The headers a presigned URL signs (SigV4 signs every `x-amz-*` header sent).
fn sign_headers<'a>(m: &mut Map<'a>, headers: &'a [(String, String)]) {
    for (n, v) in headers {
        m.insert(n.as_str(), v.as_str());
    }
}

fn with_headers<B>(mut r: ureq::RequestBuilder<B>, headers: &[(String, String)]) -> ureq::RequestBuilder<B> {
    for (n, v) in headers {
        r = r.header(n.as_str(), v.as_str());
    }
    r
}

/// The reply of a request that can fail after its 200 (a multipart completion, a
/// copy: S3 sends the status before it knows), or the error it carries.
fn error_in_200(reply: String) -> Result<String, Error> {
    if reply.contains("<Error>") {
        return Err(Error { status: 500, code: tag(&reply, "Code"), message: tag(&reply, "Message") });
    }
    Ok(reply)
}

fn error_of(status: u16, resp: &mut ureq::http::Response<ureq::Body>) -> Error {
    let body = resp.body_mut().with_config().limit(64 << 10).read_to_string().unwrap_or_default();
    Error { status, code: tag(&body, "Code"), message: tag(&body, "Message") }
}

/// The text of the first `<name>…</name>` in an XML reply (error replies are flat).
pub(crate) fn tag(xml: &str, name: &str) -> String {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let Some(start) = xml.find(&open).map(|i| i + open.len()) else { return String::new() };
    let end = xml[start..].find(&close).map(|i| start + i).unwrap_or(start);
    let mut text = xml[start..end].to_string();
    for (entity, ch) in
        [("&quot;", "\""), ("&#34;", "\""), ("&apos;", "'"), ("&#39;", "'"), ("&lt;", "<"), ("&gt;", ">")]
    {
        text = text.replace(entity, ch);
    }
    text.replace("&amp;", "&")
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches('"').to_string()
}

/// An RFC 3339 time (a listing's LastModified) in nanoseconds since the epoch (0
/// when unreadable).
pub fn parse_time(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().map(|t| t.as_nanosecond() as i64).unwrap_or(0)
}

/// An HTTP date (a HEAD's Last-Modified, RFC 9110's IMF-fixdate) in nanoseconds
/// since the epoch (0 when unreadable).
pub fn parse_http_time(s: &str) -> i64 {
    jiff::fmt::rfc2822::DateTimeParser::new().parse_timestamp(s).map(|t| t.as_nanosecond() as i64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_what_happened() {
        let xml = "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        let e = Error { status: 404, code: tag(xml, "Code"), message: tag(xml, "Message") };
        assert_eq!(e.to_string(), "no such bucket (NoSuchBucket: The specified bucket does not exist)");
        assert!(!e.is_transient() && e.is_not_found());
        let e = Error { status: 403, code: "InvalidAccessKeyId".into(), message: String::new() };
        assert!(e.to_string().starts_with("access denied"), "{e}");
        let e = Error { status: 503, code: "SlowDown".into(), message: String::new() };
        assert!(e.is_transient());
        assert_eq!(e.to_string(), "the store refused the request (SlowDown)");
        assert_eq!(tag("<a><ETag>&quot;x&quot;</ETag></a>", "ETag"), "\"x\"");
        assert_eq!(unquote(&tag("<a><ETag>&#34;e-3&#34;</ETag></a>", "ETag")), "e-3", "SeaweedFS's escape");
    }

    #[test]
    fn listing_times_are_read() {
        assert_eq!(parse_time("1970-01-01T00:00:01.500Z"), 1_500_000_000);
        assert_eq!(parse_time("2026-11-27T10:00:00Z"), 1_795_773_600_000_000_000);
        assert_eq!(parse_time("yesterday"), 0);
        assert_eq!(parse_http_time("Fri, 27 Nov 2026 10:00:00 GMT"), 1_795_773_600_000_000_000);
        assert_eq!(parse_http_time(""), 0);
    }
}
