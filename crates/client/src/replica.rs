//! Replicas: with `gust start --replicas R`, every record and chunk lives on R
//! daemons, and the client keeps them so. The copies are the client's doing, here,
//! below every operation (daemons only heartbeat each other for leases).
//!
//! Every call names the daemon placement chose (a record's, a chunk's); its copies
//! are on that daemon's replica group (gust_placement's `replica_group`: it and the
//! next R-1 ids). By request:
//!
//! * changes (create, write, remove, size, attributes, ...) go to every member of
//!   the group that is not down, in parallel; the answer is the first member's that
//!   answered (in group order). A write returns once every live copy has it, and
//!   once a member it went without is fenced (fence.rs).
//! * keyed reads (stat, read) go to the first member that is not down; if it fails
//!   (transport error), the next member is asked, round by round.
//! * questions to one daemon as itself (listings, scans, capacity, counters, ping)
//!   go where addressed; callers that ask every daemon skip the down ones and keep
//!   each record from one daemon only ([`Client::keeps`]).
//!
//! A daemon is *down* from a transport failure (refused or failed connection, no or
//! broken reply, a timeout) or when it answers EHOSTDOWN (restarted after a crash,
//! it refuses to serve until repaired: docs/DESIGN.md) until `DOWN_SKIP` later:
//! meanwhile calls skip it at no cost, then one call tries it again. The bound on an
//! operation meeting a dead daemon is therefore one failure: a refused connection
//! (immediate), a connect timeout (at most 5 s), or for a hung daemon the RPC
//! timeout (GUST_RPC_TIMEOUT_MS, default 30 s); then at most `DOWN_SKIP` of skipping.
//! With R = 1 nothing is skipped: every call to a dead daemon fails with EIO within
//! the same bound, as before.
//!
//! Not for: where things live (gust_placement), framing and connections (rpc.rs).

use crate::integrity::CORRUPT;
use crate::rpc::{Answer, Call, Dest, Transport};
use crate::{Client, Errno};
use gust_placement::replica_group;
use gust_placement::Distributor;
use gust_proto::{Copies, Request, Response, TraceClass};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long a daemon found down is skipped before it is tried again.
pub const DOWN_SKIP: Duration = Duration::from_secs(5);

/// Where a request goes in a replicated instance: the request table's fact
/// (gust-proto's `copies(...)`), which every request states; in an erasure-coded
/// instance a request on chunks goes to the daemon of its cell alone (ec/).
fn route(req: &Request, erasure_coded: bool) -> Copies {
    let on_chunks =
        matches!(req.trace_class(), TraceClass::ChunkRead | TraceClass::ChunkWrite | TraceClass::ChunkOther);
    match erasure_coded && on_chunks {
        true => Copies::Addressed,
        false => req.copies(),
    }
}

impl Transport {
    pub(crate) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Skips `daemon` for `DOWN_SKIP` (replicated instances only).
    pub(crate) fn mark_down(&self, daemon: u32) {
        if self.replicas > 1 {
            let until = self.now_ms() + DOWN_SKIP.as_millis() as u64;
            self.down_until_ms[daemon as usize].store(until, Ordering::Relaxed);
        }
    }

    /// Whether `daemon` was found down less than `DOWN_SKIP` ago.
    pub(crate) fn is_down(&self, daemon: u32) -> bool {
        self.replicas > 1 && self.down_until_ms[daemon as usize].load(Ordering::Relaxed) > self.now_ms()
    }

    fn group(&self, primary: u32) -> impl Iterator<Item = u32> {
        replica_group(primary, self.replicas, self.placed())
    }

    /// An answer that says the daemon is not there (rather than what it thinks).
    fn unavailable(&self, daemon: u32, a: &Answer) -> bool {
        match a {
            Err(Errno(libc::EHOSTDOWN)) => {
                self.mark_down(daemon);
                true
            }
            Err(Errno(libc::EIO)) => self.is_down(daemon),
            _ => false,
        }
    }

