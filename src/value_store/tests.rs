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
/// (proptest-regressions/value_store/tests.txt) name keys by this index.
fn key(i: u64) -> KeyPath {
    hash_value(&i.to_be_bytes())
}

fn reads(store: &Store) -> u64 {
    store.io().counters.reads.load(Ordering::Relaxed)
}

#[test]
fn a_prefetched_bucket_answers_the_read_that_follows() {
    let dir = tempfile::tempdir().unwrap();
    let (store, values) = open(dir.path());
    commit(&store, &values, Changes::from([(key(1), Some(vec![1; 8]))]));
    drop((store, values));
    let (store, values) = open(dir.path());
    let before = reads(&store);
    let mut fetches = Fetches::<BucketRead>::new();
    values.prefetch(&key(1), 256, true, &mut fetches);
    let done = fetches.arrivals().recv().unwrap();
    let (read, block) = fetches.finish(done).unwrap();
    values.offer(read, block.expect("the read succeeded"));
    assert_eq!(values.get(&key(1)).unwrap(), Some(vec![1; 8]));
    assert_eq!(reads(&store) - before, 1, "the read came from the prefetch");
}

/// Runs `fetches` to the end, caching what arrives; returns the reads made.
fn settle(values: &ValueStore, fetches: &mut Fetches<BucketRead>) -> usize {
    let mut n = 0;
    while fetches.len() > 0 {
        let done = fetches.arrivals().recv().unwrap();
        if let Some((read, Some(block))) = fetches.finish(done) {
            values.offer(read, block);
            n += 1;
        }
    }
    n
}

/// A store of 5,000 keys in `dir`, closed: its contents and each bucket's
/// smallest key.
fn bucketed(dir: &Path) -> (BTreeMap<KeyPath, Vec<u8>>, Vec<KeyPath>) {
    let (store, values) = open(dir);
    let model: BTreeMap<KeyPath, Vec<u8>> = (0..5_000).map(|i| (key(i), vec![i as u8])).collect();
    commit(
        &store,
        &values,
        model.iter().map(|(k, v)| (*k, Some(v.clone()))).collect(),
    );
    let mins = values
        .state
        .read()
        .dir
        .sizes()
        .map(|(min, ..)| min)
        .collect();
    (model, mins)
}

#[test]
fn a_prefetch_reads_every_bucket_under_the_keys_subtree() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    assert!(mins.len() > 10, "{} buckets", mins.len());
    for min in &mins[1..6] {
        // The prefix the bucket's first key shares with the key before it:
        // its subtree begins in the bucket before.
        let before = *model.range(..*min).next_back().unwrap().0;
        let depth = common_prefix_len(&before, min);
        let (store, values) = open(dir.path());
        let mut fetches = Fetches::<BucketRead>::new();
        values.prefetch(min, depth, false, &mut fetches);
        let prefetched = settle(&values, &mut fetches);
        let at = reads(&store);
        let got = values.entries_with_prefix(min, depth).unwrap();
        assert_eq!(reads(&store) - at, 1, "only the key's own bucket is read");
        assert!(
            prefetched >= 1 && got.len() >= 2,
            "{prefetched} {}",
            got.len()
        );
        assert!(got.iter().any(|(k, _)| *k == before));
        drop((store, values));
        let (store, values) = open(dir.path());
        values.prefetch(min, depth, true, &mut fetches);
        assert_eq!(settle(&values, &mut fetches), prefetched + 1, "and its own");
        let at = reads(&store);
        values.entries_with_prefix(min, depth).unwrap();
        assert_eq!(reads(&store) - at, 0, "all of them came from the prefetch");
    }
}

