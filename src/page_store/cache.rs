//! Pages kept in RAM: the top three levels always, others up to a budget,
//! evicted by CLOCK (a page read since the hand last passed gets another round).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::trie::page::Page;
use crate::trie::page_id::PageId;

/// Page levels always in RAM: the root page, its 64 children and their 4096.
pub(super) const PINNED_LEVELS: usize = 3;

pub(super) struct PageCache {
    pinned: RwLock<HashMap<PageId, Arc<Page>>>,
    clock: Mutex<Clock>,
}

struct Clock {
    capacity: usize,
    slots: Vec<(PageId, Arc<Page>, bool)>,
    where_is: HashMap<PageId, usize>,
    hand: usize,
}

impl PageCache {
    /// A cache holding up to `capacity` pages below the pinned levels.
    pub(super) fn new(capacity: usize) -> PageCache {
        PageCache {
            pinned: RwLock::new(HashMap::new()),
            clock: Mutex::new(Clock {
                capacity,
                slots: Vec::new(),
                where_is: HashMap::new(),
                hand: 0,
            }),
        }
    }

    pub(super) fn get(&self, id: &PageId) -> Option<Arc<Page>> {
        if id.level() < PINNED_LEVELS {
            return self.pinned.read().get(id).cloned();
        }
        let mut clock = self.clock.lock();
        let i = *clock.where_is.get(id)?;
        clock.slots[i].2 = true;
        Some(clock.slots[i].1.clone())
    }

    pub(super) fn contains(&self, id: &PageId) -> bool {
        if id.level() < PINNED_LEVELS {
            return self.pinned.read().contains_key(id);
        }
        self.clock.lock().where_is.contains_key(id)
    }

    /// Caches `page` as the current version of `id`.
    pub(super) fn insert(&self, id: PageId, page: Arc<Page>) {
        if id.level() < PINNED_LEVELS {
            self.pinned.write().insert(id, page);
            return;
        }
        let mut clock = self.clock.lock();
        if let Some(&i) = clock.where_is.get(&id) {
            clock.slots[i] = (id, page, true);
            return;
        }
        if clock.capacity == 0 {
            return;
        }
        if clock.slots.len() < clock.capacity {
            let i = clock.slots.len();
            clock.slots.push((id, page, false));
            clock.where_is.insert(id, i);
            return;
        }
        let victim = clock.advance();
        let old = std::mem::replace(&mut clock.slots[victim], (id, page, false)).0;
        clock.where_is.remove(&old);
        clock.where_is.insert(id, victim);
    }

    pub(super) fn remove(&self, id: &PageId) {
        if id.level() < PINNED_LEVELS {
            self.pinned.write().remove(id);
            return;
        }
        let mut clock = self.clock.lock();
        if let Some(i) = clock.where_is.remove(id) {
            let last = clock.slots.len() - 1;
            clock.slots.swap(i, last);
            clock.slots.pop();
            if i < clock.slots.len() {
                let moved = clock.slots[i].0;
                clock.where_is.insert(moved, i);
            }
            if clock.hand >= clock.slots.len() {
                clock.hand = 0;
            }
        }
    }
}

impl Clock {
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
