//! Reading trace files back (`gust trace report`).
//!
//! Not for: summaries and plots (the `gust` CLI's trace report).

use crate::codec::{decode_blocks, decode_header, Header, Record};
use std::path::{Path, PathBuf};

/// One process's trace: its header and its records with their thread ids.
#[derive(Debug, Clone)]
pub struct TraceFile {
    pub path: PathBuf,
    pub header: Header,
    pub records: Vec<(u32, Record)>,
}

impl TraceFile {
    /// The name of tracepoint `id` as this file's writer knew it.
    pub fn tracepoint_name(&self, id: u16) -> &str {
        self.header.tracepoints.iter().find(|(i, _)| *i == id).map_or("?", |(_, n)| n.as_str())
    }
}

/// Reads one trace file. The error names the file and says what is wrong where.
pub fn read_file(path: &Path) -> Result<TraceFile, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (header, at) = decode_header(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let records = decode_blocks(&bytes, at, header.base_ns).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(TraceFile { path: path.to_path_buf(), header, records })
}

/// Reads every `*.gtrace` file of `dir`, in name order. An error if there are none
/// or any one is unreadable.
pub fn read_dir(dir: &Path) -> Result<Vec<TraceFile>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("{}: no trace files (*.gtrace) here", dir.display()));
    }
    paths.iter().map(|p| read_file(p)).collect()
}
