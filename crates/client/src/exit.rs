//! The end of a process: what a client holds back goes out, and from then on
//! nothing is held back.
//!
//! A client keeps some work in the process for speed: deferred creates (inline.rs),
//! unsent sizes (size_cache.rs), write-behind buffers and queued creates (opt-in).
//! An acknowledged `write` must not be lost when the process ends, so a front end
//! calls [`Client::begin_exit`] when the process starts to end (the preload
//! library's exit hook and its `_exit`, the C API's and Python module's exit hooks).
//!
//! Exit handlers run in an order the program chooses, and stdio's last flush comes
//! after all of them: gnulib's `close_stdout` (ls, sort, md5sum, ...) writes its
//! buffered output after a hook registered later than its own, a C++ destructor or
//! another library's handler may write after any hook, and glibc flushes every
//! stream after the last handler. No hook can be the last, so `begin_exit` also
//! switches the client to writing through: from then on a create is sent at open,
//! a write sends its size with its data, and nothing is buffered or queued. Writes
//! after the hook cost a request more each; they are few (a last flush).
//!
//! Not for: fork and exec (the front ends call [`Client::send_before_fork`] and
//! [`Client::settle_all`]); a process killed by a signal loses what it held, as
//! docs/SEMANTICS.md says.

use crate::Client;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Once, Weak};

impl Client {
    /// The process is ending: sends every deferred create (as an ordinary file:
    /// writes may still come through its descriptor), buffered write, unsent size
    /// and queued create, and writes through from now on. Failures are logged by
    /// the paths that send (there is nobody to return them to).
    pub fn begin_exit(&self) {
        self.ending.store(true, Ordering::Release);
        self.settle_all();
    }

    /// Whether the process is ending: nothing may be held back (see the module doc).
    #[inline]
    pub(crate) fn ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }
}

/// A client dropped with descriptors still open (an API program that unmounts, or
/// a Python client collected, without closing its files) sends what they hold back
/// first, as closing them would.
impl Drop for Client {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.settle_all()));
    }
}

/// Clients whose front end asked that they be settled at exit.
static AT_EXIT: Mutex<Vec<Weak<Client>>> = Mutex::new(Vec::new());

/// Settles `client` when the process calls `exit` (or returns from `main`), for
/// front ends that hand out `Arc<Client>`s (the C API, the Python module). The hook
/// is a C `atexit` handler, registered once per process at the first call; clients
/// dropped before the exit are skipped. `_exit` and fatal signals run no hook: the
/// preload library interposes `_exit` itself; API programs close their files.
pub fn settle_at_exit(client: &Arc<Client>) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        // SAFETY: registers a function with no preconditions.
        unsafe { libc::atexit(settle_registered) };
    });
    let mut v = AT_EXIT.lock().unwrap_or_else(|e| e.into_inner());
    v.retain(|w| w.strong_count() > 0);
    v.push(Arc::downgrade(client));
}

extern "C" fn settle_registered() {
    let clients: Vec<Arc<Client>> =
        AT_EXIT.lock().unwrap_or_else(|e| e.into_inner()).iter().filter_map(Weak::upgrade).collect();
    for c in clients {
        // A panic must not unwind into libc's exit.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.begin_exit()));
    }
}
