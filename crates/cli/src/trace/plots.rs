//! PNG plots of a trace (plotters, bitmap backend, text drawn with ab_glyph from a
//! TrueType font on disk, so no fontconfig or freetype is needed at build or run
//! time): an I/O timeline per process, a request-size histogram and the load per
//! daemon.

use super::report::{is_client, Summary};
use gust_trace::reader::TraceFile;
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Fonts tried in order (Debian's fonts-dejavu-core first); GUST_PLOT_FONT wins.
const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];
/// Records drawn per timeline at most (a longer trace is sampled evenly).
const TIMELINE_RECORDS_MAX: usize = 200_000;

fn register_font() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let env = std::env::var("GUST_PLOT_FONT").ok();
        let candidates: Vec<String> = env.into_iter().chain(FONT_PATHS.iter().map(|s| s.to_string())).collect();
        for p in &candidates {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{p}: not a usable TrueType font"));
            }
        }
        Err(format!(
            "no font found ({}); install Debian's fonts-dejavu-core or set GUST_PLOT_FONT=FILE.ttf",
            candidates.join(", ")
        ))
    })
    .clone()
}

fn e2s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn color_of(name: &str) -> RGBColor {
    match name {
        "read" | "chunk_read" => RGBColor(31, 119, 180),
        "write" | "chunk_write" => RGBColor(214, 39, 40),
        "md_read" | "stat" | "readdir" => RGBColor(44, 160, 44),
        "md_update" | "open" | "close" | "mkdir" => RGBColor(255, 127, 14),
        _ => RGBColor(127, 127, 127),
    }
}

pub fn draw_all(files: &[TraceFile], s: &Summary, out: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let mut written = Vec::new();
    for (i, f) in files.iter().enumerate() {
        let stem = f.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| format!("{i}"));
        let p = out.join(format!("timeline-{stem}.png"));
        timeline(f, s.first_ns, &p).map_err(|e| format!("{}: {e}", p.display()))?;
        written.push(p);
    }
    let p = out.join("request-sizes.png");
    sizes(files, &p).map_err(|e| format!("{}: {e}", p.display()))?;
    written.push(p);
    let p = out.join("daemon-load.png");
    daemon_load(s, &p).map_err(|e| format!("{}: {e}", p.display()))?;
    written.push(p);
    Ok(written)
}

