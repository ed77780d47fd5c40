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

/// Up to `capacity` entries; thread-safe.
pub(crate) struct ClockCache<K, V> {
    inner: Mutex<Clock<K, V>>,
}

struct Clock<K, V> {
    capacity: usize,
    slots: Vec<(K, V, bool)>,
    where_is: HashMap<K, usize>,
    hand: usize,
}

impl<K: Hash + Eq + Copy, V: Clone> ClockCache<K, V> {
    pub(crate) fn new(capacity: usize) -> ClockCache<K, V> {
        ClockCache {
            inner: Mutex::new(Clock {
                capacity,
                slots: Vec::new(),
                where_is: HashMap::new(),
                hand: 0,
            }),
        }
    }

    /// Entries it holds at most.
    pub(crate) fn capacity(&self) -> usize {
        self.inner.lock().capacity
    }

    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let mut clock = self.inner.lock();
        let i = *clock.where_is.get(key)?;
        clock.slots[i].2 = true;
        Some(clock.slots[i].1.clone())
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.inner.lock().where_is.contains_key(key)
    }

    /// Caches `value` as the current value of `key`.
    pub(crate) fn insert(&self, key: K, value: V) {
        // The guard goes at the end of the statement, the value it let go of
        // after: the last handle on a page frees its block, which lookups on
        // other threads need not wait for.
        let _replaced = self.inner.lock().put(key, value);
    }

    /// Forgets `key`; returns its value, if it had one, for the caller to
    /// drop outside the lock.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let removed = self.inner.lock().take(key);
        removed
    }
}

impl<K: Hash + Eq + Copy, V> Clock<K, V> {
    /// Caches `value` for `key`; returns the entry it replaced or evicted.
    fn put(&mut self, key: K, value: V) -> Option<(K, V, bool)> {
        if let Some(&i) = self.where_is.get(&key) {
            return Some(std::mem::replace(&mut self.slots[i], (key, value, true)));
        }
        if self.capacity == 0 {
            return None;
        }
        if self.slots.len() < self.capacity {
            self.where_is.insert(key, self.slots.len());
            self.slots.push((key, value, false));
            return None;
        }
        let victim = self.advance();
        let evicted = std::mem::replace(&mut self.slots[victim], (key, value, false));
        self.where_is.remove(&evicted.0);
        self.where_is.insert(key, victim);
        Some(evicted)
    }

    /// Forgets `key`; returns its value, if it had one.
    fn take(&mut self, key: &K) -> Option<V> {
        let i = self.where_is.remove(key)?;
        let removed = self.slots.swap_remove(i);
        if let Some(moved) = self.slots.get(i) {
            self.where_is.insert(moved.0, i);
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
        Some(removed.1)
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
}
