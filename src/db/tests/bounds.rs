//! RAM that grows with what a caller does has a bound a user can set, and a
//! defined behaviour at it.

use super::overwrite;
use crate::db::prefetch::Hint;
use crate::{Db, Error, Options};

#[test]
fn hints_past_the_bound_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).prefetch_hints(100)).unwrap();
    let hints: Vec<Hint> = (0..1000u32)
        .map(|i| Hint {
            key: *blake3::hash(&i.to_le_bytes()).as_bytes(),
            bucket: true,
        })
        .collect();
    db.shared.prefetch_bulk(hints);
    let metrics = db.metrics();
    assert!(metrics.hints_queued <= 100, "{metrics:?}");
    assert_eq!(metrics.hints_dropped, 900);
    // Sessions' hints too, whatever the prefetcher has done meanwhile.
    let session = db.begin_session();
    for i in 0..100_000u32 {
        session.warm_up(blake3::hash(&i.to_le_bytes()).as_bytes());
        // Sessions' at most 100, and the bulk batch's.
        assert!(db.metrics().hints_queued <= 200);
    }
    // The prefetcher works the queue off.
    db.settle_prefetch();
    assert_eq!(db.metrics().hints_queued, 0);
}

/// A hint the full queue dropped is not taken as sent: the key's next hint
/// goes out again (and is dropped again here, where nothing fits).
#[test]
fn a_dropped_hint_is_hinted_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).prefetch_hints(0)).unwrap();
    let session = db.begin_session();
    session.warm_up(&[7; 32]);
    assert_eq!(db.metrics().hints_dropped, 1);
    session.warm_up(&[7; 32]);
    assert_eq!(db.metrics().hints_dropped, 2);
}

#[test]
fn a_snapshot_past_its_budget_is_too_old_and_the_ram_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    // No history: the snapshots alone hold the old values.
    let options = Options::new(dir.path()).history(0);
    let db = Db::open(options.snapshot_budget_mib(1)).unwrap();
    overwrite(&db, 0);
    let old = db.begin_session();
    let mut expired = None;
    for fill in 1..20u8 {
        overwrite(&db, fill);
        let retained = db.metrics().retained_version_bytes;
        assert!(retained <= 1 << 20, "{retained} bytes kept for snapshots");
        match old.read(&[1; 32]) {
            Ok(value) => assert_eq!(value, Some(vec![0; 4096]), "commit {fill}"),
            Err(Error::SnapshotTooOld) => {
                expired = Some(fill);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let expired = expired.expect("the snapshot never expired");
    // About four commits' undos fit in 1 MiB.
    assert!(
        (3..=5).contains(&expired),
        "expired after {expired} commits"
    );
    assert!(matches!(
        db.iter_range(&[0; 32], None).map(|mut i| i.next()),
        Ok(Some(Ok(_)))
    ));
    // A session that began since reads on.
    let new = db.begin_session();
    overwrite(&db, 99);
    assert_eq!(new.read(&[1; 32]).unwrap(), Some(vec![expired; 4096]));
    drop(old);
    drop(new);
    assert_eq!(db.metrics().retained_versions, 0);
}

#[test]
fn an_iterator_past_its_snapshot_budget_fails_too_old() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new(dir.path()).history(0);
    let db = Db::open(options.snapshot_budget_mib(1)).unwrap();
    overwrite(&db, 0);
    // Created now, read after the commits: its snapshot is this commit.
    let mut entries = db.iter_range(&[0; 32], None).unwrap();
    for fill in 1..10u8 {
        overwrite(&db, fill);
    }
    assert!(matches!(entries.next(), Some(Err(Error::SnapshotTooOld))));
}

#[test]
fn a_snapshot_whose_values_the_history_keeps_is_never_too_old() {
    let dir = tempfile::tempdir().unwrap();
    // The history keeps every undo: 1 MiB for snapshots holds none of them.
    let options = Options::new(dir.path()).history(64).history_budget_mib(64);
    let db = Db::open(options.snapshot_budget_mib(1)).unwrap();
    overwrite(&db, 0);
    let old = db.begin_session();
    let mut entries = db.iter_range(&[0; 32], None).unwrap();
    for fill in 1..20u8 {
        overwrite(&db, fill);
        assert_eq!(db.metrics().retained_version_bytes, 0, "commit {fill}");
        assert_eq!(old.read(&[1; 32]).unwrap(), Some(vec![0; 4096]));
    }
    assert_eq!(entries.next().unwrap().unwrap().1, vec![0; 4096]);
    // Past the history's window the snapshot holds them itself, within
    // its budget, then expires.
    let mut expired = false;
    for fill in 20..90u8 {
        overwrite(&db, fill);
        assert!(db.metrics().retained_version_bytes <= 1 << 20);
        match old.read(&[1; 32]) {
            Ok(value) => assert_eq!(value, Some(vec![0; 4096])),
            Err(Error::SnapshotTooOld) => {
                expired = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(expired);
}

#[test]
fn an_undo_larger_than_the_snapshot_budget_that_the_history_keeps_expires_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new(dir.path()).history(64).history_budget_mib(64);
    let db = Db::open(options.snapshot_budget_mib(1)).unwrap();
    let big = |fill: u8| {
        let session = db.begin_session();
        for i in 0..512u32 {
            let key = *blake3::hash(&i.to_le_bytes()).as_bytes();
            session.write(key, Some(vec![fill; 4096]));
        }
        session.commit().unwrap();
    };
    big(0);
    let old = db.begin_session();
    let first = *blake3::hash(&0u32.to_le_bytes()).as_bytes();
    // Each undo is 2 MiB, over the snapshot budget alone; the history keeps
    // them all, so the old session reads on.
    for fill in 1..6u8 {
        big(fill);
        assert_eq!(
            old.read(&first).unwrap(),
            Some(vec![0; 4096]),
            "commit {fill}"
        );
    }
}

#[test]
fn the_history_keeps_fewer_commits_past_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new(dir.path()).history(64).history_budget_mib(1);
    let db = Db::open(options.clone()).unwrap();
    for fill in 0..12u8 {
        overwrite(&db, fill);
        let bytes = db.metrics().history_bytes;
        assert!(bytes <= 1 << 20, "{bytes} bytes of history");
    }
    let roots = db.roots().unwrap();
    // Four or so undos of 256 KiB fit in 1 MiB: the roots say how far back.
    assert!((4..=6).contains(&roots.len()), "{} roots", roots.len());
    assert_eq!(db.metrics().history_commits as usize, roots.len() - 1);
    let oldest = roots[roots.len() - 1];
    assert!(db.read_at(&oldest, &[1; 32]).unwrap().is_some());
    drop(db);
    let db = Db::open(options).unwrap();
    assert_eq!(db.roots().unwrap(), roots);
}

#[test]
fn a_session_logs_each_key_it_reads_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    overwrite(&db, 1);
    let session = db.begin_session();
    for i in 0..10_000u32 {
        let key = [(i % 3) as u8; 32];
        assert_eq!(session.read(&key).unwrap(), Some(vec![1; 4096]));
    }
    assert_eq!(session.reads_logged(), 3);
    let out = session.commit_and_prove().unwrap();
    let verified = out.witness.proof.verify(&out.prev_root).unwrap();
    let hash = crate::trie::hash_value(&[1; 4096]);
    for k in 0..3u8 {
        verified.confirm(&[k; 32], Some(&hash)).unwrap();
    }
}

#[test]
fn an_undo_larger_than_the_history_budget_writes_no_record() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options::new(dir.path()).history_budget_mib(1);
    let db = Db::open(options.clone()).unwrap();
    let session = db.begin_session();
    for i in 0..512u32 {
        let key = *blake3::hash(&i.to_le_bytes()).as_bytes();
        session.write(key, Some(vec![1; 4096]));
    }
    session.commit().unwrap();
    let history = dir.path().join("history");
    let before = std::fs::metadata(&history).unwrap().len();
    // 512 values of 4 KiB replaced: a 2 MiB undo, over the budget alone.
    let session = db.begin_session();
    for i in 0..512u32 {
        let key = *blake3::hash(&i.to_le_bytes()).as_bytes();
        session.write(key, Some(vec![2; 4096]));
    }
    session.commit().unwrap();
    assert_eq!(std::fs::metadata(&history).unwrap().len(), before);
    assert_eq!(db.roots().unwrap().len(), 1);
    // A small commit after it is kept, and reopens.
    overwrite(&db, 3);
    assert_eq!(db.roots().unwrap().len(), 2);
    let roots = db.roots().unwrap();
    drop(db);
    assert_eq!(Db::open(options).unwrap().roots().unwrap(), roots);
}

