//! Shared-memory streams between client processes and a daemon on the same node
//! (endpoint kind `shm:`).
//!
//! Why: over a Unix socket every request costs the kernel's socket path both ways
//! (a write and a read on each side, plus the daemon's epoll calls) and two wake-ups.
//! Here a request is a copy into a ring and, only when the other side sleeps, one
//! futex wake; a side that is still polling (see "Waiting") takes it without any
//! system call.
//!
//! How a connection starts: the client connects to the daemon's rendezvous Unix
//! socket (the endpoint's path). The daemon creates a memory file (memfd, sealed
//! against resizing) holding a control page and two rings, maps it, and sends a
//! 16-byte hello (magic, version, status, ring size) with the file's descriptor
//! attached (SCM_RIGHTS). The client maps it too. From then on bytes travel through
//! the rings; the Unix socket stays open only so that each side learns when the other
//! process is gone, however it ended (the kernel closes its end).
//!
//! Layout of the memory file (all integers little-endian, native atomics):
//! * control page, 4096 bytes: magic "GUSTSHM1" (u64 at 0), version (u32 at 8), ring
//!   size in bytes (u32 at 12), "client closed" (u32 at 64), "daemon closed" (u32 at
//!   128); ring 0's control at 1024, ring 1's at 2048, each: head (u64 at +0, bytes
//!   ever written, written by the producer), tail (u64 at +128, bytes ever read,
//!   written by the consumer), data futex word (u32 at +256) and "consumer sleeps"
//!   flag (u32 at +260), space futex word (u32 at +384) and "producer sleeps" flag
//!   (u32 at +388). Each written-by-one-side word has a cache line of its own.
//! * ring 0 (client to daemon) at 4096, ring 1 (daemon to client) after it, each of
//!   the ring size; byte `i` of a direction's stream sits at `i % size`.
//!
//! Waiting: a side that finds nothing to read (or no room to write) polls for up to
//! `GUST_SHM_SPIN_US` microseconds, then for `GUST_SHM_YIELD_US` more yielding the
//! CPU between looks (both 0 by default), then announces that it sleeps and waits on the
//! futex word; the other side wakes it only if that flag is set (store, fence, load
//! on both sides, so a wake-up is never lost). The sleep is cut every
//! `LIVENESS_PERIOD` to check the Unix socket for a peer that died without closing.
//!
//! Trust: the daemon never trusts the shared page. It keeps the indices it owns in
//! its own memory, checks every index the peer wrote (a ring claiming more bytes than
//! it holds is an error that closes the connection), reads the ring size only from
//! its own copy, and seals the file so the peer cannot shrink it under the mapping
//! (which would fault the daemon). Frames read from the ring are checked by the
//! session exactly as those from a socket.
//!
//! Measured (docs/PERFORMANCE.md, "Node-local transport"): a third less CPU per
//! round trip than the Unix socket for one pair, but not faster in the metadata
//! benchmark on a 2-core machine, so clients use it only with `GUST_TRANSPORT=shm`.
//!
//! Not for: other nodes (TCP), or a daemon's event loop: a shared-memory stream has
//! no descriptor to poll, so the daemon serves each with a thread of its own; their
//! number is bounded (`SHM_CONNECTIONS_MAX_DEFAULT`), past it clients are told "busy"
//! and use the Unix socket.

