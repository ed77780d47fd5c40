//! The warmer: what it reads together and what it may cache.

use super::*;

#[test]
fn the_warmer_never_caches_a_page_from_the_slot_it_left() {
    let dir = tempfile::tempdir().unwrap();
    let id = page_id(3); // level 4: never resident
    {
        let (store, pages) = open(dir.path(), 50);
        // Writes the catalog the next open indexes from.
        store.finish_open();
        commit(&store, &pages, vec![(id, Some(page(&id, 1)))]).unwrap();
    }
    // Opened from the catalog: the page waits to be warmed from its slot.
    let (store, pages) = open(dir.path(), 50);
    let old = slot_of(&pages, &id);
    assert_eq!(*pages.to_warm.lock(), vec![(id, old)]);
    // A commit moves it and frees the old slot, which keeps the old
    // version until reused; cache churn then evicts the new version.
    commit(&store, &pages, vec![(id, Some(page(&id, 2)))]).unwrap();
    assert_ne!(slot_of(&pages, &id), old);
    pages.cache.release(&id);
    while pages.warm().unwrap() {}
    assert!(!pages.cache.contains(&id), "the old version was cached");
    assert_eq!(pages.get(&id).unwrap().unwrap().node(5)[0], 2);
}

#[test]
fn a_warming_read_takes_the_slots_close_together() {
    let take = |slots: &[u32]| super::super::warm::close_together(slots.iter().copied());
    assert_eq!(take(&[]), 0);
    assert_eq!(take(&[7]), 1);
    // Gaps of up to WARM_GAP blocks are read in passing; a longer one ends the read.
    assert_eq!(take(&[10, 11, 27, 28, 45]), 4);
    // A lower slot (the next level's) ends it too.
    assert_eq!(take(&[10, 12, 3, 4]), 2);
    // At most WARM_SPAN blocks from the first.
    let dense: Vec<u32> = (100..1000).collect();
    assert_eq!(take(&dense), super::super::warm::WARM_SPAN);
    let sparse: Vec<u32> = (0..100).map(|i| 1000 + 10 * i).collect();
    assert_eq!(take(&sparse), super::super::warm::WARM_SPAN / 10 + 1);
}

/// Pages written side by side are warmed a span at a time, each one cached
/// as stored.
#[test]
fn the_warmer_reads_close_pages_together_and_caches_them_all() {
    let dir = tempfile::tempdir().unwrap();
    // Level 4: never resident.
    let ids: Vec<PageId> = (0..600u64).map(|n| page_id(4 * n + 3)).collect();
    {
        let (store, pages) = open(dir.path(), 1000);
        store.finish_open();
        let changes = ids.iter().map(|id| (*id, Some(page(id, 7)))).collect();
        commit(&store, &pages, changes).unwrap();
    }
    let (store, pages) = open(dir.path(), 1000);
    assert_eq!(pages.to_warm.lock().len(), 600);
    let blocks_read = || store.io().counters.reads.load(Ordering::Relaxed);
    let before = blocks_read();
    let mut reads = 0;
    while pages.warm().unwrap() {
        reads += 1;
    }
    assert_eq!(reads, 600usize.div_ceil(super::super::warm::WARM_SPAN));
    // Each block a span read counts, as the engine's reads do.
    assert_eq!(blocks_read() - before, 600);
    assert!(
        pages.warm_span.lock().is_empty(),
        "the read buffer outlived the warming"
    );
    for id in &ids {
        assert!(pages.cache.contains(id), "page {id:?} not warmed");
        assert_eq!(pages.get(id).unwrap().unwrap().node(5)[0], 7);
    }
}
