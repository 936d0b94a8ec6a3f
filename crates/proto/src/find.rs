//! The query of `gust find` as it travels to every daemon, and what it means: which
//! records match. A daemon evaluates it on its own records (one scan of its metadata
//! store); the client evaluates it on the starting directory itself. Both must agree,
//! so the meaning lives here, next to the message, as a pure function of a record.
//!
//! The predicates are GNU find's, with its rounding: `-size N[ckMG]` compares the size
//! rounded up to whole units (default unit: 512-byte blocks), `-mmin N` compares the
//! age rounded up to whole minutes, taken at the query's own start time (`now_ns`),
//! `-newer` compares modification times to the nanosecond. tests/tests/find.rs checks
//! every predicate against GNU find itself.
//!
//! Not for: walking a tree, printing results (the client and the CLI do that).

use crate::msg::{FileKind, Record};
use serde::{Deserialize, Serialize};

/// `+N` (more than), `-N` (less than) or `N` (exactly), as find writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cmp {
    Less,
    Exactly,
    More,
}

impl Cmp {
    fn holds<T: Ord>(self, value: T, n: T) -> bool {
        match self {
            Cmp::Less => value < n,
            Cmp::Exactly => value == n,
            Cmp::More => value > n,
        }
    }
}

/// All given predicates must hold (find's implicit -a). Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindQuery {
    /// `-name GLOB`: shell pattern on the last path component (`*`, `?`, `[...]`,
    /// backslash escapes; a leading dot is not special, as in find).
    pub name: Option<String>,
    /// `-type f|d|l`.
    pub kind: Option<FileKind>,
    /// `-size`: (comparison, N, unit in bytes).
    pub size: Option<(Cmp, u64, u64)>,
    /// `-newer FILE`: modification time strictly after this one (ns since the epoch).
    pub newer_than_ns: Option<i64>,
    /// `-mmin`: (comparison, N minutes). Ages are taken against `now_ns`.
    pub mmin: Option<(Cmp, i64)>,
    /// The moment the query started (ns since the epoch), the same for every daemon.
    pub now_ns: i64,
    /// `-xattr NAME` (the attribute exists) and `-xattr NAME=GLOB` (its value, as
    /// text, matches the shell pattern), each of them: not GNU find's (it has none
    /// for extended attributes); a view's predicate on an object's properties
    /// (`user.s3.meta.*`, `user.s3.tag.*`).
    pub xattrs: Vec<(String, Option<String>)>,
}

/// Bound on the pattern of `-name` (a name is at most NAME_BYTES_MAX bytes; a pattern
/// of escapes and sets can be longer, but not unboundedly).
pub const FIND_PATTERN_BYTES_MAX: usize = 1024;

const NS_PER_MINUTE: i64 = 60_000_000_000;

impl FindQuery {
    /// Whether the record of `path` matches. `path` is absolute; its last component is
    /// the name (the root "/" has the name "/").
    pub fn matches(&self, path: &str, r: &Record) -> bool {
        self.matches_record(r) && self.matches_name(path)
    }

    /// Whether `-name` holds for `path` (absolute; its last component is the name,
    /// the root "/" has the name "/").
    pub fn matches_name(&self, path: &str) -> bool {
        let Some(p) = &self.name else { return true };
        let name = match path.rfind('/') {
            Some(i) if path.len() > 1 => &path[i + 1..],
            _ => path,
        };
        glob_match(p.as_bytes(), name.as_bytes())
    }

