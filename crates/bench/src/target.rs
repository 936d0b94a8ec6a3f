//! Where a workload runs: GustFS through the client core, or a directory (local, or
//! GustFS's mount directory under the preload library) through plain libc calls.

use gust_client::{Client, ClientOptions, Errno};
use std::ffi::CString;

/// The operations a workload needs, over GustFS or a POSIX directory.
pub(crate) trait Target {
    fn mkdir(&self, p: &str) -> Result<(), Errno>;
    fn rmdir(&self, p: &str) -> Result<(), Errno>;
    fn open(&self, p: &str, flags: i32, mode: u32) -> Result<i32, Errno>;
    fn close(&self, fd: i32) -> Result<(), Errno>;
    fn pwrite(&self, fd: i32, b: &[u8], off: u64) -> Result<usize, Errno>;
    fn pread(&self, fd: i32, b: &mut [u8], off: u64) -> Result<usize, Errno>;
    fn stat_size(&self, p: &str) -> Result<u64, Errno>;
    fn unlink(&self, p: &str) -> Result<(), Errno>;
}

struct GustTarget(&'static Client);

impl Target for GustTarget {
    fn mkdir(&self, p: &str) -> Result<(), Errno> {
        self.0.mkdir(p, 0o755)
    }
    fn rmdir(&self, p: &str) -> Result<(), Errno> {
        self.0.rmdir(p)
    }
    fn open(&self, p: &str, flags: i32, mode: u32) -> Result<i32, Errno> {
        // As the preload library opens: a create is deferred to close (small files
        // inline, gust-client inline.rs).
        self.0.open_deferred(p, flags, mode)
    }
    fn close(&self, fd: i32) -> Result<(), Errno> {
        self.0.close(fd)
    }
    fn pwrite(&self, fd: i32, b: &[u8], off: u64) -> Result<usize, Errno> {
        self.0.pwrite(fd, b, off)
    }
    fn pread(&self, fd: i32, b: &mut [u8], off: u64) -> Result<usize, Errno> {
        self.0.pread(fd, b, off)
    }
    fn stat_size(&self, p: &str) -> Result<u64, Errno> {
        self.0.stat(p).map(|s| s.size)
    }
    fn unlink(&self, p: &str) -> Result<(), Errno> {
        self.0.unlink(p)
    }
}

/// Plain libc calls: exactly what an unmodified program does.
struct PosixTarget;

fn cpath(p: &str) -> CString {
    CString::new(p).expect("bench paths have no NUL")
}

fn check(rc: isize) -> Result<usize, Errno> {
    if rc < 0 {
        Err(Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)))
    } else {
        Ok(rc as usize)
    }
}

impl Target for PosixTarget {
    fn mkdir(&self, p: &str) -> Result<(), Errno> {
        check(unsafe { libc::mkdir(cpath(p).as_ptr(), 0o755) } as isize).map(|_| ())
    }
    fn rmdir(&self, p: &str) -> Result<(), Errno> {
        check(unsafe { libc::rmdir(cpath(p).as_ptr()) } as isize).map(|_| ())
    }
    fn open(&self, p: &str, flags: i32, mode: u32) -> Result<i32, Errno> {
        check(unsafe { libc::open(cpath(p).as_ptr(), flags, mode) } as isize).map(|fd| fd as i32)
    }
    fn close(&self, fd: i32) -> Result<(), Errno> {
        check(unsafe { libc::close(fd) } as isize).map(|_| ())
    }
    fn pwrite(&self, fd: i32, b: &[u8], off: u64) -> Result<usize, Errno> {
        check(unsafe { libc::pwrite(fd, b.as_ptr() as *const _, b.len(), off as i64) })
    }
    fn pread(&self, fd: i32, b: &mut [u8], off: u64) -> Result<usize, Errno> {
        check(unsafe { libc::pread(fd, b.as_mut_ptr() as *mut _, b.len(), off as i64) })
    }
    fn stat_size(&self, p: &str) -> Result<u64, Errno> {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::stat(cpath(p).as_ptr(), &mut st) } as isize)?;
        Ok(st.st_size as u64)
    }
    fn unlink(&self, p: &str) -> Result<(), Errno> {
        check(unsafe { libc::unlink(cpath(p).as_ptr()) } as isize).map(|_| ())
    }
}

pub(crate) fn make_target(target: &str, hosts: &std::path::Path) -> Result<Box<dyn Target>, String> {
    if target == "gust" {
        // Lives as long as the worker process, as the preload library's: claims
        // need that (gust-client claims.rs).
        let c: &'static Client = Box::leak(Box::new(Client::open_instance(hosts, ClientOptions::from_env())?));
        c.set_defer_exclusive_create(std::env::var("GUST_DEFER_EXCL").is_ok_and(|v| v == "1"));
        c.arm_claims();
        Ok(Box::new(GustTarget(c)))
    } else if target.starts_with("posix:") || target == "preload" {
        // preload: the worker runs with LD_PRELOAD, so these libc calls are the
        // interposed ones, exactly what an unmodified program does.
        Ok(Box::new(PosixTarget))
    } else {
        Err(format!("unknown target '{target}' (use gust, preload or posix:DIR)"))
    }
}

pub(crate) fn target_root(target: &str) -> String {
    match target.strip_prefix("posix:") {
        Some(d) => d.trim_end_matches('/').to_string(),
        None => String::new(),
    }
}
