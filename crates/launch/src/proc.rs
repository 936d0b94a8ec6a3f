//! Small process helpers shared by the launcher, the agent and `gust stop`.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Makes `cmd`'s child start a session of its own (setsid before exec): it outlives
/// this command's session, and a terminal's Ctrl-C or hang-up does not reach it
/// (daemons, the node agent's daemon, srun and ssh launchers, a background mount,
/// the cache's write-back).
pub fn own_session(cmd: &mut Command) -> &mut Command {
    // SAFETY: setsid is async-signal-safe, the only call made between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    }
}

pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    pid != 0 && unsafe { libc::kill(pid as i32, 0) } == 0
}

/// A process that exited but is not reaped yet (its parent, often init in a
/// container, reaps lazily) is not running.
pub fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.split_whitespace().nth(2) == Some("Z")).unwrap_or(true)
}

pub fn running(pid: u32) -> bool {
    pid_alive(pid) && !is_zombie(pid)
}

/// Sends `sig` to a child, then waits up to `grace` for it to exit, then kills it.
pub fn stop_child(c: &mut Child, sig: i32, grace: Duration) {
    if let Ok(Some(_)) = c.try_wait() {
        return;
    }
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(c.id() as i32, sig) };
    let end = Instant::now() + grace;
    while Instant::now() < end {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// The last `lines` lines of a text file, joined by " | " (for one-line messages).
pub fn tail_oneline(path: &Path, lines: usize) -> String {
    let t = fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
}

/// Quotes one word for a POSIX shell (ssh runs the remote command through one).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The last `lines` lines of the file at `path` (empty if it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = t.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting() {
        assert_eq!(super::shell_quote("/a/b"), "/a/b");
        assert_eq!(super::shell_quote("a b"), "'a b'");
        assert_eq!(super::shell_quote("it's"), "'it'\\''s'");
        assert_eq!(super::shell_quote(""), "''");
    }
}
