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

    /// Hits and misses so far.
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

/// Entries up to a budget of their weights; thread-safe.
pub(crate) struct ClockCache<K, V> {
    inner: Mutex<Clock<K, V>>,
}

struct Clock<K, V> {
    /// The most the entries' weights may add up to.
    budget: usize,
    used: usize,
    weigh: fn(&V) -> usize,
    slots: Vec<(K, V, bool)>,
    where_is: HashMap<K, usize>,
    hand: usize,
}

impl<K: Hash + Eq + Copy, V: Clone> ClockCache<K, V> {
    /// A cache of up to `capacity` entries, each of weight 1.
    pub(crate) fn new(capacity: usize) -> ClockCache<K, V> {
        ClockCache::weighed(capacity, |_| 1)
    }

    /// A cache whose entries' weights (`weigh`) add up to at most `budget`.
    pub(crate) fn weighed(budget: usize, weigh: fn(&V) -> usize) -> ClockCache<K, V> {
        ClockCache {
            inner: Mutex::new(Clock {
                budget,
                used: 0,
                weigh,
                slots: Vec::new(),
                where_is: HashMap::new(),
                hand: 0,
            }),
        }
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
        let mut clock = self.inner.lock();
        let weight = (clock.weigh)(&value);
        // A new value for a cached key starts as read: the key is in use.
        let replaced = match clock.where_is.get(&key) {
            Some(&i) => {
                clock.take(i);
                true
            }
            None => false,
        };
        if weight > clock.budget {
            return;
        }
        while clock.used + weight > clock.budget {
            let victim = clock.advance();
            clock.take(victim);
        }
        clock.used += weight;
        let i = clock.slots.len();
        clock.slots.push((key, value, replaced));
        clock.where_is.insert(key, i);
    }

    pub(crate) fn remove(&self, key: &K) {
        let mut clock = self.inner.lock();
        if let Some(&i) = clock.where_is.get(key) {
            clock.take(i);
        }
    }
}

impl<K: Hash + Eq + Copy, V> Clock<K, V> {
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

    /// Drops the entry in slot `i`; the last slot's entry moves there.
    fn take(&mut self, i: usize) {
        let (key, value, _) = self.slots.swap_remove(i);
        self.where_is.remove(&key);
        self.used -= (self.weigh)(&value);
        if let Some(moved) = self.slots.get(i) {
            self.where_is.insert(moved.0, i);
        }
        if self.hand >= self.slots.len() {
            self.hand = 0;
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
                    cache.remove(&key);
                    latest.remove(&key);
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
            assert_eq!(clock.used, clock.slots.len());
        }
    }

    /// Weighed: the weights of what it holds never pass the budget, an
    /// entry heavier than the budget is not kept, and a heavier value for a
    /// key evicts others.
    #[test]
    fn weighed_entries_stay_within_the_budget() {
        let cache: ClockCache<u32, Vec<u8>> = ClockCache::weighed(100, Vec::len);
        let mut rng = crate::test_support::Rng(3);
        for step in 0..20_000u32 {
            let x = rng.next();
            let key = (x % 40) as u32;
            match x >> 62 {
                0 => cache.remove(&key),
                1 => {
                    let _ = cache.get(&key);
                }
                _ => {
                    let len = (x >> 8) as usize % 60;
                    cache.insert(key, vec![step as u8; len]);
                    assert_eq!(cache.get(&key).map(|v| v.len()), Some(len));
                }
            }
            let clock = cache.inner.lock();
            let held: usize = clock.slots.iter().map(|s| s.1.len()).sum();
            assert!(held == clock.used && held <= 100, "step {step}");
            assert_eq!(clock.where_is.len(), clock.slots.len());
        }
        cache.insert(1, vec![0; 101]);
        assert!(cache.get(&1).is_none_or(|v| v.len() != 101));
    }
}
