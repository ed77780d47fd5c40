//! State sync through the public API: ordered iteration, export in chunks,
//! verified restore. Export then restore reproduces the root; chunks out of
//! order, repeated, from another state or changed in any bit are refused;
//! iteration reads one root while commits run.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{
    cases, clustered_keys, key, key_from_hex, naive_root, reference_cases, unhex, value, Key, Rng,
};
use pagetrie::{Chunk, Db, Error, Options};
use proptest::prelude::*;

type Model = BTreeMap<Key, Vec<u8>>;

fn options(path: &Path) -> Options {
    Options::new(path).commit_workers(2)
}

/// A database at `path` holding `model`, written in two commits (the second
/// deleting what the first wrote too much).
fn db_with(path: &Path, model: &Model, extra: &[Key]) -> Db {
    let db = Db::open(options(path)).unwrap();
    let session = db.begin_session();
    for (k, v) in model {
        session.write(*k, Some(v.clone()));
    }
    for k in extra.iter().filter(|k| !model.contains_key(*k)) {
        session.write(*k, Some(b"gone soon".to_vec()));
    }
    session.commit().unwrap();
    let session = db.begin_session();
    for k in extra.iter().filter(|k| !model.contains_key(*k)) {
        session.write(*k, None);
    }
    session.commit().unwrap();
    db
}

fn export_all(db: &Db, chunk_bytes: usize) -> Vec<Chunk> {
    db.export(chunk_bytes)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Restores `chunks` (sent encoded) at `path` and returns the opened database.
fn restore_all(path: &Path, root: Key, chunks: &[Chunk]) -> Db {
    let mut restore = Db::restore(options(path), root).unwrap();
    for chunk in chunks {
        restore
            .apply(&Chunk::decode(&chunk.encode()).unwrap())
            .unwrap();
    }
    assert_eq!(restore.next_start(), None);
    restore.finish().unwrap()
}

fn range(model: &Model, start: Key, end: Option<Key>) -> Vec<(Key, Vec<u8>)> {
    model
        .range(start..)
        .take_while(|(k, _)| end.is_none_or(|e| **k < e))
        .map(|(k, v)| (*k, v.clone()))
        .collect()
}

/// Values of every size the store keeps: empty, short, inline up to a bucket's
/// limit, and overflow values of several blocks.
fn any_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => value(),
        1 => (240usize..300).prop_map(|n| vec![0xab; n]),
        1 => (4000usize..13000).prop_map(|n| (0..n).map(|i| i as u8).collect()),
    ]
}

fn state(max: usize) -> impl Strategy<Value = (Model, Vec<Key>)> {
    (
        clustered_keys(max),
        prop::collection::vec(any_value(), max),
        prop::collection::vec(any::<Key>(), 0..8),
    )
        .prop_map(|(keys, values, extra)| (keys.into_iter().zip(values).collect(), extra))
}

proptest! {
    #![proptest_config(cases(12))]

    /// Export then restore reproduces the root and every value, for chunk
    /// sizes from one bucket to the whole state; ranges iterate as the model.
    #[test]
    fn export_then_restore_reproduces_the_state(
        (model, extra) in state(300),
        chunk_bytes in prop_oneof![Just(1usize), 1usize..20_000, Just(1 << 30)],
        ranges in prop::collection::vec((any::<Key>(), any::<Option<Key>>()), 4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = db_with(&dir.path().join("a"), &model, &extra);
        let root = db.root().unwrap();
        prop_assert_eq!(root, naive_root(&model));
        for (start, end) in ranges {
            let got: Vec<_> = db.iter_range(&start, end.as_ref()).unwrap().collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got, range(&model, start, end));
        }
        let all: Vec<_> = db.iter_range(&[0; 32], None).unwrap().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(all, range(&model, [0; 32], None));

        let chunks = export_all(&db, chunk_bytes);
        let mut joined = Vec::new();
        for chunk in &chunks {
            chunk.verify(&root).unwrap();
            joined.extend_from_slice(chunk.entries());
        }
        prop_assert_eq!(joined, range(&model, [0; 32], None));
        let restored = restore_all(&dir.path().join("b"), root, &chunks);
        prop_assert_eq!(restored.root().unwrap(), root);
        for (k, v) in &model {
            prop_assert_eq!(restored.read(k).unwrap(), Some(v.clone()));
        }
    }
}

