//! Changes not in the stores yet: the state a chain of uncommitted overlays
//! adds to the committed one. A trie update on top of the chain reads pages
//! and values here before the stores; cloning shares the maps' structure, so
//! an overlay's view costs what it changed, and a lookup one map probe however
//! long the chain.

use std::sync::Arc;

use super::worker::Entry;
use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::trie::{prefix_last, KeyPath, ValueHash};

/// A value not yet in the store, with its hash; `None`: deleted.
pub(crate) type UnwrittenValue = Option<(ValueHash, Arc<[u8]>)>;

/// Pages and values that differ from the stores: the newest of each.
#[derive(Clone, Default)]
pub(crate) struct Unwritten {
    /// `None`: the page is deleted.
    pub(crate) pages: imbl::HashMap<PageId, Option<Arc<Page>>>,
    pub(crate) values: imbl::OrdMap<KeyPath, UnwrittenValue>,
}

impl Unwritten {
    /// Lays `newer`'s changes over these.
    pub(crate) fn extend(&mut self, newer: &Unwritten) {
        for (id, page) in newer.pages.iter() {
            self.pages.insert(*id, page.clone());
        }
        for (key, value) in newer.values.iter() {
            self.values.insert(*key, value.clone());
        }
    }

    /// `stored` (the store's entries under the first `depth` bits of `at`, in
    /// key order) with these changes under the same prefix applied.
    pub(super) fn merge_prefix(
        &self,
        at: &KeyPath,
        depth: usize,
        stored: Vec<Entry>,
    ) -> Vec<Entry> {
        let last = prefix_last(at, depth);
        let mut out = Vec::with_capacity(stored.len());
        let mut stored = stored.into_iter().peekable();
        for (key, value) in self.values.range(*at..=last) {
            while let Some(e) = stored.next_if(|e| e.0 < *key) {
                out.push(e);
            }
            stored.next_if(|e| e.0 == *key);
            if let Some((hash, _)) = value {
                out.push((*key, *hash));
            }
        }
        out.extend(stored);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_under_a_prefix_replace_add_and_delete_stored_entries() {
        let key = |b: u8| {
            let mut k = [0u8; 32];
            k[0] = b;
            k
        };
        let hash = |b: u8| [b; 32];
        let mut u = Unwritten::default();
        u.values
            .insert(key(0x10), Some((hash(9), Arc::from(&[9u8][..]))));
        u.values.insert(key(0x20), None);
        u.values
            .insert(key(0x31), Some((hash(7), Arc::from(&[7u8][..]))));
        // Outside the prefix 0b00 (depth 2): untouched.
        u.values
            .insert(key(0x41), Some((hash(4), Arc::from(&[4u8][..]))));
        let stored = vec![
            (key(0x10), hash(1)),
            (key(0x20), hash(2)),
            (key(0x30), hash(3)),
        ];
        let merged = u.merge_prefix(&key(0), 2, stored);
        assert_eq!(
            merged,
            vec![
                (key(0x10), hash(9)),
                (key(0x30), hash(3)),
                (key(0x31), hash(7))
            ]
        );
    }
}
