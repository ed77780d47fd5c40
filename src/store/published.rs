//! What both stores share about their blocks in RAM: whether a block read
//! from disk still belongs to the published state, and where a plan puts new
//! blocks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::slot_number;
use crate::Error;

/// Commits whose freed slots stay untouched after the commit that freed them
/// is durable. 0: a slot freed by commit `n` may be written by commit `n + 1`
/// (commits are durable one at a time, so never before `n` is). The history
/// keeps older commits readable by their old values instead (`db::history`),
/// so no block is held back for it.
pub(crate) const RETAINED_COMMITS: u64 = 0;

/// The published state's guard for readers on other threads.
///
/// A commit writes only slots the published state does not use, but once it
/// is published it frees slots that the next commit may overwrite. A reader
/// notes the generation before its disk read and uses (or caches) the block
/// only if no publish came in between; otherwise it looks again.
#[derive(Default)]
pub(crate) struct Published {
    generation: u64,
}

impl Published {
    /// Taken before a read: [`Published::is_current`] checks it after.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether blocks read since `generation` are still the published ones.
    pub(crate) fn is_current(&self, generation: u64) -> bool {
        self.generation == generation
    }

    /// A planned commit is published: readers that began before look again.
    pub(crate) fn publish(&mut self) {
        self.generation += 1;
    }
}

/// A target file's free slots and length: where a plan puts new blocks.
///
/// The lowest free slot goes first, so a commit's writes ascend through the
/// file and fill holes next to each other. A slot a commit frees becomes free
/// only [`RETAINED_COMMITS`] commits after that commit is durable.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotSpace {
    free: BinaryHeap<Reverse<u32>>,
    /// Slots freed by recent commits and not yet reusable, oldest first.
    held: VecDeque<(u64, Vec<u32>)>,
    length: u64,
}

impl SlotSpace {
    /// A file of `length` blocks with `free` slots.
    pub(crate) fn new(length: u64, free: Vec<u32>) -> SlotSpace {
        SlotSpace {
            free: free.into_iter().map(Reverse).collect(),
            held: VecDeque::new(),
            length,
        }
    }

    /// The lowest free slot, or one appended to the file.
    pub(crate) fn allocate(&mut self) -> Result<u32, Error> {
        match self.free.pop() {
            Some(Reverse(slot)) => Ok(slot),
            None => {
                let slot = slot_number(self.length)?;
                self.length += 1;
                Ok(slot)
            }
        }
    }

    /// Records the slots durable commit `seqno` freed; they (and any held
    /// longer than the window) become free once `RETAINED_COMMITS` more
    /// commits are durable.
    pub(crate) fn release(&mut self, seqno: u64, slots: Vec<u32>) {
        self.held.push_back((seqno, slots));
        while let Some((freed_by, _)) = self.held.front() {
            if freed_by + RETAINED_COMMITS > seqno {
                break;
            }
            if let Some((_, slots)) = self.held.pop_front() {
                self.free.extend(slots.into_iter().map(Reverse));
            }
        }
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
    fn the_lowest_free_slot_goes_first_then_the_end() {
        let mut space = SlotSpace::new(10, vec![7, 3, 5]);
        assert_eq!(space.allocate().unwrap(), 3);
        assert_eq!(space.allocate().unwrap(), 5);
        assert_eq!(space.allocate().unwrap(), 7);
        assert_eq!(space.allocate().unwrap(), 10);
        assert_eq!(space.length(), 11);
    }

    #[test]
    fn a_freed_slot_waits_for_its_commit_and_the_window() {
        let mut space = SlotSpace::new(4, Vec::new());
        // A plan is a copy: slots it frees are not free to itself.
        let mut plan = space.clone();
        assert_eq!(plan.allocate().unwrap(), 4);
        space = plan;
        space.release(1, vec![2]);
        let expected = if RETAINED_COMMITS == 0 { 2 } else { 5 };
        assert_eq!(space.allocate().unwrap(), expected);
    }

    #[test]
    fn a_publish_sends_readers_back() {
        let mut p = Published::default();
        let seen = p.generation();
        assert!(p.is_current(seen));
        p.publish();
        assert!(!p.is_current(seen));
    }
}
