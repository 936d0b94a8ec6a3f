//! Node-local placement (`gust start --placement local`): every chunk of a file
//! lives on one daemon, its *home*, which the creating client picks among the
//! daemons of its own node, so a process that writes a file and reads it back (a
//! checkpoint and its restart) never crosses the network, as UnifyFS does for the
//! same workload. Readers on other nodes read over the network as before.
//!
//! The home is part of the file id, so every client finds the chunks from the id
//! alone, as with hashing: a file id with bit 127 set is *homed*, and bits 96..127
//! hold the home daemon's id. Ids with bit 127 clear (files staged in, files made
//! with `GUST_PLACEMENT=wide`) are wide-striped. Only an instance whose hosts file
//! says `placement local` reads ids this way; others never see a homed id.
//!
//! When the home refuses a chunk for space, it goes to the chunk's wide-striped
//! daemon (`chunk_order`: home, then the wide order; one spill), and reads look
//! there too.

use crate::{Distributor, WideStriping};

const HOMED_BIT: u128 = 1 << 127;

/// A file id from 128 random bits: homed on daemon `home`, or wide-striped.
pub fn file_id(random: u128, home: Option<u32>) -> u128 {
    let low = random & ((1u128 << 96) - 1);
    match home {
        Some(h) => HOMED_BIT | ((h as u128 & 0x7fff_ffff) << 96) | low,
        None => random & !HOMED_BIT,
    }
}

/// The home daemon of a homed file id.
pub fn home_of(file_id: u128) -> Option<u32> {
    (file_id & HOMED_BIT != 0).then_some(((file_id >> 96) & 0x7fff_ffff) as u32)
}

/// Metadata wide-striped; a homed file's chunks on its home, others wide.
#[derive(Debug, Clone)]
pub struct NodeLocal {
    wide: WideStriping,
}

impl NodeLocal {
    pub fn new(daemons: u32) -> Self {
        NodeLocal { wide: WideStriping::new(daemons) }
    }

    fn home(&self, file_id: u128) -> Option<u32> {
        home_of(file_id).filter(|&h| h < self.wide.daemon_count())
    }
}

impl Distributor for NodeLocal {
    fn daemon_count(&self) -> u32 {
        self.wide.daemon_count()
    }
    fn locate_metadata(&self, path: &str) -> u32 {
        self.wide.locate_metadata(path)
    }
    fn locate_chunk(&self, file_id: u128, chunk: u64) -> u32 {
        self.home(file_id).unwrap_or_else(|| self.wide.locate_chunk(file_id, chunk))
    }
    /// The home, then the chunk's wide order without the home.
    fn chunk_order(&self, file_id: u128, chunk: u64, out: &mut Vec<u32>) {
        self.wide.chunk_order(file_id, chunk, out);
        if let Some(h) = self.home(file_id) {
            out.retain(|&d| d != h);
            out.insert(0, h);
        }
    }
    fn spill_daemons(&self) -> u32 {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_is_in_the_id() {
        for (random, home) in [(u128::MAX, 0), (0, 5), (0x1234_5678_9abc_def0_1122_3344_5566_7788, 4096)] {
            let id = file_id(random, Some(home));
            assert_eq!(home_of(id), Some(home));
            assert_eq!(id & ((1u128 << 96) - 1), random & ((1u128 << 96) - 1), "the random part stays");
            assert_eq!(home_of(file_id(random, None)), None);
        }
    }

    #[test]
    fn homed_chunks_stay_home_and_spill_to_their_wide_daemon() {
        let d = NodeLocal::new(4);
        let wide = WideStriping::new(4);
        let id = file_id(0xfeed_beef, Some(2));
        let mut order = Vec::new();
        for k in 0..64 {
            assert_eq!(d.locate_chunk(id, k), 2);
            d.chunk_order(id, k, &mut order);
            assert_eq!(order.len(), 4);
            assert_eq!(order[0], 2);
            let w = wide.locate_chunk(id, k);
            assert_eq!(order[1], if w == 2 { 3 } else { w }, "chunk {k}: the wide daemon, or the next if that is home");
        }
        // Every daemon a homed file's chunks may be on: the home and the spill.
        let holders = d.daemons_for_chunks(id, 0, 63);
        assert!(holders.contains(&2) && holders.len() <= 4);
        // Unhomed ids and homes past the daemon count are wide-striped.
        let plain = file_id(0xfeed_beef, None);
        let far = file_id(0xfeed_beef, Some(9));
        for k in 0..64 {
            assert_eq!(d.locate_chunk(plain, k), wide.locate_chunk(plain, k));
            assert_eq!(d.locate_chunk(far, k), wide.locate_chunk(far, k));
        }
        // Metadata is wide-striped whatever the files.
        assert_eq!(d.locate_metadata("/a/b"), wide.locate_metadata("/a/b"));
    }
}
