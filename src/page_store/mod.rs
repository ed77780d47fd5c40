//! The page store (docs/design.md section 4): trie pages by page id in the `pages`
//! file. A changed page moves to a free slot (copy-on-write) and its old slot is
//! freed once the commit is durable; the file grows only when no slot is free.
//!
//! RAM holds a slot index of a few bytes per page, so a lookup costs at most one
//! read and a page that is not stored costs none, and its inverse, so a commit
//! can write cached pages again to join its runs (`rewrite`). The top three
//! page levels stay in RAM, and a bounded cache holds more (`warm` fills it
//! after an open). Changes are planned against the current state, committed
//! by the caller through [`crate::store::Store`], and published here only
//! once durable.
//!
//! Owns slots, the index and the cache; knows pages only as blocks that name
//! themselves. May not decide what a page contains: that is the trie update's (`update`).

mod cache;
mod change;
mod clean;
mod index;
mod noted;
mod rewrite;
#[cfg(test)]
mod tests;
mod warm;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::RwLock;

use cache::PageCache;
pub(crate) use change::{
    decode_change, encode_change, seal_shared, ChangedPage, PageChange, PageChanges,
    CHANGE_RAM_BYTES, CHANGE_RECORD_BYTES,
};
use index::SlotIndex;
use noted::{index_from, note};
use rewrite::SlotIds;

use crate::block::{Block, BlockBuf, IoBuf};
use crate::clock::CacheCounts;
use crate::store::{
    stored_slot, Batch, BlockWrite, Fetches, LastSize, Notes, Published, SlotSpace, Store, Stream,
    Target,
};
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::Error;

/// Changes to pages, to be committed together; planned in parts, each of
/// whose writes may start before the next part is known.
pub(crate) struct PagePlan {
    seqno: u64,
    /// The blocks to commit, not yet staged.
    writes: Vec<BlockWrite>,
    /// Pages written again where they lie, between writes, not yet staged.
    rewrites: Vec<BlockWrite>,
    /// Pages written again so far.
    rewritten: u64,
    /// Pages written: id, new slot, and the page if an overlay shares it.
    /// The cache gets the shared page, or else the block back from the write.
    stored: Vec<(PageId, u32, Option<Arc<Page>>)>,
    /// Slots the commit stops using: id and old slot of every page it
    /// replaces or deletes.
    freed: Vec<(PageId, u32)>,
    /// How many of `freed` are staged.
    freed_staged: usize,
    /// Every page planned: a page changes at most once per commit.
    changed: HashSet<PageId>,
    /// The pages file's slots after the plan's allocations (before its frees).
    space: SlotSpace,
    /// Each written page's catalog note: its id, not yet staged.
    notes: Notes,
}

impl PagePlan {
    /// Moves the plan's writes and frees so far to `batch`, and sets the
    /// pages file's length; may be called after each part.
    pub(crate) fn stage(&mut self, batch: &mut Batch) {
        let freed = self.freed[self.freed_staged..]
            .iter()
            .map(|&(_, slot)| slot);
        batch.stage(Target::Pages, &mut self.writes, freed, self.space.length());
        self.rewritten += self.rewrites.len() as u64;
        batch.rewrites.append(&mut self.rewrites);
        self.freed_staged = self.freed.len();
        batch.notes.append(&mut self.notes);
    }

    /// The pages the plan stores or deletes.
    pub(crate) fn changed(&self) -> impl Iterator<Item = &PageId> {
        self.changed.iter()
    }

    /// Pages staged to be written again where they lie, joining runs.
    pub(crate) fn rewritten(&self) -> u64 {
        self.rewritten
    }
}

/// What asking to prefetch a page did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prefetch {
    /// Nothing: it is in RAM.
    Cached,
    /// Nothing: it is not stored.
    Absent,
    /// Started reading the slots that may hold it.
    Started,
}

/// A prefetch read of a page in flight: which page, from which slot, as of
/// which generation; handed back to [`PageStore::offer`] with the block.
pub(crate) struct PageRead {
    id: PageId,
    slot: u32,
    generation: u64,
}

struct Slots {
    index: SlotIndex,
    /// The index inverted, for the gaps a plan fills.
    ids: SlotIds,
    space: SlotSpace,
    published: Published,
}

