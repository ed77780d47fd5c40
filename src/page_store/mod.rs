//! The page store (DESIGN.md section 4): trie pages by page id in the `pages`
//! file, which grows by appending and reuses the slots of deleted pages.
//!
//! RAM holds a slot index of a few bytes per page, so a lookup costs at most one
//! read and a page that is not stored costs none; the top three page levels stay
//! in RAM, and a bounded cache holds more. Changes are planned against the
//! current state, committed by the caller through [`crate::store::Store`], and
//! published here only once durable.
//!
//! Owns slots, the index and the cache; knows pages only as blocks that name
//! themselves. May not decide what a page contains: that is the commit pipeline's.

mod cache;
mod index;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use parking_lot::RwLock;

use cache::PageCache;
use index::SlotIndex;

use crate::block::Block;
use crate::store::{free_mark, is_free_mark, BlockWrite, Store, Target};
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::Error;

/// Blocks read per batch when scanning the file at open.
const SCAN_BATCH: u64 = 1024;

/// Changes to pages, to be committed together.
pub(crate) struct PagePlan {
    /// The blocks to commit.
    pub(crate) writes: Vec<BlockWrite>,
    /// The pages file's length in blocks afterwards.
    pub(crate) length: u64,
    stored: Vec<(PageId, u32, Arc<Page>, bool)>,
    freed: Vec<(PageId, u32)>,
    /// Free slots after the plan's allocations (before its frees).
    free: Vec<u32>,
}

struct Slots {
    index: SlotIndex,
    free: Vec<u32>,
    length: u64,
}

/// The trie's pages on disk, with their index and cache.
///
/// One writer: plan a commit, commit it, publish it (or drop the plan after a
/// failed commit, which poisons the store) before planning the next.
pub(crate) struct PageStore {
    slots: RwLock<Slots>,
    cache: PageCache,
}

impl PageStore {
    /// Scans the pages file of `store` and indexes every page in it. Each slot must
    /// hold a valid page or a free mark; anything else is corruption.
    pub(crate) fn open(store: &Store, cache_pages: usize, seed: u64) -> Result<PageStore, Error> {
        let length = store.meta().lengths[Target::Pages as usize];
        let mut slots = Slots {
            index: SlotIndex::new(seed),
            free: Vec::new(),
            length,
        };
        let cache = PageCache::new(cache_pages);
        let mut seen = std::collections::HashSet::new();
        for start in (0..length).step_by(SCAN_BATCH as usize) {
            let end = (start + SCAN_BATCH).min(length);
            let blocks = store.read_blocks(Target::Pages, start..end)?;
            for (slot, block) in (start..end).zip(blocks) {
                if is_free_mark(&block) {
                    slots.free.push(slot as u32);
                    continue;
                }
                let page = Page::from_block(block);
                let id = page.id()?;
                page.check(&id)?;
                if !seen.insert(id) {
                    return Err(Error::Corrupt("page stored twice"));
                }
                slots.index.insert(&id, slot as u32);
                cache.insert(id, Arc::new(page));
            }
        }
        Ok(PageStore {
            slots: RwLock::new(slots),
            cache,
        })
    }

    /// Pages stored.
    pub(crate) fn len(&self) -> usize {
        self.slots.read().index.len()
    }

    /// Bytes of RAM the slot index takes.
    pub(crate) fn index_bytes(&self) -> usize {
        self.slots.read().index.bytes()
    }

    /// The committed page `id`, or `None` if it is not stored.
    pub(crate) fn get(&self, store: &Store, id: &PageId) -> Result<Option<Arc<Page>>, Error> {
        if let Some(page) = self.cache.get(id) {
            return Ok(Some(page));
        }
        let candidates: Vec<u32> = self.slots.read().index.candidates(id).collect();
        for slot in candidates {
            let page = Page::from_block(store.read(Target::Pages, slot as u64)?);
            if page.id()? != *id {
                continue; // a fingerprint collision: another page's slot
            }
            page.check(id)?;
            let page = Arc::new(page);
            self.cache.insert(*id, page.clone());
            return Ok(Some(page));
        }
        Ok(None)
    }

    /// Plans commit `seqno`'s page changes: `Some(page)` stores or replaces a page,
    /// `None` deletes one. Nothing changes until [`PageStore::publish`].
    pub(crate) fn plan(
        &self,
        store: &Store,
        changes: Vec<(PageId, Option<Page>)>,
        seqno: u64,
    ) -> Result<PagePlan, Error> {
        let slots = self.slots.read();
        let mut free = slots.free.clone();
        let mut length = slots.length;
        let mut plan = PagePlan {
            writes: Vec::new(),
            length,
            stored: Vec::new(),
            freed: Vec::new(),
            free: Vec::new(),
        };
        for (id, change) in changes {
            let existing = self.slot_of(store, &slots, &id)?;
            match (change, existing) {
                (Some(mut page), existing) => {
                    let slot = match existing {
                        Some(slot) => slot,
                        None => free.pop().unwrap_or_else(|| {
                            length += 1;
                            (length - 1) as u32
                        }),
                    };
                    page.seal(seqno);
                    let page = Arc::new(page);
                    plan.writes.push(BlockWrite {
                        target: Target::Pages,
                        index: slot as u64,
                        block: Box::new(Block(*page.as_bytes())),
                    });
                    plan.stored.push((id, slot, page, existing.is_none()));
                }
                (None, Some(slot)) => {
                    plan.writes.push(BlockWrite {
                        target: Target::Pages,
                        index: slot as u64,
                        block: free_mark(seqno),
                    });
                    plan.freed.push((id, slot));
                }
                (None, None) => {}
            }
        }
        plan.length = length;
        plan.free = free;
        Ok(plan)
    }

    /// Makes a committed plan visible.
    pub(crate) fn publish(&self, plan: PagePlan) {
        let mut slots = self.slots.write();
        slots.free = plan.free;
        for (id, slot, page, is_new) in plan.stored {
            if is_new {
                slots.index.insert(&id, slot);
            }
            self.cache.insert(id, page);
        }
        for (id, slot) in plan.freed {
            slots.index.remove(&id, slot);
            slots.free.push(slot);
            self.cache.remove(&id);
        }
        slots.length = plan.length;
    }

    /// The slot holding `id`, reading candidates to rule out fingerprint collisions.
    fn slot_of(&self, store: &Store, slots: &Slots, id: &PageId) -> Result<Option<u32>, Error> {
        let candidates: Vec<u32> = slots.index.candidates(id).collect();
        if candidates.len() == 1 && self.cache.contains(id) {
            return Ok(candidates.first().copied());
        }
        for slot in candidates {
            let block = store.read(Target::Pages, slot as u64)?;
            if Page::from_block(block).id()? == *id {
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }
}
