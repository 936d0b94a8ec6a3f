//! What a move's first pass (`precopy`, precopy.rs) sent to the joining
//! daemons: kept in memory for the `copy` that follows, and in an intent log in
//! the root directory, so that a daemon restarted between the two still knows
//! what may be there to update or drop.
//!
//! The log is written before each request it describes and marked after the
//! request was answered; an entry without a mark may or may not have arrived,
//! and counts as "maybe there": its record is sent again, and it is dropped if
//! it is gone here. The log is not fsynced: it outlives a killed daemon (the
//! page cache keeps it), and a node that loses its page cache loses the
//! instance's node-local data with it.
//!
//! Not for: walking the stores or sending (precopy.rs, copy.rs).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use twox_hash::XxHash3_128;

/// The log's first bytes, then the generation (u32, little-endian).
const MAGIC: &[u8; 8] = b"GUSTPRE1";
const RECORD: u8 = b'R';
const CHUNK: u8 = b'C';
const ANSWERED: u8 = b'A';

/// What a first pass sent.
pub struct Sent {
    /// The layout generation the pass sent for.
    pub generation: u32,
    /// The number of daemons of the layout the pass placed by.
    pub layout: u32,
    /// Record key -> (daemon, hash of value and inline data; 0: maybe not there).
    pub records: HashMap<Vec<u8>, (u32, u128)>,
    /// File id -> its chunks sent: (offset, length, daemon).
    pub chunks: HashMap<u128, Vec<(u64, u32, u32)>>,
    /// Files whose chunks may differ from what was sent (None: any file may).
    pub changed: Option<HashSet<u128>>,
    /// The pass walked every record and file (an error stops it part way).
    pub complete: bool,
}

impl Sent {
    /// Nothing known to be sent: a copy then sends everything.
    pub fn nothing(generation: u32) -> Sent {
        Sent { generation, layout: 0, records: HashMap::new(), chunks: HashMap::new(), changed: None, complete: false }
    }

    /// Whether the chunks of file `id` may differ from what this pass sent.
    pub fn changed(&self, id: u128) -> bool {
        self.changed.as_ref().is_none_or(|c| c.contains(&id))
    }
}

/// The hash a record is compared by: its value and inline data.
pub fn record_hash(value: &[u8], inline: Option<&[u8]>) -> u128 {
    let mut h = XxHash3_128::new();
    h.write(&(value.len() as u64).to_le_bytes());
    h.write(value);
    match inline {
        Some(d) => {
            h.write(&[1]);
            h.write(d);
        }
        None => h.write(&[0]),
    }
    // 0 means "maybe not there": never a real hash.
    h.finish_128().max(1)
}

/// Where the log of a daemon's root directory is.
pub fn log_path(rootdir: &Path) -> PathBuf {
    rootdir.join("move-precopy.log")
}

/// The intent log being written.
pub struct Log {
    w: BufWriter<File>,
}

impl Log {
    pub fn create(path: &Path, generation: u32) -> io::Result<Log> {
        let mut w = BufWriter::new(File::create(path)?);
        w.write_all(MAGIC)?;
        w.write_all(&generation.to_le_bytes())?;
        Ok(Log { w })
    }

    pub fn record(&mut self, to: u32, key: &[u8], hash: u128) -> io::Result<()> {
        self.w.write_all(&[RECORD])?;
        self.w.write_all(&to.to_le_bytes())?;
        self.w.write_all(&hash.to_le_bytes())?;
        self.w.write_all(&(key.len() as u32).to_le_bytes())?;
        self.w.write_all(key)
    }

    pub fn chunk(&mut self, to: u32, id: u128, offset: u64, len: u32) -> io::Result<()> {
        self.w.write_all(&[CHUNK])?;
        self.w.write_all(&to.to_le_bytes())?;
        self.w.write_all(&id.to_le_bytes())?;
        self.w.write_all(&offset.to_le_bytes())?;
        self.w.write_all(&len.to_le_bytes())
    }

