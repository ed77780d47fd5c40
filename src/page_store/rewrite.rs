//! Gaps a plan fills: the pages lying between two of its writes, written
//! again from the cache exactly as their slots hold them, so that the disk
//! takes the writes and the gap as one request instead of several.
//!
//! Going round the file, a commit's pages land in the free slots of the
//! regions it passes, about every other slot at the default spare share,
//! and each run of free slots was a write request of its own. Nearly every
//! page of the trie is in the cache, so the live pages between those runs
//! are in RAM, sealed as on disk: written again, they join the runs. Only
//! the published version of a page is cached, and only its slot is named
//! here, so a rewrite carries the bytes its slot already holds.

use std::collections::HashMap;
use std::sync::Arc;

use super::{PagePlan, PageStore, Slots};
use crate::block::IoBuf;
use crate::store::{BlockWrite, Target};
use crate::trie::page::Page;
use crate::trie::page_id::PageId;

/// Levels whose pages [`SlotIds`] names in a word: their paths fit its top
/// 54 bits. A tree of 2^40 hashed keys has about seven.
const PACKED_LEVELS: usize = 9;
/// The low bits of a word, which keep a packed page's level plus one.
const LEVEL_BITS: u64 = 0x3ff;
/// A word whose page is deeper than [`PACKED_LEVELS`], kept beside.
const DEEP: u64 = LEVEL_BITS;

/// Which page each used slot of the pages file holds: 8 bytes a slot, and
/// a map entry for each page too deep to pack (long shared key prefixes).
#[derive(Default)]
pub(super) struct SlotIds {
    words: Vec<u64>,
    deep: HashMap<u32, PageId>,
}

impl SlotIds {
    /// Records that `slot` holds `id` (`None`: nothing the index names).
    pub(super) fn set(&mut self, slot: u32, id: Option<PageId>) {
        let i = slot as usize;
        if self.words.get(i) == Some(&DEEP) {
            self.deep.remove(&slot);
        }
        let word = match id {
            None => 0,
            Some(id) if id.level() > PACKED_LEVELS => {
                self.deep.insert(slot, id);
                DEEP
            }
            Some(id) => pack(&id),
        };
        if i >= self.words.len() {
            if word == 0 {
                return;
            }
            self.words.resize(i + 1, 0);
        }
        self.words[i] = word;
    }

    fn get(&self, slot: u64) -> Option<PageId> {
        let word = *self.words.get(usize::try_from(slot).ok()?)?;
        if word == DEEP {
            return self.deep.get(&u32::try_from(slot).ok()?).copied();
        }
        let level = (word & LEVEL_BITS).checked_sub(1)? as usize;
        let mut path = [0; 32];
        path[..8].copy_from_slice(&(word & !LEVEL_BITS).to_be_bytes());
        Some(PageId::on_path(&path, level))
    }

    /// Bytes of RAM it takes.
    pub(super) fn bytes(&self) -> usize {
        self.words.capacity() * 8
            + self.deep.capacity() * (std::mem::size_of::<(u32, PageId)>() + 1)
    }
}

/// A page of at most [`PACKED_LEVELS`] as a word: its path's first bits and
/// its level plus one.
fn pack(id: &PageId) -> u64 {
    let mut top = [0; 8];
    top.copy_from_slice(&id.path()[..8]);
    (u64::from_be_bytes(top) & !LEVEL_BITS) | (id.level() as u64 + 1)
}

impl PageStore {
    /// Fills each gap of at most [`crate::store::Placement::rewrite_gap`]
    /// used slots between the plan's unstaged writes whose pages are all
    /// cached: they go to the batch as rewrites, beside the writes.
    pub(super) fn rewrite_gaps(&self, plan: &mut PagePlan, slots: &Slots) {
        let longest = u64::from(self.store.placement().rewrite_gap);
        if longest == 0 || plan.writes.len() < 2 {
            return;
        }
        let mut written: Vec<u64> = plan.writes.iter().map(|w| w.index).collect();
        written.sort_unstable();
        let mut gap: Vec<(u64, Arc<Page>)> = Vec::new();
        for pair in written.windows(2) {
            let (from, to) = (pair[0] + 1, pair[1]);
            if from == to || to - from > longest {
                continue;
            }
            gap.clear();
            for slot in from..to {
                match self.cached_at(slots, slot) {
                    Some(page) => gap.push((slot, page)),
                    None => break,
                }
            }
            if gap.len() as u64 != to - from {
                continue;
            }
            for (index, page) in gap.drain(..) {
                plan.rewrites.push(BlockWrite {
                    target: Target::Pages,
                    index,
                    block: IoBuf::Shared(page),
                });
            }
        }
    }