#[test]
fn a_commits_buckets_load_at_once_and_then_answer_from_ram() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    let (store, values) = open(dir.path());
    // Two keys of each of five buckets, and a key no bucket holds yet that
    // falls in a sixth.
    let mut keys: Vec<KeyPath> = mins[1..6]
        .iter()
        .flat_map(|min| model.range(*min..).take(2).map(|(k, _)| *k))
        .collect();
    let mut absent = mins[7];
    absent[31] ^= 1;
    assert!(!model.contains_key(&absent) && absent < mins[8]);
    keys.push(absent);
    keys.sort_unstable();
    let slots: Vec<u32> = {
        let state = values.state.read();
        let mut slots: Vec<u32> = keys
            .iter()
            .map(|k| state.dir.bucket_of(k).unwrap().1.slot)
            .collect();
        slots.dedup();
        slots
    };
    assert_eq!(slots.len(), 6);
    let at = reads(&store);
    values.load_buckets(keys.iter());
    assert_eq!(reads(&store) - at, 6, "each bucket once");
    assert!(slots.iter().all(|s| values.cache.has_bucket(*s)));
    // Counted as prefetched, not as lookups.
    assert_eq!(values.cache_counts(), (0, 0, 6));
    let at = reads(&store);
    values.load_buckets(keys.iter());
    for k in &keys {
        assert_eq!(values.get(k).unwrap(), model.get(k).cloned());
    }
    assert_eq!(reads(&store) - at, 0, "all from RAM");
    // The absent key costs a lookup only where its fingerprint matches one
    // in its bucket.
    let absent_lookups = values.slot_for(&absent).is_some() as u64;
    assert_eq!(
        values.cache_counts(),
        (keys.len() as u64 - 1 + absent_lookups, 0, 6)
    );
}

#[test]
fn a_load_takes_at_most_half_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = bucketed(dir.path());
    let (store, values) = open(dir.path());
    let at = reads(&store);
    values.load_buckets(model.keys());
    assert_eq!(reads(&store) - at, 8, "half of the cache's 16 buckets");
}

/// A prefix whose range begins in one bucket, past every key it holds, and
/// goes on in the next: the query reads only the buckets from the next on.
#[test]
fn a_prefix_query_skips_a_bucket_that_ends_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    for min in &mins[1..6] {
        let before = *model.range(..*min).next_back().unwrap().0;
        // One bit past where the bucket's first key parts from the key before.
        let depth = common_prefix_len(&before, min) + 1;
        let (store, values) = open(dir.path());
        // The buckets from this one on that start under the prefix.
        let under = mins.iter().filter(|m| shares_prefix(m, min, depth)).count();
        let at = reads(&store);
        let got = values.entries_with_prefix(min, depth).unwrap();
        assert_eq!(reads(&store) - at, under as u64, "buckets read");
        let expected: Vec<_> = model
            .range(*min..)
            .take_while(|(k, _)| shares_prefix(k, min, depth))
            .map(|(k, v)| (*k, hash_value(v)))
            .collect();
        assert_eq!(got, expected);
    }
}

/// The largest key a bucket note records is new: a note without it still
/// opens, and prefix queries then never skip its bucket.
#[test]
fn notes_without_the_largest_key_still_open() {
    use super::directory::Directory;
    let (low, high) = ([0x10; 32], [0x80; 32]);
    let summary = Directory::new(7);
    let mut note = Vec::new();
    let (_, meta) = summary.summarize(1, [low].iter());
    Directory::note(&low, &meta, std::iter::empty(), &mut note);
    let old_note = note[..note.len() - 8].to_vec();
    // A prefix whose range lies between the two buckets: in the first's
    // range, past its only key.
    let (at, depth) = ([0x40; 32], 2);
    for (note, skipped) in [(&note, true), (&old_note, false)] {
        let noted = Directory::from_note(1, note).expect("a note as written");
        assert_eq!(noted.min, low);
        let mut dir = Directory::new(7);
        let (_, next) = summary.summarize(2, [high].iter());
        dir.apply(&[], vec![(low, noted.meta), (high, next)]);
        let want = if skipped { vec![] } else { vec![1] };
        assert_eq!(dir.overlapping(&at, depth), want, "skipped: {skipped}");
    }
    let mut torn = old_note;
    torn.push(0);
    assert!(Directory::from_note(1, &torn).is_none(), "a torn field");
}

/// A bucket noted before largest keys were kept learns its own when a commit
/// writes it over in place, as a full rewrite's summary would.
#[test]
fn a_bucket_written_over_learns_its_largest_key() {
    let dir = tempfile::tempdir().unwrap();
    let (store, values) = open(dir.path());
    commit(
        &store,
        &values,
        (0..5_000).map(|i| (key(i), Some(vec![i as u8]))).collect(),
    );
    values.state.write().dir.forget_lasts();
    commit(&store, &values, Changes::from([(key(7), Some(vec![9]))]));
    let state = values.state.read();
    let knows = |k: &KeyPath| state.dir.bucket_of(k).unwrap().1.knows_last();
    assert!(knows(&key(7)));
    let elsewhere = (0..5_000).map(key).filter(|k| !knows(k)).count();
    assert!(
        elsewhere > 4_000,
        "{elsewhere} keys in buckets still unknown"
    );
}

