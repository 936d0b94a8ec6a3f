//! Claims: the right of one client process, alone, to make names in a directory
//! among those this daemon holds, until this daemon recalls it (docs/DESIGN.md,
//! "Claims"; CephFS's asynchronous directory operations under its `Fx` caps are the
//! model). Under a claim the client defers its creates there (open, write and close
//! of a small file cost it no request) and sends them in batches; nobody can tell,
//! because every request of another client that names the directory (a stat, an
//! open, a create, a listing, a scan of a tree holding it) first recalls the claim,
//! and the holder sends what it deferred before it answers.
//!
//! * Granted with the reply to a create (`REPLY_CLAIMED`) of a client whose callback
//!   connection said it takes claims, when this daemon holds no other name in that
//!   directory, no other client holds a grant there (the listing, a record) or is
//!   changing a name there, and the directory was not recalled lately.
//! * Recalled by a request of anyone else that names the directory: that request
//!   is answered `RETRY` (never an application's errno: the client sends it again,
//!   after a short wait, until the recall is over) and the recall goes out on a
//!   thread of its own, so that no worker waits: the holder's own requests, which
//!   send what it deferred, find every worker free. The claim ends when the holder
//!   answers, or when its lease runs out (what it deferred is then lost, as a
//!   crash of that process loses it; docs/SEMANTICS.md).
//! * Bounded: `CLAIMS_MAX` claims per daemon.
//!
//! Not for: the client's deferral (gust-client's claims.rs), grants on records.

use super::{lock, Grants, Holder, Table, CONTENDED_FOR};
use gust_proto::path::{claim_key, listing_key, parent};
use gust_proto::Request;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Errno of a request that names a directory another client's claim covers while
/// that claim is recalled: the client sends the request again (never an
/// application's errno; gust-client's rpc.rs).
pub const RETRY: i32 = gust_proto::errno::RETRY;
/// Bound on claims held at once, per daemon.
pub const CLAIMS_MAX: usize = 1 << 16;

/// One claim.
pub(super) struct Claim {
    pub(super) holder: u64,
    /// Its recall is under way: requests of others wait for its end.
    pub(super) recalling: bool,
}

/// Whether `dir` is `root` or below it.
fn within(dir: &str, root: &str) -> bool {
    root == "/" || dir == root || (dir.starts_with(root) && dir.as_bytes().get(root.len()) == Some(&b'/'))
}

impl Grants {
    /// Before a request of `caller` is served: `Err(RETRY)` if it names a directory
    /// that another client claims here, whose recall is then under way.
    pub fn check_claims(self: &Arc<Self>, req: &Request, caller: Option<u64>) -> Result<(), i32> {
        if self.claims_held.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let root = req.subtree();
        let mut t = lock(&self.table);
        let mut busy = false;
        let mut recall: Vec<(u64, String)> = Vec::new();
        let mut meet = |dir: &str, c: &mut Claim| {
            if Some(c.holder) == caller {
                return;
            }
            busy = true;
            if !c.recalling {
                c.recalling = true;
                recall.push((c.holder, dir.to_string()));
            }
        };
        // Looked up as the request names them, under the lock: no allocation for a
        // request that meets no claim (every request while any claim is held).
        let claims = &mut t.claims;
        req.dirs_named(|d| {
            if let Some(c) = claims.get_mut(d) {
                meet(d, c);
            }
        });
        if let Some(root) = root {
            for (d, c) in claims.iter_mut() {
                if within(d, root) {
                    meet(d, c);
                }
            }
        }
        for (holder, dir) in recall {
            let h = t.clients.get(&holder).cloned();
            let g = self.clone();
            let spawned =
                std::thread::Builder::new().name("gust-claim-recall".into()).spawn(move || g.end_claim(h, dir));
            if let Err(e) = spawned {
                tracing::warn!("cannot start a claim's recall: {e}");
            }
        }
        if busy {
            Err(RETRY)
        } else {
            Ok(())
        }
    }

    /// Recalls the claim on `dir` from `h` (bounded by its lease), then ends it.
    pub(super) fn end_claim(&self, h: Option<Arc<Holder>>, dir: String) {
        if let Some(h) = &h {
            if !self.no_recall {
                self.recall(h, vec![claim_key(&dir)]);
            }
        }
        let mut t = lock(&self.table);
        if t.claims.remove(&dir).is_some() {
            self.claims_held.fetch_sub(1, Ordering::AcqRel);
            self.claims_recalled.fetch_add(1, Ordering::Relaxed);
        }
        t.note_contended(listing_key(&dir));
    }

    /// After `h`'s create of `path` succeeded: whether `h` holds the claim on its
    /// directory (granted now if nothing stands against it). `only_name` says
    /// whether `path` is the only name this daemon holds in the directory (read only
    /// if it is needed, under the table's lock, so that no change of another client
    /// there starts in between).
    pub fn claim(&self, path: &str, h: &Holder, only_name: impl FnOnce(&str) -> bool) -> bool {
        if !h.claims.load(Ordering::Relaxed) || !h.leased() || self.paused() {
            return false;
        }
        let dir = parent(path);
        let mut t = lock(&self.table);
        if let Some(c) = t.claims.get(dir) {
            return c.holder == h.id && !c.recalling;
        }
        let key = listing_key(dir);
        if t.contended.get(&key).is_some_and(|since| since.elapsed() < CONTENDED_FOR) {
            return false;
        }
        if t.claims.len() >= CLAIMS_MAX {
            return false;
        }
        // Nobody else may hold or change anything of this directory here.
        if let Some(e) = t.paths.get(&key) {
            if e.holders.iter().any(|&c| c != h.id) || e.changing.iter().any(|c| *c != Some(h.id)) || e.recalling > 0 {
                return false;
            }
        }
        if t.held.others_in_dir(h.id, dir) {
            return false;
        }
        if !only_name(dir) {
            t.note_contended(listing_key(dir));
            return false;
        }
        t.claims.insert(dir.to_string(), Claim { holder: h.id, recalling: false });
        self.claims_held.fetch_add(1, Ordering::AcqRel);
        self.claims_given.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A client gone (its callback connection closed, or its lease ran out): its
    /// claims end with it.
    pub(super) fn drop_client_claims(&self, t: &mut Table, id: u64) {
        let before = t.claims.len();
        t.claims.retain(|_, c| c.holder != id || c.recalling);
        self.claims_held.fetch_sub(before - t.claims.len(), Ordering::AcqRel);
    }

    /// Claims held now (`gust status`, tests).
    pub fn claims(&self) -> usize {
        self.claims_held.load(Ordering::Acquire)
    }
}