use crate::Stream;
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Bytes of each direction's ring. A frame larger than this streams through it; 256
/// KiB holds every small request and reply whole, and half a default chunk. Pages
/// are only allocated where touched.
pub const RING_BYTES_DEFAULT: usize = 256 << 10;
/// The ring size a daemon hands out: `GUST_SHM_RING_KIB` if set (within the bounds
/// below), else the default.
pub fn ring_bytes() -> usize {
    std::env::var("GUST_SHM_RING_KIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map(|k| (k << 10).clamp(RING_BYTES_MIN, RING_BYTES_MAX))
        .unwrap_or(RING_BYTES_DEFAULT)
}

/// Bounds on a ring size a client accepts from a daemon.
const RING_BYTES_MIN: usize = 4096;
const RING_BYTES_MAX: usize = 64 << 20;
/// Shared-memory connections a daemon serves at once (each has a thread and up to
/// two rings' worth of memory); past it clients use the Unix socket.
pub const SHM_CONNECTIONS_MAX_DEFAULT: usize = 256;
/// How often a sleeping side checks whether the peer process still exists.
const LIVENESS_PERIOD: Duration = Duration::from_millis(200);

const MAGIC: u64 = u64::from_le_bytes(*b"GUSTSHM1");
const VERSION: u32 = 1;
const CONTROL_BYTES: usize = 4096;
const HELLO_BYTES: usize = 16;
const STATUS_OK: u32 = 0;
const STATUS_BUSY: u32 = 1;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_RING_BYTES: usize = 12;
/// "Closed" flags by side (0 client, 1 daemon).
const OFF_CLOSED: [usize; 2] = [64, 128];
const fn ring_control(ring: usize) -> usize {
    1024 + ring * 1024
}
const R_HEAD: usize = 0;
const R_TAIL: usize = 128;
const R_DATA_SEQ: usize = 256;
const R_DATA_SLEEPS: usize = 260;
const R_SPACE_SEQ: usize = 384;
const R_SPACE_SLEEPS: usize = 388;

/// Microseconds a side polls before it sleeps (`GUST_SHM_SPIN_US`). See
/// docs/PERFORMANCE.md for the measurements behind the default: with fewer cores
/// than busy processes, polling takes CPU from the peer it waits for.
fn spin() -> Duration {
    static SPIN: OnceLock<Duration> = OnceLock::new();
    *SPIN.get_or_init(|| {
        let us = std::env::var("GUST_SHM_SPIN_US").ok().and_then(|v| v.parse().ok()).unwrap_or(SPIN_US_DEFAULT);
        Duration::from_micros(us)
    })
}
const SPIN_US_DEFAULT: u64 = 0;

/// Microseconds a side then keeps polling but yields its CPU between looks
/// (`GUST_SHM_YIELD_US`), before it sleeps on the futex. With more runnable
/// processes than cores, the peer it waits for may be the one a yield lets run, and
/// a yield costs no wake-up at all; with idle cores it costs one syscall a look.
fn yield_for() -> Duration {
    static YIELD: OnceLock<Duration> = OnceLock::new();
    *YIELD.get_or_init(|| {
        let us = std::env::var("GUST_SHM_YIELD_US").ok().and_then(|v| v.parse().ok()).unwrap_or(YIELD_US_DEFAULT);
        Duration::from_micros(us)
    })
}
const YIELD_US_DEFAULT: u64 = 0;

fn corrupt(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("shared-memory ring damaged: {what}"))
}

/// A shared mapping of the memory file.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access to the control page goes
// through atomics, and ring bytes are only copied under the index protocol.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(fd: RawFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a file at least `len` long (checked by
        // the caller); the result is checked.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    fn u64(&self, off: usize) -> &AtomicU64 {
        assert!(off.is_multiple_of(8) && off + 8 <= CONTROL_BYTES);
        // SAFETY: aligned (mmap is page-aligned, off checked), inside the control page.
        unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
    }

    fn u32(&self, off: usize) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off + 4 <= CONTROL_BYTES);
        // SAFETY: as in u64.
        unsafe { &*(self.ptr.add(off) as *const AtomicU32) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `new` mapped; no references outlive the Mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: a shared (not private) futex on a word of our mapping; a relative
    // timeout we own. Spurious returns are handled by the caller's loop.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec, 0, 0)
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as in futex_wait.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
}

