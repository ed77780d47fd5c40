use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{ChangedPage, PageChanges, PagePlan, PageRead, PageStore, Prefetch};
use crate::store::{Batch, Fetches, Store, StoreConfig, Target};
use crate::test_support::{faulty_store, Rng};
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::Error;

fn page_id(n: u64) -> PageId {
    // Levels 1 to 4, so both resident and cached pages occur.
    let mut id = PageId::ROOT;
    for i in 0..1 + n % 4 {
        id = id.child(((n >> (6 * i)) & 63) as u8).unwrap();
    }
    id
}

fn page(id: &PageId, version: u8) -> Page {
    let mut p = Page::new(id);
    p.set_node(5, &[version; 32]);
    p
}

/// Commits `changes` and the cleaner's moves; returns how many it moved.
fn commit(
    store: &Store,
    pages: &PageStore,
    changes: Vec<(PageId, Option<Page>)>,
) -> Result<usize, Error> {
    Ok(commit_counting(store, pages, changes)?.0)
}

/// [`commit`], returning the pages moved and the pages written again.
fn commit_counting(
    store: &Store,
    pages: &PageStore,
    changes: Vec<(PageId, Option<Page>)>,
) -> Result<(usize, u64), Error> {
    let seqno = store.meta().seqno + 1;
    let mut plan = plan_of(pages, changes, seqno)?;
    let moved = pages.clean(&mut plan)?;
    let mut batch = Batch::new([0; 32], store.meta().lengths);
    plan.stage(&mut batch);
    let rewritten = plan.rewritten();
    let mut written = store.persist(batch)?;
    pages.publish(plan, written.take(Target::Pages));
    Ok((moved, rewritten))
}

/// `changes` planned in one part.
fn plan_of(
    pages: &PageStore,
    changes: Vec<(PageId, Option<Page>)>,
    seqno: u64,
) -> Result<PagePlan, Error> {
    let mut plan = pages.begin_plan(seqno);
    pages.plan(&mut plan, shared(changes))?;
    Ok(plan)
}

fn open(dir: &Path, cache_pages: usize) -> (Arc<Store>, PageStore) {
    open_with(dir, cache_pages, StoreConfig::small())
}

fn open_with(dir: &Path, cache_pages: usize, config: StoreConfig) -> (Arc<Store>, PageStore) {
    let store = Arc::new(Store::open(dir, config).unwrap());
    let pages = PageStore::open(&store, cache_pages).unwrap();
    (store, pages)
}

fn assert_matches(pages: &PageStore, model: &BTreeMap<PageId, u8>, universe: &[PageId]) {
    for id in universe {
        let got = pages.get(id).unwrap().map(|p| p.node(5)[0]);
        assert_eq!(got, model.get(id).copied(), "page {id:?}");
    }
    assert_eq!(pages.len(), model.len());
}

#[test]
fn random_changes_match_a_model_across_reopens() {
    // The cleaner moved pages to keep regions free.
    assert!(random_changes(true).0 > 0);
}

#[test]
fn without_cleaning_a_spare_share_moves_no_page() {
    // Cached pages between a commit's writes were written again instead.
    let (moved, rewritten) = random_changes(false);
    assert_eq!(moved, 0);
    assert!(rewritten > 0);
}