/// The trie's pages on disk, with their index and cache.
///
/// One writer: plan a commit, commit it, publish it (or drop the plan after a
/// failed commit, which poisons the store) before planning the next.
pub(crate) struct PageStore {
    /// The engine its pages live in.
    store: Arc<Store>,
    slots: RwLock<Slots>,
    cache: PageCache,
    /// Pages to read into the cache after an open that did not read them:
    /// id and slot, most used first.
    to_warm: parking_lot::Mutex<Vec<(PageId, u32)>>,
    /// The warmer's read buffer, freed when it is done.
    warm_span: parking_lot::Mutex<Vec<Block>>,
    /// The pages [`PageStore::load_victims`] found in the next plan's
    /// victims, by slot: that plan takes them from the cache.
    victim_ids: parking_lot::Mutex<HashMap<u32, PageId>>,
    counts: CacheCounts,
    /// Pages the last published plan changed: the next plan's room.
    last_plan: LastSize,
}

impl PageStore {
    /// Indexes the used slots of the pages file of `store` from its catalog
    /// and reads the resident levels' pages; without a catalog, reads every used
    /// slot (each must hold a valid page; anything else is corruption) and
    /// hands the store the notes for a new one.
    pub(crate) fn open(store: &Arc<Store>, cache_pages: usize) -> Result<PageStore, Error> {
        let length = store.meta().lengths[Target::Pages as usize];
        let mut slots = Slots {
            index: SlotIndex::new(store.seed()),
            ids: SlotIds::default(),
            space: SlotSpace::new(length, store.free_slots(Target::Pages)?, store.placement()),
            published: Published::default(),
        };
        let cache = PageCache::new(cache_pages);
        let mut to_warm = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut index = |id: PageId, slot: u64| -> Result<(), Error> {
            if !seen.insert(id) {
                return Err(Error::corrupt("page stored twice").at("pages", slot));
            }
            let slot = stored_slot(slot)?;
            slots.index.insert(&id, slot);
            slots.ids.set(slot, Some(id));
            Ok(())
        };
        match store.catalog() {
            Some(catalog) => {
                let (resident, mut others) = index_from(&catalog, &mut index)?;
                for (id, page) in read_pages(store, &resident)? {
                    cache.insert(id, page);
                }
                // Upper levels first: every path crosses them.
                others.sort_unstable_by_key(|&(id, slot)| (id.level(), slot));
                others.truncate(cache_pages);
                // Taken from the end.
                others.reverse();
                to_warm = others;
            }
            None => {
                let mut notes = Notes::default();
                let used = store.used_slots(Target::Pages);
                store.for_each_block(Target::Pages, &used, |i, block| {
                    let slot = used[i];
                    let page = Page::from_block(block);
                    let id = page.verified_id().map_err(|e| e.at("pages", slot))?;
                    index(id, slot)?;
                    notes.add(Target::Pages, slot as u32, |b| note(&id, b));
                    cache.insert(id, Arc::new(page));
                    Ok(())
                })?;
                store.add_scanned(notes);
            }
        }
        Ok(PageStore {
            store: store.clone(),
            slots: RwLock::new(slots),
            cache,
            to_warm: parking_lot::Mutex::new(to_warm),
            warm_span: parking_lot::Mutex::new(Vec::new()),
            victim_ids: parking_lot::Mutex::new(HashMap::new()),
            counts: CacheCounts::default(),
            last_plan: LastSize::default(),
        })
    }

    /// Pages stored.
    pub(crate) fn len(&self) -> usize {
        self.slots.read().index.len()
    }

    /// Bytes of RAM the slot index and its inverse take.
    pub(crate) fn index_bytes(&self) -> usize {
        let slots = self.slots.read();
        slots.index.bytes() + slots.ids.bytes()
    }

    /// Lookups answered from RAM, lookups that read the disk, and pages the
    /// prefetcher loaded into the cache.
    pub(crate) fn cache_counts(&self) -> (u64, u64, u64) {
        self.counts.get()
    }

