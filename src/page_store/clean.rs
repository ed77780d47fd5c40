//! The page store's part in cleaning: reading ahead the pages of the
//! regions the next plan cleans, and moving them, unchanged, within a plan.
//! Which regions, and where the moved pages go, is `store::placement`'s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{PagePlan, PageStore};
use crate::store::{Stream, Target};
use crate::trie::page::Page;
use crate::Error;

impl PageStore {
    /// Moves out the pages of the regions the plan cleans
    /// ([`crate::store::SlotSpace::victims`]) that it does not change already: each is
    /// planned again as it is, into the moved blocks' region. Returns how
    /// many it moved.
    pub(crate) fn clean(&self, plan: &mut PagePlan) -> Result<usize, Error> {
        let victims = plan.space.victims();
        if victims.is_empty() {
            return Ok(0);
        }
        let freed: HashSet<u32> = plan.freed.iter().map(|&(_, slot)| slot).collect();
        let known = std::mem::take(&mut *self.victim_ids.lock());
        let mut found = Vec::with_capacity(victims.len());
        let mut wanted = Vec::new();
        for slot in victims.into_iter().filter(|slot| !freed.contains(slot)) {
            // Loaded ahead: from the cache, if it is still there.
            let cached = known
                .get(&slot)
                .and_then(|id| Some((*id, self.cache.get(id)?)));
            match cached {
                Some((id, page)) => found.push((id, slot, page)),
                None => wanted.push(u64::from(slot)),
            }
        }
        self.store
            .for_each_block(Target::Pages, &wanted, |i, block| {
                let slot = wanted[i];
                let page = Page::from_block(block);
                let id = page.verified_id().map_err(|e| e.at("pages", slot))?;
                found.push((id, slot as u32, Arc::new(page)));
                Ok(())
            })?;
        // The index still naming a page at its victim slot says it is the
        // stored version, so the plan frees that slot without looking it up.
        let slots = self.slots.read();
        let mut moved = 0;
        for (id, slot, page) in found {
            if plan.changed.contains(&id) || !slots.index.candidates(&id).any(|s| s == slot) {
                continue;
            }
            // As for any change: the moved version is cached at publish.
            self.cache.release(&id);
            self.place(plan, id, Some(slot), Some(page), Stream::Moved)?;
            moved += 1;
        }
        Ok(moved)
    }

    /// Reads into the cache the pages the next plan will move
    /// ([`crate::store::SlotSpace::victims`]), so that its commit does not wait for them:
    /// the cleaner's reads run beside the next block's execution.
    pub(crate) fn load_victims(&self) -> Result<(), Error> {
        let (generation, victims) = {
            let slots = self.slots.read();
            (slots.published.generation(), slots.space.victims())
        };
        let wanted: Vec<u64> = victims.into_iter().map(u64::from).collect();
        let mut known = HashMap::with_capacity(wanted.len());
        self.store
            .for_each_block(Target::Pages, &wanted, |i, block| {
                let page = Page::from_block(block);
                let slot = wanted[i] as u32;
                if let Ok(id) = page.verified_id() {
                    let current = self.cache.contains(&id)
                        || self.cache_read(&id, slot, generation, Arc::new(page));
                    if current {
                        known.insert(slot, id);
                    }
                }
                Ok(())
            })?;
        *self.victim_ids.lock() = known;
        Ok(())
    }
}
