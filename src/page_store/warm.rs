//! The warmer: after an open from the catalog, which reads only the
//! resident levels, a thread reads the other pages the cache has room for,
//! in long reads of the slots that lie close together.

use std::sync::Arc;

use super::{is_page, PageStore};
use crate::block::{Block, BLOCK_SIZE};
use crate::store::Target;
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::Error;

/// Blocks the warmer reads at most in one request (1 MiB): at 2^24
/// accounts the pages it warms fill most of their file's slots, and a long
/// read costs the disk and the CPUs far less than a request a page.
pub(super) const WARM_SPAN: usize = 256;
/// Blocks not wanted that a warming read spans at most between two wanted
/// ones: a block read in passing costs less than a request of its own.
pub(super) const WARM_GAP: u32 = 16;

impl PageStore {
    /// Reads into the cache the next of the pages an open from the catalog
    /// left out: as many as lie close together, in one read of up to
    /// [`WARM_SPAN`] consecutive blocks; false once none are left. A page a
    /// commit moved meanwhile is skipped, never cached from the slot it left.
    pub(crate) fn warm(&self) -> Result<bool, Error> {
        // Ascending slots from the list's end, as long as they stay close.
        let chunk: Vec<(PageId, u32)> = {
            let mut to_warm = self.to_warm.lock();
            if to_warm.is_empty() {
                *self.warm_span.lock() = Vec::new();
                return Ok(false);
            }
            let from = to_warm.len() - close_together(to_warm.iter().rev().map(|&(_, s)| s));
            to_warm.split_off(from)
        };
        let (first, last) = match (chunk.last(), chunk.first()) {
            (Some(&(_, first)), Some(&(_, last))) => (first, last),
            _ => return Ok(true),
        };
        let generation = self.slots.read().published.generation();
        let mut span = self.warm_span.lock();
        span.resize_with(WARM_SPAN, || Block([0; BLOCK_SIZE]));
        let blocks = &mut span[..=(last - first) as usize];
        let read = self.store.read_span(Target::Pages, first.into(), blocks)?;
        for &(id, slot) in &chunk {
            let Some(from) = blocks[..read].get((slot - first) as usize) else {
                return Err(
                    Error::corrupt("a page slot past the file's end").at("pages", slot.into())
                );
            };
            let mut block = Block::for_read();
            block.0.copy_from_slice(&from.0);
            let page = Page::from_block(block);
            if !self.cache.contains(&id) && is_page(&page, &id) {
                self.cache_read(&id, slot, generation, Arc::new(page));
            }
        }
        Ok(true)
    }
}

/// How many of `slots` (the warmer's next, ascending) one read takes: those
/// from the first on that stay within [`WARM_SPAN`] blocks of it, each at
/// most [`WARM_GAP`] past the one before.
pub(super) fn close_together(mut slots: impl Iterator<Item = u32>) -> usize {
    let Some(first) = slots.next() else {
        return 0;
    };
    let mut last = first;
    1 + slots
        .take_while(|&slot| {
            let near = slot >= last && slot - last <= WARM_GAP && slot - first < WARM_SPAN as u32;
            last = slot;
            near
        })
        .count()
}