/// Random changes and reopens checked against a model, with cleaning on or
/// off; returns how many pages the cleaner moved and how many were written
/// again to join runs.
fn random_changes(cleaning: bool) -> (usize, u64) {
    let open = |dir: &Path| {
        let mut config = StoreConfig::small();
        config.tuning.placement.cleaning = cleaning;
        open_with(dir, 50, config)
    };
    let dir = tempfile::tempdir().unwrap();
    let universe: Vec<PageId> = (0..400).map(page_id).collect();
    let mut model = BTreeMap::new();
    let mut rng = Rng(0x1234_5678);
    let (mut most_live, mut moved, mut rewritten) = (0, 0, 0);
    let (mut store, mut pages) = open(dir.path());
    for round in 0..40u8 {
        let mut changes = BTreeMap::new();
        for _ in 0..30 {
            let r = rng.next();
            let id = universe[(r % universe.len() as u64) as usize];
            changes.insert(id, !(r >> 32).is_multiple_of(3));
        }
        let changes: Vec<_> = changes
            .into_iter()
            .map(|(id, keep)| (id, keep.then(|| page(&id, round))))
            .collect();
        for (id, change) in &changes {
            match change {
                Some(_) => model.insert(*id, round),
                None => model.remove(id),
            };
        }
        let (m, r) = commit_counting(&store, &pages, changes).unwrap();
        (moved, rewritten) = (moved + m, rewritten + r);
        most_live = most_live.max(model.len() as u64);
        if round % 10 == 9 {
            drop(pages);
            drop(store);
            (store, pages) = open(dir.path());
        }
        assert_matches(&pages, &model, &universe);
    }
    // Freed slots are reused: the file grows only while less than its spare
    // share is free, counting one commit's replaced pages as used, and by
    // a region at a time.
    let placement = store.placement();
    let most_used = most_live + 30;
    let bound = most_used * 100 / (100 - u64::from(placement.spare_percent))
        + u64::from(placement.region_slots);
    assert!(store.meta().lengths[Target::Pages as usize] <= bound);
    (moved, rewritten)
}

#[test]
fn a_lookup_reads_at_most_once_and_absent_pages_cost_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, pages) = open(dir.path(), 0);
    let ids: Vec<PageId> = (0..200).map(|n| page_id(n * 4 + 3)).collect(); // level 4: never resident
    commit(
        &store,
        &pages,
        ids.iter().map(|id| (*id, Some(page(id, 1)))).collect(),
    )
    .unwrap();
    let reads = || store.io().counters.reads.load(Ordering::Relaxed);
    for id in &ids {
        let before = reads();
        assert!(pages.get(id).unwrap().is_some());
        assert_eq!(reads() - before, 1);
    }
    let before = reads();
    for n in 1000..2000 {
        assert!(pages.get(&page_id(n * 4 + 3)).unwrap().is_none());
    }
    assert!(
        reads() - before <= 1,
        "absent pages cost {} reads",
        reads() - before
    );
    // A few bytes of RAM per page: the index and its inverse.
    assert!(pages.index_bytes() <= 8192 + ids.len() * 24);
}

#[test]
fn a_damaged_page_is_an_error_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (store, pages) = open(dir.path(), 10);
        commit(
            &store,
            &pages,
            (0..5)
                .map(|n| (page_id(n), Some(page(&page_id(n), 1))))
                .collect(),
        )
        .unwrap();
        // A later commit that leaves slot 2 in use: open reads and checks it.
        commit(
            &store,
            &pages,
            vec![(page_id(9), Some(page(&page_id(9), 2)))],
        )
        .unwrap();
    }
    let path = dir.path().join("pages");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[4096 * 2 + 100] ^= 4;
    std::fs::write(&path, bytes).unwrap();
    let store = Arc::new(Store::open(dir.path(), StoreConfig::small()).unwrap());
    assert!(PageStore::open(&store, 10).is_err());
}

#[test]
fn a_page_changed_twice_in_one_plan_keeps_the_last_change() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (page_id(7), page_id(11));
    {
        let (store, pages) = open(dir.path(), 10);
        let changes = vec![
            (a, Some(page(&a, 1))),
            (b, Some(page(&b, 1))),
            (a, Some(page(&a, 2))),
            (b, None),
        ];
        commit(&store, &pages, changes).unwrap();
        assert_matches(&pages, &BTreeMap::from([(a, 2)]), &[a, b]);
    }
    let (_, pages) = open(dir.path(), 10);
    assert_matches(&pages, &BTreeMap::from([(a, 2)]), &[a, b]);
}

