//! Erasure codes for GustFS: a systematic Reed-Solomon code over GF(2^8) with K
//! data cells and M parity cells per stripe (gust-placement's `ec` says where the
//! cells live). Pure: no I/O.
//!
//! The code is linear, which is what lets parity follow writes without reading
//! the whole stripe: parity cell `j` is `sum_i c[j][i] * d_i` (sums are XOR), so
//! changing data cell `i` from `old` to `new` changes parity `j` by
//! `c[j][i] * (old ^ new)` ([`Code::parity_change`]), whatever the other cells
//! hold and in whatever order such changes are applied.
//!
//! Not for: where cells live (gust-placement), moving bytes (gust-client).

use reed_solomon_erasure::galois_8::{self, ReedSolomon};

/// An erasure code of `k` data and `m` parity cells.
pub struct Code {
    rs: ReedSolomon,
    k: usize,
    m: usize,
    /// `coef[i][j]`: data cell `i`'s factor in parity cell `j`.
    coef: Vec<Vec<u8>>,
}

impl Code {
    /// Errors name what is wrong with `k` and `m` (at most 256 cells in all).
    pub fn new(k: u32, m: u32) -> Result<Code, String> {
        let (k, m) = (k as usize, m as usize);
        let rs = ReedSolomon::new(k, m).map_err(|e| format!("erasure code {k}+{m}: {e:?}"))?;
        // Each cell's factors, read off as the parity of a one-byte cell holding 1
        // (encode_single_sep assigns for cell 0 and adds for the others, hence
        // fresh zeros each time).
        let coef = (0..k)
            .map(|i| {
                let mut parity = vec![[0u8; 1]; m];
                let mut refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
                rs.encode_single_sep(i, &[1u8], &mut refs).expect("one-byte cells");
                parity.iter().map(|p| p[0]).collect()
            })
            .collect();
        Ok(Code { rs, k, m, coef })
    }

    pub fn data_cells(&self) -> usize {
        self.k
    }

    pub fn parity_cells(&self) -> usize {
        self.m
    }

    /// XORs into `parity` (one buffer per parity cell, each as long as `change`)
    /// what data cell `cell` changing by `change` (old XOR new) changes in each.
    pub fn parity_change(&self, cell: usize, change: &[u8], parity: &mut [&mut [u8]]) {
        assert!(cell < self.k && parity.len() == self.m, "a data cell, one buffer per parity cell");
        for (p, &c) in parity.iter_mut().zip(&self.coef[cell]) {
            galois_8::mul_slice_xor(c, change, p);
        }
    }

    /// The parity cells of `data` (K cells of one length) into `parity`.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) {
        self.rs.encode_sep(data, parity).expect("K data cells, M parity cells, one length");
    }

    /// Rebuilds the cells marked absent (`(bytes, false)`; K data then M parity
    /// cells, all of one length) from those present, in place. Data cells only
    /// (`data_only`) or every cell. Fails with a message when fewer than K cells
    /// are present.
    pub fn rebuild(&self, cells: &mut [(&mut [u8], bool)], data_only: bool) -> Result<(), String> {
        let present = cells.iter().filter(|c| c.1).count();
        if present < self.k {
            return Err(format!("{present} of {} cells left, {} needed", self.k + self.m, self.k));
        }
        let mut v: Vec<(&mut [u8], bool)> = cells.iter_mut().map(|(b, p)| (&mut **b, *p)).collect();
        let r = if data_only { self.rs.reconstruct_data(&mut v) } else { self.rs.reconstruct(&mut v) };
        r.map_err(|e| format!("cannot rebuild: {e:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(k: usize, len: usize, seed: u32) -> Vec<Vec<u8>> {
        (0..k).map(|i| (0..len).map(|b| ((b as u32 * 31 + i as u32 * 7 + seed) % 251) as u8).collect()).collect()
    }

    fn encoded(code: &Code, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let len = data[0].len();
        let mut parity = vec![vec![0u8; len]; code.parity_cells()];
        let refs: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
        let mut prefs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
        code.encode(&refs, &mut prefs);
        parity
    }

    /// Parity kept by changes alone (as the file system keeps it) equals the
    /// parity encoded from scratch, cell 0 included.
    #[test]
    fn parity_by_changes_equals_parity_encoded() {
        let code = Code::new(4, 2).unwrap();
        let old = cells(4, 1000, 1);
        let mut parity = encoded(&code, &old);
        let mut new = old.clone();
        for cell in [0usize, 2, 0] {
            let fresh: Vec<u8> = (0..1000).map(|b| (b * 3 + cell * 11 + 5) as u8).collect();
            let change: Vec<u8> = new[cell].iter().zip(&fresh).map(|(a, b)| a ^ b).collect();
            let mut prefs: Vec<&mut [u8]> = parity.iter_mut().map(|p| &mut p[..]).collect();
            code.parity_change(cell, &change, &mut prefs);
            new[cell] = fresh;
        }
        assert_eq!(parity, encoded(&code, &new));
    }

    /// Any M lost cells come back; M+1 lost is refused with a message.
    #[test]
    fn any_m_lost_cells_come_back() {
        let code = Code::new(4, 2).unwrap();
        let data = cells(4, 333, 9);
        let all: Vec<Vec<u8>> = data.iter().cloned().chain(encoded(&code, &data)).collect();
        for a in 0..6 {
            for b in a + 1..6 {
                let mut work = all.clone();
                work[a].fill(0xee);
                work[b].fill(0xee);
                let mut v: Vec<(&mut [u8], bool)> =
                    work.iter_mut().enumerate().map(|(i, c)| (&mut c[..], i != a && i != b)).collect();
                code.rebuild(&mut v, false).unwrap();
                assert_eq!(work, all, "lost {a} and {b}");
            }
        }
        let mut work = all.clone();
        let mut v: Vec<(&mut [u8], bool)> = work.iter_mut().enumerate().map(|(i, c)| (&mut c[..], i > 2)).collect();
        let e = code.rebuild(&mut v, true).unwrap_err();
        assert!(e.contains("3 of 6 cells left, 4 needed"), "{e}");
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(Code::new(0, 2).is_err());
        assert!(Code::new(200, 100).is_err());
    }
}
