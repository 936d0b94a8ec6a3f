//! Replies whose bulk lies in table files go to the socket by reference: the
//! pages' references move through a pipe (`vmsplice`, then `splice` into the
//! socket) instead of their bytes being copied into socket buffers, so the only
//! copy of a file's data on its way to a client is the client's own read.
//!
//! What may go by reference: only bytes in file-backed pages (`/proc/self/pagemap`
//! says so for the first and the last page of a value, the same mapping). Those
//! are RocksDB's mmap'd table files, which are never written after they are
//! finished: a page the kernel still holds for the peer keeps its bytes even after
//! the table is compacted away and unmapped. Anything else (a frame's header and
//! body, a value in a memtable, whose arena can be freed and reused while the
//! peer has not read it yet, a worker's buffer) is written into the pipe, a copy
//! as into the socket. The pipe is the connection's send queue: what the socket
//! does not take waits in it, in order, until the socket is writable again.
//!
//! Measured (docs/PERFORMANCE.md, "Data loader, sixth round"): the daemon's CPU
//! per ~100 KiB file read in batches went from 31 to 24 µs.
//!
//! Not for: chunk data (read into the worker's buffer, reused for the next reply).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Pipe capacity asked for: a batch's reply from one daemon (~800 KiB for a data
/// loader's batch of 32 over 4 daemons) in one go. The kernel may refuse (an
/// unprivileged user's pipes past fs.pipe-user-pages-soft); the default 64 KiB
/// works too, with more system calls.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// Connections that may hold a pipe at once: each costs two descriptors and up to
/// PIPE_BYTES of pages held for its peer; past this, replies are copied as before.
/// A data loader has a connection per worker process per daemon.
const SEND_PIPES_MAX: usize = 256;

/// Pipes alive now (SendPipe::new and Drop).
static SEND_PIPES: AtomicUsize = AtomicUsize::new(0);

/// Bulk smaller than this is copied: a pipe's two system calls cost more than the
/// copy they save.
pub(crate) const BY_REFERENCE_BYTES_MIN: usize = 64 << 10;

/// Off after the kernel refused `vmsplice` once (a seccomp filter, an old kernel):
/// everything is copied from then on.
static REFUSED: AtomicBool = AtomicBool::new(false);

pub(crate) fn available() -> bool {
    !REFUSED.load(Ordering::Relaxed) && pagemap().is_some()
}

fn pagemap() -> Option<&'static File> {
    static PAGEMAP: OnceLock<Option<File>> = OnceLock::new();
    PAGEMAP.get_or_init(|| File::open("/proc/self/pagemap").ok()).as_ref()
}

fn page_bytes() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096))
}

/// Whether the page holding `byte` is present and file-backed (pagemap bits 63
/// and 61; readable without privileges, which only hides frame numbers).
fn page_is_file(byte: &u8) -> bool {
    let Some(map) = pagemap() else { return false };
    // Touch it first: a page not faulted into this mapping yet reads as absent.
    // SAFETY: a valid reference.
    unsafe { std::ptr::read_volatile(byte) };
    let page = byte as *const u8 as usize / page_bytes();
    let mut entry = [0u8; 8];
    if map.read_exact_at(&mut entry, page as u64 * 8).is_err() {
        return false;
    }
    let e = u64::from_ne_bytes(entry);
    e & (1 << 63) != 0 && e & (1 << 61) != 0
}

/// Whether `data` lies in file-backed pages: its first and last byte's pages
/// (one value is one allocation or one table's mapping, never both).
pub(crate) fn file_backed(data: &[u8]) -> bool {
    match (data.first(), data.last()) {
        (Some(first), Some(last)) => page_is_file(first) && page_is_file(last),
        _ => false,
    }
}

/// A connection's send queue: a pipe, and how many bytes wait in it.
pub(crate) struct SendPipe {
    read: OwnedFd,
    write: OwnedFd,
    queued: usize,
}

