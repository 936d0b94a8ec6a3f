//! The lock table alone: conflicts, splits and merges, waits and their wakes,
//! deadlocks, flock's conversions, bounds, a client's end.

use super::*;
use gust_proto::LOCK_END_EOF as EOF;

const F: u128 = 7;

fn o(client: u64, owner: u64) -> Owner {
    Owner { client, owner }
}

fn want(owner: Owner, kind: LockKind, mode: LockMode, start: u64, end: u64) -> Want {
    Want { owner, kind, mode, start, end, pid: owner.client as i32 }
}

fn posix(owner: Owner, mode: LockMode, start: u64, end: u64) -> Want {
    want(owner, LockKind::Posix, mode, start, end)
}

fn flock(owner: Owner, mode: LockMode) -> Want {
    want(owner, LockKind::Flock, mode, 0, EOF)
}

use LockMode::{Read, Unlock, Write};

/// The owner's locks of `file` as (start, end, write), sorted.
fn locks_of(t: &Table, file: u128, owner: Owner) -> Vec<(u64, u64, bool)> {
    let mut v: Vec<(u64, u64, bool)> = t
        .files
        .get(&file)
        .map(|f| f.held.iter().filter(|h| h.owner == owner).map(|h| (h.start, h.end, h.write)).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn readers_share_writers_exclude_and_owners_never_conflict_with_themselves() {
    let mut t = Table::default();
    let (a, b) = (o(1, 0), o(2, 0));
    assert_eq!(t.lock(F, posix(a, Read, 0, 10), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, posix(b, Read, 5, 20), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, posix(b, Write, 5, 20), None).outcome, Outcome::WouldBlock);
    assert_eq!(locks_of(&t, F, b), vec![(5, 20, false)], "a failed upgrade keeps the read lock (POSIX)");
    assert_eq!(t.lock(F, posix(b, Write, 10, 20), None).outcome, Outcome::Granted, "past a's range");
    assert_eq!(t.lock(F, posix(a, Write, 0, 5), None).outcome, Outcome::Granted, "a's own read lock is no conflict");
    let d = t.lock(F, posix(o(3, 0), Write, 0, 1), None);
    assert_eq!((d.outcome, d.blockers), (Outcome::WouldBlock, vec![1]));
    // Another file, another space: no conflict.
    assert_eq!(t.lock(F + 1, posix(b, Write, 0, EOF), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, flock(b, Write), None).outcome, Outcome::Granted, "flock has a space of its own");
    assert_eq!(t.counts(), (6, 0));
}

#[test]
fn a_lock_splits_and_merges_its_owners_ranges() {
    let mut t = Table::default();
    let a = o(1, 0);
    t.lock(F, posix(a, Write, 0, 100), None);
    t.lock(F, posix(a, Read, 40, 60), None);
    assert_eq!(locks_of(&t, F, a), vec![(0, 40, true), (40, 60, false), (60, 100, true)]);
    t.lock(F, posix(a, Unlock, 50, 70), None);
    assert_eq!(locks_of(&t, F, a), vec![(0, 40, true), (40, 50, false), (70, 100, true)]);
    t.lock(F, posix(a, Write, 40, 70), None);
    assert_eq!(locks_of(&t, F, a), vec![(0, 100, true)], "neighbours of one mode merge");
    t.lock(F, posix(a, Read, 100, EOF), None);
    t.lock(F, posix(a, Unlock, 0, EOF), None);
    assert_eq!(locks_of(&t, F, a), vec![]);
    assert_eq!(t.counts(), (0, 0));
    assert!(t.files.is_empty() && t.clients.is_empty(), "nothing left behind");
}

#[test]
fn an_ofd_lock_and_a_posix_lock_of_one_process_conflict() {
    let mut t = Table::default();
    let (process, ofd) = (o(1, 0), o(1, 5));
    t.lock(F, posix(process, Write, 0, 10), None);
    assert_eq!(t.lock(F, want(ofd, LockKind::Ofd, Read, 0, 1), None).outcome, Outcome::WouldBlock);
    let info = t.test(F, &want(ofd, LockKind::Ofd, Read, 0, 1)).unwrap();
    assert_eq!((info.mode, info.start, info.end, info.pid), (Write, 0, 10, 1));
    assert_eq!(t.test(F, &posix(process, Write, 0, 10)), None, "its own lock is no conflict");
}

#[test]
fn a_wait_is_granted_when_the_holder_unlocks_in_order() {
    let mut t = Table::default();
    let (a, b, c) = (o(1, 0), o(2, 0), o(3, 0));
    t.lock(F, posix(a, Write, 0, EOF), None);
    assert_eq!(t.lock(F, posix(b, Write, 0, 10), Some(11)).outcome, Outcome::Queued);
    assert_eq!(t.lock(F, posix(c, Read, 5, 6), Some(12)).outcome, Outcome::Queued);
    assert_eq!(t.counts(), (1, 2));
    assert_eq!(t.blocking_clients(), HashSet::from([1]));
    let d = t.lock(F, posix(a, Unlock, 0, EOF), None);
    assert_eq!(d.wakes, vec![Wake { client: 2, token: 11, errno: 0 }], "c still conflicts with b's write lock");
    assert_eq!(locks_of(&t, F, b), vec![(0, 10, true)]);
    let d = t.lock(F, posix(b, Read, 0, 10), None);
    assert_eq!(d.wakes, vec![Wake { client: 3, token: 12, errno: 0 }], "a downgrade lets the reader in");
    assert_eq!(t.counts(), (2, 0));
}

#[test]
fn a_cancelled_wait_is_gone_and_a_resent_one_replaces_the_first() {
    let mut t = Table::default();
    let (a, b) = (o(1, 0), o(2, 0));
    t.lock(F, posix(a, Write, 0, 1), None);
    t.lock(F, posix(b, Write, 0, 1), Some(4));
    t.lock(F, posix(b, Write, 0, 1), Some(4));
    assert_eq!(t.counts(), (1, 1), "the same token again is the same wait");
    assert!(t.cancel(2, 4));
    assert!(!t.cancel(2, 4), "not waiting any more");
    assert!(t.lock(F, posix(a, Unlock, 0, 1), None).wakes.is_empty());
    assert_eq!(t.counts(), (0, 0));
    assert!(t.clients.is_empty());
}

#[test]
fn a_cycle_of_posix_waits_is_a_deadlock_across_files() {
    let mut t = Table::default();
    let (a, b, c) = (o(1, 0), o(2, 0), o(3, 0));
    t.lock(F, posix(a, Write, 0, 1), None);
    t.lock(F + 1, posix(b, Write, 0, 1), None);
    t.lock(F + 2, posix(c, Write, 0, 1), None);
    assert_eq!(t.lock(F + 1, posix(a, Write, 0, 1), Some(1)).outcome, Outcome::Queued, "a waits for b");
    assert_eq!(t.lock(F + 2, posix(b, Write, 0, 1), Some(1)).outcome, Outcome::Queued, "b waits for c");
    assert_eq!(t.lock(F, posix(c, Write, 0, 1), Some(1)).outcome, Outcome::Deadlock, "c would wait for a");
    assert_eq!(t.lock(F, posix(c, Write, 0, 1), None).outcome, Outcome::WouldBlock, "without waiting: EAGAIN");
    // OFD waits are not checked (as on Linux): the same cycle through an OFD owner waits.
    let ofd = o(3, 9);
    assert_eq!(t.lock(F, want(ofd, LockKind::Ofd, Write, 0, 1), Some(2)).outcome, Outcome::Queued);
    // The end of a client breaks the cycle: its waits and locks go, others get theirs.
    let wakes = t.release_client(2);
    assert_eq!(wakes, vec![Wake { client: 1, token: 1, errno: 0 }]);
    assert_eq!(locks_of(&t, F + 1, a), vec![(0, 1, true)]);
    assert!(!t.has_client(2));
}

#[test]
fn flock_conversions_drop_the_old_lock_first_as_linux_does() {
    let mut t = Table::default();
    let (a, b) = (o(1, 1), o(2, 1));
    assert_eq!(t.lock(F, flock(a, Read), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, flock(b, Read), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, flock(a, Read), None).outcome, Outcome::Granted, "the same lock again");
    assert_eq!(t.lock(F, flock(a, Write), None).outcome, Outcome::WouldBlock);
    assert_eq!(locks_of(&t, F, a), vec![], "the failed conversion lost the shared lock");
    assert_eq!(t.lock(F, flock(a, Write), Some(3)).outcome, Outcome::Queued);
    let d = t.lock(F, flock(b, Unlock), None);
    assert_eq!(d.wakes, vec![Wake { client: 1, token: 3, errno: 0 }]);
    assert_eq!(locks_of(&t, F, a), vec![(0, EOF, true)]);
    // Byte-range locks of the same owner numbers do not meet flock's.
    assert_eq!(t.lock(F, posix(o(2, 0), Write, 0, EOF), None).outcome, Outcome::Granted);
}

#[test]
fn past_the_bounds_a_request_fails_and_changes_nothing() {
    let mut t = Table::new(4, 3);
    let (a, b) = (o(1, 0), o(2, 0));
    t.lock(F, posix(a, Read, 0, 10), None);
    t.lock(F, posix(a, Read, 20, 30), None);
    t.lock(F, posix(a, Read, 40, 50), None);
    assert_eq!(t.lock(F, posix(a, Read, 60, 70), None).outcome, Outcome::Full, "the client's bound");
    assert_eq!(t.lock(F, posix(a, Unlock, 2, 3), None).outcome, Outcome::Full, "a split needs room too");
    assert_eq!(locks_of(&t, F, a).len(), 3);
    assert_eq!(t.lock(F, posix(a, Read, 10, 20), None).outcome, Outcome::Granted, "a merge needs none");
    assert_eq!(t.lock(F, posix(b, Write, 100, 101), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, posix(b, Write, 200, 201), None).outcome, Outcome::Granted);
    assert_eq!(t.lock(F, posix(b, Write, 0, 1), Some(1)).outcome, Outcome::Full, "the daemon's bound");
    assert_eq!(t.counts(), (4, 0));
}

#[test]
fn a_wait_granted_without_room_fails_with_enolck() {
    // b may hold two entries: its read lock and its wait.
    let mut t = Table::new(10, 2);
    let (a, b) = (o(1, 0), o(2, 0));
    t.lock(F, posix(b, Read, 0, 100), None);
    t.lock(F, posix(a, Read, 40, 60), None);
    assert_eq!(t.lock(F, posix(b, Write, 40, 60), Some(8)).outcome, Outcome::Queued);
    // Granted, b's read lock would split in three: no room.
    let d = t.lock(F, posix(a, Unlock, 0, EOF), None);
    assert_eq!(d.wakes, vec![Wake { client: 2, token: 8, errno: libc::ENOLCK }]);
    assert_eq!(locks_of(&t, F, b), vec![(0, 100, false)], "what b held stays");
    assert_eq!(t.counts(), (1, 0));
}
