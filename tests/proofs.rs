//! Path proofs, multi-proofs, their encoding, tamper detection and update
//! verification, checked against an independent model.

mod common;

use std::collections::BTreeMap;

use common::{cases, clustered_keys, entries, naive_root, value, Key};
use pagetrie::trie::hash_value;
use pagetrie::trie::proof::{prove_multi, prove_path, MultiProof, PathProof};
use pagetrie::Error;
use proptest::prelude::*;

type Model = BTreeMap<Key, Vec<u8>>;

fn truth(model: &Model, key: &Key) -> Option<[u8; 32]> {
    model.get(key).map(|v| hash_value(v))
}

/// A trie and keys to prove: some present, some absent, clustered so paths share
/// long prefixes.
fn trie_and_queries(max: usize) -> impl Strategy<Value = (Model, Vec<Key>)> {
    (
        clustered_keys(max),
        prop::collection::vec(value(), max),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(keys, values, split)| {
            let split = if keys.is_empty() {
                0
            } else {
                split.index(keys.len() + 1)
            };
            let model: Model = keys[..split].iter().copied().zip(values).collect();
            (model, keys)
        })
}

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn every_proof_verifies_and_tells_the_truth((model, queries) in trie_and_queries(40)) {
        let entries = entries(&model);
        let root = naive_root(&model);
        let mut paths = Vec::new();
        for key in &queries {
            let proof = prove_path(&entries, key).unwrap();
            prop_assert_eq!(proof.verify(key, &root).unwrap(), truth(&model, key));
            prop_assert_eq!(&PathProof::decode(&proof.encode().unwrap()).unwrap(), &proof);
            paths.push((*key, proof));
        }
        let multi = prove_multi(&entries, &queries).unwrap();
        prop_assert_eq!(&MultiProof::decode(&multi.encode()).unwrap(), &multi);
        prop_assert_eq!(multi.encode().len(), multi.encoded_len());
        let verified = multi.verify(&root).unwrap();
        for key in &queries {
            prop_assert_eq!(verified.get(key).unwrap(), truth(&model, key));
            verified.confirm(key, truth(&model, key).as_ref()).unwrap();
        }
        // Merging the path proofs gives exactly what the direct prover gives.
        if !queries.is_empty() {
            prop_assert_eq!(&MultiProof::from_path_proofs(paths.clone()).unwrap(), &multi);
        }
        // Shared siblings are stored once: smaller than the path proofs it replaces.
        let path_siblings: usize = paths.iter().map(|(_, p)| p.siblings.len()).sum();
        let distinct: std::collections::BTreeSet<_> = queries.iter().collect();
        if distinct.len() >= 2 && path_siblings >= 2 {
            prop_assert!(multi.siblings.len() < path_siblings);
            let path_bytes: usize = distinct.iter().map(|k| prove_path(&entries, k).unwrap().encode().unwrap().len()).sum();
            prop_assert!(multi.encode().len() < path_bytes, "{} >= {}", multi.encode().len(), path_bytes);
        }
    }

    #[test]
    fn verify_update_reproduces_the_root(
        (mut model, queries) in trie_and_queries(40),
        new_values in prop::collection::vec(prop::option::weighted(0.6, value()), 40),
        reads in prop::collection::vec(any::<Key>(), 0..4),
    ) {
        let entries = entries(&model);
        let prev_root = naive_root(&model);
        let writes: BTreeMap<Key, Option<Vec<u8>>> = queries.iter().copied().zip(new_values).collect();
        let mut witnessed: Vec<Key> = writes.keys().copied().collect();
        witnessed.extend(&reads);
        let proof = prove_multi(&entries, &witnessed).unwrap();
        let write_hashes: Vec<_> = writes.iter().map(|(k, v)| (*k, v.as_deref().map(hash_value))).collect();
        let new_root = proof.verify_update(&prev_root, &write_hashes).unwrap();
        for (k, v) in writes {
            match v {
                Some(v) => { model.insert(k, v); }
                None => { model.remove(&k); }
            }
        }
        prop_assert_eq!(new_root, naive_root(&model));
    }
}

