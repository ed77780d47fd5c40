//! The cleaner under a whole database: regions of 8 blocks, so that commits
//! move blocks out of sparse regions all the time.

use super::{root_of, small, Model};
use crate::test_support::{key, Rng};
use crate::{Db, Options};

const KEYS: u64 = 20_000;

#[test]
fn blocks_the_cleaner_moves_keep_every_value_and_the_root_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let open = || Db::open(small(Options::new(dir.path())).history(0)).unwrap();
    let mut db = open();
    let mut model = Model::new();
    let mut rng = Rng(7);
    let mut moved = 0;
    // A cold majority written once, then commits that each rewrite a few
    // of its buckets and pages: regions thin out slowly and need cleaning.
    let session = db.begin_session();
    for i in 0..KEYS {
        model.insert(key(i), i.to_le_bytes().to_vec());
        session.write(key(i), Some(i.to_le_bytes().to_vec()));
    }
    session.commit().unwrap();
    for n in 0..60u64 {
        let session = db.begin_session();
        for _ in 0..100 {
            let i = rng.next() % KEYS;
            let value = match rng.next() % 10 {
                0 => None,
                // Long values live in overflow space, named by their buckets.
                1 => Some(vec![n as u8; 4100 + (i % 7) as usize]),
                _ => Some(n.to_le_bytes().repeat(1 + (i % 4) as usize)),
            };
            match &value {
                Some(v) => model.insert(key(i), v.clone()),
                None => model.remove(&key(i)),
            };
            session.write(key(i), value);
        }
        assert_eq!(session.commit().unwrap(), root_of(&model));
        if n % 15 == 14 {
            moved += db.metrics().blocks_moved;
            drop(db);
            db = open();
            assert_eq!(db.root().unwrap(), root_of(&model));
        }
    }
    for i in 0..KEYS {
        assert_eq!(db.read(&key(i)).unwrap().as_ref(), model.get(&key(i)));
    }
    // Reopened by reading every block, not the catalog: the moved blocks
    // are where the slot maps say.
    drop(db);
    std::fs::remove_file(dir.path().join("catalog")).ok();
    let db = open();
    assert_eq!(db.root().unwrap(), root_of(&model));
    for i in 0..KEYS {
        assert_eq!(db.read(&key(i)).unwrap().as_ref(), model.get(&key(i)));
    }
    assert!(moved > 100, "the cleaner moved {moved} blocks");
}