    fn down_error(&self, daemon: u32) -> Errno {
        let msg = format!("daemon {daemon} is down (skipped for {} s after a failure)", DOWN_SKIP.as_secs());
        *self.last_error_slot() = Some(msg);
        Errno(libc::EIO)
    }

    /// Sends every call, with copies as the module doc says, then collects one
    /// answer per call, in order (rpc.rs's `send_batch` sends each copy).
    pub fn batch(&self, calls: Vec<Call<'_>>) -> Vec<Answer> {
        let dests = calls.iter().map(|_| None).collect();
        self.batch_into(calls, dests, &mut [])
    }

    /// Sends every call, with copies as the module doc says, then collects one
    /// answer per call, in order. With Read replies delivered into `buf` at the
    /// positions `dests` give.
    pub fn batch_into(&self, calls: Vec<Call<'_>>, dests: Vec<Option<Dest>>, buf: &mut [u8]) -> Vec<Answer> {
        if self.replicas <= 1 {
            let daemons: Vec<u32> = calls.iter().map(|c| c.daemon).collect();
            let mut answers = self.send_batch(calls, dests, buf);
            for (a, d) in answers.iter_mut().zip(daemons) {
                if matches!(a, Err(Errno(CORRUPT))) {
                    *a = Err(self.corrupt_error(d, false));
                }
            }
            return answers;
        }
        let mut fan = Fanout::new(calls.len());
        for (i, c) in calls.iter().enumerate() {
            self.first_members(&mut fan, i, c, &dests[i]);
        }
        loop {
            let got = self.send_batch(std::mem::take(&mut fan.subs), std::mem::take(&mut fan.sub_dests), buf);
            let mut retry: Vec<(usize, u32)> = Vec::new();
            for ((i, m), a) in std::mem::take(&mut fan.sent).into_iter().zip(got) {
                if let Some(next) = self.judge(&mut fan, route(&calls[i].req, self.erasure_coded), i, m, a) {
                    retry.push((i, next));
                }
            }
            if retry.is_empty() {
                break;
            }
            for (i, d) in retry {
                fan.answers[i] = None;
                fan.send(i, d, &calls[i], &dests[i]);
            }
        }
        self.settle_answers(fan, &calls)
    }

