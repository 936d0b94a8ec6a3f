//! What a stage tells people and scripts: a progress bar on a terminal (files,
//! bytes, rate, ETA), a one-line summary, every failure with its reason, and the
//! same as JSON (`--json`).

use indicatif::{HumanBytes, HumanDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A file (or directory) that was not staged, and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Failure {
    pub path: String,
    pub reason: String,
}

/// The outcome of one stage.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub direction: &'static str,
    /// Who copied: "daemons" or "client".
    pub via: &'static str,
    /// Files and symlinks staged by this run.
    pub files: u64,
    pub symlinks: u64,
    pub directories: u64,
    /// Files and symlinks already complete at the destination (a rerun).
    pub skipped: u64,
    /// Bytes of the files staged by this run.
    pub bytes: u64,
    pub seconds: f64,
    /// Files whose checksums were compared (`--verify`).
    pub verified: Option<u64>,
    /// Objects whose properties (metadata, tags) were written back alone (their
    /// files' attributes changed, not their bytes).
    pub properties: u64,
    pub failures: Vec<Failure>,
}

impl Summary {
    /// One line for a terminal or a log: "staged in 1,204 files (3.2 GiB) in 4.1 s
    /// (790 MiB/s) by the daemons; 12 already complete; 2 failed".
    pub fn line(&self) -> String {
        let rate = self.bytes as f64 / self.seconds.max(1e-6);
        let mut s = format!(
            "staged {} {} file(s) ({}) in {} ({}/s) through the {}",
            self.direction,
            self.files,
            HumanBytes(self.bytes),
            human_secs(self.seconds),
            HumanBytes(rate as u64),
            if self.via == "client" { "client" } else { "daemons" },
        );
        if self.symlinks > 0 {
            s.push_str(&format!(", {} symlink(s)", self.symlinks));
        }
        if self.skipped > 0 {
            s.push_str(&format!("; {} already complete", self.skipped));
        }
        if let Some(v) = self.verified {
            s.push_str(&format!("; {v} verified"));
        }
        if self.properties > 0 {
            s.push_str(&format!("; properties of {} object(s) written back", self.properties));
        }
        if !self.failures.is_empty() {
            s.push_str(&format!("; {} FAILED", self.failures.len()));
        }
        s
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a summary always serializes")
    }
}

/// Seconds for people: "1.25 s" under ten, else "3 minutes".
pub fn human_secs(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.2} s")
    } else {
        HumanDuration(Duration::from_secs_f64(s)).to_string()
    }
}

/// Progress of the copy: a bar on stderr when it is a terminal, nothing otherwise.
pub struct Progress {
    bar: Option<ProgressBar>,
    files: AtomicU64,
    total_files: u64,
}

impl Progress {
    pub fn new(wanted: bool, total_files: u64, total_bytes: u64) -> Self {
        let bar = (wanted && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr_with_hz(4));
            b.set_style(
                ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}")
                    .expect("the template is valid")
                    .progress_chars("=> "),
            );
            b.set_message(format!("0/{total_files} files"));
            b
        });
        Progress { bar, files: AtomicU64::new(0), total_files }
    }

    /// Notes files (and their bytes) done, or failed (their bytes leave the total).
    pub fn add(&self, files: u64, bytes: u64) {
        let done = self.files.fetch_add(files, Ordering::Relaxed) + files;
        if let Some(b) = &self.bar {
            b.inc(bytes);
            b.set_message(format!("{done}/{} files", self.total_files));
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