#[test]
fn random_changes_match_a_model_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut values) = open(dir.path());
    let mut model: BTreeMap<KeyPath, Vec<u8>> = BTreeMap::new();
    let mut rng = Rng(99);
    for round in 0..30u64 {
        let mut changes = Changes::new();
        for _ in 0..300 {
            let k = key(rng.next() % 3000);
            let value = match rng.next() % 10 {
                0..=2 => None,
                3 => Some(vec![round as u8; (rng.next() % 20_000) as usize]),
                4 => Some(vec![]),
                _ => Some(vec![
                    round as u8;
                    (rng.next() % (INLINE_MAX as u64 + 1)) as usize
                ]),
            };
            changes.insert(k, value);
        }
        for (k, v) in &changes {
            match v {
                Some(v) => model.insert(*k, v.clone()),
                None => model.remove(k),
            };
        }
        commit(&store, &values, changes);
        if round % 10 == 9 {
            drop(values);
            drop(store);
            (store, values) = open(dir.path());
        }
        assert_eq!(values.len(), model.len());
        for i in (0..3000).step_by(7) {
            assert_eq!(
                values.get(&key(i)).unwrap(),
                model.get(&key(i)).cloned(),
                "round {round} key {i}"
            );
        }
    }
}

#[test]
fn value_sizes_from_empty_to_16_mib() {
    let dir = tempfile::tempdir().unwrap();
    let (store, values) = open(dir.path());
    let sizes = [
        0,
        1,
        INLINE_MAX,
        INLINE_MAX + 1,
        BLOCK_SIZE,
        BLOCK_SIZE + 1,
        1 << 20,
        16 << 20,
    ];
    let value = |size: usize, salt: u8| (0..size).map(|i| (i as u8) ^ salt).collect::<Vec<u8>>();
    commit(
        &store,
        &values,
        sizes
            .iter()
            .map(|&s| (key(s as u64), Some(value(s, 1))))
            .collect(),
    );
    drop(values);
    drop(store);
    let (store, values) = open(dir.path());
    for &s in &sizes {
        assert_eq!(
            values.get(&key(s as u64)).unwrap(),
            Some(value(s, 1)),
            "size {s}"
        );
    }
    // Shrinking the large values frees their space for the next large ones.
    let overflow_len = store.meta().lengths[Target::Overflow as usize];
    commit(
        &store,
        &values,
        sizes
            .iter()
            .map(|&s| (key(s as u64), Some(vec![7])))
            .collect(),
    );
    commit(
        &store,
        &values,
        sizes
            .iter()
            .map(|&s| (key(1000 + s as u64), Some(value(s, 2))))
            .collect(),
    );
    assert_eq!(
        store.meta().lengths[Target::Overflow as usize],
        overflow_len
    );
    for &s in &sizes {
        assert_eq!(
            values.get(&key(1000 + s as u64)).unwrap(),
            Some(value(s, 2))
        );
        assert_eq!(values.get(&key(s as u64)).unwrap(), Some(vec![7]));
    }
}

