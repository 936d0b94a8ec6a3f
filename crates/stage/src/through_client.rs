//! The copy through this process: `jobs` threads sharing one client (thread-safe,
//! pooled connections). Few round trips per file, so it wins for a handful of files
//! on one machine; it does not grow with the node count.
//!
//! The same guarantees as the daemons' copy: a file staged in gets its source's
//! modification time only once all its bytes are in (until then a rerun copies it
//! again); a file staged out is written under a temporary name and renamed.

use crate::outbound::partial_name;
use crate::report::Failure;
use crate::tree::{set_times_local, Item};
use crate::{reason, Direction, Job, Moved};
use gust_client::{Client, Kind};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::sync::Mutex;

const COPY_BUFFER_BYTES: usize = 4 << 20;

pub(crate) fn copy(job: Job) -> Moved {
    let Job { c, o, items, todo, existing, progress, throttle, .. } = job;
    let queue = Mutex::new(todo.iter().copied().filter(|&i| !items[i].is_dir()).rev().collect::<Vec<_>>());
    let staged = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..o.jobs.max(1) {
            s.spawn(|| loop {
                let Some(i) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else { break };
                let it = &items[i];
                throttle.admit(it.size);
                let r = if existing.get(&it.dest) == Some(Kind::Dir) {
                    Err(format!("{} is a directory", it.dest))
                } else {
                    match (o.direction, it.kind) {
                        (Direction::In, Kind::Symlink) => {
                            let _ = c.unlink(&it.dest);
                            c.symlink(&it.target, &it.dest).map_err(|e| reason(e.0))
                        }
                        (Direction::In, _) => copy_in(c, it),
                        (Direction::Out, Kind::Symlink) => {
                            let _ = fs::remove_file(&it.dest);
                            std::os::unix::fs::symlink(&it.target, &it.dest)
                                .and_then(|_| set_times_local(&it.dest, it.atime_ns, it.mtime_ns))
                                .map_err(|e| e.to_string())
                        }
                        (Direction::Out, _) => copy_out(c, it),
                    }
                };
                progress.add(1, it.size);
                match r {
                    Ok(()) => staged.lock().unwrap_or_else(|e| e.into_inner()).push(i),
                    Err(why) => failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Failure { path: it.src.clone(), reason: why }),
                }
            });
        }
    });
    Moved {
        staged: staged.into_inner().unwrap_or_else(|e| e.into_inner()),
        failures: failures.into_inner().unwrap_or_else(|e| e.into_inner()),
    }
}

fn copy_in(c: &Client, it: &Item) -> Result<(), String> {
    let mut f = fs::File::open(&it.src).map_err(|e| e.to_string())?;
    let fd = c.open(&it.dest, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, it.mode).map_err(|e| reason(e.0))?;
    let mut buf = vec![0u8; COPY_BUFFER_BYTES.min(it.size as usize + 1)];
    let mut total = 0u64;
    let r: Result<(), String> = (|| loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        c.write(fd, &buf[..n]).map_err(|e| reason(e.0))?;
        total += n as u64;
    })();
    let closed = c.close(fd).map_err(|e| reason(e.0));
    r?;
    closed?;
    if total != it.size {
        return Err(reason(libc::ENODATA));
    }
    // Mode again (the creation's went through the umask), then the times: last, as
    // the mark of a complete file.
    c.chmod(&it.dest, it.mode).map_err(|e| reason(e.0))?;
    c.utimens(&it.dest, Some(it.atime_ns), Some(it.mtime_ns), true).map_err(|e| reason(e.0))
}

fn copy_out(c: &Client, it: &Item) -> Result<(), String> {
    let fd = c.open(&it.src, libc::O_RDONLY, 0).map_err(|e| reason(e.0))?;
    let tmp = partial_name(&it.dest);
    let r = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| format!("{tmp}: {e}"))?;
        let mut buf = vec![0u8; COPY_BUFFER_BYTES.min(it.size as usize + 1)];
        loop {
            let n = c.read(fd, &mut buf).map_err(|e| reason(e.0))?;
            if n == 0 {
                break;
            }
            f.write_all(&buf[..n]).map_err(|e| format!("{tmp}: {e}"))?;
        }
        drop(f);
        fs::set_permissions(&tmp, fs::Permissions::from_mode(it.mode))
            .and_then(|_| set_times_local(&tmp, it.atime_ns, it.mtime_ns))
            .and_then(|_| fs::rename(&tmp, &it.dest))
            .map_err(|e| format!("{}: {e}", it.dest))
    })();
    let _ = c.close(fd);
    if r.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    r
}
