//! The kernel's caches of this mount (names, attributes, file pages) kept coherent
//! with other nodes under the client's grants (docs/FUSE.md, "Caching"; gust-client
//! grants.rs), as NFSv4 delegations and CephFS capabilities keep a kernel client's:
//!
//! * The kernel may keep what a reply says (a name's inode, the attributes) only as
//!   long as this process holds a grant on the record: the reply's timeout is the
//!   configured one cut to what is left of the grant's lease, and zero without a
//!   grant (a contended file: the kernel asks every time, as the preload library
//!   does). Without grants at all (`GUST_GRANTS=0`, copies, cache mode, the node
//!   proxy) the configured timeouts hold as before (docs/SEMANTICS.md).
//! * When a daemon recalls a path (another client is about to change it), the
//!   kernel's entry for the name and the inode's attributes and pages go
//!   (FUSE_NOTIFY_INVAL_ENTRY and _INODE) before the recall is answered, so the
//!   change happens only once no process here can see the old state.
//! * A reply computed from a grant may reach the kernel after the recall's
//!   invalidation ran: each reply notes the count of recalls before it looks at
//!   the grant, and if that count moved by the time the reply is sent, the mount
//!   invalidates what the reply told the kernel once more (`after_reply`). The
//!   kernel installs a lookup's entry while holding its directory's lock, which
//!   invalidating the entry waits for, so that second invalidation comes after.
//!   Nothing waits for a lock: a recall never waits for a request, whatever that
//!   request waits for.
//! * File pages: a read-only open of a file whose record is granted keeps the
//!   pages the kernel has (FOPEN_KEEP_CACHE); a recall drops them.
//! * Directories: the kernel caches a directory's entries as it reads them
//!   (FOPEN_CACHE_DIR) and keeps them across opens (FOPEN_KEEP_CACHE) while this
//!   process holds the listing it filled them from under every daemon's grant on
//!   the directory's names; a recall of the listing (a name made or removed there
//!   by another client) drops them.
//! * A daemon that gets no answer waits out the lease: every timeout given to the
//!   kernel ends within it, so nothing cached outlives a lost recall either.

use super::*;
use std::sync::OnceLock;

/// What a recall needs from the mount: its inode table and the kernel's ear.
pub(crate) struct Coherence {
    pub(crate) table: Arc<Mutex<Table>>,
    /// Recalls so far (see the module doc).
    recalls: AtomicU64,
    notifier: OnceLock<fuser::Notifier>,
}

impl Coherence {
    pub(crate) fn new(table: Arc<Mutex<Table>>) -> Coherence {
        Coherence { table, recalls: AtomicU64::new(0), notifier: OnceLock::new() }
    }

    /// Once the session is up: from now on recalls reach the kernel.
    pub(crate) fn set_notifier(&self, n: fuser::Notifier) {
        let _ = self.notifier.set(n);
    }

    /// Before a reply looks at grants: the count `after_reply` compares with.
    pub(crate) fn epoch(&self) -> u64 {
        self.recalls.load(Ordering::SeqCst)
    }

    /// A reply that let the kernel keep what it said of `paths` was sent: if a
    /// recall came since `epoch`, they are invalidated again.
    pub(crate) fn after_reply(&self, epoch: u64, paths: &[String]) {
        if self.recalls.load(Ordering::SeqCst) != epoch {
            paths.iter().for_each(|p| self.invalidate(p));
        }
    }

    /// `path` was recalled (the client forgot it already): the kernel forgets its
    /// entry, and the attributes and pages of the inode it names (for a
    /// hard-linked file's record, of the file's inode), before this returns.
    pub(crate) fn recalled(&self, path: &str) {
        self.recalls.fetch_add(1, Ordering::SeqCst);
        self.invalidate(path);
    }

    /// This mount changed the attributes of inode `ino` inside a request the kernel
    /// waits for (a write that dropped set-id bits, setid.rs): the kernel forgets
    /// them, and only them (that very request may hold its pages locked).
    pub(crate) fn attrs_changed(&self, ino: u64) {
        if let Some(n) = self.table.lock().unwrap_or_else(|e| e.into_inner()).nodes.get_mut(&ino) {
            n.known = None;
        }
        if let Some(n) = self.notifier.get() {
            let _ = n.inval_inode(INodeNo(ino), -1, 0);
        }
    }