/// One connection's state, shared by its handles (a reader beside a writer).
struct Conn {
    map: Mapping,
    /// 0: the client, 1: the daemon. Ring `side` carries what this side writes.
    side: usize,
    /// This side's copy: the peer may write anything into the control page.
    ring_bytes: u64,
    /// Bytes this side ever wrote into its ring, and read from the other; the shared
    /// copies are for the peer, never read back.
    tx_head: AtomicU64,
    rx_tail: AtomicU64,
    /// Read and write timeout in nanoseconds, 0 for none.
    timeout_ns: AtomicU64,
    sock: UnixStream,
    /// This side shut the connection down.
    shut: AtomicBool,
    /// The peer's process is gone (its socket end closed).
    hung_up: AtomicBool,
    /// The daemon's count of live connections, given back on drop.
    live: Option<Arc<AtomicUsize>>,
}

impl Conn {
    fn ring_data(&self, ring: usize) -> *mut u8 {
        // SAFETY: inside the mapping: CONTROL_BYTES + 2 * ring_bytes == map.len.
        unsafe { self.map.ptr.add(CONTROL_BYTES + ring * self.ring_bytes as usize) }
    }

    fn peer_gone(&self) -> bool {
        self.shut.load(Ordering::Acquire)
            || self.hung_up.load(Ordering::Acquire)
            || self.map.u32(OFF_CLOSED[1 - self.side]).load(Ordering::Acquire) != 0
    }

