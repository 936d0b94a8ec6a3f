//! Errors of the client API: errno values, as every front end reports them.
//!
//! Not for: transport diagnostics (which daemon, which address): those are kept by
//! the transport for `Client::last_transport_error`.

use gust_proto::Response;
use std::fmt;

/// An errno value (Linux numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> Self {
        std::io::Error::from_raw_os_error(e.0)
    }
}

pub type Result<T> = std::result::Result<T, Errno>;

/// A reply of a kind the request never gets: a programmer error between client and
/// daemon versions of one build, reported as EPROTO (and loudly in debug builds).
pub(crate) fn unexpected(r: Response) -> Errno {
    debug_assert!(false, "unexpected response {r:?}");
    Errno(libc::EPROTO)
}