    /// The page `slot` holds, if the cache has it: the published version
    /// of the page the index places there, as that slot holds it.
    fn cached_at(&self, slots: &Slots, slot: u64) -> Option<Arc<Page>> {
        self.cache.peek(&slots.ids.get(slot)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Batch, Store, StoreConfig};
    use crate::test_support::Rng;
    use crate::trie::page_id::MAX_PAGE_LEVEL;

    #[test]
    fn a_slot_names_its_page_at_any_level() {
        let mut rng = Rng(0xfeed);
        let mut ids = SlotIds::default();
        for level in 0..=MAX_PAGE_LEVEL {
            let mut key = [0; 32];
            for chunk in key.chunks_mut(8) {
                chunk.copy_from_slice(&rng.next().to_le_bytes());
            }
            let id = PageId::on_path(&key, level);
            ids.set(5, Some(id));
            assert_eq!(ids.get(5), Some(id));
            ids.set(6, Some(id));
            ids.set(6, Some(PageId::ROOT));
            assert_eq!(ids.get(6), Some(PageId::ROOT));
            ids.set(5, None);
            assert_eq!(ids.get(5), None);
        }
        // Nothing deep is kept once its slot holds something else.
        assert!(ids.deep.is_empty());
        assert_eq!(ids.get(1 << 20), None);
    }

    /// Pages at level 3 (cached, not resident), `n` of them.
    fn pages_of(n: u64) -> Vec<PageId> {
        (0..n)
            .map(|i| {
                let mut id = PageId::ROOT;
                for shift in [0, 6, 12] {
                    id = id.child(((i >> shift) & 63) as u8).unwrap();
                }
                id
            })
            .collect()
    }

    /// A plan of `changes` (a page and the byte its node 5 is filled with).
    fn planned(store: &Store, pages: &PageStore, changes: &[(PageId, u8)]) -> PagePlan {
        let mut plan = pages.begin_plan(store.meta().seqno + 1);
        let changes = changes
            .iter()
            .map(|&(id, version)| {
                let mut page = Page::new(&id);
                page.set_node(5, &[version; 32]);
                super::super::ChangedPage {
                    id,
                    page: Some(Arc::new(page)),
                    taken: false,
                }
            })
            .collect();
        pages.plan(&mut plan, changes).unwrap();
        plan
    }

    /// Commits `plan`; the pages it wrote again.
    fn commit_plan(store: &Store, pages: &PageStore, mut plan: PagePlan) -> u64 {
        let mut batch = Batch::new([0; 32], store.meta().lengths);
        plan.stage(&mut batch);
        let rewritten = plan.rewritten();
        let mut written = store.persist(batch).unwrap();
        pages.publish(plan, written.take(Target::Pages));
        rewritten
    }

    fn commit(store: &Store, pages: &PageStore, changes: &[(PageId, u8)]) -> u64 {
        commit_plan(store, pages, planned(store, pages, changes))
    }

    #[test]
    fn a_commit_writes_the_cached_pages_between_its_writes_again_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StoreConfig::small();
        // No spare share and regions of 4 slots: the moves below fill two
        // new regions, and the commit after them takes the slots they freed.
        config.tuning.placement.cleaning = false;
        config.tuning.placement.spare_percent = 0;
        config.tuning.placement.region_slots = 4;
        config.tuning.placement.rewrite_gap = 4;
        let store = Arc::new(Store::open(dir.path(), config).unwrap());
        let pages = PageStore::open(&store, 1000).unwrap();
        let all = pages_of(60);
        let first: Vec<(PageId, u8)> = all.iter().map(|&id| (id, 1)).collect();
        assert_eq!(commit(&store, &pages, &first), 0);
        let slot = |id: &PageId| pages.slots.read().index.candidates(id).next().unwrap();
        let before: Vec<(u32, Vec<u8>)> = (0..60)
            .map(|s| (s, store.read(Target::Pages, s.into()).unwrap().0.to_vec()))
            .collect();
        // Gaps of two, four and one cached pages; one of three with an
        // uncached page; some longer than the longest filled, 4.
        let freeing: [u32; 8] = [0, 3, 20, 24, 40, 51, 56, 58];
        let at: Vec<PageId> = freeing
            .iter()
            .map(|&s| *all.iter().find(|id| slot(id) == s).unwrap())
            .collect();
        let moved: Vec<(PageId, u8)> = at.iter().map(|&id| (id, 2)).collect();
        commit(&store, &pages, &moved);
        let uncached = *all.iter().find(|id| slot(id) == 22).unwrap();
        pages.cache.remove(&uncached);
        // The next commit's pages land in the slots freed.
        let again: Vec<(PageId, u8)> = at.iter().map(|&id| (id, 3)).collect();
        let plan = planned(&store, &pages, &again);
        let mut written: Vec<u64> = plan.writes.iter().map(|w| w.index).collect();
        written.sort_unstable();
        assert_eq!(written, freeing.map(u64::from));
        let mut rewritten: Vec<u64> = plan.rewrites.iter().map(|w| w.index).collect();
        rewritten.sort_unstable();
        assert_eq!(rewritten, [1, 2, 52, 53, 54, 55, 57]);
        assert_eq!(commit_plan(&store, &pages, plan), 7);
        // The slots written again hold what they held; every page reads back.
        for &s in &rewritten {
            let (_, bytes) = &before[s as usize];
            assert_eq!(&store.read(Target::Pages, s).unwrap().0[..], &bytes[..]);
        }
        for id in &all {
            let want = if at.contains(id) { 3 } else { 1 };
            assert_eq!(pages.get(id).unwrap().unwrap().node(5)[0], want);
        }
    }

    #[test]
    fn the_store_refuses_a_rewrite_of_a_slot_not_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), StoreConfig::small()).unwrap());
        let pages = PageStore::open(&store, 100).unwrap();
        let ids = pages_of(4);
        let changes: Vec<(PageId, u8)> = ids.iter().map(|&id| (id, 1)).collect();
        commit(&store, &pages, &changes);
        let page = pages.cache.peek(&ids[0]).unwrap();
        let mut batch = Batch::new([0; 32], store.meta().lengths);
        batch.rewrites.push(BlockWrite {
            target: Target::Pages,
            index: 9,
            block: IoBuf::Shared(page),
        });
        assert!(matches!(
            store.persist(batch),
            Err(crate::Error::Internal(_))
        ));
        // Refused before anything was written: the store goes on.
        assert_eq!(commit(&store, &pages, &[(ids[1], 2)]), 0);
    }
}
