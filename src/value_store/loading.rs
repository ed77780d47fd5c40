//! Buckets read ahead of the readers that want them, each usable as soon as
//! it arrives: a commit's trie update and value plan start while the
//! buckets its changes fall in are still being read, and a reader that
//! needs one of those waits for that bucket, not for all of them, nor
//! reads it a second time.
//!
//! Owns the set of buckets in flight and the load that brings them. A
//! bucket is cached as a prefetched one is ([`ValueStore::offer`]), and a
//! read that fails is left for the reader needing the bucket to report.

use std::collections::HashSet;

use parking_lot::{Condvar, Mutex};

use super::{BucketRead, ValueStore};
use crate::store::Target;

/// Buckets marked on their way by [`ValueStore::start_load`], read by
/// [`BucketLoad::run`]. However it ends, each is marked arrived, so no
/// reader waits for a bucket nothing brings.
pub(crate) struct BucketLoad<'a> {
    pub(super) values: &'a ValueStore,
    pub(super) slots: Vec<u32>,
    /// The published state the slots are of.
    pub(super) generation: u64,
}

impl BucketLoad<'_> {
    /// Reads the buckets into the cache, each usable once it arrives;
    /// returns when all have. At most the engine's read window in flight,
    /// so a commit's first writes do not queue behind all of them.
    pub(crate) fn run(self) {
        let values = self.values;
        let generation = self.generation;
        let slots = &self.slots;
        values.store.read_each(
            Target::Buckets,
            slots.iter().map(|&s| u64::from(s)),
            |i, block| {
                let slot = slots[i];
                if let Ok(block) = block {
                    values.offer(BucketRead { slot, generation }, block);
                }
                values.loads.arrived(slot);
            },
        );
    }
}

impl Drop for BucketLoad<'_> {
    fn drop(&mut self) {
        self.values.loads.end(&self.slots);
    }
}

/// The buckets being loaded, by slot.
#[derive(Default)]
pub(super) struct InFlight {
    slots: Mutex<HashSet<u32>>,
    arrived: Condvar,
}

impl InFlight {
    /// Marks `slots` as on their way.
    pub(super) fn start(&self, slots: &[u32]) {
        self.slots.lock().extend(slots.iter().copied());
    }

    /// Marks `slot` arrived (cached, or failed) and wakes its waiters.
    pub(super) fn arrived(&self, slot: u32) {
        if self.slots.lock().remove(&slot) {
            self.arrived.notify_all();
        }
    }

    /// Marks all of `slots` arrived: what a load did not see arrive (the
    /// engine dropped its reads) its readers read for themselves.
    pub(super) fn end(&self, slots: &[u32]) {
        let mut in_flight = self.slots.lock();
        for slot in slots {
            in_flight.remove(slot);
        }
        drop(in_flight);
        self.arrived.notify_all();
    }

    /// Waits until none of `slots` is in flight.
    pub(super) fn wait_for(&self, slots: impl Iterator<Item = u32> + Clone) {
        let mut in_flight = self.slots.lock();
        while !in_flight.is_empty() && slots.clone().any(|s| in_flight.contains(&s)) {
            self.arrived.wait(&mut in_flight);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::InFlight;

    #[test]
    fn a_reader_waits_for_its_bucket_only() {
        let loads = Arc::new(InFlight::default());
        loads.start(&[1, 2]);
        loads.wait_for([3].into_iter());
        let waiter = {
            let loads = loads.clone();
            std::thread::spawn(move || loads.wait_for([1].into_iter()))
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished());
        loads.arrived(2);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "woken by another bucket");
        loads.arrived(1);
        waiter.join().unwrap();
    }

    #[test]
    fn an_ended_load_releases_every_waiter() {
        let loads = Arc::new(InFlight::default());
        loads.start(&[5, 6, 7]);
        let waiters: Vec<_> = [5, 7]
            .into_iter()
            .map(|slot| {
                let loads = loads.clone();
                std::thread::spawn(move || loads.wait_for([slot].into_iter()))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|w| !w.is_finished()));
        loads.end(&[5, 6, 7]);
        for w in waiters {
            w.join().unwrap();
        }
        loads.wait_for([5, 6, 7].into_iter());
    }
}
