//! State-sync chunks in memory: cut a trie into chunks, check each against the
//! root, and refuse every change to one (its entries, its range, its proof,
//! any bit of its encoding).

mod common;

use std::collections::BTreeMap;

use common::{cases, clustered_keys, entries, naive_root, value, Key};
use pagetrie::trie::proof::prove_multi;
use pagetrie::{Chunk, Error};
use proptest::prelude::*;

type Model = BTreeMap<Key, Vec<u8>>;

/// The chunks of `model` cut before the entries at `cuts` (indices, any order).
fn cut(model: &Model, cuts: &[usize]) -> Vec<Chunk> {
    let all: Vec<(Key, Vec<u8>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
    let hashed = entries(model);
    let mut at: Vec<usize> = cuts
        .iter()
        .filter(|&&i| i > 0 && i < all.len())
        .copied()
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut bounds = vec![0];
    bounds.extend(at);
    let mut chunks = Vec::new();
    for (n, &from) in bounds.iter().enumerate() {
        let to = bounds.get(n + 1).copied();
        let start = if n == 0 { [0; 32] } else { all[from].0 };
        let end = to.map(|t| all[t].0);
        let proof = prove_multi(&hashed, &[start].into_iter().chain(end).collect::<Vec<_>>())
            .expect("sorted entries");
        let entries = all[from..to.unwrap_or(all.len())].to_vec();
        chunks.push(Chunk::new(start, end, entries, &proof).expect("a well-formed proof"));
    }
    chunks
}

fn model_and_cuts(max: usize) -> impl Strategy<Value = (Model, Vec<usize>)> {
    (
        clustered_keys(max),
        prop::collection::vec(value(), max),
        prop::collection::vec(0usize..max.max(1), 0..6),
    )
        .prop_map(|(keys, values, cuts)| (keys.into_iter().zip(values).collect(), cuts))
}

proptest! {
    #![proptest_config(cases(96))]

    /// Chunks verify, cover the state exactly once in order, survive encoding,
    /// and fail against any other root.
    #[test]
    fn chunks_verify_and_cover_the_state((model, cuts) in model_and_cuts(40)) {
        let root = naive_root(&model);
        let chunks = cut(&model, &cuts);
        let mut joined = Vec::new();
        let mut next = Some([0u8; 32]);
        for chunk in &chunks {
            chunk.verify(&root).unwrap();
            prop_assert_eq!(Some(*chunk.start()), next);
            next = chunk.end().copied();
            prop_assert_eq!(&Chunk::decode(&chunk.encode()).unwrap(), chunk);
            joined.extend_from_slice(chunk.entries());
        }
        prop_assert_eq!(next, None);
        prop_assert_eq!(joined, model.iter().map(|(k, v)| (*k, v.clone())).collect::<Vec<_>>());

        let mut other = model.clone();
        other.insert([0x5a; 32], b"other".to_vec());
        let other_root = naive_root(&other);
        for chunk in &chunks {
            prop_assert!(chunk.verify(&other_root).is_err());
        }
    }

    /// A chunk missing an entry, holding an extra one, with a changed value,
    /// or with its range moved to another key is refused.
    #[test]
    fn changed_chunks_are_refused((model, cuts) in model_and_cuts(24), pick in any::<prop::sample::Index>(), extra in any::<Key>()) {
        let root = naive_root(&model);
        let keys: Vec<Key> = model.keys().copied().collect();
        let hashed = entries(&model);
        for chunk in cut(&model, &cuts) {
            let (start, end) = (*chunk.start(), chunk.end().copied());
            // The proof of the true boundaries, cut to whatever range is claimed.
            let proof = prove_multi(&hashed, &[start].into_iter().chain(end).collect::<Vec<_>>()).unwrap();
            let remake = |start: Key, end: Option<Key>, entries: Vec<(Key, Vec<u8>)>| {
                Chunk::new(start, end, entries, &proof).unwrap()
            };
            let entries = chunk.entries().to_vec();
            if !entries.is_empty() {
                let i = pick.index(entries.len());
                // Past a chunk's first entry (which its start names), only
                // the root can tell.
                let by_root = |c: Chunk| matches!(c.verify(&root), Err(Error::RootMismatch));
                let first_named = i == 0 && start != [0; 32];
                let mut fewer = entries.clone();
                fewer.remove(i);
                let fewer = remake(start, end, fewer);
                let fewer_refused = if first_named { refused(fewer, &root) } else { by_root(fewer) };
                prop_assert!(fewer_refused);
                let mut changed = entries.clone();
                changed[i].1.push(1);
                prop_assert!(by_root(remake(start, end, changed)));
            }
            let inside = extra >= start && end.is_none_or(|e| extra < e);
            if inside && !model.contains_key(&extra) {
                let mut more = entries.clone();
                more.push((extra, b"x".to_vec()));
                more.sort();
                let more = remake(start, end, more);
                let named = extra == start;
                prop_assert!(named || matches!(more.verify(&root), Err(Error::RootMismatch)));
            }
            // Every other present key (or none) as the end, with the old
            // entries or with the entries the new range truly has: whatever
            // verifies must be the truth.
            for other_end in keys.iter().copied().map(Some).chain([None]) {
                if other_end == end || other_end.is_some_and(|e| e <= start) {
                    continue;
                }
                let truthful: Vec<(Key, Vec<u8>)> = model
                    .range(start..)
                    .take_while(|(k, _)| other_end.is_none_or(|e| **k < e))
                    .map(|(k, v)| (*k, v.clone()))
                    .collect();
                // With the true boundaries' proof cut to the claimed range, and
                // with an honest proof of the claimed range: it verifies
                // exactly when the entries are the truth.
                let honest = prove_multi(&hashed, &[start].into_iter().chain(other_end).collect::<Vec<_>>()).unwrap();
                for claimed in [entries.clone(), truthful.clone()] {
                    let moved = remake(start, other_end, claimed.clone());
                    prop_assert!(claimed == truthful || refused(moved, &root));
                    let proven = Chunk::new(start, other_end, claimed.clone(), &honest).unwrap();
                    prop_assert_eq!(proven.verify(&root).is_ok(), claimed == truthful);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(4))]

    /// Any one-bit change of an encoded chunk fails to decode, fails to
    /// verify, or moves its start (which a restore refuses).
    #[test]
    fn every_bit_of_the_encoding_counts((model, cuts) in model_and_cuts(10)) {
        let root = naive_root(&model);
        for chunk in cut(&model, &cuts) {
            let bytes = chunk.encode();
            for bit in 0..bytes.len() * 8 {
                let mut flipped = bytes.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                let accepted = Chunk::decode(&flipped)
                    .is_ok_and(|c| c.start() == chunk.start() && c.verify(&root).is_ok());
                prop_assert!(!accepted, "bit {} of {} accepted", bit, bytes.len() * 8);
            }
        }
    }
}

fn refused(chunk: Chunk, root: &Key) -> bool {
    match chunk.verify(root) {
        Err(Error::RootMismatch | Error::MalformedChunk(_) | Error::MalformedProof(_)) => true,
        Err(other) => panic!("unexpected error {other}"),
        Ok(()) => false,
    }
}

#[test]
fn an_empty_state_is_one_empty_chunk() {
    let chunks = cut(&Model::new(), &[]);
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].entries().is_empty() && chunks[0].end().is_none());
    chunks[0].verify(&[0; 32]).unwrap();
    assert!(chunks[0].verify(&[1; 32]).is_err());
}

#[test]
fn random_bytes_never_panic() {
    let mut seed = 7u64;
    for len in 0..400 {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 56) as u8
            })
            .collect();
        let mut framed = vec![1, 4];
        framed.extend_from_slice(&bytes);
        for input in [&bytes, &framed] {
            if let Ok(chunk) = Chunk::decode(input) {
                let _ = chunk.verify(&[3; 32]);
            }
        }
    }
}