    /// Before a request: what it sends is in the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// After a request was answered: what came before arrived.
    pub fn answered(&mut self) -> io::Result<()> {
        self.w.write_all(&[ANSWERED])
    }
}

/// The log at `path` if it was written for `generation`; a torn last entry is
/// ignored. Records not marked as answered are "maybe there" (hash 0). Nothing
/// is known of changes since: every file counts as changed.
pub fn load(path: &Path, generation: u32) -> io::Result<Option<Sent>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if bytes.len() < 12 || &bytes[..8] != MAGIC || bytes[8..12] != generation.to_le_bytes() {
        return Ok(None);
    }
    let mut sent = Sent::nothing(generation);
    let mut unanswered: Vec<Vec<u8>> = Vec::new();
    let mut r = Reader { b: &bytes[12..] };
    while let Some(tag) = r.take(1) {
        match tag[0] {
            RECORD => {
                let Some((to, hash, key)) = r.record() else { break };
                sent.records.insert(key.clone(), (to, hash));
                unanswered.push(key);
            }
            CHUNK => {
                let Some((to, id, offset, len)) = r.chunk() else { break };
                sent.chunks.entry(id).or_default().push((offset, len, to));
            }
            ANSWERED => unanswered.clear(),
            _ => break,
        }
    }
    for key in unanswered {
        if let Some(e) = sent.records.get_mut(&key) {
            e.1 = 0;
        }
    }
    Ok(Some(sent))
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.b.get(..n)?, &self.b[n..]);
        self.b = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u128(&mut self) -> Option<u128> {
        Some(u128::from_le_bytes(self.take(16)?.try_into().ok()?))
    }

    fn record(&mut self) -> Option<(u32, u128, Vec<u8>)> {
        let to = self.u32()?;
        let hash = self.u128()?;
        let n = self.u32()? as usize;
        Some((to, hash, self.take(n)?.to_vec()))
    }

    fn chunk(&mut self) -> Option<(u32, u128, u64, u32)> {
        let to = self.u32()?;
        let id = self.u128()?;
        let offset = u64::from_le_bytes(self.take(8)?.try_into().ok()?);
        Some((to, id, offset, self.u32()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the log says comes back; records after the last answer are "maybe
    /// there"; a torn tail and another generation's log are ignored.
    #[test]
    fn the_log_reads_back_what_was_answered() {
        let d = tempfile::tempdir().unwrap();
        let p = log_path(d.path());
        let mut log = Log::create(&p, 7).unwrap();
        log.record(4, b"/\0a", 11).unwrap();
        log.chunk(5, 9, 0, 4096).unwrap();
        log.answered().unwrap();
        log.record(6, b"/\0b", 12).unwrap();
        log.flush().unwrap();
        drop(log);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(&[RECORD, 1, 0]);
        std::fs::write(&p, &bytes).unwrap();
        let s = load(&p, 7).unwrap().unwrap();
        assert_eq!(s.records.get(b"/\0a".as_slice()), Some(&(4, 11)));
        assert_eq!(s.records.get(b"/\0b".as_slice()), Some(&(6, 0)), "not answered: maybe there");
        assert_eq!(s.chunks.get(&9), Some(&vec![(0, 4096, 5)]));
        assert!(s.changed(9) && s.changed(1), "after a restart any file may have changed");
        assert!(load(&p, 8).unwrap().is_none(), "another generation's log");
        assert!(load(&d.path().join("none"), 7).unwrap().is_none());
    }

    #[test]
    fn hashes_tell_inline_data_apart_and_are_never_zero() {
        assert_ne!(record_hash(b"v", None), record_hash(b"v", Some(b"")));
        assert_ne!(record_hash(b"v", Some(b"a")), record_hash(b"v", Some(b"b")));
        assert_ne!(record_hash(b"", None), 0);
    }
}
