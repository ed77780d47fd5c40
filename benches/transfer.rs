//! `cargo bench --bench transfer`: the transfer workload (docs/design.md section 9),
//! one criterion sample per workload of 25,000 transfers with `commit_and_prove`.
//!
//! `PAGETRIE_BENCH_ACCOUNTS_LOG2` sets the size (default 20) and
//! `PAGETRIE_BENCH_DIR` the database directory (default
//! `target/tmp/transfer-2^N`); the accounts are imported on the first run and the
//! database reused by later ones, so 2^27 is imported once.
//! `PAGETRIE_BENCH_THREADS` and `PAGETRIE_BENCH_LOOKAHEAD` set the execution
//! threads (default 1) and the warm-up lookahead (default 0).

#[path = "../examples/transfer/workload.rs"]
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use pagetrie::Options;
use workload::{Config, Opened};

fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v} is not a number: {e}")),
        Err(_) => default,
    }
}

fn bench(c: &mut Criterion) {
    let log2 = env_or("PAGETRIE_BENCH_ACCOUNTS_LOG2", 20) as u32;
    let dir = std::env::var_os("PAGETRIE_BENCH_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("transfer-2^{log2}")),
        PathBuf::from,
    );
    let config = Config {
        transfers: 25_000,
        fresh_percent: 25,
        threads: env_or("PAGETRIE_BENCH_THREADS", 1) as usize,
        lookahead: env_or("PAGETRIE_BENCH_LOOKAHEAD", 0) as usize,
    };
    let (db, mut accounts, opened) =
        workload::open_or_import(&dir, log2, |p| Options::new(p), |_| {})
            .expect("open or import the accounts");
    match opened {
        Opened::Imported(t) => eprintln!(
            "imported 2^{log2} accounts into {} in {t:.1?}",
            dir.display()
        ),
        Opened::Reused(_) => eprintln!("reusing 2^{log2} accounts in {}", dir.display()),
    }

    let mut group = c.benchmark_group("transfer");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Elements(config.transfers as u64));
    group.bench_function(format!("2^{log2}_accounts/25k_transfers"), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    workload::run_workload(&db, &mut accounts, &config)
                        .expect("workload")
                        .total
                })
                .sum()
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
