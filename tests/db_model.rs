//! Random blocks against a model through the public API: after every commit the
//! root is the model's, the witness verifies, confirms every value read and every
//! absence, and `verify_update` yields the new root; with 1, 2 and 8 workers.

mod common;

use std::collections::BTreeMap;

use common::{cases, clustered_keys, root_of, value};
use pagetrie::trie::hash_value;
use pagetrie::{Db, Options};
use proptest::prelude::*;

type Key = [u8; 32];

#[derive(Clone, Debug)]
enum Op {
    Read(usize),
    Write(usize, Vec<u8>),
    Delete(usize),
}

/// Values of every size class: empty, small, inline limit neighbours, overflow.
fn any_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => value(),
        1 => (250usize..260).prop_map(|n| vec![0xab; n]),
        1 => (4000usize..9000).prop_map(|n| vec![0xcd; n]),
    ]
}

fn op(keys: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..keys).prop_map(Op::Read),
        5 => (0..keys, any_value()).prop_map(|(k, v)| Op::Write(k, v)),
        2 => (0..keys).prop_map(Op::Delete),
    ]
}

/// A key pool (clustered and uniform keys mixed) and blocks of operations on it.
fn workload() -> impl Strategy<Value = (Vec<Key>, Vec<Vec<Op>>)> {
    (
        clustered_keys(150),
        prop::collection::vec(any::<Key>(), 0..150),
    )
        .prop_flat_map(|(mut clustered, uniform)| {
            clustered.extend(uniform);
            clustered.sort();
            clustered.dedup();
            clustered.push([0xff; 32]);
            let n = clustered.len();
            (
                Just(clustered),
                prop::collection::vec(prop::collection::vec(op(n), 0..120), 1..6),
            )
        })
}

fn run(workers: usize, keys: &[Key], blocks: &[Vec<Op>]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path()).commit_workers(workers)).unwrap();
    let mut model: BTreeMap<Key, Vec<u8>> = BTreeMap::new();
    for block in blocks {
        let session = db.begin_session();
        let before = model.clone();
        let mut reads = Vec::new();
        for op in block {
            match op {
                Op::Read(i) => {
                    let got = session.read(&keys[*i]).unwrap();
                    prop_assert_eq!(got.as_ref(), model.get(&keys[*i]));
                    reads.push(keys[*i]);
                }
                Op::Write(i, v) => {
                    session.write(keys[*i], Some(v.clone()));
                    model.insert(keys[*i], v.clone());
                }
                Op::Delete(i) => {
                    session.write(keys[*i], None);
                    model.remove(&keys[*i]);
                }
            }
        }
        let out = session.commit_and_prove().unwrap();
        let expected = root_of(&model);
        prop_assert_eq!(out.root, expected);
        prop_assert_eq!(db.root().unwrap(), expected);
        let verified = out.witness.verify(&out.prev_root).unwrap();
        for key in reads
            .iter()
            .chain(out.witness.writes.iter().map(|(k, _)| k))
        {
            // The witness proves the state before the block.
            let was = before.get(key).map(|v| hash_value(v));
            verified.confirm(key, was.as_ref()).unwrap();
        }
        prop_assert_eq!(out.witness.verify_update(&out.prev_root).unwrap(), out.root);
        let encoded = out.witness.encode();
        prop_assert_eq!(encoded.len(), out.witness.encoded_len());
        prop_assert_eq!(&pagetrie::Witness::decode(&encoded).unwrap(), &out.witness);
    }
    for (k, v) in &model {
        prop_assert_eq!(db.read(k).unwrap(), Some(v.clone()));
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn blocks_match_the_model_with_one_worker((keys, blocks) in workload()) {
        run(1, &keys, &blocks)?;
    }

    #[test]
    fn blocks_match_the_model_with_two_workers((keys, blocks) in workload()) {
        run(2, &keys, &blocks)?;
    }

    #[test]
    fn blocks_match_the_model_with_eight_workers((keys, blocks) in workload()) {
        run(8, &keys, &blocks)?;
    }
}