#[test]
fn a_plan_in_parts_with_writes_started_between_commits_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<PageId> = (0..60).map(page_id).collect();
    let mut model = BTreeMap::new();
    {
        let (store, pages) = open(dir.path(), 10);
        for round in 1..=4u8 {
            let seqno = store.meta().seqno + 1;
            let mut plan = pages.begin_plan(seqno);
            let mut batch = Batch::new([0; 32], store.meta().lengths);
            // Three parts; every third page is deleted from round 2 on.
            for part in ids.chunks(20) {
                let changes = part
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (*id, (round < 2 || i % 3 != 0).then(|| page(id, round))))
                    .collect();
                pages.plan(&mut plan, shared(changes)).unwrap();
                plan.stage(&mut batch);
                store.write_early(&mut batch).unwrap();
            }
            let mut written = store.persist(batch).unwrap();
            pages.publish(plan, written.take(Target::Pages));
            model = ids
                .chunks(20)
                .flat_map(|part| part.iter().enumerate())
                .filter(|(i, _)| round < 2 || i % 3 != 0)
                .map(|(_, id)| (*id, round))
                .collect();
            assert_matches(&pages, &model, &ids);
        }
        // A page in two parts of one plan is refused.
        let mut plan = pages.begin_plan(store.meta().seqno + 1);
        let a = ids[1];
        pages
            .plan(&mut plan, shared(vec![(a, Some(page(&a, 9)))]))
            .unwrap();
        assert!(matches!(
            pages.plan(&mut plan, shared(vec![(a, None)])),
            Err(Error::Internal(_))
        ));
    }
    let (_, pages) = open(dir.path(), 10);
    assert_matches(&pages, &model, &ids);
}

#[test]
fn a_page_whose_stored_id_is_damaged_is_an_error_not_absent() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let (store, pages) = open(dir.path(), 0);
    let id = page_id(3); // level 4: never cached with no cache budget
    commit(&store, &pages, vec![(id, Some(page(&id, 1)))]).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join("pages"))
        .unwrap();
    let mut byte = [0u8];
    let at = 126 * 32 + 5; // inside the stored page id
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x20], at).unwrap();
    file.sync_all().unwrap();
    assert!(matches!(pages.get(&id), Err(Error::Corrupt { .. })));
    assert!(matches!(
        commit(&store, &pages, vec![(id, None)]),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn a_poisoned_store_answers_nothing_even_from_ram() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faults) = faulty_store(dir.path());
    let pages = PageStore::open(&store, 10).unwrap();
    let root = PageId::ROOT;
    commit(&store, &pages, vec![(root, Some(page(&root, 1)))]).unwrap();
    assert!(pages.get(&root).unwrap().is_some()); // resident: from RAM
    faults.writes_left.store(0, Ordering::SeqCst);
    assert!(commit(&store, &pages, vec![(root, Some(page(&root, 2)))]).is_err());
    assert!(matches!(pages.get(&root), Err(Error::Poisoned)));
    assert!(matches!(pages.get(&page_id(1000)), Err(Error::Poisoned)));
}