    fn deadline(&self) -> Option<Instant> {
        match self.timeout_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Instant::now() + Duration::from_nanos(ns)),
        }
    }

    /// Bytes waiting in the receive ring, checked against the ring's size.
    fn readable(&self) -> io::Result<u64> {
        let ctl = ring_control(1 - self.side);
        let head = self.map.u64(ctl + R_HEAD).load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.rx_tail.load(Ordering::Relaxed));
        if avail > self.ring_bytes {
            return Err(corrupt(&format!("peer claims {avail} unread bytes in a ring of {}", self.ring_bytes)));
        }
        Ok(avail)
    }

    /// Free bytes in the send ring, checked against the ring's size.
    fn writable(&self) -> io::Result<u64> {
        let ctl = ring_control(self.side);
        let tail = self.map.u64(ctl + R_TAIL).load(Ordering::Acquire);
        let used = self.tx_head.load(Ordering::Relaxed).wrapping_sub(tail);
        if used > self.ring_bytes {
            return Err(corrupt(&format!(
                "peer's read position is {used} bytes behind in a ring of {}",
                self.ring_bytes
            )));
        }
        Ok(self.ring_bytes - used)
    }

    /// Wakes the other side if it announced that it sleeps on `seq`.
    fn notify(&self, seq: usize, sleeps: usize) {
        fence(Ordering::SeqCst);
        if self.map.u32(sleeps).load(Ordering::Relaxed) != 0 {
            let w = self.map.u32(seq);
            w.fetch_add(1, Ordering::Release);
            futex_wake(w);
        }
    }

    /// Waits until `ready` (polling first, then on the futex word `seq`), the peer is
    /// gone, or `deadline` passes (WouldBlock, as a socket timeout gives).
    fn wait(
        &self,
        seq: usize,
        sleeps: usize,
        polled_since: &mut Option<Instant>,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
    ) -> io::Result<()> {
        let (spin, yield_for) = (spin(), yield_for());
        if !spin.is_zero() || !yield_for.is_zero() {
            let start = *polled_since.get_or_insert_with(Instant::now);
            while start.elapsed() < spin {
                for _ in 0..32 {
                    if ready() {
                        return Ok(());
                    }
                    std::hint::spin_loop();
                }
            }
            while start.elapsed() < spin + yield_for {
                if ready() {
                    return Ok(());
                }
                std::thread::yield_now();
            }
        }
        let word = self.map.u32(seq);
        let flag = self.map.u32(sleeps);
        let expected = word.load(Ordering::Acquire);
        flag.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if ready() || self.peer_gone() {
            flag.store(0, Ordering::Relaxed);
            return Ok(());
        }
        let mut slice = LIVENESS_PERIOD;
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                flag.store(0, Ordering::Relaxed);
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "timed out on shared memory"));
            }
            slice = slice.min(left);
        }
        let t0 = Instant::now();
        futex_wait(word, expected, slice);
        flag.store(0, Ordering::Relaxed);
        if t0.elapsed() >= slice && !ready() && self.socket_hung_up() {
            self.hung_up.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// The peer's end of the rendezvous socket is closed: its process ended.
    fn socket_hung_up(&self) -> bool {
        let mut p = libc::pollfd { fd: self.sock.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
        // SAFETY: one pollfd we own, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let ctl = ring_control(1 - self.side);
        let deadline = self.deadline();
        let mut polled_since = None;
        loop {
            let avail = self.readable()?;
            if avail > 0 {
                let n = (avail as usize).min(buf.len());
                let tail = self.rx_tail.load(Ordering::Relaxed);
                let at = (tail % self.ring_bytes) as usize;
                let first = n.min(self.ring_bytes as usize - at);
                let data = self.ring_data(1 - self.side);
                // SAFETY: `at + first` and `n - first` lie inside the ring; the
                // producer does not touch these bytes until the tail passes them.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.add(at), buf.as_mut_ptr(), first);
                    std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr().add(first), n - first);
                }
                let tail = tail.wrapping_add(n as u64);
                self.rx_tail.store(tail, Ordering::Relaxed);
                self.map.u64(ctl + R_TAIL).store(tail, Ordering::Release);
                self.notify(ctl + R_SPACE_SEQ, ctl + R_SPACE_SLEEPS);
                return Ok(n);
            }
            if self.peer_gone() {
                return Ok(0);
            }
            self.wait(ctl + R_DATA_SEQ, ctl + R_DATA_SLEEPS, &mut polled_since, deadline, || {
                self.readable().map_or(true, |n| n > 0)
            })?;
        }
    }

    fn write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let ctl = ring_control(self.side);
        let deadline = self.deadline();
        let mut polled_since = None;
        loop {
            if self.peer_gone() {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "shared-memory connection closed"));
            }
            let space = self.writable()? as usize;
            if space > 0 {
                let data = self.ring_data(self.side);
                let mut head = self.tx_head.load(Ordering::Relaxed);
                let mut left = space.min(total);
                let n = left;
                for b in bufs {
                    let mut src: &[u8] = &b[..b.len().min(left)];
                    left -= src.len();
                    while !src.is_empty() {
                        let at = (head % self.ring_bytes) as usize;
                        let k = src.len().min(self.ring_bytes as usize - at);
                        // SAFETY: `at + k` lies inside the ring, in free space the
                        // consumer does not read until the head passes it.
                        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), data.add(at), k) };
                        head = head.wrapping_add(k as u64);
                        src = &src[k..];
                    }
                    if left == 0 {
                        break;
                    }
                }
                self.tx_head.store(head, Ordering::Relaxed);
                self.map.u64(ctl + R_HEAD).store(head, Ordering::Release);
                self.notify(ctl + R_DATA_SEQ, ctl + R_DATA_SLEEPS);
                return Ok(n);
            }
            self.wait(ctl + R_SPACE_SEQ, ctl + R_SPACE_SLEEPS, &mut polled_since, deadline, || {
                self.writable().map_or(true, |n| n > 0)
            })?;
        }
    }

    fn close(&self) {
        if self.shut.swap(true, Ordering::AcqRel) {
            return;
        }
        self.map.u32(OFF_CLOSED[self.side]).store(1, Ordering::Release);
        // Wake whoever sleeps on either ring: the peer, or another handle of ours.
        for ring in 0..2 {
            let ctl = ring_control(ring);
            for seq in [ctl + R_DATA_SEQ, ctl + R_SPACE_SEQ] {
                self.map.u32(seq).fetch_add(1, Ordering::Release);
                futex_wake(self.map.u32(seq));
            }
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.close();
        if let Some(live) = &self.live {
            live.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// A stream over a pair of shared-memory rings.
pub struct ShmStream(Arc<Conn>);

impl ShmStream {
    /// For tests of a damaged peer: this side's ring claims to hold far more bytes
    /// than it can, and the other side is woken to find it.
    #[doc(hidden)]
    pub fn damage_for_tests(&self) {
        self.scribble_for_tests(ring_control(self.0.side) + R_HEAD, u64::MAX / 2);
    }

    /// Stores `value` at byte `offset` of the control page (layout in the module doc).
    fn scribble_for_tests(&self, offset: usize, value: u64) {
        self.0.map.u64(offset).store(value, Ordering::SeqCst);
        self.0.notify(ring_control(self.0.side) + R_DATA_SEQ, ring_control(self.0.side) + R_DATA_SLEEPS);
    }
}

impl Read for ShmStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for ShmStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_vectored(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.write_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream for ShmStream {
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        let ns = t.map_or(0, |t| (t.as_nanos() as u64).max(1));
        self.0.timeout_ns.store(ns, Ordering::Relaxed);
        Ok(())
    }
    fn try_clone(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(ShmStream(self.0.clone())))
    }
    fn peer(&self) -> String {
        "shared memory".into()
    }
    fn shutdown(&self) {
        self.0.close();
    }
    fn readable_now(&self) -> bool {
        self.0.readable().map_or(true, |n| n > 0) || self.0.peer_gone()
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
    fn set_nonblocking(&self, _on: bool) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "shared-memory streams block"))
    }
}

