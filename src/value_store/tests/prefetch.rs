//! Prefetches, the loads of a commit's buckets, and prefix queries that skip buckets.

use super::*;

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
    use crate::value_store::directory::Directory;
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

/// The cleaner's reads of the buckets it moves are neither counted as
/// lookups nor cached: the hit rate stays the readers'.
#[test]
fn the_cleaners_reads_count_as_no_lookup_and_fill_no_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (_, smallest) = bucketed(dir.path());
    let (store, values) = open(dir.path());
    let slots: Vec<u32> = {
        let state = values.state.read();
        smallest
            .iter()
            .take(4)
            .filter_map(|k| state.dir.bucket_of(k).map(|(_, meta)| meta.slot))
            .collect()
    };
    assert_eq!(slots.len(), 4);
    let counts = values.cache_counts();
    let disk = reads(&store);
    let read = values
        .read_buckets(&slots, super::super::Purpose::Move)
        .unwrap();
    assert!(read
        .iter()
        .all(|(block, from_disk)| block.is_ok() && *from_disk));
    assert!(reads(&store) > disk);
    assert_eq!(values.cache_counts(), counts);
    assert!(slots.iter().all(|s| !values.cache.has_bucket(*s)));
    // A reader's lookup of the same buckets is counted, as misses.
    values
        .read_buckets(&slots, super::super::Purpose::Lookup)
        .unwrap();
    let (hits, misses, _) = values.cache_counts();
    assert_eq!((hits, misses), (counts.0, counts.1 + 4));
}

#[test]
fn a_reader_waits_for_a_bucket_on_its_way_instead_of_reading_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    let (store, values) = open(dir.path());
    let keys: Vec<KeyPath> = mins[1..5].to_vec();
    let at = reads(&store);
    let rewrites: Vec<_> = keys.iter().map(|k| (*k, model.get(k).cloned())).collect();
    let load = values.start_load(&rewrites, crate::trie::MAX_DEPTH);
    std::thread::scope(|s| {
        // Each reader asks while the load is marked and not yet read.
        let readers: Vec<_> = keys
            .iter()
            .map(|k| s.spawn(|| values.get(k).unwrap()))
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(readers.iter().all(|r| !r.is_finished()), "they wait");
        load.run();
        for (k, r) in keys.iter().zip(readers) {
            assert_eq!(r.join().unwrap(), model.get(k).cloned());
        }
    });
    assert_eq!(reads(&store) - at, 4, "each bucket read once, by the load");
}

#[test]
fn a_load_that_never_runs_leaves_its_readers_to_read() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    let (store, values) = open(dir.path());
    let at = reads(&store);
    let rewrites: Vec<_> = mins[1..3]
        .iter()
        .map(|k| (*k, model.get(k).cloned()))
        .collect();
    let load = values.start_load(&rewrites, crate::trie::MAX_DEPTH);
    drop(load);
    assert_eq!(values.get(&mins[1]).unwrap(), model.get(&mins[1]).cloned());
    assert_eq!(reads(&store) - at, 1);
}

/// Keys `1..=n` past `min` in its last eight bytes: new keys of its bucket.
fn past(min: &KeyPath, n: u64) -> Vec<KeyPath> {
    let base = u64::from_be_bytes(min[24..].try_into().unwrap());
    (1..=n)
        .map(|i| {
            let mut k = *min;
            k[24..].copy_from_slice(&base.checked_add(i).unwrap().to_be_bytes());
            k
        })
        .collect()
}

#[test]
fn a_load_brings_the_neighbour_a_bucket_it_overflows_takes_in() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    let (store, values) = open(dir.path());
    // The changed bucket cached, as a session's reads leave it; the next not.
    values.get(&mins[2]).unwrap();
    let next = values.state.read().dir.bucket_of(&mins[3]).unwrap().1.slot;
    assert!(!values.cache.has_bucket(next));

    // Rewrites that keep every length: the bucket stays as full.
    let same: Vec<_> = [(mins[2], model.get(&mins[2]).cloned())].into();
    assert!(values
        .start_load(&same, crate::trie::MAX_DEPTH)
        .slots
        .is_empty());

    // A bucket's worth of new keys: the plan takes in the next bucket.
    let new: Vec<_> = past(&mins[2], 120)
        .into_iter()
        .map(|k| (k, Some(vec![7])))
        .collect();
    let seqno = store.meta().seqno + 1;
    let at = reads(&store);
    values.plan(&new, seqno, |_| Ok(())).unwrap();
    assert_eq!(reads(&store) - at, 1, "without the load the plan reads it");
    let load = values.start_load(&new, crate::trie::MAX_DEPTH);
    assert_eq!(load.slots, [next]);
    load.run();
    let at = reads(&store);
    values.plan(&new, seqno, |_| Ok(())).unwrap();
    assert_eq!(reads(&store) - at, 0, "with it, nothing");

    // Neither cached: the load reads the changed bucket, judges it, then
    // reads the next.
    drop((store, values));
    let (store, values) = open(dir.path());
    let at = reads(&store);
    values.start_load(&new, crate::trie::MAX_DEPTH).run();
    assert_eq!(reads(&store) - at, 2);
    assert!(values.cache.has_bucket(next));
    values.plan(&new, seqno, |_| Ok(())).unwrap();
    assert_eq!(reads(&store) - at, 2, "the plan read nothing itself");
}

#[test]
fn a_load_brings_the_buckets_beside_that_a_changed_keys_subtree_spans() {
    let dir = tempfile::tempdir().unwrap();
    let (model, mins) = bucketed(dir.path());
    for min in &mins[1..6] {
        // The last key of the bucket before and the first of this one: at
        // the depth of their common prefix, one subtree holds both.
        let before = *model.range(..*min).next_back().unwrap().0;
        let depth = common_prefix_len(&before, min);
        for (changed, other) in [(before, *min), (*min, before)] {
            let (store, values) = open(dir.path());
            let slot_of = |k: &KeyPath| values.state.read().dir.bucket_of(k).unwrap().1.slot;
            let (home, beside) = (slot_of(&changed), slot_of(&other));
            let change = [(changed, model.get(&changed).cloned())];
            let deeper = values.start_load(&change, crate::trie::MAX_DEPTH);
            assert_eq!(deeper.slots, [home], "no subtree spans two buckets there");
            drop(deeper);
            let load = values.start_load(&change, depth);
            let mut spanned = values
                .state
                .read()
                .dir
                .overlapping(&crate::trie::prefix(&changed, depth), depth);
            assert!(spanned.contains(&home) && spanned.contains(&beside));
            spanned.sort_unstable();
            let mut loaded = load.slots.clone();
            loaded.sort_unstable();
            assert_eq!(loaded, spanned, "each bucket the subtree spans, once");
            load.run();
            let at = reads(&store);
            let found = values
                .entries_with_prefix(&crate::trie::prefix(&changed, depth), depth)
                .unwrap();
            assert!(found.iter().any(|(k, _)| *k == other));
            assert_eq!(reads(&store) - at, 0, "the subtree's buckets were loaded");
        }
    }
}
