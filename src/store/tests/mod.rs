//! The commit protocol under reopen, faults, power loss, SIGKILL and corruption.
//!
//! The model's commit `k` writes a fixed set of objects stamped with `k`, each
//! to the one of its two slots it does not use (copy-on-write), frees what it
//! replaces or deletes, and writes overflow block `k % 2`. So the exact contents
//! of every used slot after commit `s` are known, and a state that mixes two
//! commits cannot pass for either.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Batch, BlockWrite, Store, StoreConfig, Target, TARGETS};
use crate::block::{Block, BlockBuf};
use crate::io::faults::{Faults, PowerLoss};
use crate::io::IoBackend;
use crate::Error;

/// An object of the model: written at commits `k % period == write`, deleted
/// at `k % period == delete`; it lives in slot `2 j` or `2 j + 1`.
struct Object {
    target: Target,
    j: u64,
    period: u64,
    write: u64,
    delete: Option<u64>,
}

fn objects() -> Vec<Object> {
    let o = |target, j, period, write, delete| Object {
        target,
        j,
        period,
        write,
        delete,
    };
    let mut all = vec![
        o(Target::Pages, 0, 1, 0, None),
        o(Target::Pages, 1, 2, 1, None),
        o(Target::Pages, 2, 3, 0, None),
        o(Target::Pages, 3, 4, 1, Some(3)),
        o(Target::Buckets, 0, 1, 0, None),
        o(Target::Buckets, 1, 5, 2, Some(4)),
    ];
    // One new bucket a commit for 300 commits, so the file grows for a while,
    // then each is rewritten every 300 commits.
    all.extend((2..302).map(|j| o(Target::Buckets, j, 300, (j - 1) % 300, None)));
    all
}

impl Object {
    /// The last commit at or before `s` whose number is `phase` mod the period.
    fn last(&self, phase: u64, s: u64) -> Option<u64> {
        let k = s.checked_sub((s + self.period - phase) % self.period)?;
        (k >= 1).then_some(k)
    }

    /// Writes of the object in commits 1 to `s`.
    fn writes(&self, s: u64) -> u64 {
        let first = if self.write == 0 {
            self.period
        } else {
            self.write
        };
        if s < first {
            0
        } else {
            (s - first) / self.period + 1
        }
    }

    /// Its slot and the commit that wrote it, after commit `s`.
    fn after(&self, s: u64) -> Option<(u64, u64)> {
        let written = self.last(self.write, s)?;
        if self.delete.and_then(|d| self.last(d, s)) > Some(written) {
            return None;
        }
        Some((2 * self.j + (self.writes(s) - 1) % 2, written))
    }
}

/// Every used block after commit `s`: target, index, writer.
fn state_after(s: u64) -> Vec<(Target, u64, u64)> {
    let mut out: Vec<_> = objects()
        .iter()
        .filter_map(|o| o.after(s).map(|(slot, k)| (o.target, slot, k)))
        .collect();
    // Commit `s + 1` writes the other overflow block: only this one is used.
    if s > 0 {
        out.push((Target::Overflow, s % 2, s));
    }
    out
}

