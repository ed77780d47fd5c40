//! Overlays: finished sessions kept in memory that later sessions build on,
//! forks that compete, commits in order, and refusals of the losing forks.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{cases, key, root_of};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, KeyPath, Options, Overlay};
use proptest::prelude::*;

type Model = BTreeMap<KeyPath, Vec<u8>>;

/// Finishes a session on `on` (the database if `None`) writing `writes`,
/// checking its reads, proof, root and witness against `base` and the model
/// after; returns the overlay and that model.
fn build(
    db: &Db,
    on: Option<&Overlay>,
    base: &Model,
    writes: &[(u64, Option<Vec<u8>>)],
) -> Result<(Overlay, Model), Error> {
    let session = match on {
        Some(parent) => db.begin_session_on(parent),
        None => db.begin_session(),
    };
    assert_eq!(session.prev_root().unwrap(), root_of(base));
    let mut after = base.clone();
    for (k, v) in writes {
        assert_eq!(
            session.read(&key(*k)).unwrap().as_ref(),
            after.get(&key(*k))
        );
        session.write(key(*k), v.clone());
        match v {
            Some(v) => after.insert(key(*k), v.clone()),
            None => after.remove(&key(*k)),
        };
    }
    let finished = session.finish()?;
    assert_eq!(finished.prev_root(), root_of(base));
    // The witness proves every key read or written at the base.
    let verified = finished.witness().verify(&finished.prev_root()).unwrap();
    for (k, _) in writes {
        let before = base.get(&key(*k)).map(|v| hash_value(v));
        verified.confirm(&key(*k), before.as_ref()).unwrap();
    }
    assert_eq!(finished.root(), root_of(&after));
    assert_eq!(
        finished
            .witness()
            .verify_update(&finished.prev_root())
            .unwrap(),
        finished.root()
    );
    let overlay = finished.into_overlay();
    assert_eq!(overlay.root(), root_of(&after));
    Ok((overlay, after))
}

/// A database holding keys 0..300.
fn setup(dir: &tempfile::TempDir) -> (Db, Model) {
    let db = Db::open(Options::new(dir.path())).unwrap();
    let writes: Vec<_> = (0..300).map(|i| (i, Some(vec![i as u8; 5]))).collect();
    let (o, model) = build(&db, None, &Model::new(), &writes).unwrap();
    o.commit().unwrap();
    (db, model)
}

#[test]
fn two_competing_children_of_one_parent_and_the_winner_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (db, base) = setup(&dir);
    let (parent, p) = build(&db, None, &base, &[(1, None), (400, Some(vec![4; 40]))]).unwrap();
    let (a, a_model) = build(
        &db,
        Some(&parent),
        &p,
        &[(2, Some(vec![22])), (1, Some(vec![11]))],
    )
    .unwrap();
    let (b, b_model) = build(&db, Some(&parent), &p, &[(2, Some(vec![33])), (401, None)]).unwrap();
    // Nothing is durable or visible yet.
    assert_eq!(db.root().unwrap(), root_of(&base));
    assert_eq!(db.read(&key(400)).unwrap(), None);
    for (o, m) in [(&a, &a_model), (&b, &b_model), (&parent, &p)] {
        for k in [1, 2, 3, 400, 401] {
            assert_eq!(o.read(&key(k)).unwrap().as_ref(), m.get(&key(k)));
        }
    }
    a.commit().unwrap();
    assert!(parent.is_committed().unwrap() && a.is_committed().unwrap());
    assert_eq!(db.root().unwrap(), root_of(&a_model));
    assert_eq!(db.read(&key(2)).unwrap(), Some(vec![22]));
    assert!(matches!(b.commit(), Err(Error::StaleSession)));
    // The loser still reads its own state, and a session on it is refused.
    assert_eq!(b.read(&key(2)).unwrap(), Some(vec![33]));
    assert!(matches!(
        build(&db, Some(&b), &b_model, &[(5, None)]),
        Err(Error::StaleSession)
    ));
    // Committing the winner again does nothing.
    a.commit().unwrap();
    drop((a, b, parent));
    drop(db);
    let db = Db::open(Options::new(dir.path())).unwrap();
    assert_eq!(db.root().unwrap(), root_of(&a_model));
}