fn hello(status: u32, ring_bytes: usize) -> [u8; HELLO_BYTES] {
    let mut h = [0u8; HELLO_BYTES];
    h[..4].copy_from_slice(&(MAGIC as u32).to_le_bytes());
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..12].copy_from_slice(&status.to_le_bytes());
    h[12..].copy_from_slice(&(ring_bytes as u32).to_le_bytes());
    h
}

/// The daemon's side: a rendezvous socket handing out rings.
pub(crate) struct ShmListener {
    uds: UnixListener,
    live: Arc<AtomicUsize>,
    connections_max: usize,
    ring_bytes: usize,
}

impl ShmListener {
    pub(crate) fn bind(path: &Path, connections_max: usize, ring_bytes: usize) -> io::Result<ShmListener> {
        let _ = std::fs::remove_file(path);
        let uds = UnixListener::bind(path)?;
        Ok(ShmListener { uds, live: Arc::new(AtomicUsize::new(0)), connections_max, ring_bytes })
    }

    /// The next client that got a ring. Clients turned away (at the bound) or gone
    /// before the hello are not returned.
    pub(crate) fn accept(&self) -> io::Result<Box<dyn Stream>> {
        loop {
            let (sock, _) = self.uds.accept()?;
            // The hello is 16 bytes into an empty socket buffer; never blocks long.
            let _ = sock.set_write_timeout(Some(Duration::from_secs(1)));
            if self.live.load(Ordering::Acquire) >= self.connections_max {
                let _ = send_hello(&sock, STATUS_BUSY, self.ring_bytes, None);
                continue;
            }
            let (map, fd) = match create_rings(self.ring_bytes) {
                Ok(m) => m,
                Err(e) => {
                    let _ = send_hello(&sock, STATUS_BUSY, self.ring_bytes, None);
                    return Err(e);
                }
            };
            if send_hello(&sock, STATUS_OK, self.ring_bytes, Some(fd.as_raw_fd())).is_err() {
                continue;
            }
            drop(fd);
            self.live.fetch_add(1, Ordering::AcqRel);
            return Ok(Box::new(ShmStream(Arc::new(Conn {
                map,
                side: 1,
                ring_bytes: self.ring_bytes as u64,
                tx_head: AtomicU64::new(0),
                rx_tail: AtomicU64::new(0),
                timeout_ns: AtomicU64::new(0),
                sock,
                shut: AtomicBool::new(false),
                hung_up: AtomicBool::new(false),
                live: Some(self.live.clone()),
            }))));
        }
    }
}

