//! The Db under injected faults, power loss, concurrent readers and stale sessions.

mod bounds;
mod events;
mod history;
mod in_place;
mod placement;
mod prefetch;
mod refusals;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::io::faults::{Faults, PowerLoss};
use crate::test_support::{key, Rng};
use crate::trie::{compute_root, hash_value, KeyPath};
use crate::{Db, Error, Options};

type Model = BTreeMap<KeyPath, Vec<u8>>;

/// Block `n`'s writes: 40 keys drawn from a pool of 200 (some deleted), and an
/// overflow value, so a commit touches pages, buckets and overflow space.
fn block(n: u64) -> Vec<(KeyPath, Option<Vec<u8>>)> {
    let mut rng = Rng(n * 0x9e37_79b9 + 1);
    let mut writes = BTreeMap::new();
    for _ in 0..40 {
        let i = rng.next() % 200;
        let value =
            (!rng.next().is_multiple_of(5)).then(|| n.to_le_bytes().repeat(1 + (i % 3) as usize));
        writes.insert(key(i), value);
    }
    writes.insert([0xee; 32], Some(vec![n as u8; 5000]));
    writes.into_iter().collect()
}

fn apply(model: &mut Model, n: u64) {
    for (k, v) in block(n) {
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
}

/// `models[n]`: the state after blocks 1 to `n`.
fn models(blocks: u64) -> Vec<Model> {
    let mut models = vec![Model::new()];
    for n in 1..=blocks {
        let mut m = models[n as usize - 1].clone();
        apply(&mut m, n);
        models.push(m);
    }
    models
}

/// Drops every write not yet synced, reopens, and checks the database holds
/// `models[newer]` or `models[newer - 1]`; returns which.
fn power_cycle(
    db: Db,
    faults: &Faults,
    seed: Option<u64>,
    models: &[Model],
    newer: usize,
) -> (Db, usize) {
    faults
        .lose_power(&db.parts().0.files().unwrap(), PowerLoss::from_seed(seed))
        .unwrap();
    let path = db.shared.options.path.clone();
    drop(db);
    let db = Db::open(Options::new(path)).unwrap();
    // The catalog survives the crash: open reads it, not every block.
    assert!(db.metrics().opened_from_catalog);
    let state = if db.root().unwrap() == root_of(&models[newer]) {
        newer
    } else {
        newer - 1
    };
    assert_state(&db, &models[state]);
    (db, state)
}

fn commit(db: &Db, n: u64) -> Result<crate::Node, Error> {
    let session = db.begin_session();
    for (k, v) in block(n) {
        session.write(k, v);
    }
    session.commit()
}

/// `options` with the catalog folded and the history trimmed as often as
/// they can be, so that a few commits fold, trim, and copy in batches.
/// Commits 64 values of 4 KiB under keys `0..64`, all `fill`: each commit
/// after the first replaces 256 KiB.
pub(super) fn overwrite(db: &Db, fill: u8) {
    let session = db.begin_session();
    for i in 0..64u8 {
        session.write([i; 32], Some(vec![fill; 4096]));
    }
    session.commit().unwrap();
}

fn small(mut options: Options) -> Options {
    options.tuning = crate::store::Tuning::SMALL;
    options
}

/// A database opened with `options` through a fresh fault plan, with blocks
/// 1 to `blocks` committed. Folds and trims come often, and on the
/// committing thread, so that an injected fault or power loss cuts a commit
/// or the fold right after it, never a fold beside a later commit, as the
/// fault tests reason.
fn faulty_db(options: Options, blocks: u64) -> (Db, Arc<Faults>) {
    let faults = Arc::new(Faults::none());
    let mut options = small(options).fold_in_background(false);
    options.faults = Some(faults.clone());
    let db = Db::open(options).unwrap();
    for n in 1..=blocks {
        commit(&db, n).unwrap();
    }
    (db, faults)
}

fn root_of(model: &Model) -> crate::Node {
    compute_root(model.iter().map(|(k, v)| (*k, hash_value(v)))).unwrap()
}

fn assert_state(db: &Db, model: &Model) {
    assert_eq!(db.root().unwrap(), root_of(model));
    for i in 0..200u64 {
        assert_eq!(db.read(&key(i)).unwrap().as_ref(), model.get(&key(i)));
    }
    assert_eq!(
        db.read(&[0xee; 32]).unwrap().as_ref(),
        model.get(&[0xee; 32])
    );
}

#[test]
fn a_failed_commit_leaves_the_last_durable_state_after_power_loss() {
    let models = models(5);
    for fail_at in 0.. {
        let short = fail_at % 2 == 1;
        let seed = (fail_at % 3 == 2).then_some(fail_at * 31 + 7);
        let dir = tempfile::tempdir().unwrap();
        let (db, faults) = faulty_db(Options::new(dir.path()).commit_workers(2), 3);
        faults.short_writes.store(short, Ordering::SeqCst);
        faults.writes_left.store(fail_at, Ordering::SeqCst);
        let Some(durable) = fail_commit_4(&db) else {
            // The fault came after the whole commit: every write point was
            // tried (its blocks, the slot map's two and the meta record).
            assert!(fail_at > 5, "only {fail_at} write points tried");
            break;
        };
        let (db, state) = power_cycle(db, &faults, seed, &models, 4);
        assert_eq!(state == 4, durable, "fail_at {fail_at}: the error misled");
        commit(&db, state as u64 + 1).unwrap();
        assert_state(&db, &models[state + 1]);
    }
}

/// Commits block 4 expecting a fault: `None` if it succeeded, else whether the
/// error says the commit is durable. The handle must then refuse everything.
fn fail_commit_4(db: &Db) -> Option<bool> {
    let older = db.roots().unwrap()[1];
    let durable = match commit(db, 4) {
        Ok(_) => return None,
        Err(Error::CommitDurable(_)) => true,
        Err(Error::CommitInDoubt(e)) => panic!("one fault left doubt: {e}"),
        Err(_) => false,
    };
    assert!(matches!(commit(db, 4), Err(Error::Poisoned)));
    assert!(matches!(db.read(&[0xee; 32]), Err(Error::Poisoned)));
    // Also what the history could answer from RAM ([0xee; 32] is in every
    // block's undo).
    assert!(matches!(db.roots(), Err(Error::Poisoned)));
    assert!(matches!(
        db.read_at(&older, &[0xee; 32]),
        Err(Error::Poisoned)
    ));
    assert!(matches!(
        db.prove_at(&older, &[[0xee; 32]]),
        Err(Error::Poisoned)
    ));
    assert!(matches!(db.rollback(1), Err(Error::Poisoned)));
    Some(durable)
}

#[test]
fn an_error_from_a_failed_sync_says_whether_the_commit_is_durable() {
    let models = models(5);
    let mut durable_at = Vec::new();
    for fail_at in 0.. {
        let seed = (fail_at % 2 == 1).then_some(fail_at * 13 + 5);
        let dir = tempfile::tempdir().unwrap();
        let (db, faults) = faulty_db(Options::new(dir.path()), 3);
        faults.sync_fails_after.store(fail_at, Ordering::SeqCst);
        let Some(durable) = fail_commit_4(&db) else {
            // The data files', the catalog log's, the slot map's and the
            // meta record's syncs.
            assert!(fail_at >= 3, "only {fail_at} sync points tried");
            // Only the meta record's sync, the last, comes after the commit
            // point.
            assert_eq!(durable_at, vec![fail_at - 1]);
            break;
        };
        if durable {
            durable_at.push(fail_at);
        }
        let (db, state) = power_cycle(db, &faults, seed, &models, 4);
        assert_eq!(state == 4, durable, "fail_at {fail_at}: the error misled");
        commit(&db, state as u64 + 1).unwrap();
    }
}

#[test]
fn open_after_a_crash_reads_the_catalog_whatever_write_the_crash_cut() {
    // Twelve commits: the catalog folds into new snapshots along the way
    // (at a few blocks of log), and a crash may cut any write of
    // the last commit or of the fold after it.
    let models = models(12);
    for fail_at in (0..40).step_by(3) {
        let dir = tempfile::tempdir().unwrap();
        let (db, faults) = faulty_db(Options::new(dir.path()), 11);
        faults.writes_left.store(fail_at, Ordering::SeqCst);
        let _ = commit(&db, 12);
        let seed = Some(fail_at * 7 + 1);
        let (db, state) = power_cycle(db, &faults, seed, &models, 12);
        // And once more, from the catalog the reopened database keeps.
        commit(&db, state as u64 + 1).ok();
        drop(db);
        let db = Db::open(Options::new(dir.path())).unwrap();
        assert!(db.metrics().opened_from_catalog);
    }
}

#[test]
fn catalog_folds_off_the_committing_thread_keep_every_commit() {
    // Folds at a few blocks of log, so the folder thread folds every commit
    // or two while the next commits wait for it.
    let models = models(30);
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(small(Options::new(dir.path()))).unwrap();
    for n in 1..=30 {
        commit(&db, n).unwrap();
        assert_state(&db, &models[n as usize]);
    }
    drop(db);
    // Each commit appends at least a block of log: folds emptied it.
    let log = std::fs::metadata(dir.path().join("catalog.log"))
        .unwrap()
        .len();
    assert!(log < 10 * 4096, "the log was not folded: {log} bytes");
    let db = Db::open(Options::new(dir.path())).unwrap();
    assert!(db.metrics().opened_from_catalog);
    assert_state(&db, &models[30]);
}

#[test]
fn a_damaged_or_missing_catalog_costs_a_scan_never_the_state() {
    let models = models(9);
    for damage in [
        "snapshot flipped",
        "snapshot removed",
        "snapshot cut",
        "log cut",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(Options::new(dir.path())).unwrap();
        for n in 1..=8 {
            commit(&db, n).unwrap();
        }
        drop(db);
        let snapshot = dir.path().join("catalog");
        let log = dir.path().join("catalog.log");
        let expect_scan = match damage {
            "snapshot flipped" => {
                let mut bytes = std::fs::read(&snapshot).unwrap();
                let at = bytes.len() - 1;
                bytes[at] ^= 0x10;
                std::fs::write(&snapshot, bytes).unwrap();
                true
            }
            "snapshot removed" => {
                std::fs::remove_file(&snapshot).unwrap();
                true
            }
            "snapshot cut" => {
                let len = std::fs::metadata(&snapshot).unwrap().len();
                std::fs::File::options()
                    .write(true)
                    .open(&snapshot)
                    .unwrap()
                    .set_len(len - 1)
                    .unwrap();
                true
            }
            _ => {
                // The newest record lost: unless a fold just emptied the log.
                let len = std::fs::metadata(&log).unwrap().len();
                std::fs::File::options()
                    .write(true)
                    .open(&log)
                    .unwrap()
                    .set_len(len.saturating_sub(4096))
                    .unwrap();
                len > 0
            }
        };
        let db = Db::open(Options::new(dir.path())).unwrap();
        assert_eq!(db.metrics().opened_from_catalog, !expect_scan, "{damage}");
        assert_state(&db, &models[8]);
        commit(&db, 9).unwrap();
        drop(db);
        // The scan wrote a fresh catalog.
        let db = Db::open(Options::new(dir.path())).unwrap();
        assert!(db.metrics().opened_from_catalog, "{damage}");
        assert_state(&db, &models[9]);
    }
}

#[test]
fn failed_syncs_and_reads_leave_one_committed_state() {
    let models = models(3);
    for fail in ["sync", "read"] {
        let dir = tempfile::tempdir().unwrap();
        // No bucket cache, so a commit has to read.
        let (db, faults) = faulty_db(Options::new(dir.path()).value_cache_mib(0), 2);
        let flag = match fail {
            "sync" => &faults.fail_syncs,
            _ => &faults.fail_reads,
        };
        flag.store(true, Ordering::SeqCst);
        assert!(commit(&db, 3).is_err(), "{fail} fault unnoticed");
        flag.store(false, Ordering::SeqCst);
        if fail == "read" {
            // Nothing was written yet: the database stays usable.
            commit(&db, 3).unwrap();
            assert_state(&db, &models[3]);
        }
        power_cycle(db, &faults, None, &models, 3);
    }
}

#[test]
fn reads_during_commits_return_committed_values_only() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(Options::new(dir.path()).commit_workers(2)).unwrap());
    // Block n sets every key to n (long values every third block).
    let value = |n: u64| {
        n.to_le_bytes()
            .repeat(if n.is_multiple_of(3) { 100 } else { 1 })
    };
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last_seen = vec![0u64; 500];
            let mut reads = 0;
            while !done.load(Ordering::SeqCst) {
                for (i, last) in last_seen.iter_mut().enumerate() {
                    let Some(v) = db.read(&key(i as u64)).unwrap() else {
                        continue;
                    };
                    let n = u64::from_le_bytes(v[..8].try_into().unwrap());
                    assert_eq!(v, value(n), "a value no commit wrote");
                    assert!(n >= *last, "key {i} went back from block {last} to {n}");
                    *last = n;
                    reads += 1;
                }
            }
            reads
        })
    };
    for n in 1..=30u64 {
        let session = db.begin_session();
        for i in 0..500 {
            session.write(key(i), Some(value(n)));
        }
        session.commit().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    assert!(reader.join().unwrap() > 500);
}