    /// Whether every predicate but `-name` holds for `r` (the daemon judges the name
    /// on the key, before it decodes the record).
    pub fn matches_record(&self, r: &Record) -> bool {
        for (name, glob) in &self.xattrs {
            let ok = match (crate::xattr::get(&r.xattrs, name), glob) {
                (Err(_), _) => false,
                (Ok(_), None) => true,
                (Ok(v), Some(g)) => glob_match(g.as_bytes(), v),
            };
            if !ok {
                return false;
            }
        }
        if let Some(k) = self.kind {
            if r.kind != k {
                return false;
            }
        }
        if let Some((cmp, n, unit)) = self.size {
            let unit = unit.max(1);
            // What lstat reports: a symlink's size is its target's length.
            let size = if r.kind == FileKind::Symlink { r.target.len() as u64 } else { r.size };
            if !cmp.holds(size.div_ceil(unit), n) {
                return false;
            }
        }
        if let Some(t) = self.newer_than_ns {
            if r.mtime_ns <= t {
                return false;
            }
        }
        if let Some((cmp, n)) = self.mmin {
            // find: the reference time is `now - N minutes`; `+N` is older than it,
            // `-N` newer, `N` within the minute after it (an age in (N-1, N]
            // minutes: ages round up).
            let reference = self.now_ns.saturating_sub(n.saturating_mul(NS_PER_MINUTE));
            let ok = match cmp {
                Cmp::More => r.mtime_ns < reference,
                Cmp::Less => r.mtime_ns > reference,
                Cmp::Exactly => r.mtime_ns >= reference && r.mtime_ns < reference.saturating_add(NS_PER_MINUTE),
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

/// The bytes every name matching glob `p` starts with: its leading literal bytes
/// (`\x` counts as x), up to the first `*`, `?` or `[`. Empty if it starts with one.
/// A scan of names in order can seek past every name without this prefix.
pub fn glob_literal_prefix(p: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'*' | b'?' | b'[' => break,
            b'\\' if i + 1 < p.len() => {
                out.push(p[i + 1]);
                i += 2;
            }
            // A trailing backslash matches nothing (fnmatch); no prefix promises that.
            b'\\' => return Vec::new(),
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// fnmatch(3) without flags: `*` any run, `?` any byte, `[...]` a set (`!` or `^`
/// negates, `a-z` ranges, `]` first is literal), `\x` the byte x. Iterative with one
/// backtrack point, so the cost is O(pattern x name), never exponential.
pub fn glob_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, next)) = match_set(p, pi, s[si]) {
                        if hit {
                            pi = next;
                            si += 1;
                            continue;
                        }
                    } else if s[si] == b'[' {
                        // An unclosed '[' is a literal.
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
                b'\\' if pi + 1 < p.len() => {
                    if p[pi + 1] == s[si] {
                        pi += 2;
                        si += 1;
                        continue;
                    }
                }
                c => {
                    if c == s[si] {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Matches byte `c` against the set starting at `p[at] == '['`: Some((matched, index
/// after the set)), or None if the set is not closed.
fn match_set(p: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = matches!(p.get(i), Some(b'!') | Some(b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let mut lo = *p.get(i)?;
        if lo == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if lo == b'\\' {
            i += 1;
            lo = *p.get(i)?;
        }
        if p.get(i + 1) == Some(&b'-') && p.get(i + 2).is_some_and(|&h| h != b']') {
            let mut hi_at = i + 2;
            if p[hi_at] == b'\\' {
                hi_at += 1;
            }
            let hi = *p.get(hi_at)?;
            hit |= lo <= c && c <= hi;
            i = hi_at + 1;
        } else {
            hit |= lo == c;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name the glob matches starts with its literal prefix, and the prefix
    /// stops at the first wildcard.
    #[test]
    fn literal_prefixes_of_globs() {
        for (g, want) in [
            ("f1*", "f1"),
            ("f99999*", "f99999"),
            ("*.txt", ""),
            ("abc", "abc"),
            ("a?c", "a"),
            ("ab[cd]", "ab"),
            ("a\\*b*", "a*b"),
            ("x\\", ""),
            ("", ""),
        ] {
            assert_eq!(glob_literal_prefix(g.as_bytes()), want.as_bytes(), "{g}");
        }
        for (g, names) in [("f1*", ["f1", "f10", "f1x"]), ("a\\*b*", ["a*b", "a*bc", "a*b*"])] {
            for n in names {
                assert!(
                    glob_match(g.as_bytes(), n.as_bytes())
                        && n.as_bytes().starts_with(&glob_literal_prefix(g.as_bytes()))
                );
            }
        }
    }

    #[test]
    fn globs_as_fnmatch() {
        let yes = [
            ("*", ""),
            ("*", ".hidden"),
            ("*.txt", "a.txt"),
            ("a?c", "abc"),
            ("[abc]x", "bx"),
            ("[!abc]x", "dx"),
            ("[^abc]x", "dx"),
            ("[a-c]*", "cat"),
            ("[]]", "]"),
            ("\\*", "*"),
            ("a*b*c", "axxbyyc"),
            ("[", "["),
            ("f[0-9][0-9]", "f42"),
        ];
        for (p, s) in yes {
            assert!(glob_match(p.as_bytes(), s.as_bytes()), "{p} should match {s}");
        }
        let no =
            [("*.txt", "a.txt.gz"), ("a?c", "ac"), ("[abc]x", "dx"), ("[!abc]x", "ax"), ("\\*", "a"), ("a*b", "ac")];
        for (p, s) in no {
            assert!(!glob_match(p.as_bytes(), s.as_bytes()), "{p} should not match {s}");
        }
        // Pathological patterns stay linear-ish.
        let long = "a".repeat(200);
        assert!(!glob_match("*a*a*a*a*a*a*a*a*b".as_bytes(), long.as_bytes()));
    }

    #[test]
    fn predicates_round_as_find() {
        let r = |size, mtime_ns| Record {
            kind: FileKind::File,
            mode: 0o644,
            size,
            file_id: 1,
            nlink: 1,
            ctime_ns: 0,
            mtime_ns,
            atime_ns: 0,
            target: String::new(),
            uid: 0,
            gid: 0,
            xattrs: Vec::new(),
        };
        let q = |size| FindQuery { size: Some(size), ..Default::default() };
        // -size -1M matches only empty files (sizes round up to whole units).
        assert!(q((Cmp::Less, 1, 1 << 20)).matches("/a", &r(0, 0)));
        assert!(!q((Cmp::Less, 1, 1 << 20)).matches("/a", &r(1, 0)));
        assert!(q((Cmp::Exactly, 1, 1 << 20)).matches("/a", &r(1, 0)));
        assert!(q((Cmp::More, 2, 1024)).matches("/a", &r(2049, 0)));
        assert!(!q((Cmp::More, 2, 1024)).matches("/a", &r(2048, 0)));
        let now = 1_000 * NS_PER_MINUTE;
        let m = |c, n| FindQuery { mmin: Some((c, n)), now_ns: now, ..Default::default() };
        let aged = |min_x10: i64| r(0, now - min_x10 * NS_PER_MINUTE / 10);
        assert!(m(Cmp::More, 10).matches("/a", &aged(105)));
        assert!(!m(Cmp::More, 10).matches("/a", &aged(95)));
        assert!(m(Cmp::Less, 10).matches("/a", &aged(95)));
        assert!(m(Cmp::Exactly, 10).matches("/a", &aged(95)));
        assert!(!m(Cmp::Exactly, 10).matches("/a", &aged(105)));
        assert!(m(Cmp::Exactly, 11).matches("/a", &aged(105)));
        let mut tagged = r(1, 0);
        tagged.xattrs = vec![("user.s3.tag.stage".into(), b"raw".to_vec())];
        let x = |name: &str, glob: Option<&str>| FindQuery {
            xattrs: vec![(name.into(), glob.map(String::from))],
            ..Default::default()
        };
        assert!(x("user.s3.tag.stage", None).matches("/a", &tagged));
        assert!(x("user.s3.tag.stage", Some("r*")).matches("/a", &tagged));
        assert!(!x("user.s3.tag.stage", Some("cooked")).matches("/a", &tagged));
        assert!(!x("user.s3.tag.owner", None).matches("/a", &tagged));
        let n = FindQuery { name: Some("*.c".into()), ..Default::default() };
        assert!(n.matches("/d/x.c", &r(0, 0)) && !n.matches("/d.c/x", &r(0, 0)));
    }
}