#[test]
fn deleting_everything_yields_the_empty_root() {
    let model: Model = (0u8..20)
        .map(|i| (*blake3::hash(&[i]).as_bytes(), vec![i]))
        .collect();
    let entries = entries(&model);
    let keys: Vec<Key> = model.keys().copied().collect();
    let proof = prove_multi(&entries, &keys).unwrap();
    let deletes: Vec<_> = keys.iter().map(|k| (*k, None)).collect();
    assert_eq!(
        proof.verify_update(&naive_root(&model), &deletes).unwrap(),
        [0; 32]
    );
}

#[test]
fn update_outside_the_proof_is_refused() {
    let model: Model = (0u8..20)
        .map(|i| (*blake3::hash(&[i]).as_bytes(), vec![i]))
        .collect();
    let entries = entries(&model);
    let proven = *model.keys().next().unwrap();
    let proof = prove_multi(&entries, &[proven]).unwrap();
    let other = *model.keys().last().unwrap();
    let err = proof
        .verify_update(&naive_root(&model), &[(other, None)])
        .unwrap_err();
    assert!(
        matches!(err, Error::KeyNotCovered(k) if k == other),
        "{err:?}"
    );
    let unsorted = [(other, None), (proven, None)];
    assert!(proof.verify_update(&naive_root(&model), &unsorted).is_err());
}

/// Small tries, so that flipping every single bit stays cheap.
fn small_trie() -> impl Strategy<Value = (Model, Vec<Key>)> {
    trie_and_queries(6)
}

/// Every bit of a small encoding; every 13th of a large one (deep clustered paths
/// run to 8 KiB, and each flip costs a full verification).
fn bits_to_flip(bytes: &[u8]) -> impl Iterator<Item = usize> {
    let bits = bytes.len() * 8;
    (0..bits).step_by(if bits <= 4096 { 1 } else { 13 })
}

fn flip(bytes: &[u8], bit: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[bit / 8] ^= 0x80 >> (bit % 8);
    out
}

fn flip_key(key: &Key, bit: usize) -> Key {
    flip(key, bit).try_into().unwrap()
}

proptest! {
    #![proptest_config(cases(48))]

    /// Any one-bit change to an encoded path proof or its root is rejected (the
    /// encoding is canonical, so no flipped proof may verify at all), and so is a
    /// changed value hash. A changed key is rejected within the path, and past the
    /// terminal gets the truth about the changed key.
    #[test]
    fn path_proof_tampering_is_caught((model, queries) in small_trie()) {
        let entries = entries(&model);
        let root = naive_root(&model);
        for key in &queries {
            let proof = prove_path(&entries, key).unwrap();
            let bytes = proof.encode().unwrap();
            for b in bits_to_flip(&bytes) {
                let answer = PathProof::decode(&flip(&bytes, b)).and_then(|p| p.verify(key, &root));
                prop_assert!(answer.is_err(), "serialized bit {} accepted: {:?}", b, answer);
            }
            if let Some(leaf) = proof.terminal {
                for b in 0..256 {
                    let mut bad = proof.clone();
                    bad.terminal = Some(pagetrie::trie::proof::LeafData {
                        value_hash: flip_key(&leaf.value_hash, b),
                        ..leaf
                    });
                    prop_assert!(bad.verify(key, &root).is_err());
                }
            }
            for b in 0..256 {
                prop_assert!(proof.verify(key, &flip_key(&root, b)).is_err());
                let changed = flip_key(key, b);
                if let Ok(answer) = proof.verify(&changed, &root) {
                    prop_assert!(b >= proof.depth(), "key bit {} within the path accepted", b);
                    prop_assert_eq!(answer, truth(&model, &changed));
                }
            }
        }
    }

    #[test]
    fn multi_proof_tampering_is_caught((model, queries) in small_trie()) {
        let entries = entries(&model);
        let root = naive_root(&model);
        let proof = prove_multi(&entries, &queries).unwrap();
        let answers_hold = |p: &MultiProof, root: &[u8; 32]| -> bool {
            match p.verify(root) {
                Ok(v) => queries.iter().all(|k| matches!(v.get(k), Ok(a) if a == truth(&model, k))),
                Err(_) => false,
            }
        };
        prop_assert!(answers_hold(&proof, &root));
        let bytes = proof.encode();
        for b in bits_to_flip(&bytes) {
            let verified = MultiProof::decode(&flip(&bytes, b)).and_then(|p| p.verify(&root).map(|_| ()));
            prop_assert!(verified.is_err(), "serialized bit {} accepted", b);
        }
        for b in 0..256 {
            prop_assert!(proof.verify(&flip_key(&root, b)).is_err());
        }
        let verified = proof.verify(&root).unwrap();
        for key in &queries {
            let expected = truth(&model, key);
            if let Some(vh) = expected {
                prop_assert!(verified.confirm(key, Some(&flip_key(&vh, 0))).is_err());
            }
            // A changed key either falls outside the proof or gets the truth.
            for b in 0..256 {
                let changed = flip_key(key, b);
                if let Ok(answer) = verified.get(&changed) {
                    prop_assert_eq!(answer, truth(&model, &changed));
                }
            }
        }
    }
}

