//! Chrome / Perfetto trace JSON (the Trace Event Format): one complete event
//! ("ph": "X") per record, times in microseconds after the first record, one
//! process per trace file with its role as the process name. Open it in
//! ui.perfetto.dev or chrome://tracing.

use gust_trace::reader::TraceFile;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn write(files: &[TraceFile], first_ns: u64, path: &Path) -> Result<PathBuf, String> {
    let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    w.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n").map_err(io)?;
    let mut first = true;
    let mut emit = |w: &mut std::io::BufWriter<std::fs::File>, v: serde_json::Value| -> Result<(), String> {
        if !first {
            w.write_all(b",\n").map_err(io)?;
        }
        first = false;
        serde_json::to_writer(&mut *w, &v).map_err(|e| e.to_string())
    };
    for f in files {
        let pid = f.header.pid;
        emit(&mut w, json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f.header.role}}))?;
        for (tid, r) in &f.records {
            let mut args = json!({"result": r.result});
            if !r.path.is_empty() {
                args["path"] = json!(r.path);
            }
            if r.size > 0 {
                args["size"] = json!(r.size);
            }
            if r.offset > 0 {
                args["offset"] = json!(r.offset);
            }
            if let Some(d) = r.daemon {
                args["daemon"] = json!(d);
            }
            if r.file_id != 0 {
                args["file_id"] = json!(format!("{:032x}", r.file_id));
            }
            emit(
                &mut w,
                json!({
                    "name": f.tracepoint_name(r.tp),
                    "ph": "X",
                    "ts": r.ts_ns.saturating_sub(first_ns) as f64 / 1e3,
                    "dur": r.dur_ns as f64 / 1e3,
                    "pid": pid,
                    "tid": tid,
                    "args": args,
                }),
            )?;
        }
    }
    w.write_all(b"\n]}\n").map_err(io)?;
    w.flush().map_err(io)?;
    Ok(path.to_path_buf())
}
