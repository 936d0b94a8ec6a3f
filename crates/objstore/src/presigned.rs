//! Presigned object URLs: how a stage-in from an object store is handed to the
//! daemons without handing them credentials. The planner signs one GET URL per
//! object (SigV4 query authentication, valid for [`VALID_FOR`]); a daemon reads the
//! ranges of the chunks it holds from it ([`read_range`]) like the spans of a file
//! on the shared file system.
//!
//! The URL carries the ETag the listing gave in its fragment (`#if-match=ETAG`),
//! which is never sent: the daemon sends it as `If-Match`, so every range of a file,
//! on whichever daemon, comes from one version of the object.

use std::sync::OnceLock;
use std::time::Duration;

/// How long a presigned URL stays valid: longer than any stage.
pub const VALID_FOR: Duration = Duration::from_secs(7 * 24 * 3600 - 60);

const FRAGMENT: &str = "#if-match=";
const TRIES: u32 = 4;

/// Whether an external source is a URL rather than a path.
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

/// `url` with `etag` for the daemon to send as `If-Match`.
pub fn with_etag(url: &str, etag: &str) -> String {
    if etag.is_empty() {
        url.to_string()
    } else {
        format!("{url}{FRAGMENT}{etag}")
    }
}

fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(crate::store::http_agent)
}

/// Up to `len` bytes of the object from `offset` (fewer where the object ends), as
/// an errno on failure: ENOENT (no such object), ENODATA (the object is not the
/// version the URL names: it changed), EACCES (refused: an expired or bad
/// signature), ECONNREFUSED, ETIMEDOUT or ECONNRESET (the store cannot be reached
/// or cut the connection), EIO (any other answer). Failures a second try may cure are tried again.
pub fn read_range(url: &str, offset: u64, len: u64) -> Result<Vec<u8>, i32> {
    let (url, etag) = match url.split_once(FRAGMENT) {
        Some((u, e)) => (u, Some(format!("\"{e}\""))),
        None => (url, None),
    };
    if len == 0 {
        return Ok(Vec::new());
    }
    let range = format!("bytes={}-{}", offset, offset + len - 1);
    let mut pause = Duration::from_millis(100);
    let mut tries = 0;
    loop {
        tries += 1;
        let mut r = agent().get(url).header("range", &range);
        if let Some(e) = &etag {
            r = r.header("if-match", e);
        }
        let err = match r.call() {
            Ok(mut resp) => match resp.status().as_u16() {
                200 | 206 => match resp.body_mut().with_config().limit(len + 1).read_to_vec() {
                    Ok(mut data) => {
                        data.truncate(len as usize);
                        return Ok(data);
                    }
                    Err(_) => libc::EIO,
                },
                416 => return Ok(Vec::new()), // the range starts past the object's end
                404 => return Err(libc::ENOENT),
                412 => return Err(libc::ENODATA),
                401 | 403 => return Err(libc::EACCES),
                429 | 500..=599 => libc::EIO,
                _ => return Err(libc::EIO),
            },
            Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => libc::ECONNREFUSED,
            Err(ureq::Error::Timeout(_)) => libc::ETIMEDOUT,
            // No answer: the connection was cut or never made.
            Err(_) => libc::ECONNRESET,
        };
        if tries >= TRIES {
            return Err(err);
        }
        std::thread::sleep(pause);
        pause *= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_fragments() {
        assert!(is_url("https://s3.example/b/k?X-Amz-Signature=1") && is_url("http://127.0.0.1:1/b/k"));
        assert!(!is_url("/lustre/x") && !is_url("s3://b/k"));
        assert_eq!(with_etag("http://h/b/k?q=1", "abc"), "http://h/b/k?q=1#if-match=abc");
        assert_eq!(with_etag("http://h/b/k", ""), "http://h/b/k");
        // Nothing listens on port 1 of loopback: refused, after the tries.
        assert_eq!(read_range("http://127.0.0.1:1/b/k#if-match=e", 0, 10), Err(libc::ECONNREFUSED));
        assert_eq!(read_range("http://127.0.0.1:1/b/k", 0, 0), Ok(Vec::new()));
    }
}