/// Two forks that reach the same state: once one commits and a block is
/// built on it, the other's state is still the committed one it was.
#[test]
fn an_overlay_whose_state_another_fork_committed_and_built_on_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let (db, base) = setup(&dir);
    let writes = [(7, Some(vec![7; 9])), (500, None)];
    let (first, model) = build(&db, None, &base, &writes).unwrap();
    let (twin, _) = build(&db, None, &base, &writes).unwrap();
    let (child, _) = build(&db, Some(&twin), &model, &[(8, None)]).unwrap();
    assert_eq!(first.root(), twin.root());
    first.commit().unwrap();
    let (next, next_model) = build(&db, Some(&first), &model, &[(9, Some(vec![1]))]).unwrap();
    next.commit().unwrap();
    assert!(twin.is_committed().unwrap());
    assert_eq!(twin.commit().unwrap(), first.root());
    // Its child forked from the state the chain left: still refused.
    assert!(matches!(child.commit(), Err(Error::StaleSession)));
    assert!(!child.is_committed().unwrap());
    assert_eq!(db.root().unwrap(), root_of(&next_model));
}

#[test]
fn a_chain_of_64_overlays_reads_through_and_commits_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir);
    let mut chain: Vec<Overlay> = Vec::new();
    for n in 0..64u64 {
        let writes = [
            (n, Some(vec![n as u8, 1])),
            (1000 + n, Some(vec![7; 50])),
            (n + 100, None),
        ];
        let (o, m) = build(&db, chain.last(), &model, &writes).unwrap();
        chain.push(o);
        model = m;
    }
    let last = chain.last().unwrap();
    for k in (0..300).chain(1000..1064) {
        assert_eq!(last.read(&key(k)).unwrap().as_ref(), model.get(&key(k)));
    }
    // A proof at the tip of the chain, before anything is committed.
    let session = db.begin_session_on(last);
    let proof = session.prove(&[key(5), key(120), key(5000)]).unwrap();
    let verified = proof.verify(&last.root()).unwrap();
    verified
        .confirm(&key(5), Some(&hash_value(&model[&key(5)])))
        .unwrap();
    verified.confirm(&key(120), None).unwrap();
    verified.confirm(&key(5000), None).unwrap();
    drop(session);
    // Committing the tip commits all 64 first.
    last.commit().unwrap();
    assert!(chain.iter().all(|o| o.is_committed().unwrap()));
    assert_eq!(db.root().unwrap(), root_of(&model));
    for k in (0..300).chain(1000..1064) {
        assert_eq!(db.read(&key(k)).unwrap().as_ref(), model.get(&key(k)));
    }
}

#[test]
fn sessions_on_an_overlay_see_its_state_while_its_ancestors_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (db, base) = setup(&dir);
    let (first, m1) = build(&db, None, &base, &[(1, Some(vec![1, 1]))]).unwrap();
    let (second, m2) = build(&db, Some(&first), &m1, &[(2, Some(vec![2, 2]))]).unwrap();
    let session = db.begin_session_on(&second);
    std::thread::scope(|s| {
        s.spawn(|| first.commit().unwrap());
        for _ in 0..200 {
            for k in [1, 2, 3] {
                assert_eq!(session.read(&key(k)).unwrap().as_ref(), m2.get(&key(k)));
            }
        }
    });
    // Its base's parent is committed now: it builds and commits on top.
    session.write(key(3), None);
    let mut m3 = m2.clone();
    m3.remove(&key(3));
    let out = session.commit_and_prove().unwrap();
    assert_eq!(out.root, root_of(&m3));
    assert_eq!(out.witness.verify_update(&out.prev_root).unwrap(), out.root);
    assert!(second.is_committed().unwrap());
    assert_eq!(db.root().unwrap(), root_of(&m3));
}

