//! S3's ETags, computed here to check a copy (`gust stage --verify`): the MD5 of
//! the bytes of an object written whole, `MD5(MD5(part 1) ‖ … ‖ MD5(part N))-N` of a
//! multipart upload. Objects encrypted with SSE-KMS or SSE-C have other ETags; they
//! cannot be checked this way (the note of a failed check says so).

use md5::{Digest, Md5};

/// The ETag of bytes fed in order, for an object written whole (`part_size` 0) or
/// in parts of `part_size` bytes (the last one shorter).
pub struct EtagHasher {
    part_size: u64,
    part: Md5,
    in_part: u64,
    parts: Vec<[u8; 16]>,
}

impl EtagHasher {
    pub fn new(part_size: u64) -> Self {
        EtagHasher { part_size, part: Md5::new(), in_part: 0, parts: Vec::new() }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = if self.part_size == 0 { data.len() as u64 } else { self.part_size - self.in_part };
            let n = room.min(data.len() as u64) as usize;
            self.part.update(&data[..n]);
            self.in_part += n as u64;
            data = &data[n..];
            if self.part_size > 0 && self.in_part == self.part_size {
                self.parts.push(self.part.finalize_reset().into());
                self.in_part = 0;
            }
        }
    }

    pub fn finish(mut self) -> String {
        if self.part_size == 0 {
            return hex(&self.part.finalize());
        }
        if self.in_part > 0 || self.parts.is_empty() {
            self.parts.push(self.part.finalize_reset().into());
        }
        let mut all = Md5::new();
        for p in &self.parts {
            all.update(p);
        }
        format!("{}-{}", hex(&all.finalize()), self.parts.len())
    }
}

/// The number of parts an ETag says its object was uploaded in (0: written whole).
pub fn parts_of(etag: &str) -> Option<u64> {
    match etag.rsplit_once('-') {
        None if etag.len() == 32 && etag.bytes().all(|b| b.is_ascii_hexdigit()) => Some(0),
        Some((md5, n)) if md5.len() == 32 => n.parse().ok(),
        _ => None,
    }
}

/// Part sizes a multipart object of `size` bytes in `parts` parts may have been
/// uploaded with: the common client defaults (5, 8, 16 … MiB) and the even split,
/// those that give exactly `parts` parts.
pub fn part_size_candidates(size: u64, parts: u64) -> Vec<u64> {
    const MIB: u64 = 1 << 20;
    let mut c: Vec<u64> = [5, 8, 15, 16, 32, 50, 64, 100, 128, 256, 512].iter().map(|m| m * MIB).collect();
    if parts > 0 {
        let even = size.div_ceil(parts);
        c.extend([even, even.div_ceil(MIB) * MIB]);
    }
    c.sort_unstable();
    c.dedup();
    c.retain(|&p| p > 0 && size.div_ceil(p).max(1) == parts);
    c
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_multipart_etags() {
        let mut h = EtagHasher::new(0);
        h.update(b"hello ");
        h.update(b"world");
        assert_eq!(h.finish(), "5eb63bbbe01eeed093cb22bb8f5acdc3");
        assert_eq!(EtagHasher::new(0).finish(), "d41d8cd98f00b204e9800998ecf8427e");
        // Two parts of 6 and 5 bytes, fed in pieces that straddle the boundary.
        let mut h = EtagHasher::new(6);
        h.update(b"hel");
        h.update(b"lo wor");
        h.update(b"ld");
        let mut all = Md5::new();
        all.update(Md5::digest(b"hello "));
        all.update(Md5::digest(b"world"));
        assert_eq!(h.finish(), format!("{}-2", hex(&all.finalize())));
        // Exactly one full part: one part, no empty second.
        let mut h = EtagHasher::new(5);
        h.update(b"world");
        assert!(h.finish().ends_with("-1"));
    }

    #[test]
    fn etag_shapes_and_part_sizes() {
        assert_eq!(parts_of("5eb63bbbe01eeed093cb22bb8f5acdc3"), Some(0));
        assert_eq!(parts_of("5eb63bbbe01eeed093cb22bb8f5acdc3-12"), Some(12));
        assert_eq!(parts_of("kms-opaque"), None);
        let mib = 1u64 << 20;
        let c = part_size_candidates(20 * mib, 3);
        assert!(c.contains(&(8 * mib)) && !c.contains(&(5 * mib)), "{c:?}");
        assert!(part_size_candidates(20 * mib, 3).iter().all(|&p| (20 * mib).div_ceil(p) == 3));
    }
}
