//! Erasure-coded placement (`gust start --ec K+M`): a file's chunks in *stripes*
//! of K consecutive chunks, each stripe with M parity chunks, its K + M *cells* on
//! K + M distinct daemons. Losing any M of a stripe's daemons loses nothing: the
//! client rebuilds a lost cell from any K others (gust-ec).
//!
//! * Stripe `s` of file `f` holds chunks `s*K .. s*K + K`; its first cell is on
//!   daemon `jump_hash(xxh3(f, s), n)`, cell `c` (0..K data, K..K+M parity) on the
//!   `c`-th daemon after it, wrapping around. Consecutive ids are distinct as long
//!   as `K + M <= n`, which `gust start` checks. With capacity placement
//!   ([`ErasureCoded::weighted`]), cell `c` is on the `c`-th daemon of the stripe's
//!   capacity-weighted rendezvous ranking instead (capacity.rs).
//! * A data cell is the chunk itself, where wide striping would keep it: at its
//!   file offset in the daemon's local file of `f`.
//! * Parity cell `j` of stripe `s` sits at offset `s * chunk_size` in the daemon's
//!   local file of [`parity_file_id`]`(f)`: a daemon holds at most one cell of a
//!   stripe, so one parity file per file and daemon is enough.
//!
//! Metadata stays wide-striped by path; its records are replicated M + 1 times
//! (the client's replica groups), so that they survive what the data survives.

use crate::{chunk_hash, jump_hash, CapacityWeighted, Distributor};
use twox_hash::XxHash3_64;

/// Bounds on K and M (`gust start --ec K+M`): a stripe's cells are distinct
/// daemons, and the codes (gust-ec) take up to 255 cells.
pub const DATA_CELLS_MAX: u32 = 32;
pub const PARITY_CELLS_MAX: u32 = 8;

/// The data a stripe holds by default: 1 MiB, the transfer size of the writers
/// erasure codes are for (checkpoints, IOR, dd with 1 MiB blocks). A write that
/// covers whole stripes sends M/K of its size in parity; one that covers part of
/// a stripe sends M times that part (each parity cell changes where any data
/// cell does). With the general 512 KiB chunks a 4+2 stripe held 2 MiB, a 1 MiB
/// write covered half of it and sent as much parity as data: writes ran at 0.51
/// of unreplicated ones, 0.68 with stripes of 1 MiB (docs/PERFORMANCE.md,
/// "Erasure codes"). DAOS picks its default cell size (64 KiB) for the same
/// reason.
pub const STRIPE_DATA_BYTES: u64 = 1 << 20;

/// The smallest default cell: more cells per transfer cost more requests.
pub const CELL_BYTES_MIN: u64 = 64 * 1024;

/// Bit set in a parity file id. File ids of an erasure-coded instance never have
/// it (gust-placement's `local::file_id` sets it only for homed files, and an
/// erasure-coded instance refuses node-local placement).
const PARITY_BIT: u128 = 1 << 127;

/// The id of the local files holding file `file_id`'s parity cells.
pub fn parity_file_id(file_id: u128) -> u128 {
    file_id | PARITY_BIT
}

/// The file id whose parity a local file of id `id` holds (`id` itself if it
/// is not a parity file id).
pub fn data_file_id(id: u128) -> u128 {
    id & !PARITY_BIT
}

/// The shape of an erasure code: `k` data cells and `m` parity cells per stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    pub k: u32,
    pub m: u32,
}

impl Code {
    /// Parses `K+M` (`4+2`), checking the bounds.
    pub fn parse(s: &str) -> Result<Code, String> {
        let (k, m) = s.split_once('+').ok_or_else(|| format!("bad erasure code '{s}': expected K+M, e.g. 4+2"))?;
        let num = |v: &str, max: u32, what: &str| {
            v.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| format!("bad erasure code '{s}': {what} must be 1 to {max}"))
        };
        Ok(Code { k: num(k, DATA_CELLS_MAX, "K (data cells)")?, m: num(m, PARITY_CELLS_MAX, "M (parity cells)")? })
    }

    /// Cells per stripe.
    pub fn width(self) -> u32 {
        self.k + self.m
    }

    /// The chunk (cell) size an instance of this code gets unless `--chunk-size`
    /// says otherwise: [`STRIPE_DATA_BYTES`] / K, in whole 4 KiB blocks (the
    /// checksum block), at least [`CELL_BYTES_MIN`] (256 KiB for 4+2, 128 KiB for
    /// 8+2, 64 KiB from 16 data cells on).
    pub fn default_cell_bytes(self) -> u64 {
        (STRIPE_DATA_BYTES / self.k as u64 / 4096 * 4096).max(CELL_BYTES_MIN)
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
    }
}

/// Metadata by path, chunks in erasure-coded stripes (module doc).
#[derive(Debug, Clone)]
pub struct ErasureCoded {
    daemons: u32,
    code: Code,
    /// With capacity placement: a stripe's cells on the K + M daemons its
    /// weighted rendezvous ranking puts first, in that order.
    weighted: Option<CapacityWeighted>,
}

impl ErasureCoded {
    pub fn new(daemons: u32, code: Code) -> Self {
        assert!(code.width() <= daemons, "an erasure-coded stripe needs K+M distinct daemons");
        ErasureCoded { daemons, code, weighted: None }
    }

    /// Stripes over daemons of these capacities (capacity placement): a daemon
    /// holds cells of a stripe as often as it ranks among the stripe's first
    /// K + M by capacity-weighted rendezvous hashing. A stripe's cells stay on
    /// distinct daemons, so a daemon of much more capacity than the others holds
    /// at most one cell of every stripe, not its share by capacity.
    pub fn weighted(capacities: &[u64], code: Code) -> Self {
        let mut ec = ErasureCoded::new(capacities.len() as u32, code);
        ec.weighted = Some(CapacityWeighted::new(capacities));
        ec
    }

