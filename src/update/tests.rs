//! The page rule checked page by page against a model: after every commit each
//! stored page holds exactly the canonical nodes, its leaf count and bitmap are
//! right, and exactly the subtrees with enough leaves are stored.

use std::collections::BTreeMap;

use super::{update_trie, Change, Tree, STORE_MIN_LEAVES};
use crate::test_support::{splice, Rng};
use crate::trie::page::cell;
use crate::trie::page_id::{PageId, PAGE_DEPTH};
use crate::trie::{bit_at, build_subtree, hash_value, Discard, KeyPath, ValueHash, TERMINATOR};
use crate::{Db, Options};

type Entries = Vec<(KeyPath, ValueHash)>;

/// Checks page `id` (whose subtree holds `entries`) and its stored descendants;
/// returns how many pages that is.
fn check_page(db: &Db, id: PageId, entries: &[(KeyPath, ValueHash)]) -> usize {
    let (_, pages, _) = db.parts();
    let stored = pages.get(&id).unwrap();
    if (entries.len() as u64) < STORE_MIN_LEAVES {
        assert!(
            stored.is_none(),
            "{id:?} has {} leaves yet is stored",
            entries.len()
        );
        return 0;
    }
    let page = stored.unwrap_or_else(|| panic!("{id:?} has {} leaves, not stored", entries.len()));
    assert_eq!(page.leaves(), entries.len() as u64, "{id:?} leaf count");
    let mut count = 1;
    // Walk the page's positions with the entries under each.
    let mut level: Vec<&[(KeyPath, ValueHash)]> = vec![entries];
    for r in 1..=PAGE_DEPTH {
        let depth = id.root_depth() + r - 1;
        let mut next = Vec::new();
        for (parent_bits, under) in level.iter().enumerate() {
            let split = under.partition_point(|e| !bit_at(&e.0, depth));
            for (side, part) in [&under[..split], &under[split..]].into_iter().enumerate() {
                let bits = parent_bits * 2 + side;
                let expected = if under.len() >= 2 {
                    build_subtree(part, depth + 1, &mut Discard)
                } else {
                    TERMINATOR
                };
                assert_eq!(
                    page.node(cell(r, bits)),
                    expected,
                    "{id:?} cell ({r}, {bits})"
                );
                next.push(if under.len() >= 2 { part } else { &[][..] });
            }
        }
        level = next;
    }
    for (i, under) in level.iter().enumerate() {
        let child_stored = (under.len() as u64) >= STORE_MIN_LEAVES;
        assert_eq!(
            page.elided_children() >> i & 1 == 0,
            child_stored,
            "{id:?} bit {i}"
        );
        if let Some(child) = id.child(i as u8) {
            count += check_page(db, child, under);
        }
    }
    count
}

fn check_all(db: &Db, model: &BTreeMap<KeyPath, Vec<u8>>) {
    let entries: Entries = model.iter().map(|(k, v)| (*k, hash_value(v))).collect();
    let count = check_page(db, PageId::ROOT, &entries);
    assert_eq!(db.parts().1.len(), count, "pages stored beyond the rule");
    assert_eq!(db.root().unwrap(), build_subtree(&entries, 0, &mut Discard));
}

/// Random keys, a third of them in clusters sharing 12 to 40 bits, so pages at
/// several levels fill, empty and switch between stored and elided.
fn key(rng: &mut Rng, bases: &[KeyPath]) -> KeyPath {
    let mut k = [0u8; 32];
    for chunk in k.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    if rng.next().is_multiple_of(3) {
        let base = bases[(rng.next() % bases.len() as u64) as usize];
        let bits = 12 + (rng.next() % 29) as usize;
        k = splice(&base, &k, bits);
    }
    k
}

