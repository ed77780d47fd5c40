//! A real small database (pages, buckets and overflow values, committed together)
//! with random bytes flipped in its files, reopened 200 times: every layer must
//! answer with data or an error, never a panic.

use std::sync::Arc;

use crate::page_store::PageStore;
use crate::store::{Batch, Store, StoreConfig, Target};
use crate::test_support::key;
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::value_store::ValueStore;

fn page_ids() -> Vec<PageId> {
    (0..64)
        .flat_map(|i| PageId::ROOT.child(i))
        .chain([PageId::ROOT])
        .collect()
}

fn build(dir: &std::path::Path) {
    let store = Arc::new(Store::open(dir, StoreConfig::default()).unwrap());
    let pages = PageStore::open(&store, 16).unwrap();
    let values = ValueStore::open(&store, 0).unwrap();
    for round in 0..3u64 {
        let seqno = store.meta().seqno + 1;
        let changes: Vec<_> = (round * 700..(round + 1) * 700)
            .map(|i| (key(i), Some(vec![i as u8; (i % 7 * 100) as usize])))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .collect();
        let mut vplan = values.plan(&changes, seqno, |_| Ok(())).unwrap();
        let page_changes = page_ids().into_iter().map(|id| {
            let mut p = Page::new(&id);
            p.set_node(3, &[round as u8 + 1; 32]);
            (id, Some(p))
        });
        let mut pplan = pages.begin_plan(seqno);
        pages
            .plan(
                &mut pplan,
                page_changes
                    .map(|(id, p)| crate::page_store::ChangedPage {
                        id,
                        page: p.map(std::sync::Arc::new),
                        taken: false,
                    })
                    .collect(),
            )
            .unwrap();
        let mut batch = Batch::new([round as u8; 32], store.meta().lengths);
        vplan.stage(&mut batch);
        pplan.stage(&mut batch);
        let mut written = store.persist(batch).unwrap();
        pages.publish(pplan, written.take(Target::Pages));
        values
            .publish(vplan, written.take(Target::Buckets))
            .0
            .apply();
    }
}

fn read_everything(dir: &std::path::Path) {
    let Ok(store) = Store::open(dir, StoreConfig::default()).map(Arc::new) else {
        return;
    };
    if let Ok(pages) = PageStore::open(&store, 16) {
        for id in page_ids() {
            let _ = pages.get(&id);
        }
    }
    if let Ok(values) = ValueStore::open(&store, 0) {
        for i in 0..2100 {
            let _ = values.get(&key(i));
        }
        let _ = values.entries_with_prefix(&key(5), 3);
    }
}

const FILES: [&str; 6] = ["meta", "slots0", "slots1", "pages", "buckets", "overflow"];

#[test]
fn random_byte_flips_in_a_real_database_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    read_everything(dir.path());
    crate::test_support::flip_random_bits(dir.path(), &FILES, 200, 6, read_everything);
}
