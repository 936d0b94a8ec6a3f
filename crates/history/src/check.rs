//! Checks a merged history: split by path, search each path's operations
//! ([`crate::wgl`]), and explain a violation.
//!
//! Splitting is sound because the model is a set of independent registers, one per
//! path: a history is linearizable exactly when each path's sub-history is
//! (P-compositionality, Herlihy & Wing's locality), and the small searches are
//! exponentially cheaper than one big one.

use crate::format::{describe_outcome, Op, OpKind, Outcome, RETURN_NEVER};
use crate::model::{self, State};
use crate::wgl::{self, Call, Found};
use std::collections::BTreeMap;
use std::time::Instant;

/// Bounds on a check; past them a path is reported undecided, not checked forever.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Search steps per path (a step is one event visited; ~10-50 ns each).
    pub steps_per_path_max: u64,
    /// For the whole check.
    pub deadline: Option<Instant>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { steps_per_path_max: 500_000_000, deadline: None }
    }
}

/// The verdict on one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    Violation(Box<Violation>),
    /// A limit was reached before the search decided.
    TooBig,
}

/// A non-linearizable path: the operation no order allows, and the operations
/// around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub culprit: Op,
    /// The states in which the culprit could take effect (none gives its result).
    pub states: Vec<State>,
    /// Operations of the path up to the culprit and concurrent with it, by
    /// invocation time (the culprit among them).
    pub context: Vec<Op>,
    /// Operations before the context, not shown.
    pub earlier_not_shown: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathReport {
    pub path: String,
    pub operations: usize,
    pub steps: u64,
    pub verdict: Verdict,
}

/// The verdict on a whole history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// One per path, by path name.
    pub paths: Vec<PathReport>,
    pub operations: usize,
    /// Operations that never returned.
    pub never_returned: usize,
    /// Operations that returned an error the model does not give (EIO, a timeout,
    /// ...), so that their effect is unknown.
    pub indeterminate: usize,
    /// The earliest invocation: times in explanations count from it.
    pub t0_ns: u64,
}

impl Report {
    pub fn violations(&self) -> usize {
        self.paths.iter().filter(|p| matches!(p.verdict, Verdict::Violation(_))).count()
    }

    pub fn undecided(&self) -> usize {
        self.paths.iter().filter(|p| p.verdict == Verdict::TooBig).count()
    }

    /// Some(true) if every path is linearizable, Some(false) if one is not, None if
    /// no path is shown not linearizable and some were left undecided.
    pub fn linearizable(&self) -> Option<bool> {
        if self.violations() > 0 {
            Some(false)
        } else if self.undecided() > 0 {
            None
        } else {
            Some(true)
        }
    }
}

/// Checks `ops` (a merged history, any order) path by path.
pub fn check(ops: &[Op], limits: &Limits) -> Report {
    let mut by_path: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for o in ops {
        by_path.entry(o.path.as_str()).or_default().push(o);
    }
    let mut paths = Vec::with_capacity(by_path.len());
    for (path, mut ops) in by_path {
        ops.sort_by_key(|o| (o.invoke_ns, o.process, o.seq));
        paths.push(check_path(path, &ops, limits));
    }
    Report {
        paths,
        operations: ops.len(),
        never_returned: ops.iter().filter(|o| o.result == Outcome::Unknown).count(),
        indeterminate: ops
            .iter()
            .filter(|o| o.result != Outcome::Unknown && !model::is_determinate(o.kind, o.result))
            .count(),
        t0_ns: ops.iter().map(|o| o.invoke_ns).min().unwrap_or(0),
    }
}

/// Bound on the operations an explanation shows before the culprit (those that
/// returned before it was invoked); what led to the state is usually just before.
const EARLIER_SHOWN_MAX: usize = 8;
/// Bound on the operations an explanation shows in all.
const CONTEXT_SHOWN_MAX: usize = 40;

