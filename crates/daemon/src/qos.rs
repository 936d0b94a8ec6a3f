//! Sharing the node with the job (docs/DESIGN.md, "Sharing the node"): a daemon runs
//! on the cores of the application it serves, and every cycle it takes is one the
//! application's ranks do not get. Three limits, set at start (`gust start --cpus
//! --nice --max-bandwidth`) and changed while the daemon runs (`gust tune`, the
//! `tune` request):
//!
//! * **cores**: every thread of the daemon (workers, RocksDB's background threads,
//!   the short-circuit and callback threads) runs on the last N cores the daemon was
//!   started with (its CPU affinity at start, which a batch system's cgroup or
//!   `srun --cpu-bind` already narrowed): MPI binds ranks from the first core up,
//!   so the last ones are where a job leaves room, and a job that wants the daemon
//!   elsewhere starts it under `taskset`.
//! * **niceness** of every thread: the kernel's scheduler gives the application the
//!   cores the daemon shares with it first.
//! * **bandwidth**: the bytes of chunk reads, writes, staging and scrubs this daemon serves per
//!   second, network and disk together (a request's bytes cross both), paced before
//!   the request runs (a worker waits; the client's request takes longer).
//!
//! Threads started later inherit their creator's affinity and niceness, so setting
//! every thread that exists (from /proc/self/task) covers the daemon.
//!
//! And always: a `scrub` page reads at the idle I/O priority ([`IdleIo`]), as
//! btrfs's scrub does by default, so that the job's own I/O (its writes' writeback
//! above all) goes first on a disk both use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What a `tune` request or a daemon's start options change: None leaves it as it
/// is. `cpus` Some(0) lifts the core limit; `max_bandwidth` Some(0) the bandwidth
/// limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub cpus: Option<u32>,
    pub nice: Option<i32>,
    pub max_bandwidth: Option<u64>,
}

/// The limits a daemon runs with, as `gust tune` reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The cores its threads may run on, as a CPU list ("1", "0-3,8").
    pub cpus: String,
    pub nice: i32,
    /// Bytes per second; 0: no limit.
    pub max_bandwidth: u64,
}

/// What an error of applying `l` means, for a person: on the daemon, which knows
/// the cores it was started on (`start_cpus`), and in `gust tune`, which does not.
pub fn explain(l: Limits, e: i32, start_cpus: Option<&[usize]>) -> String {
    let bad_nice = l.nice.filter(|n| !(NICE_MIN..=NICE_MAX).contains(n));
    match (e, bad_nice, l.cpus, l.nice) {
        (libc::EINVAL, Some(n), _, _) => format!("--nice {n}: a niceness is {NICE_MIN} to {NICE_MAX}"),
        (libc::EINVAL, None, Some(n), _) => match start_cpus {
            Some(c) => format!("--cpus {n}: the daemon was started on {} cores ({})", c.len(), cpu_list(c)),
            None => format!("--cpus {n}: more cores than the daemon was started on"),
        },
        (libc::EPERM | libc::EACCES, _, _, Some(n)) => format!(
            "--nice {n}: lowering a niceness needs the privilege to (CAP_SYS_NICE, or RLIMIT_NICE); \
             a daemon's niceness can only be raised without it"
        ),
        _ => format!("cannot apply the limits: {}", std::io::Error::from_raw_os_error(e)),
    }
}

/// Largest niceness Linux takes (and the smallest).
const NICE_MAX: i32 = 19;
const NICE_MIN: i32 = -20;

/// How far ahead of its rate the bandwidth limit lets a burst go (a single request
/// of a few chunks is not held back on an idle daemon).
const BURST: Duration = Duration::from_millis(20);

pub struct Qos {
    /// The cores the daemon was started on (its affinity then): what `cpus` picks
    /// from, and what lifting the limit gives back.
    start_cpus: Vec<usize>,
    applied: Mutex<(Vec<usize>, i32)>,
    pacer: Pacer,
}

impl Qos {
    /// The daemon's limits as the process has them now (no limit).
    pub fn new() -> Qos {
        let start_cpus = allowed_cpus().unwrap_or_default();
        // SAFETY: getpriority has no preconditions; errno is not consulted (a nice
        // of -1 is read as such).
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        Qos { applied: Mutex::new((start_cpus.clone(), nice)), start_cpus, pacer: Pacer::new() }
    }

    /// Applies `l` to every thread of the process; returns what it runs with after.
    /// EINVAL: a niceness out of range, or more cores than it was started with;
    /// EPERM: a niceness below the current one without the privilege to lower it.
    pub fn apply(&self, l: Limits) -> Result<Applied, i32> {
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = l.nice {
            if !(NICE_MIN..=NICE_MAX).contains(&n) {
                return Err(libc::EINVAL);
            }
        }
        let cpus = match l.cpus {
            None => None,
            Some(0) => Some(self.start_cpus.clone()),
            Some(n) => Some(last_cpus(&self.start_cpus, n as usize).ok_or(libc::EINVAL)?),
        };
        if let Some(n) = l.nice {
            for_each_thread(|tid| set_nice(tid, n))?;
            set_autogroup_nice(n)?;
            applied.1 = n;
        }
        if let Some(c) = cpus {
            if !c.is_empty() {
                for_each_thread(|tid| set_affinity(tid, &c))?;
            }
            applied.0 = c;
        }
        if let Some(b) = l.max_bandwidth {
            self.pacer.set_rate(b);
        }
        Ok(Applied { cpus: cpu_list(&applied.0), nice: applied.1, max_bandwidth: self.pacer.rate() })
    }

