//! A bounded map evicting by CLOCK: an entry read since the hand last passed it
//! gets another round. Shared by the page cache and the bucket cache, with
//! the counts of how often each answered.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Lookups a store's cache answered and lookups that went to the disk, for
/// the database's metrics.
#[derive(Default)]
pub(crate) struct CacheCounts {
    hits: AtomicU64,
    misses: AtomicU64,
    prefetched: AtomicU64,
}

impl CacheCounts {
    /// Counts `hits` answered from RAM and `misses` read from the disk.
    pub(crate) fn count(&self, hits: u64, misses: u64) {
        if hits > 0 {
            self.hits.fetch_add(hits, Ordering::Relaxed);
        }
        if misses > 0 {
            self.misses.fetch_add(misses, Ordering::Relaxed);
        }
    }

    /// Counts `n` blocks read into the cache ahead of the lookups that
    /// will want them (which then hit).
    pub(crate) fn prefetched(&self, n: u64) {
        if n > 0 {
            self.prefetched.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Hits, misses and blocks prefetched so far.
    pub(crate) fn get(&self) -> (u64, u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
            self.prefetched.load(Ordering::Relaxed),
        )
    }
}

/// Entries up to `capacity` in weight (1 each unless inserted with a
/// weight); thread-safe.
pub(crate) struct ClockCache<K, V> {
    inner: Mutex<Clock<K, V>>,
}

/// An entry: its key, value, whether it was read since the hand last passed
/// it, and its weight.
type Slot<K, V> = (K, V, bool, usize);

struct Clock<K, V> {
    capacity: usize,
    /// The weight of the entries held.
    used: usize,
    slots: Vec<Slot<K, V>>,
    where_is: HashMap<K, usize>,
    hand: usize,
}

/// What an insert pushed out, dropped by the caller outside the lock.
enum Dropped<V> {
    None,
    One(V),
    Many(Vec<V>),
}

impl<V> Dropped<V> {
    fn add(&mut self, value: V) {
        *self = match std::mem::replace(self, Dropped::None) {
            Dropped::None => Dropped::One(value),
            Dropped::One(first) => Dropped::Many(vec![first, value]),
            Dropped::Many(mut all) => {
                all.push(value);
                Dropped::Many(all)
            }
        };
    }
}

impl<K: Hash + Eq + Copy, V: Clone> ClockCache<K, V> {
    pub(crate) fn new(capacity: usize) -> ClockCache<K, V> {
        ClockCache {
            inner: Mutex::new(Clock {
                capacity,
                used: 0,
                slots: Vec::new(),
                where_is: HashMap::new(),
                hand: 0,
            }),
        }
    }

    /// Weight it holds at most (entries, where each weighs 1).
    pub(crate) fn capacity(&self) -> usize {
        self.inner.lock().capacity
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let mut clock = self.inner.lock();
        let i = *clock.where_is.get(key)?;
        clock.slots[i].2 = true;
        Some(clock.slots[i].1.clone())
    }

    /// The value of `key`, without counting it as a use.
    pub(crate) fn peek(&self, key: &K) -> Option<V> {
        let clock = self.inner.lock();
        let i = *clock.where_is.get(key)?;
        Some(clock.slots[i].1.clone())
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.inner.lock().where_is.contains_key(key)
    }

    /// Caches `value` as the current value of `key`.
    pub(crate) fn insert(&self, key: K, value: V) {
        self.insert_weighted(key, value, 1);
    }

    /// Caches `value` as the current value of `key`, weighing `weight`
    /// against the capacity; one heavier than the whole capacity is not
    /// cached (and an older value of `key` is dropped).
    pub(crate) fn insert_weighted(&self, key: K, value: V, weight: usize) {
        // The guard goes at the end of the statement, the values it let go of
        // after: the last handle on a page frees its block, which lookups on
        // other threads need not wait for.
        let _dropped = self.inner.lock().put(key, value, weight);
    }

    /// Forgets `key`; returns its value, if it had one, for the caller to
    /// drop outside the lock.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let removed = self.inner.lock().take(key);
        removed
    }
}