impl SendPipe {
    pub(crate) fn new() -> io::Result<SendPipe> {
        if SEND_PIPES.fetch_add(1, Ordering::Relaxed) >= SEND_PIPES_MAX {
            SEND_PIPES.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "send pipes at their bound"));
        }
        let mut fds = [0 as RawFd; 2];
        // SAFETY: two descriptors returned into our array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            SEND_PIPES.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptors, owned from here on.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: a pipe we own; failure leaves the default size.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        Ok(SendPipe { read, write, queued: 0 })
    }

    /// Bytes in the pipe, not in the socket yet.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Moves as much of `data` into the pipe as fits now (0: full), by reference
    /// if `by_reference` (the caller vouches the pages are file-backed).
    pub(crate) fn push(&mut self, data: &[u8], by_reference: bool) -> io::Result<usize> {
        loop {
            let n = if by_reference && !REFUSED.load(Ordering::Relaxed) {
                let iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
                // SAFETY: one iovec over `data`, which lives through the call; the
                // pipe takes references to the pages, which stay valid (file pages).
                unsafe { libc::vmsplice(self.write.as_raw_fd(), &iov, 1, libc::SPLICE_F_NONBLOCK) }
            } else {
                // SAFETY: `data` is valid for its length.
                unsafe { libc::write(self.write.as_raw_fd(), data.as_ptr() as *const libc::c_void, data.len()) }
            };
            if n >= 0 {
                self.queued += n as usize;
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => return Ok(0),
                _ if by_reference && !REFUSED.swap(true, Ordering::Relaxed) => {
                    tracing::warn!("vmsplice refused ({e}); replies are copied from now on");
                }
                _ => return Err(e),
            }
        }
    }

    /// Moves queued bytes into `socket` as far as it takes them now.
    pub(crate) fn drain(&mut self, socket: RawFd) -> io::Result<()> {
        while self.queued > 0 {
            // SAFETY: descriptors we hold; no offsets (a pipe and a socket).
            let n = unsafe {
                libc::splice(
                    self.read.as_raw_fd(),
                    std::ptr::null_mut(),
                    socket,
                    std::ptr::null_mut(),
                    self.queued,
                    libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
                )
            };
            match n {
                0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection closed")),
                n if n > 0 => self.queued -= n as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::Interrupted => {}
                        io::ErrorKind::WouldBlock => return Ok(()),
                        _ => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }
}

impl Drop for SendPipe {
    fn drop(&mut self) {
        SEND_PIPES.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    /// A mapped file's pages are file-backed; heap and stack memory are not.
    #[test]
    fn pagemap_tells_file_pages_from_anonymous_ones() {
        let heap = vec![7u8; 200_000];
        assert!(!file_backed(&heap));
        let stack = [std::hint::black_box(1u8), 2, 3];
        assert!(!file_backed(&stack));
        assert!(!file_backed(&[]));
        // A constant lies in the executable's mapping: file pages, never written.
        assert!(file_backed(&[1u8, 2, 3]));
        let (_f, map) = mapped(300_000);
        assert!(file_backed(map));
        assert!(file_backed(&map[5000..250_000]));
    }

    /// A read-only mapping of a new file of `len` pattern bytes.
    fn mapped(len: usize) -> (File, &'static [u8]) {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&pattern(len)).unwrap();
        // SAFETY: a fresh read-only shared mapping of a file we hold, leaked for the test.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, f.as_raw_fd(), 0) };
        assert_ne!(p, libc::MAP_FAILED);
        (f, unsafe { std::slice::from_raw_parts(p as *const u8, len) })
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// Copies and references come out of the socket in the order they went in,
    /// through a full socket and a full pipe, to a reader that takes little at a
    /// time; references keep the bytes they had when pushed.
    #[test]
    fn pushed_bytes_arrive_in_order_through_a_full_socket() {
        // More than the pipe (1 MiB) and the socket hold together.
        let (_f, map) = mapped(3_000_000);
        let (a, mut b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        let head = b"header and body".to_vec();
        let heap = pattern(90_000);
        let parts: Vec<(&[u8], bool)> =
            vec![(&head, false), (&map[..1_500_000], true), (&heap, false), (&map[1_500_000..], true)];
        let want: Vec<u8> = parts.iter().flat_map(|(p, _)| p.iter().copied()).collect();
        let total = want.len();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 777];
            while got.len() < total {
                let n = b.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
                if got.len() % 7 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            got
        });
        let mut pipe = SendPipe::new().unwrap();
        let fd = a.as_raw_fd();
        let mut waits = 0;
        for (p, by_ref) in parts {
            let mut off = 0;
            while off < p.len() {
                off += pipe.push(&p[off..], by_ref && file_backed(&p[off..])).unwrap();
                if off < p.len() {
                    pipe.drain(fd).unwrap();
                    waits += 1;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        }
        while pipe.queued() > 0 {
            pipe.drain(fd).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        assert!(waits > 0, "the pipe must have filled for this test to mean anything");
        let got = reader.join().unwrap();
        assert!(got == want, "bytes out of order or changed");
    }
}
