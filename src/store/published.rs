//! What both stores share about their blocks in RAM: which state readers may
//! see while a commit writes in place, and where a plan puts new blocks.

use std::collections::HashMap;
use std::sync::Arc;

use super::slot_number;
use crate::Error;

/// The published state's guard for readers on other threads.
///
/// A commit overwrites blocks in place between its plan and its publish. The
/// plan shields the committed blocks it will overwrite: readers take those
/// from RAM instead of the disk. A reader notes the generation before its disk
/// read and uses (or caches) the block only if no publish came in between;
/// otherwise it looks again.
pub(crate) struct Published<B> {
    generation: u64,
    shielded: HashMap<u32, Arc<B>>,
}

impl<B> Published<B> {
    pub(crate) fn new() -> Published<B> {
        Published {
            generation: 0,
            shielded: HashMap::new(),
        }
    }

    /// Taken before a read: [`Published::is_current`] checks it after.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether blocks read since `generation` are still the published ones
    /// (where not shielded).
    pub(crate) fn is_current(&self, generation: u64) -> bool {
        self.generation == generation
    }

    /// The committed block of `slot` if a planned commit is overwriting it.
    pub(crate) fn shielded(&self, slot: u32) -> Option<&Arc<B>> {
        self.shielded.get(&slot)
    }

    /// Whether a block read from `slot` since `generation` may be cached.
    pub(crate) fn may_cache(&self, generation: u64, slot: u32) -> bool {
        self.is_current(generation) && !self.shielded.contains_key(&slot)
    }

    /// A plan will overwrite these slots: readers keep the committed blocks.
    pub(crate) fn shield(&mut self, committed: impl IntoIterator<Item = (u32, Arc<B>)>) {
        self.shielded.extend(committed);
    }

    /// The planned commit is published: readers that began before look again.
    pub(crate) fn publish(&mut self) {
        self.generation += 1;
        self.shielded.clear();
    }

    /// The planned commit will not be published: nothing was overwritten.
    pub(crate) fn abandon(&mut self) {
        self.shielded.clear();
    }
}

/// A target file's free slots and length: where a plan puts new blocks.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotSpace {
    free: Vec<u32>,
    length: u64,
}

impl SlotSpace {
    /// A file of `length` blocks with `free` slots.
    pub(crate) fn new(length: u64, free: Vec<u32>) -> SlotSpace {
        SlotSpace { free, length }
    }

    /// A free slot, or one appended to the file.
    pub(crate) fn allocate(&mut self) -> Result<u32, Error> {
        match self.free.pop() {
            Some(slot) => Ok(slot),
            None => {
                let slot = slot_number(self.length)?;
                self.length += 1;
                Ok(slot)
            }
        }
    }

    /// Makes `slots` reusable; a plan calls this only once its commit is
    /// published, so a commit never overwrites what the durable one uses.
    pub(crate) fn release(&mut self, slots: impl IntoIterator<Item = u32>) {
        self.free.extend(slots);
    }

    /// The file's length in blocks.
    pub(crate) fn length(&self) -> u64 {
        self.length
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_from_the_free_list_then_the_end() {
        let mut space = SlotSpace::new(10, vec![3]);
        assert_eq!(space.allocate().unwrap(), 3);
        assert_eq!(space.allocate().unwrap(), 10);
        assert_eq!(space.length(), 11);
        space.release([4]);
        assert_eq!(space.allocate().unwrap(), 4);
    }

    #[test]
    fn a_publish_sends_readers_back_and_drops_the_shield() {
        let mut p = Published::new();
        let seen = p.generation();
        p.shield([(7, Arc::new(1u8))]);
        assert_eq!(p.shielded(7).map(|b| **b), Some(1));
        assert!(!p.may_cache(seen, 7) && p.may_cache(seen, 8));
        p.publish();
        assert!(!p.is_current(seen));
        assert!(p.shielded(7).is_none());
    }
}
