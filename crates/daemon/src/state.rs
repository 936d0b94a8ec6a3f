//! What every request of a daemon shares: its stores, its identity and secret, its
//! counters.

use crate::chunks::ChunkStore;
use crate::log_budget::LogBudget;
use crate::metadata::MetadataStore;
use crate::metrics::Metrics;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

pub struct State {
    pub daemon_id: u32,
    pub rootdir: PathBuf,
    pub metadata: MetadataStore,
    pub chunks: ChunkStore,
    pub(crate) secret: Vec<u8>,
    pub metrics: Metrics,
    /// Set by a Shutdown request without `keep`: remove the root directory on exit.
    pub wipe_on_exit: AtomicBool,
    pub(crate) refusals_logged: LogBudget,
    pub(crate) accept_errors_logged: LogBudget,
}

impl State {
    pub fn new(daemon_id: u32, rootdir: PathBuf, metadata: MetadataStore, chunks: ChunkStore, secret: Vec<u8>) -> Self {
        State {
            daemon_id,
            rootdir,
            metadata,
            chunks,
            secret,
            metrics: Metrics::new(),
            wipe_on_exit: AtomicBool::new(false),
            refusals_logged: LogBudget::new(),
            accept_errors_logged: LogBudget::new(),
        }
    }
}
