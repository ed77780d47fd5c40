//! Sessions are snapshots: no lost updates under concurrent commits, no torn
//! reads, and a session's reads stay at its base root while commits land.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{key, Rng};
use pagetrie::{Db, Error, KeyPath, Options};

const COUNTER: KeyPath = [0xc0; 32];
const A: KeyPath = [0xaa; 32];
const B: KeyPath = [0xbb; 32];

fn open(dir: &tempfile::TempDir) -> Db {
    Db::open(Options::new(dir.path())).unwrap()
}

/// Sleeps 0 to `max_us` microseconds, or not at all half the time; each
/// thread has its own `rng`, so runs differ by seed only.
fn pause(rng: &mut Rng, max_us: u64) {
    let r = rng.next();
    if r.is_multiple_of(2) {
        std::thread::sleep(Duration::from_micros((r >> 1) % max_us));
    }
}

fn counter(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
}

#[test]
fn concurrent_increments_are_never_lost() {
    const THREADS: u64 = 4;
    const COMMITS: u64 = 2000;
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let done = AtomicU64::new(0);
    let stale = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (db, done, stale) = (&db, &done, &stale);
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                while done.load(Ordering::SeqCst) < COMMITS {
                    // Pauses make sessions begin at every point of a commit.
                    pause(&mut rng, 400);
                    let session = db.begin_session();
                    let n = counter(session.read(&COUNTER).unwrap());
                    pause(&mut rng, 100);
                    session.write(COUNTER, Some((n + 1).to_le_bytes().to_vec()));
                    match session.commit() {
                        Ok(_) => {
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(Error::StaleSession) => {
                            stale.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("commit failed: {e}"),
                    }
                }
            });
        }
    });
    let done = done.load(Ordering::SeqCst);
    assert!(done >= COMMITS);
    assert_eq!(counter(db.read(&COUNTER).unwrap()), done, "increments lost");
    // The retries show the threads did contend.
    assert!(stale.load(Ordering::SeqCst) > 0);
    assert_eq!(db.metrics().live_sessions, 0);
    assert_eq!(db.metrics().retained_versions, 0);
}

#[test]
fn readers_never_see_a_torn_pair() {
    const COMMITS: u64 = 300;
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let writing = AtomicBool::new(true);
    let sessions = AtomicU64::new(0);
    let torn = AtomicU64::new(0);
    let errors = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            for n in 1..=COMMITS {
                let session = db.begin_session();
                session.write(A, Some(n.to_le_bytes().to_vec()));
                session.write(B, Some(n.to_le_bytes().to_vec()));
                session.commit().unwrap();
            }
            writing.store(false, Ordering::SeqCst);
        });
        for t in 0..3u64 {
            let (db, writing, sessions, torn, errors) = (&db, &writing, &sessions, &torn, &errors);
            s.spawn(move || {
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (t + 1));
                while writing.load(Ordering::SeqCst) {
                    let session = db.begin_session();
                    let a = session.read(&A);
                    pause(&mut rng, 300);
                    let b = session.read(&B);
                    match (a, b) {
                        (Ok(a), Ok(b)) => {
                            if a != b {
                                torn.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        _ => {
                            errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    sessions.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    assert!(sessions.load(Ordering::SeqCst) > 100);
    assert_eq!(torn.load(Ordering::SeqCst), 0, "torn sessions");
    assert_eq!(errors.load(Ordering::SeqCst), 0, "read errors");
}

#[test]
fn a_session_does_not_see_a_commit_that_lands_between_its_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let reader = db.begin_session();
    assert_eq!(reader.read(&A).unwrap(), None);

    let writer = db.begin_session();
    writer.write(A, Some(vec![1]));
    writer.write(B, Some(vec![1]));
    writer.commit().unwrap();

    assert_eq!(reader.read(&B).unwrap(), None);
    assert_eq!(reader.read(&A).unwrap(), None);
    assert_eq!(db.read(&B).unwrap(), Some(vec![1]));
    // Its snapshot is stale now: committing it would lose the writer's update.
    reader.write(A, Some(vec![2]));
    assert!(matches!(reader.commit(), Err(Error::StaleSession)));
    assert_eq!(db.read(&A).unwrap(), Some(vec![1]));
}

#[test]
fn a_session_held_across_100_commits_reads_its_base_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir);
    let long = |n: u64| vec![n as u8; 3000 + n as usize];
    // Base: keys 0..50 hold 0; key 1000 a value in overflow space.
    let setup = db.begin_session();
    for i in 0..50 {
        setup.write(key(i), Some(0u64.to_le_bytes().to_vec()));
    }
    setup.write(key(1000), Some(long(0)));
    setup.commit().unwrap();

    let held = db.begin_session();
    let base = held.prev_root().unwrap();
    for n in 1..=100u64 {
        let session = db.begin_session();
        for i in 0..50 {
            // Updates, deletes and inserts.
            let value = match (i + n) % 7 {
                0 => None,
                _ => Some(n.to_le_bytes().to_vec()),
            };
            session.write(key(i), value);
        }
        session.write(key(50 + n), Some(vec![1]));
        session.write(key(1000), (n % 3 != 0).then(|| long(n)));
        session.commit().unwrap();
    }
    assert_eq!(db.metrics().retained_versions, 100);
    assert!(db.metrics().retained_version_bytes > 100 * 50 * 8);

    // Read from several threads at once.
    std::thread::scope(|s| {
        for t in 0..3 {
            let held = &held;
            s.spawn(move || {
                for i in (t..50).step_by(3) {
                    assert_eq!(held.read(&key(i)).unwrap(), Some(vec![0; 8]));
                }
            });
        }
    });
    for n in 1..=100 {
        assert_eq!(held.read(&key(50 + n)).unwrap(), None);
    }
    assert_eq!(held.read(&key(1000)).unwrap(), Some(long(0)));
    assert_eq!(held.prev_root().unwrap(), base);
    assert_ne!(db.root().unwrap(), base);

    drop(held);
    let metrics = db.metrics();
    assert_eq!(
        (metrics.retained_versions, metrics.retained_version_bytes),
        (0, 0)
    );
}