impl<K: Hash + Eq + Copy, V> Clock<K, V> {
    /// Caches `value` for `key` at `weight`; returns what it replaced or
    /// evicted.
    fn put(&mut self, key: K, value: V, weight: usize) -> Dropped<V> {
        let mut dropped = Dropped::None;
        let replaced = self.where_is.get(&key).copied();
        // A replaced entry of the same weight keeps its place, read: the
        // common case of a page or bucket cached again.
        if let Some(i) = replaced.filter(|&i| self.slots[i].3 == weight) {
            let old = std::mem::replace(&mut self.slots[i], (key, value, true, weight));
            dropped.add(old.1);
            return dropped;
        }
        if let Some(i) = replaced {
            self.where_is.remove(&key);
            dropped.add(self.remove_at(i));
        }
        if weight > self.capacity {
            return dropped;
        }
        // An entry of weight 1 in a full cache of them takes the victim's
        // place, as it always did; otherwise victims go until it fits.
        while self.used + weight > self.capacity {
            let victim = self.advance();
            if weight == 1 && self.slots[victim].3 == 1 {
                let old = std::mem::replace(&mut self.slots[victim], (key, value, false, 1));
                self.where_is.remove(&old.0);
                self.where_is.insert(key, victim);
                dropped.add(old.1);
                return dropped;
            }
            let victim_key = self.slots[victim].0;
            self.where_is.remove(&victim_key);
            dropped.add(self.remove_at(victim));
        }
        self.where_is.insert(key, self.slots.len());
        self.slots.push((key, value, replaced.is_some(), weight));
        self.used += weight;
        dropped
    }

    /// Forgets `key`; returns its value, if it had one.
    fn take(&mut self, key: &K) -> Option<V> {
        let i = self.where_is.remove(key)?;
        Some(self.remove_at(i))
    }

    /// Takes out the entry at `i`, whose key is already out of `where_is`.
    fn remove_at(&mut self, i: usize) -> V {
        let removed = self.slots.swap_remove(i);
        self.used -= removed.3;
        if let Some(moved) = self.slots.get(i) {
            self.where_is.insert(moved.0, i);
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
        removed.1
    }
}

impl<K, V> Clock<K, V> {
    /// The next slot not read since the hand last passed it.
    fn advance(&mut self) -> usize {
        loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            if !std::mem::replace(&mut self.slots[i].2, false) {
                return i;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_entry_outlives_an_unread_one() {
        let cache = ClockCache::new(3);
        for k in 0..3u32 {
            cache.insert(k, k * 10);
        }
        assert_eq!(cache.get(&0), Some(0));
        cache.insert(3, 30);
        // 0 was read: the hand passes it and takes 1.
        assert!(cache.contains(&0) && !cache.contains(&1));
        assert_eq!(cache.get(&3), Some(30));
        cache.insert(1, 11);
        assert_eq!(cache.get(&1), Some(11));
        assert_eq!((0..4).filter(|k| cache.contains(k)).count(), 3);
    }

    /// Against a model: the cache never holds more than its capacity, and
    /// what it answers is the latest value inserted for the key.
    #[test]
    fn removes_and_overwrites_keep_the_latest_value() {
        let cache = ClockCache::new(70);
        let mut latest = std::collections::HashMap::new();
        let mut rng = crate::test_support::Rng(0x9e37_79b9);
        for step in 0..20_000u64 {
            let x = rng.next();
            let key = (x % 150) as u32;
            match x >> 60 {
                0..=2 => {
                    // A removed key's value, if still cached, is its latest.
                    let removed = cache.remove(&key);
                    let model = latest.remove(&key);
                    assert!(removed.is_none() || removed == model, "step {step}");
                }
                3..=9 => {
                    cache.insert(key, step);
                    latest.insert(key, step);
                }
                _ => {
                    if let Some(v) = cache.get(&key) {
                        assert_eq!(Some(&v), latest.get(&key), "step {step}");
                    }
                }
            }
            let clock = cache.inner.lock();
            assert!(clock.slots.len() <= 70 && clock.where_is.len() == clock.slots.len());
        }
    }

    /// Weighted entries: the weight held never passes the capacity, heavy
    /// entries push out as many light ones as they need, and one heavier
    /// than the capacity is not cached.
    #[test]
    fn weights_are_held_within_the_capacity() {
        let cache = ClockCache::new(10);
        for k in 0..10u32 {
            cache.insert(k, k);
        }
        cache.insert_weighted(100, 100, 6);
        assert_eq!(cache.get(&100), Some(100));
        assert_eq!((0..10).filter(|k| cache.contains(k)).count(), 4);
        cache.insert_weighted(200, 200, 11);
        assert!(!cache.contains(&200));
        // Light entries push the heavy one out when the hand reaches it.
        let mut rng = crate::test_support::Rng(7);
        for step in 0..10_000u32 {
            let x = rng.next();
            let weight = if x.is_multiple_of(7) {
                1 + (x >> 8) as usize % 5
            } else {
                1
            };
            cache.insert_weighted((x >> 32) as u32 % 40, step, weight);
            let clock = cache.inner.lock();
            let used: usize = clock.slots.iter().map(|s| s.3).sum();
            assert!(used == clock.used && used <= 10, "step {step}");
            assert_eq!(clock.where_is.len(), clock.slots.len());
            for (i, slot) in clock.slots.iter().enumerate() {
                assert_eq!(clock.where_is[&slot.0], i);
            }
        }
    }
}