/// A sealed memory file of the control page and two rings, mapped.
fn create_rings(ring_bytes: usize) -> io::Result<(Mapping, OwnedFd)> {
    let len = CONTROL_BYTES + 2 * ring_bytes;
    let fd = memfd_create("gust-shm", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)?;
    // SAFETY: plain calls on a descriptor we own; results checked.
    unsafe {
        if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0 {
            return Err(io::Error::last_os_error());
        }
        // A peer holding the descriptor must not shrink the file under our mapping.
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let map = Mapping::new(fd.as_raw_fd(), len)?;
    map.u64(OFF_MAGIC).store(MAGIC, Ordering::Relaxed);
    map.u32(OFF_VERSION).store(VERSION, Ordering::Relaxed);
    map.u32(OFF_RING_BYTES).store(ring_bytes as u32, Ordering::Release);
    Ok((map, fd))
}

fn send_hello(sock: &UnixStream, status: u32, ring_bytes: usize, fd: Option<RawFd>) -> io::Result<()> {
    let h = hello(status, ring_bytes);
    let fds = fd.map(|f| [f]);
    let cmsgs: Vec<ControlMessage<'_>> = fds.as_ref().map(|f| ControlMessage::ScmRights(f)).into_iter().collect();
    let n = sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(&h)], &cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    if n != HELLO_BYTES {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short hello"));
    }
    Ok(())
}