#[test]
fn a_stale_session_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    let first = db.begin_session();
    let second = db.begin_session();
    first.write([1; 32], Some(vec![1]));
    second.write([2; 32], Some(vec![2]));
    let root = first.commit().unwrap();
    assert!(matches!(
        second.commit_and_prove(),
        Err(Error::StaleSession)
    ));
    assert_eq!(db.root().unwrap(), root);
    assert_eq!(db.read(&[2; 32]).unwrap(), None);
}

#[test]
fn sessions_are_shared_by_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<crate::Session>();
    send_sync::<Db>();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    let session = db.begin_session();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let session = &session;
            s.spawn(move || {
                for i in 0..50u8 {
                    session.write(
                        [
                            t, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0, 0, 0, 0, 0, 0, 0, 1,
                        ],
                        Some(vec![i]),
                    );
                    assert!(session.read(&[t; 32]).unwrap().is_none());
                }
            });
        }
    });
    let out = session.commit_and_prove().unwrap();
    assert_eq!(out.witness.writes.len(), 200);
    assert_eq!(out.witness.verify_update(&out.prev_root).unwrap(), out.root);
}

#[test]
fn a_second_handle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _db = Db::open(Options::new(dir.path())).unwrap();
    assert!(matches!(
        Db::open(Options::new(dir.path())),
        Err(Error::Locked)
    ));
}