    /// Caches page `id`, read from `slot` while `generation` was published,
    /// if that slot still holds `id`'s committed version; returns whether it
    /// did. Every block read by slot enters the cache through here: a page's
    /// old slot keeps its old version, intact, until a later commit reuses
    /// it, so a block that names itself `id` is not enough.
    fn cache_read(&self, id: &PageId, slot: u32, generation: u64, page: Arc<Page>) -> bool {
        // Publishing takes the write lock, so under this read lock an
        // unchanged generation means no commit published since the read
        // began, and a commit writes only slots the published state does
        // not use: `slot` held then what the index says it holds now.
        let slots = self.slots.read();
        let current =
            slots.published.is_current(generation) && slots.index.candidates(id).any(|s| s == slot);
        if current {
            self.cache.insert(*id, page);
        }
        current
    }

    /// Starts reading into `fetches` the slots that may hold page `id`,
    /// unless it is cached or not stored.
    pub(crate) fn prefetch<W: From<PageRead>>(
        &self,
        id: &PageId,
        fetches: &mut Fetches<W>,
    ) -> Prefetch {
        if self.cache.contains(id) {
            return Prefetch::Cached;
        }
        // The resident levels are read at open and kept: one not cached is
        // not stored.
        if id.level() < cache::RESIDENT_LEVELS {
            return Prefetch::Absent;
        }
        let (generation, candidates) = {
            let slots = self.slots.read();
            let candidates: Vec<u32> = slots.index.candidates(id).collect();
            (slots.published.generation(), candidates)
        };
        let mut started = Prefetch::Absent;
        for slot in candidates {
            let read = PageRead {
                id: *id,
                slot,
                generation,
            };
            fetches.start(&self.store, Target::Pages, slot, W::from(read));
            started = Prefetch::Started;
        }
        started
    }

    /// Caches a block a [`PageStore::prefetch`] read if it is the page's
    /// committed version.
    pub(crate) fn offer(&self, read: PageRead, block: BlockBuf) {
        let PageRead {
            id,
            slot,
            generation,
        } = read;
        let page = Page::from_block(block);
        // A lookup that raced the prefetch has counted the read already.
        let fresh = !self.cache.contains(&id);
        if is_page(&page, &id) && self.cache_read(&id, slot, generation, Arc::new(page)) && fresh {
            self.counts.prefetched(1);
        }
    }

    /// Page `id` taken out of the cache, if it is there below the resident
    /// levels, for the commit that replaces it to change in place instead of
    /// a copy: meanwhile a reader fetches it from its slot, which the commit
    /// does not free before it publishes.
    pub(crate) fn take_to_change(&self, id: &PageId) -> Option<Arc<Page>> {
        let page = self.cache.take(id)?;
        self.counts.count(1, 0);
        Some(page)
    }

    /// The committed page `id`, or `None` if it is not stored. Safe beside a
    /// commit: only pages of the published state are returned and cached.
    pub(crate) fn get(&self, id: &PageId) -> Result<Option<Arc<Page>>, Error> {
        self.store.check_usable()?;
        loop {
            if let Some(page) = self.cache.get(id) {
                self.counts.count(1, 0);
                return Ok(Some(page));
            }
            let (generation, candidates) = {
                let slots = self.slots.read();
                (
                    slots.published.generation(),
                    slots.index.candidates(id).collect::<Vec<_>>(),
                )
            };
            if candidates.is_empty() {
                return Ok(None);
            }
            self.counts.count(0, 1);
            let mut read: HashMap<u32, Result<BlockBuf, Error>> = candidates
                .iter()
                .map(|&slot| (slot, self.store.read(Target::Pages, slot as u64)))
                .collect();
            let found = find(&candidates, id, |slot| {
                read.remove(&slot)
                    .unwrap_or(Err(Error::corrupt("page slot read twice")))
                    .map(|b| Arc::new(Page::from_block(b)))
            });
            let current = match &found {
                Ok(Some((slot, page))) => self.cache_read(id, *slot, generation, page.clone()),
                // Absent, or damaged, as of the generation read at.
                Ok(None) | Err(_) => self.slots.read().published.is_current(generation),
            };
            // Otherwise a commit published meanwhile: what was read may be
            // stale, or a slot being rewritten.
            if current {
                return found.map(|f| f.map(|(_, page)| page));
            }
        }
    }