fn stamp(k: u64, target: Target, index: u64) -> BlockBuf {
    let mut b = Block::zeroed();
    for (i, chunk) in b.0.chunks_exact_mut(8).enumerate() {
        let word = k ^ (target as u64) << 56 ^ index << 32 ^ (i as u64).wrapping_mul(0x9e37_79b9);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    b
}

fn root_of(k: u64) -> [u8; 32] {
    *blake3::hash(&k.to_le_bytes()).as_bytes()
}

/// File lengths after commit `s`: files never shrink.
fn lengths_after(s: u64) -> [u64; TARGETS] {
    let mut lengths = [0u64; TARGETS];
    for o in objects() {
        let slots = match o.writes(s) {
            0 => 0,
            1 => 2 * o.j + 1,
            _ => 2 * o.j + 2,
        };
        let len = &mut lengths[o.target as usize];
        *len = (*len).max(slots);
    }
    lengths[Target::Overflow as usize] = if s == 0 { 0 } else { 2 };
    lengths
}

fn batch(k: u64) -> Batch {
    let mut batch = Batch::new(root_of(k), lengths_after(k));
    for o in objects() {
        let before = o.after(k - 1);
        let now = o.after(k);
        if let Some((slot, _)) = before.filter(|b| now.map(|n| n.0) != Some(b.0)) {
            batch.freed.push((o.target, slot as u32));
        }
        if let Some((slot, written)) = now.filter(|n| n.1 == k) {
            batch.writes.push(BlockWrite {
                target: o.target,
                index: slot,
                block: stamp(written, o.target, slot).into(),
            });
        }
    }
    batch.writes.push(BlockWrite {
        target: Target::Overflow,
        index: k % 2,
        block: stamp(k, Target::Overflow, k % 2).into(),
    });
    batch
}

/// Blocks commit `k` writes before its slot map (its data and its catalog
/// record), and the files it syncs then.
fn data_writes(k: u64) -> (u64, u64) {
    let b = batch(k);
    let files = Target::ALL
        .iter()
        .filter(|t| b.writes.iter().any(|w| w.target == **t))
        .count();
    // And the commit's catalog record: one block of the log, here.
    (b.writes.len() as u64 + 1, files as u64 + 1)
}

/// Writes of commit `k` before its commit point (the data, the map's header
/// and body), and in all (the meta record as well).
fn writes_of(k: u64) -> (u64, u64) {
    let before = data_writes(k).0 + 2;
    (before, before + 1)
}

/// A store in `dir` whose files go through a fresh fault plan, with commits
/// 1 to `commits` made.
fn faulty_store(dir: &Path, commits: u64) -> (Store, Arc<Faults>) {
    let faults = Arc::new(Faults::none());
    let config = StoreConfig {
        faults: Some(faults.clone()),
        ..StoreConfig::small()
    };
    let store = Store::open(dir, config).unwrap();
    for k in 1..=commits {
        store.persist(batch(k)).unwrap();
    }
    (store, faults)
}

/// Asserts the store holds exactly the state after commit `s`.
fn assert_state(store: &Store, s: u64) {
    let meta = store.meta();
    assert_eq!(meta.seqno, s);
    assert_eq!(meta.root, if s == 0 { [0; 32] } else { root_of(s) });
    assert_eq!(meta.lengths, lengths_after(s));
    let state = state_after(s);
    for t in [Target::Pages, Target::Buckets] {
        let mut expected: Vec<u64> = state
            .iter()
            .filter(|(target, ..)| *target == t)
            .map(|(_, index, _)| *index)
            .collect();
        expected.sort_unstable();
        assert_eq!(
            store.used_slots(t),
            expected,
            "state {s}: {t:?} slots in use"
        );
    }
    for (target, index, k) in state {
        let block = store.read(target, index).unwrap();
        assert!(
            block.0 == stamp(k, target, index).0,
            "state {s}: {target:?} block {index} is not commit {k}'s"
        );
    }
}

fn open(dir: &Path) -> Store {
    Store::open(dir, StoreConfig::small()).unwrap()
}

#[test]
fn commits_survive_reopen_on_both_engines() {
    for backend in [IoBackend::ThreadPool, IoBackend::IoUring] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            StoreConfig {
                backend,
                ..StoreConfig::small()
            },
        )
        .unwrap();
        assert_state(&store, 0);
        for k in 1..=20 {
            store.persist(batch(k)).unwrap();
        }
        assert_state(&store, 20);
        drop(store);
        let reopened = open(dir.path());
        assert_state(&reopened, 20);
        // The other map file named no durable commit: it is cut, so it can
        // never come back over slots a later commit reuses.
        assert_eq!(reopened.maps[1].blocks().unwrap(), 0);
    }
}

#[test]
fn a_block_written_twice_in_one_commit_keeps_the_last_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut batch = Batch::new([1; 32], [3, 0, 0]);
    batch.writes = (0..50)
        .map(|k| BlockWrite {
            target: Target::Pages,
            index: k % 3,
            block: stamp(k, Target::Pages, k % 3).into(),
        })
        .collect();
    store.persist(batch).unwrap();
    for (index, k) in [(0, 48), (1, 49), (2, 47)] {
        assert!(store.read(Target::Pages, index).unwrap().0 == stamp(k, Target::Pages, index).0);
    }
}

#[test]
fn a_block_written_early_and_again_by_its_commit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let write = |k| BlockWrite {
        target: Target::Pages,
        index: 1,
        block: stamp(k, Target::Pages, 1).into(),
    };
    let mut batch = Batch::new([1; 32], [3, 0, 0]);
    batch.writes = vec![write(1)];
    store.write_early(&mut batch).unwrap();
    // Both in flight at once, either could land last.
    batch.writes = vec![write(2)];
    assert!(matches!(store.persist(batch), Err(Error::Internal(_))));
    // Refused, not poisoned: the next commit goes through.
    let mut batch = Batch::new([2; 32], [3, 0, 0]);
    batch.writes = vec![write(3)];
    store.persist(batch).unwrap();
    assert!(store.read(Target::Pages, 1).unwrap().0 == stamp(3, Target::Pages, 1).0);
}

