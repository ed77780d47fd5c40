//! `cargo bench --bench commit`: one block of 50,000 random account updates
//! (buffered writes, then `commit_and_prove`) on a database of 2^20 accounts,
//! with warm caches and with cold ones.
//!
//! Warm: the database stays open between blocks, so pages and buckets come from
//! its caches. Cold: before each block the database is closed, the OS page cache
//! dropped (when permitted; root only) and the database reopened, so every page
//! and bucket the block needs is read from disk; the writes' prefetches start
//! those reads, which is why the timed block includes the writes.
//!
//! The database is built once per run in a directory under `target/`.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use pagetrie::{Db, Options};

const ACCOUNTS: u64 = 1 << 20;
const UPDATES: u64 = 50_000;

fn key(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn build(options: &Options) -> Db {
    let db = Db::open(options.clone()).expect("open the bench database");
    let start = Instant::now();
    for block in 0..16 {
        let session = db.begin_session();
        for i in block * ACCOUNTS / 16..(block + 1) * ACCOUNTS / 16 {
            session.write(key(i), Some(1000u64.to_le_bytes().to_vec()));
        }
        session.commit().expect("commit while building");
    }
    eprintln!("built {ACCOUNTS} accounts in {:.1?}", start.elapsed());
    db
}

/// One block: 50,000 updates of random accounts, committed with a witness.
fn block(db: &Db, rng: &mut Rng) -> Duration {
    let start = Instant::now();
    let session = db.begin_session();
    for _ in 0..UPDATES {
        let r = rng.next();
        session.write(key(r % ACCOUNTS), Some(r.to_le_bytes().to_vec()));
    }
    let out = session.commit_and_prove().expect("commit_and_prove");
    let elapsed = start.elapsed();
    std::hint::black_box(out.witness);
    elapsed
}

fn drop_os_cache() -> bool {
    std::process::Command::new("sync").status().is_ok()
        && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::Builder::new()
        .prefix("pagetrie-bench-commit-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("bench directory");
    let options = Options::new(dir.path());
    let mut db = Some(build(&options));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    let mut group = c.benchmark_group("commit");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(UPDATES));

    group.bench_function("warm/50k_updates_2^20_accounts", |b| {
        b.iter_custom(|iters| {
            let db = db.as_ref().expect("database open");
            (0..iters).map(|_| block(db, &mut rng)).sum()
        })
    });

    let dropped = drop_os_cache();
    if !dropped {
        eprintln!("warning: cannot drop the OS page cache (needs root); cold runs reopen only");
    }
    group.bench_function("cold/50k_updates_2^20_accounts", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                drop(db.take());
                drop_os_cache();
                let reopened = Db::open(options.clone()).expect("reopen");
                total += block(&reopened, &mut rng);
                db = Some(reopened);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
