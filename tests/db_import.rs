//! `Db::import`: the same root as commits, errors that leave nothing behind, and
//! crash safety (a kill leaves no database or a complete one).

mod common;

use std::time::Duration;

use common::{key, Child, Rng};
use pagetrie::trie::{compute_root, hash_value};
use pagetrie::{Db, Error, ImportProgress, Options};

/// Entries in hash order (not sorted), values of varied sizes, overflow included.
fn entries(n: u64) -> Vec<([u8; 32], Vec<u8>)> {
    (0..n)
        .map(|i| {
            let len = match i % 1000 {
                0 => 5000,
                1 => 0,
                _ => 8,
            };
            (key(i), vec![i as u8; len])
        })
        .collect()
}

fn root_of(entries: &[([u8; 32], Vec<u8>)]) -> [u8; 32] {
    compute_root(entries.iter().map(|(k, v)| (*k, hash_value(v)))).unwrap()
}

#[test]
fn imported_database_matches_one_built_by_commits() {
    let dir = tempfile::tempdir().unwrap();
    let input = entries(30_000);
    let mut reported = Vec::new();
    let db = Db::import(
        Options::new(dir.path().join("imported")),
        input.clone(),
        |p| reported.push(p),
    )
    .unwrap();
    assert_eq!(
        reported.last(),
        Some(&ImportProgress::Writing {
            entries: 30_000,
            total: 30_000
        })
    );

    let built = Db::open(Options::new(dir.path().join("committed"))).unwrap();
    for block in input.chunks(7_000) {
        let session = built.begin_session();
        for (k, v) in block {
            session.write(*k, Some(v.clone()));
        }
        session.commit().unwrap();
    }
    assert_eq!(db.root().unwrap(), built.root().unwrap());
    assert_eq!(db.root().unwrap(), root_of(&input));
    for (k, v) in input.iter().step_by(97) {
        assert_eq!(db.read(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(db.metrics().keys_stored, 30_000);
    assert!(!dir.path().join("imported.importing").exists());

    // It is an ordinary database: commits work and it reopens.
    let session = db.begin_session();
    session.write(key(1), None);
    let out = session.commit_and_prove().unwrap();
    assert_eq!(out.witness.verify_update(&out.prev_root).unwrap(), out.root);
    drop(db);
    let db = Db::open(Options::new(dir.path().join("imported"))).unwrap();
    assert_eq!(db.root().unwrap(), out.root);
}

#[test]
fn keys_sharing_a_prefix_are_split_to_fit_a_small_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    // Every key starts with the same two bytes: one spill file holds them all.
    let input: Vec<_> = (0..60_000u64)
        .map(|i| {
            let mut k = key(i);
            k[0] = 0x42;
            k[1] = 0x17;
            (k, i.to_be_bytes().to_vec())
        })
        .collect();
    let options = Options::new(dir.path().join("db")).import_memory_mib(1);
    let db = Db::import(options, input.clone(), |_| {}).unwrap();
    assert_eq!(db.root().unwrap(), root_of(&input));
}

#[test]
fn bad_input_fails_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut input = entries(5_000);
    input.push(input[1234].clone());
    match Db::import(Options::new(&path), input, |_| {}) {
        Err(Error::DuplicateKey(k)) => assert_eq!(k, key(1234)),
        other => panic!(
            "expected a duplicate key error, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(!path.exists());
    assert!(!dir.path().join("db.importing").exists());

    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("something"), b"x").unwrap();
    assert!(matches!(
        Db::import(Options::new(&path), entries(10), |_| {}),
        Err(Error::DirectoryNotEmpty)
    ));
    assert_eq!(std::fs::read(path.join("something")).unwrap(), b"x");
}

const CHILD_ENV: &str = "PAGETRIE_IMPORT_CRASH_CHILD";
const CRASH_ENTRIES: u64 = 200_000;

#[test]
fn import_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let options = Options::new(path).import_memory_mib(4);
    Db::import(options, entries(CRASH_ENTRIES), |_| {}).unwrap();
}

#[test]
fn killed_import_leaves_no_database_or_a_complete_one() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let expected = root_of(&entries(CRASH_ENTRIES));
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let (mut absent, mut complete) = (0, 0);
    for attempt in 0..12 {
        let path = dir.path().join(format!("db{}", attempt % 3));
        let child = Child::spawn("import_child", &[(CHILD_ENV, path.as_os_str())]);
        std::thread::sleep(Duration::from_millis(20 + rng.next() % 1500));
        child.kill(); // SIGKILL
        if path.exists() {
            let db = Db::open(Options::new(&path)).unwrap();
            assert_eq!(
                db.root().unwrap(),
                expected,
                "attempt {attempt}: incomplete database"
            );
            drop(db);
            std::fs::remove_dir_all(&path).unwrap();
            complete += 1;
        } else {
            absent += 1;
        }
    }
    // A later import cleans up after a killed one.
    let path = dir.path().join("db0");
    let db = Db::import(Options::new(&path), entries(1000), |_| {}).unwrap();
    assert_eq!(db.root().unwrap(), root_of(&entries(1000)));
    println!("{absent} kills left no database, {complete} a complete one");
    assert!(absent > 0, "no kill landed during an import");
}

#[test]
fn a_second_import_to_the_same_path_is_refused_and_the_first_completes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let input = entries(5_000);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            // Holds the import open between its first and second entry.
            let mut paused = Some((started_tx, go_rx));
            let gated = input.iter().cloned().inspect(move |_| {
                if let Some((started, go)) = paused.take() {
                    started.send(()).unwrap();
                    go.recv().unwrap();
                }
            });
            Db::import(Options::new(&path), gated, |_| {})
        });
        started_rx.recv().unwrap();
        let second = Db::import(Options::new(&path), entries(10), |_| {});
        assert!(matches!(second, Err(Error::Locked)), "{:?}", second.err());
        go_tx.send(()).unwrap();
        let db = first.join().unwrap().unwrap();
        assert_eq!(db.root().unwrap(), root_of(&input));
    });
    assert!(!dir.path().join("db.importing").exists());
}
