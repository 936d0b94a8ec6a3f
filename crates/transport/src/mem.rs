//! The in-memory transport: listeners and streams inside one process, for tests.
//!
//! Delivery follows a seed ([`configure`]): every write is cut into pieces whose sizes
//! come from a generator seeded with the listener's seed and the connection's number
//! at that listener (not its name, so a listener of another name given the same seed
//! replays the same delivery), and a read
//! returns at most one piece. Short reads and frames split at every possible byte
//! then happen where the seed says, the same way in every run, which real sockets on
//! loopback almost never do. Faults: [`configure`] can also make a listener's
//! connections break after a number of bytes, as a peer that dies mid-frame would.
//!
//! Not for: performance measurement (every byte crosses a mutex), or determinism of
//! thread scheduling: the bytes replay exactly, the interleaving of threads does not.

use crate::{Endpoint, Stream};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// Largest piece a write is cut into (with a seed other than 0).
const PIECE_BYTES_MAX: usize = 4096;
/// Bound on bytes waiting unread in one direction: a writer blocks past it, as a
/// full socket buffer makes it.
const PIPE_BYTES_MAX: usize = 4 << 20;

struct Listening {
    tx: Sender<MemStream>,
    seed: u64,
    cut_after_bytes: Option<u64>,
    connections: u64,
}

fn registry() -> MutexGuard<'static, HashMap<String, Listening>> {
    static R: OnceLock<Mutex<HashMap<String, Listening>>> = OnceLock::new();
    R.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Delivery of the connections that listener `name` accepts from now on: `seed` cuts
/// writes into pieces (0: every write whole), `cut_after_bytes` breaks a connection
/// once that many bytes were written on it (both directions together). False if
/// nothing listens on `name`.
pub fn configure(name: &str, seed: u64, cut_after_bytes: Option<u64>) -> bool {
    match registry().get_mut(name) {
        Some(l) => {
            l.seed = seed;
            l.cut_after_bytes = cut_after_bytes;
            true
        }
        None => false,
    }
}

pub(crate) struct MemListener {
    rx: Mutex<Receiver<MemStream>>,
}

impl MemListener {
    pub(crate) fn accept(&self) -> io::Result<Box<dyn Stream>> {
        let s = self.rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        s.map(|s| Box::new(s) as Box<dyn Stream>)
            .map_err(|_| io::Error::new(io::ErrorKind::NotConnected, "listener closed"))
    }
}

pub(crate) fn listen(name: &str) -> io::Result<MemListener> {
    let mut r = registry();
    if r.contains_key(name) {
        return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("mem:{name} is already bound")));
    }
    let (tx, rx) = mpsc::channel();
    r.insert(name.to_string(), Listening { tx, seed: 0, cut_after_bytes: None, connections: 0 });
    Ok(MemListener { rx: Mutex::new(rx) })
}

pub(crate) fn unlisten(ep: &Endpoint) {
    if let Endpoint::Mem(n) = ep {
        registry().remove(n);
    }
}

pub(crate) fn connect(name: &str) -> io::Result<Box<dyn Stream>> {
    let mut r = registry();
    let l = r
        .get_mut(name)
        .ok_or_else(|| io::Error::new(io::ErrorKind::ConnectionRefused, format!("nothing listens on mem:{name}")))?;
    let n = l.connections;
    l.connections += 1;
    let seed = l.seed;
    let a = Arc::new(Pipe::default());
    let b = Arc::new(Pipe::default());
    let budget = l.cut_after_bytes.map(|b| Arc::new(AtomicU64::new(b)));
    let mk = |rx: &Arc<Pipe>, tx: &Arc<Pipe>, salt: u64, peer: String| MemStream {
        conn: Arc::new(Conn {
            rx: rx.clone(),
            tx: tx.clone(),
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt)),
            cut: seed != 0,
            budget: budget.clone(),
            timeout: Mutex::new(None),
            peer,
        }),
    };
    let server = mk(&a, &b, 1, format!("mem client {n}"));
    let client = mk(&b, &a, 2, format!("mem:{name}"));
    l.tx.send(server).map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, "listener gone"))?;
    Ok(Box::new(client))
}

#[derive(Default)]
struct PipeState {
    pieces: VecDeque<Vec<u8>>,
    bytes: usize,
    closed: bool,
}

#[derive(Default)]
struct Pipe {
    state: Mutex<PipeState>,
    changed: Condvar,
}

impl Pipe {
    fn lock(&self) -> MutexGuard<'_, PipeState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

struct Conn {
    rx: Arc<Pipe>,
    tx: Arc<Pipe>,
    rng: Mutex<StdRng>,
    cut: bool,
    /// Bytes left before the injected break, shared by both ends.
    budget: Option<Arc<AtomicU64>>,
    timeout: Mutex<Option<Duration>>,
    peer: String,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.rx.close();
        self.tx.close();
    }
}

/// One end of an in-memory connection; clones share it.
pub struct MemStream {
    conn: Arc<Conn>,
}

impl MemStream {
    fn deadline(&self) -> Option<Instant> {
        self.conn.timeout.lock().unwrap_or_else(|e| e.into_inner()).map(|t| Instant::now() + t)
    }

    fn wait<'a>(
        &self,
        pipe: &'a Pipe,
        mut g: MutexGuard<'a, PipeState>,
        deadline: Option<Instant>,
    ) -> io::Result<MutexGuard<'a, PipeState>> {
        match deadline {
            None => Ok(pipe.changed.wait(g).unwrap_or_else(|e| e.into_inner())),
            Some(d) => {
                let now = Instant::now();
                if now >= d {
                    return Err(io::Error::new(io::ErrorKind::WouldBlock, "timed out"));
                }
                g = pipe.changed.wait_timeout(g, d - now).unwrap_or_else(|e| e.into_inner()).0;
                Ok(g)
            }
        }
    }

    fn broken(&self) -> io::Error {
        self.conn.rx.close();
        self.conn.tx.close();
        io::Error::new(io::ErrorKind::ConnectionReset, "connection cut (injected)")
    }
}

