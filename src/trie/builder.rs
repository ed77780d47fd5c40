//! The canonical batch builder: the subtree root over a sorted run of entries.

use alloc::vec::Vec;
use core::cmp::Ordering;

use super::node::{
    bit_at, common_prefix_len, hash_internal, hash_leaf, word, KeyPath, Node, ValueHash, TERMINATOR,
};
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
///
/// One pass, no searching: a key's leaf sits one below the deeper of its common
/// prefixes with its neighbours, and a finished subtree waits on a stack until the
/// key that completes its parent arrives.
pub(crate) fn build_subtree(
    entries: &[(KeyPath, ValueHash)],
    depth: usize,
    sink: &mut impl NodeSink,
) -> Node {
    // Left subtrees awaiting their right sibling: (depth, node), depths increasing.
    let mut pending: Vec<(usize, Node)> = Vec::new();
    let mut join_before: Option<usize> = None;
    for (i, (key, value_hash)) in entries.iter().enumerate() {
        let join_after = entries
            .get(i + 1)
            .map(|(next, _)| common_prefix_len(key, next));
        let mut d = match (join_before, join_after) {
            (None, None) => depth,
            (a, b) => a.max(b).map_or(depth, |j| j + 1),
        };
        let mut node = hash_leaf(key, value_hash);
        sink.node(d, key, &node);
        // Climb to where the next key joins this one (the subtree root for the last).
        let stop = join_after.map_or(depth, |j| j + 1);
        while d > stop {
            d -= 1;
            node = if bit_at(key, d) {
                let left = match pending.last() {
                    Some(&(pd, left)) if pd == d + 1 => {
                        pending.pop();
                        left
                    }
                    _ => TERMINATOR,
                };
                hash_internal(&left, &node)
            } else {
                hash_internal(&node, &TERMINATOR)
            };
            sink.node(d, key, &node);
        }
        if join_after.is_none() {
            debug_assert!(pending.is_empty());
            return node;
        }
        pending.push((d, node));
        join_before = join_after;
    }
    TERMINATOR
}

/// Root of the trie holding `entries`, given in any order.
///
/// Returns [`Error::DuplicateKey`] if a key path occurs twice. Sorted input skips
/// the sort, and an owned `Vec` is used in place; any other iterator is first
/// collected, which for millions of entries costs a visible share of the time.
pub fn compute_root(
    entries: impl IntoIterator<Item = (KeyPath, ValueHash)>,
) -> Result<Node, Error> {
    let mut entries: Vec<(KeyPath, ValueHash)> = entries.into_iter().collect();
    if check_strictly_sorted(entries.iter().map(|(k, _)| k)).is_err() {
        entries.sort_unstable_by_key(|e| e.0);
        check_strictly_sorted(entries.iter().map(|(k, _)| k))?;
    }
    Ok(build_subtree(&entries, 0, &mut Discard))
}

/// Ok if `keys` ascend strictly; names the first repeated key otherwise.
pub(crate) fn check_strictly_sorted<'a>(
    keys: impl IntoIterator<Item = &'a KeyPath>,
) -> Result<(), Error> {
    let mut prev: Option<&KeyPath> = None;
    for key in keys {
        if let Some(p) = prev {
            // Word compares: a byte-wise memcmp call per pair costs more than the check.
            match cmp_key_paths(p, key) {
                Ordering::Less => {}
                Ordering::Equal => return Err(Error::DuplicateKey(*key)),
                Ordering::Greater => return Err(Error::Unsorted),
            }
        }
        prev = Some(key);
    }
    Ok(())
}

fn cmp_key_paths(a: &KeyPath, b: &KeyPath) -> Ordering {
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        match u64::from_be_bytes(word(x)).cmp(&u64::from_be_bytes(word(y))) {
            Ordering::Equal => continue,
            other => return other,
        }
    }
    Ordering::Equal
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
        assert_eq!(
            compute_root([(k, [1; 32])]).unwrap(),
            hash_leaf(&k, &[1; 32])
        );
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
        let entries = vec![
            (key(0x00), [1; 32]),
            (key(0x40), [2; 32]),
            (key(0x80), [3; 32]),
        ];
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