fn run(workers: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).commit_workers(workers)).unwrap();
    let mut rng = Rng(seed);
    let bases: Vec<KeyPath> = (0..3).map(|_| key(&mut rng, &[[0; 32]])).collect();
    let mut model = BTreeMap::new();
    let mut peak = 0;
    for round in 0..12 {
        let session = db.begin_session();
        // Grow for eight rounds, then delete most of it.
        let (inserts, deletes) = if round < 8 { (600, 40) } else { (20, 900) };
        for _ in 0..inserts {
            let k = key(&mut rng, &bases);
            let v = (rng.next() % 1000).to_le_bytes().to_vec();
            session.write(k, Some(v.clone()));
            model.insert(k, v);
        }
        let present: Vec<KeyPath> = model.keys().copied().collect();
        // Read, then written: the commit may take these leaves from the
        // hashes the session saw instead of from their buckets.
        for _ in 0..present.len().min(50) {
            let k = present[(rng.next() % present.len() as u64) as usize];
            assert_eq!(session.read(&k).unwrap().as_ref(), model.get(&k));
            let v = (rng.next() % 1000).to_le_bytes().to_vec();
            session.write(k, Some(v.clone()));
            model.insert(k, v);
        }
        for _ in 0..deletes.min(present.len()) {
            let k = present[(rng.next() % present.len() as u64) as usize];
            session.write(k, None);
            model.remove(&k);
        }
        session.commit().unwrap();
        check_all(&db, &model);
        peak = peak.max(db.parts().1.len());
    }
    assert!(
        peak > 64,
        "only {peak} pages: the test would not exercise pages"
    );
}

#[test]
fn pages_follow_the_rule_with_one_worker() {
    run(1, 0x1234_5678);
}

#[test]
fn pages_follow_the_rule_with_three_workers() {
    run(3, 0x8765_4321);
}

/// The value hashes a session saw are hints: right ones spare bucket reads,
/// wrong ones cost a read and never change the root or the proof.
#[test]
fn seen_hashes_are_checked_before_use() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    let mut rng = Rng(0x5eed);
    let mut keys: Vec<KeyPath> = (0..4000).map(|_| key(&mut rng, &[[9; 32]])).collect();
    keys.sort_unstable();
    keys.dedup();
    let session = db.begin_session();
    for k in &keys {
        session.write(*k, Some(vec![1]));
    }
    session.commit().unwrap();

    let changed: Vec<KeyPath> = keys.iter().step_by(5).copied().collect();
    let changes: Vec<Change> = changed
        .iter()
        .map(|k| (*k, Some(hash_value(&[2]))))
        .collect();
    let (_, pages, values) = db.parts();
    let root = db.root().unwrap();
    let bucket_reads = || {
        let (hits, misses, _) = values.cache_counts();
        hits + misses
    };
    let update = |seen: &[(KeyPath, ValueHash)]| {
        let before = bucket_reads();
        let tree = Tree {
            pages,
            values,
            unwritten: None,
            seen,
            take_pages: false,
        };
        let trie = update_trie(tree, &root, &changes, &changed, 2, None).unwrap();
        (trie.root, trie.proof, bucket_reads() - before)
    };
    let (expected, proof, reads) = update(&[]);
    let right: Vec<_> = changed.iter().map(|k| (*k, hash_value(&[1]))).collect();
    let wrong: Vec<_> = changed.iter().map(|k| (*k, hash_value(&[3]))).collect();
    let (root_right, proof_right, reads_right) = update(&right);
    let (root_wrong, proof_wrong, reads_wrong) = update(&wrong);
    assert_eq!((root_right, &proof_right), (expected, &proof));
    assert_eq!((root_wrong, &proof_wrong), (expected, &proof));
    // Leaves inside elided subtrees of several keys still need their bucket.
    assert!(
        3 * reads_right < 2 * reads,
        "{reads_right} bucket reads with hints, {reads} without"
    );
    assert!(
        reads_wrong >= reads,
        "{reads_wrong} bucket reads with wrong hints, {reads} without"
    );
}

#[test]
fn subtrees_go_unstored_at_the_first_page_boundary_with_few_keys_each() {
    // 2^24 keys: 64 under each prefix of 18 bits, 1 under one of 24.
    assert_eq!(super::unstored_depth(1 << 24), 24);
    assert_eq!(super::unstored_depth(1 << 27), 24);
    assert_eq!(super::unstored_depth(1 << 20), 18);
    assert_eq!(super::unstored_depth(19), 6);
    assert_eq!(super::unstored_depth(usize::MAX), 60);
}
