//! `cargo bench --bench trie`: the root of 2^20 random sorted entries, single
//! threaded, against the cost of the blake3 calls alone.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pagetrie::trie::{bit, compute_root, hash_value, KeyPath, ValueHash};

const ENTRIES: usize = 1 << 20;

fn sorted_entries() -> Vec<(KeyPath, ValueHash)> {
    let mut entries: Vec<_> = (0..ENTRIES as u64)
        .map(|i| {
            (
                hash_value(&i.to_be_bytes()),
                hash_value(&(i + 1000).to_le_bytes()),
            )
        })
        .collect();
    entries.sort_unstable();
    entries
}

/// Internal nodes of the canonical trie over `keys` (sorted): counted, not hashed.
fn internal_nodes(keys: &[(KeyPath, ValueHash)], depth: usize) -> u64 {
    if keys.len() <= 1 {
        return 0;
    }
    // Distinct keys part above depth 256.
    let depth_u8 = u8::try_from(depth).expect("distinct keys");
    let split = keys.partition_point(|(k, _)| !bit(k, depth_u8));
    1 + internal_nodes(&keys[..split], depth + 1) + internal_nodes(&keys[split..], depth + 1)
}

fn bench(c: &mut Criterion) {
    let entries = sorted_entries();
    let internal = internal_nodes(&entries, 0);
    let hashes = ENTRIES as u64 + internal;
    eprintln!("{ENTRIES} leaves + {internal} internal nodes = {hashes} blake3 calls of 64 bytes");

    let mut group = c.benchmark_group("trie");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(hashes));
    // An owned Vec is collected in place (no copy); the clone is untimed setup.
    group.bench_function("compute_root_2^20_sorted_vec", |b| {
        b.iter_batched(
            || entries.clone(),
            |owned| compute_root(owned).unwrap(),
            BatchSize::LargeInput,
        )
    });
    // A borrowing iterator makes compute_root copy all 64 MiB first.
    group.bench_function("compute_root_2^20_sorted_iter", |b| {
        b.iter(|| compute_root(black_box(&entries).iter().copied()).unwrap())
    });
    group.bench_function("blake3_alone_same_calls", |b| {
        b.iter(|| {
            let mut buf = [0u8; 64];
            for i in 0..hashes {
                buf[..8].copy_from_slice(&i.to_le_bytes());
                black_box(blake3::hash(black_box(&buf)));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
