//! SLURM's hostlist syntax: `node[01-16,20],gpu3` names node01 … node16, node20 and
//! gpu3.
//!
//! Grammar (what `scontrol show hostnames` accepts for the common cases):
//!
//! ```text
//! list   = item { "," item }              commas inside brackets separate ranges
//! item   = text { "[" ranges "]" text }   several bracket groups: cartesian product
//! ranges = range { "," range }
//! range  = digits [ "-" digits ]          zero padding: the width of the lower bound
//! ```
//!
//! `node[08-10]` is node08, node09, node10; `n[1-3]x[1-2]` is n1x1, n1x2, n2x1, …
//! Host names are kept in the order given; duplicates are kept too (the caller decides
//! whether they are an error). Every expansion is bounded by [`HOSTS_MAX`].

use std::fmt;

/// Bound on the hosts one list may name (the hosts file's bound on daemons).
pub const HOSTS_MAX: usize = gust_hosts::DAEMONS_MAX;
/// Bound on the text of one list.
pub const LIST_BYTES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostlistError {
    pub list: String,
    pub msg: String,
}

impl fmt::Display for HostlistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad host list '{}': {}", self.list, self.msg)
    }
}

impl std::error::Error for HostlistError {}

/// Expands a host list into host names.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let err = |msg: String| HostlistError { list: list.to_string(), msg };
    if list.len() > LIST_BYTES_MAX {
        return Err(err(format!("longer than {LIST_BYTES_MAX} bytes")));
    }
    let mut out = Vec::new();
    for item in split_top(list).map_err(err)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(err("empty host name (two commas in a row, or a comma at an end?)".into()));
        }
        expand_item(item, &mut out).map_err(err)?;
    }
    if out.is_empty() {
        return Err(err("names no host".into()));
    }
    Ok(out)
}

/// Splits at commas outside brackets; checks that brackets balance and do not nest.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' if depth == 0 => depth = 1,
            '[' => return Err(format!("nested '[' at byte {i}")),
            ']' if depth == 1 => depth = 0,
            ']' => return Err(format!("']' without '[' at byte {i}")),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("'[' without ']'".into());
    }
    items.push(&list[start..]);
    Ok(items)
}

/// One range group's values, each already formatted with its padding.
fn expand_ranges(ranges: &str) -> Result<Vec<String>, String> {
    let mut vals = Vec::new();
    for r in ranges.split(',') {
        let r = r.trim();
        let (lo_s, hi_s) = match r.split_once('-') {
            Some((a, b)) => (a, b),
            None => (r, r),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo_s) || !digits(hi_s) {
            return Err(format!("'[{ranges}]': range '{r}' is not N or N-M with decimal N, M"));
        }
        if lo_s.len() > 18 || hi_s.len() > 18 {
            return Err(format!("'[{ranges}]': number too long in '{r}'"));
        }
        let lo: u64 = lo_s.parse().map_err(|_| format!("bad number '{lo_s}'"))?;
        let hi: u64 = hi_s.parse().map_err(|_| format!("bad number '{hi_s}'"))?;
        if lo > hi {
            return Err(format!("'[{ranges}]': range '{r}' runs backwards"));
        }
        if hi - lo >= HOSTS_MAX as u64 || vals.len() + (hi - lo) as usize >= HOSTS_MAX {
            return Err(format!("more than {HOSTS_MAX} hosts"));
        }
        // SLURM pads to the width of the lower bound when it has a leading zero.
        let width = if lo_s.len() > 1 && lo_s.starts_with('0') { lo_s.len() } else { 0 };
        for v in lo..=hi {
            vals.push(format!("{v:0width$}"));
        }
    }
    Ok(vals)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    // Split into literal text and bracket groups, then take the cartesian product.
    let mut names = vec![String::new()];
    let mut rest = item;
    while !rest.is_empty() {
        let (text, after) = match rest.find('[') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        check_text(text, item)?;
        for n in names.iter_mut() {
            n.push_str(text);
        }
        match after {
            None => rest = "",
            Some(a) => {
                let close = a.find(']').ok_or_else(|| format!("'{item}': '[' without ']'"))?;
                let vals = expand_ranges(&a[..close])?;
                if names.len().saturating_mul(vals.len()) + out.len() > HOSTS_MAX {
                    return Err(format!("more than {HOSTS_MAX} hosts"));
                }
                names = names.iter().flat_map(|n| vals.iter().map(move |v| format!("{n}{v}"))).collect();
                rest = &a[close + 1..];
            }
        }
    }
    if out.len() + names.len() > HOSTS_MAX {
        return Err(format!("more than {HOSTS_MAX} hosts"));
    }
    out.extend(names);
    Ok(())
}

/// Host-name characters: letters, digits, '-', '.', '_'. No ':' (a port is not part
/// of a host list) and no spaces.
fn check_text(text: &str, item: &str) -> Result<(), String> {
    match text.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))) {
        Some(c) => Err(format!("'{item}': character '{c}' cannot be part of a host name")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn plain_names() {
        assert_eq!(ok("gpu3"), ["gpu3"]);
        assert_eq!(ok("a,b.example.org,c-1"), ["a", "b.example.org", "c-1"]);
        assert_eq!(ok(" a , b "), ["a", "b"]);
    }

    #[test]
    fn ranges_and_padding() {
        let v = ok("node[01-16,20],gpu3");
        assert_eq!(v.len(), 18);
        assert_eq!(v[0], "node01");
        assert_eq!(v[15], "node16");
        assert_eq!(v[16], "node20");
        assert_eq!(v[17], "gpu3");
        assert_eq!(ok("n[8-11]"), ["n8", "n9", "n10", "n11"]);
        assert_eq!(ok("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(ok("n[0-1]"), ["n0", "n1"]);
        assert_eq!(ok("n[007]"), ["n007"]);
        assert_eq!(ok("rack[1-2]-n[1-2].ib"), ["rack1-n1.ib", "rack1-n2.ib", "rack2-n1.ib", "rack2-n2.ib"]);
        assert_eq!(ok("[1-2]x"), ["1x", "2x"]);
    }

    #[test]
    fn errors_name_the_problem() {
        let e = |s: &str| expand(s).unwrap_err().to_string();
        assert!(e("").contains("empty host name"));
        assert!(e("a,,b").contains("empty host name"));
        assert!(e("a,").contains("empty host name"));
        assert!(e("n[1-3").contains("'[' without ']'"));
        assert!(e("n1-3]").contains("']' without '['"));
        assert!(e("n[[1]]").contains("nested"));
        assert!(e("n[3-1]").contains("backwards"));
        assert!(e("n[a-b]").contains("not N or N-M"));
        assert!(e("n[1-]").contains("not N or N-M"));
        assert!(e("n[]").contains("not N or N-M"));
        assert!(e("n[1,,2]").contains("not N or N-M"));
        assert!(e("n[1-2:2]").contains("not N or N-M"));
        assert!(e("no de").contains("character ' '"));
        assert!(e("host:22").contains("character ':'"));
        assert!(e("n[0-99999999]").contains("more than"));
        assert!(e("a[0-999]b[0-999]").contains("more than"));
        assert!(e("n[2-1]").starts_with("bad host list 'n[2-1]': "));
    }

    #[test]
    fn duplicates_are_kept() {
        assert_eq!(ok("a,a"), ["a", "a"]);
    }
}