#[test]
fn a_crash_while_a_chain_of_overlays_commits_leaves_a_whole_prefix_of_it() {
    // Blocks 2 to 5 as a chain of overlays on block 1; committing the tip
    // commits them in order. A fault at any write, then a power loss: the
    // database holds block 1 plus a whole prefix of the chain.
    let models = models(5);
    let mut seen = std::collections::BTreeSet::new();
    for fail_at in (0..60).step_by(4) {
        let dir = tempfile::tempdir().unwrap();
        let (db, faults) = faulty_db(Options::new(dir.path()), 1);
        let mut tip: Option<crate::Overlay> = None;
        for n in 2..=5 {
            let session = match &tip {
                Some(parent) => db.begin_session_on(parent),
                None => db.begin_session(),
            };
            for (k, v) in block(n) {
                session.write(k, v);
            }
            tip = Some(session.finish().unwrap().into_overlay());
        }
        let tip = tip.unwrap();
        assert_eq!(tip.root(), root_of(&models[5]));
        faults.writes_left.store(fail_at, Ordering::SeqCst);
        let committed = tip.commit().is_ok();
        faults
            .lose_power(
                &db.parts().0.files().unwrap(),
                PowerLoss::from_seed(Some(fail_at)),
            )
            .unwrap();
        drop(tip);
        drop(db);
        let db = Db::open(Options::new(dir.path())).unwrap();
        let state = (1..=5)
            .find(|&n| db.root().unwrap() == root_of(&models[n]))
            .unwrap_or_else(|| panic!("fail_at {fail_at}: a root of no prefix"));
        assert_state(&db, &models[state]);
        if committed {
            assert_eq!(state, 5, "fail_at {fail_at}: an acknowledged commit lost");
        }
        seen.insert(state);
    }
    // The faults landed all along the chain, and past it.
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
}

