//! What a request of a client that said `hello` may bring it besides the reply
//! (crate::grants): its record granted (stat, `stat_data`, create), a directory's
//! names (a listing's first page), a listing's records, the records of its
//! deferred creates, the claim on a directory, and for a node cache's holder the
//! records of a `read_many`. Decided in two steps around the
//! request: what must be registered before the store is read, and what the reply
//! then allows, which becomes the reply's flags.

use super::*;

/// The grants a request may bring its caller, registered before it is served.
pub(super) struct Offers {
    /// The paths of the caller's deferred creates (under claims): granted too.
    batch: Option<Vec<String>>,
    /// A create's path: it may bring the claim on the directory (grants/claims.rs).
    created: Option<String>,
    /// The record asked for or made, granted before it is read.
    granted: Option<(String, Grant)>,
    /// A listing with records: its directory and change count, read first; the
    /// entries are granted after their records are read (`grant_listed`).
    listed: Option<(String, u64)>,
    /// A listing's first page: the directory's names here, granted before they are
    /// read.
    names: Option<(String, Grant)>,
    /// A `read_many` of a node cache's holder (`callback`'s `shared`): every path,
    /// granted before the records are read, or none.
    many: Option<Vec<(String, Grant)>>,
}

/// Grants every one of `paths` to `h`, or none (a path contended, changing or past
/// a bound takes back what this call granted).
fn grant_every(state: &State, paths: &[String], h: &Holder) -> Option<Vec<(String, Grant)>> {
    let mut granted = Vec::with_capacity(paths.len());
    for p in paths {
        let g = if validate_path(p).is_ok() { state.grants.grant(p, h) } else { Grant::No };
        if g == Grant::No {
            granted
                .iter()
                .filter(|(_, g)| *g == Grant::New)
                .for_each(|(p, _): &(String, Grant)| state.grants.ungrant(p, h));
            return None;
        }
        granted.push((p.clone(), g));
    }
    Some(granted)
}

impl Offers {
    /// Registers what `req` of `h` may be granted: a change starting after this
    /// finds it.
    pub(super) fn before(state: &State, req: &Request, h: &Holder) -> Offers {
        let leased = h.leased();
        let batch = match req {
            Request::CreateInlineBatch { entries } if leased => Some(entries.iter().map(|(p, _)| p.clone()).collect()),
            _ => None,
        };
        let created = match req {
            Request::Create { path, .. } | Request::CreateInline { path, .. } if leased => Some(path.clone()),
            _ => None,
        };
        let granted = match req {
            Request::Stat { path }
            | Request::StatData { path }
            | Request::Create { path, .. }
            | Request::CreateInline { path, .. }
                if validate_path(path).is_ok() =>
            {
                match state.grants.grant(path, h) {
                    Grant::No => None,
                    g => Some((path.clone(), g)),
                }
            }
            _ => None,
        };
        let listed = match req {
            Request::ReadDirPlus { dir, .. } if leased => Some((dir.clone(), state.grants.dir_epoch(dir))),
            _ => None,
        };
        let names = match req {
            Request::ReadDir { dir, after: None, .. } | Request::ReadDirPlus { dir, after: None, .. }
                if validate_path(dir).is_ok() =>
            {
                let key = gust_proto::path::listing_key(dir);
                match state.grants.grant(&key, h) {
                    Grant::No => None,
                    g => Some((key, g)),
                }
            }
            _ => None,
        };
        let many = match req {
            Request::ReadMany { paths } if leased && h.shared.load(std::sync::atomic::Ordering::Relaxed) => {
                grant_every(state, paths, h)
            }
            _ => None,
        };
        Offers { batch, created, granted, listed, names, many }
    }

    /// Given the reply: keeps what it allows (a failed request takes back what it
    /// newly granted) and returns the reply's grant flags.
    pub(super) fn after(self, state: &State, reply: &Reply, h: &Holder) -> u16 {
        let mut flags = 0;
        if let Some((path, g)) = self.granted {
            if reply.is_ok() {
                flags |= REPLY_GRANTED;
            } else if g == Grant::New {
                // Held before this request: the caller keeps what it cached under it.
                state.grants.ungrant(&path, h);
            }
        }
        if let Some((key, g)) = self.names {
            if reply.is_ok() {
                flags |= REPLY_LISTED;
            } else if g == Grant::New {
                state.grants.ungrant(&key, h);
            }
        }
        if let (Some((dir, epoch)), Ok(Response::DirPagePlus { entries, .. })) = (self.listed, reply) {
            let paths: Vec<String> = entries.iter().map(|(name, _)| gust_proto::path::join(&dir, name)).collect();
            if state.grants.grant_listed(&dir, &paths, h, epoch) {
                flags |= REPLY_GRANTED;
            }
        }
        if let (Some(paths), Ok(Response::Staged(outs))) = (self.batch, reply) {
            let made: Vec<String> = paths.into_iter().zip(outs).filter(|(_, o)| o.errno == 0).map(|(p, _)| p).collect();
            if made.len() == outs.len() && state.grants.grant_all(&made, h) {
                flags |= REPLY_GRANTED;
            }
        }
        if let Some(many) = self.many {
            match reply {
                // Granted whole: a file not found (or failed) lets go of its grant.
                Ok(Response::Files(files)) => {
                    for ((path, g), f) in many.iter().zip(files) {
                        if matches!(f, gust_proto::WholeFile::Failed(_)) && *g == Grant::New {
                            state.grants.ungrant(path, h);
                        }
                    }
                    flags |= REPLY_GRANTED;
                }
                _ => many.iter().filter(|(_, g)| *g == Grant::New).for_each(|(p, _)| state.grants.ungrant(p, h)),
            }
        }
        if let (Some(path), true) = (self.created, reply.is_ok()) {
            let name = path.rsplit('/').next().unwrap_or_default();
            let only_name = |dir: &str| {
                matches!(state.metadata.read_dir(dir, None, 2, usize::MAX),
                         Ok((page, _)) if page.len() == 1 && page[0].0 == name)
            };
            if state.grants.claim(&path, h, only_name) {
                flags |= REPLY_CLAIMED;
            }
        }
        flags
    }
}
