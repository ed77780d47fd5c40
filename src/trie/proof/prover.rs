//! Proofs over an in-memory set of entries: for tests, tools and small tries.
//! The database builds its witnesses from pages instead.

use alloc::vec;
use alloc::vec::Vec;

use super::{LeafData, MultiProof, MultiTerminal, PathProof};
use crate::trie::builder::{build_subtree, check_strictly_sorted, Discard};
use crate::trie::node::{bit_at, prefix, KeyPath, ValueHash};
use crate::Error;

/// The path proof of `key` in the trie of `entries` (sorted by key, no duplicates).
pub fn prove_path(entries: &[(KeyPath, ValueHash)], key: &KeyPath) -> Result<PathProof, Error> {
    check_strictly_sorted(entries.iter().map(|(k, _)| k))?;
    let mut here = entries;
    let mut siblings = Vec::new();
    while here.len() > 1 {
        let depth = siblings.len();
        let (left, right) = here.split_at(here.partition_point(|(k, _)| !bit_at(k, depth)));
        let (mine, other) = if bit_at(key, depth) {
            (right, left)
        } else {
            (left, right)
        };
        siblings.push(build_subtree(other, depth + 1, &mut Discard));
        here = mine;
    }
    let terminal = here.first().map(|(key_path, value_hash)| LeafData {
        key_path: *key_path,
        value_hash: *value_hash,
    });
    Ok(PathProof { terminal, siblings })
}

/// The multi-proof of `keys` (any order, repeats allowed) in the trie of `entries`
/// (sorted by key, no duplicates).
pub fn prove_multi(
    entries: &[(KeyPath, ValueHash)],
    keys: &[KeyPath],
) -> Result<MultiProof, Error> {
    check_strictly_sorted(entries.iter().map(|(k, _)| k))?;
    let mut keys = keys.to_vec();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        // Proves nothing: the whole trie is one sibling.
        let root = build_subtree(entries, 0, &mut Discard);
        return Ok(MultiProof {
            terminals: Vec::new(),
            siblings: vec![root],
        });
    }
    let mut out = MultiProof::default();
    prove_below(entries, &keys, 0, &mut out);
    Ok(out)
}

/// Appends to `out` the proof of `keys` (non-empty, sorted, distinct) in the subtree
/// at `depth` holding `entries` (sorted); all lie below that position.
pub(crate) fn prove_below(
    entries: &[(KeyPath, ValueHash)],
    keys: &[KeyPath],
    depth: usize,
    out: &mut MultiProof,
) {
    if entries.len() <= 1 {
        out.terminals.push(match entries.first() {
            Some((key_path, value_hash)) => MultiTerminal {
                depth: depth as u16,
                path: *key_path,
                value_hash: Some(*value_hash),
            },
            None => MultiTerminal {
                depth: depth as u16,
                path: prefix(&keys[0], depth),
                value_hash: None,
            },
        });
        return;
    }
    let e_split = entries.partition_point(|(k, _)| !bit_at(k, depth));
    let k_split = keys.partition_point(|k| !bit_at(k, depth));
    let sides = [
        (&entries[..e_split], &keys[..k_split]),
        (&entries[e_split..], &keys[k_split..]),
    ];
    for (entries, keys) in sides {
        if keys.is_empty() {
            out.siblings
                .push(build_subtree(entries, depth + 1, &mut Discard));
        } else {
            prove_below(entries, keys, depth + 1, out);
        }
    }
}
