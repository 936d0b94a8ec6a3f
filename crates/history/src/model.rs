//! The sequential specification of one path: a register that is absent, or present
//! with permission bits and the value of one extended attribute (`user.h`; 0: the
//! file has none).
//!
//! | operation      | absent                    | present(m, x)                   |
//! |----------------|---------------------------|---------------------------------|
//! | create(c)      | ok, becomes present(c, 0) | EEXIST, unchanged               |
//! | open(c)        | ok, becomes present(c, 0) | ok, unchanged                   |
//! | chmod(c)       | ENOENT, unchanged         | ok, becomes present(c, x)       |
//! | setxattr(v)    | ENOENT, unchanged         | ok, becomes present(m, v)       |
//! | unlink         | ENOENT, unchanged         | ok, becomes absent              |
//! | stat           | ENOENT                    | mode m                          |
//! | getxattr       | ENOENT                    | value x, or ENODATA when x is 0 |
//! | listed         | ENOENT (not in a listing) | ok (in a listing)               |
//!
//! Every path starts absent. Modes are compared as `mode & 0o7777`. An operation
//! whose result is none of these (it never returned, or failed with EIO, a timeout,
//! ...) may have taken effect or not: [`is_determinate`] says so, and the checker
//! gives it no return time, so that it either takes effect at some instant after its
//! invocation (with whatever result the state gives) or never.

use crate::format::{OpKind, Outcome};

/// Bits of a mode the model keeps (permissions, setuid, setgid, sticky).
pub const MODE_BITS: u32 = 0o7777;

/// The state of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    Absent,
    /// Mode and the attribute's value (0: none).
    Present(u16, u8),
}

impl State {
    /// For people: "absent", "mode 0644".
    pub fn describe(self) -> String {
        match self {
            State::Absent => "absent".into(),
            State::Present(m, 0) => format!("mode {m:04o}"),
            State::Present(m, x) => format!("mode {m:04o}, user.h {x}"),
        }
    }
}

fn present(mode: u32, x: u8) -> State {
    State::Present((mode & MODE_BITS) as u16, x)
}

/// Values a setxattr of the model writes (1 to this).
pub const XATTR_VALUES: u32 = 3;

/// Whether `result` is one the model can give `kind`; if not, the operation's
/// effect is unknown.
pub fn is_determinate(kind: OpKind, result: Outcome) -> bool {
    match (kind, result) {
        (OpKind::Stat, Outcome::Mode(_)) => true,
        (OpKind::Getxattr, Outcome::Value(_)) => true,
        (OpKind::Getxattr, Outcome::Errno(e)) => e == libc::ENOENT || e == libc::ENODATA,
        (OpKind::Create, Outcome::Errno(e)) => e == libc::EEXIST,
        (OpKind::Open, Outcome::Errno(_)) => false,
        (_, Outcome::Errno(e)) => e == libc::ENOENT,
        (OpKind::Stat, _) => false,
        (_, Outcome::Ok) => true,
        _ => false,
    }
}

/// What `kind(arg)` does in `state`: its result and the next state.
pub fn apply(state: State, kind: OpKind, arg: u32) -> (Outcome, State) {
    let enoent = Outcome::Errno(libc::ENOENT);
    match (kind, state) {
        (OpKind::Create, State::Absent) => (Outcome::Ok, present(arg, 0)),
        (OpKind::Create, State::Present(..)) => (Outcome::Errno(libc::EEXIST), state),
        (OpKind::Open, State::Absent) => (Outcome::Ok, present(arg, 0)),
        (OpKind::Open, State::Present(..)) => (Outcome::Ok, state),
        (OpKind::Chmod, State::Present(_, x)) => (Outcome::Ok, present(arg, x)),
        (OpKind::Setxattr, State::Present(m, _)) => (Outcome::Ok, State::Present(m, arg.min(u8::MAX as u32) as u8)),
        (OpKind::Unlink, State::Present(..)) => (Outcome::Ok, State::Absent),
        (OpKind::Stat, State::Present(m, _)) => (Outcome::Mode(m as u32), state),
        (OpKind::Getxattr, State::Present(_, 0)) => (Outcome::Errno(libc::ENODATA), state),
        (OpKind::Getxattr, State::Present(_, x)) => (Outcome::Value(x as u32), state),
        (OpKind::Listed, State::Present(..)) => (Outcome::Ok, state),
        (
            OpKind::Chmod | OpKind::Setxattr | OpKind::Unlink | OpKind::Stat | OpKind::Getxattr | OpKind::Listed,
            State::Absent,
        ) => (enoent, state),
    }
}