    /// The members call `i` goes to first: every live member for a change, the
    /// first live one for a read (the others wait in `untried`), the addressed
    /// daemon for the rest. A call without a live member is answered EIO now.
    fn first_members<'a>(&self, fan: &mut Fanout<'a>, i: usize, c: &Call<'a>, dest: &Option<Dest>) {
        let r = route(&c.req, self.erasure_coded);
        let members: Vec<u32> = match r {
            Copies::Addressed if self.is_down(c.daemon) => Vec::new(),
            Copies::Addressed => vec![c.daemon],
            Copies::All => {
                let (live, down): (Vec<u32>, Vec<u32>) = self.group(c.daemon).partition(|m| !self.is_down(*m));
                fan.skipped.extend(down.into_iter().map(|m| (i, m)));
                live
            }
            Copies::First => {
                let live: Vec<u32> = self.group(c.daemon).filter(|m| !self.is_down(*m)).collect();
                fan.untried[i] = live.iter().skip(1).copied().collect();
                live.into_iter().take(1).collect()
            }
        };
        if members.is_empty() {
            fan.answers[i] = Some(Err(self.down_error(c.daemon)));
        }
        for m in members {
            fan.send(i, m, c, dest);
        }
    }

    /// Takes member `m`'s answer `a` to call `i` (routed `r`); the member to ask
    /// next, if a read must go on to another.
    fn judge(&self, fan: &mut Fanout<'_>, r: Copies, i: usize, m: u32, a: Answer) -> Option<u32> {
        if matches!(a, Err(Errno(CORRUPT))) && r == Copies::First {
            // Not down: only this data is bad there. The next member is asked.
            fan.corrupt.push((i, m));
            let next = fan.next_untried(i, |d| self.is_down(d));
            if next.is_none() && fan.answers[i].is_none() {
                fan.answers[i] = Some(Err(self.corrupt_error(m, true)));
            }
            return next;
        }
        if matches!(a, Err(Errno(libc::EBADMSG))) && r == Copies::First {
            // Arrived corrupt twice from this member (integrity.rs): its copy may be
            // fine, the way from it is not. The next member is asked.
            let next = fan.next_untried(i, |d| self.is_down(d));
            if next.is_none() && fan.answers[i].is_none() {
                fan.answers[i] = Some(Err(Errno(libc::EIO)));
            }
            return next;
        }
        if self.unavailable(m, &a) {
            if r == Copies::All {
                fan.skipped.push((i, m));
            }
            if r == Copies::First {
                if let Some(next) = fan.next_untried(i, |d| self.is_down(d)) {
                    return Some(next);
                }
            }
            if fan.answers[i].is_none() {
                // Kept only if no member answers (an answer replaces it).
                fan.answers[i] = Some(Err(Errno(libc::EIO)));
            }
            return None;
        }
        self.serving(m);
        // The first member to answer decides (members were sent in group order).
        match &fan.answers[i] {
            Some(Ok(_)) => {}
            Some(Err(prev)) if *prev != Errno(libc::EIO) => {}
            _ => {
                fan.answers[i] = Some(a);
                fan.answered_by[i] = Some(m);
            }
        }
        None
    }

    /// The answers once every round is in: changes that went without a member are
    /// fenced first (fence.rs), corrupt copies repaired from the member that
    /// answered (integrity.rs).
    fn settle_answers(&self, fan: Fanout<'_>, calls: &[Call<'_>]) -> Vec<Answer> {
        let mut answers: Vec<Answer> = fan.answers.into_iter().map(|a| a.unwrap_or(Err(Errno(libc::EIO)))).collect();
        if !fan.skipped.is_empty() {
            self.fence_before_acknowledging(&fan.skipped, &mut answers);
        }
        for (i, bad) in fan.corrupt {
            if let (Ok(_), Some(good)) = (&answers[i], fan.answered_by[i]) {
                self.repair_blocks(&calls[i].req, good, bad);
            }
        }
        for (a, c) in answers.iter_mut().zip(calls) {
            match a {
                Err(Errno(CORRUPT)) => *a = Err(self.corrupt_error(c.daemon, true)),
                // The last error says why (integrity.rs, `corrupt_arrival`).
                Err(Errno(libc::EBADMSG)) if matches!(c.req, Request::Read { .. }) => *a = Err(Errno(libc::EIO)),
                _ => {}
            }
        }
        answers
    }

    pub fn call(&self, daemon: u32, req: Request) -> Result<Response, Errno> {
        let mut v = self.batch(vec![Call { daemon, req, bulk: Vec::new() }]);
        v.pop().expect("one answer").map(|(r, _)| r)
    }
}

impl Client {
    /// Copies of every record and chunk.
    pub fn replicas(&self) -> u32 {
        self.transport.replicas
    }

