//! The catalog across faults: a fold cut at any step leaves a log the next
//! open reads, so it indexes the stores from the catalog, not by a scan.

use super::*;

/// Commit `k`'s batch with a catalog note for each page and bucket it
/// writes, as the stores above make them.
fn noted(k: u64) -> Batch {
    let mut batch = batch(k);
    for w in &batch.writes {
        if w.target != Target::Overflow {
            let note = format!("commit {k}");
            batch.notes.add(w.target, w.index as u32, |b| {
                b.extend_from_slice(note.as_bytes())
            });
        }
    }
    batch
}

#[test]
fn a_fold_cut_at_any_sync_leaves_a_catalog_the_next_open_uses() {
    // The syncs of a fold: the new catalog file, its rename, the log's erase;
    // past them the fold is whole and the cut falls on a later commit's.
    for cut in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::none());
        let config = StoreConfig {
            faults: Some(faults.clone()),
            ..StoreConfig::small()
        };
        let store = Store::open(dir.path(), config).unwrap();
        // The first open reads every block and writes the first catalog file.
        store.finish_open();
        for k in 1..=3 {
            store.persist(noted(k)).unwrap();
        }
        faults.fail_one_sync_after(cut);
        store.maybe_fold();
        faults.clear();
        for k in 4..=6 {
            store.persist(noted(k)).unwrap();
        }
        drop(store);
        let reopened = open(dir.path());
        assert!(
            reopened.finish_open(),
            "sync {cut} of the fold failed: the next open read every block"
        );
        assert_state(&reopened, 6);
    }
}
