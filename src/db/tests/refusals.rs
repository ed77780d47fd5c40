//! What a handle says when a commit fails: an ancestor's failure is reported
//! as such, a refusal that changed nothing can be tried again, and a poisoned
//! handle answers nothing from its state.

use std::sync::Arc;

use super::{assert_state, block, faulty_db, models, power_cycle, root_of};
use crate::{Db, Error, Options, Overlay, Session};

/// A session with block `n`'s writes, on `parent` or on the committed head.
fn session_with(db: &Db, parent: Option<&Overlay>, n: u64) -> Session {
    let session = match parent {
        Some(parent) => db.begin_session_on(parent),
        None => db.begin_session(),
    };
    for (k, v) in block(n) {
        session.write(k, v);
    }
    session
}

/// The three ways to commit a block built on an uncommitted overlay.
#[derive(Clone, Copy, Debug)]
enum Way {
    Finished,
    Overlay,
    Session,
}

fn commit_on(db: &Db, parent: &Overlay, n: u64, way: Way) -> Result<(), Error> {
    let session = session_with(db, Some(parent), n);
    match way {
        Way::Finished => session.finish()?.commit().map(drop),
        Way::Overlay => session.finish()?.into_overlay().commit().map(drop),
        Way::Session => session.commit_and_prove().map(drop),
    }
}

#[test]
fn a_block_whose_uncommitted_parent_fails_says_so_and_is_not_applied() {
    let models = models(5);
    for way in [Way::Finished, Way::Overlay, Way::Session] {
        let mut ancestor_durable = false;
        for fail_at in 0.. {
            let dir = tempfile::tempdir().unwrap();
            let (db, faults) = faulty_db(Options::new(dir.path()), 3);
            let parent = session_with(&db, None, 4).finish().unwrap().into_overlay();
            // Every sync of the parent's commit, then of the child's own.
            faults.fail_one_sync_after(fail_at);
            let durable = match commit_on(&db, &parent, 5, way) {
                Ok(()) => break,
                Err(Error::AncestorFailed { root, source }) => {
                    assert_eq!(root, parent.root(), "{way:?}, fail_at {fail_at}");
                    assert!(
                        !matches!(*source, Error::AncestorFailed { .. }),
                        "{way:?}, fail_at {fail_at}: wrapped twice"
                    );
                    ancestor_durable |= matches!(*source, Error::CommitDurable(_));
                    matches!(*source, Error::CommitDurable(_))
                }
                // The parent committed; the child's own commit failed.
                Err(e) => {
                    assert!(parent.is_committed().unwrap(), "{way:?}: {e}");
                    continue;
                }
            };
            // The child's writes were never applied: block 3 or 4 only.
            drop(parent);
            let (_, state) = power_cycle(db, &faults, None, &models, 4);
            assert_eq!(state == 4, durable, "{way:?}, fail_at {fail_at}");
        }
        assert!(ancestor_durable, "{way:?}: no parent commit ended durable");
    }
}

#[test]
fn an_overlay_commit_refused_for_want_of_space_can_be_tried_again() {
    let models = models(5);
    let dir = tempfile::tempdir().unwrap();
    let (db, faults) = faulty_db(Options::new(dir.path()), 3);
    let parent = session_with(&db, None, 4).finish().unwrap().into_overlay();
    let child = session_with(&db, Some(&parent), 5)
        .finish()
        .unwrap()
        .into_overlay();
    faults.disk_full_after(0);
    match parent.commit() {
        Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ENOSPC)),
        other => panic!("a full disk must refuse the commit: {other:?}"),
    }
    assert!(!parent.is_committed().unwrap());
    assert_state(&db, &models[3]);
    faults.clear();
    parent.commit().unwrap();
    assert_eq!(db.root().unwrap(), root_of(&models[4]));
    child.commit().unwrap();
    assert_state(&db, &models[5]);
}

