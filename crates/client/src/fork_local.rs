//! State of one process that a child after fork must not take for its own: the
//! queues of deferred creates and removes (create_batch.rs, remove_batch.rs), which
//! the parent sends. The child starts from an empty value instead.
//!
//! Not for: connections (rpc.rs keeps its own generation per pool), grants.

use std::sync::Mutex;

/// A value of the process with the fork generation (rpc.rs) that made it.
#[derive(Default)]
pub(crate) struct ForkLocal<T> {
    slot: Mutex<(u64, T)>,
}

impl<T: Default> ForkLocal<T> {
    /// Runs `f` on this process's value: a fresh one in a child that inherited its
    /// parent's.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut s = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let generation = crate::rpc::fork_generation();
        if s.0 != generation {
            *s = (generation, T::default());
        }
        f(&mut s.1)
    }

    /// Takes this process's value and leaves a fresh one; None when the value was
    /// the parent's.
    #[cfg(test)]
    pub(crate) fn take(&self) -> Option<T> {
        self.take_and(|| ())
    }

    /// `take`, running `also` before the value's lock is let go: a count of what
    /// the value holds, kept beside it for a lock-free look, must be cleared with
    /// it, or an addition made between the two is counted away (and then sent by
    /// no one).
    pub(crate) fn take_and(&self, also: impl FnOnce()) -> Option<T> {
        let mut s = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        let generation = crate::rpc::fork_generation();
        let (was, value) = std::mem::replace(&mut *s, (generation, T::default()));
        also();
        (was == generation).then_some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::ForkLocal;

    #[test]
    fn a_value_is_kept_until_taken() {
        let q: ForkLocal<Vec<u32>> = ForkLocal::default();
        q.with(|v| v.push(1));
        q.with(|v| v.push(2));
        assert_eq!(q.take(), Some(vec![1, 2]));
        assert_eq!(q.take(), Some(vec![]));
    }

    #[test]
    fn a_child_after_fork_starts_empty_and_takes_nothing_of_the_parent() {
        let q: ForkLocal<Vec<u32>> = ForkLocal::default();
        q.with(|v| v.push(7));
        // SAFETY: the child only reads memory, writes to a pipe and _exits.
        let mut fds = [0; 2];
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = q.take().is_none() && q.with(|v| v.is_empty());
            let b = [ok as u8];
            unsafe {
                libc::write(fds[1], b.as_ptr().cast(), 1);
                libc::_exit(0);
            }
        }
        let mut b = [0u8];
        assert_eq!(unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) }, 1);
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(b[0], 1, "the child saw its parent's queue");
        assert_eq!(q.take(), Some(vec![7]), "the parent lost its queue");
    }
}