#[test]
fn a_commit_never_writes_over_or_frees_what_it_must_not() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = faulty_store(dir.path(), 3);
    let used = store.used_slots(Target::Buckets)[0];
    let free = store.free_slots(Target::Buckets).unwrap()[0];
    let write = |index| BlockWrite {
        target: Target::Buckets,
        index,
        block: stamp(99, Target::Buckets, index).into(),
    };
    // Over a slot the durable state uses: refused, nothing written.
    let mut over = batch(4);
    over.writes.push(write(used));
    assert!(matches!(store.persist(over), Err(Error::Internal(_))));
    // Freed and written again in the same commit: still a write over it.
    let mut again = batch(4);
    again.freed.push((Target::Buckets, used as u32));
    again.writes.push(write(used));
    assert!(matches!(store.persist(again), Err(Error::Internal(_))));
    // Freeing a slot not in use.
    let mut unused = batch(4);
    unused.freed.push((Target::Buckets, free));
    assert!(matches!(store.persist(unused), Err(Error::Internal(_))));
    still_at_3_and_usable(store, dir.path());
}

#[test]
fn early_writes_commit_like_late_ones_and_an_abandoned_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = faulty_store(dir.path(), 3);
    // Abandoned: its blocks land in free slots only, and are waited for.
    let mut b = batch(4);
    store.write_early(&mut b).unwrap();
    drop(b);
    assert_state(&store, 3);
    for k in 4..=20 {
        // Early in up to three parts, then late ones.
        let mut b = batch(k);
        let mut rest = std::mem::take(&mut b.writes);
        for part in 0..k % 4 {
            let take = rest.len() / (4 - part as usize);
            let tail = rest.split_off(take);
            b.writes = std::mem::replace(&mut rest, tail);
            store.write_early(&mut b).unwrap();
        }
        b.writes = rest;
        store.persist(b).unwrap();
        assert_state(&store, k);
    }
    drop(store);
    assert_state(&open(dir.path()), 20);
}

#[test]
fn early_writes_are_refused_where_they_could_race() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = faulty_store(dir.path(), 3);
    // The same block early and late (overflow blocks are not in the map).
    let mut b = batch(4);
    let first = &b.writes[b.writes.len() - 1];
    let twin = BlockWrite {
        target: first.target,
        index: first.index,
        block: stamp(99, first.target, first.index).into(),
    };
    let late = std::mem::replace(&mut b.writes, vec![twin]);
    store.write_early(&mut b).unwrap();
    b.writes = late;
    assert!(matches!(store.persist(b), Err(Error::Internal(_))));
    // A commit beside early writes it does not include.
    let mut b = batch(4);
    store.write_early(&mut b).unwrap();
    assert!(matches!(store.persist(batch(4)), Err(Error::Internal(_))));
    drop(b);
    // Early writes over a used slot, or shrinking a file under used slots.
    let used = store.used_slots(Target::Pages)[0];
    let over = BlockWrite {
        target: Target::Pages,
        index: used,
        block: stamp(99, Target::Pages, used).into(),
    };
    let mut b = batch(4);
    b.writes = vec![over];
    b.lengths = lengths_after(4);
    assert!(matches!(store.write_early(&mut b), Err(Error::Internal(_))));
    let mut b = batch(4);
    b.writes.clear();
    b.lengths = [0; TARGETS];
    assert!(matches!(store.write_early(&mut b), Err(Error::Internal(_))));
    still_at_3_and_usable(store, dir.path());
}

/// After refused batches: the store is not poisoned, holds state 3, and
/// commits and reopens as ever.
fn still_at_3_and_usable(store: Store, dir: &Path) {
    assert_state(&store, 3);
    store.persist(batch(4)).unwrap();
    drop(store);
    assert_state(&open(dir), 4);
}

#[test]
fn slots_a_commit_frees_hold_the_state_before_it_until_the_next() {
    // Copy-on-write: the durable state's predecessor stays
    // intact on disk, in the slots its successor freed, until a later commit.
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = faulty_store(dir.path(), 6);
    for (target, index, k) in state_after(5) {
        if target != Target::Overflow && !store.used_slots(target).contains(&index) {
            assert!(store.read(target, index).unwrap().0 == stamp(k, target, index).0);
        }
    }
}

#[test]
fn a_directory_has_one_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    assert!(matches!(
        Store::open(dir.path(), StoreConfig::small()),
        Err(Error::Locked)
    ));
    drop(store);
    open(dir.path());
}

