//! The canonical builder against the naive reference on adversarial key sets.

mod common;

use std::collections::BTreeMap;

use common::{cases, clustered_keys, naive_root, root_of, value, Key};
use pagetrie::trie::{compute_root, hash_value};
use pagetrie::Error;
use proptest::prelude::*;

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn matches_naive_on_clustered_sets(keys in clustered_keys(64), values in prop::collection::vec(value(), 64)) {
        let model: BTreeMap<Key, Vec<u8>> = keys.into_iter().zip(values).collect();
        prop_assert_eq!(root_of(&model), naive_root(&model));
    }

    #[test]
    fn order_of_input_does_not_matter(keys in clustered_keys(32)) {
        let mut entries: Vec<(Key, [u8; 32])> = keys.iter().map(|k| (*k, hash_value(k))).collect();
        entries.sort();
        entries.dedup_by_key(|e| e.0);
        let sorted = compute_root(entries.clone()).unwrap();
        entries.reverse();
        prop_assert_eq!(compute_root(entries).unwrap(), sorted);
    }

    #[test]
    fn inserts_updates_and_deletes_down_to_empty(
        keys in clustered_keys(48),
        ops in prop::collection::vec((any::<prop::sample::Index>(), prop::option::weighted(0.6, value())), 0..60),
    ) {
        prop_assume!(!keys.is_empty());
        let mut model = BTreeMap::new();
        for (i, op) in ops {
            let key = keys[i.index(keys.len())];
            match op {
                Some(v) => { model.insert(key, v); }
                None => { model.remove(&key); }
            }
            prop_assert_eq!(root_of(&model), naive_root(&model));
        }
        let remaining: Vec<Key> = model.keys().copied().collect();
        for key in remaining {
            model.remove(&key);
            prop_assert_eq!(root_of(&model), naive_root(&model));
        }
        prop_assert_eq!(root_of(&model), [0u8; 32]);
    }
}

#[test]
fn keys_differing_only_in_the_last_bit() {
    let mut a = [0x5a; 32];
    let mut b = a;
    a[31] &= !1;
    b[31] |= 1;
    let model: BTreeMap<Key, Vec<u8>> = [(a, vec![1]), (b, vec![])].into();
    assert_eq!(root_of(&model), naive_root(&model));
}

#[test]
fn duplicate_keys_are_refused() {
    let k = [3u8; 32];
    let err = compute_root([(k, [0; 32]), ([4; 32], [0; 32]), (k, [1; 32])]).unwrap_err();
    assert!(matches!(err, Error::DuplicateKey(d) if d == k), "{err:?}");
}
