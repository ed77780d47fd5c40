//! The canonical batch builder: the subtree root over a sorted run of entries.

use alloc::vec::Vec;

use super::node::{bit, hash_internal, hash_leaf, KeyPath, Node, ValueHash, TERMINATOR};
use crate::Error;

/// Receives every non-terminator node the builder creates, so a caller can store it.
///
/// The node sits at `depth` on `path` (only the first `depth` bits of `path` name the
/// position; the rest belong to one of the keys below it).
pub(crate) trait NodeSink {
    fn node(&mut self, depth: usize, path: &KeyPath, node: &Node);
}

/// A sink that keeps nothing: for callers that only want the root.
pub(crate) struct Discard;

impl NodeSink for Discard {
    #[inline]
    fn node(&mut self, _: usize, _: &KeyPath, _: &Node) {}
}

/// Root of the canonical subtree at `depth` holding `entries`.
///
/// `entries` must be sorted by key path, free of duplicates, and share their first
/// `depth` bits. Each node is hashed exactly once and reported to `sink`, children
/// before parents.
pub(crate) fn build_subtree(
    entries: &[(KeyPath, ValueHash)],
    depth: usize,
    sink: &mut impl NodeSink,
) -> Node {
    match entries {
        [] => TERMINATOR,
        [(key, value_hash)] => {
            let leaf = hash_leaf(key, value_hash);
            sink.node(depth, key, &leaf);
            leaf
        }
        _ => {
            // Distinct sorted keys always split before depth 256.
            let split = entries.partition_point(|(key, _)| !bit(key, depth));
            let left = build_subtree(&entries[..split], depth + 1, sink);
            let right = build_subtree(&entries[split..], depth + 1, sink);
            let node = hash_internal(&left, &right);
            sink.node(depth, &entries[0].0, &node);
            node
        }
    }
}

/// Root of the trie holding `entries`, given in any order.
///
/// Returns [`Error::DuplicateKey`] if a key path occurs twice.
pub fn compute_root(
    entries: impl IntoIterator<Item = (KeyPath, ValueHash)>,
) -> Result<Node, Error> {
    let mut entries: Vec<(KeyPath, ValueHash)> = entries.into_iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    check_strictly_sorted(entries.iter().map(|(k, _)| k))?;
    Ok(build_subtree(&entries, 0, &mut Discard))
}

/// Ok if `keys` ascend strictly; names the first repeated key otherwise.
pub(crate) fn check_strictly_sorted<'a>(
    keys: impl IntoIterator<Item = &'a KeyPath>,
) -> Result<(), Error> {
    let mut prev: Option<&KeyPath> = None;
    for key in keys {
        match prev {
            Some(p) if p == key => return Err(Error::DuplicateKey(*key)),
            Some(p) if p > key => return Err(Error::Unsorted),
            _ => prev = Some(key),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    struct Collect(Vec<(usize, KeyPath, Node)>);
    impl NodeSink for Collect {
        fn node(&mut self, depth: usize, path: &KeyPath, node: &Node) {
            self.0.push((depth, *path, *node));
        }
    }

    fn key(first: u8) -> KeyPath {
        let mut k = [0u8; 32];
        k[0] = first;
        k
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(compute_root([]).unwrap(), TERMINATOR);
        let k = key(7);
        assert_eq!(compute_root([(k, [1; 32])]).unwrap(), hash_leaf(&k, &[1; 32]));
    }

    #[test]
    fn duplicate_is_an_error() {
        let k = key(7);
        assert!(matches!(
            compute_root([(k, [1; 32]), (k, [2; 32])]),
            Err(Error::DuplicateKey(d)) if d == k
        ));
    }

    #[test]
    fn emits_each_node_once_children_first() {
        // 0b00.., 0b01.., 0b1..: leaves at depths 2, 2, 1.
        let entries = vec![(key(0x00), [1; 32]), (key(0x40), [2; 32]), (key(0x80), [3; 32])];
        let mut sink = Collect(Vec::new());
        let root = build_subtree(&entries, 0, &mut sink);
        let depths: Vec<usize> = sink.0.iter().map(|n| n.0).collect();
        assert_eq!(depths, vec![2, 2, 1, 1, 0]);
        assert_eq!(sink.0.last().unwrap().2, root);
        let l = hash_internal(&sink.0[0].2, &sink.0[1].2);
        assert_eq!(sink.0[2].2, l);
        assert_eq!(root, hash_internal(&l, &hash_leaf(&key(0x80), &[3; 32])));
    }
}