/// Connects to the daemon's rendezvous socket at `path` and maps the rings it hands
/// over. "Busy" (the daemon serves its maximum) is `ConnectionRefused`: the caller
/// uses another endpoint. (`crate::connect` is the usual way in; this one returns
/// the concrete stream, for tests that play a damaged peer.)
pub fn connect(path: &Path, timeout: Duration) -> io::Result<ShmStream> {
    let sock = UnixStream::connect(path)?;
    sock.set_read_timeout(Some(timeout))?;
    let mut h = [0u8; HELLO_BYTES];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let (n, fd) = {
        let mut iov = [IoSliceMut::new(&mut h)];
        let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut fd = None;
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for f in fds {
                    // SAFETY: descriptors just received are ours alone.
                    let owned = unsafe { OwnedFd::from_raw_fd(f) };
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
        }
        (msg.bytes, fd)
    };
    sock.set_read_timeout(None)?;
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()));
    if n != HELLO_BYTES || h[..4] != (MAGIC as u32).to_le_bytes() {
        return Err(bad(format!("not a GustFS shared-memory endpoint ({n}-byte hello)")));
    }
    let version = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
    let status = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    let ring_bytes = u32::from_le_bytes(h[12..].try_into().expect("4 bytes")) as usize;
    if version != VERSION {
        return Err(bad(format!("shared-memory version {version}, this client speaks {VERSION}")));
    }
    if status == STATUS_BUSY {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "the daemon serves its maximum of shared-memory connections",
        ));
    }
    let fd = fd.ok_or_else(|| bad("no memory file attached".into()))?;
    if !(RING_BYTES_MIN..=RING_BYTES_MAX).contains(&ring_bytes) {
        return Err(bad(format!("ring size {ring_bytes} out of bounds")));
    }
    let len = CONTROL_BYTES + 2 * ring_bytes;
    // SAFETY: fstat into a struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if (st.st_size as usize) < len {
        return Err(bad(format!("memory file of {} bytes, rings need {len}", st.st_size)));
    }
    let map = Mapping::new(fd.as_raw_fd(), len)?;
    if map.u64(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
        return Err(bad("memory file without the magic".into()));
    }
    Ok(ShmStream(Arc::new(Conn {
        map,
        side: 0,
        ring_bytes: ring_bytes as u64,
        tx_head: AtomicU64::new(0),
        rx_tail: AtomicU64::new(0),
        timeout_ns: AtomicU64::new(0),
        sock,
        shut: AtomicBool::new(false),
        hung_up: AtomicBool::new(false),
        live: None,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Listener;

    fn sock_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("gust-shm-{name}-{}.sock", std::process::id()))
    }

    #[test]
    fn past_the_bound_clients_are_told_busy_and_a_freed_place_is_reused() {
        let p = sock_path("busy");
        let l = Arc::new(Listener::bind_shm(&p, 1, RING_BYTES_MIN).unwrap());
        let acceptor = l.clone();
        let server = std::thread::spawn(move || acceptor.accept().unwrap());
        let mut first = connect(&p, Duration::from_secs(5)).unwrap();
        let mut served = server.join().unwrap();
        first.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        served.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        // The listener turns the second away inside accept; accept keeps waiting.
        let acceptor = l.clone();
        let server = std::thread::spawn(move || acceptor.accept().unwrap());
        let e = connect(&p, Duration::from_secs(5)).err().expect("second connection refused");
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
        drop(served);
        let _third = connect(&p, Duration::from_secs(5)).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn bytes_wrap_around_a_small_ring_in_both_directions() {
        let p = sock_path("wrap");
        let l = Listener::bind_shm(&p, 4, RING_BYTES_MIN).unwrap();
        let server = std::thread::spawn(move || {
            let mut s = l.accept().unwrap();
            // Echo everything back: both rings fill and wrap many times.
            let mut buf = vec![0u8; 3000];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
        });
        let mut c: Box<dyn Stream> = Box::new(connect(&p, Duration::from_secs(5)).unwrap());
        let mut r = c.try_clone().unwrap();
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let expect = sent.clone();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; expect.len()];
            r.read_exact(&mut got).unwrap();
            assert!(got == expect, "echo differs");
        });
        for part in sent.chunks(5000) {
            write_parts_split(&mut c, part);
        }
        reader.join().unwrap();
        c.shutdown();
        server.join().unwrap();
    }

    fn write_parts_split(c: &mut Box<dyn Stream>, part: &[u8]) {
        let (a, b) = part.split_at(part.len() / 3);
        crate::write_parts(c, &[a, b]).unwrap();
    }

    #[test]
    fn a_damaged_ring_is_an_error_not_a_crash_and_timeouts_hold() {
        let p = sock_path("damage");
        let l = Listener::bind_shm(&p, 4, RING_BYTES_MIN).unwrap();
        // The steps in order whatever the machine's load: the server's timed-out
        // read, then the damage, then the server's reads of the damaged rings.
        let (timed_out, told) = std::sync::mpsc::channel();
        let (damaged, see) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let mut s = l.accept().unwrap();
            s.set_timeout(Some(Duration::from_millis(300))).unwrap();
            let t = Instant::now();
            let mut b = [0u8; 16];
            let e = s.read(&mut b).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
            assert!(t.elapsed() >= Duration::from_millis(250), "the timeout held: {:?}", t.elapsed());
            timed_out.send(()).unwrap();
            see.recv().unwrap();
            s.set_timeout(Some(Duration::from_secs(10))).unwrap();
            let e = s.read(&mut b).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
            assert!(e.to_string().contains("damaged"), "{e}");
            // A read position past everything written is refused as well.
            let e = s.write(&[1u8; 8]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        });
        let shm = connect(&p, Duration::from_secs(5)).unwrap();
        told.recv().unwrap();
        shm.scribble_for_tests(ring_control(0) + R_HEAD, u64::MAX / 2);
        shm.scribble_for_tests(ring_control(1) + R_TAIL, 1 << 40);
        damaged.send(()).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn a_closed_peer_is_end_of_stream_for_reads_and_an_error_for_writes() {
        let p = sock_path("close");
        let l = Listener::bind_shm(&p, 4, RING_BYTES_MIN).unwrap();
        let server = std::thread::spawn(move || {
            let mut s = l.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            assert_eq!(all, b"last words");
            assert_eq!(s.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        });
        let mut c = connect(&p, Duration::from_secs(5)).unwrap();
        c.write_all(b"last words").unwrap();
        drop(c);
        server.join().unwrap();
    }
}