#[test]
fn proofs_back_run_beside_commits_and_never_hold_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = std::sync::Arc::new(Db::open(Options::new(dir.path()).history(32)).unwrap());
    for fill in 0..4 {
        overwrite(&db, fill);
    }
    let old = db.roots().unwrap()[3];
    let keys = [[1; 32], [200; 32]];
    // With commits held back by someone else, a proof back still answers.
    {
        let _writer = db.shared.writer.lock();
        db.prove_at(&old, &keys).unwrap().verify(&old).unwrap();
    }
    let committer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for fill in 4..24 {
                overwrite(&db, fill);
                // A gap between commits, as between a node's blocks.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    // Proofs answer between commits while commits keep landing: each one
    // that answers says which committed root it ran beside.
    let mut beside = std::collections::BTreeSet::new();
    while !committer.is_finished() {
        match db.prove_at(&old, &keys) {
            Ok(proof) => {
                proof.verify(&old).unwrap();
                beside.insert(db.root().unwrap());
            }
            Err(Error::Busy) => {}
            Err(e) => panic!("{e}"),
        }
    }
    committer.join().unwrap();
    assert!(
        beside.len() >= 2,
        "proofs back answered beside {} of 21 committed roots",
        beside.len()
    );
    db.prove_at(&old, &keys).unwrap().verify(&old).unwrap();
}

#[test]
fn options_out_of_range_are_refused_at_open_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    type Set = fn(Options) -> Options;
    let cases: [(&str, Set); 8] = [
        ("snapshot_budget_mib", |o| o.snapshot_budget_mib(1 << 44)),
        ("history_budget_mib", |o| o.history_budget_mib(usize::MAX)),
        ("page_cache_mib", |o| o.page_cache_mib(usize::MAX >> 19)),
        ("value_cache_mib", |o| o.value_cache_mib(1 << 50)),
        ("import_memory_mib", |o| o.import_memory_mib(0)),
        ("commit_workers", |o| o.commit_workers(0)),
        ("catalog_fold_blocks", |o| o.catalog_fold_blocks(0)),
        ("history_trim_blocks", |o| o.history_trim_blocks(0)),
    ];
    for (name, set) in cases {
        match Db::open(set(Options::new(dir.path()))) {
            Err(Error::InvalidOptions { field, .. }) => assert_eq!(field, name),
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name}: opened"),
        }
        // Nothing was created.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{name}");
    }
    // The largest count that fits is taken.
    let db = Db::open(Options::new(dir.path()).snapshot_budget_mib(usize::MAX >> 20)).unwrap();
    drop(db);
}
