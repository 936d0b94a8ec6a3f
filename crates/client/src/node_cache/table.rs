//! The node cache's shared memory: one memfd, written by the holder alone
//! (`Writer`), mapped read-only by every client process of the node (`Table`).
//!
//! Layout (all integers native-endian: every process that maps it runs on this
//! node):
//!
//! * a header page: magic `GUSTNC01`, the number of slots, the arena's offset and
//!   length;
//! * `DAEMONS_MAX` leases: per daemon, until when (CLOCK_MONOTONIC nanoseconds) the
//!   holder's grants of that daemon may be used; 0: none;
//! * the slots, an open-addressing table of `SLOT_BYTES` each, a path found within
//!   `PROBES` slots of its hash: a sequence number (a seqlock: odd while the holder
//!   changes the slot, 0 never used), the path's hash, its daemon, and where its
//!   bytes lie in the arena (path, encoded record, inline data);
//! * the arena, written as a ring: an entry goes at the head, and the entries whose
//!   bytes it covers leave their slots first.
//!
//! A reader reads a slot's sequence number, copies what the slot points at,
//! and reads the number again: the same even number, and what it copied is what
//! the holder wrote (the holder bumps the number before it writes over an
//! entry's bytes, and fences in between). A reader never writes, so a process
//! killed while reading leaves nothing behind.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"GUSTNC01");
const HEADER_BYTES: usize = 4096;
/// Daemons whose leases the table carries; grants of daemons past it are not
/// shared.
pub(crate) const DAEMONS_MAX: usize = 16_384;
const LEASES_OFF: usize = HEADER_BYTES;
const SLOTS_OFF: usize = LEASES_OFF + DAEMONS_MAX * 8;
const SLOT_BYTES: usize = 64;
/// Slots looked at for one path.
const PROBES: usize = 8;
/// `data_len` of an entry whose file has no inline data (its data is in chunks).
const NOT_INLINE: u32 = u32::MAX;
/// Smallest table (sizes below are refused).
pub(crate) const BYTES_MIN: u64 = 16 << 20;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    slots: AtomicU64,
    arena_off: AtomicU64,
    arena_len: AtomicU64,
}

#[repr(C)]
struct Slot {
    seq: AtomicU64,
    hash: AtomicU64,
    off: AtomicU64,
    daemon: AtomicU32,
    path_len: AtomicU32,
    rec_len: AtomicU32,
    data_len: AtomicU32,
    _pad: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);