#[test]
fn absence_past_a_terminator_holds_for_any_later_bit() {
    // 00.., 01.., 110.. and 111..: the subtree 10.. is empty, a terminator at depth 2.
    let model: Model = [
        ([0x00; 32], vec![1]),
        ([0x40; 32], vec![2]),
        ([0xc0; 32], vec![3]),
        ([0xe0; 32], vec![4]),
    ]
    .into();
    let entries = entries(&model);
    let root = naive_root(&model);
    let absent = [0x80; 32];
    let proof = prove_path(&entries, &absent).unwrap();
    assert_eq!((proof.depth(), proof.terminal), (2, None));
    for b in 2..256 {
        let k = flip_key(&absent, b);
        assert_eq!(proof.verify(&k, &root).unwrap(), None, "bit {b}");
    }
    for b in 0..2 {
        assert!(
            proof.verify(&flip_key(&absent, b), &root).is_err(),
            "bit {b}"
        );
    }
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), root in any::<Key>(), key in any::<Key>()) {
        for kind in [1u8, 2] {
            let mut framed = vec![1, kind];
            framed.extend_from_slice(&bytes);
            if let Ok(p) = PathProof::decode(&framed) {
                let _ = p.verify(&key, &root);
            }
            if let Ok(p) = MultiProof::decode(&framed) {
                if let Ok(v) = p.verify(&root) {
                    let _ = v.get(&key);
                }
                let _ = p.verify_update(&root, &[(key, None)]);
            }
        }
    }
}

#[test]
fn malformed_encodings_are_errors_not_panics() {
    for bytes in [
        &[][..],
        &[1],
        &[1, 1, 7],
        &[9, 1, 0, 0, 0],
        &[1, 2, 0xff, 0xff, 0xff, 0xff],
    ] {
        assert!(PathProof::decode(bytes).is_err());
        assert!(MultiProof::decode(bytes).is_err());
    }
}

/// Inputs a caller can build by hand that reach past a key path's 256 bits are
/// errors or well-defined answers, never panics or truncated encodings.
#[test]
fn inputs_past_256_bits_are_errors_not_panics() {
    let deep = PathProof {
        terminal: None,
        siblings: vec![[1; 32]; 70_000],
    };
    assert!(matches!(deep.encode(), Err(Error::MalformedProof(_))));
    let terminal = pagetrie::trie::proof::MultiTerminal {
        depth: 1000,
        path: [7; 32],
        value_hash: None,
    };
    // Deeper than the key: covers exactly its own path.
    assert!(terminal.covers(&[7; 32]));
    assert!(!terminal.covers(&[8; 32]));
    assert!(pagetrie::trie::bit(&[1; 32], 255));
}
