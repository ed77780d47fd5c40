//! What hints load: everything the commit of the hinted keys reads.

use crate::test_support::key;
use crate::{Db, Options};

/// Waits until the warmer has ended and the fetcher has taken every hint,
/// with the reads it started arrived.
fn settle(db: &Db) {
    db.settle_prefetch();
}

/// A database of keys `0..n` (each valued `[i as u8; 8]`), committed,
/// opened again and settled: nothing of it cached but what open reads.
fn reopened(n: u64) -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(Options::new(dir.path())).unwrap();
        let session = db.begin_session();
        for i in 0..n {
            session.write(key(i), Some(vec![i as u8; 8]));
        }
        session.commit().unwrap();
    }
    let db = Db::open(Options::new(dir.path())).unwrap();
    settle(&db);
    (dir, db)
}

/// With 50,000 keys the pages end two levels down, so a key's subtree below
/// them (a dozen keys) may begin in the bucket before the key's own. Keys
/// hinted, read then written, and keys hinted then deleted: no commit of them reads
/// (an insert may: a full bucket takes in the next one).
#[test]
fn a_commit_of_hinted_keys_reads_nothing() {
    let (_dir, db) = reopened(50_000);
    let session = db.begin_session();
    let (read, deleted): (Vec<u64>, Vec<u64>) = (0..1000).map(|i| i * 47).partition(|i| i % 2 == 0);
    for &i in &read {
        session.warm_up(&key(i));
        assert_eq!(session.read(&key(i)).unwrap(), Some(vec![i as u8; 8]));
    }
    settle(&db);
    let before = db.metrics();
    for &i in &deleted {
        session.warm_up(&key(i));
    }
    settle(&db);
    // The deleted keys' buckets, read by nothing but their hints, each
    // counted once.
    let after = db.metrics();
    let prefetched = after.buckets_prefetched - before.buckets_prefetched;
    assert!(prefetched >= 50, "{prefetched}");
    assert!(prefetched <= after.reads_issued - before.reads_issued);
    for &i in &read {
        session.write(key(i), Some(vec![!i as u8; 8]));
    }
    for &i in &deleted {
        session.write(key(i), None);
    }
    let before = db.metrics().reads_issued;
    session.commit_and_prove().unwrap();
    assert_eq!(
        db.metrics().reads_issued - before,
        0,
        "blocks read by the commit"
    );
}

/// Only `warm_up` prefetches: a read or a write starts no read beside the
/// session's own, which it would slow on the device.
#[test]
fn reads_and_writes_start_no_prefetch() {
    // Opened again, the buckets are not cached.
    let (_dir, db) = reopened(10_000);
    let session = db.begin_session();
    let before = db.metrics();
    for i in 0..100 {
        session.write(key(i * 7), None);
        session.write(key(1_000_000 + i), Some(vec![1; 8]));
    }
    for i in 0..100 {
        session.read(&key(i * 7 + 1)).unwrap();
    }
    settle(&db);
    let after = db.metrics();
    assert_eq!(after.hints_queued + after.hints_dropped, 0);
    // One block per read at most, none for a write.
    assert!(after.reads_issued - before.reads_issued <= 100, "{after:?}");
    session.warm_up(&key(3));
    settle(&db);
    assert!(db.metrics().reads_issued > after.reads_issued);
}
