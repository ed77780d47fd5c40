//! Pending sessions: a block's writes read by the next block before its trie
//! update runs; the update and commit on another thread; roots and
//! witnesses as if each block had been finished in turn.

mod common;

use std::collections::BTreeMap;

use common::{key, root_of};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, KeyPath, Options, Pending};

type Model = BTreeMap<KeyPath, Vec<u8>>;

/// A database holding keys 0..300.
fn setup(dir: &tempfile::TempDir, options: Options) -> (Db, Model) {
    let db = Db::open(options).unwrap();
    let session = db.begin_session();
    let mut model = Model::new();
    for i in 0..300 {
        session.write(key(i), Some(vec![i as u8; 5]));
        model.insert(key(i), vec![i as u8; 5]);
    }
    session.commit().unwrap();
    assert!(dir.path().exists());
    (db, model)
}

/// Block `n`'s writes: a balance moved from one key to others, so that a
/// block reading stale values would write different ones.
fn execute(session: &pagetrie::Session, n: u64, model: &mut Model) {
    for i in 0..40u64 {
        let k = key((n * 37 + i * 11) % 500);
        let old = session.read(&k).unwrap();
        assert_eq!(old.as_ref(), model.get(&k), "block {n} read key {i}");
        let mut v = old.unwrap_or_default();
        v.push(n as u8);
        v.truncate(24);
        session.write(k, Some(v.clone()));
        model.insert(k, v);
    }
    let gone = key(n + 1);
    session.write(gone, None);
    model.remove(&gone);
}

#[test]
fn a_pipeline_of_pending_blocks_commits_each_blocks_root_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir, Options::new(dir.path()));
    let mut parent: Option<Pending> = None;
    let mut writer: Option<std::thread::JoinHandle<Result<[u8; 32], Error>>> = None;
    let mut roots = Vec::new();
    for n in 0..40u64 {
        let session = match &parent {
            Some(p) => db.begin_session_on_pending(p).unwrap(),
            None => db.begin_session(),
        };
        execute(&session, n, &mut model);
        let pending = session.into_pending().unwrap();
        roots.push(root_of(&model));
        if let Some(w) = writer.take() {
            w.join().unwrap().unwrap();
        }
        let committing = pending.clone();
        // Odd blocks finish first and then commit (a producer's order);
        // even ones commit at once, the update beside the writes.
        writer = Some(std::thread::spawn(move || {
            let overlay = match n % 2 {
                1 => committing.finish()?,
                _ => committing.commit()?,
            };
            let proven = overlay.witness().verify_update(&overlay.prev_root())?;
            assert_eq!(proven, overlay.root());
            overlay.commit()
        }));
        parent = Some(pending);
    }
    assert_eq!(writer.unwrap().join().unwrap().unwrap(), root_of(&model));
    assert_eq!(db.root().unwrap(), root_of(&model));
    // Each block's overlay has the root of the writes applied in order.
    let last = parent.unwrap().finish().unwrap();
    assert_eq!(last.root(), roots[39]);
    assert_eq!(last.prev_root(), roots[38]);
    for k in 0..520 {
        assert_eq!(db.read(&key(k)).unwrap().as_ref(), model.get(&key(k)));
    }
}

#[test]
fn a_chain_of_waiting_pending_blocks_finishes_from_its_tip_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir, Options::new(dir.path()));
    let mut chain = vec![];
    let mut roots = vec![];
    for n in 0..6u64 {
        let session = match chain.last() {
            Some(p) => db.begin_session_on_pending(p).unwrap(),
            None => db.begin_session(),
        };
        execute(&session, n, &mut model);
        chain.push(session.into_pending().unwrap());
        roots.push(root_of(&model));
    }
    // Nothing ran yet: the committed state is the setup's.
    assert_ne!(db.root().unwrap(), roots[0]);
    let tip = chain[5].finish().unwrap();
    assert_eq!(tip.root(), roots[5]);
    for (pending, root) in chain.iter().zip(&roots) {
        assert_eq!(pending.finish().unwrap().root(), *root);
    }
    tip.commit().unwrap();
    assert_eq!(db.root().unwrap(), roots[5]);
    assert!(chain[2].finish().unwrap().is_committed().unwrap());
}

