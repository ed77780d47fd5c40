//! Versions through the public API: random commits, rollbacks, reopenings and
//! reads and proofs at retained roots against a model of every version; the
//! window's edges and errors; rollback against sessions and overlays; and
//! reads and proofs at every retained root while commits and rollbacks run.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use common::{cases, clustered_keys, root_of, value, Key};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, Options};
use parking_lot::Mutex;
use proptest::prelude::*;

type State = BTreeMap<Key, Vec<u8>>;

/// Commits `writes` (each key once) in one session.
fn commit(db: &Db, writes: &[(Key, Option<Vec<u8>>)]) -> [u8; 32] {
    let session = db.begin_session();
    for (k, v) in writes {
        session.write(*k, v.clone());
    }
    session.commit().unwrap()
}

fn apply(state: &State, writes: &[(Key, Option<Vec<u8>>)]) -> State {
    let mut next = state.clone();
    for (k, v) in writes {
        match v {
            Some(v) => next.insert(*k, v.clone()),
            None => next.remove(k),
        };
    }
    next
}

/// Checks `read_at` and `prove_at` of `keys` at `root` against `state`.
fn check_at(db: &Db, root: &[u8; 32], state: &State, keys: &[Key]) -> Result<(), Error> {
    for key in keys {
        assert_eq!(db.read_at(root, key)?, state.get(key).cloned(), "read_at");
    }
    let proof = db.prove_at(root, keys)?;
    let verified = proof.verify(root).unwrap();
    for key in keys {
        let hash = state.get(key).map(|v| hash_value(v));
        verified.confirm(key, hash.as_ref()).unwrap();
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Op {
    Commit(Vec<(usize, Option<Vec<u8>>)>),
    Rollback(usize),
    Reopen,
    Check(usize, Vec<usize>),
}

fn op(keys: usize) -> impl Strategy<Value = Op> {
    let write = (0..keys, prop::option::weighted(0.8, value()));
    prop_oneof![
        5 => prop::collection::vec(write, 0..12).prop_map(Op::Commit),
        2 => (0usize..7).prop_map(Op::Rollback),
        1 => Just(Op::Reopen),
        3 => (0usize..8, prop::collection::vec(0..keys, 1..6)).prop_map(|(v, k)| Op::Check(v, k)),
    ]
}

fn workload() -> impl Strategy<Value = (usize, Vec<Key>, Vec<Op>)> {
    (0usize..6, clustered_keys(40)).prop_flat_map(|(window, mut keys)| {
        keys.push([0xff; 32]);
        keys.sort();
        keys.dedup();
        let n = keys.len();
        (
            Just(window),
            Just(keys),
            prop::collection::vec(op(n), 1..40),
        )
    })
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn versions_follow_the_model((window, keys, ops) in workload()) {
        let dir = tempfile::tempdir().unwrap();
        let options = Options::new(dir.path()).history(window).commit_workers(2);
        let mut db = Db::open(options.clone()).unwrap();
        // The retained versions, newest last.
        let mut versions: Vec<State> = vec![State::new()];
        for op in ops {
            match op {
                Op::Commit(writes) => {
                    let writes: BTreeMap<Key, Option<Vec<u8>>> =
                        writes.into_iter().map(|(k, v)| (keys[k], v)).collect();
                    let writes: Vec<_> = writes.into_iter().collect();
                    let next = apply(versions.last().unwrap(), &writes);
                    prop_assert_eq!(commit(&db, &writes), root_of(&next));
                    versions.push(next);
                    if versions.len() > window + 1 {
                        versions.remove(0);
                    }
                }
                Op::Rollback(k) => {
                    let before = db.roots().unwrap();
                    match db.rollback(k) {
                        Ok(root) => {
                            prop_assert!(k < versions.len());
                            versions.truncate(versions.len() - k);
                            prop_assert_eq!(root, root_of(versions.last().unwrap()));
                        }
                        Err(Error::RollbackTooFar { requested, retained }) => {
                            prop_assert!(k >= versions.len());
                            prop_assert_eq!((requested, retained), (k, versions.len() - 1));
                            prop_assert_eq!(db.roots().unwrap(), before);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Reopen => {
                    drop(db);
                    db = Db::open(options.clone()).unwrap();
                }
                Op::Check(back, picked) => {
                    let picked: Vec<Key> = picked.into_iter().map(|k| keys[k]).collect();
                    let roots = db.roots().unwrap();
                    match roots.get(back) {
                        Some(root) => {
                            let state = &versions[versions.len() - 1 - back];
                            check_at(&db, root, state, &picked).unwrap();
                        }
                        None => {
                            // A root of no retained version.
                            let mut other = versions[0].clone();
                            other.insert([0x42; 32], vec![1]);
                            let root = root_of(&other);
                            prop_assert!(matches!(db.read_at(&root, &picked[0]), Err(Error::UnknownRoot)));
                            prop_assert!(matches!(db.prove_at(&root, &picked), Err(Error::UnknownRoot)));
                        }
                    }
                }
            }
            let expected: Vec<[u8; 32]> = versions.iter().rev().map(root_of).collect();
            prop_assert_eq!(db.roots().unwrap(), expected);
            prop_assert_eq!(db.root().unwrap(), root_of(versions.last().unwrap()));
        }
    }
}

fn block(n: u8) -> Vec<(Key, Option<Vec<u8>>)> {
    (0..20u8)
        .map(|i| {
            let key = *blake3::hash(&[n.wrapping_mul(7).wrapping_add(i) % 50]).as_bytes();
            (key, (i % 5 != 0).then(|| vec![n, i]))
        })
        .collect::<BTreeMap<_, _>>()
        .into_iter()
        .collect()
}

#[test]
fn rolling_back_and_committing_the_same_blocks_again_gives_the_same_roots() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).history(4)).unwrap();
    let roots: Vec<_> = (1..=6).map(|n| commit(&db, &block(n))).collect();
    assert_eq!(db.rollback(3).unwrap(), roots[2]);
    assert_eq!(db.root().unwrap(), roots[2]);
    // The window held commits 3 to 6: their undos reach back to root 2.
    assert_eq!(db.roots().unwrap(), vec![roots[2], roots[1]]);
    for n in 4..=6 {
        assert_eq!(commit(&db, &block(n)), roots[n as usize - 1]);
    }
    assert_eq!(
        db.roots().unwrap(),
        vec![roots[5], roots[4], roots[3], roots[2], roots[1]]
    );
    assert_eq!(db.rollback(0).unwrap(), roots[5]);
    // The same after reopening.
    drop(db);
    let db = Db::open(Options::new(dir.path()).history(4)).unwrap();
    assert_eq!(
        db.roots().unwrap(),
        vec![roots[5], roots[4], roots[3], roots[2], roots[1]]
    );
    assert_eq!(db.rollback(4).unwrap(), roots[1]);
}

#[test]
fn too_far_back_or_an_unknown_root_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).history(2)).unwrap();
    let empty = db.root().unwrap();
    let roots: Vec<_> = (1..=3).map(|n| commit(&db, &block(n))).collect();
    assert!(matches!(
        db.rollback(3),
        Err(Error::RollbackTooFar {
            requested: 3,
            retained: 2
        })
    ));
    assert_eq!(db.root().unwrap(), roots[2]);
    for root in [empty, [7; 32]] {
        assert!(matches!(
            db.read_at(&root, &[1; 32]),
            Err(Error::UnknownRoot)
        ));
        assert!(matches!(
            db.prove_at(&root, &[[1; 32]]),
            Err(Error::UnknownRoot)
        ));
    }
    // Rolled back roots leave the window.
    db.rollback(1).unwrap();
    assert!(matches!(
        db.read_at(&roots[2], &[1; 32]),
        Err(Error::UnknownRoot)
    ));
    assert_eq!(db.roots().unwrap(), vec![roots[1], roots[0]]);
}