    /// Skips `daemon` from now on, as if found down, for as long as this client
    /// lives (`gust repair` while it rebuilds the daemon it stopped: records are
    /// then kept from the other members from the first page on).
    pub fn skip_daemon(&self, daemon: u32) {
        if self.transport.replicas > 1 {
            self.transport.down_until_ms[daemon as usize].store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// Whether this client found `daemon` down lately (it is skipped meanwhile).
    pub fn daemon_down(&self, daemon: u32) -> bool {
        self.transport.is_down(daemon)
    }

    /// Whether a record of `path` that `daemon` sent in a listing or scan is the
    /// one to keep: with copies on several daemons, each record counts once, from
    /// the first live member of its group.
    pub(crate) fn keeps(&self, daemon: u32, path: &str) -> bool {
        if self.transport.replicas <= 1 {
            return true;
        }
        self.first_live(self.md_daemon(path)) == daemon
    }

    /// The first member of `primary`'s group not found down: where a record's locks
    /// live (locks.rs), and the member whose copy of it counts (`keeps`).
    pub(crate) fn first_live(&self, primary: u32) -> u32 {
        if self.transport.replicas <= 1 {
            return primary;
        }
        self.transport.group(primary).find(|m| !self.transport.is_down(*m)).unwrap_or(primary)
    }

    /// Which daemons do not serve now, asked of each at once (one `stat /` per
    /// daemon; every daemon serves in an instance without copies). A fan-out that
    /// counts each record once (`find`) decides from this, not from what is known
    /// as pages arrive: a daemon first found down by its own page would otherwise
    /// have had its records passed over by the others already.
    pub(crate) fn down_now(&self) -> Vec<bool> {
        let n = self.daemon_count();
        if self.transport.replicas <= 1 {
            return vec![false; n as usize];
        }
        let calls: Vec<Call> =
            (0..n).map(|daemon| Call { daemon, req: Request::Stat { path: "/".into() }, bulk: Vec::new() }).collect();
        let answers = self.transport.send_batch(calls, vec![None; n as usize], &mut []);
        answers
            .iter()
            .enumerate()
            .map(|(d, a)| matches!(a, Err(e) if self.skippable(d as u32, *e) || *e == Errno(libc::EIO)))
            .collect()
    }

    /// `keeps`, with the daemons down decided beforehand (`down_now`).
    pub(crate) fn keeps_given(&self, daemon: u32, path: &str, down: &[bool]) -> bool {
        if self.transport.replicas <= 1 {
            return true;
        }
        let primary = self.md_daemon(path);
        self.transport.group(primary).find(|m| !down[*m as usize]).unwrap_or(primary) == daemon
    }

    /// `keeps` for entry `name` of directory `dir`: the path is joined only when
    /// there are copies to tell apart (a listing asks this once per entry).
    pub(crate) fn keeps_child(&self, daemon: u32, dir: &str, name: &str) -> bool {
        self.transport.replicas <= 1 || self.keeps(daemon, &gust_proto::path::join(dir, name))
    }

    /// Whether a failure of a question to `daemon` as itself may be passed over:
    /// in a replicated instance, a down daemon's records have copies elsewhere.
    pub(crate) fn skippable(&self, daemon: u32, e: Errno) -> bool {
        self.transport.replicas > 1 && (e == Errno(libc::EHOSTDOWN) || self.transport.is_down(daemon))
    }
}

impl Client {
    /// Whether `daemon` is recovering (restarted after a crash in a replicated
    /// instance, refusing to serve until repaired). EIO if it does not answer.
    pub fn daemon_recovering(&self, daemon: u32) -> crate::Result<bool> {
        let call = Call { daemon, req: Request::Stat { path: "/".into() }, bulk: Vec::new() };
        match self.transport.send_batch(vec![call], vec![None], &mut []).pop().expect("one answer") {
            Err(Errno(libc::EHOSTDOWN)) => Ok(true),
            Err(Errno(libc::EIO)) => Err(Errno(libc::EIO)),
            _ => Ok(false),
        }
    }
}

/// For `gust status`: given the daemons that do not serve (down or recovering),
/// the daemons whose records and chunks have fewer copies than `replicas`
/// (under-replicated) and those whose have none left, as primaries.
pub fn degraded_primaries(bad: &[u32], replicas: u32, daemons: u32) -> (Vec<u32>, Vec<u32>) {
    let mut under = Vec::new();
    let mut lost = Vec::new();
    for p in 0..daemons {
        let bad_members = replica_group(p, replicas, daemons).filter(|m| bad.contains(m)).count() as u32;
        if bad_members > 0 {
            under.push(p);
        }
        if bad_members == replicas {
            lost.push(p);
        }
    }
    (under, lost)
}

impl Client {
    /// The daemons holding the copies of `path`'s record (`gust repair`).
    pub fn record_holders(&self, path: &str) -> Vec<u32> {
        self.transport.group(self.md_daemon(path)).collect()
    }

    /// The daemons holding the copies of chunk `chunk` of file `file_id` where
    /// placement puts it first (a chunk spilled past a full daemon is elsewhere).
    pub fn chunk_holders(&self, file_id: u128, chunk: u64) -> Vec<u32> {
        if self.transport.erasure_coded {
            // One data cell; its parity: `cells_on` (ec/).
            return vec![self.dist.locate_chunk(file_id, chunk)];
        }
        self.transport.group(self.dist.locate_chunk(file_id, chunk)).collect()
    }
}

/// One replicated batch in flight: per call its answer so far, and the copies sent
/// in the current round.
struct Fanout<'a> {
    answers: Vec<Option<Answer>>,
    /// For First calls: the group members not yet tried.
    untried: Vec<Vec<u32>>,
    /// (call index, member) of each call sent this round.
    sent: Vec<(usize, u32)>,
    subs: Vec<Call<'a>>,
    sub_dests: Vec<Option<Dest>>,
    /// (call index, member) of each change that went without a member: fenced
    /// before the change is acknowledged (fence.rs).
    skipped: Vec<(usize, u32)>,
    /// (call index, member) of each read a member answered EUCLEAN (a corrupt
    /// block: integrity.rs).
    corrupt: Vec<(usize, u32)>,
    /// Per call, the member whose answer counts.
    answered_by: Vec<Option<u32>>,
}

impl<'a> Fanout<'a> {
    fn new(calls: usize) -> Self {
        Fanout {
            answers: (0..calls).map(|_| None).collect(),
            untried: vec![Vec::new(); calls],
            sent: Vec::new(),
            subs: Vec::new(),
            sub_dests: Vec::new(),
            skipped: Vec::new(),
            corrupt: Vec::new(),
            answered_by: vec![None; calls],
        }
    }

