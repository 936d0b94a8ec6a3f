//! Histories of concurrent file-system operations, and a checker that says whether
//! they are linearizable: whether every operation can be given one instant between
//! its invocation and its return such that, taken in that order, the operations
//! return what a single sequential file system would.
//!
//! * [`format`]: the history file, one JSON object per line, as `gust bench
//!   history` workers write it (an invocation line, then a completion line).
//! * [`model`]: the sequential specification: each path is a register that is
//!   absent or present with a mode, changed by create (O_EXCL), chmod and unlink,
//!   read by stat.
//! * [`wgl`]: the search, Wing & Gong's algorithm with Lowe's memoization (as in
//!   Porcupine), bounded by a step count and a deadline.
//! * [`check`]: the entry point: splits a history by path (operations on different
//!   paths commute, so each path is checked alone: P-compositionality), checks each,
//!   and explains a violation in a few readable lines.
//!
//! Not for: running workloads (the `gust` CLI does, in `gust bench history`), or
//! operations that touch two paths (rename), which would break the split by path.

pub mod check;
pub mod format;
pub mod model;
pub mod wgl;

pub use check::{check, Limits, PathReport, Report, Verdict, Violation};
pub use format::{merge, parse_lines, Line, Op, OpKind, Outcome, RETURN_NEVER};
pub use model::State;