#[test]
fn sessions_and_overlays_begun_before_a_rollback_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    let first = commit(&db, &block(1));
    commit(&db, &block(2));
    let session = db.begin_session();
    session.write([1; 32], Some(vec![1]));
    let parent = db.begin_session();
    parent.write([2; 32], Some(vec![2]));
    let overlay = parent.finish().unwrap().into_overlay();
    let child = db.begin_session_on(&overlay);
    child.write([3; 32], Some(vec![3]));
    let reader = db.begin_session();
    let before = reader.read(&block(2)[0].0).unwrap();
    assert_eq!(db.rollback(1).unwrap(), first);
    assert!(matches!(session.commit(), Err(Error::StaleSession)));
    assert!(matches!(overlay.commit(), Err(Error::StaleSession)));
    assert!(matches!(child.commit(), Err(Error::StaleSession)));
    // A snapshot taken before still reads its own version.
    assert_eq!(reader.read(&block(2)[0].0).unwrap(), before);
    assert_eq!(db.root().unwrap(), first);
}

#[test]
fn a_window_of_zero_keeps_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).history(0)).unwrap();
    for n in 1..=5 {
        commit(&db, &block(n));
    }
    assert_eq!(db.roots().unwrap(), vec![db.root().unwrap()]);
    assert!(matches!(
        db.rollback(1),
        Err(Error::RollbackTooFar { retained: 0, .. })
    ));
    assert_eq!(db.metrics().history_bytes, 0);
    assert_eq!(
        std::fs::metadata(dir.path().join("history")).unwrap().len(),
        0
    );
    drop(db);
    // History kept once is discarded when reopened with none.
    let db = Db::open(Options::new(dir.path()).history(3)).unwrap();
    for n in 6..=8 {
        commit(&db, &block(n));
    }
    assert_eq!(db.roots().unwrap().len(), 4);
    assert!(std::fs::metadata(dir.path().join("history")).unwrap().len() > 0);
    drop(db);
    let db = Db::open(Options::new(dir.path()).history(0)).unwrap();
    assert_eq!(db.roots().unwrap().len(), 1);
    assert_eq!(
        std::fs::metadata(dir.path().join("history")).unwrap().len(),
        0
    );
    drop(db);
    let db = Db::open(Options::new(dir.path()).history(3)).unwrap();
    assert_eq!(db.roots().unwrap().len(), 1);
}

