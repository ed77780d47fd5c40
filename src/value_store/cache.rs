//! The value store's cache: committed buckets by slot, and values too long for
//! a bucket by their hash, in one budget (`Options::value_cache_mib`), so a
//! hot contract's code costs no disk read, as a hot account's bucket does not.
//!
//! A value is cached by its hash, which its bucket entry holds and every read
//! checks: the same bytes wherever they lie, so a publish that moves or frees
//! the value's blocks never makes a cached one wrong.

use std::sync::Arc;

use super::overflow::blocks_for;
use crate::block::BlockBuf;
use crate::clock::ClockCache;
use crate::trie::ValueHash;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Bucket(u32),
    Value(ValueHash),
}

#[derive(Clone)]
enum Entry {
    Bucket(Arc<BlockBuf>),
    Value(Arc<[u8]>),
}

/// Buckets and long values, weighed in blocks.
pub(super) struct ValueCache {
    clock: ClockCache<Key, Entry>,
}

impl ValueCache {
    /// A cache of `blocks` blocks' worth.
    pub(super) fn new(blocks: usize) -> ValueCache {
        ValueCache {
            clock: ClockCache::new(blocks),
        }
    }

    /// Its budget, in blocks.
    pub(super) fn capacity(&self) -> usize {
        self.clock.capacity()
    }

    pub(super) fn bucket(&self, slot: u32) -> Option<Arc<BlockBuf>> {
        match self.clock.get(&Key::Bucket(slot))? {
            Entry::Bucket(block) => Some(block),
            Entry::Value(_) => None,
        }
    }

    pub(super) fn has_bucket(&self, slot: u32) -> bool {
        self.clock.contains(&Key::Bucket(slot))
    }

    /// Caches the committed bucket in `slot`.
    pub(super) fn put_bucket(&self, slot: u32, block: Arc<BlockBuf>) {
        self.clock.insert(Key::Bucket(slot), Entry::Bucket(block));
    }

    /// Forgets the bucket in `slot`: the slot was freed.
    pub(super) fn forget_bucket(&self, slot: u32) {
        let _dropped = self.clock.remove(&Key::Bucket(slot));
    }

    /// The value whose hash is `hash`, if cached.
    pub(super) fn value(&self, hash: &ValueHash) -> Option<Arc<[u8]>> {
        match self.clock.get(&Key::Value(*hash))? {
            Entry::Value(value) => Some(value),
            Entry::Bucket(_) => None,
        }
    }

    /// Caches `value`, whose hash is `hash`, at the weight of the blocks it
    /// takes on disk, unless it would take more than a quarter of the budget:
    /// one huge value does not push every bucket out.
    pub(super) fn put_value(&self, hash: ValueHash, value: &[u8]) {
        let weight = blocks_for(value.len()) as usize;
        if weight > self.capacity() / 4 {
            return;
        }
        let entry = Entry::Value(Arc::from(value));
        self.clock.insert_weighted(Key::Value(hash), entry, weight);
    }
}
