use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::PageStore;
use crate::store::{Batch, Store, StoreConfig, Target};
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::Error;

fn page_id(n: u64) -> PageId {
    // Levels 1 to 4, so both pinned and cached pages occur.
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

fn commit(
    store: &Store,
    pages: &PageStore,
    changes: Vec<(PageId, Option<Page>)>,
) -> Result<(), Error> {
    let seqno = store.meta().seqno + 1;
    let mut plan = pages.plan(store, changes, seqno)?;
    let mut lengths = store.meta().lengths;
    lengths[Target::Pages as usize] = plan.length;
    let writes = std::mem::take(&mut plan.writes);
    store.commit(Batch {
        root: [0; 32],
        writes,
        lengths,
    })?;
    pages.publish(plan);
    Ok(())
}

fn open(dir: &Path, cache_pages: usize) -> (Store, PageStore) {
    let store = Store::open(dir, StoreConfig::default()).unwrap();
    let pages = PageStore::open(&store, cache_pages, 99).unwrap();
    (store, pages)
}

fn assert_matches(
    store: &Store,
    pages: &PageStore,
    model: &BTreeMap<PageId, u8>,
    universe: &[PageId],
) {
    for id in universe {
        let got = pages.get(store, id).unwrap().map(|p| p.node(5)[0]);
        assert_eq!(got, model.get(id).copied(), "page {id:?}");
    }
    assert_eq!(pages.len(), model.len());
}

#[test]
fn random_changes_match_a_model_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let universe: Vec<PageId> = (0..400).map(page_id).collect();
    let mut model = BTreeMap::new();
    let mut rng = 0x1234_5678u64;
    let mut most_live = 0;
    let (mut store, mut pages) = open(dir.path(), 50);
    for round in 0..40u8 {
        let mut changes = BTreeMap::new();
        for _ in 0..30 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let id = universe[(rng % universe.len() as u64) as usize];
            changes.insert(id, !(rng >> 32).is_multiple_of(3));
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
        commit(&store, &pages, changes).unwrap();
        most_live = most_live.max(model.len() as u64);
        if round % 10 == 9 {
            drop(pages);
            drop(store);
            (store, pages) = open(dir.path(), 50);
        }
        assert_matches(&store, &pages, &model, &universe);
    }
    // Freed slots are reused: the file never outgrows the most pages ever live
    // plus one commit's worth.
    assert!(store.meta().lengths[Target::Pages as usize] <= most_live + 30);
}

#[test]
fn a_lookup_reads_at_most_once_and_absent_pages_cost_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, pages) = open(dir.path(), 0);
    let ids: Vec<PageId> = (0..200).map(|n| page_id(n * 4 + 3)).collect(); // level 4: never pinned
    commit(
        &store,
        &pages,
        ids.iter().map(|id| (*id, Some(page(id, 1)))).collect(),
    )
    .unwrap();
    let reads = || store.io().counters.reads.load(Ordering::Relaxed);
    for id in &ids {
        let before = reads();
        assert!(pages.get(&store, id).unwrap().is_some());
        assert_eq!(reads() - before, 1);
    }
    let before = reads();
    for n in 1000..2000 {
        assert!(pages.get(&store, &page_id(n * 4 + 3)).unwrap().is_none());
    }
    assert!(
        reads() - before <= 1,
        "absent pages cost {} reads",
        reads() - before
    );
    // A few bytes of RAM per page.
    assert!(pages.index_bytes() <= 8192.max(ids.len() * 24));
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
        // A later commit, so that slot 2 is not in the WAL that open replays.
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
    let store = Store::open(dir.path(), StoreConfig::default()).unwrap();
    assert!(PageStore::open(&store, 10, 1).is_err());
}

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
                assert_matches(&store, &pages, &model, &universe);
            }
        }
    }
}