#[test]
fn the_window_holds_over_many_commits_and_reopenings() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).history(3)).unwrap();
    let mut states = vec![State::new()];
    for n in 0..200u32 {
        let writes: Vec<_> = (0..40u32)
            .map(|i| {
                (
                    *blake3::hash(&(n * 40 + i).to_le_bytes()).as_bytes(),
                    Some(vec![1; 30]),
                )
            })
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
        states.push(apply(states.last().unwrap(), &writes));
        commit(&db, &writes);
    }
    let roots = db.roots().unwrap();
    assert_eq!(roots.len(), 4);
    for (back, root) in roots.iter().enumerate() {
        let state = &states[states.len() - 1 - back];
        assert_eq!(*root, root_of(state));
        let keys: Vec<Key> = state.keys().rev().take(5).copied().collect();
        check_at(&db, root, state, &keys).unwrap();
    }
    drop(db);
    let db = Db::open(Options::new(dir.path()).history(3)).unwrap();
    assert_eq!(db.roots().unwrap(), roots);
}

#[test]
fn reads_and_proofs_at_retained_roots_hold_while_commits_and_rollbacks_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(Options::new(dir.path()).history(6).commit_workers(2)).unwrap());
    let keys: Vec<Key> = (0..50u8)
        .map(|i| *blake3::hash(&[i % 50]).as_bytes())
        .collect();
    // Every state the writer made, by root.
    let states: Arc<Mutex<HashMap<[u8; 32], State>>> = Arc::default();
    states.lock().insert(db.root().unwrap(), State::new());
    let done = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, states, done, checked, keys) = (
                db.clone(),
                states.clone(),
                done.clone(),
                checked.clone(),
                keys.clone(),
            );
            std::thread::spawn(move || {
                let mut i = r;
                while !done.load(Ordering::SeqCst) {
                    let roots = db.roots().unwrap();
                    i += 1;
                    let root = roots[i % roots.len()];
                    let state = states.lock().get(&root).cloned().unwrap();
                    let picked: Vec<Key> = (0..4).map(|j| keys[(i * 7 + j * 13) % 50]).collect();
                    match check_at(&db, &root, &state, &picked) {
                        Ok(()) => {
                            checked.fetch_add(1, Ordering::SeqCst);
                        }
                        // Rolled back or out of the window meanwhile.
                        Err(Error::UnknownRoot) => {}
                        // Commits landed during every attempt of a proof
                        // back (they come every few milliseconds here): it
                        // refuses rather than hold them back.
                        Err(Error::Busy) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    let mut current = State::new();
    let mut history: Vec<State> = vec![current.clone()];
    for n in 1..=60u8 {
        if n % 5 == 0 {
            let k = (n as usize / 5) % 4 + 1;
            let k = k.min(history.len() - 1);
            db.rollback(k).unwrap();
            history.truncate(history.len() - k);
            current = history.last().unwrap().clone();
        } else {
            let writes = block(n);
            current = apply(&current, &writes);
            states.lock().insert(root_of(&current), current.clone());
            commit(&db, &writes);
            history.push(current.clone());
            if history.len() > 7 {
                history.remove(0);
            }
        }
        assert_eq!(db.root().unwrap(), root_of(&current));
    }
    done.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().unwrap();
    }
    assert!(checked.load(Ordering::SeqCst) > 20, "{checked:?} checks");
}