fn check_path(path: &str, ops: &[&Op], limits: &Limits) -> PathReport {
    // A stat or listing whose result is unknown changes nothing and says nothing:
    // left out.
    // Any other operation of unknown effect may take effect at any time after its
    // invocation, with any result, or never.
    let mut calls = Vec::with_capacity(ops.len());
    let mut of_call = Vec::with_capacity(ops.len());
    for (i, o) in ops.iter().enumerate() {
        let known = o.result != Outcome::Unknown && model::is_determinate(o.kind, o.result);
        if !known && o.kind.observes() {
            continue;
        }
        calls.push(Call {
            kind: o.kind,
            arg: o.arg,
            result: if known { o.result } else { Outcome::Unknown },
            invoke_ns: o.invoke_ns,
            return_ns: if known { o.return_ns } else { RETURN_NEVER },
        });
        of_call.push(i);
    }
    let (found, steps) =
        wgl::search(&calls, &wgl::Limits { steps_max: limits.steps_per_path_max, deadline: limits.deadline });
    let verdict = match found {
        Found::Linearizable => Verdict::Linearizable,
        Found::TooBig => Verdict::TooBig,
        Found::Violation { culprit, states } => Verdict::Violation(Box::new(violation(ops, of_call[culprit], states))),
    };
    PathReport { path: path.to_string(), operations: ops.len(), steps, verdict }
}

/// The culprit and its context: the last few operations that returned before it was
/// invoked, and every one concurrent with it.
fn violation(ops: &[&Op], culprit: usize, states: Vec<State>) -> Violation {
    let c = ops[culprit];
    // A stat of unknown result cannot matter: not shown.
    let shown_at_all = |i: &usize| !ops[*i].kind.observes() || model::is_determinate(ops[*i].kind, ops[*i].result);
    let mut before: Vec<usize> =
        (0..ops.len()).filter(shown_at_all).filter(|&i| ops[i].return_ns < c.invoke_ns).collect();
    before.sort_by_key(|&i| ops[i].return_ns);
    let earlier_not_shown = before.len().saturating_sub(EARLIER_SHOWN_MAX);
    let mut shown: Vec<usize> = before.split_off(earlier_not_shown);
    shown.extend(
        (0..ops.len())
            .filter(shown_at_all)
            .filter(|&i| ops[i].return_ns >= c.invoke_ns && ops[i].invoke_ns <= c.return_ns),
    );
    shown.sort_by_key(|&i| (ops[i].invoke_ns, ops[i].process, ops[i].seq));
    if shown.len() > CONTEXT_SHOWN_MAX {
        // Keep the culprit and what is nearest it in time.
        let at = shown.iter().position(|&i| i == culprit).unwrap_or(0);
        let from = at.saturating_sub(CONTEXT_SHOWN_MAX / 2).min(shown.len() - CONTEXT_SHOWN_MAX);
        shown = shown[from..from + CONTEXT_SHOWN_MAX].to_vec();
    }
    Violation {
        culprit: c.clone(),
        states,
        context: shown.into_iter().map(|i| ops[i].clone()).collect(),
        earlier_not_shown,
    }
}

/// Seconds since `t0_ns`, for people: +1.234567.
fn at(t_ns: u64, t0_ns: u64) -> String {
    if t_ns == RETURN_NEVER {
        return "never".into();
    }
    format!("+{:.6}", t_ns.saturating_sub(t0_ns) as f64 / 1e9)
}

/// An operation for people: "create 0600", "chmod 0644", "unlink", "stat".
pub fn describe_call(o: &Op) -> String {
    match o.kind {
        OpKind::Create | OpKind::Open | OpKind::Chmod => format!("{} {:04o}", o.kind.name(), o.arg),
        OpKind::Setxattr => format!("setxattr user.h {}", o.arg),
        OpKind::Unlink | OpKind::Stat | OpKind::Listed | OpKind::Getxattr => o.kind.name().to_string(),
    }
}

/// What an operation returned, for people, saying when its effect is unknown.
fn describe_result(o: &Op) -> String {
    let r = describe_outcome(o.result);
    if o.result == Outcome::Unknown || !model::is_determinate(o.kind, o.result) {
        format!("{r} (effect unknown)")
    } else {
        r
    }
}

