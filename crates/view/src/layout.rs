//! A view's layout (`gust view add … --layout LEVEL`, repeatable): directories by
//! a property of each entry, one per value, above the entry's own path. With
//! `--layout user.s3.tag.project --layout year`, the object `runs/a.h5` tagged
//! `project=ocean` and written in 2026 is `/.views/NAME/ocean/2026/runs/a.h5`.
//!
//! A level is an extended attribute name (`user.s3.meta.NAME` and `user.s3.tag.KEY`
//! for an object's metadata and tags, any `user.*` attribute of a GustFS source's
//! files), `extension` (of the last path component: `gz` for `a.tar.gz`), or
//! `year`, `month`, `day` of the modification time (UTC: `2026`, `2026-11`,
//! `2026-11-27`).
//!
//! A value becomes one path component: an entry without it (no such attribute, no
//! extension, an empty value) is under [`NONE`]; `%`, `/` and NUL are
//! percent-encoded, as are `.` and `..` whole, and a value longer than a name may be
//! is cut at a character boundary.

use gust_proto::xattr::{self, Xattrs};

/// The directory of entries without a value.
pub const NONE: &str = "_none";

/// One level of a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Level {
    Attribute(String),
    Extension,
    Year,
    Month,
    Day,
}

impl Level {
    pub fn parse(s: &str) -> Result<Level, String> {
        match s {
            "extension" => Ok(Level::Extension),
            "year" => Ok(Level::Year),
            "month" => Ok(Level::Month),
            "day" => Ok(Level::Day),
            a if a.starts_with("user.") && a.len() > "user.".len() && a.len() <= xattr::XATTR_NAME_BYTES_MAX => {
                Ok(Level::Attribute(a.to_string()))
            }
            _ => Err(format!(
                "--layout {s}: not a level (an attribute user.NAME, e.g. user.s3.tag.project or \
                 user.s3.meta.owner; extension; year, month or day)"
            )),
        }
    }

    /// Whether the level needs an object's properties (a request to the store per
    /// object, listings do not carry them).
    pub fn needs_properties(&self) -> bool {
        matches!(self, Level::Attribute(_))
    }

    /// The directory name of an entry at `rel` (below the view) with this time and
    /// these attributes.
    fn value(&self, rel: &str, mtime_ns: i64, xattrs: &Xattrs) -> String {
        let v = match self {
            Level::Attribute(name) => match xattr::get(xattrs, name) {
                Ok(v) => String::from_utf8_lossy(v).into_owned(),
                Err(_) => String::new(),
            },
            Level::Extension => {
                let name = rel.rsplit('/').next().unwrap_or(rel);
                match name.rsplit_once('.') {
                    Some((stem, ext)) if !stem.is_empty() => ext.to_string(),
                    _ => String::new(),
                }
            }
            Level::Year | Level::Month | Level::Day => {
                let t = jiff::Timestamp::from_nanosecond(mtime_ns as i128).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
                let format = match self {
                    Level::Year => "%Y",
                    Level::Month => "%Y-%m",
                    _ => "%Y-%m-%d",
                };
                t.strftime(format).to_string()
            }
        };
        component(&v)
    }
}

/// Parses every level of a layout.
pub fn parse(levels: &[String]) -> Result<Vec<Level>, String> {
    levels.iter().map(|s| Level::parse(s)).collect()
}

/// The path below the view of the entry whose own path is `rel`.
pub fn path(levels: &[Level], rel: &str, mtime_ns: i64, xattrs: &Xattrs) -> String {
    let mut p = String::new();
    for l in levels {
        p.push_str(&l.value(rel, mtime_ns, xattrs));
        p.push('/');
    }
    p.push_str(rel);
    p
}

/// `v` as one path component.
fn component(v: &str) -> String {
    let mut out = match v {
        "" => return NONE.to_string(),
        "." => return "%2E".to_string(),
        ".." => return "%2E%2E".to_string(),
        v => v.replace('%', "%25").replace('/', "%2F").replace('\0', "%00"),
    };
    if out.len() > gust_proto::NAME_BYTES_MAX {
        let mut cut = gust_proto::NAME_BYTES_MAX;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_parsed_or_refused() {
        assert_eq!(Level::parse("user.s3.tag.project"), Ok(Level::Attribute("user.s3.tag.project".into())));
        assert_eq!(Level::parse("day"), Ok(Level::Day));
        for bad in ["", "user.", "trusted.x", "size", "s3.tag.x"] {
            assert!(Level::parse(bad).is_err(), "{bad}");
        }
        assert!(Level::parse("user.s3.meta.owner").unwrap().needs_properties());
        assert!(!Level::Year.needs_properties());
    }

    #[test]
    fn entries_go_under_their_values() {
        let x: Xattrs = vec![("user.s3.tag.project".into(), b"ocean".to_vec())];
        let t = 1_795_773_600_000_000_000; // 2026-11-27T10:00:00Z
        let levels = parse(&["user.s3.tag.project".into(), "month".into(), "extension".into()]).unwrap();
        assert_eq!(path(&levels, "runs/a.tar.gz", t, &x), "ocean/2026-11/gz/runs/a.tar.gz");
        assert_eq!(path(&levels, "README", t, &Xattrs::new()), "_none/2026-11/_none/README");
        assert_eq!(path(&levels, ".profile", t, &x), "ocean/2026-11/_none/.profile", "a dot file has no extension");
        assert_eq!(path(&[Level::Year, Level::Day], "a", t, &x), "2026/2026-11-27/a");
        assert_eq!(path(&[], "a/b", t, &x), "a/b");
    }

    #[test]
    fn values_become_one_component() {
        assert_eq!(component("a/b"), "a%2Fb");
        assert_eq!(component("50%"), "50%25");
        assert_eq!(component(".."), "%2E%2E");
        assert_eq!(component(""), NONE);
        let long = "é".repeat(200);
        let c = component(&long);
        assert!(c.len() <= 255 && c.len() >= 254 && long.starts_with(&c));
    }
}
