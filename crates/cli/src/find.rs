//! `gust find PATH [-name GLOB] [-type f|d|l] [-size [+-]N[cwbkMG]] [-newer FILE]
//! [-mmin [+-]N] [-xattr NAME[=GLOB]]`: GNU find's predicates (and one of ours for
//! extended attributes), evaluated by every daemon on its own
//! records in parallel (gust_client's `find`), printed as GNU find prints them (the
//! starting path, then each match as that path joined with the rest), streamed as
//! pages arrive, in no particular order.
//!
//! Not for: actions (-exec, -delete), other predicates, following symlinks (-L).

use crate::instance::InstanceArgs;
use clap::Args;
use gust_client::{now_ns, Cmp, FindQuery, Kind};
use std::io::Write;

#[derive(Args)]
pub struct FindArgs {
    #[command(flatten)]
    inst: InstanceArgs,
    /// PATH under the mount directory (or an internal path), then predicates as
    /// GNU find writes them: -name GLOB, -type f|d|l, -size [+-]N[cwbkMG],
    /// -newer FILE, -mmin [+-]N; and -xattr NAME (has the extended attribute) or
    /// -xattr NAME=GLOB (its value matches).
    #[arg(allow_hyphen_values = true, trailing_var_arg = true, required = true, value_name = "PATH [PREDICATES]")]
    args: Vec<String>,
}

fn number(s: &str) -> (Cmp, &str) {
    match s.as_bytes().first() {
        Some(b'+') => (Cmp::More, &s[1..]),
        Some(b'-') => (Cmp::Less, &s[1..]),
        _ => (Cmp::Exactly, s),
    }
}

fn parse_size(s: &str) -> Result<(Cmp, u64, u64), String> {
    let (cmp, rest) = number(s);
    let split = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let (n, unit) = rest.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("-size {s}: not a number"))?;
    let unit = match unit {
        "" | "b" => 512,
        "c" => 1,
        "w" => 2,
        "k" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("-size {s}: unknown unit (use c, w, b, k, M or G)")),
    };
    Ok((cmp, n, unit))
}

/// The modification time of `-newer FILE`: a GustFS path through the client, any
/// other path on the local file system; a symlink itself, not its target (as find
/// without -H or -L).
fn mtime_of(c: &gust_client::Client, file: &str) -> Result<i64, String> {
    if let Some(p) = c.internal_path(file) {
        let st = c.lstat(&p).map_err(|e| format!("-newer {file}: {e}"))?;
        return Ok(st.mtime_ns);
    }
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(file).map_err(|e| format!("-newer {file}: {e}"))?;
    Ok(m.mtime() * 1_000_000_000 + m.mtime_nsec())
}

/// find's predicates `preds` as a query (`-newer FILE` read through `c` for a
/// GustFS path), taken now.
pub fn parse_predicates(c: &gust_client::Client, preds: &[String]) -> Result<FindQuery, String> {
    let mut q = FindQuery { now_ns: now_ns(), ..Default::default() };
    let mut it = preds.iter();
    while let Some(p) = it.next() {
        let mut value = || it.next().ok_or(format!("missing argument to `{p}'"));
        match p.as_str() {
            "-name" => q.name = Some(value()?.clone()),
            "-type" => {
                q.kind = Some(match value()?.as_str() {
                    "f" => Kind::File,
                    "d" => Kind::Dir,
                    "l" => Kind::Symlink,
                    t => return Err(format!("-type {t}: GustFS holds files (f), directories (d) and symlinks (l)")),
                })
            }
            "-size" => q.size = Some(parse_size(value()?)?),
            "-newer" => {
                let f = value()?.clone();
                q.newer_than_ns = Some(mtime_of(c, &f)?);
            }
            "-mmin" => {
                let v = value()?;
                let (cmp, n) = number(v);
                q.mmin = Some((cmp, n.parse().map_err(|_| format!("-mmin {v}: not a whole number of minutes"))?));
            }
            "-xattr" => {
                let v = value()?;
                let (name, glob) = match v.split_once('=') {
                    Some((n, g)) => (n, Some(g.to_string())),
                    None => (v.as_str(), None),
                };
                if !name.contains('.') {
                    return Err(format!(
                        "-xattr {v}: not an attribute name (NAMESPACE.NAME, e.g. user.s3.tag.project)"
                    ));
                }
                q.xattrs.push((name.to_string(), glob));
            }
            "-print" => {}
            other => {
                return Err(format!(
                    "unknown predicate `{other}' (gust find knows -name, -type, -size, -newer, -mmin, -xattr)"
                ))
            }
        }
    }
    Ok(q)
}

pub fn run(a: FindArgs) -> Result<(), String> {
    let c = a.inst.client()?;
    let (start, preds) = a.args.split_first().ok_or("gust find: PATH missing")?;
    let q = parse_predicates(&c, preds)?;
    let root = c.internal_path(start).unwrap_or_else(|| start.clone());
    let root = gust_client::normalize(&root).map_err(|e| format!("{start}: {e}"))?;
    let rec = c.lstat_record(&root).map_err(|e| format!("{start}: {e}"))?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, out.lock());
    let mut broken = false; // stdout closed (e.g. `| head`): stop quietly
                            // The starting point is matched under the name it was given, as find does.
    if q.matches(start.trim_end_matches('/').rsplit('/').next().filter(|s| !s.is_empty()).unwrap_or(start), &rec) {
        broken |= writeln!(out, "{start}").is_err();
    }
    if rec.kind == Kind::Dir && !broken {
        let prefix = start.trim_end_matches('/');
        let strip = if root == "/" { 0 } else { root.len() };
        let r = c.find(&root, &q, |p, _| {
            if !broken {
                broken |= writeln!(out, "{prefix}{}", &p[strip..]).is_err();
            }
        });
        r.map_err(|e| format!("{start}: {e}"))?;
    }
    let _ = out.flush();
    Ok(())
}