    pub fn code(&self) -> Code {
        self.code
    }

    /// The daemon of cell `cell` (0..K data, K..K+M parity) of stripe `stripe`.
    pub fn cell_daemon(&self, file_id: u128, stripe: u64, cell: u32) -> u32 {
        if let Some(w) = &self.weighted {
            return w.ranked(file_id, stripe, cell);
        }
        let first = jump_hash(chunk_hash(file_id, stripe), self.daemons);
        (first + cell) % self.daemons
    }
}

impl Distributor for ErasureCoded {
    fn daemon_count(&self) -> u32 {
        self.daemons
    }
    fn locate_metadata(&self, path: &str) -> u32 {
        jump_hash(XxHash3_64::oneshot(path.as_bytes()), self.daemons)
    }
    fn locate_chunk(&self, file_id: u128, chunk: u64) -> u32 {
        let k = self.code.k as u64;
        self.cell_daemon(file_id, chunk / k, (chunk % k) as u32)
    }

    /// Every daemon holding a data or parity cell of the stripes of these chunks
    /// (truncate, remove and fsync reach the parity cells too).
    fn daemons_for_chunks(&self, file_id: u128, chunk_first: u64, chunk_last: u64) -> Vec<u32> {
        let k = self.code.k as u64;
        let mut seen = vec![false; self.daemons as usize];
        let mut out = Vec::new();
        for stripe in chunk_first / k..=chunk_last / k {
            for cell in 0..self.code.width() {
                let d = self.cell_daemon(file_id, stripe, cell);
                if !std::mem::replace(&mut seen[d as usize], true) {
                    out.push(d);
                }
            }
            if out.len() == self.daemons as usize {
                break;
            }
        }
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_parse_within_bounds() {
        assert_eq!(Code::parse("4+2"), Ok(Code { k: 4, m: 2 }));
        assert_eq!(Code::parse("1+1").map(Code::width), Ok(2));
        for bad in ["4", "0+2", "4+0", "33+1", "4+9", "a+b", "4+2+1"] {
            assert!(Code::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Code { k: 8, m: 3 }.to_string(), "8+3");
    }

    /// A stripe holds 1 MiB by default, in whole 4 KiB blocks, cells no smaller
    /// than 64 KiB.
    #[test]
    fn default_cells_make_stripes_of_a_mebibyte() {
        let cell = |k| Code { k, m: 2 }.default_cell_bytes();
        assert_eq!((cell(4), cell(2), cell(8)), (256 << 10, 512 << 10, 128 << 10));
        assert_eq!(cell(3), 85 * 4096, "1 MiB / 3 rounded down to 4 KiB");
        assert_eq!(cell(32), 64 << 10);
    }

    /// A stripe's cells are on distinct daemons, data cells where
    /// `locate_chunk` says, and `daemons_for_chunks` names every cell's daemon.
    #[test]
    fn stripes_spread_over_distinct_daemons() {
        for n in 6..12u32 {
            let ec = ErasureCoded::new(n, Code { k: 4, m: 2 });
            for f in 1..50u128 {
                let f = f.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834);
                for s in 0..8u64 {
                    let cells: Vec<u32> = (0..6).map(|c| ec.cell_daemon(f, s, c)).collect();
                    let mut d = cells.clone();
                    d.sort_unstable();
                    d.dedup();
                    assert_eq!(d.len(), 6, "{cells:?}");
                    for c in 0..4 {
                        assert_eq!(ec.locate_chunk(f, s * 4 + c), cells[c as usize]);
                    }
                    let holders = ec.daemons_for_chunks(f, s * 4 + 1, s * 4 + 2);
                    assert_eq!(holders, d);
                }
            }
        }
    }

    /// Weighted by capacity: a stripe's cells are still distinct daemons, found
    /// by `daemons_for_chunks`; a daemon of four times the others' capacity holds
    /// a cell of nearly every stripe, the others proportionally fewer.
    #[test]
    fn weighted_stripes_stay_distinct_and_favour_capacity() {
        let ec = ErasureCoded::weighted(&[1, 1, 1, 1, 4], Code { k: 2, m: 1 });
        let mut cells = [0u32; 5];
        for f in 1..400u128 {
            let f = f.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834);
            let s = f as u64 % 7;
            let c: Vec<u32> = (0..3).map(|c| ec.cell_daemon(f, s, c)).collect();
            let mut d = c.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(d.len(), 3, "{c:?}");
            assert_eq!(ec.daemons_for_chunks(f, s * 2, s * 2 + 1), d);
            assert_eq!(ec.locate_chunk(f, s * 2 + 1), c[1]);
            for x in c {
                cells[x as usize] += 1;
            }
        }
        // Daemon 4 ranks among the first three of five in 93% of stripes (an
        // exponential race: 4/8 + 4/8 * 4/7 + 4/8 * 3/7 * 4/6), each other daemon
        // in 52%.
        assert!(cells[4] > 340, "{cells:?}");
        assert!(cells[..4].iter().all(|&n| n > 160 && n < 250), "{cells:?}");
    }

    #[test]
    fn parity_ids_differ_from_file_ids() {
        let f = 0x1234u128;
        assert_ne!(parity_file_id(f), f);
        assert_eq!(parity_file_id(parity_file_id(f)), parity_file_id(f));
        assert_eq!(data_file_id(parity_file_id(f)), f);
        assert_eq!(data_file_id(f), f);
    }
}