#[test]
fn a_failed_commit_leaves_a_durable_state_after_power_loss() {
    let (before_durable, writes) = writes_of(4);
    let mut cases = 0;
    for fail_at in 0..writes {
        for short in [false, true] {
            for power_loss_seed in [None, Some(fail_at * 31 + 7)] {
                let dir = tempfile::tempdir().unwrap();
                let (store, faults) = faulty_store(dir.path(), 3);
                faults.short_writes.store(short, Ordering::SeqCst);
                faults.writes_left.store(fail_at, Ordering::SeqCst);
                let error = store.persist(batch(4)).err();
                let durable = match error {
                    None => panic!("fault at write {fail_at} unnoticed"),
                    Some(Error::CommitDurable(_)) => true,
                    Some(Error::CommitInDoubt(_)) => panic!("a failed write is not in doubt"),
                    Some(_) => false,
                };
                assert!(matches!(store.persist(batch(4)), Err(Error::Poisoned)));
                assert!(matches!(store.read(Target::Pages, 0), Err(Error::Poisoned)));
                faults
                    .lose_power(
                        &store.files().unwrap(),
                        PowerLoss::from_seed(power_loss_seed),
                    )
                    .unwrap();
                drop(store);
                let reopened = open(dir.path());
                let s = reopened.meta().seqno;
                // Durable exactly when the whole slot map was written and
                // synced, and the error says so.
                let expected = if fail_at < before_durable { 3 } else { 4 };
                assert_eq!(durable, expected == 4, "fail_at {fail_at}");
                assert_eq!(
                    s, expected,
                    "fail_at {fail_at} short {short} seed {power_loss_seed:?}"
                );
                assert_state(&reopened, s);
                reopened.persist(batch(s + 1)).unwrap();
                assert_state(&reopened, s + 1);
                cases += 1;
            }
        }
    }
    assert_eq!(cases, writes * 4);
}

#[test]
fn failed_syncs_and_reads_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path(), 1);
    faults.fail_reads.store(true, Ordering::SeqCst);
    assert!(store.read(Target::Pages, 1).is_err());
    faults.fail_reads.store(false, Ordering::SeqCst);
    // The data's sync failed: nothing names those blocks, so the commit is
    // simply not applied.
    faults.fail_syncs.store(true, Ordering::SeqCst);
    let e = store.persist(batch(2)).err();
    assert!(matches!(e, Some(Error::Io { .. })), "{e:?}");
    assert!(matches!(store.persist(batch(2)), Err(Error::Poisoned)));
    drop(store);
    assert_state(&open(dir.path()), 1);
}

#[test]
fn a_failed_map_sync_and_a_failed_erasure_leave_the_commit_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path(), 1);
    // The data's syncs succeed; the map's sync fails, and so does the sync of
    // its erasure: either state may be found, and the error says so.
    faults.fail_syncs_after(data_writes(2).1);
    assert!(matches!(
        store.persist(batch(2)),
        Err(Error::CommitInDoubt(_))
    ));
    assert!(matches!(store.persist(batch(2)), Err(Error::Poisoned)));
    drop(store);
    let reopened = open(dir.path());
    let s = reopened.meta().seqno;
    assert!(s == 1 || s == 2);
    assert_state(&reopened, s);
}

#[test]
fn an_error_from_a_commit_says_whether_reopening_finds_it() {
    // Syncs of commit 4: each data file written, the catalog log, the map,
    // the meta record.
    let syncs = data_writes(4).1 + 2;
    for fail_at in 0..=syncs {
        for power_loss_seed in [None, Some(fail_at * 17 + 3)] {
            let dir = tempfile::tempdir().unwrap();
            let (store, faults) = faulty_store(dir.path(), 3);
            faults.sync_fails_after.store(fail_at, Ordering::SeqCst);
            let expected = match store.persist(batch(4)) {
                Ok(_) => {
                    assert_eq!(fail_at, syncs, "a failed sync unnoticed");
                    4
                }
                Err(Error::CommitDurable(_)) => 4,
                Err(Error::CommitInDoubt(e)) => panic!("one failed sync left doubt: {e}"),
                Err(_) => 3,
            };
            // Only the meta record's sync comes after the commit point.
            assert_eq!(expected == 3, fail_at < syncs - 1, "fail_at {fail_at}");
            faults
                .lose_power(
                    &store.files().unwrap(),
                    PowerLoss::from_seed(power_loss_seed),
                )
                .unwrap();
            drop(store);
            let reopened = open(dir.path());
            assert_state(&reopened, expected);
            reopened.persist(batch(expected + 1)).unwrap();
            assert_state(&reopened, expected + 1);
        }
    }
}

#[test]
fn a_batch_writing_past_its_lengths_is_refused_without_poisoning() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let mut bad = batch(1);
    bad.lengths[Target::Buckets as usize] = 2;
    assert!(matches!(store.persist(bad), Err(Error::Internal(_))));
    store.persist(batch(1)).unwrap();
    assert_state(&store, 1);
}

#[test]
fn no_room_refuses_a_commit_without_poisoning_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path(), 1);
    // Commit 2 grows the buckets file; there is no room for it.
    faults.disk_full_after(0);
    match store.persist(batch(2)) {
        Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ENOSPC)),
        other => panic!("expected ENOSPC, got {:?}", other.err()),
    }
    store.read(Target::Pages, 1).unwrap();
    faults.clear();
    store.persist(batch(2)).unwrap();
    drop(store);
    assert_state(&open(dir.path()), 2);
}

mod catalog;
mod crash;
mod damage;