impl Read for MemStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = self.deadline();
        let pipe = &self.conn.rx;
        let mut g = pipe.lock();
        loop {
            if let Some(front) = g.pieces.front_mut() {
                let n = front.len().min(buf.len());
                buf[..n].copy_from_slice(&front[..n]);
                if n == front.len() {
                    g.pieces.pop_front();
                } else {
                    front.drain(..n);
                }
                g.bytes -= n;
                pipe.changed.notify_all();
                return Ok(n);
            }
            if g.closed {
                return Ok(0);
            }
            g = self.wait(pipe, g, deadline)?;
        }
    }
}

impl Write for MemStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut n = buf.len();
        if let Some(b) = &self.conn.budget {
            let left = b.load(Ordering::SeqCst);
            if left == 0 {
                return Err(self.broken());
            }
            n = n.min(left as usize);
            b.fetch_sub(n as u64, Ordering::SeqCst);
        }
        let deadline = self.deadline();
        let pipe = &self.conn.tx;
        let mut g = pipe.lock();
        while !g.closed && g.bytes + n > PIPE_BYTES_MAX && g.bytes > 0 {
            g = self.wait(pipe, g, deadline)?;
        }
        if g.closed {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "peer closed the connection"));
        }
        let mut at = 0;
        while at < n {
            let piece = if self.conn.cut {
                self.conn.rng.lock().unwrap_or_else(|e| e.into_inner()).gen_range(1..=PIECE_BYTES_MAX).min(n - at)
            } else {
                n - at
            };
            g.pieces.push_back(buf[at..at + piece].to_vec());
            at += piece;
        }
        g.bytes += n;
        pipe.changed.notify_all();
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream for MemStream {
    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        *self.conn.timeout.lock().unwrap_or_else(|e| e.into_inner()) = t;
        Ok(())
    }
    fn try_clone(&self) -> io::Result<Box<dyn Stream>> {
        Ok(Box::new(MemStream { conn: self.conn.clone() }))
    }
    fn peer(&self) -> String {
        self.conn.peer.clone()
    }
    fn shutdown(&self) {
        self.conn.rx.close();
        self.conn.tx.close();
    }
    fn readable_now(&self) -> bool {
        !self.conn.rx.lock().pieces.is_empty()
    }
    fn raw_fd(&self) -> Option<std::os::unix::io::RawFd> {
        None
    }
    fn set_nonblocking(&self, _on: bool) -> io::Result<()> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "in-memory streams block"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{connect, Listener};

    /// Sizes of the reads a receiver sees for a fixed stream of writes.
    fn read_sizes(name: &str, seed: u64) -> Vec<usize> {
        let l = Listener::bind(&Endpoint::Mem(name.into())).unwrap();
        assert!(configure(name, seed, None));
        let mut c = connect(&Endpoint::Mem(name.into()), Duration::from_secs(1)).unwrap();
        let mut s = l.accept().unwrap();
        for i in 0..20 {
            c.write_all(&vec![i as u8; 1000 + i * 997]).unwrap();
        }
        c.shutdown();
        let mut sizes = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            sizes.push(n);
        }
        sizes
    }

    #[test]
    fn delivery_replays_from_the_seed() {
        // A listener bound again under the same name with the same seed cuts the
        // same writes at the same bytes; another seed cuts them elsewhere.
        let a = read_sizes("replay", 42);
        let b = read_sizes("replay", 42);
        let c = read_sizes("replay", 43);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.iter().sum::<usize>(), c.iter().sum::<usize>());
        assert!(a.len() > 20, "writes are cut into pieces: {}", a.len());
        assert!(a.iter().all(|&n| n <= PIECE_BYTES_MAX));
        let whole = read_sizes("replay-whole", 0);
        assert_eq!(whole.len(), 20, "seed 0 delivers every write whole");
    }

    #[test]
    fn a_cut_connection_fails_both_ends() {
        let l = Listener::bind(&Endpoint::Mem("cut".into())).unwrap();
        assert!(configure("cut", 0, Some(1500)));
        let mut c = connect(&Endpoint::Mem("cut".into()), Duration::from_secs(1)).unwrap();
        let mut s = l.accept().unwrap();
        assert_eq!(c.write(&[1u8; 1000]).unwrap(), 1000);
        assert_eq!(c.write(&[2u8; 1000]).unwrap(), 500, "the write stops at the cut");
        assert!(c.write(&[3u8; 10]).is_err());
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 1500);
        assert!(s.write(&[0u8; 4]).is_err());
    }

    #[test]
    fn reads_time_out_and_names_are_exclusive() {
        let l = Listener::bind(&Endpoint::Mem("timeout".into())).unwrap();
        assert_eq!(Listener::bind(&Endpoint::Mem("timeout".into())).err().unwrap().kind(), io::ErrorKind::AddrInUse);
        let mut c = connect(&Endpoint::Mem("timeout".into()), Duration::from_secs(1)).unwrap();
        let _s = l.accept().unwrap();
        c.set_timeout(Some(Duration::from_millis(50))).unwrap();
        let t = Instant::now();
        assert!(c.read(&mut [0u8; 8]).is_err());
        assert!(t.elapsed() >= Duration::from_millis(50) && t.elapsed() < Duration::from_secs(5));
        drop(l);
        assert!(connect(&Endpoint::Mem("timeout".into()), Duration::from_secs(1)).is_err());
    }
}
