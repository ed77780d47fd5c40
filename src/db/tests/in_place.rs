//! A commit changes the pages it replaces where they lie when nothing else
//! holds them, and copies those that something does.

use super::{root_of, small, Model};
use crate::test_support::key;
use crate::trie::page_id::PageId;
use crate::{Db, Options};

/// Key `i` under a shared 24-bit prefix, so that pages below the resident
/// levels are stored along it.
fn deep(i: u64) -> crate::KeyPath {
    let mut k = key(i);
    k[..3].copy_from_slice(&[0x5a; 3]);
    k
}

#[test]
fn a_commit_changes_a_page_in_place_unless_someone_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(small(Options::new(dir.path()))).unwrap();
    let mut model = Model::new();
    let commit = |model: &mut Model, n: u8, keys: &[u64]| {
        let session = db.begin_session();
        for &i in keys {
            model.insert(deep(i), vec![n; 8]);
            session.write(deep(i), Some(vec![n; 8]));
        }
        assert_eq!(session.commit().unwrap(), root_of(model));
    };
    commit(&mut model, 1, &(0..200).collect::<Vec<_>>());
    // Level 3: below the levels the cache keeps resident.
    let id = PageId::on_path(&deep(0), 3);
    let cached = || db.shared.pages.get(&id).unwrap().unwrap();

    // Held by a reader: the commit works on a copy, the reader's page stays.
    let held = cached();
    let before = *held.as_bytes();
    commit(&mut model, 2, &[0]);
    assert_eq!(*held.as_bytes(), before);
    let copied = cached();
    assert_ne!(*copied.as_bytes(), before);
    assert_ne!(copied.as_bytes().as_ptr(), held.as_bytes().as_ptr());
    drop((held, copied));

    // Held by the cache alone: changed where it lies.
    let page = cached();
    let (at, before) = (page.as_bytes().as_ptr() as usize, *page.as_bytes());
    drop(page);
    commit(&mut model, 3, &[0]);
    let changed = cached();
    assert_ne!(*changed.as_bytes(), before);
    assert_eq!(
        changed.as_bytes().as_ptr() as usize,
        at,
        "copied, not changed in place"
    );
    drop(changed);

    drop(db);
    let db = Db::open(small(Options::new(dir.path()))).unwrap();
    assert_eq!(db.root().unwrap(), root_of(&model));
}
