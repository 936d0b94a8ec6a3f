//! The read record of a run: which files (and byte ranges) the job read, gathered
//! from the daemons' read logs at `gust stop --record-reads FILE`, and the set of
//! files `gust stage in --from-record FILE` stages for the next run of the same
//! workflow (the BigStorage YOLO idea: what a run reads is small and stable).
//!
//! The file is JSON lines: a header `{"gustfs_read_record":1,"files":N,"bytes":B,
//! "dropped":D}`, then one `{"path":"/data/x","size":S,"ranges":[[start,end],..]}`
//! per file read. Paths are GustFS paths; ranges are byte ranges read (end
//! exclusive). A stage-in from it stages whole files: a partly staged file would
//! read zeros where it was not staged.

use gust_client::{Client, FindQuery};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

#[derive(Serialize, Deserialize)]
struct Header {
    gustfs_read_record: u32,
    files: u64,
    bytes: u64,
    dropped: u64,
}

#[derive(Serialize, Deserialize)]
struct FileRead {
    path: String,
    size: u64,
    ranges: Vec<(u64, u64)>,
}

/// What a record holds: files, bytes read (ranges summed), files the daemons had
/// no room to log.
pub struct RecordSummary {
    pub files: u64,
    pub bytes: u64,
    pub dropped: u64,
}

/// Gathers every daemon's read log and writes the record to `out`.
pub fn record(c: &Client, out: &Path) -> Result<RecordSummary, String> {
    let mut reads: BTreeMap<u128, Vec<(u64, u64)>> = BTreeMap::new();
    let mut dropped = 0;
    for d in 0..c.daemon_count() {
        let mut after = None;
        loop {
            let page = c.read_log_page(d, after).map_err(|e| format!("read log of daemon {d}: {e}"))?;
            dropped += page.dropped;
            after = page.entries.last().map(|e| e.file_id);
            for e in page.entries {
                reads.entry(e.file_id).or_default().extend(e.chunks);
            }
            if page.done || after.is_none() {
                break;
            }
        }
    }
    // File ids to paths: one scan of every daemon's records.
    let mut files = Vec::new();
    c.find("/", &FindQuery::default(), |p, r| {
        if let Some(ranges) = reads.get(&r.file_id) {
            files.push(FileRead { path: p.to_string(), size: r.size, ranges: merged(ranges) });
        }
    })
    .map_err(|e| format!("listing the file system: {e}"))?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let bytes = files.iter().flat_map(|f| f.ranges.iter()).map(|(s, e)| e - s).sum();
    let h = Header { gustfs_read_record: 1, files: files.len() as u64, bytes, dropped };
    let write = || -> std::io::Result<()> {
        let mut w = BufWriter::new(std::fs::File::create(out)?);
        serde_json::to_writer(&mut w, &h)?;
        w.write_all(b"\n")?;
        for f in &files {
            serde_json::to_writer(&mut w, f)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    };
    write().map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(RecordSummary { files: h.files, bytes, dropped })
}

/// Ranges from several daemons (chunks of one file) as one sorted, merged list.
fn merged(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut r = ranges.to_vec();
    r.sort();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The GustFS paths of the files in a record.
pub fn load(path: &Path) -> Result<HashSet<String>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = std::io::BufReader::new(f).lines();
    let bad = |n: usize, e: &dyn std::fmt::Display| format!("{}:{n}: not a GustFS read record: {e}", path.display());
    let first = lines.next().ok_or_else(|| bad(1, &"empty file"))?.map_err(|e| bad(1, &e))?;
    let h: Header = serde_json::from_str(&first).map_err(|e| bad(1, &e))?;
    if h.gustfs_read_record != 1 {
        return Err(bad(1, &format!("format {} (this gust reads format 1)", h.gustfs_read_record)));
    }
    let mut out = HashSet::new();
    for (k, l) in lines.enumerate() {
        let l = l.map_err(|e| bad(k + 2, &e))?;
        if l.trim().is_empty() {
            continue;
        }
        let f: FileRead = serde_json::from_str(&l).map_err(|e| bad(k + 2, &e))?;
        out.insert(f.path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_from_daemons_merge() {
        assert_eq!(merged(&[(10, 20), (0, 5), (5, 10), (30, 40)]), vec![(0, 20), (30, 40)]);
    }

    #[test]
    fn a_bad_record_is_refused_with_its_line() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r");
        std::fs::write(&p, "{\"gustfs_read_record\":1,\"files\":1,\"bytes\":3,\"dropped\":0}\n{\"path\":\"/a\"}\n")
            .unwrap();
        let e = load(&p).unwrap_err();
        assert!(e.contains(":2: not a GustFS read record"), "{e}");
        std::fs::write(&p, "{\"gustfs_read_record\":1,\"files\":1,\"bytes\":3,\"dropped\":0}\n{\"path\":\"/a\",\"size\":3,\"ranges\":[[0,3]]}\n").unwrap();
        assert_eq!(load(&p).unwrap(), HashSet::from(["/a".to_string()]));
    }
}