#[test]
fn the_reference_vectors_export_and_restore() {
    let cases = reference_cases();
    assert!(cases.len() >= 20);
    for (n, case) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(options(&dir.path().join("a"))).unwrap();
        for step in case["steps"].as_array().unwrap() {
            let session = db.begin_session();
            for op in step["ops"].as_array().unwrap() {
                session.write(
                    key_from_hex(op[0].as_str().unwrap()),
                    op[1].as_str().map(unhex),
                );
            }
            session.commit().unwrap();
        }
        let expected = case["steps"].as_array().unwrap().last().unwrap()["root"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(common::hex(&db.root().unwrap()), expected);
        for chunk_bytes in [1, 300, 1 << 20] {
            let chunks = export_all(&db, chunk_bytes);
            let path = dir.path().join(format!("b{chunk_bytes}"));
            let restored = restore_all(&path, db.root().unwrap(), &chunks);
            assert_eq!(common::hex(&restored.root().unwrap()), expected, "case {n}");
        }
    }
}

fn sample_model(n: u32) -> Model {
    (0..n)
        .map(|i| {
            let key = *blake3::hash(&i.to_le_bytes()).as_bytes();
            let len = if i % 50 == 0 {
                5000
            } else {
                8 + i as usize % 40
            };
            (key, vec![i as u8; len])
        })
        .collect()
}

#[test]
fn chunks_out_of_order_repeated_or_from_another_state_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = sample_model(3000);
    let db = db_with(&dir.path().join("a"), &model, &[]);
    let chunks = export_all(&db, 8 << 10);
    assert!(chunks.len() >= 4, "{} chunks", chunks.len());
    let mut other = model.clone();
    other.insert([7; 32], b"seven".to_vec());
    let db_other = db_with(&dir.path().join("other"), &other, &[]);
    let foreign = export_all(&db_other, 8 << 10);

    let target = dir.path().join("b");
    let mut restore = Db::restore(options(&target), db.root().unwrap()).unwrap();
    let out_of_order = |e: Error| matches!(e, Error::ChunkOutOfOrder { .. });
    assert!(restore.apply(&chunks[1]).is_err_and(out_of_order));
    // The other state's first chunk starts where this restore does.
    let mismatch = |e: Error| matches!(e, Error::RootMismatch | Error::MalformedChunk(_));
    assert!(restore.apply(&foreign[0]).is_err_and(mismatch));
    restore.apply(&chunks[0]).unwrap();
    assert!(restore.apply(&chunks[0]).is_err_and(out_of_order));
    assert!(restore.apply(&chunks[2]).is_err_and(out_of_order));
    let next = restore.next_start().unwrap();
    assert!(matches!(
        Db::restore(options(&target), db.root().unwrap()).map(|_| ()),
        Err(Error::Locked)
    ));
    drop(restore);
    // Resumed: the first chunk is in, the rest follow.
    let mut restore = Db::restore(options(&target), db.root().unwrap()).unwrap();
    assert_eq!(restore.next_start(), Some(next));
    for chunk in &chunks[1..chunks.len() - 1] {
        restore.apply(chunk).unwrap();
    }
    let restore = match restore.finish() {
        Err(Error::RestoreIncomplete { .. }) => {
            Db::restore(options(&target), db.root().unwrap()).unwrap()
        }
        other => panic!("finished early: {:?}", other.map(|db| db.root().unwrap())),
    };
    let mut restore = restore;
    restore.apply(chunks.last().unwrap()).unwrap();
    assert!(restore
        .apply(&chunks[0])
        .is_err_and(|e| matches!(e, Error::ChunkOutOfOrder { expected: None })));
    let restored = restore.finish().unwrap();
    assert_eq!(restored.root().unwrap(), db.root().unwrap());
    assert!(!dir.path().join("b.restoring").exists());
    // A database is there now: restoring to it again is refused.
    drop(restored);
    assert!(matches!(
        Db::restore(options(&target), db.root().unwrap()).map(|_| ()),
        Err(Error::DirectoryNotEmpty)
    ));
}

