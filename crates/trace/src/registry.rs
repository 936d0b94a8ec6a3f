//! The tracepoints: names, groups, ids and the switch of each.
//!
//! Every tracepoint is a `static` with its own atomic flag, so the check at a
//! tracepoint is one relaxed load and a branch the CPU predicts (never taken while
//! off). With the `compile-out` feature the check is a constant `false`.
//!
//! Ids are written with their names in every trace file's header, so a reader needs
//! no copy of this table; they never change meaning (add new ones at the end).

use std::sync::atomic::{AtomicBool, Ordering};

/// One tracepoint.
pub struct Tracepoint {
    pub id: u16,
    pub name: &'static str,
    /// Groups it belongs to (`client`, `data`, `meta`, `daemon`, `md`, `chunk`).
    pub groups: &'static [&'static str],
    enabled: AtomicBool,
}

impl Tracepoint {
    const fn new(id: u16, name: &'static str, groups: &'static [&'static str]) -> Tracepoint {
        Tracepoint { id, name, groups, enabled: AtomicBool::new(false) }
    }

    /// Whether this tracepoint records: one relaxed load.
    #[inline(always)]
    pub fn on(&self) -> bool {
        #[cfg(feature = "compile-out")]
        {
            false
        }
        #[cfg(not(feature = "compile-out"))]
        {
            self.enabled.load(Ordering::Relaxed)
        }
    }

    fn set(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }
}

macro_rules! tracepoints {
    ($($id:literal $konst:ident $name:literal [$($group:literal),*]),* $(,)?) => {
        $(pub static $konst: Tracepoint = Tracepoint::new($id, $name, &[$($group),*]);)*
        /// Every tracepoint, in id order.
        pub static ALL: &[&Tracepoint] = &[$(&$konst),*];
    };
}

tracepoints! {
    // Client core: one record per call of the API (what a program asked for).
    1 OPEN "open" ["client", "meta"],
    2 CLOSE "close" ["client", "meta"],
    3 READ "read" ["client", "data"],
    4 WRITE "write" ["client", "data"],
    5 STAT "stat" ["client", "meta"],
    6 MKDIR "mkdir" ["client", "meta"],
    7 RMDIR "rmdir" ["client", "meta"],
    8 UNLINK "unlink" ["client", "meta"],
    9 RENAME "rename" ["client", "meta"],
    10 READDIR "readdir" ["client", "meta"],
    11 TRUNCATE "truncate" ["client", "data"],
    12 FSYNC "fsync" ["client", "data"],
    13 SETATTR "setattr" ["client", "meta"],
    14 SYMLINK "symlink" ["client", "meta"],
    15 LSEEK "lseek" ["client", "data"],
    16 READLINK "readlink" ["client", "meta"],
    17 ACCESS "access" ["client", "meta"],
    18 STATFS "statfs" ["client", "meta"],
    19 LINK "link" ["client", "meta"],
    20 GETXATTR "getxattr" ["client", "meta"],
    21 SETXATTR "setxattr" ["client", "meta"],
    // Daemon: one record per request served by the metadata store or chunk store.
    32 MD_READ "md_read" ["daemon", "md"],
    33 MD_UPDATE "md_update" ["daemon", "md"],
    34 CHUNK_READ "chunk_read" ["daemon", "chunk"],
    35 CHUNK_WRITE "chunk_write" ["daemon", "chunk"],
    36 CHUNK_OTHER "chunk_other" ["daemon", "chunk"],
}

/// The tracepoint with this id, if any.
pub fn by_id(id: u16) -> Option<&'static Tracepoint> {
    ALL.iter().copied().find(|t| t.id == id)
}

/// The tracepoints a spec names: a comma-separated list of names and groups, or
/// `all`. An unknown word is an error naming it and what exists.
pub fn select(spec: &str) -> Result<Vec<&'static Tracepoint>, String> {
    let mut out: Vec<&'static Tracepoint> = Vec::new();
    for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let hit: Vec<&'static Tracepoint> =
            ALL.iter().copied().filter(|t| word == "all" || t.name == word || t.groups.contains(&word)).collect();
        if hit.is_empty() {
            return Err(format!("unknown tracepoint or group '{word}' (known: {})", known()));
        }
        for t in hit {
            if !out.iter().any(|o| o.id == t.id) {
                out.push(t);
            }
        }
    }
    if out.is_empty() {
        return Err(format!("no tracepoint named (known: {})", known()));
    }
    Ok(out)
}

/// Names and groups, for messages.
pub fn known() -> String {
    let mut groups: Vec<&str> = ALL.iter().flat_map(|t| t.groups.iter().copied()).collect();
    groups.sort_unstable();
    groups.dedup();
    let names: Vec<&str> = ALL.iter().map(|t| t.name).collect();
    format!("groups all, {}; tracepoints {}", groups.join(", "), names.join(", "))
}

/// Switches the tracepoints of `spec` on or off; returns their names.
pub fn switch(spec: &str, on: bool) -> Result<Vec<&'static str>, String> {
    let tps = select(spec)?;
    for t in &tps {
        t.set(on);
    }
    Ok(tps.iter().map(|t| t.name).collect())
}

/// The names of the tracepoints now on.
pub fn enabled() -> Vec<&'static str> {
    ALL.iter().filter(|t| t.enabled.load(Ordering::Relaxed)).map(|t| t.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_ordered() {
        for w in ALL.windows(2) {
            assert!(w[0].id < w[1].id, "{} before {}", w[0].name, w[1].name);
        }
        assert_eq!(by_id(4).map(|t| t.name), Some("write"));
        assert!(by_id(0).is_none());
    }

    #[test]
    fn select_names_groups_and_rejects_unknown_words() {
        let names = |s: &str| select(s).unwrap().iter().map(|t| t.name).collect::<Vec<_>>();
        assert_eq!(names("write,read"), vec!["write", "read"]);
        assert_eq!(names("data"), vec!["read", "write", "truncate", "fsync", "lseek"]);
        assert_eq!(names("chunk, write"), vec!["chunk_read", "chunk_write", "chunk_other", "write"]);
        assert_eq!(select("all").unwrap().len(), ALL.len());
        let e = select("write,bogus").err().unwrap();
        assert!(e.contains("'bogus'") && e.contains("md_read"), "{e}");
        assert!(select(" , ").is_err());
    }
}