    /// Call `i`'s copy to member `m`, for this round.
    fn send(&mut self, i: usize, m: u32, c: &Call<'a>, dest: &Option<Dest>) {
        self.sent.push((i, m));
        self.subs.push(Call { daemon: m, req: c.req.clone(), bulk: c.bulk.clone() });
        self.sub_dests.push(dest.clone());
    }

    /// The next member of call `i` not tried yet and not `down`, taken off the list.
    fn next_untried(&mut self, i: usize, down: impl Fn(u32) -> bool) -> Option<u32> {
        let next = self.untried[i].iter().position(|d| !down(*d))?;
        Some(self.untried[i].remove(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read goes on to the next member not known to be down, in group order, and
    /// each member is tried once.
    #[test]
    fn a_read_tries_each_live_member_once_in_order() {
        let mut fan = Fanout::new(2);
        fan.untried[1] = vec![4, 5, 6];
        let down = |d: u32| d == 5;
        assert_eq!(fan.next_untried(1, down), Some(4));
        assert_eq!(fan.next_untried(1, down), Some(6));
        assert_eq!(fan.next_untried(1, down), None, "5 is down, 4 and 6 were tried");
        assert_eq!(fan.untried[1], vec![5]);
        assert_eq!(fan.next_untried(0, down), None, "call 0 has no other member");
    }

    /// Each copy sent names its call and member, with the call's request and bulk.
    #[test]
    fn copies_of_a_call_carry_its_request_to_each_member() {
        let data = [7u8; 3];
        let call = Call { daemon: 1, req: Request::Ping, bulk: vec![&data[..]] };
        let mut fan = Fanout::new(1);
        fan.send(0, 1, &call, &None);
        fan.send(0, 2, &call, &None);
        assert_eq!(fan.sent, vec![(0, 1), (0, 2)]);
        assert_eq!(fan.subs.iter().map(|c| c.daemon).collect::<Vec<_>>(), vec![1, 2]);
        assert!(fan.subs.iter().all(|c| c.req == Request::Ping && c.bulk == vec![&data[..]]));
    }
}
