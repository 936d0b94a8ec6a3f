//! Erasure codes (`gust start --ec K+M`; docs/DESIGN.md, "Erasure codes"): a
//! file's chunks in stripes of K data cells and M parity cells on K + M distinct
//! daemons (gust-placement's `ec`), the parity kept by the writing client:
//!
//! * `write.rs`: a write sends each data cell its bytes with `write_swap`, which
//!   answers the bytes they replaced, then each parity cell the change of the
//!   stripe's cells (`xor_chunks`). Changes commute, so concurrent writers of one
//!   stripe need no lock between them.
//! * `read.rs`: a read whose data cell's daemon fails is answered from any K other
//!   cells of its stripe, rebuilt here; parity of a stripe for `gust repair`.
//! * `check.rs`: a stripe's parity against its data (`gust scrub --stripes`).
//! * here: the stripe geometry, and truncates, removals and syncs of a file's
//!   cells, which pass over a daemon found down and fence it (fence.rs) before
//!   they are acknowledged, as a replicated change does.
//!
//! Records are replicated M + 1 times (replica.rs): the hosts file of an
//! erasure-coded instance says `replicas M+1`.
//!
//! Not for: the code itself (gust-ec), where cells live (gust-placement).

mod check;
mod read;
mod write;

use crate::rpc::{Answer, Call};
use crate::{Client, Errno, Result};
use gust_placement::ec::{parity_file_id, ErasureCoded};
use gust_proto::{Request, Response};

/// An erasure-coded instance's layout and code.
pub(crate) struct Stripes {
    pub place: ErasureCoded,
    pub code: gust_ec::Code,
    /// Data cells per stripe (K), parity cells (M), as u64 for offsets.
    pub k: u64,
    pub m: u64,
    pub cell_bytes: u64,
    /// Parity buffers of finished writes, for the next (write.rs).
    pool: std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Bound on the parity buffers kept for reuse.
const POOL_BUFFERS_MAX: usize = 16;

impl Stripes {
    /// Stripes over `daemons` daemons, weighted by `capacities` (one per daemon)
    /// with capacity placement.
    pub(crate) fn new(
        daemons: u32,
        k: u32,
        m: u32,
        cell_bytes: u64,
        capacities: Option<&[u64]>,
    ) -> std::result::Result<Stripes, String> {
        if k + m > daemons {
            return Err(format!("erasure code {k}+{m} needs {} daemons, and {daemons} are registered", k + m));
        }
        let code = gust_placement::ec::Code { k, m };
        Ok(Stripes {
            place: match capacities {
                Some(c) => ErasureCoded::weighted(c, code),
                None => ErasureCoded::new(daemons, code),
            },
            code: gust_ec::Code::new(k, m)?,
            k: k as u64,
            m: m as u64,
            cell_bytes,
            pool: Default::default(),
        })
    }

    /// Stripe, data cell and offset in the cell of file offset `offset`.
    pub(crate) fn locate(&self, offset: u64) -> (u64, usize, u64) {
        let chunk = offset / self.cell_bytes;
        (chunk / self.k, (chunk % self.k) as usize, offset % self.cell_bytes)
    }

    /// The daemon and request span (file id, offset in its local file) of byte `at`
    /// of cell `cell` (0..K data, K..K+M parity) of stripe `stripe`.
    pub(crate) fn cell_at(&self, file_id: u128, stripe: u64, cell: usize, at: u64) -> (u32, u128, u64) {
        let d = self.place.cell_daemon(file_id, stripe, cell as u32);
        match (cell as u64) < self.k {
            true => (d, file_id, (stripe * self.k + cell as u64) * self.cell_bytes + at),
            false => (d, parity_file_id(file_id), stripe * self.cell_bytes + at),
        }
    }

    /// A zeroed buffer of `len` bytes, from the pool if it has one.
    pub(crate) fn buffer(&self, len: usize) -> Vec<u8> {
        let reused = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut v = reused.unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Keeps `v` for a later `buffer` (up to the pool's bound; no larger than a cell).
    pub(crate) fn give_back(&self, v: Vec<u8>) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if v.capacity() > 0 && v.capacity() <= self.cell_bytes as usize && pool.len() < POOL_BUFFERS_MAX {
            pool.push(v);
        }
    }

    /// `give_back` every parity buffer of `changes`.
    pub(crate) fn give_back_all(&self, changes: write::Changes) {
        for c in changes.into_values() {
            c.parity.into_iter().for_each(|p| self.give_back(p));
        }
    }

    /// Bytes of a stripe's data.
    pub(crate) fn stripe_bytes(&self) -> u64 {
        self.k * self.cell_bytes
    }
}

impl Client {
    /// The erasure code's layout, in an erasure-coded instance.
    pub(crate) fn stripes(&self) -> Option<&Stripes> {
        self.ec.as_ref()
    }

