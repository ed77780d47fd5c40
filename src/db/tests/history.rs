//! The history under faults and power loss: rollbacks, the history file's
//! window across reopens, and proofs back from the kept top pages.

use super::*;

/// Checks `db`'s retained roots are those of `models[newest]`, `[newest - 1]`,
/// ... (`count` of them) and that `read_at` at each gives its values.
fn assert_history(db: &Db, models: &[Model], newest: usize, count: usize) {
    let expected: Vec<_> = (0..count)
        .map(|back| root_of(&models[newest - back]))
        .collect();
    assert_eq!(db.roots().unwrap(), expected);
    for (back, root) in expected.iter().enumerate() {
        let model = &models[newest - back];
        for i in (0..200u64).step_by(7) {
            assert_eq!(
                db.read_at(root, &key(i)).unwrap().as_ref(),
                model.get(&key(i))
            );
        }
    }
}

#[test]
fn a_rollback_cut_by_a_fault_and_power_loss_leaves_one_state_and_its_history() {
    let models = models(6);
    for fail_at in 0.. {
        let short = fail_at % 2 == 1;
        let seed = (fail_at % 3 == 2).then_some(fail_at * 17 + 3);
        let dir = tempfile::tempdir().unwrap();
        let options = Options::new(dir.path()).history(4).commit_workers(2);
        let (db, faults) = faulty_db(options.clone(), 6);
        faults.short_writes.store(short, Ordering::SeqCst);
        faults.writes_left.store(fail_at, Ordering::SeqCst);
        if db.rollback(3).is_ok() {
            // Every write point was tried: blocks, both logs, the map, the meta record.
            assert!(fail_at > 5, "only {fail_at} write points tried");
            break;
        }
        faults
            .lose_power(&db.parts().0.files().unwrap(), PowerLoss::from_seed(seed))
            .unwrap();
        drop(db);
        let db = Db::open(options).unwrap();
        if db.root().unwrap() == root_of(&models[6]) {
            assert_history(&db, &models, 6, 5);
        } else {
            // Rolled back: commits 4 to 6 are gone from the history.
            assert_history(&db, &models, 3, 2);
        }
        assert_state(
            &db,
            &models[if db.roots().unwrap().len() == 5 { 6 } else { 3 }],
        );
    }
}

#[test]
fn the_history_file_keeps_about_the_window_and_reopens_whole() {
    let dir = tempfile::tempdir().unwrap();
    let options = small(Options::new(dir.path()).history(3));
    let db = Db::open(options.clone()).unwrap();
    let models = models(60);
    for n in 1..=60u64 {
        commit(&db, n).unwrap();
        if n % 20 == 0 {
            // Rollback records among the undos, and commits they dropped.
            assert_eq!(db.rollback(2).unwrap(), root_of(&models[n as usize - 2]));
            commit(&db, n - 1).unwrap();
            commit(&db, n).unwrap();
        }
    }
    assert_history(&db, &models, 60, 4);
    // Records of about 3 blocks each (values and the root page), 180 in all
    // without trimming: the dropped ones were cut away (rewritten from 2
    // dropped blocks on).
    let blocks = std::fs::metadata(dir.path().join("history")).unwrap().len() / 4096;
    assert!(blocks <= 30, "{blocks} blocks");
    drop(db);
    let db = Db::open(options).unwrap();
    assert_history(&db, &models, 60, 4);
    assert_state(&db, &models[60]);
}

#[test]
fn proofs_back_come_from_the_kept_top_pages_where_subtrees_are_stored() {
    // 3000 keys under one 16-bit prefix: the subtree under the kept pages
    // (depth 12) holds pages of its own, so nothing there is elided.
    let key = |i: u32| {
        let mut k = *blake3::hash(&i.to_le_bytes()).as_bytes();
        k[..2].copy_from_slice(&[0x5a, 0x17]);
        k
    };
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).history(8)).unwrap();
    let mut models = vec![Model::new()];
    for n in 0..6u32 {
        let session = db.begin_session();
        let mut model = models.last().unwrap().clone();
        for i in (0..3000).filter(|i| n == 0 || i % (n + 3) == 0) {
            let value = (n * 7 + i).to_le_bytes().to_vec();
            session.write(key(i), Some(value.clone()));
            model.insert(key(i), value);
        }
        // And keys elsewhere, so the root page changes beyond the prefix.
        session.write([n as u8; 32], Some(vec![n as u8]));
        model.insert([n as u8; 32], vec![n as u8]);
        session.commit().unwrap();
        models.push(model);
    }
    let (head, chain) = db.shared.snapshots.head_and_chain();
    let mut keys: Vec<KeyPath> = [3, 500, 2999, 4000].map(key).to_vec();
    keys.sort();
    for depth in 1..=5 {
        let model = &models[models.len() - 1 - depth];
        let root = root_of(model);
        let proof = db
            .shared
            .prove_over_kept_pages(&head, &chain, depth, &root, &keys)
            .unwrap()
            .unwrap_or_else(|| panic!("{depth} back: no proof from the kept pages"));
        let verified = proof.verify(&root).unwrap();
        for k in &keys {
            let hash = model.get(k).map(|v| hash_value(v));
            verified.confirm(k, hash.as_ref()).unwrap();
        }
        // A key in a sparse region (an elided subtree above the kept
        // pages' depth) needs the whole trie recomputed: prove_at does that.
        let mut sparse = keys.clone();
        sparse.push([2; 32]);
        let verified = db.prove_at(&root, &sparse).unwrap();
        let verified = verified.verify(&root).unwrap();
        for k in &sparse {
            let hash = model.get(k).map(|v| hash_value(v));
            verified.confirm(k, hash.as_ref()).unwrap();
        }
    }
}