    /// An empty plan for commit `seqno`; [`PageStore::plan`] adds to it.
    /// Nothing is visible until [`PageStore::publish`].
    pub(crate) fn begin_plan(&self, seqno: u64) -> PagePlan {
        let room = self.last_plan.room();
        PagePlan {
            seqno,
            writes: Vec::new(),
            rewrites: Vec::new(),
            rewritten: 0,
            stored: Vec::with_capacity(room),
            freed: Vec::with_capacity(room),
            freed_staged: 0,
            changed: HashSet::with_capacity(room),
            space: self.slots.read().space.clone(),
            notes: Notes::default(),
        }
    }

    /// Adds page changes to `plan`: `Some(page)` stores or replaces a page,
    /// `None` deletes one. Within one call a page changed twice keeps its
    /// last change; across calls a page may change only once. A page written
    /// goes to a free slot and its old slot is freed.
    pub(crate) fn plan(&self, plan: &mut PagePlan, changes: PageChanges) -> Result<(), Error> {
        let mut last = HashMap::with_capacity(changes.len());
        for (i, change) in changes.iter().enumerate() {
            last.insert(change.id, i);
        }
        let slots = self.slots.read();
        for (i, change) in changes.into_iter().enumerate() {
            let ChangedPage { id, page, taken } = change;
            if last[&id] != i {
                continue;
            }
            // The new version is cached at publish. Keeping the old one
            // until then held a commit's worth of pages (180 MB at 2^24
            // accounts) beyond the cache's budget; a read of the published
            // state meanwhile fetches it again.
            let cached = taken || self.cache.release(&id);
            let old = self.slot_of(&slots, &id, cached)?;
            self.place(plan, id, old, page, Stream::Fresh)?;
        }
        self.rewrite_gaps(plan, &slots);
        Ok(())
    }

    /// Stages one change of page `id`, stored at `old` if at all: frees
    /// `old` and writes `change`, if any, to a slot of `stream`.
    pub(super) fn place(
        &self,
        plan: &mut PagePlan,
        id: PageId,
        old: Option<u32>,
        change: Option<Arc<Page>>,
        stream: Stream,
    ) -> Result<(), Error> {
        if !plan.changed.insert(id) {
            return Err(Error::Internal("a page changed twice in one commit"));
        }
        if let Some(old) = old {
            plan.freed.push((id, old));
        }
        let Some(page) = change else {
            return Ok(());
        };
        let (block, shared) = match Arc::try_unwrap(page) {
            Ok(mut page) => {
                page.seal();
                (IoBuf::Owned(page.into_block()), None)
            }
            // An overlay (or a reader, for a page the cleaner moves) still
            // holds it. Sealed (`change::seal_shared`, or as read), it is written
            // from where it lies and cached as it is: one copy for all.
            Err(shared) if is_page(&shared, &id) => (IoBuf::Shared(shared.clone()), Some(shared)),
            Err(shared) => {
                let mut copy = Page::clone(&shared);
                copy.seal();
                (IoBuf::Owned(copy.into_block()), None)
            }
        };
        let slot = plan.space.allocate(stream)?;
        plan.writes.push(BlockWrite {
            target: Target::Pages,
            index: slot as u64,
            block,
        });
        plan.notes.add(Target::Pages, slot, |b| note(&id, b));
        plan.stored.push((id, slot, shared));
        Ok(())
    }