/// One lane per tracepoint, one bar per call from its start to its end.
fn timeline(f: &TraceFile, first_ns: u64, path: &Path) -> Result<(), String> {
    let mut lanes: Vec<String> = f.records.iter().map(|(_, r)| f.tracepoint_name(r.tp).to_string()).collect();
    lanes.sort();
    lanes.dedup();
    let end_s =
        f.records.iter().map(|(_, r)| (r.ts_ns + r.dur_ns).saturating_sub(first_ns)).max().unwrap_or(1) as f64 / 1e9;
    let height = 120 + 40 * lanes.len().max(1) as u32;
    let root = BitMapBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE).map_err(e2s)?;
    let title = format!("I/O timeline: {} (pid {})", f.header.role, f.header.pid);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(110)
        .build_cartesian_2d(0f64..end_s.max(1e-6) * 1.02, 0f64..lanes.len().max(1) as f64)
        .map_err(e2s)?;
    let names = lanes.clone();
    chart
        .configure_mesh()
        .x_desc("seconds since the trace began")
        .y_labels(lanes.len().max(1) * 2 + 1)
        .y_label_formatter(&move |y| {
            let i = y.floor() as usize;
            if (y - i as f64 - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .disable_y_mesh()
        .draw()
        .map_err(e2s)?;
    let step = (f.records.len() / TIMELINE_RECORDS_MAX).max(1);
    // Bars at least 1/1000 of the width, so short calls stay visible.
    let min_w = end_s / 1000.0;
    chart
        .draw_series(f.records.iter().step_by(step).map(|(_, r)| {
            let name = f.tracepoint_name(r.tp);
            let lane = lanes.iter().position(|l| l == name).unwrap_or(0) as f64;
            let x0 = r.ts_ns.saturating_sub(first_ns) as f64 / 1e9;
            let x1 = x0 + (r.dur_ns as f64 / 1e9).max(min_w);
            Rectangle::new([(x0, lane + 0.15), (x1, lane + 0.85)], color_of(name).mix(0.6).filled())
        }))
        .map_err(e2s)?;
    root.present().map_err(e2s)?;
    Ok(())
}

/// Client reads and writes by size (powers of two); daemon chunk requests if no
/// client recorded any.
fn sizes(files: &[TraceFile], path: &Path) -> Result<(), String> {
    let pick = |client: bool, names: [&str; 2]| -> [Vec<u64>; 2] {
        let mut v = [vec![0u64; 64], vec![0u64; 64]];
        for f in files.iter().filter(|f| is_client(f) == client) {
            for (_, r) in &f.records {
                let n = f.tracepoint_name(r.tp);
                if let Some(k) = names.iter().position(|x| *x == n) {
                    if r.size > 0 && r.result == 0 {
                        v[k][63 - r.size.leading_zeros() as usize] += 1;
                    }
                }
            }
        }
        v
    };
    let (mut hist, mut labels) = (pick(true, ["read", "write"]), ["read", "write"]);
    if hist.iter().all(|h| h.iter().all(|c| *c == 0)) {
        hist = pick(false, ["chunk_read", "chunk_write"]);
        labels = ["chunk_read", "chunk_write"];
    }
    let used: Vec<usize> = (0..64).filter(|b| hist[0][*b] + hist[1][*b] > 0).collect();
    let (lo, hi) = (used.first().copied().unwrap_or(0), used.last().copied().unwrap_or(0));
    let ymax = hist.iter().flat_map(|h| h.iter()).copied().max().unwrap_or(0).max(1);
    let root = BitMapBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(e2s)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Request sizes (red: write, blue: read)", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(lo as f64..(hi + 1) as f64, 0f64..ymax as f64 * 1.1)
        .map_err(e2s)?;
    chart
        .configure_mesh()
        .x_desc("request size (at least)")
        .y_desc("requests")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_labels(hi - lo + 2)
        .x_label_formatter(&|x| crate::human_size(1u64 << (x.floor() as u32).min(63)))
        .draw()
        .map_err(e2s)?;
    for (k, name) in labels.iter().enumerate() {
        let c = color_of(name);
        let off = k as f64 * 0.4;
        chart
            .draw_series(used.iter().map(|b| {
                let x = *b as f64 + 0.1 + off;
                Rectangle::new([(x, 0.0), (x + 0.4, hist[k][*b] as f64)], c.filled())
            }))
            .map_err(e2s)?;
    }
    root.present().map_err(e2s)?;
    Ok(())
}

/// Requests per daemon: as clients sent them (orange) and as daemons served them
/// (green).
fn daemon_load(s: &Summary, path: &Path) -> Result<(), String> {
    let n = s.daemons.keys().max().map_or(1, |d| d + 1);
    let ymax = s.daemons.values().map(|l| l.client_requests.max(l.served_requests)).max().unwrap_or(0).max(1);
    let root = BitMapBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(e2s)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Load per daemon (orange: client requests, green: served)", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax as f64 * 1.1)
        .map_err(e2s)?;
    chart
        .configure_mesh()
        .x_desc("daemon")
        .y_desc("requests")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_labels(n as usize * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor();
            if (x - i - 0.5).abs() < 0.01 {
                format!("{i}")
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(e2s)?;
    let client = RGBColor(255, 127, 14);
    let served = RGBColor(44, 160, 44);
    chart
        .draw_series(s.daemons.iter().flat_map(|(d, l)| {
            let x = *d as f64;
            [
                Rectangle::new([(x + 0.1, 0.0), (x + 0.5, l.client_requests as f64)], client.filled()),
                Rectangle::new([(x + 0.5, 0.0), (x + 0.9, l.served_requests as f64)], served.filled()),
            ]
        }))
        .map_err(e2s)?;
    root.present().map_err(e2s)?;
    Ok(())
}