#[test]
fn every_bit_changed_in_an_encoded_chunk_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = sample_model(400);
    let db = db_with(&dir.path().join("a"), &model, &[]);
    let chunks = export_all(&db, 1500);
    assert!(chunks.len() >= 3);
    let mut restore = Db::restore(options(&dir.path().join("b")), db.root().unwrap()).unwrap();
    restore.apply(&chunks[0]).unwrap();
    // A middle chunk (a present start and end) and the last (no end).
    for chunk in [&chunks[1], chunks.last().unwrap()] {
        let bytes = chunk.encode();
        let mut flips = 0;
        for bit in 0..bytes.len() * 8 {
            let mut changed = bytes.clone();
            changed[bit / 8] ^= 1 << (bit % 8);
            if let Ok(decoded) = Chunk::decode(&changed) {
                assert!(restore.apply(&decoded).is_err(), "bit {bit} accepted");
            }
            flips += 1;
        }
        assert_eq!(flips, bytes.len() * 8);
        let decoded = Chunk::decode(&bytes).unwrap();
        if chunk == &chunks[1] {
            restore.apply(&decoded).unwrap();
            for chunk in &chunks[2..chunks.len() - 1] {
                restore.apply(chunk).unwrap();
            }
        }
    }
    restore.apply(chunks.last().unwrap()).unwrap();
    assert_eq!(
        restore.finish().unwrap().root().unwrap(),
        db.root().unwrap()
    );
}

#[test]
fn an_empty_state_exports_one_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(options(&dir.path().join("a"))).unwrap();
    let chunks = export_all(&db, 1 << 20);
    assert_eq!(chunks.len(), 1);
    assert!(chunks[0].entries().is_empty());
    let restored = restore_all(&dir.path().join("b"), db.root().unwrap(), &chunks);
    assert_eq!(restored.root().unwrap(), [0; 32]);
}

/// An iterator and an export made before commits, and partly read, read the
/// state before them: the commits land between runs of buckets, splitting,
/// merging and rewriting buckets and replacing overflow values.
#[test]
fn ranges_and_exports_made_before_commits_read_the_state_before() {
    let dir = tempfile::tempdir().unwrap();
    let model = sample_model(60_000);
    let db = db_with(&dir.path().join("a"), &model, &[]);
    let root = db.root().unwrap();
    let keys: Vec<Key> = model.keys().copied().collect();
    let (start, end) = (keys[100], Some(keys[59_000]));
    let mut iter = db.iter_range(&start, end.as_ref()).unwrap();
    let mut got: Vec<_> = iter.by_ref().take(500).collect::<Result<_, _>>().unwrap();
    let mut export = db.export(4 << 10).unwrap();
    let mut chunks = vec![export.next().unwrap().unwrap()];
    for n in 0..3u8 {
        let session = db.begin_session();
        for (i, key) in keys.iter().enumerate().skip(n as usize).step_by(3) {
            // Deletes, and values that move between bucket and overflow space.
            session.write(*key, (i % 2 == 0).then(|| vec![n; 100 + 200 * (i % 3)]));
        }
        for i in 0..3000u32 {
            let key = *blake3::hash(&(i + 100_000 * (n as u32 + 1)).to_le_bytes()).as_bytes();
            session.write(key, Some(vec![n; 9]));
        }
        session.commit().unwrap();
    }
    assert_ne!(db.root().unwrap(), root);
    got.extend(iter.map(Result::unwrap));
    assert_eq!(got, range(&model, start, end));
    chunks.extend(export.map(Result::unwrap));
    let mut joined = Vec::new();
    for chunk in &chunks {
        chunk.verify(&root).unwrap();
        joined.extend_from_slice(chunk.entries());
    }
    assert_eq!(joined, range(&model, [0; 32], None));
}

