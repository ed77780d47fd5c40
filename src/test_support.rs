//! Helpers shared by the crate's unit tests: those on the crate's internals
//! here, the generic ones from tests/common/support.rs.

use std::path::Path;
use std::sync::Arc;

use crate::io::faults::Faults;
use crate::store::{Batch, Store, StoreConfig, Target};
use crate::trie::KeyPath;
use crate::value_store::ValueStore;

// The integration tests' file itself, so both kinds of test run one copy of
// the generator, keys by index, proptest cases and child-process harness.
#[path = "../tests/common/support.rs"]
mod support;
pub(crate) use support::*;

/// A small store at `dir` whose I/O runs through the returned fault plan.
pub(crate) fn faulty_store(dir: &Path) -> (Arc<Store>, Arc<Faults>) {
    let faults = Arc::new(Faults::none());
    let config = StoreConfig {
        faults: Some(faults.clone()),
        ..StoreConfig::small()
    };
    (Arc::new(Store::open(dir, config).unwrap()), faults)
}

/// Commits `changes` (sorted, each key once) to the value store alone, calling
/// `before_publish` once the commit is durable and before readers can see it.
pub(crate) fn commit_values(
    store: &Store,
    values: &ValueStore,
    changes: &[(KeyPath, Option<Vec<u8>>)],
    before_publish: impl FnOnce(),
) {
    let seqno = store.meta().seqno + 1;
    let mut plan = values.plan(changes, seqno, |_| Ok(())).unwrap();
    let mut batch = Batch::new([0; 32], store.meta().lengths);
    plan.stage(&mut batch);
    let mut written = store.persist(batch).unwrap();
    before_publish();
    values
        .publish(plan, written.take(Target::Buckets))
        .0
        .apply();
}

/// Flips 1 to `max_flips` random bits across `files` of `dir`, `rounds` times,
/// each time from the pristine files, and runs `check` on the damaged directory.
pub(crate) fn flip_random_bits(
    dir: &Path,
    files: &[&str],
    rounds: u64,
    max_flips: u64,
    mut check: impl FnMut(&Path),
) {
    let pristine: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..rounds {
        let mut damaged = pristine.clone();
        for _ in 0..1 + round % max_flips {
            let r = rng.next();
            let f = (r % files.len() as u64) as usize;
            if !damaged[f].is_empty() {
                let at = (r >> 8) as usize % damaged[f].len();
                damaged[f][at] ^= 1 << ((r >> 40) % 8);
            }
        }
        for (name, bytes) in files.iter().zip(&damaged) {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        check(dir);
    }
}
