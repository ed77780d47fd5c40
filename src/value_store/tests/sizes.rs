//! Random changes against a model, value sizes, growth and shrinking, and reads per query.

use super::*;

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