    fn invalidate(&self, path: &str) {
        if let Some(dir) = gust_client::path::listing_dir(path) {
            // A name there changed: the kernel's cached entries of the directory go.
            let ino = {
                let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
                let ino = t.by_path.get(dir).copied();
                if let Some(n) = ino.and_then(|i| t.nodes.get_mut(&i)) {
                    n.dir_cache = None;
                }
                ino
            };
            if let (Some(ino), Some(n)) = (ino, self.notifier.get()) {
                let _ = n.inval_inode(INodeNo(ino), 0, 0);
            }
            return;
        }
        let (inodes, entry) = {
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            let inodes: Vec<u64> = if gust_client::path::is_link_path(path) {
                // Every name of the file is one inode, numbered from its file id.
                let id = u128::from_str_radix(&path[gust_client::path::LINKS_DIR.len() + 1..], 16);
                id.ok().map(Stat::ino_of).filter(|i| t.nodes.contains_key(i)).into_iter().collect()
            } else {
                t.by_path.get(path).copied().into_iter().collect()
            };
            for ino in &inodes {
                if let Some(n) = t.nodes.get_mut(ino) {
                    n.known = None;
                }
            }
            let entry = match path.rsplit_once('/') {
                Some((dir, name)) if !name.is_empty() && !gust_client::path::is_link_path(path) => {
                    let dir = if dir.is_empty() { "/" } else { dir };
                    t.by_path.get(dir).map(|d| (*d, name.to_string()))
                }
                _ => None,
            };
            (inodes, entry)
        };
        let Some(n) = self.notifier.get() else { return };
        // Errors: the kernel holds nothing of it (ENOENT), or the mount is going.
        if let Some((dir, name)) = entry {
            let _ = n.inval_entry(INodeNo(dir), std::ffi::OsStr::new(&name));
        }
        for ino in inodes {
            let _ = n.inval_inode(INodeNo(ino), 0, 0);
        }
    }
}

impl GustFs {
    /// What the kernel is told after a lookup of `path` returned `st`: with a grant
    /// on the record, the record as granted (a reply of another thread may be
    /// newer than `st`) and the mount's timeouts cut to what is left of the lease;
    /// without one, `st` and zero timeouts. Without grants at all, and for the
    /// root, `st` and the mount's timeouts (see the module doc). Call with
    /// the recall count (`Coherence::epoch`) taken before.
    pub(crate) fn for_kernel(&self, path: &str, st: Stat) -> Told {
        let (attr, entry) = (self.opts.attr_timeout, self.opts.entry_timeout);
        if path == "/" || !self.client.grants_on() {
            return Told { st, attr, entry };
        }
        match self.client.granted_lstat(path) {
            Some((st, left)) => Told { st, attr: attr.min(left), entry: entry.min(left) },
            None => Told { st, attr: Duration::ZERO, entry: Duration::ZERO },
        }
    }
}

impl GustFs {
    /// The flags of an opendir of `ino` (at `path`): with grants, the kernel caches
    /// the entries it reads (FOPEN_CACHE_DIR), and keeps what it cached before
    /// (FOPEN_KEEP_CACHE) if that came from the listing this process still holds
    /// under its daemons' grants: no name there changed since.
    pub(crate) fn dir_open_flags(&self, ino: u64, path: &str) -> FopenFlags {
        if !self.client.grants_on() {
            return FopenFlags::empty();
        }
        let held = self.client.listing_held(path);
        let cached = self.table.lock().unwrap_or_else(|e| e.into_inner()).nodes.get(&ino).and_then(|n| n.dir_cache);
        if held.is_some() && cached == held {
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::FOPEN_CACHE_DIR
        }
    }

    /// FOPEN_KEEP_CACHE for a read-only open of `path` while this process holds a
    /// grant on its record: the pages the kernel has of it stay (a recall drops
    /// them, and the kernel drops them itself when the attributes it is given show
    /// another size or mtime, FUSE_AUTO_INVAL_DATA), so a file read again is read
    /// from memory.
    pub(crate) fn keep_pages(&self, path: &str, client_flags: i32) -> FopenFlags {
        let read_only = client_flags & libc::O_ACCMODE == libc::O_RDONLY;
        if read_only && !self.opts.direct_io && self.client.grants_on() && self.client.granted_lstat(path).is_some() {
            FopenFlags::FOPEN_KEEP_CACHE
        } else {
            FopenFlags::empty()
        }
    }

    /// After a READDIR(PLUS) reply: if the pass reached the end on a listing held
    /// under grants that is still held, the kernel's cache of the directory (filled
    /// by this pass) is that listing.
    pub(crate) fn dir_listed(&self, ino: u64, d: &DirHandle) {
        let ended = d.state.lock().unwrap_or_else(|e| e.into_inner()).ended_with.take();
        let Some(id) = ended else { return };
        if self.client.listing_held(&d.path) == Some(id) {
            if let Some(n) = self.table.lock().unwrap_or_else(|e| e.into_inner()).nodes.get_mut(&ino) {
                n.dir_cache = Some(id);
            }
        }
    }
}

/// Attributes for the kernel and how long it may keep them and the name.
pub(crate) struct Told {
    pub(crate) st: Stat,
    pub(crate) attr: Duration,
    pub(crate) entry: Duration,
}
