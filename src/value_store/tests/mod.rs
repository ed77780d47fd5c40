//! The value store's tests: helpers and the model-based property test
//! here, the rest by concept in the files beside.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{BucketRead, ValueStore, INLINE_MAX};
use crate::block::BLOCK_SIZE;
use crate::store::{Fetches, Store, StoreConfig, Target};
use crate::test_support::{cases, commit_values, faulty_store, splice, Rng};
use crate::trie::{common_prefix_len, hash_value, shares_prefix, KeyPath};
use crate::Error;

type Changes = BTreeMap<KeyPath, Option<Vec<u8>>>;

fn commit(store: &Store, values: &ValueStore, changes: Changes) {
    let changes: Vec<_> = changes.into_iter().collect();
    commit_values(store, values, &changes, || {});
}

fn open(dir: &Path) -> (Arc<Store>, ValueStore) {
    let store = Arc::new(Store::open(dir, StoreConfig::small()).unwrap());
    let values = ValueStore::open(&store, 16 * 4096).unwrap();
    (store, values)
}

/// Big-endian, unlike `test_support::key`: the recorded proptest regressions
/// (proptest-regressions/value_store/tests/mod.txt) name keys by this index.
fn key(i: u64) -> KeyPath {
    hash_value(&i.to_be_bytes())
}

fn reads(store: &Store) -> u64 {
    store.io().counters.reads.load(Ordering::Relaxed)
}

mod concurrency;
mod prefetch;
mod sizes;

mod model {
    use super::*;
    use proptest::prelude::*;

    /// A value of one of the sizes that matter: empty, inline, the inline limit
    /// and just past it, several blocks.
    fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
        prop_oneof![
            2 => Just(None),
            1 => Just(Some(vec![])),
            4 => prop::collection::vec(any::<u8>(), 1..40).prop_map(Some),
            1 => Just(Some(vec![3; INLINE_MAX])),
            1 => Just(Some(vec![4; INLINE_MAX + 1])),
            1 => (1usize..3).prop_map(|blocks| Some(vec![5; blocks * BLOCK_SIZE + 17])),
        ]
    }

    proptest! {
        #![proptest_config(cases(12))]

        /// Commits of random inserts, updates and deletes over a small key space
        /// (so keys repeat), with reopens in between, always read back as the model.
        #[test]
        fn commits_and_reopens_match_a_btreemap(
            rounds in prop::collection::vec(
                (prop::collection::vec((0u64..400, value()), 1..120), any::<bool>()),
                1..8,
            )
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (mut store, mut values) = open(dir.path());
            let mut model: BTreeMap<KeyPath, Vec<u8>> = BTreeMap::new();
            for (ops, reopen) in rounds {
                let changes: Changes = ops.into_iter().map(|(i, v)| (key(i), v)).collect();
                for (k, v) in &changes {
                    match v {
                        Some(v) => model.insert(*k, v.clone()),
                        None => model.remove(k),
                    };
                }
                commit(&store, &values, changes);
                if reopen {
                    drop(values);
                    drop(store);
                    (store, values) = open(dir.path());
                }
                prop_assert_eq!(values.len(), model.len());
                for i in 0..400 {
                    prop_assert_eq!(values.get(&key(i)).unwrap(), model.get(&key(i)).cloned());
                }
            }
        }
    }
}