/// A path's hash: the same in every process (FNV-1a), never 0 (an empty slot's).
fn hash(path: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in path.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h | 1
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of the leases (the same in
/// every process of the node).
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What a lookup found: the encoded record, and the inline data (`None` inside:
/// the file has none; not asked: `None` outside).
pub(crate) struct Found {
    pub record: Vec<u8>,
    pub data: Option<Option<Vec<u8>>>,
}

/// A mapping of the table.
pub(crate) struct Table {
    base: *mut u8,
    len: usize,
    slots: usize,
    arena_off: usize,
    arena_len: usize,
}

// SAFETY: the mapping is shared memory read through atomics and seqlocked copies;
// nothing in it is tied to a thread.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

impl Drop for Table {
    fn drop(&mut self) {
        // SAFETY: base..base+len is this table's own mapping.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

fn map(fd: &OwnedFd, len: usize, writable: bool) -> io::Result<*mut u8> {
    let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
    // SAFETY: a fresh shared mapping of `len` bytes of an open descriptor.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

impl Table {
    /// A new table of `bytes` in a memfd (sparse: pages cost memory when written).
    pub(crate) fn create(bytes: u64) -> io::Result<(Table, OwnedFd)> {
        if bytes < BYTES_MIN || bytes > usize::MAX as u64 / 2 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("node cache of {bytes} bytes")));
        }
        // SAFETY: a NUL-terminated name; the flags are valid.
        let raw = unsafe { libc::memfd_create(c"gust-node-cache".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a descriptor this process owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: a valid descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), bytes as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = bytes as usize;
        let slots = ((len / 4096).clamp(4096, 1 << 20)).next_power_of_two().min(1 << 20);
        let arena_off = SLOTS_OFF + slots * SLOT_BYTES;
        if arena_off + (1 << 20) > len {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("node cache of {bytes} bytes")));
        }
        let base = map(&fd, len, true)?;
        let t = Table { base, len, slots, arena_off, arena_len: len - arena_off };
        let h = t.header();
        h.slots.store(slots as u64, Ordering::Relaxed);
        h.arena_off.store(arena_off as u64, Ordering::Relaxed);
        h.arena_len.store(t.arena_len as u64, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok((t, fd))
    }

    /// Maps a table the holder handed over, read-only, after checking its header.
    pub(crate) fn open(fd: &OwnedFd) -> io::Result<Table> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("node cache: {what}"));
        // SAFETY: an all-zero stat is valid to overwrite.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a valid descriptor and buffer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = st.st_size as usize;
        if len < SLOTS_OFF + SLOT_BYTES {
            return Err(bad("too small"));
        }
        let base = map(fd, len, false)?;
        let mut t = Table { base, len, slots: 0, arena_off: 0, arena_len: 0 };
        let h = t.header();
        let (slots, arena_off, arena_len) = (
            h.slots.load(Ordering::Relaxed) as usize,
            h.arena_off.load(Ordering::Relaxed) as usize,
            h.arena_len.load(Ordering::Relaxed) as usize,
        );
        if h.magic.load(Ordering::Acquire) != MAGIC
            || !slots.is_power_of_two()
            || arena_off != SLOTS_OFF + slots * SLOT_BYTES
            || arena_off.checked_add(arena_len) != Some(len)
        {
            return Err(bad("not a node cache"));
        }
        (t.slots, t.arena_off, t.arena_len) = (slots, arena_off, arena_len);
        Ok(t)
    }

    fn header(&self) -> &Header {
        // SAFETY: the header page is inside the mapping, aligned, and only atomics.
        unsafe { &*(self.base as *const Header) }
    }

    fn lease_cell(&self, daemon: u32) -> Option<&AtomicU64> {
        let d = daemon as usize;
        // SAFETY: inside the lease array, 8-byte aligned.
        (d < DAEMONS_MAX).then(|| unsafe { &*(self.base.add(LEASES_OFF + d * 8) as *const AtomicU64) })
    }

    fn slot(&self, i: usize) -> &Slot {
        // SAFETY: i < slots (callers mask), inside the mapping, aligned.
        unsafe { &*(self.base.add(SLOTS_OFF + (i & (self.slots - 1)) * SLOT_BYTES) as *const Slot) }
    }

    /// Until when (`mono_ns`) grants of `daemon` may be used; 0: not at all.
    pub(crate) fn lease(&self, daemon: u32) -> u64 {
        self.lease_cell(daemon).map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// Copies `len` bytes of the arena at `off` (bounds checked), which a
    /// concurrent write may tear: the caller checks the slot's sequence after.
    fn copy(&self, off: usize, len: usize) -> Option<Vec<u8>> {
        if off.checked_add(len)? > self.arena_len {
            return None;
        }
        let mut v = Vec::with_capacity(len);
        // SAFETY: inside the arena; the bytes are plain data, and a torn copy is
        // thrown away by the caller's sequence check.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(self.arena_off + off), v.as_mut_ptr(), len);
            v.set_len(len);
        }
        Some(v)
    }

    /// The entry of `path` if its daemon's lease runs past `now_ns`; with `data`,
    /// its inline data too.
    pub(crate) fn get(&self, path: &str, data: bool, now_ns: u64) -> Option<Found> {
        let h = hash(path);
        let start = (h as usize) & (self.slots - 1);
        for k in 0..PROBES {
            let s = self.slot(start + k);
            let seq = s.seq.load(Ordering::Acquire);
            if seq == 0 || seq & 1 == 1 || s.hash.load(Ordering::Relaxed) != h {
                continue;
            }
            let off = s.off.load(Ordering::Relaxed) as usize;
            let daemon = s.daemon.load(Ordering::Relaxed);
            let path_len = s.path_len.load(Ordering::Relaxed) as usize;
            let rec_len = s.rec_len.load(Ordering::Relaxed) as usize;
            let data_len = s.data_len.load(Ordering::Relaxed);
            let Some(name) = self.copy(off, path_len) else { continue };
            if name != path.as_bytes() {
                continue;
            }
            let Some(record) = self.copy(off + path_len, rec_len) else { continue };
            let inline = match (data, data_len) {
                (false, _) => None,
                (true, NOT_INLINE) => Some(None),
                (true, n) => Some(Some(self.copy(off + path_len + rec_len, n as usize)?)),
            };
            fence(Ordering::Acquire);
            if s.seq.load(Ordering::Relaxed) != seq {
                return None; // changed while read: the holder is replacing it
            }
            if self.lease(daemon) <= now_ns {
                return None;
            }
            return Some(Found { record, data: inline });
        }
        None
    }
}

/// The holder's side: the only process that writes the table.
pub(crate) struct Writer {
    table: Table,
    /// The arena's head: where the next entry goes.
    head: usize,
    /// Per slot, the arena offset and length of its entry, if it has one.
    entries: Vec<Option<(usize, usize)>>,
    /// Slots by the arena offset of their entry.
    by_off: std::collections::BTreeMap<usize, usize>,
    /// Per slot, when its entry was written (the oldest in a full probe window
    /// goes).
    written: Vec<u64>,
    count: u64,
}

impl Writer {
    pub(crate) fn new(table: Table) -> Writer {
        let slots = table.slots;
        Writer {
            table,
            head: 0,
            entries: vec![None; slots],
            by_off: Default::default(),
            written: vec![0; slots],
            count: 0,
        }
    }

    /// Entries in the table now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_off.len()
    }

    /// The largest entry the table takes (an eighth of the arena).
    fn entry_max(&self) -> usize {
        self.table.arena_len / 8
    }

    /// Sets until when (`mono_ns`) grants of `daemon` may be used (0: not at all).
    pub(crate) fn set_lease(&self, daemon: u32, until_ns: u64) {
        if let Some(c) = self.table.lease_cell(daemon) {
            c.store(until_ns, Ordering::Release);
        }
    }

    fn slot_index(&self, start: usize, k: usize) -> usize {
        (start + k) & (self.table.slots - 1)
    }

    /// The slot holding `path`'s entry, if any.
    fn find(&self, path: &str) -> Option<usize> {
        let h = hash(path);
        let start = (h as usize) & (self.table.slots - 1);
        (0..PROBES).map(|k| self.slot_index(start, k)).find(|&i| {
            let s = self.table.slot(i);
            s.hash.load(Ordering::Relaxed) == h
                && self.entries[i].is_some_and(|(off, _)| {
                    self.table.copy(off, s.path_len.load(Ordering::Relaxed) as usize).as_deref()
                        == Some(path.as_bytes())
                })
        })
    }

    /// Whether `path` has an entry.
    pub(crate) fn contains(&self, path: &str) -> bool {
        self.find(path).is_some()
    }

    /// Empties slot `i`: readers that copied it find its sequence moved.
    fn clear(&mut self, i: usize) {
        let s = self.table.slot(i);
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.hash.store(0, Ordering::Relaxed);
        s.seq.store(seq + 2, Ordering::Release);
        if let Some((off, _)) = self.entries[i].take() {
            self.by_off.remove(&off);
        }
    }

    /// Takes `path`'s entry out (a recall).
    pub(crate) fn remove(&mut self, path: &str) {
        if let Some(i) = self.find(path) {
            self.clear(i);
        }
    }

    /// Takes every entry of `daemon` out (the holder forgot its grants there: its
    /// lease ran out, or its callback connection was replaced).
    pub(crate) fn remove_daemon(&mut self, daemon: u32) {
        self.set_lease(daemon, 0);
        let of_daemon: Vec<usize> = self
            .by_off
            .values()
            .copied()
            .filter(|&i| self.table.slot(i).daemon.load(Ordering::Relaxed) == daemon)
            .collect();
        for i in of_daemon {
            self.clear(i);
        }
    }

    /// Writes `path`'s entry (replacing any): granted by `daemon`, its encoded
    /// record, and its inline data (`None`: its data is in chunks). False if it
    /// does not fit.
    pub(crate) fn put(&mut self, path: &str, daemon: u32, record: &[u8], data: Option<&[u8]>) -> bool {
        let data_len = data.map_or(0, |d| d.len());
        let total = (path.len() + record.len() + data_len).next_multiple_of(8);
        if total > self.entry_max() || data_len >= NOT_INLINE as usize || daemon as usize >= DAEMONS_MAX {
            return false;
        }
        if let Some(i) = self.find(path) {
            self.clear(i);
        }
        let h = hash(path);
        let start = (h as usize) & (self.table.slots - 1);
        let window: Vec<usize> = (0..PROBES).map(|k| self.slot_index(start, k)).collect();
        let i = window
            .iter()
            .copied()
            .find(|&i| self.entries[i].is_none())
            .unwrap_or_else(|| *window.iter().min_by_key(|&&i| self.written[i]).expect("PROBES > 0"));
        if self.entries[i].is_some() {
            self.clear(i);
        }
        // The ring: the entries whose bytes the new one covers go first.
        if self.head + total > self.table.arena_len {
            self.head = 0;
        }
        let at = self.head;
        let covered: Vec<usize> = self.by_off.range(at..at + total).map(|(_, &i)| i).collect();
        for j in covered {
            self.clear(j);
        }
        // Stores to the arena come after the clears above for any reader.
        fence(Ordering::Release);
        // SAFETY: at..at+total is inside the arena (checked above) and no slot
        // points into it any more; the mapping is writable in the holder.
        unsafe {
            let dst = self.table.base.add(self.table.arena_off + at);
            std::ptr::copy_nonoverlapping(path.as_ptr(), dst, path.len());
            std::ptr::copy_nonoverlapping(record.as_ptr(), dst.add(path.len()), record.len());
            if let Some(d) = data {
                std::ptr::copy_nonoverlapping(d.as_ptr(), dst.add(path.len() + record.len()), d.len());
            }
        }
        let s = self.table.slot(i);
        let seq = s.seq.load(Ordering::Relaxed);
        s.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        s.hash.store(h, Ordering::Relaxed);
        s.off.store(at as u64, Ordering::Relaxed);
        s.daemon.store(daemon, Ordering::Relaxed);
        s.path_len.store(path.len() as u32, Ordering::Relaxed);
        s.rec_len.store(record.len() as u32, Ordering::Relaxed);
        s.data_len.store(data.map_or(NOT_INLINE, |d| d.len() as u32), Ordering::Relaxed);
        s.seq.store(seq + 2, Ordering::Release);
        self.entries[i] = Some((at, total));
        self.by_off.insert(at, i);
        self.count += 1;
        self.written[i] = self.count;
        self.head = at + total;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> u64 {
        mono_ns() + 60_000_000_000
    }

    #[test]
    fn entries_are_found_under_a_lease_and_not_after_it_or_their_removal() {
        let (t, fd) = Table::create(BYTES_MIN).unwrap();
        let mut w = Writer::new(t);
        let r = Table::open(&fd).unwrap();
        assert!(w.put("/a/b", 3, b"record", Some(b"data")));
        assert!(w.put("/a/c", 3, b"rec2", None));
        // No lease yet: nothing may be used.
        assert!(r.get("/a/b", true, mono_ns()).is_none());
        w.set_lease(3, far());
        let f = r.get("/a/b", true, mono_ns()).unwrap();
        assert_eq!((&f.record[..], f.data), (&b"record"[..], Some(Some(b"data".to_vec()))));
        let f = r.get("/a/b", false, mono_ns()).unwrap();
        assert_eq!(f.data, None);
        let f = r.get("/a/c", true, mono_ns()).unwrap();
        assert_eq!(f.data, Some(None), "a file whose data is in chunks");
        assert!(r.get("/a/d", true, mono_ns()).is_none());
        // The lease over: not used.
        assert!(r.get("/a/b", true, far() + 1).is_none());
        w.remove("/a/b");
        assert!(r.get("/a/b", true, mono_ns()).is_none());
        assert!(r.get("/a/c", false, mono_ns()).is_some());
        // Replaced.
        assert!(w.put("/a/c", 3, b"rec3", Some(b"")));
        assert_eq!(r.get("/a/c", true, mono_ns()).unwrap().record, b"rec3");
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn the_ring_drops_the_oldest_entries_and_keeps_the_newest_whole() {
        let (t, fd) = Table::create(BYTES_MIN).unwrap();
        let arena = t.arena_len;
        let mut w = Writer::new(t);
        w.set_lease(0, far());
        let r = Table::open(&fd).unwrap();
        let big = vec![7u8; 256 << 10];
        let n = 3 * arena / big.len();
        for i in 0..n {
            let mut d = big.clone();
            d[..8].copy_from_slice(&(i as u64).to_le_bytes());
            assert!(w.put(&format!("/f{i}"), 0, b"r", Some(&d)));
        }
        let kept: Vec<usize> = (0..n).filter(|i| r.get(&format!("/f{i}"), false, mono_ns()).is_some()).collect();
        assert!(!kept.is_empty() && kept.len() < n, "{} of {n}", kept.len());
        assert!(kept.contains(&(n - 1)), "the newest stays");
        for i in kept {
            let d = r.get(&format!("/f{i}"), true, mono_ns()).unwrap().data.unwrap().unwrap();
            assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), i as u64);
            assert!(d[8..].iter().all(|&b| b == 7));
        }
        // Too large for the table.
        assert!(!w.put("/huge", 0, b"r", Some(&vec![0u8; arena])));
    }

    /// Readers racing the writer never get bytes of one entry under another's
    /// path: each entry's data says which path and which version it is.
    #[test]
    fn readers_racing_the_writer_never_see_a_torn_entry() {
        let (t, fd) = Table::create(BYTES_MIN).unwrap();
        let mut w = Writer::new(t);
        w.set_lease(1, far());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let r = Table::open(&fd).unwrap();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut hits = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for p in 0..64u64 {
                            let path = format!("/p{p}");
                            if let Some(f) = r.get(&path, true, mono_ns()) {
                                let d = f.data.unwrap().unwrap();
                                let v = u64::from_le_bytes(d[..8].try_into().unwrap());
                                assert_eq!(&f.record[..], &p.to_le_bytes(), "record of another path");
                                assert!(d.len() == 4096 + (v as usize % 7) * 512, "length of another version");
                                assert!(d[8..].iter().all(|&b| b == v as u8), "a torn entry");
                                hits += 1;
                            }
                        }
                    }
                    hits
                })
            })
            .collect();
        for v in 0..20_000u64 {
            let p = v % 64;
            let mut d = vec![v as u8; 4096 + (v as usize % 7) * 512];
            d[..8].copy_from_slice(&v.to_le_bytes());
            assert!(w.put(&format!("/p{p}"), 1, &p.to_le_bytes(), Some(&d)));
            if v % 5 == 0 {
                w.remove(&format!("/p{}", (v * 7) % 64));
            }
        }
        stop.store(true, Ordering::Relaxed);
        let hits: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(hits > 0);
    }

    #[test]
    fn a_descriptor_that_is_not_a_table_is_refused() {
        let f = tempfile_fd(b"not a node cache, just bytes");
        assert!(Table::open(&f).is_err());
        assert!(Table::create(1 << 20).is_err(), "below the smallest size");
    }

    fn tempfile_fd(bytes: &[u8]) -> OwnedFd {
        let (_, fd) = Table::create(BYTES_MIN).unwrap();
        // SAFETY: a valid descriptor and buffer.
        unsafe {
            libc::ftruncate(fd.as_raw_fd(), 0);
            libc::pwrite(fd.as_raw_fd(), bytes.as_ptr() as *const libc::c_void, bytes.len(), 0);
            libc::ftruncate(fd.as_raw_fd(), (SLOTS_OFF + 4096) as libc::off_t);
        }
        fd
    }
}
