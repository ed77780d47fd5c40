//! Readers beside commits, a poisoned store, refused values, and long values in the cache.

use super::*;

/// Readers on other threads during commits see published state only: while a
/// commit overwrites buckets in place and splits them, every read returns the
/// value of a commit published between the read's start and its end.
#[test]
fn reads_during_commits_see_published_values_only() {
    use std::sync::atomic::{AtomicBool, AtomicU64};

    let dir = tempfile::tempdir().unwrap();
    let (store, values) = open(dir.path());
    let values = Arc::new(values);
    let stable: Vec<KeyPath> = (0..3000).map(key).collect();
    // Round r writes r to every stable key; round 0 is published before readers start.
    commit(
        &store,
        &values,
        stable
            .iter()
            .map(|k| (*k, Some(0u64.to_le_bytes().to_vec())))
            .collect(),
    );
    // `published`: rounds whose publish has finished; `publishing`: rounds whose
    // publish may have begun. Every in-place write of round r happens before
    // `publishing` reaches r.
    let published = Arc::new(AtomicU64::new(0));
    let publishing = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (values, published, publishing, stop, stable, reads) = (
                values.clone(),
                published.clone(),
                publishing.clone(),
                stop.clone(),
                stable.clone(),
                reads.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng(17 + t);
                while !stop.load(Ordering::SeqCst) {
                    let k = &stable[(rng.next() % stable.len() as u64) as usize];
                    let before = published.load(Ordering::SeqCst);
                    let v = values.get(k).unwrap().expect("stable keys exist");
                    let after = publishing.load(Ordering::SeqCst);
                    let round = u64::from_le_bytes(v.try_into().unwrap());
                    assert!(
                        before <= round && round <= after,
                        "read round {round}, published {before}..{after}"
                    );
                    reads.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    // At least 12 rounds, and more while the readers have read too little to
    // mean anything (a loaded machine starves them).
    let mut round = 0u64;
    while round < 12 || (reads.load(Ordering::SeqCst) < 1000 && round < 60) {
        round += 1;
        let mut changes: Changes = stable
            .iter()
            .map(|k| (*k, Some(round.to_le_bytes().to_vec())))
            .collect();
        // New keys, so buckets split and move between slots.
        changes.extend((0..1500).map(|i| (key(1_000_000 * round + i), Some(vec![1]))));
        let changes: Vec<_> = changes.into_iter().collect();
        commit_values(&store, &values, &changes, || {
            publishing.store(round, Ordering::SeqCst)
        });
        published.store(round, Ordering::SeqCst);
    }
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.join().unwrap();
    }
    let reads = reads.load(Ordering::SeqCst);
    assert!(
        reads > 1000,
        "readers made too few reads to mean anything: {reads} in {round} rounds"
    );
}

#[test]
fn a_poisoned_store_answers_nothing_even_from_ram() {
    use crate::store::Batch;
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path());
    let values = ValueStore::open(&store, 16 * 4096).unwrap();
    commit(&store, &values, Changes::from([(key(1), Some(vec![1]))]));
    // An absent key is answered from the RAM summaries alone.
    let before = reads(&store);
    assert_eq!(values.get(&key(2)).unwrap(), None);
    assert_eq!(reads(&store), before);
    faults.writes_left.store(0, Ordering::SeqCst);
    let mut plan = values
        .plan(&[(key(3), Some(vec![3]))], 2, |_| Ok(()))
        .unwrap();
    let mut batch = Batch::new([0; 32], store.meta().lengths);
    plan.stage(&mut batch);
    assert!(store.persist(batch).is_err());
    assert!(matches!(values.get(&key(2)), Err(Error::Poisoned)));
    assert!(matches!(values.get(&key(1)), Err(Error::Poisoned)));
}

#[test]
fn values_over_the_length_limit_are_refused() {
    assert!(crate::check_value_len(crate::MAX_VALUE_LEN as usize).is_ok());
    for len in [crate::MAX_VALUE_LEN as usize + 1, u32::MAX as usize] {
        assert!(matches!(
            crate::check_value_len(len),
            Err(Error::ValueTooLarge(l)) if l == len
        ));
    }
}

/// A long value read over and over costs one disk read, also after a reopen,
/// and takes its blocks from the cache's budget: a cache too small for it
/// reads it every time.
#[test]
fn a_long_value_read_again_comes_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let code = vec![0x60; 24 << 10];
    {
        let (store, values) = open(dir.path());
        commit(
            &store,
            &values,
            Changes::from([(key(7), Some(code.clone()))]),
        );
    }
    let store = Arc::new(Store::open(dir.path(), StoreConfig::small()).unwrap());
    // Room for the value's six blocks and some buckets.
    let values = ValueStore::open(&store, 64 * 4096).unwrap();
    let at = reads(&store);
    assert_eq!(values.get(&key(7)).unwrap(), Some(code.clone()));
    let first = reads(&store) - at;
    assert!(first >= 2, "its bucket and its blocks: {first} reads");
    for _ in 0..1000 {
        assert_eq!(values.get(&key(7)).unwrap().as_deref(), Some(&code[..]));
    }
    assert_eq!(reads(&store) - at, first, "the repeats read nothing");
    // Rewritten, the new value is read, never the cached old one.
    let newer = vec![0x61; 24 << 10];
    commit(
        &store,
        &values,
        Changes::from([(key(7), Some(newer.clone()))]),
    );
    assert_eq!(values.get(&key(7)).unwrap(), Some(newer));
    drop((store, values));
    // With the default test cache (16 blocks) a 6-block value is over a
    // quarter of it: read from the disk each time.
    let (store, values) = open(dir.path());
    values.get(&key(7)).unwrap();
    let at = reads(&store);
    values.get(&key(7)).unwrap();
    assert!(reads(&store) - at >= 6);
}