#[test]
fn reads_during_commits_see_published_pages_only() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;

    let dir = tempfile::tempdir().unwrap();
    let (store, pages) = open(dir.path(), 0);
    let (store, pages) = (Arc::new(store), Arc::new(pages));
    let stable: Vec<PageId> = (0..400).map(|n| page_id(n * 4 + 3)).collect();
    let all = |round: u8| -> Vec<(PageId, Option<Page>)> {
        stable
            .iter()
            .map(|id| (*id, Some(page(id, round))))
            .collect()
    };
    commit(&store, &pages, all(0)).unwrap();
    // Every in-place write of round r happens before `publishing` reaches r, and
    // round r is visible once `published` has.
    let published = Arc::new(AtomicU64::new(0));
    let publishing = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let (pages, published, publishing, stop, stable) = (
                pages.clone(),
                published.clone(),
                publishing.clone(),
                stop.clone(),
                stable.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = Rng(5 + t);
                let mut reads = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let id = &stable[(rng.next() % stable.len() as u64) as usize];
                    let before = published.load(Ordering::SeqCst);
                    let page = pages.get(id).unwrap().expect("stable pages exist");
                    let after = publishing.load(Ordering::SeqCst);
                    let round = page.node(5)[0] as u64;
                    assert!(
                        before <= round && round <= after,
                        "read round {round}, published {before}..{after}"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for round in 1..=12u8 {
        let mut changes = all(round);
        // Pages that come and go, so slots are freed and reused around the stable ones.
        let churn = (0..50).map(|n| page_id(10_000 + (n + 50 * (round as u64 % 2)) * 4 + 3));
        changes.extend(churn.map(|id| (id, (round % 3 != 0).then(|| page(&id, round)))));
        let seqno = store.meta().seqno + 1;
        let mut plan = plan_of(&pages, changes, seqno).unwrap();
        let mut batch = Batch::new([0; 32], store.meta().lengths);
        plan.stage(&mut batch);
        let mut written = store.persist(batch).unwrap();
        publishing.store(round as u64, Ordering::SeqCst);
        pages.publish(plan, written.take(Target::Pages));
        published.store(round as u64, Ordering::SeqCst);
    }
    stop.store(true, Ordering::SeqCst);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 1000, "readers made too few reads: {reads}");
}

mod warming;

mod model {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::test_support::cases(12))]

        /// Commits storing, replacing and deleting pages at every level, with
        /// reopens in between, always read back as the model.
        #[test]
        fn commits_and_reopens_match_a_btreemap(
            rounds in prop::collection::vec(
                (prop::collection::vec((0u64..300, any::<Option<u8>>()), 1..60), any::<bool>()),
                1..8,
            )
        ) {
            let dir = tempfile::tempdir().unwrap();
            let universe: Vec<PageId> = (0..300).map(page_id).collect();
            let (mut store, mut pages) = open(dir.path(), 20);
            let mut model = BTreeMap::new();
            for (ops, reopen) in rounds {
                let changes: BTreeMap<PageId, Option<u8>> = ops.into_iter().map(|(n, v)| (page_id(n), v)).collect();
                for (id, v) in &changes {
                    match v {
                        Some(v) => model.insert(*id, *v),
                        None => model.remove(id),
                    };
                }
                let changes = changes.into_iter().map(|(id, v)| (id, v.map(|v| page(&id, v)))).collect();
                commit(&store, &pages, changes).unwrap();
                if reopen {
                    drop(pages);
                    drop(store);
                    (store, pages) = open(dir.path(), 20);
                }
                assert_matches(&pages, &model, &universe);
            }
        }
    }
}

#[test]
fn a_plan_that_is_never_committed_frees_nothing() {
    // A commit refused (or failed) after planning drops its plans: the slots
    // they freed still hold the durable pages and must not be reused.
    let dir = tempfile::tempdir().unwrap();
    let (store, pages) = open(dir.path(), 0);
    let ids: Vec<PageId> = (0..50).map(page_id).collect();
    let all = |version| {
        ids.iter()
            .map(|id| (*id, Some(page(id, version))))
            .collect()
    };
    commit(&store, &pages, all(1)).unwrap();
    let dropped = plan_of(&pages, all(2), store.meta().seqno + 1).unwrap();
    drop(dropped);
    // Had the dropped plan's frees taken effect, this commit's writes would
    // land on the durable pages: the store refuses that, and the pages read
    // back would be wrong.
    commit(&store, &pages, all(3)).unwrap();
    let model: BTreeMap<PageId, u8> = ids.iter().map(|id| (*id, 3)).collect();
    assert_matches(&pages, &model, &ids);
    drop((store, pages));
    let (_, pages) = open(dir.path(), 0);
    assert_matches(&pages, &model, &ids);
}