/// The overlays a pending block's commit and finish return read that
/// block's state, however it was committed and whatever commits after.
#[test]
fn the_overlay_of_a_committed_pending_block_reads_its_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir, Options::new(dir.path()));
    let check = |overlay: &pagetrie::Overlay, model: &Model| {
        for k in 0..520 {
            assert_eq!(overlay.read(&key(k)).unwrap().as_ref(), model.get(&key(k)));
        }
    };
    // On a committed state: the update runs beside the writes.
    let first = db.begin_session();
    execute(&first, 0, &mut model);
    let first = first.into_pending().unwrap().commit().unwrap();
    let first_model = model.clone();
    check(&first, &first_model);
    // On a pending parent: the parent finished, then both committed.
    let parent = db.begin_session();
    execute(&parent, 1, &mut model);
    let parent = parent.into_pending().unwrap();
    let parent_model = model.clone();
    let child = db.begin_session_on_pending(&parent).unwrap();
    execute(&child, 2, &mut model);
    let child = child.into_pending().unwrap().commit().unwrap();
    assert_eq!(db.root().unwrap(), root_of(&model));
    check(&child, &model);
    check(&parent.finish().unwrap(), &parent_model);
    check(&first, &first_model);
}

#[test]
fn a_session_on_a_pending_block_proves_and_reports_its_parents_root() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut model) = setup(&dir, Options::new(dir.path()));
    let first = db.begin_session();
    execute(&first, 0, &mut model);
    let pending = first.into_pending().unwrap();
    let next = db.begin_session_on_pending(&pending).unwrap();
    assert_eq!(next.prev_root().unwrap(), root_of(&model));
    let proof = next.prove(&[key(0), key(1)]).unwrap();
    let verified = proof.verify(&root_of(&model)).unwrap();
    let hashed = |k: u64| model.get(&key(k)).map(|v| hash_value(v));
    assert_eq!(verified.get(&key(0)).unwrap(), hashed(0));
    assert_eq!(verified.get(&key(1)).unwrap(), hashed(1));
    execute(&next, 1, &mut model);
    let out = next.commit_and_prove().unwrap();
    assert_eq!(out.root, root_of(&model));
    assert_eq!(db.root().unwrap(), root_of(&model));
}

#[test]
fn a_pending_block_whose_base_another_fork_left_fails_and_so_do_sessions_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let (db, model) = setup(&dir, Options::new(dir.path()));
    let block = db.begin_session();
    block.write(key(1), Some(vec![1]));
    let pending = block.into_pending().unwrap();
    let also = db.begin_session();
    also.write(key(2), Some(vec![1]));
    let also = also.into_pending().unwrap();
    let on_it = db.begin_session_on_pending(&pending).unwrap();
    assert_eq!(on_it.read(&key(1)).unwrap(), Some(vec![1]));
    let fork = db.begin_session();
    fork.write(key(1), Some(vec![2]));
    let fork_root = fork.commit().unwrap();
    assert!(matches!(pending.finish(), Err(Error::StaleSession)));
    assert!(matches!(also.commit(), Err(Error::StaleSession)));
    assert!(matches!(also.commit(), Err(Error::PendingFailed)));
    assert!(matches!(pending.finish(), Err(Error::PendingFailed)));
    assert!(matches!(on_it.prev_root(), Err(Error::PendingFailed)));
    assert!(matches!(on_it.commit(), Err(Error::PendingFailed)));
    assert!(matches!(
        db.begin_session_on_pending(&pending),
        Err(Error::PendingFailed)
    ));
    assert_eq!(db.root().unwrap(), fork_root);
    assert_ne!(fork_root, root_of(&model));
}

/// Each session on a pending block reads over the newest state of its chain
/// whose root is known, so a long pipeline keeps the old values of a few
/// blocks only: one that held its first base would keep all 60 MB the
/// blocks replaced.
#[test]
fn a_long_pipeline_keeps_the_old_values_of_a_few_blocks_only() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = setup(&dir, Options::new(dir.path()));
    let value = |n: u64, i: u64| vec![(n + i) as u8; 1000];
    let mut parent: Option<Pending> = None;
    let mut most = 0;
    for n in 0..200u64 {
        let session = match &parent {
            Some(p) => db.begin_session_on_pending(p).unwrap(),
            None => db.begin_session(),
        };
        // 300 values of 1000 bytes replaced a block: 0.3 MB.
        for i in 0..300u64 {
            if n > 0 {
                assert_eq!(session.read(&key(i)).unwrap(), Some(value(n - 1, i)));
            }
            session.write(key(i), Some(value(n, i)));
        }
        let pending = session.into_pending().unwrap();
        if let Some(p) = parent.take() {
            p.finish().unwrap().commit().unwrap();
        }
        parent = Some(pending);
        most = most.max(db.metrics().retained_version_bytes);
    }
    assert!(most < 4 << 20, "{most} bytes retained");
}
