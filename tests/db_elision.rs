//! Elision at scale: 2^20 uniformly random keys store about one page per subtree
//! of at least 20 leaves, which is the root page, its 64 children and their 4096
//! children (no bottom-level pages), and proofs into the elided subtrees verify.

mod common;

use std::collections::BTreeMap;

use common::{key, root_of};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Options};

const KEYS: u64 = 1 << 20;
const EXPECTED_PAGES: f64 = (1 + 64 + 4096) as f64;

fn assert_pages_near_expected(db: &Db, when: &str) {
    let stored = db.metrics().pages_stored as f64;
    println!("{when}: {stored} pages stored");
    assert!(
        (stored - EXPECTED_PAGES).abs() <= EXPECTED_PAGES / 10.0,
        "{when}: {stored} pages stored, expected {EXPECTED_PAGES} within 10%"
    );
}

#[test]
fn a_million_random_keys_store_about_4161_pages_and_prove_into_elided_subtrees() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).commit_workers(2)).unwrap();
    let mut model = BTreeMap::new();
    // Four blocks, so later ones update stored pages and rebuild elided subtrees.
    for block in 0..4 {
        let session = db.begin_session();
        for i in block * KEYS / 4..(block + 1) * KEYS / 4 {
            let value = i.to_le_bytes().to_vec();
            model.insert(key(i), value.clone());
            session.write(key(i), Some(value));
        }
        session.commit().unwrap();
    }
    assert_eq!(db.metrics().keys_stored, KEYS);
    assert_pages_near_expected(&db, "after import");

    // A block reading present and absent keys and writing some: every path
    // ends inside a subtree the database keeps no page for.
    let session = db.begin_session();
    let present: Vec<u64> = (0..2000).map(|i| i * 523 % KEYS).collect();
    let absent: Vec<u64> = (0..1000).map(|i| KEYS + i).collect();
    for &i in &present {
        assert_eq!(session.read(&key(i)).unwrap(), model.get(&key(i)).cloned());
    }
    for &i in &absent {
        assert_eq!(session.read(&key(i)).unwrap(), None);
    }
    for i in (0..1000).map(|i| i * 1009 % KEYS) {
        session.write(key(i), Some(vec![7; 8]));
        model.insert(key(i), vec![7; 8]);
    }
    for &i in absent.iter().step_by(2) {
        session.write(key(i), Some(vec![8; 8]));
        model.insert(key(i), vec![8; 8]);
    }
    let out = session.commit_and_prove().unwrap();
    let verified = out.witness.verify(&out.prev_root).unwrap();
    for &i in &present {
        // Against the previous root every key still holds its first value.
        let old = hash_value(&i.to_le_bytes());
        verified.confirm(&key(i), Some(&old)).unwrap();
    }
    for &i in &absent {
        verified.confirm(&key(i), None).unwrap();
    }
    assert_eq!(out.witness.verify_update(&out.prev_root).unwrap(), out.root);
    let expected = root_of(&model);
    assert_eq!(out.root, expected);
    assert_pages_near_expected(&db, "after updates");
}