    /// What an error of `apply(l)` means, for a person (see [`explain`]).
    pub fn explain(&self, l: Limits, e: i32) -> String {
        explain(l, e, Some(&self.start_cpus))
    }

    /// What the daemon runs with.
    pub fn applied(&self) -> Applied {
        let a = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        Applied { cpus: cpu_list(&a.0), nice: a.1, max_bandwidth: self.pacer.rate() }
    }

    /// Waits until `bytes` more fit the bandwidth limit (at once without one).
    pub fn pace(&self, bytes: u64) {
        let wait = self.pacer.charge(Instant::now(), bytes);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// Whether a bandwidth limit is set (the daemon then hands no local files to
    /// clients: their transfers would not be paced; short_circuit.rs).
    pub fn limits_bandwidth(&self) -> bool {
        self.pacer.rate() != 0
    }
}

impl Default for Qos {
    fn default() -> Self {
        Qos::new()
    }
}

/// A rate limit as a generic cell rate algorithm: each charge moves a theoretical
/// arrival time on by its bytes' share of a second; a caller waits for what that
/// time runs ahead of now, less a small burst. Exact over any interval, no timer.
struct Pacer {
    /// Bytes per second; 0: none.
    rate: AtomicU64,
    tat: Mutex<Option<Instant>>,
}

impl Pacer {
    fn new() -> Pacer {
        Pacer { rate: AtomicU64::new(0), tat: Mutex::new(None) }
    }

    fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    fn set_rate(&self, r: u64) {
        self.rate.store(r, Ordering::Relaxed);
        // A new rate starts from now, whatever the old one had queued.
        *self.tat.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Charges `bytes` at `now`; returns how long the caller waits.
    fn charge(&self, now: Instant, bytes: u64) -> Duration {
        let rate = self.rate();
        if rate == 0 || bytes == 0 {
            return Duration::ZERO;
        }
        let cost = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let mut tat = self.tat.lock().unwrap_or_else(|e| e.into_inner());
        let start = tat.map_or(now, |t| t.max(now));
        let next = start + cost;
        *tat = Some(next);
        next.saturating_duration_since(now).saturating_sub(BURST)
    }
}

/// The last `n` of `cpus` (in order); None if there are fewer.
fn last_cpus(cpus: &[usize], n: usize) -> Option<Vec<usize>> {
    (n <= cpus.len()).then(|| cpus[cpus.len() - n..].to_vec())
}

/// A bandwidth limit for people: "64 MiB/s", or "no limit".
pub fn bandwidth_text(bytes_per_s: u64) -> String {
    if bytes_per_s == 0 {
        return "no limit".into();
    }
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let (mut v, mut u) = (bytes_per_s as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}/s", UNITS[u])
    } else {
        format!("{v:.1} {}/s", UNITS[u])
    }
}

/// A CPU list as the kernel writes one (`Cpus_allowed_list`): "0-3,8".
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The cores the calling thread may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>, i32> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(errno());
    }
    // SAFETY: CPU_ISSET reads the set within its size.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

fn set_affinity(tid: libc::pid_t, cpus: &[usize]) -> Result<(), i32> {
    // SAFETY: as in allowed_cpus; CPU_SET writes within the set's size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: c < CPU_SETSIZE (it came from sched_getaffinity).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size given.
    match unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } {
        0 => Ok(()),
        _ => Err(errno()),
    }
}

fn set_nice(tid: libc::pid_t, nice: i32) -> Result<(), i32> {
    // On Linux a niceness belongs to a thread: PRIO_PROCESS with a thread id sets
    // that thread's (setpriority(2), "BUGS").
    // SAFETY: setpriority has no memory preconditions.
    match unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) } {
        0 => Ok(()),
        _ => Err(errno()),
    }
}

/// With autogroups (Linux's `sched_autogroup_enabled`, on by default on many
/// distributions), the scheduler shares the cores between sessions first and
/// heeds a thread's niceness only within its session: a daemon, which starts a
/// session of its own, would take its session's share beside the application's
/// whatever its threads' niceness (measured: no change at all). So a daemon that
/// leads its session gives its autogroup the niceness too. One that does not
/// (started by hand in a shell) leaves its session's alone: that would slow the
/// shell's other programs. Without autogroups (a kernel without them, or a job's
/// cgroup, where they do not apply) the threads' niceness is what counts.
fn set_autogroup_nice(nice: i32) -> Result<(), i32> {
    // SAFETY: getsid and getpid have no preconditions.
    if unsafe { libc::getsid(0) != libc::getpid() } {
        return Ok(());
    }
    for attempt in 0..3 {
        match std::fs::write("/proc/self/autogroup", nice.to_string()) {
            Ok(()) => return Ok(()),
            // No autogroups in this kernel.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // The kernel takes one change per 100 ms.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && attempt < 2 => {
                std::thread::sleep(Duration::from_millis(110))
            }
            Err(e) => return Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }
    Ok(())
}

