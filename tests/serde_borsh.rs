//! Proofs and witnesses round-trip through serde (JSON) and borsh, and still
//! verify afterwards. Run with `--features serde,borsh`.
#![cfg(all(feature = "serde", feature = "borsh"))]

use pagetrie::trie::proof::{prove_multi, prove_path, LeafData, MultiProof, PathProof};
use pagetrie::trie::{compute_root, hash_value};
use pagetrie::{Chunk, Db, Options, Witness};

fn round_trip<T>(value: &T) -> (T, T)
where
    T: serde::Serialize
        + serde::de::DeserializeOwned
        + borsh::BorshSerialize
        + borsh::BorshDeserialize,
{
    let json = serde_json::to_string(value).unwrap();
    let from_json = serde_json::from_str(&json).unwrap();
    let bytes = borsh::to_vec(value).unwrap();
    let from_borsh = borsh::from_slice(&bytes).unwrap();
    (from_json, from_borsh)
}

#[test]
fn proofs_and_witnesses_round_trip_and_verify() {
    let mut entries: Vec<_> = (0u32..200)
        .map(|i| {
            (
                *blake3::hash(&i.to_le_bytes()).as_bytes(),
                hash_value(&i.to_be_bytes()),
            )
        })
        .collect();
    entries.sort();
    let root = compute_root(entries.clone()).unwrap();
    let present = entries[17].0;
    let absent = [0x42; 32];

    let path = prove_path(&entries, &present).unwrap();
    for copy in <[PathProof; 2]>::from(round_trip(&path)) {
        assert_eq!(copy, path);
        assert_eq!(copy.verify(&present, &root).unwrap(), Some(entries[17].1));
    }
    let leaf = path.terminal.unwrap();
    let (a, b): (LeafData, LeafData) = round_trip(&leaf);
    assert_eq!((a, b), (leaf, leaf));

    let multi = prove_multi(&entries, &[present, absent]).unwrap();
    for copy in <[MultiProof; 2]>::from(round_trip(&multi)) {
        assert_eq!(copy, multi);
        let verified = copy.verify(&root).unwrap();
        verified.confirm(&absent, None).unwrap();
    }

    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path())).unwrap();
    let session = db.begin_session();
    session.read(&absent).unwrap();
    session.write(present, Some(vec![1, 2, 3]));
    let out = session.commit_and_prove().unwrap();
    for copy in <[Witness; 2]>::from(round_trip(&out.witness)) {
        assert_eq!(copy, out.witness);
        assert_eq!(copy.verify_update(&out.prev_root).unwrap(), out.root);
    }

    let chunk = db.export(1 << 20).unwrap().next().unwrap().unwrap();
    for copy in <[Chunk; 2]>::from(round_trip(&chunk)) {
        assert_eq!(copy, chunk);
        copy.verify(&db.root().unwrap()).unwrap();
    }
}
