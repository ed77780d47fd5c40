//! The root before durability (`Session::finish`, `Finished::commit`) and
//! proofs on demand (`Db::prove`, `Session::prove`).

mod common;

use std::collections::BTreeMap;

use common::{key, root_of};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, KeyPath, Options};

/// A database holding keys 0..500, and its model.
fn setup(dir: &tempfile::TempDir) -> (Db, BTreeMap<KeyPath, Vec<u8>>) {
    let db = Db::open(Options::new(dir.path())).unwrap();
    let mut model = BTreeMap::new();
    let session = db.begin_session();
    for i in 0..500 {
        session.write(key(i), Some(i.to_le_bytes().to_vec()));
        model.insert(key(i), i.to_le_bytes().to_vec());
    }
    session.commit().unwrap();
    (db, model)
}

#[test]
fn finish_gives_the_root_and_witness_before_anything_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir);
    let before = db.root().unwrap();
    let session = db.begin_session();
    assert_eq!(
        session.read(&key(3)).unwrap(),
        Some(3u64.to_le_bytes().to_vec())
    );
    session.write(key(3), None);
    session.write(key(1000), Some(vec![9; 300]));
    let finished = session.finish().unwrap();
    model.remove(&key(3));
    model.insert(key(1000), vec![9; 300]);

    assert_eq!(finished.prev_root(), before);
    assert_eq!(finished.root(), root_of(&model));
    assert_eq!(
        finished.witness().verify_update(&before).unwrap(),
        finished.root()
    );
    // Nothing moved yet: not the root, not what readers see.
    assert_eq!(db.root().unwrap(), before);
    assert_eq!(db.read(&key(3)).unwrap(), Some(3u64.to_le_bytes().to_vec()));

    let out = finished.commit().unwrap();
    assert_eq!(out.root, root_of(&model));
    assert_eq!(db.root().unwrap(), out.root);
    assert_eq!(db.read(&key(3)).unwrap(), None);
    drop(db);
    let db = Db::open(Options::new(dir.path())).unwrap();
    assert_eq!(db.root().unwrap(), root_of(&model));
}

#[test]
fn of_two_finished_sessions_on_one_base_the_first_commit_wins() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = setup(&dir);
    let a = db.begin_session();
    let b = db.begin_session();
    a.write(key(1), Some(vec![1]));
    b.write(key(1), Some(vec![2]));
    let (a, b) = (a.finish().unwrap(), b.finish().unwrap());
    assert_eq!(a.prev_root(), b.prev_root());
    let a_root = a.commit().unwrap().root;
    assert!(matches!(b.commit(), Err(Error::StaleSession)));
    assert_eq!(db.root().unwrap(), a_root);
    assert_eq!(db.read(&key(1)).unwrap(), Some(vec![1]));
}

#[test]
fn a_dropped_finished_session_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = setup(&dir);
    let session = db.begin_session();
    session.write(key(5), None);
    drop(session.finish().unwrap());
    assert_eq!(db.root().unwrap(), root_of(&model));
    assert_eq!(db.read(&key(5)).unwrap(), Some(5u64.to_le_bytes().to_vec()));
    let session = db.begin_session();
    session.write(key(6), None);
    session.commit().unwrap();
}

#[test]
fn proofs_on_demand_verify_for_present_and_absent_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = setup(&dir);
    let keys: Vec<KeyPath> = (0..40).map(|i| key(i * 17)).collect(); // some past 500: absent
    let check = |proof: pagetrie::MultiProof| {
        let verified = proof.verify(&root_of(&model)).unwrap();
        for k in &keys {
            verified
                .confirm(k, model.get(k).map(|v| hash_value(v)).as_ref())
                .unwrap();
        }
    };
    check(db.prove(&keys).unwrap());
    let session = db.begin_session();
    session.write(key(1), None); // not in the proof: it is of the base
    check(session.prove(&keys).unwrap());

    // Another commit lands: the session's base is gone from the pages.
    let other = db.begin_session();
    other.write(key(2), None);
    other.commit().unwrap();
    assert!(matches!(session.prove(&keys), Err(Error::StaleSession)));
    db.prove(&[key(2)])
        .unwrap()
        .verify(&db.root().unwrap())
        .unwrap()
        .confirm(&key(2), None)
        .unwrap();
}