/// Changes as the trie update hands them over: pages shared.
fn shared(changes: Vec<(PageId, Option<Page>)>) -> PageChanges {
    changes
        .into_iter()
        .map(|(id, page)| ChangedPage {
            id,
            page: page.map(Arc::new),
            taken: false,
        })
        .collect()
}

/// The slot of stored page `id` in the published state.
fn slot_of(pages: &PageStore, id: &PageId) -> u32 {
    let slots = pages.slots.read();
    let found: Vec<u32> = slots.index.candidates(id).collect();
    assert_eq!(found.len(), 1, "page {id:?} has one candidate slot");
    found[0]
}

#[test]
fn a_prefetched_block_from_a_page_s_old_slot_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    let (store, pages) = open(dir.path(), 50);
    let id = page_id(3);
    commit(&store, &pages, vec![(id, Some(page(&id, 1)))]).unwrap();
    let old = slot_of(&pages, &id);
    commit(&store, &pages, vec![(id, Some(page(&id, 2)))]).unwrap();
    pages.cache.release(&id);
    let mut fetches = Fetches::<PageRead>::new();
    assert_eq!(pages.prefetch(&id, &mut fetches), Prefetch::Started);
    let mut reads = Vec::new();
    while fetches.len() > 0 {
        let done = fetches.arrivals().recv().unwrap();
        reads.extend(fetches.finish(done));
    }
    assert!(reads.iter().all(|(read, _)| read.slot != old));
    // The old slot, read at the current generation, still holds version 1.
    let stale = PageRead {
        id,
        slot: old,
        generation: reads[0].0.generation,
    };
    pages.offer(stale, store.read(Target::Pages, old as u64).unwrap());
    assert!(!pages.cache.contains(&id), "the old version was cached");
    for (read, block) in reads {
        pages.offer(read, block.expect("the read succeeded"));
    }
    assert_eq!(pages.cache.get(&id).unwrap().node(5)[0], 2);
}

/// A page an overlay still holds, sealed as `seal_shared` leaves it, is
/// written from where it lies and cached itself: one page in RAM, not two or
/// three. One not sealed is written from a sealed copy, which is cached.
#[test]
fn a_shared_page_sealed_beforehand_is_cached_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (page_id(3), page_id(7)); // level 4: cached only at publish
    {
        let (store, pages) = open(dir.path(), 50);
        let mut sealed = shared(vec![(a, Some(page(&a, 1)))]);
        super::seal_shared(&mut sealed);
        let unsealed = shared(vec![(b, Some(page(&b, 2)))]);
        let held: Vec<Arc<Page>> = sealed
            .iter()
            .chain(&unsealed)
            .filter_map(|c| c.page.clone())
            .collect();
        let mut plan = pages.begin_plan(store.meta().seqno + 1);
        pages.plan(&mut plan, sealed).unwrap();
        pages.plan(&mut plan, unsealed).unwrap();
        let mut batch = Batch::new([0; 32], store.meta().lengths);
        plan.stage(&mut batch);
        let mut written = store.persist(batch).unwrap();
        // Only the copy comes back as a block of its own.
        let copies = written.take(Target::Pages);
        assert_eq!(copies.len(), 1);
        pages.publish(plan, copies);
        assert!(Arc::ptr_eq(&pages.get(&a).unwrap().unwrap(), &held[0]));
        let cached_b = pages.get(&b).unwrap().unwrap();
        assert!(!Arc::ptr_eq(&cached_b, &held[1]));
        cached_b.check(&b).unwrap();
    }
    let (_store, pages) = open(dir.path(), 50);
    assert_eq!(pages.get(&a).unwrap().unwrap().node(5)[0], 1);
    assert_eq!(pages.get(&b).unwrap().unwrap().node(5)[0], 2);
}
