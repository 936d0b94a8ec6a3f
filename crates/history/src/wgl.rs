//! The linearizability search of Wing & Gong, with Lowe's memoization, as Porcupine
//! implements it, for the register of [`crate::model`].
//!
//! The history is a list of call and return events in time order. The search walks
//! it: at a call, it tries to make that operation take effect now (the model must
//! allow its result); if so, it removes the call and its return from the list
//! ("lifts" it), pushes it on a stack and starts again from the head. At a return
//! whose operation has not taken effect, no order works from here: it pops the last
//! operation and tries the next call after it. The history is linearizable when the
//! list empties, and is not when the stack is empty at a return.
//!
//! Memoization: a configuration is (set of operations taken, state). Reaching one a
//! second time cannot succeed where the first failed, so it is skipped. The set is
//! kept as a 128-bit Zobrist hash (XOR of a random value per operation), updated in
//! O(1) per step and 16 bytes per cached configuration, which bounds memory on
//! histories of millions of operations; two different sets share a hash with
//! probability about 2^-128 per pair, far below any chance of a checker bug.
//!
//! Cost: with P processes, at most P operations (plus those that never returned)
//! are concurrent at any point, so the search is about linear in the operations
//! times 2^(concurrent); [`Limits`] bounds it anyway.

use crate::format::{OpKind, Outcome};
use crate::model::{self, State};
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

/// One operation as the search sees it.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub kind: OpKind,
    pub arg: u32,
    /// [`Outcome::Unknown`] for an operation whose effect is unknown.
    pub result: Outcome,
    pub invoke_ns: u64,
    /// [`RETURN_NEVER`] for an operation whose effect is unknown.
    pub return_ns: u64,
}

/// Bounds on one search.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub steps_max: u64,
    pub deadline: Option<Instant>,
}

/// What the search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    Linearizable,
    /// No order works. `culprit`: the operation whose return the search could not
    /// get past in the furthest it got; `states`: the states in which it could
    /// have taken effect there (none of which gives its result).
    Violation {
        culprit: usize,
        states: Vec<State>,
    },
    /// A limit was reached first.
    TooBig,
}

/// Bound on the distinct states recorded per operation for an explanation: more
/// than this many says nothing more to a reader.
const STATES_SHOWN_MAX: usize = 16;

const NIL: usize = usize::MAX;
const HEAD: usize = 0;

/// The event list: node 0 is the head; node 1 + k is the k-th event in time order.
struct Events {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// The operation of each node.
    op: Vec<usize>,
    /// For a call node, its return node; NIL for a return node.
    ret: Vec<usize>,
}

impl Events {
    fn new(calls: &[Call]) -> Events {
        // (time, 0 for a call and 1 for a return, operation): at equal times a call
        // comes first, which makes the two operations concurrent (the permissive
        // reading of a tie).
        let mut ev: Vec<(u64, u8, usize)> = Vec::with_capacity(calls.len() * 2);
        for (i, c) in calls.iter().enumerate() {
            assert!(c.return_ns >= c.invoke_ns, "operation {i} returns before it is invoked");
            ev.push((c.invoke_ns, 0, i));
            ev.push((c.return_ns, 1, i));
        }
        ev.sort_unstable();
        let n = ev.len() + 1;
        let mut e = Events { next: vec![NIL; n], prev: vec![NIL; n], op: vec![NIL; n], ret: vec![NIL; n] };
        let mut call_node = vec![NIL; calls.len()];
        for (k, &(_, is_return, op)) in ev.iter().enumerate() {
            let node = k + 1;
            e.prev[node] = k;
            e.next[k] = node;
            e.op[node] = op;
            if is_return == 0 {
                call_node[op] = node;
            } else {
                e.ret[call_node[op]] = node;
            }
        }
        e
    }

    fn is_call(&self, node: usize) -> bool {
        self.ret[node] != NIL
    }

    /// Removes a call and its return from the list.
    fn lift(&mut self, call: usize) {
        for node in [call, self.ret[call]] {
            let (p, n) = (self.prev[node], self.next[node]);
            self.next[p] = n;
            if n != NIL {
                self.prev[n] = p;
            }
        }
    }

    /// Puts back what `lift(call)` removed (the nodes kept their links).
    fn unlift(&mut self, call: usize) {
        for node in [self.ret[call], call] {
            let (p, n) = (self.prev[node], self.next[node]);
            self.next[p] = node;
            if n != NIL {
                self.prev[n] = node;
            }
        }
    }
}

/// The Zobrist value of operation `i`: splitmix64 of its index, twice.
fn zobrist(i: usize) -> u128 {
    fn splitmix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let i = i as u64;
    ((splitmix(2 * i) as u128) << 64) | splitmix(2 * i + 1) as u128
}

/// The cache's keys are random already: hash them by folding, not by SipHash.
#[derive(Default)]
struct Fold(u64);

impl Hasher for Fold {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ *b as u64;
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 ^= (v as u64) ^ (v >> 64) as u64;
    }
    fn write_u16(&mut self, v: u16) {
        self.0 = self.0.wrapping_mul(0x100_0000_01b3) ^ v as u64;
    }
    fn write_isize(&mut self, v: isize) {
        self.0 = self.0.wrapping_mul(0x100_0000_01b3) ^ v as u64;
    }
}

/// Searches for a linearization of `calls` (the operations on one path), starting
/// from an absent path. Returns what it found and the steps it took.
pub fn search(calls: &[Call], limits: &Limits) -> (Found, u64) {
    if calls.is_empty() {
        return (Found::Linearizable, 0);
    }
    let mut ev = Events::new(calls);
    let mut cache: HashSet<(u128, State), BuildHasherDefault<Fold>> = HashSet::default();
    let mut stack: Vec<(usize, State)> = Vec::new();
    // States in which each operation was tried, for the explanation of a violation.
    let mut tried: Vec<Vec<State>> = vec![Vec::new(); calls.len()];
    let mut furthest = 0;
    let mut state = State::Absent;
    let mut taken: u128 = 0;
    let mut node = ev.next[HEAD];
    let mut steps = 0u64;
    while ev.next[HEAD] != NIL {
        steps += 1;
        if steps >= limits.steps_max
            || (steps.is_multiple_of(4096) && limits.deadline.is_some_and(|d| Instant::now() >= d))
        {
            return (Found::TooBig, steps);
        }
        let op = ev.op[node];
        if ev.is_call(node) {
            let c = &calls[op];
            if tried[op].len() < STATES_SHOWN_MAX && !tried[op].contains(&state) {
                tried[op].push(state);
            }
            let next_state = model::step(state, c.kind, c.arg, c.result);
            match next_state {
                Some(s) if cache.insert((taken ^ zobrist(op), s)) => {
                    stack.push((node, state));
                    state = s;
                    taken ^= zobrist(op);
                    ev.lift(node);
                    node = ev.next[HEAD];
                }
                _ => node = ev.next[node],
            }
        } else {
            // The return of an operation not taken: undo the last one taken.
            furthest = furthest.max(node);
            let Some((call, s)) = stack.pop() else {
                let culprit = ev.op[furthest];
                let mut states = std::mem::take(&mut tried[culprit]);
                states.sort_by_key(|s| match s {
                    State::Absent => -1,
                    State::Present(m, x) => (*m as i32) << 8 | *x as i32,
                });
                return (Found::Violation { culprit, states }, steps);
            };
            state = s;
            taken ^= zobrist(ev.op[call]);
            ev.unlift(call);
            node = ev.next[call];
        }
    }
    (Found::Linearizable, steps)
}
