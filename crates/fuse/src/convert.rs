//! Conversions between the kernel's terms and the client core's: errno, times,
//! file types, the caller's credentials, child paths.

use super::*;

pub(crate) fn fe(e: Errno) -> FErrno {
    FErrno::from_i32(e.0)
}

pub(crate) fn time_of(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_nanos(ns.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// Nanoseconds since the epoch of a time the kernel sent in a setattr; `now` for
/// UTIME_NOW (one value for both times, as the kernel would give them).
pub(crate) fn ns_of(t: TimeOrNow, now: i64) -> i64 {
    let t = match t {
        TimeOrNow::Now => return now,
        TimeOrNow::SpecificTime(t) => t,
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        // fuser 0.18 builds a time before 1970 from the kernel's (secs < 0, nsec) as
        // epoch - (-secs s + nsec ns) (its time.rs has a TODO for it); the time meant
        // is secs s + nsec ns, so take the parts back apart.
        Err(e) => {
            let d = e.duration();
            // Seconds bounded so that the product fits an i64.
            let secs = d.as_secs().min(i64::MAX as u64 / 1_000_000_000 - 1) as i64;
            -secs * 1_000_000_000 + d.subsec_nanos() as i64
        }
    }
}

pub(crate) fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::BlockDevice => FileType::BlockDevice,
        Kind::CharDevice => FileType::CharDevice,
    }
}

/// The caller of a request, without supplementary groups (enough to own what it
/// creates).
pub(crate) fn caller(req: &Request) -> Credentials {
    Credentials { uid: req.uid(), gid: req.gid(), groups: Vec::new() }
}

/// The caller of a request with its supplementary groups, for checks that need them
/// (chown's new group, access). A process that is gone by now has none.
pub(crate) fn caller_with_groups(req: &Request) -> Credentials {
    let mut who = caller(req);
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) {
            who.groups = line.split_whitespace().filter_map(|g| g.parse().ok()).collect();
        }
    }
    who
}

pub(crate) fn child(dir: &str, name: &OsStr) -> Result<String, Errno> {
    // The wire protocol carries names as UTF-8 strings.
    let name = name.to_str().ok_or(Errno(libc::EINVAL))?;
    gust_client::path::child(dir, name).map_err(Errno)
}