/// A restore whose commit fails (a write, a sync, a full disk) stored
/// nothing of that chunk, or all of it; resumed, it finishes with the root.
#[test]
fn a_restore_that_fails_mid_chunk_resumes_and_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let source = Db::open(Options::new(dir.path().join("source"))).unwrap();
    let session = source.begin_session();
    for i in 0..5000u64 {
        session.write(key(i), Some(i.to_le_bytes().repeat(1 + (i % 700) as usize)));
    }
    session.commit().unwrap();
    let chunks: Vec<crate::Chunk> = source
        .export(16 << 10)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(chunks.len() >= 6, "{} chunks", chunks.len());
    let by_start = |start: KeyPath| chunks.iter().position(|c| *c.start() == start).unwrap();
    let faults = Arc::new(Faults::none());
    let mut options = Options::new(dir.path().join("restored"));
    options.faults = Some(faults.clone());
    let fail: [&dyn Fn(&Faults); 3] = [
        &|f| f.fail_writes_after(2, true),
        &|f| f.fail_one_sync_after(0),
        &|f| f.disk_full_after(1),
    ];
    let mut failed = 0;
    for (round, inject) in fail.iter().cycle().take(6).enumerate() {
        let mut restore = Db::restore(options.clone(), source.root().unwrap()).unwrap();
        let Some(next) = restore.next_start() else {
            break;
        };
        // A chunk or two in, then the fault.
        let mut i = by_start(next);
        for _ in 0..round % 2 {
            if i + 1 < chunks.len() {
                restore.apply(&chunks[i]).unwrap();
                i += 1;
            }
        }
        inject(&faults);
        if restore.apply(&chunks[i]).is_err() {
            failed += 1;
        }
        faults.clear();
    }
    assert!(failed >= 3, "only {failed} applies failed");
    let mut restore = Db::restore(options, source.root().unwrap()).unwrap();
    while let Some(next) = restore.next_start() {
        restore.apply(&chunks[by_start(next)]).unwrap();
    }
    let restored = restore.finish().unwrap();
    assert_eq!(restored.root().unwrap(), source.root().unwrap());
}