impl Violation {
    /// A few lines that say which operation no order allows, why, and what ran
    /// around it; times are seconds since `t0_ns`.
    pub fn explain(&self, path: &str, t0_ns: u64) -> String {
        let c = &self.culprit;
        let states: Vec<String> = self
            .states
            .iter()
            .map(|s| match s {
                State::Absent => "absent".to_string(),
                State::Present(m, 0) => format!("present with mode {m:04o}"),
                State::Present(m, x) => format!("present with mode {m:04o} and user.h {x}"),
            })
            .collect();
        let mut s = format!(
            "{path}: not linearizable\n  process {}'s {} at {} s returned {}, which no order of the operations allows:\n  \
             wherever it can take effect, the path is {}.\n  operations on {path} up to it and during it \
             (seconds since the history began):\n",
            c.process,
            describe_call(c),
            at(c.invoke_ns, t0_ns),
            describe_outcome(c.result),
            if states.is_empty() { "in no state at all".to_string() } else { states.join(" or ") },
        );
        if self.earlier_not_shown > 0 {
            s += &format!("    ({} earlier operations not shown)\n", self.earlier_not_shown);
        }
        for o in &self.context {
            let mark = if o == c { "   <- no order allows this" } else { "" };
            s += &format!(
                "    {:>11} .. {:>11}  process {:<4} {:<12} {}{mark}\n",
                at(o.invoke_ns, t0_ns),
                at(o.return_ns, t0_ns),
                o.process,
                describe_call(o),
                describe_result(o)
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Line;

    const ENOENT: i32 = libc::ENOENT;
    const EEXIST: i32 = libc::EEXIST;

    /// An operation of process `p` on path "/f" over [t0, t1] (in µs, for reading).
    fn op(p: u32, kind: OpKind, arg: u32, t0: u64, t1: u64, result: Outcome) -> Op {
        let inv = Line::invocation(p, t0, kind, "/f", arg, t0 * 1000);
        let line = if result == Outcome::Unknown { inv } else { inv.completed(t1 * 1000, result) };
        crate::format::merge([line]).unwrap().remove(0)
    }

    fn create(p: u32, mode: u32, t0: u64, t1: u64, r: Outcome) -> Op {
        op(p, OpKind::Create, mode, t0, t1, r)
    }
    fn chmod(p: u32, mode: u32, t0: u64, t1: u64, r: Outcome) -> Op {
        op(p, OpKind::Chmod, mode, t0, t1, r)
    }
    fn unlink(p: u32, t0: u64, t1: u64, r: Outcome) -> Op {
        op(p, OpKind::Unlink, 0, t0, t1, r)
    }
    fn stat(p: u32, t0: u64, t1: u64, r: Outcome) -> Op {
        op(p, OpKind::Stat, 0, t0, t1, r)
    }
    fn mode(m: u32) -> Outcome {
        Outcome::Mode(m)
    }
    fn err(e: i32) -> Outcome {
        Outcome::Errno(e)
    }

    fn verdict(ops: &[Op]) -> Verdict {
        let r = check(ops, &Limits::default());
        assert_eq!(r.paths.len(), 1);
        r.paths[0].verdict.clone()
    }

    fn culprit(ops: &[Op]) -> Op {
        match verdict(ops) {
            Verdict::Violation(v) => {
                let text = v.explain("/f", 0);
                assert!(text.contains("<- no order allows this"), "{text}");
                v.culprit.clone()
            }
            v => panic!("expected a violation, got {v:?}"),
        }
    }

    fn listed(p: u32, t0: u64, t1: u64, r: Outcome) -> Op {
        op(p, OpKind::Listed, 0, t0, t1, r)
    }

    /// A listing that misses a file created before it started, or names one removed
    /// before it started, is a violation; one concurrent with the change may go
    /// either way.
    #[test]
    fn listings_are_checked_like_stats() {
        let made = create(1, 0o600, 0, 1, Outcome::Ok);
        assert_eq!(culprit(&[made.clone(), listed(2, 2, 3, err(ENOENT))]).kind, OpKind::Listed);
        assert_eq!(verdict(&[made.clone(), listed(2, 2, 3, Outcome::Ok)]), Verdict::Linearizable);
        let gone = unlink(1, 4, 5, Outcome::Ok);
        assert_eq!(culprit(&[made.clone(), gone.clone(), listed(2, 6, 7, Outcome::Ok)]).kind, OpKind::Listed);
        for seen in [Outcome::Ok, err(ENOENT)] {
            assert_eq!(verdict(&[made.clone(), gone.clone(), listed(2, 3, 6, seen)]), Verdict::Linearizable);
        }
        // A listing of unknown result says nothing.
        assert_eq!(verdict(&[made, listed(2, 2, 3, Outcome::Unknown)]), Verdict::Linearizable);
    }

    #[test]
    fn sequential_history_is_linearizable() {
        let h = [
            stat(1, 0, 1, err(ENOENT)),
            create(1, 0o600, 2, 3, Outcome::Ok),
            stat(2, 4, 5, mode(0o600)),
            create(2, 0o644, 6, 7, err(EEXIST)),
            chmod(2, 0o644, 8, 9, Outcome::Ok),
            stat(1, 10, 11, mode(0o644)),
            unlink(1, 12, 13, Outcome::Ok),
            unlink(2, 14, 15, err(ENOENT)),
            chmod(1, 0o600, 16, 17, err(ENOENT)),
            stat(2, 18, 19, err(ENOENT)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn stale_stat_after_a_completed_chmod_is_a_violation() {
        let h = [
            create(1, 0o600, 0, 1, Outcome::Ok),
            stat(2, 2, 3, mode(0o600)),
            chmod(1, 0o644, 4, 5, Outcome::Ok),
            // Invoked after the chmod returned, yet sees the old mode.
            stat(2, 6, 7, mode(0o600)),
        ];
        let c = culprit(&h);
        assert_eq!((c.kind, c.invoke_ns), (OpKind::Stat, 6000));
        match verdict(&h) {
            Verdict::Violation(v) => {
                assert_eq!(v.states, vec![State::Present(0o644, 0)]);
                let text = v.explain("/f", 0);
                assert!(text.contains("returned mode 0600"), "{text}");
                assert!(text.contains("the path is present with mode 0644"), "{text}");
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn stat_that_sees_a_file_after_its_unlink_completed_is_a_violation() {
        let h = [create(1, 0o600, 0, 1, Outcome::Ok), unlink(1, 2, 3, Outcome::Ok), stat(2, 4, 5, mode(0o600))];
        let c = culprit(&h);
        assert_eq!(c.kind, OpKind::Stat);
    }

    #[test]
    fn overlapping_operations_that_can_be_ordered_are_linearizable() {
        // The stats overlap the chmod: one sees the old mode, the other the new,
        // and the order old-then-new is possible.
        let h = [
            create(1, 0o600, 0, 1, Outcome::Ok),
            chmod(1, 0o644, 10, 20, Outcome::Ok),
            stat(2, 11, 13, mode(0o644)),
            stat(3, 12, 19, mode(0o644)),
            stat(4, 9, 15, mode(0o600)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
        // Two creates race: exactly one may win.
        let race =
            [create(1, 0o600, 0, 10, Outcome::Ok), create(2, 0o644, 1, 9, err(EEXIST)), stat(3, 11, 12, mode(0o600))];
        assert_eq!(verdict(&race), Verdict::Linearizable);
        let both_win = [create(1, 0o600, 0, 10, Outcome::Ok), create(2, 0o644, 1, 9, Outcome::Ok)];
        culprit(&both_win);
    }

    #[test]
    fn a_later_read_chooses_the_order_of_concurrent_writes() {
        // The search first takes the chmods in invocation order (ending at 0644),
        // which the stat refutes; the other order reaches the same set of operations
        // in another state, and the memo must not confuse the two.
        let h = [
            create(1, 0o700, 0, 1, Outcome::Ok),
            chmod(1, 0o600, 10, 20, Outcome::Ok),
            chmod(2, 0o644, 11, 20, Outcome::Ok),
            stat(3, 21, 22, mode(0o600)),
        ];
        assert_eq!(verdict(&h), Verdict::Linearizable);
    }

    #[test]
    fn overlapping_reads_must_agree_on_one_order() {
        // Both stats overlap the chmod, but the one that saw the new mode returned
        // before the other, which saw the old mode, was invoked: no order.
        let h = [
            create(1, 0o600, 0, 1, Outcome::Ok),
            chmod(1, 0o644, 10, 30, Outcome::Ok),
            stat(2, 11, 12, mode(0o644)),
            stat(3, 13, 14, mode(0o600)),
        ];
        let c = culprit(&h);
        assert_eq!((c.process, c.kind), (3, OpKind::Stat));
    }

    #[test]
    fn an_operation_that_never_returned_may_take_effect_or_not() {
        // A killed process's create: later stats may see the file...
        let taken = [create(1, 0o600, 0, 0, Outcome::Unknown), stat(2, 5, 6, mode(0o600))];
        assert_eq!(verdict(&taken), Verdict::Linearizable);
        // ...or not...
        let not_taken = [create(1, 0o600, 0, 0, Outcome::Unknown), stat(2, 5, 6, err(ENOENT))];
        assert_eq!(verdict(&not_taken), Verdict::Linearizable);
        // ...or not at first and then yes (it was still in flight)...
        let late = [create(1, 0o600, 0, 0, Outcome::Unknown), stat(2, 5, 6, err(ENOENT)), stat(2, 7, 8, mode(0o600))];
        assert_eq!(verdict(&late), Verdict::Linearizable);
        // ...but never before it was invoked, and never twice.
        let early = [stat(2, 1, 2, mode(0o600)), create(1, 0o600, 5, 5, Outcome::Unknown)];
        culprit(&early);
        let flicker =
            [create(1, 0o600, 0, 0, Outcome::Unknown), stat(2, 5, 6, mode(0o600)), stat(2, 7, 8, err(ENOENT))];
        culprit(&flicker);
    }

    #[test]
    fn an_error_outside_the_model_counts_as_unknown_effect() {
        let eio = err(libc::EIO);
        let h = [
            create(1, 0o600, 0, 1, Outcome::Ok),
            chmod(1, 0o644, 2, 3, eio),
            stat(2, 4, 5, mode(0o600)),
            stat(2, 6, 7, mode(0o644)),
            stat(3, 8, 9, eio),
        ];
        let r = check(&h, &Limits::default());
        assert_eq!(r.paths[0].verdict, Verdict::Linearizable);
        assert_eq!((r.indeterminate, r.never_returned), (2, 0));
    }

    #[test]
    fn paths_are_checked_apart() {
        let mut a = create(1, 0o600, 0, 1, Outcome::Ok);
        a.path = "/a".into();
        let mut b = stat(2, 2, 3, mode(0o600));
        b.path = "/b".into();
        let r = check(&[a, b], &Limits::default());
        assert_eq!(r.paths.len(), 2);
        assert_eq!(r.paths[0].verdict, Verdict::Linearizable);
        assert!(matches!(r.paths[1].verdict, Verdict::Violation(_)), "/b was never created");
        assert_eq!(r.linearizable(), Some(false));
    }

    #[test]
    fn a_search_past_its_limit_is_undecided() {
        let h: Vec<Op> = (0..50).map(|i| stat(i % 4, i as u64 * 10, i as u64 * 10 + 5, err(ENOENT))).collect();
        let r = check(&h, &Limits { steps_per_path_max: 10, deadline: None });
        assert_eq!(r.paths[0].verdict, Verdict::TooBig);
        assert_eq!(r.linearizable(), None);
        assert_eq!(check(&h, &Limits::default()).linearizable(), Some(true));
    }

    #[test]
    fn many_concurrent_processes_stay_cheap() {
        // 8 processes, 4000 operations, every op overlapping its 7 neighbours; a
        // chmod per round and stats that all see it.
        let mut h = vec![create(0, 0o600, 0, 1, Outcome::Ok)];
        for round in 0..500u64 {
            let t = 10 + round * 100;
            let m = 0o600 | (round as u32 % 8);
            h.push(chmod(0, m, t, t + 50, Outcome::Ok));
            for p in 1..8 {
                h.push(stat(p, t + 51 + p as u64, t + 90, mode(m)));
            }
        }
        let r = check(&h, &Limits::default());
        assert_eq!(r.linearizable(), Some(true));
        assert!(r.paths[0].steps < 100_000, "{} steps", r.paths[0].steps);
    }
}
