//! What every request of a daemon shares: its stores, its identity and secret, its
//! counters.

use crate::events::EventLog;
use crate::fence::Fences;
use crate::lease::Lease;
use crate::log_budget::LogBudget;
use crate::metrics::Metrics;
use crate::read_log::ReadLog;
use gust_store::chunks::ChunkStore;
use gust_store::metadata::MetadataStore;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

pub struct State {
    pub daemon_id: u32,
    pub rootdir: PathBuf,
    pub metadata: MetadataStore,
    pub chunks: ChunkStore,
    pub(crate) secret: Vec<u8>,
    pub metrics: Metrics,
    /// Namespace changes for `gust events` (bounded; off with a cap of 0).
    pub events: EventLog,
    /// What reads this daemon served (`gust stop --record-reads`).
    pub read_log: ReadLog,
    /// Set by a Shutdown request without `keep`: remove the root directory on exit.
    pub wipe_on_exit: AtomicBool,
    /// Restarted after a crash in a replicated instance: refuses everything about
    /// the file system's contents with EHOSTDOWN until repaired (dispatch/mod.rs).
    pub recovering: AtomicBool,
    /// This daemon's lease from its peers (replicated instances): without it, it
    /// refuses contents like a recovering daemon (lease.rs).
    pub lease: Lease,
    /// The peer's half: daemons fenced here, grants given (fence.rs).
    pub fences: Fences,
    pub(crate) refusals_logged: LogBudget,
    pub(crate) accept_errors_logged: LogBudget,
    /// Grants to clients and their recalls (grants.rs).
    pub grants: std::sync::Arc<crate::grants::Grants>,
    /// File locks of the files whose records this daemon holds (lock_service.rs).
    pub locks: std::sync::Arc<crate::lock_service::LockService>,
    /// The node proxy (proxy/), set at start.
    pub proxy: std::sync::OnceLock<crate::proxy::Proxy>,
    /// Its cores, niceness and bandwidth limit (qos.rs).
    pub qos: crate::qos::Qos,
    /// Its layout generation and its part in a move to a new one (moves/).
    pub moves: crate::moves::Moves,
}

impl State {
    pub fn new(
        daemon_id: u32,
        rootdir: PathBuf,
        metadata: MetadataStore,
        chunks: ChunkStore,
        secret: Vec<u8>,
        events_cap_bytes: usize,
    ) -> Self {
        let grants = std::sync::Arc::new(crate::grants::Grants::new());
        State {
            daemon_id,
            rootdir,
            metadata,
            chunks,
            secret,
            metrics: Metrics::new(),
            events: EventLog::new(events_cap_bytes),
            read_log: ReadLog::new(),
            wipe_on_exit: AtomicBool::new(false),
            recovering: AtomicBool::new(false),
            lease: Lease::new(),
            fences: Fences::new(),
            refusals_logged: LogBudget::new(),
            accept_errors_logged: LogBudget::new(),
            locks: crate::lock_service::LockService::new(grants.clone()),
            grants,
            proxy: std::sync::OnceLock::new(),
            qos: crate::qos::Qos::new(),
            moves: crate::moves::Moves::new(),
        }
    }

    /// (total, free, available) bytes of the file system under the root directory,
    /// or of the declared capacity (`--capacity`) when there is one.
    pub fn capacity(&self) -> gust_store::Res<(u64, u64, u64)> {
        if let Some((cap, used)) = self.chunks.declared() {
            let free = cap.saturating_sub(used);
            return Ok((cap, free, free));
        }
        let c = std::ffi::CString::new(self.rootdir.as_os_str().as_encoded_bytes()).map_err(|_| libc::EINVAL)?;
        // SAFETY: statvfs writes into a zeroed struct we own; the path is NUL-terminated.
        let mut sv: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(c.as_ptr(), &mut sv) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
        }
        let f = sv.f_frsize;
        Ok((sv.f_blocks * f, sv.f_bfree * f, sv.f_bavail * f))
    }
}
