//! Random-read throughput of the value store on a large database, by hand:
//!
//! ```text
//! PAGETRIE_BENCH_LOG2=24 PAGETRIE_BENCH_DIR=/path cargo test --release --lib \
//!     value_store::bench -- --ignored --nocapture
//! ```
//!
//! Builds the store once (sorted key ranges, one commit each) in the directory,
//! reuses it on later runs, drops the OS page cache when permitted, then times
//! reads of random present keys one at a time and with 128 in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{bucket, ValueStore};
use crate::block::{Block, BLOCK_SIZE};
use crate::io::{Job, Transfer};
use crate::store::{Store, StoreConfig, Target};
use crate::trie::{hash_value, KeyPath};

fn key(i: u64) -> KeyPath {
    hash_value(&i.to_be_bytes())
}

fn build(store: &Store, values: &ValueStore, n: u64) {
    let start = Instant::now();
    let mut keys: Vec<(KeyPath, u64)> = (0..n).map(|i| (key(i), i)).collect();
    keys.sort_unstable();
    for chunk in keys.chunks(1 << 20) {
        let changes: Vec<_> = chunk
            .iter()
            .map(|(k, i)| (*k, Some(i.to_be_bytes().to_vec())))
            .collect();
        crate::test_support::commit_values(store, values, &changes, || {});
    }
    eprintln!(
        "built {n} entries in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

fn drop_caches() {
    match std::fs::write("/proc/sys/vm/drop_caches", "3") {
        Ok(()) => eprintln!("dropped the OS page cache"),
        Err(e) => eprintln!("page cache not dropped ({e})"),
    }
}

// Ignored because it builds a 2^24-entry store (about 1 GB, minutes) and drops
// the page cache as root: a measurement for docs/benchmarks.md, run by hand.
#[test]
#[ignore = "benchmark: minutes and gigabytes; run by hand (see module doc)"]
fn random_reads() {
    let log2: u32 = std::env::var("PAGETRIE_BENCH_LOG2")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    let n = 1u64 << log2;
    let dir = std::env::var_os("PAGETRIE_BENCH_DIR").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir().unwrap();
    let dir = dir.unwrap_or_else(|| tmp.path().to_path_buf());
    {
        let store = Arc::new(Store::open(&dir, StoreConfig::default()).unwrap());
        let values = ValueStore::open(&store, 0).unwrap();
        if values.len() as u64 != n {
            assert_eq!(values.len(), 0, "{} holds another database", dir.display());
            build(&store, &values, n);
        }
    }
    drop_caches();
    let opened = Instant::now();
    let store = Arc::new(Store::open(&dir, StoreConfig::default()).unwrap());
    let values = ValueStore::open(&store, 0).unwrap();
    let open_s = opened.elapsed().as_secs_f64();
    let bytes = store.meta().lengths[Target::Buckets as usize] * BLOCK_SIZE as u64;
    eprintln!(
        "{n} entries in {} buckets: {:.1} bytes on disk and {:.2} bytes of RAM per entry; open (scan) {open_s:.1} s; engine {}",
        values.buckets(),
        bytes as f64 / n as f64,
        values.ram_bytes() as f64 / n as f64,
        if store.io().is_uring() { "io_uring" } else { "thread pool" },
    );
    drop_caches();

    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_key = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };

    // The same reads without the value store: what the I/O path alone costs.
    let buckets = store.meta().lengths[Target::Buckets as usize];
    let (reads, started) = (20_000, Instant::now());
    for _ in 0..reads {
        drop(store.read(Target::Buckets, next_key() % buckets).unwrap());
    }
    let raw = reads as f64 / started.elapsed().as_secs_f64();
    eprintln!("QD1 raw block reads: {raw:.0} reads/s");

    let mut block = Block::zeroed();
    let file = store.file(Target::Buckets);
    let (reads, started) = (20_000, Instant::now());
    for _ in 0..reads {
        file.read_block(&mut block, (next_key() % buckets) * BLOCK_SIZE as u64)
            .unwrap();
    }
    let reused = reads as f64 / started.elapsed().as_secs_f64();
    eprintln!("QD1 raw block reads into one reused buffer: {reused:.0} reads/s");

    // Queue depth 1: one get after another.
    let (reads, started) = (20_000, Instant::now());
    for _ in 0..reads {
        let i = next_key();
        assert_eq!(values.get(&key(i)).unwrap(), Some(i.to_be_bytes().to_vec()));
    }
    let qd1 = reads as f64 / started.elapsed().as_secs_f64();
    eprintln!("QD1:   {qd1:.0} reads/s");

    // 128 in flight: the directory picks the bucket, the ring reads it, the entry is found.
    let file = store.file(Target::Buckets).clone();
    let (tx, rx) = crossbeam_channel::unbounded();
    let submit = |i: u64| {
        let slot = values.slot_for(&key(i)).expect("present key");
        store.io().submit(Job {
            file: Arc::clone(&file),
            offset: slot as u64 * BLOCK_SIZE as u64,
            transfer: Transfer::read(),
            tag: i,
            reply: tx.clone(),
        });
    };
    for _ in 0..128 {
        submit(next_key());
    }
    let (mut done, started) = (0u64, Instant::now());
    while started.elapsed() < Duration::from_secs(10) {
        let d = rx.recv().unwrap();
        d.result.unwrap();
        assert!(bucket::find(d.transfer.block(), &key(d.tag))
            .unwrap()
            .is_some());
        drop(d.transfer);
        done += 1;
        submit(next_key());
    }
    let qd128 = done as f64 / started.elapsed().as_secs_f64();
    eprintln!("QD128: {qd128:.0} reads/s");
    for _ in 0..128 {
        rx.recv().unwrap();
    }
}