    /// Erasure-coded `call_chunk_daemons`: `req` to every daemon holding a cell of
    /// the file's stripes at or past `from` (and `also`), with the matching request
    /// on its parity file (a truncate cuts parity past the last stripe kept, a
    /// sync syncs it too); a truncate first zeroes the rest of the stripe it cuts,
    /// so that its parity loses those bytes too. A daemon found down is passed
    /// over and fenced before the change counts.
    pub(crate) fn call_cells(
        &self,
        file_id: u128,
        from: u64,
        size: u64,
        also: Option<u32>,
        req: Request,
    ) -> Result<()> {
        let s = self.stripes().expect("erasure-coded");
        if let Request::TruncateChunks { size: cut, .. } = req {
            let end = cut.div_ceil(s.stripe_bytes()) * s.stripe_bytes();
            if cut < size && cut < end {
                let zeros = vec![0u8; (end.min(size) - cut) as usize];
                self.write_stripes(file_id, cut, &zeros, Vec::new())?;
            }
        }
        let parity = match &req {
            Request::TruncateChunks { size: cut, .. } => Some(Request::TruncateChunks {
                file_id: parity_file_id(file_id),
                size: cut.div_ceil(s.stripe_bytes()) * s.cell_bytes,
            }),
            Request::RemoveChunks { .. } => Some(Request::RemoveChunks { file_id: parity_file_id(file_id) }),
            Request::Fsync { file_id: Some(_) } => Some(Request::Fsync { file_id: Some(parity_file_id(file_id)) }),
            _ => None,
        };
        let mut daemons = self.chunk_daemons(file_id, from, size);
        if let Some(d) = also.filter(|d| !daemons.contains(d)) {
            daemons.push(d);
        }
        let (down, live): (Vec<u32>, Vec<u32>) = daemons.into_iter().partition(|d| self.transport.is_down(*d));
        let mut calls = Vec::new();
        for d in live {
            calls.push(Call { daemon: d, req: req.clone(), bulk: Vec::new() });
            if let Some(p) = &parity {
                calls.push(Call { daemon: d, req: p.clone(), bulk: Vec::new() });
            }
        }
        self.send_to_cells(calls, down)
    }

    /// Sends changes to cells' daemons and checks their answers: a daemon found
    /// down (now, or before: `down`, passed over) is fenced before the change
    /// counts (fence.rs; EIO if it cannot be); any other error is the answer.
    pub(crate) fn send_to_cells(&self, calls: Vec<Call<'_>>, mut down: Vec<u32>) -> Result<()> {
        let daemons: Vec<u32> = calls.iter().map(|c| c.daemon).collect();
        let answers = if calls.is_empty() { Vec::new() } else { self.transport.batch(calls) };
        self.settle_cells(&daemons, &answers, &mut down)
    }

    /// Checks the answers of changes sent to cells' daemons (`daemons`, in call
    /// order), as `send_to_cells` says; `down` the daemons passed over.
    pub(crate) fn settle_cells(&self, daemons: &[u32], answers: &[Answer], down: &mut Vec<u32>) -> Result<()> {
        let mut first_err = None;
        for (d, a) in daemons.iter().zip(answers) {
            match a {
                Err(Errno(libc::EIO)) | Err(Errno(libc::EHOSTDOWN)) if self.transport.is_down(*d) => down.push(*d),
                Err(e) => first_err = first_err.or(Some(*e)),
                Ok(_) => {}
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        down.sort_unstable();
        down.dedup();
        if !down.is_empty() {
            let skipped: Vec<(usize, u32)> = down.iter().enumerate().map(|(i, d)| (i, *d)).collect();
            let mut acks: Vec<Answer> = down.iter().map(|_| Ok((Response::Ok, Vec::new()))).collect();
            self.transport.fence_before_acknowledging(&skipped, &mut acks);
            if let Some(Err(e)) = acks.into_iter().find(|a| a.is_err()) {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Which cells of the file `file_id` (`size` bytes) daemon `daemon` holds:
    /// (stripe, cell) with cells 0..K data, K..K+M parity (`gust repair`).
    pub fn cells_on(&self, file_id: u128, size: u64, daemon: u32) -> Vec<(u64, usize)> {
        let Some(s) = self.stripes() else { return Vec::new() };
        let stripes = size.div_ceil(s.stripe_bytes());
        (0..stripes)
            .flat_map(|st| (0..(s.k + s.m) as usize).map(move |c| (st, c)))
            .filter(|&(st, c)| s.place.cell_daemon(file_id, st, c as u32) == daemon)
            .collect()
    }

    /// How many stripes a file of `size` bytes has (0 without erasure codes).
    pub fn stripe_count(&self, size: u64) -> u64 {
        self.stripes().map_or(0, |s| size.div_ceil(s.stripe_bytes()))
    }

    /// The erasure code of this instance, (K, M), if any.
    pub fn erasure_code(&self) -> Option<(u32, u32)> {
        self.stripes().map(|s| (s.k as u32, s.m as u32))
    }
}
