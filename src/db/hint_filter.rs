//! A session's memory of the keys it hinted: a table of fixed size, so a
//! session that hints millions of distinct keys holds no more RAM for it
//! than one that hints a few thousand.

use crate::trie::KeyPath;

/// The most slots a filter takes (8 MiB).
const MAX_SLOTS: usize = 1 << 20;
/// The fewest, so a small hint bound still filters a block's repeats.
const MIN_SLOTS: usize = 1 << 10;

/// Fingerprints of the keys hinted lately, one slot each, a key's slot chosen
/// by its hash: a key whose slot a later one took is forgotten, and sent
/// again if hinted again, which only costs the fetcher a cache check.
pub(super) struct HintFilter {
    /// Empty until the first hint: most sessions never hint.
    slots: Vec<u64>,
    len: usize,
}

impl HintFilter {
    /// A filter for a session whose hints may queue `hints` at once: twice
    /// as many slots, within the bounds above.
    pub(super) fn new(hints: usize) -> HintFilter {
        let len = hints
            .saturating_mul(2)
            .clamp(MIN_SLOTS, MAX_SLOTS)
            .next_power_of_two();
        HintFilter {
            slots: Vec::new(),
            len,
        }
    }

    /// The slot of `key`, and its fingerprint (never 0, the empty slot's).
    fn place(&self, key: &KeyPath) -> (usize, u64) {
        let hash = twox_hash::XxHash3_64::oneshot(key);
        (hash as usize & (self.len - 1), hash | 1)
    }

    /// Notes `key` as hinted; false if it was noted already.
    pub(super) fn insert(&mut self, key: &KeyPath) -> bool {
        if self.slots.is_empty() {
            self.slots = vec![0; self.len];
        }
        let (slot, print) = self.place(key);
        if self.slots[slot] == print {
            return false;
        }
        self.slots[slot] = print;
        true
    }

    /// Forgets `key`, if noted: its hint was not sent.
    pub(super) fn remove(&mut self, key: &KeyPath) {
        let (slot, print) = self.place(key);
        if self.slots.get(slot) == Some(&print) {
            self.slots[slot] = 0;
        }
    }

    /// Bytes it holds.
    #[cfg(test)]
    pub(super) fn ram(&self) -> usize {
        self.slots.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> KeyPath {
        *blake3::hash(&i.to_le_bytes()).as_bytes()
    }

    #[test]
    fn a_key_is_sent_once_until_forgotten_and_the_table_never_grows() {
        let mut filter = HintFilter::new(1000);
        assert!(filter.insert(&key(1)));
        assert!(!filter.insert(&key(1)));
        filter.remove(&key(1));
        assert!(filter.insert(&key(1)));
        let ram = filter.ram();
        assert_eq!(ram, 2048 * 8);
        // Far more distinct keys than slots: the RAM stays, and the newest
        // keys are still filtered.
        for i in 0..100_000 {
            filter.insert(&key(i));
        }
        assert_eq!(filter.ram(), ram);
        let repeats = (99_900..100_000)
            .filter(|&i| !filter.insert(&key(i)))
            .count();
        assert!(repeats >= 90, "{repeats} of the last 100 keys filtered");
    }

    #[test]
    fn the_table_is_bounded_whatever_the_hint_bound() {
        assert_eq!(HintFilter::new(0).len, MIN_SLOTS);
        assert_eq!(HintFilter::new(usize::MAX).len, MAX_SLOTS);
        assert_eq!(HintFilter::new(1 << 16).len, 1 << 17);
    }
}
