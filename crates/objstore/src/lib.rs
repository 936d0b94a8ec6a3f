//! The object store side of GustFS: `s3://BUCKET/PREFIX` URLs, the endpoint and
//! credentials of the user's AWS setup ([`config`]), the requests staging makes of a
//! bucket ([`store`]), the ETags that check a copy ([`etag`]), and the presigned
//! URLs a daemon reads objects through without credentials ([`presigned`]). Any store that
//! speaks the S3 API works (tested against SeaweedFS).

pub mod config;
pub mod etag;
pub mod presigned;
pub mod properties;
pub mod store;

pub use config::Config;
pub use properties::{Metadata, Properties, Tags};
pub use store::{Error, Head, Object, Store};

/// An `s3://BUCKET/KEY` URL; the key may be empty (the whole bucket) or a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectUrl {
    pub bucket: String,
    pub key: String,
}

impl ObjectUrl {
    /// `Ok(None)` for anything that is not an `s3://` URL; `Err` for an `s3://` URL
    /// without a bucket.
    pub fn parse(s: &str) -> Result<Option<ObjectUrl>, String> {
        let Some(rest) = s.strip_prefix("s3://").or_else(|| s.strip_prefix("S3://")) else { return Ok(None) };
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(format!("{s}: no bucket (s3://BUCKET/PREFIX)"));
        }
        Ok(Some(ObjectUrl { bucket: bucket.to_string(), key: key.to_string() }))
    }

    /// The prefix of the keys under this URL as a directory: `key/` (`` for the
    /// whole bucket).
    pub fn dir_prefix(&self) -> String {
        match self.key.trim_end_matches('/') {
            "" => String::new(),
            k => format!("{k}/"),
        }
    }

    pub fn of_key(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = ObjectUrl::parse("s3://reads/run/1").unwrap().unwrap();
        assert_eq!((u.bucket.as_str(), u.key.as_str(), u.dir_prefix().as_str()), ("reads", "run/1", "run/1/"));
        let u = ObjectUrl::parse("s3://reads").unwrap().unwrap();
        assert_eq!((u.key.as_str(), u.dir_prefix().as_str()), ("", ""));
        assert_eq!(ObjectUrl::parse("s3://reads/p/").unwrap().unwrap().dir_prefix(), "p/");
        assert_eq!(ObjectUrl::parse("/scratch/x").unwrap(), None);
        assert!(ObjectUrl::parse("s3:///key").is_err());
        assert_eq!(u.of_key("a/b"), "s3://reads/a/b");
    }
}