/// Iteration and export read the root they began at while another thread
/// commits, changing keys in and out of the range.
#[test]
fn ranges_and_exports_read_one_root_while_commits_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = sample_model(2000);
    let db = Arc::new(db_with(&dir.path().join("a"), &model, &[]));
    let states = Arc::new(Mutex::new(BTreeMap::from([(
        db.root().unwrap(),
        model.clone(),
    )])));
    let writer = {
        let (db, states) = (db.clone(), states.clone());
        std::thread::spawn(move || {
            for n in 0..60u32 {
                let session = db.begin_session();
                for i in 0..200u32 {
                    let key = *blake3::hash(&((n * 7 + i * 13) % 2600).to_le_bytes()).as_bytes();
                    let value = (i % 5 != 0).then(|| vec![n as u8; 1 + (i as usize % 300)]);
                    match &value {
                        Some(v) => model.insert(key, v.clone()),
                        None => model.remove(&key),
                    };
                    session.write(key, value);
                }
                let root = session.commit_and_prove().unwrap().root;
                states.lock().unwrap().insert(root, model.clone());
            }
        })
    };
    let mut checked = 0;
    let mut rng = Rng(0x9e37_79b9);
    while !writer.is_finished() || checked < 3 {
        let x = rng.next();
        let start = key(x);
        let end = (!x.is_multiple_of(4)).then(|| key(x + 1));
        let (start, end) = match end {
            Some(e) if e < start => (e, Some(start)),
            other => (start, other),
        };
        let before = db.root().unwrap();
        let iter = db.iter_range(&start, end.as_ref()).unwrap();
        let chunks = db.export(4 << 10).unwrap();
        if db.root().unwrap() != before {
            continue;
        }
        // Read only once a commit has landed since, so that the stores show
        // a newer state than the iterators'.
        while db.root().unwrap() == before && !writer.is_finished() {
            std::thread::yield_now();
        }
        let got: Vec<_> = iter.collect::<Result<_, _>>().unwrap();
        let exported: Vec<Chunk> = chunks.collect::<Result<_, _>>().unwrap();
        let expected = loop {
            if let Some(m) = states.lock().unwrap().get(&before) {
                break m.clone();
            }
            std::thread::yield_now();
        };
        assert_eq!(got, range(&expected, start, end));
        let mut joined = Vec::new();
        for chunk in &exported {
            chunk.verify(&before).unwrap();
            joined.extend_from_slice(chunk.entries());
        }
        assert_eq!(joined, range(&expected, [0; 32], None));
        checked += 1;
    }
    writer.join().unwrap();
    assert!(checked >= 3);
}

/// A restore resumed on another day asks for the chunks from its next start:
/// `export_from` cuts them as the whole export did, and refuses a start that
/// is no chunk boundary.
#[test]
fn export_from_a_restores_next_start_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = sample_model(4000);
    let db = db_with(&dir.path().join("a"), &model, &[]);
    let chunks = export_all(&db, 8 << 10);
    assert!(chunks.len() >= 5);
    let whole: Vec<Chunk> = db
        .export_from(&[0; 32], 8 << 10)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(whole, chunks);
    let target = dir.path().join("b");
    let mut restore = Db::restore(options(&target), db.root().unwrap()).unwrap();
    for chunk in &chunks[..3] {
        restore.apply(chunk).unwrap();
    }
    drop(restore);
    let mut restore = Db::restore(options(&target), db.root().unwrap()).unwrap();
    let next = restore.next_start().unwrap();
    let rest: Vec<Chunk> = db
        .export_from(&next, 8 << 10)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rest, chunks[3..]);
    // From a present key that is no cut, with another size: still a valid chain.
    let key = *model.keys().nth(1234).unwrap();
    let mut from_key = db.export_from(&key, 3 << 10).unwrap().map(Result::unwrap);
    let first = from_key.next().unwrap();
    assert_eq!((first.start(), first.entries()[0].0), (&key, key));
    first.verify(&db.root().unwrap()).unwrap();
    for chunk in &rest {
        restore.apply(chunk).unwrap();
    }
    assert_eq!(
        restore.finish().unwrap().root().unwrap(),
        db.root().unwrap()
    );
    let absent = [0x42; 32];
    assert!(!model.contains_key(&absent));
    assert!(matches!(
        db.export_from(&absent, 8 << 10).map(|_| ()),
        Err(Error::MalformedChunk(_))
    ));
}
