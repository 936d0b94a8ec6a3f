//! One phase of one worker: what each operation of a workload does, and how a
//! result is checked (every byte read is compared with the pattern written).

use crate::target::Target;
use crate::{WorkerSpec, Workload};
use serde::{Deserialize, Serialize};

/// Fills `buf` with the pattern for file offset `off`: every 8-byte word holds its
/// own offset mixed with the seed, so misplaced or stale data is caught on read.
fn fill_pattern(buf: &mut [u8], off: u64, seed: u64) {
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let v = (off + i as u64 * 8) ^ seed;
        let b = v.to_le_bytes();
        w.copy_from_slice(&b[..w.len()]);
    }
}

/// A small deterministic permutation (xorshift-driven Fisher-Yates).
fn shuffle(v: &mut [u64], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let j = (seed % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

#[derive(Default, Serialize, Deserialize, Clone, Copy, Debug)]
pub(crate) struct PhaseReport {
    pub(crate) ops: u64,
    pub(crate) bytes: u64,
    pub(crate) errors: u64,
}

/// The directory of process `rank`'s files.
fn md_dir_of(s: &WorkerSpec, shared: bool, rank: u32) -> String {
    if shared {
        format!("{}/md", s.base)
    } else {
        format!("{}/md/p{}", s.base, rank)
    }
}

pub(crate) fn phases(w: &Workload) -> &'static [&'static str] {
    match w {
        Workload::Md { .. } => &["create", "stat", "read", "remove"],
        Workload::Io { .. } => &["write", "read"],
    }
}

pub(crate) fn run_phase(t: &dyn Target, s: &WorkerSpec, phase: &str) -> PhaseReport {
    match s.workload {
        Workload::Md { .. } => md_phase(t, s, phase),
        Workload::Io { .. } => io_phase(t, s, phase),
    }
}

/// mdtest's phases: create (and write `size` bytes), stat, open and read back,
/// remove, of `files` files.
fn md_phase(t: &dyn Target, s: &WorkerSpec, phase: &str) -> PhaseReport {
    let Workload::Md { files, size, shared_dir, no_excl, shift } = s.workload else { unreachable!() };
    let mut r = PhaseReport::default();
    // mdtest -N: after the create phase, another process's files.
    let owner = if phase == "create" { s.rank } else { (s.rank + shift) % s.procs.max(1) };
    let dir = md_dir_of(s, shared_dir, owner);
    let create_flags = libc::O_CREAT | libc::O_WRONLY | if no_excl { 0 } else { libc::O_EXCL };
    let mut data = vec![0u8; size as usize];
    fill_pattern(&mut data, 0, s.seed);
    let mut buf = vec![0u8; size as usize];
    for i in 0..files {
        let p = if shared_dir { format!("{dir}/f{owner}.{i}") } else { format!("{dir}/f{i}") };
        let ok = match phase {
            "create" => t
                .open(&p, create_flags, 0o644)
                .and_then(|fd| {
                    let w = if size > 0 { t.pwrite(fd, &data, 0).map(|_| ()) } else { Ok(()) };
                    t.close(fd).and(w)
                })
                .is_ok(),
            "stat" => t.stat_size(&p).map(|sz| sz == size).unwrap_or(false),
            "read" => t
                .open(&p, libc::O_RDONLY, 0)
                .and_then(|fd| {
                    let rd = if size > 0 { t.pread(fd, &mut buf, 0) } else { Ok(0) };
                    t.close(fd).and(rd)
                })
                .map(|n| n as u64 == size && buf == data)
                .unwrap_or(false),
            "remove" => t.unlink(&p).is_ok(),
            _ => unreachable!(),
        };
        r.ops += 1;
        r.bytes += if phase == "create" || phase == "read" { size } else { 0 };
        r.errors += u64::from(!ok);
    }
    if phase == "create" || phase == "remove" {
        // Within the phase's time: a path operation sends what the process still
        // holds back (creates and unlinks queued under claims, gust-client
        // claims.rs), as the next phase's first call would.
        let _ = t.stat_size(&dir);
    }
    r
}

/// IOR's phases: write then read back and verify a block of `block_size` bytes in
/// transfers, in order or shuffled.
fn io_phase(t: &dyn Target, s: &WorkerSpec, phase: &str) -> PhaseReport {
    let Workload::Io { block_size, transfer_size, shared_file, random } = s.workload else { unreachable!() };
    let mut r = PhaseReport::default();
    let (path, region) = if shared_file {
        (format!("{}/io.shared", s.base), s.rank as u64 * block_size)
    } else {
        (format!("{}/io.{}", s.base, s.rank), 0)
    };
    let n = block_size / transfer_size;
    let mut order: Vec<u64> = (0..n).collect();
    if random {
        shuffle(&mut order, s.seed ^ (s.rank as u64 + 1) ^ if phase == "read" { 0x9e37 } else { 0 });
    }
    let mut buf = vec![0u8; transfer_size as usize];
    let mut expect = vec![0u8; transfer_size as usize];
    let flags = if phase == "write" { libc::O_CREAT | libc::O_WRONLY } else { libc::O_RDONLY };
    let fd = match t.open(&path, flags, 0o644) {
        Ok(fd) => fd,
        Err(_) => {
            r.errors += 1;
            return r;
        }
    };
    for k in order {
        let off = region + k * transfer_size;
        let ok = if phase == "write" {
            fill_pattern(&mut buf, off, s.seed);
            t.pwrite(fd, &buf, off).map(|w| w == buf.len()).unwrap_or(false)
        } else {
            fill_pattern(&mut expect, off, s.seed);
            t.pread(fd, &mut buf, off).map(|w| w == buf.len() && buf == expect).unwrap_or(false)
        };
        r.ops += 1;
        r.bytes += transfer_size;
        r.errors += u64::from(!ok);
    }
    if t.close(fd).is_err() {
        r.errors += 1;
    }
    r
}
