//! `gust stage in|out`: parallel copy between a local (or parallel) file system and
//! GustFS. Directories are created first, then files are copied by a pool of threads
//! sharing one client (the client core is thread-safe and pools connections).

use crate::instance::InstanceArgs;
use clap::{Args, ValueEnum};
use gust_client::{Client, Kind};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Clone, Copy, ValueEnum)]
enum Direction {
    /// Local path -> GustFS path.
    In,
    /// GustFS path -> local path.
    Out,
}

#[derive(Args)]
pub struct StageArgs {
    #[arg(value_enum)]
    direction: Direction,
    /// Source: a file or directory.
    src: String,
    /// Destination (created; must not be an existing file).
    dest: String,
    /// Copy threads.
    #[arg(short = 'j', long, default_value_t = 4)]
    jobs: usize,
    #[command(flatten)]
    inst: InstanceArgs,
}

const COPY_BUFFER_BYTES: usize = 4 << 20;

pub fn run(a: StageArgs) -> Result<(), String> {
    let c = a.inst.client()?;
    let started = Instant::now();
    // Stage-out: directories created, with the mode each must get once its contents
    // are in (pre-order; set in reverse, so a read-only directory is filled first).
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    let files: Vec<(String, String)> = match a.direction {
        Direction::In => {
            let dest = c.internal_path(&a.dest).unwrap_or_else(|| a.dest.clone());
            let mut list = Vec::new();
            walk_local(&c, Path::new(&a.src), &dest, &mut list)?;
            list.into_iter().map(|(s, d)| (s.display().to_string(), d)).collect()
        }
        Direction::Out => {
            let src = c.internal_path(&a.src).unwrap_or_else(|| a.src.clone());
            let mut list = Vec::new();
            walk_gust(&c, &src, Path::new(&a.dest), &mut list, &mut dir_modes)?;
            list.into_iter().map(|(s, d)| (s, d.display().to_string())).collect()
        }
    };
    let total = files.len();
    let queue = Mutex::new(files);
    let bytes = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let errors = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..a.jobs.max(1) {
            s.spawn(|| loop {
                let Some((src, dst)) = queue.lock().unwrap().pop() else { break };
                let r = match a.direction {
                    Direction::In => copy_in(&c, Path::new(&src), &dst),
                    Direction::Out => copy_out(&c, &src, Path::new(&dst)),
                };
                match r {
                    Ok(n) => {
                        bytes.fetch_add(n, Ordering::Relaxed);
                        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if d.is_multiple_of(1000) {
                            eprint!("\rgust stage: {d}/{total} files");
                        }
                    }
                    Err(e) => errors.lock().unwrap().push(e),
                }
            });
        }
    });
    let mut errs = errors.into_inner().unwrap();
    for (d, mode) in dir_modes.iter().rev() {
        if let Err(e) = fs::set_permissions(d, fs::Permissions::from_mode(*mode)) {
            errs.push(format!("{}: cannot set mode {mode:04o}: {e}", d.display()));
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let b = bytes.load(Ordering::Relaxed);
    eprintln!(
        "\rgust stage: {} files, {:.1} MiB in {:.2} s ({:.1} MiB/s)",
        done.load(Ordering::Relaxed),
        b as f64 / 1048576.0,
        secs,
        b as f64 / 1048576.0 / secs.max(1e-9)
    );
    if !errs.is_empty() {
        for e in errs.iter().take(10) {
            eprintln!("gust stage: {e}");
        }
        return Err(format!("{} file(s) failed", errs.len()));
    }
    Ok(())
}

fn walk_local(c: &Client, src: &Path, dest: &str, out: &mut Vec<(PathBuf, String)>) -> Result<(), String> {
    let m = fs::symlink_metadata(src).map_err(|e| format!("{}: {e}", src.display()))?;
    if m.is_dir() {
        match c.mkdir(dest, m.permissions().mode() & 0o7777) {
            Ok(()) | Err(gust_client::Errno(libc::EEXIST)) => {}
            Err(e) => return Err(format!("mkdir {dest}: {e}")),
        }
        let mut entries: Vec<_> = fs::read_dir(src).map_err(|e| format!("{}: {e}", src.display()))?.collect();
        entries.sort_by_key(|e| e.as_ref().map(|e| e.file_name()).ok());
        for e in entries {
            let e = e.map_err(|e| format!("{}: {e}", src.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let d = gust_client::path::join(dest, &name);
            walk_local(c, &e.path(), &d, out)?;
        }
    } else if m.file_type().is_symlink() {
        let t = fs::read_link(src).map_err(|e| format!("{}: {e}", src.display()))?;
        c.symlink(&t.to_string_lossy(), dest).map_err(|e| format!("symlink {dest}: {e}"))?;
    } else if m.is_file() {
        out.push((src.to_path_buf(), dest.to_string()));
    }
    Ok(())
}

fn walk_gust(
    c: &Client,
    src: &str,
    dest: &Path,
    out: &mut Vec<(String, PathBuf)>,
    dirs: &mut Vec<(PathBuf, u32)>,
) -> Result<(), String> {
    let st = c.lstat(src).map_err(|e| format!("{src}: {e}"))?;
    match st.kind {
        Kind::Dir => {
            create_dest_dir(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
            dirs.push((dest.to_path_buf(), st.mode & 0o7777));
            for e in c.opendir(src).map_err(|e| format!("{src}: {e}"))? {
                let e = e.map_err(|e| format!("{src}: {e}"))?;
                let s = gust_client::path::join(src, &e.name);
                walk_gust(c, &s, &dest.join(&e.name), out, dirs)?;
            }
        }
        Kind::Symlink => {
            let t = c.readlink(src).map_err(|e| format!("{src}: {e}"))?;
            let _ = fs::remove_file(dest);
            std::os::unix::fs::symlink(t, dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        }
        Kind::File => out.push((src.to_string(), dest.to_path_buf())),
        // A FIFO or socket name has no data; the program that made it is gone.
        Kind::Fifo | Kind::Socket => eprintln!("gust stage: skipping {src}: a FIFO or socket, not a file"),
    }
    Ok(())
}

/// Creates a stage-out directory (missing parents above it as usual) private to the
/// owner (0700) until `run` gives it its mode from GustFS; an existing one is kept.
fn create_dest_dir(dest: &Path) -> std::io::Result<()> {
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dest.is_dir() => Ok(()),
        r => r,
    }
}

fn copy_in(c: &Client, src: &Path, dst: &str) -> Result<u64, String> {
    let mut f = fs::File::open(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let mode = f.metadata().map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o644);
    let fd = c.open(dst, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode).map_err(|e| format!("{dst}: {e}"))?;
    let mut buf = vec![0u8; COPY_BUFFER_BYTES];
    let mut total = 0u64;
    let r = (|| loop {
        let n = f.read(&mut buf).map_err(|e| format!("{}: {e}", src.display()))?;
        if n == 0 {
            return Ok(total);
        }
        c.write(fd, &buf[..n]).map_err(|e| format!("{dst}: {e}"))?;
        total += n as u64;
    })();
    let _ = c.close(fd);
    r
}

fn copy_out(c: &Client, src: &str, dst: &Path) -> Result<u64, String> {
    let st = c.stat(src).map_err(|e| format!("{src}: {e}"))?;
    let fd = c.open(src, libc::O_RDONLY, 0).map_err(|e| format!("{src}: {e}"))?;
    // Private (0600) while being written; the mode it has inside GustFS once written,
    // whatever the umask (set last, so a read-only or setuid file keeps it).
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(dst)
        .map_err(|e| format!("{}: {e}", dst.display()))?;
    let mut buf = vec![0u8; COPY_BUFFER_BYTES];
    let mut total = 0u64;
    let r: Result<u64, String> = (|| loop {
        let n = c.read(fd, &mut buf).map_err(|e| format!("{src}: {e}"))?;
        if n == 0 {
            return Ok(total);
        }
        f.write_all(&buf[..n]).map_err(|e| format!("{}: {e}", dst.display()))?;
        total += n as u64;
    })();
    let _ = c.close(fd);
    let total = r?;
    let mode = st.mode & 0o7777;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: cannot set mode {mode:04o}: {e}", dst.display()))?;
    Ok(total)
}
