//! GustFS tracepoints (issue 15, part 2; the FlexTrace idea): named points in the
//! client core and the daemon that record each call they see (what, where, how many
//! bytes, how long, which daemon) into one compact binary file per process, switched
//! on and off by name or group while the process runs.
//!
//! * `registry`: the tracepoints, a static atomic switch each (an off tracepoint
//!   costs one relaxed load and a predicted branch; the `compile-out` feature
//!   removes even that).
//! * `codec`: the file format, byte by byte, with bounds and checksums.
//! * `writer`: per-thread buffers flushed in blocks to `<dir>/<role>-<pid>.gtrace`.
//! * `reader`: files back into records, with clear errors for damaged ones.
//!
//! Not for: logs. The `tracing` crate (GUST_LOG) carries human-readable log events
//! through a subscriber; tracepoints are a per-operation record stream meant for
//! tools, with a fixed binary format, no formatting on the hot path and no
//! subscriber dispatch, so they can be on for a whole job (docs/DESIGN.md).

pub mod codec;
pub mod reader;
pub mod registry;
pub mod writer;

pub use codec::Record;
pub use registry::{Tracepoint, ALL};
pub use writer::{flush, now_ns, output_dir, record, set_output, start, Timer};

/// Environment variable naming the tracepoints a client process records
/// (`write,read`, groups such as `data`, or `all`).
pub const ENV_TRACE: &str = "GUST_TRACE";
/// Environment variable naming the directory trace files go to.
pub const ENV_TRACE_DIR: &str = "GUST_TRACE_DIR";

/// Switches on the tracepoints `$GUST_TRACE` names, writing to `$GUST_TRACE_DIR`
/// (default `$TMPDIR/gust-trace`) as `role`. Nothing to do when unset or empty; an
/// unknown name or an unusable directory is an error saying which.
pub fn init_from_env(role: &str) -> Result<(), String> {
    let spec = match std::env::var(ENV_TRACE) {
        Ok(s) if !s.trim().is_empty() => s,
        _ => return Ok(()),
    };
    registry::select(&spec).map_err(|e| format!("{ENV_TRACE}: {e}"))?;
    let dir = std::env::var_os(ENV_TRACE_DIR)
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("gust-trace"));
    // The program's name with the role: `client tar`.
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let role = match comm.trim() {
        "" => role.to_string(),
        c => format!("{role} {c}"),
    };
    set_output(&dir, &role).map_err(|e| format!("{ENV_TRACE_DIR}: {}: {e}", dir.display()))?;
    registry::switch(&spec, true)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of several threads and a flush land in one file, which reads back
    /// whole: every record once, with its thread's id.
    #[test]
    fn threads_write_one_file_that_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        set_output(dir.path(), "client").unwrap();
        let per_thread = 3000u64; // more than one 64 KiB block per thread
        let threads: Vec<_> = (0..3u64)
            .map(|t| {
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        record(&Record {
                            tp: 4,
                            ts_ns: now_ns(),
                            size: t * 1_000_000 + i,
                            path: format!("/t{t}/{i}"),
                            ..Default::default()
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        record(&Record { tp: 3, ts_ns: now_ns(), size: 7, path: "/main".into(), ..Default::default() });
        flush();
        let files = reader::read_dir(dir.path()).unwrap();
        assert_eq!(files.len(), 1);
        let f = &files[0];
        assert_eq!(f.header.role, "client");
        assert_eq!(f.header.pid, std::process::id());
        assert_eq!(f.tracepoint_name(4), "write");
        assert_eq!(f.records.len() as u64, 3 * per_thread + 1);
        let mut sizes: Vec<u64> = f.records.iter().filter(|(_, r)| r.tp == 4).map(|(_, r)| r.size).collect();
        sizes.sort_unstable();
        let want: Vec<u64> = (0..3u64).flat_map(|t| (0..per_thread).map(move |i| t * 1_000_000 + i)).collect();
        assert_eq!(sizes, want);
        let tids: std::collections::HashSet<u32> = f.records.iter().map(|(t, _)| *t).collect();
        assert_eq!(tids.len(), 4, "three threads and the main one");
    }
}