#[test]
fn grows_to_a_million_entries_then_shrinks_after_mass_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let (store, values) = open(dir.path());
    let n: u64 = 1 << 20;
    let batches = 8;
    for b in 0..batches {
        let changes = (b * n / batches..(b + 1) * n / batches)
            .map(|i| (key(i), Some(i.to_be_bytes().to_vec())));
        commit(&store, &values, changes.collect());
    }
    assert_eq!(values.len(), n as usize);
    let used = store.used_slots(Target::Buckets).len() as u64 * BLOCK_SIZE as u64;
    let disk_per_entry = used as f64 / n as f64;
    // Copy-on-write: a commit that rewrites every bucket needs room for both
    // versions until it is durable, so the file may reach twice what is
    // used, and then keeps its spare share free beside them.
    let file = store.meta().lengths[Target::Buckets as usize] * BLOCK_SIZE as u64;
    let placement = store.placement();
    let spare = u64::from(placement.spare_percent);
    let region = u64::from(placement.region_slots) * BLOCK_SIZE as u64;
    assert!(
        file <= 2 * used * 100 / (100 - spare) + region + 64 * BLOCK_SIZE as u64,
        "file {file}, used {used}"
    );
    let ram_per_entry = values.ram_bytes() as f64 / n as f64;
    eprintln!("2^20 entries: {} buckets, {disk_per_entry:.1} bytes in use and {:.1} bytes of file on disk, {ram_per_entry:.2} bytes of RAM per entry", values.buckets(), file as f64 / n as f64);
    // The target is 64 (issue 3); growth by eight large batches reaches ~71, so
    // this guards against regressions only. docs/benchmarks.md has the figures.
    assert!(
        disk_per_entry <= 75.0,
        "{disk_per_entry} bytes per entry on disk"
    );
    assert!(
        ram_per_entry <= 4.0,
        "{ram_per_entry} bytes of RAM per entry"
    );

    let mut rng = Rng(5);
    let before = reads(&store);
    for _ in 0..2000 {
        let i = rng.next() % n;
        assert_eq!(values.get(&key(i)).unwrap(), Some(i.to_be_bytes().to_vec()));
        assert_eq!(values.get(&key(n + i)).unwrap(), None);
    }
    let per_read = (reads(&store) - before) as f64 / 2000.0;
    assert!(
        per_read <= 1.01,
        "{per_read} reads per present + absent pair"
    );

    // Delete 15 of every 16 keys: buckets empty out and are freed, and new keys
    // fill the freed slots before the file grows.
    let doomed: Changes = (0..n)
        .filter(|i| i % 16 != 0)
        .map(|i| (key(i), None))
        .collect();
    commit(&store, &values, doomed);
    assert_eq!(values.len(), (n / 16) as usize);
    let len_after_delete = store.meta().lengths[Target::Buckets as usize];
    assert!(
        values.buckets() < len_after_delete as usize / 2,
        "{} buckets in use",
        values.buckets()
    );
    for i in (0..n).step_by(997) {
        let expected = (i % 16 == 0).then(|| i.to_be_bytes().to_vec());
        assert_eq!(values.get(&key(i)).unwrap(), expected);
    }
    commit(
        &store,
        &values,
        (n..n + n / 4).map(|i| (key(i), Some(vec![1]))).collect(),
    );
    assert_eq!(
        store.meta().lengths[Target::Buckets as usize],
        len_after_delete
    );
}

#[test]
fn clustered_keys_keep_reads_at_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::small()).unwrap());
    // No bucket cache: the test counts what a lookup costs on disk.
    let values = ValueStore::open(&store, 0).unwrap();
    let mut rng = Rng(77);
    let mut keys = Vec::new();
    for shared_bits in [32usize, 200] {
        let base = key(shared_bits as u64 + 1_000_000);
        for _ in 0..4000 {
            keys.push(splice(&base, &key(rng.next()), shared_bits));
        }
    }
    keys.extend((0..20_000).map(key));
    commit(
        &store,
        &values,
        keys.iter().map(|k| (*k, Some(k[..8].to_vec()))).collect(),
    );
    let before = reads(&store);
    for k in keys.iter().step_by(7) {
        assert_eq!(values.get(k).unwrap(), Some(k[..8].to_vec()));
    }
    let gets = keys.iter().step_by(7).count() as u64;
    assert_eq!(
        reads(&store) - before,
        gets,
        "a present key must cost exactly one read"
    );
    // Keys inside the clusters that are absent cost at most one read each, almost always none.
    let before = reads(&store);
    for k in keys.iter().step_by(7) {
        let mut absent = *k;
        absent[31] ^= 0x55;
        assert_eq!(values.get(&absent).unwrap(), None);
    }
    assert!(reads(&store) - before <= gets / 100 + 1);
}

#[test]
fn prefix_queries_read_one_bucket_when_deep_enough() {
    let dir = tempfile::tempdir().unwrap();
    let (store, values) = open(dir.path());
    let model: BTreeMap<KeyPath, Vec<u8>> = (0..50_000).map(|i| (key(i), vec![i as u8])).collect();
    commit(
        &store,
        &values,
        model.iter().map(|(k, v)| (*k, Some(v.clone()))).collect(),
    );
    let mut rng = Rng(3);
    let mut single_reads = 0;
    for _ in 0..500 {
        let probe = key(rng.next() % 60_000);
        let depth = 14 + (rng.next() % 20) as usize;
        let before = reads(&store);
        let got = values.entries_with_prefix(&probe, depth).unwrap();
        single_reads += (reads(&store) - before == 1) as u32;
        let expected: Vec<_> = model
            .iter()
            .filter(|(k, _)| shares_prefix(k, &probe, depth))
            .map(|(k, v)| (*k, hash_value(v)))
            .collect();
        assert_eq!(got, expected, "prefix of {depth} bits");
    }
    // ~770 buckets: a prefix of 14+ bits spans a bucket boundary only rarely.
    assert!(
        single_reads >= 450,
        "{single_reads} of 500 prefix queries read one bucket"
    );
}

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
