//! Worker processes: the parent starts P of them (`gust bench worker`, its spec in
//! `GUST_BENCH_SPEC`) and drives them phase by phase over their stdin and stdout.

use crate::phase::run_phase;
use crate::target::make_target;
use crate::WorkerSpec;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Entry point of `gust bench worker`: spec from the environment, phases on stdin
/// ("go PHASE"), one JSON report per phase on stdout.
pub fn worker() -> Result<(), String> {
    let spec: WorkerSpec =
        serde_json::from_str(&std::env::var("GUST_BENCH_SPEC").map_err(|_| "GUST_BENCH_SPEC not set")?)
            .map_err(|e| e.to_string())?;
    let t = make_target(&spec.target, &spec.hosts_file)?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    writeln!(out, "ready").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let Some(phase) = line.strip_prefix("go ") else { break };
        let r = run_phase(t.as_ref(), &spec, phase);
        writeln!(out, "{}", serde_json::to_string(&r).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub(crate) struct Worker {
    pub(crate) child: Child,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: BufReader<ChildStdout>,
}

/// Starts one worker per spec with `command` (program, then arguments) and waits for
/// each one's "ready".
pub(crate) fn spawn_workers(
    command: &[OsString],
    specs: Vec<WorkerSpec>,
    extra_env: &[(String, String)],
) -> Result<Vec<Worker>, String> {
    let (prog, args) = command.split_first().ok_or("no worker command")?;
    let mut ws = Vec::new();
    for s in specs {
        let mut cmd = Command::new(prog);
        cmd.args(args).env("GUST_BENCH_SPEC", serde_json::to_string(&s).map_err(|e| e.to_string())?);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot spawn worker: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            let _ = child.kill();
            return Err(format!("worker {} failed to start: {}", s.rank, line.trim()));
        }
        ws.push(Worker { child, stdin, stdout });
    }
    Ok(ws)
}