/// A pipeline: each block is finished on its parent's overlay while the
/// parent commits on another thread, and ends at the root of the writes
/// applied in order.
#[test]
fn each_block_finishes_while_its_parent_commits() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir);
    let (mut parent, m) = build(&db, None, &model, &[(7, Some(vec![7]))]).unwrap();
    model = m;
    for n in 0..24u64 {
        let writes: Vec<_> = (0..40)
            .map(|i| (n * 37 + i * 11 % 500, Some(vec![n as u8, i as u8])))
            .chain([(n + 1, None)])
            .collect();
        let (child, m) = std::thread::scope(|s| {
            let committing = s.spawn(|| parent.commit().unwrap());
            let built = build(&db, Some(&parent), &model, &writes).unwrap();
            assert_eq!(committing.join().unwrap(), parent.root());
            built
        });
        assert_eq!(db.root().unwrap(), parent.root());
        parent = child;
        model = m;
    }
    parent.commit().unwrap();
    assert_eq!(db.root().unwrap(), root_of(&model));
    for k in 0..1400 {
        assert_eq!(db.read(&key(k)).unwrap().as_ref(), model.get(&key(k)));
    }
}

/// A block finished on an overlay while a competing fork commits: it is
/// refused, before or at its commit, and never yields another state's root.
#[test]
fn a_fork_committed_while_a_block_finishes_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let (db, base) = setup(&dir);
    for n in 0..8u64 {
        let (parent, p) = build(&db, None, &base, &[(n, Some(vec![1, n as u8]))]).unwrap();
        let (fork, _) = build(&db, None, &base, &[(n, Some(vec![2, n as u8]))]).unwrap();
        let session = db.begin_session_on(&parent);
        let mut expected = p.clone();
        for i in 0..200 {
            session.write(key(i), Some(vec![3, n as u8]));
            expected.insert(key(i), vec![3, n as u8]);
        }
        let finished = std::thread::scope(|s| {
            s.spawn(|| fork.commit().unwrap());
            session.finish()
        });
        match finished {
            Ok(finished) => {
                assert_eq!(finished.root(), root_of(&expected));
                assert!(matches!(finished.commit(), Err(Error::StaleSession)));
            }
            Err(e) => assert!(matches!(e, Error::StaleSession), "{e:?}"),
        }
        assert_eq!(db.root().unwrap(), fork.root());
        // The next round forks from the fork's state: put the base back.
        let back = db.begin_session();
        for (k, v) in &base {
            if k == &key(n) {
                back.write(*k, Some(v.clone()));
            }
        }
        back.commit().unwrap();
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A session on the database (`None`) or on a live overlay (by index,
    /// modulo their number), finished into an overlay.
    Build(Option<usize>, Vec<(u64, Option<u8>)>),
    Commit(usize),
    Drop(usize),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let writes = prop::collection::vec((0u64..40, prop::option::of(any::<u8>())), 0..6);
    prop_oneof![
        4 => (prop::option::of(0usize..8), writes).prop_map(|(on, w)| Op::Build(on, w)),
        2 => (0usize..8).prop_map(Op::Commit),
        1 => (0usize..8).prop_map(Op::Drop),
        1 => Just(Op::Reopen),
    ]
}

/// A value of `n` bytes for byte `b`: some inline, some in overflow space.
fn value(b: u8) -> Vec<u8> {
    vec![b; 1 + (b as usize % 4) * 150]
}

proptest! {
    #![proptest_config(cases(12))]

    /// Random trees of overlays: every root, witness and read against a
    /// model; a commit succeeds exactly when the committed state lies on the
    /// overlay's chain.
    #[test]
    fn random_trees_of_overlays_match_a_model(ops in prop::collection::vec(op(), 1..24)) {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Db::open(Options::new(dir.path())).unwrap();
        // State 0 is the empty database; overlay states get ids from 1. Two
        // states are the same when their height and root are.
        let mut states: HashMap<usize, Model> = HashMap::from([(0, Model::new())]);
        let mut parent_of: HashMap<usize, usize> = HashMap::new();
        let mut height: HashMap<usize, usize> = HashMap::from([(0, 0)]);
        // The committed state, and the overlays committed as themselves.
        let mut committed = 0usize;
        let mut done: std::collections::HashSet<usize> = Default::default();
        let mut live: Vec<(usize, Overlay)> = Vec::new();
        // Whether state `target` is `id`'s or one of its ancestors'.
        let on_chain = |parent_of: &HashMap<usize, usize>, height: &HashMap<usize, usize>,
                        states: &HashMap<usize, Model>, mut id: usize, target: usize| loop {
            if height[&id] == height[&target] && root_of(&states[&id]) == root_of(&states[&target]) {
                return true;
            }
            match parent_of.get(&id) {
                Some(&p) => id = p,
                None => return false,
            }
        };
        for op in ops {
            match op {
                Op::Build(on, writes) => {
                    let on = on.filter(|_| !live.is_empty()).map(|i| i % live.len());
                    let base_id = on.map_or(committed, |i| live[i].0);
                    let writes: Vec<_> = writes.into_iter().map(|(k, v)| (k, v.map(value))).collect();
                    let result = build(&db, on.map(|i| &live[i].1), &states[&base_id], &writes);
                    let expected = on_chain(&parent_of, &height, &states, base_id, committed);
                    match result {
                        Ok((overlay, model)) => {
                            prop_assert!(expected, "built off the chain");
                            let id = states.len();
                            states.insert(id, model);
                            parent_of.insert(id, base_id);
                            height.insert(id, height[&base_id] + 1);
                            live.push((id, overlay));
                        }
                        Err(Error::StaleSession) => prop_assert!(!expected, "refused on the chain"),
                        Err(e) => panic!("build: {e}"),
                    }
                }
                Op::Commit(i) if !live.is_empty() => {
                    let (id, overlay) = &live[i % live.len()];
                    // Committed before (itself, or as an ancestor), or its
                    // state is the committed one: nothing to do.
                    let same = height[id] == height[&committed]
                        && root_of(&states[id]) == root_of(&states[&committed]);
                    let already = done.contains(id) || same;
                    let expected = already || on_chain(&parent_of, &height, &states, *id, committed);
                    if overlay.is_committed().unwrap() {
                        prop_assert!(already);
                    }
                    match overlay.commit() {
                        Ok(root) => {
                            prop_assert!(expected, "committed off the chain");
                            prop_assert_eq!(root, overlay.root());
                            if !already {
                                prop_assert_eq!(db.root().unwrap(), root);
                            }
                            if already {
                                // Committed as the same state: it counts as
                                // committed from now on, whatever comes after.
                                done.insert(*id);
                            } else {
                                let mut n = *id;
                                while done.insert(n) {
                                    match parent_of.get(&n) {
                                        Some(&p) => n = p,
                                        None => break,
                                    }
                                }
                                committed = *id;
                            }
                        }
                        Err(Error::StaleSession) => prop_assert!(!expected, "refused on the chain"),
                        Err(e) => panic!("commit: {e}"),
                    }
                    prop_assert_eq!(db.root().unwrap(), root_of(&states[&committed]));
                }
                Op::Drop(i) if !live.is_empty() => {
                    live.remove(i % live.len());
                }
                Op::Reopen => {
                    live.clear();
                    drop(db);
                    db = Db::open(Options::new(dir.path())).unwrap();
                    prop_assert_eq!(db.root().unwrap(), root_of(&states[&committed]));
                }
                _ => {}
            }
            for (id, overlay) in &live {
                for k in [0u64, 7, 13, 39] {
                    let read = overlay.read(&key(k)).unwrap();
                    prop_assert_eq!(read.as_ref(), states[id].get(&key(k)));
                }
            }
            for k in [0u64, 7, 13, 39] {
                let read = db.read(&key(k)).unwrap();
                prop_assert_eq!(read.as_ref(), states[&committed].get(&key(k)));
            }
        }
    }
}
