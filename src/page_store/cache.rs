//! Pages kept in RAM: the top three levels always, others up to a budget,
//! evicted by CLOCK (a page read since the hand last passed gets another round).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::clock::ClockCache;

use crate::trie::page::Page;
use crate::trie::page_id::PageId;

/// Page levels always in RAM: the root page, its 64 children and their 4096.
pub(super) const RESIDENT_LEVELS: usize = 3;

pub(super) struct PageCache {
    resident: RwLock<HashMap<PageId, Arc<Page>>>,
    clock: ClockCache<PageId, Arc<Page>>,
}

impl PageCache {
    /// A cache holding up to `capacity` pages below the resident levels.
    pub(super) fn new(capacity: usize) -> PageCache {
        PageCache {
            resident: RwLock::new(HashMap::new()),
            clock: ClockCache::new(capacity),
        }
    }

    pub(super) fn get(&self, id: &PageId) -> Option<Arc<Page>> {
        if id.level() < RESIDENT_LEVELS {
            return self.resident.read().get(id).cloned();
        }
        self.clock.get(id)
    }

    /// Page `id`, without counting it as a use: for a commit that writes it
    /// again where it lies ([`super::PageStore::plan`]).
    pub(super) fn peek(&self, id: &PageId) -> Option<Arc<Page>> {
        if id.level() < RESIDENT_LEVELS {
            return self.resident.read().get(id).cloned();
        }
        self.clock.peek(id)
    }

    pub(super) fn contains(&self, id: &PageId) -> bool {
        if id.level() < RESIDENT_LEVELS {
            return self.resident.read().contains_key(id);
        }
        self.clock.contains(id)
    }

    /// Caches `page` as the current version of `id`.
    pub(super) fn insert(&self, id: PageId, page: Arc<Page>) {
        if id.level() < RESIDENT_LEVELS {
            // The page replaced is dropped after the lock, as in the CLOCK.
            let _replaced = self.resident.write().insert(id, page);
        } else {
            self.clock.insert(id, page);
        }
    }

    /// Drops `id` unless it is resident; says whether it was in RAM.
    pub(super) fn release(&self, id: &PageId) -> bool {
        if id.level() < RESIDENT_LEVELS {
            return self.resident.read().contains_key(id);
        }
        self.take(id).is_some()
    }

    /// Takes `id` out unless it is resident.
    pub(super) fn take(&self, id: &PageId) -> Option<Arc<Page>> {
        if id.level() < RESIDENT_LEVELS {
            return None;
        }
        self.clock.remove(id)
    }

    pub(super) fn remove(&self, id: &PageId) {
        if id.level() < RESIDENT_LEVELS {
            let _removed = self.resident.write().remove(id);
        } else {
            self.clock.remove(id);
        }
    }
}