/// Calls `f` with the id of every thread of this process. A thread that ended
/// meanwhile (ESRCH) is passed over.
fn for_each_thread(mut f: impl FnMut(libc::pid_t) -> Result<(), i32>) -> Result<(), i32> {
    let dir = std::fs::read_dir("/proc/self/task").map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<libc::pid_t>().ok()) else { continue };
        match f(tid) {
            Ok(()) | Err(libc::ESRCH) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// The calling thread at the idle I/O priority (`ioprio_set`, class IDLE: served
/// when the disk has nothing else to do, by schedulers that keep priorities, as
/// mq-deadline and BFQ do) until dropped, then at the priority it had. Best
/// effort: a kernel that refuses leaves the priority as it was.
pub struct IdleIo {
    before: Option<libc::c_long>,
}

/// ioprio_set(2)'s constants (linux/ioprio.h): who is a thread (0: the caller).
const IOPRIO_WHO_PROCESS: libc::c_long = 1;
const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
const IOPRIO_CLASS_IDLE: libc::c_long = 3;

impl IdleIo {
    pub fn new() -> IdleIo {
        // SAFETY: ioprio_get and ioprio_set take integers only and act on the
        // calling thread (who = 0).
        let before = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
        let idle = IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT;
        // SAFETY: as above.
        let set = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, idle) } == 0;
        IdleIo { before: (set && before >= 0).then_some(before) }
    }
}

impl Default for IdleIo {
    fn default() -> IdleIo {
        IdleIo::new()
    }
}

impl Drop for IdleIo {
    fn drop(&mut self) {
        if let Some(p) = self.before {
            // SAFETY: as in `new`.
            unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, p) };
        }
    }
}

/// The calling thread's I/O priority (ioprio_get), for tests.
pub fn io_priority() -> libc::c_long {
    // SAFETY: as in `IdleIo::new`.
    unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_the_kernel_writes_them() {
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(cpu_list(&[1]), "1");
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8]), "0-3,8");
        assert_eq!(cpu_list(&[0, 2, 4, 5]), "0,2,4-5");
    }

    #[test]
    fn the_last_cores_of_the_start_set() {
        assert_eq!(last_cpus(&[0, 1, 4, 5], 1), Some(vec![5]));
        assert_eq!(last_cpus(&[0, 1, 4, 5], 3), Some(vec![1, 4, 5]));
        assert_eq!(last_cpus(&[0, 1], 3), None);
    }

    /// Over a run of charges the pacer admits `rate` bytes a second (less its
    /// burst): the waits it asks add up to the bytes' time.
    #[test]
    fn pacing_admits_the_rate() {
        let p = Pacer::new();
        let t0 = Instant::now();
        assert_eq!(p.charge(t0, 1 << 20), Duration::ZERO, "no limit: no wait");
        p.set_rate(1 << 20); // 1 MiB/s
        let mut now = t0;
        for _ in 0..8 {
            // A caller that waits what it is told, then sends the next 256 KiB.
            now += p.charge(now, 256 << 10);
        }
        // 2 MiB at 1 MiB/s: 2 s, of which the burst need not be waited.
        let waited = now - t0;
        assert!(waited >= Duration::from_secs(2) - BURST - Duration::from_millis(1), "{waited:?}");
        assert!(waited <= Duration::from_secs(2), "{waited:?}");
        // Idle time is not saved up beyond the burst.
        let later = now + Duration::from_secs(10);
        let w = p.charge(later, 512 << 10);
        assert!(w >= Duration::from_millis(500) - BURST - Duration::from_millis(1), "{w:?}");
    }

    #[test]
    fn limits_out_of_range_are_refused() {
        let q = Qos::new();
        assert_eq!(q.apply(Limits { nice: Some(20), ..Limits::default() }), Err(libc::EINVAL));
        assert_eq!(q.apply(Limits { cpus: Some(100_000), ..Limits::default() }), Err(libc::EINVAL));
        let a = q.apply(Limits { max_bandwidth: Some(4096), ..Limits::default() }).unwrap();
        assert_eq!(a.max_bandwidth, 4096);
        assert!(q.limits_bandwidth());
        assert_eq!(q.apply(Limits { max_bandwidth: Some(0), ..Limits::default() }).unwrap().max_bandwidth, 0);
        assert!(!q.limits_bandwidth());
    }

    /// A scrub page's thread reads at the idle I/O priority, and has its own back
    /// after.
    #[test]
    fn idle_io_lasts_as_long_as_its_guard() {
        let before = io_priority();
        {
            let _idle = IdleIo::new();
            assert_eq!(io_priority() >> IOPRIO_CLASS_SHIFT, IOPRIO_CLASS_IDLE);
        }
        assert_eq!(io_priority(), before);
    }
}