#[test]
fn a_poisoned_handle_answers_nothing_from_its_state() {
    let mut durable = false;
    for fail_at in 0.. {
        let dir = tempfile::tempdir().unwrap();
        let (db, faults) = faulty_db(Options::new(dir.path()), 3);
        let history_root = db.roots().unwrap()[1];
        // Made before the failure: an overlay, a session on it and on the
        // head, a finished session on each.
        let overlay = session_with(&db, None, 4).finish().unwrap().into_overlay();
        let on_overlay = session_with(&db, Some(&overlay), 5);
        let on_head = db.begin_session();
        let finished = session_with(&db, None, 6).finish().unwrap();
        let finished_on = session_with(&db, Some(&overlay), 7).finish().unwrap();
        let (prev, root) = (finished.prev_root(), finished.root());
        faults.fail_one_sync_after(fail_at);
        let outcome = session_with(&db, None, 9).commit();
        faults.clear();
        match outcome {
            Ok(_) => break,
            Err(Error::CommitDurable(_)) => durable = true,
            Err(_) => {}
        }
        let key = crate::test_support::key(0);
        let own_key = block(4)[0].0;
        let poisoned = |r: Result<(), Error>, what: &str| match r {
            Err(Error::Poisoned) => {}
            other => panic!("fail_at {fail_at}: {what} answered {other:?}"),
        };
        // Db.
        poisoned(db.root().map(drop), "Db::root");
        poisoned(db.roots().map(drop), "Db::roots");
        poisoned(db.read(&key).map(drop), "Db::read");
        poisoned(db.prove(&[key]).map(drop), "Db::prove");
        poisoned(db.read_at(&history_root, &key).map(drop), "Db::read_at");
        poisoned(db.prove_at(&history_root, &[key]).map(drop), "Db::prove_at");
        poisoned(db.rollback(1).map(drop), "Db::rollback");
        poisoned(db.export(1 << 16).map(drop), "Db::export");
        poisoned(db.export_from(&key, 1 << 16).map(drop), "Db::export_from");
        poisoned(db.iter_range(&key, None).map(drop), "Db::iter_range");
        // The counters are true whatever happened.
        assert!(db.metrics().commits >= 3);
        // Sessions, on the head and on the overlay, old and new.
        for session in [
            on_head,
            on_overlay,
            db.begin_session(),
            db.begin_session_on(&overlay),
        ] {
            session.warm_up(&key);
            poisoned(session.read(&key).map(drop), "Session::read");
            poisoned(session.read(&own_key).map(drop), "Session::read");
            poisoned(session.prove(&[key]).map(drop), "Session::prove");
            session.write(key, Some(vec![1]));
            // Its own write is its own, whatever the handle.
            assert_eq!(session.read(&key).unwrap(), Some(vec![1]));
            let _ = session.prev_root();
            poisoned(session.finish().map(drop), "Session::finish");
        }
        poisoned(
            session_with(&db, None, 10).commit().map(drop),
            "Session::commit",
        );
        poisoned(
            session_with(&db, Some(&overlay), 10)
                .commit_and_prove()
                .map(drop),
            "Session::commit_and_prove",
        );
        // Overlays: what they are is known; what they read is not.
        assert_eq!(overlay.witness().writes.len(), block(4).len());
        let _ = (overlay.root(), overlay.prev_root());
        poisoned(overlay.read(&own_key).map(drop), "Overlay::read");
        poisoned(overlay.read(&key).map(drop), "Overlay::read");
        poisoned(overlay.is_committed().map(drop), "Overlay::is_committed");
        // Finished sessions.
        assert_eq!((finished.prev_root(), finished.root()), (prev, root));
        assert!(!finished.witness().writes.is_empty());
        let other = Arc::new(finished_on);
        let _ = other.root();
        poisoned(
            Arc::into_inner(other)
                .unwrap()
                .into_overlay()
                .read(&key)
                .map(drop),
            "Finished::into_overlay, read",
        );
        poisoned(finished.commit().map(drop), "Finished::commit");
        poisoned(overlay.commit().map(drop), "Overlay::commit");
    }
    assert!(durable, "no failure ended durable");
}