/// The next state if `kind(arg)` may take effect in `state` and return `result`
/// ([`Outcome::Unknown`]: any result); None if it may not.
pub fn step(state: State, kind: OpKind, arg: u32, result: Outcome) -> Option<State> {
    let (r, next) = apply(state, kind, arg);
    let same = match (r, result) {
        (_, Outcome::Unknown) => true,
        (Outcome::Mode(a), Outcome::Mode(b)) => a == b & MODE_BITS,
        (a, b) => a == b,
    };
    same.then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        let a = State::Absent;
        let p = State::Present(0o644, 0);
        assert_eq!(step(a, OpKind::Create, 0o600, Outcome::Ok), Some(State::Present(0o600, 0)));
        assert_eq!(step(p, OpKind::Create, 0o600, Outcome::Ok), None);
        assert_eq!(step(p, OpKind::Create, 0o600, Outcome::Errno(libc::EEXIST)), Some(p));
        assert_eq!(step(a, OpKind::Open, 0o600, Outcome::Ok), Some(State::Present(0o600, 0)));
        assert_eq!(step(p, OpKind::Open, 0o600, Outcome::Ok), Some(p), "an existing file keeps its mode");
        assert_eq!(step(p, OpKind::Chmod, 0o100755, Outcome::Ok), Some(State::Present(0o755, 0)));
        assert_eq!(step(a, OpKind::Chmod, 0o755, Outcome::Errno(libc::ENOENT)), Some(a));
        assert_eq!(step(p, OpKind::Unlink, 0, Outcome::Ok), Some(a));
        assert_eq!(step(a, OpKind::Unlink, 0, Outcome::Ok), None);
        assert_eq!(step(p, OpKind::Stat, 0, Outcome::Mode(0o100644)), Some(p));
        assert_eq!(step(p, OpKind::Stat, 0, Outcome::Mode(0o600)), None);
        assert_eq!(step(a, OpKind::Stat, 0, Outcome::Errno(libc::ENOENT)), Some(a));
        assert_eq!(step(p, OpKind::Listed, 0, Outcome::Ok), Some(p));
        assert_eq!(step(a, OpKind::Listed, 0, Outcome::Ok), None, "a listing named an absent path");
        assert_eq!(step(p, OpKind::Listed, 0, Outcome::Errno(libc::ENOENT)), None, "a listing missed a file");
        assert_eq!(step(a, OpKind::Listed, 0, Outcome::Errno(libc::ENOENT)), Some(a));
        // The attribute: set on a present file, kept by chmod, gone with the file.
        let x = State::Present(0o644, 2);
        assert_eq!(step(p, OpKind::Getxattr, 0, Outcome::Errno(libc::ENODATA)), Some(p));
        assert_eq!(step(p, OpKind::Setxattr, 2, Outcome::Ok), Some(x));
        assert_eq!(step(a, OpKind::Setxattr, 2, Outcome::Errno(libc::ENOENT)), Some(a));
        assert_eq!(step(x, OpKind::Getxattr, 0, Outcome::Value(2)), Some(x));
        assert_eq!(step(x, OpKind::Getxattr, 0, Outcome::Value(1)), None, "a stale value");
        assert_eq!(step(x, OpKind::Getxattr, 0, Outcome::Errno(libc::ENODATA)), None, "a lost value");
        assert_eq!(step(x, OpKind::Chmod, 0o600, Outcome::Ok), Some(State::Present(0o600, 2)));
        assert_eq!(step(x, OpKind::Open, 0o600, Outcome::Ok), Some(x));
        assert_eq!(step(x, OpKind::Stat, 0, Outcome::Mode(0o644)), Some(x));
        // Unknown: takes effect, whatever it would have returned.
        assert_eq!(step(a, OpKind::Create, 0o600, Outcome::Unknown), Some(State::Present(0o600, 0)));
        assert_eq!(step(p, OpKind::Create, 0o600, Outcome::Unknown), Some(p));
    }

    #[test]
    fn only_the_models_results_are_determinate() {
        assert!(is_determinate(OpKind::Create, Outcome::Errno(libc::EEXIST)));
        assert!(!is_determinate(OpKind::Create, Outcome::Errno(libc::ENOENT)));
        assert!(is_determinate(OpKind::Unlink, Outcome::Errno(libc::ENOENT)));
        assert!(!is_determinate(OpKind::Chmod, Outcome::Errno(libc::EIO)));
        assert!(!is_determinate(OpKind::Stat, Outcome::Errno(libc::ETIMEDOUT)));
        assert!(!is_determinate(OpKind::Stat, Outcome::Unknown));
    }
}