    /// Makes a committed plan visible; `written` is what the commit wrote to
    /// the pages file, by slot, ascending.
    pub(crate) fn publish(&self, mut plan: PagePlan, written: Vec<(u32, BlockBuf)>) {
        self.last_plan.record(plan.changed.len());
        // Each stored page with its block, by id, to meet the freed ones.
        let mut listed = std::mem::take(&mut plan.stored);
        listed.sort_unstable_by_key(|&(_, slot, _)| slot);
        let mut written = written.into_iter().peekable();
        let mut stored: Vec<(PageId, u32, Option<Arc<Page>>)> = listed
            .into_iter()
            .map(|(id, slot, shared)| {
                while written.next_if(|(s, _)| *s < slot).is_some() {}
                let block = written.next_if(|(s, _)| *s == slot).map(|w| w.1);
                let page = shared.or_else(|| block.map(|b| Arc::new(Page::from_block(b))));
                (id, slot, page)
            })
            .collect();
        stored.sort_unstable_by_key(|s| s.0);
        plan.freed.sort_unstable_by_key(|f| f.0);
        let mut slots = self.slots.write();
        slots.space = plan.space;
        // A replaced page moves in the index and its new version (back from
        // the write, or shared with an overlay) is cached; a deleted one
        // leaves both. Below the resident
        // levels the old version already left the cache when it was staged.
        let mut stored = stored.into_iter().peekable();
        for &(id, old) in &plan.freed {
            while let Some((new_id, slot, block)) = stored.next_if(|s| s.0 < id) {
                slots.index.insert(&new_id, slot);
                slots.ids.set(slot, Some(new_id));
                self.cache_written(new_id, block);
            }
            slots.ids.set(old, None);
            match stored.next_if(|s| s.0 == id) {
                Some((_, slot, block)) => {
                    slots.index.replace(&id, old, slot);
                    slots.ids.set(slot, Some(id));
                    self.cache_written(id, block);
                }
                None => {
                    slots.index.remove(&id, old);
                    self.cache.remove(&id);
                }
            }
        }
        for (id, slot, block) in stored {
            slots.index.insert(&id, slot);
            slots.ids.set(slot, Some(id));
            self.cache_written(id, block);
        }
        let freed = plan.freed.into_iter().map(|(_, slot)| slot).collect();
        slots.space.release(plan.seqno, freed);
        slots.published.publish();
    }

    /// Caches a page's new version; without one, drops the old version.
    fn cache_written(&self, id: PageId, page: Option<Arc<Page>>) {
        match page {
            Some(page) => self.cache.insert(id, page),
            None => self.cache.remove(&id),
        }
    }

    /// The slot of page `id`, if stored. A fingerprint shared with another
    /// page costs reading the candidates, unless the page was `cached` (so
    /// stored) and is the only candidate.
    fn slot_of(&self, slots: &Slots, id: &PageId, cached: bool) -> Result<Option<u32>, Error> {
        let candidates: Vec<u32> = slots.index.candidates(id).collect();
        if let ([slot], true) = (candidates.as_slice(), cached) {
            return Ok(Some(*slot));
        }
        let found = find(&candidates, id, |slot| {
            Ok(Arc::new(Page::from_block(
                self.store.read(Target::Pages, slot as u64)?,
            )))
        })?;
        Ok(found.map(|(slot, _)| slot))
    }
}

/// Whether `page` is intact and names itself `id`.
fn is_page(page: &Page, id: &PageId) -> bool {
    matches!(page.verified_id(), Ok(found) if found == *id)
}

/// Reads the pages `wanted` (id and slot), checking each is the page named.
fn read_pages(store: &Store, wanted: &[(PageId, u32)]) -> Result<Vec<(PageId, Arc<Page>)>, Error> {
    let mut out = Vec::with_capacity(wanted.len());
    let slots: Vec<u64> = wanted.iter().map(|&(_, s)| s as u64).collect();
    store.for_each_block(Target::Pages, &slots, |i, block| {
        let (id, slot) = (wanted[i].0, slots[i]);
        let page = Page::from_block(block);
        if page.verified_id().map_err(|e| e.at("pages", slot))? != id {
            return Err(Error::corrupt("page not the one the catalog names").at("pages", slot));
        }
        out.push((id, Arc::new(page)));
        Ok(())
    })?;
    Ok(out)
}

/// The candidate slot holding page `id`, ruling out fingerprint collisions. Every
/// slot looked at must hold an intact page: a damaged one is an error, never
/// "absent".
fn find(
    candidates: &[u32],
    id: &PageId,
    mut page_at: impl FnMut(u32) -> Result<Arc<Page>, Error>,
) -> Result<Option<(u32, Arc<Page>)>, Error> {
    for &slot in candidates {
        let page = page_at(slot)?;
        if page.verified_id().map_err(|e| e.at("pages", slot as u64))? == *id {
            return Ok(Some((slot, page)));
        }
    }
    Ok(None)
}
