//! Multi-proofs: the union of many paths, each shared sibling stored once.

use alloc::vec::Vec;
use core::cmp::Ordering;
use core::ops::Range;

use super::walk::{bottom_up, check_shape};
use super::{PathProof, Write};
use crate::trie::builder::{build_subtree, check_strictly_sorted, Discard};
use crate::trie::node::{
    bit_at, hash_internal, hash_leaf, join_canonical, prefix, shares_prefix, KeyPath, Node,
    ValueHash, MAX_DEPTH, TERMINATOR,
};
use crate::Error;

/// Where one or more proven paths end: a leaf or an empty subtree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct MultiTerminal {
    /// Depth of the terminal node (0 is the root).
    pub depth: u16,
    /// For a leaf, the leaf's key path; for an empty subtree, its position: the
    /// first `depth` bits, every later bit zero.
    pub path: KeyPath,
    /// The leaf's value hash, or `None` for an empty subtree.
    pub value_hash: Option<ValueHash>,
}

impl MultiTerminal {
    /// The node at this terminal: a leaf, or the terminator.
    pub fn node(&self) -> Node {
        match &self.value_hash {
            Some(vh) => hash_leaf(&self.path, vh),
            None => TERMINATOR,
        }
    }

    /// Whether `key`'s path passes through this terminal.
    pub fn covers(&self, key: &KeyPath) -> bool {
        shares_prefix(&self.path, key, self.depth as usize)
    }

    /// Orders this terminal's position against the position of `key` at the same depth.
    fn cmp_key(&self, key: &KeyPath) -> Ordering {
        let depth = self.depth as usize;
        prefix(&self.path, depth).cmp(&prefix(key, depth))
    }
}

/// Proof of many keys' paths against one root.
///
/// Terminals are sorted by position. `siblings` holds, in depth-first left-to-right
/// order, the root of every subtree hanging off the union of the paths; a node that
/// lies on another path is computed, not stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct MultiProof {
    /// Where the paths end, sorted by position, none inside another.
    pub terminals: Vec<MultiTerminal>,
    /// The off-path subtree roots, depth-first, left before right.
    pub siblings: Vec<Node>,
}

/// A multi-proof checked against a root: answers for every key it covers.
#[derive(Clone, Copy, Debug)]
pub struct VerifiedMultiProof<'a> {
    proof: &'a MultiProof,
}

impl VerifiedMultiProof<'_> {
    /// The value hash of `key`, or `None` if the proof shows it absent.
    /// [`Error::KeyNotCovered`] if no proven path leads to `key`.
    pub fn get(&self, key: &KeyPath) -> Result<Option<ValueHash>, Error> {
        let t = self
            .proof
            .terminal_of(key)
            .ok_or(Error::KeyNotCovered(*key))?;
        Ok(t.value_hash.filter(|_| t.path == *key))
    }

    /// Ok if `key` holds a value with hash `expected`, or is absent when `expected`
    /// is `None`; [`Error::ValueMismatch`] otherwise.
    pub fn confirm(&self, key: &KeyPath, expected: Option<&ValueHash>) -> Result<(), Error> {
        if self.get(key)?.as_ref() == expected {
            Ok(())
        } else {
            Err(Error::ValueMismatch(*key))
        }
    }
}

impl MultiProof {
    /// Checks the proof against `root`.
    pub fn verify(&self, root: &Node) -> Result<VerifiedMultiProof<'_>, Error> {
        check_shape(&self.terminals)?;
        let computed = bottom_up(
            &self.terminals,
            &self.siblings,
            &mut |_, t| Ok(t.node()),
            &mut |_, siblings| siblings.take(),
            &|left, right| hash_internal(&left, &right),
        )?;
        if computed != *root {
            return Err(Error::RootMismatch);
        }
        Ok(VerifiedMultiProof { proof: self })
    }

    /// Checks the proof against `prev_root` and returns the root after `writes`.
    ///
    /// `writes` must be sorted by key with no key twice, and every written key must
    /// be covered by the proof ([`Error::KeyNotCovered`] otherwise).
    pub fn verify_update(&self, prev_root: &Node, writes: &[Write]) -> Result<Node, Error> {
        check_strictly_sorted(writes.iter().map(|(k, _)| k))?;
        check_shape(&self.terminals)?;
        let per_terminal = self.assign(writes)?;
        let (old, new) = bottom_up(
            &self.terminals,
            &self.siblings,
            &mut |i, t| Ok((t.node(), rebuild(t, &writes[per_terminal[i].clone()]))),
            &mut |_, siblings| siblings.take().map(|s| (s, s)),
            &|(old_l, new_l), (old_r, new_r)| {
                (hash_internal(&old_l, &old_r), join_canonical(new_l, new_r))
            },
        )?;
        if old != *prev_root {
            return Err(Error::RootMismatch);
        }
        Ok(new)
    }

    /// Merges single-path proofs into one multi-proof, storing shared siblings once.
    ///
    /// The paths must come from one trie: paths sharing a position must agree on it.
    /// Disagreements that show up in the structure are reported as
    /// [`Error::InconsistentProofs`]; the result must still be verified.
    pub fn from_path_proofs(
        proofs: impl IntoIterator<Item = (KeyPath, PathProof)>,
    ) -> Result<MultiProof, Error> {
        let mut paths: Vec<(KeyPath, PathProof)> = proofs.into_iter().collect();
        if paths.iter().any(|(_, p)| p.depth() > MAX_DEPTH) {
            return Err(Error::MalformedProof("path deeper than 256"));
        }
        paths.sort_by_key(|p| p.0);
        paths.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        if paths.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(Error::InconsistentProofs);
        }
        let mut out = MultiProof::default();
        if !paths.is_empty() {
            merge(&paths, 0, &mut out)?;
        }
        Ok(out)
    }

    #[cfg(feature = "std")]
    /// The path proof of each terminal, in order: what a proof of that
    /// terminal's keys alone would hold. One pass, however many terminals.
    pub(crate) fn paths(&self) -> Result<Vec<PathProof>, Error> {
        check_shape(&self.terminals)?;
        // Each terminal's siblings, collected bottom-up.
        let (_, collected) = bottom_up(
            &self.terminals,
            &self.siblings,
            &mut |i, t| Ok((t.node(), alloc::vec![(i, Vec::new())])),
            &mut |_, siblings| Ok((siblings.take()?, Vec::new())),
            &|(left, mut below_left): (Node, Vec<(usize, Vec<Node>)>), (right, below_right)| {
                for (_, path) in &mut below_left {
                    path.push(right);
                }
                for (i, mut path) in below_right {
                    path.push(left);
                    below_left.push((i, path));
                }
                (hash_internal(&left, &right), below_left)
            },
        )?;
        Ok(collected
            .into_iter()
            .map(|(i, mut siblings)| {
                siblings.reverse();
                let t = &self.terminals[i];
                PathProof {
                    terminal: t.value_hash.map(|value_hash| super::LeafData {
                        key_path: t.path,
                        value_hash,
                    }),
                    siblings,
                }
            })
            .collect())
    }

    /// The terminal `key`'s path leads to, if the proof covers it.
    pub(crate) fn terminal_of(&self, key: &KeyPath) -> Option<&MultiTerminal> {
        let i = self
            .terminals
            .partition_point(|t| t.cmp_key(key) == Ordering::Less);
        self.terminals.get(i).filter(|t| t.covers(key))
    }

    /// The range of `writes` below each terminal.
    fn assign(&self, writes: &[Write]) -> Result<Vec<Range<usize>>, Error> {
        let mut ranges = Vec::with_capacity(self.terminals.len());
        let mut next = 0;
        for t in &self.terminals {
            let start = next;
            while next < writes.len() && t.covers(&writes[next].0) {
                next += 1;
            }
            ranges.push(start..next);
            if next < writes.len() && t.cmp_key(&writes[next].0) == Ordering::Greater {
                return Err(Error::KeyNotCovered(writes[next].0));
            }
        }
        match writes.get(next) {
            Some((key, _)) => Err(Error::KeyNotCovered(*key)),
            None => Ok(ranges),
        }
    }
}

/// The new subtree at terminal `t` after `writes` (all below it, sorted).
fn rebuild(t: &MultiTerminal, writes: &[Write]) -> Node {
    let mut existing = t.value_hash.map(|vh| (t.path, vh));
    let mut entries = Vec::with_capacity(writes.len() + 1);
    for (key, value) in writes {
        if let Some((old_key, _)) = existing {
            if old_key < *key {
                entries.extend(existing.take());
            } else if old_key == *key {
                existing = None;
            }
        }
        if let Some(vh) = value {
            entries.push((*key, *vh));
        }
    }
    entries.extend(existing);
    build_subtree(&entries, t.depth as usize, &mut Discard)
}

/// Emits the terminals and siblings of `paths` (sorted, distinct keys, all sharing
/// the position at `depth`) in the order [`bottom_up`] consumes them.
fn merge(paths: &[(KeyPath, PathProof)], depth: usize, out: &mut MultiProof) -> Result<(), Error> {
    let (first_key, first) = &paths[0];
    if paths.iter().any(|(_, p)| p.depth() == depth) {
        if paths
            .iter()
            .any(|(_, p)| p.depth() != depth || p.terminal != first.terminal)
        {
            return Err(Error::InconsistentProofs);
        }
        let terminal = match &first.terminal {
            Some(leaf) if shares_prefix(&leaf.key_path, first_key, depth) => MultiTerminal {
                depth: depth as u16,
                path: leaf.key_path,
                value_hash: Some(leaf.value_hash),
            },
            Some(_) => return Err(Error::KeyNotCovered(*first_key)),
            None => MultiTerminal {
                depth: depth as u16,
                path: prefix(first_key, depth),
                value_hash: None,
            },
        };
        out.terminals.push(terminal);
        return Ok(());
    }
    // Every path ends deeper than `depth`, so each has a sibling at depth + 1.
    let split = paths.partition_point(|(key, _)| !bit_at(key, depth));
    for side in [0..split, split..paths.len()] {
        if side.is_empty() {
            out.siblings.push(first.siblings[depth]);
        } else {
            merge(&paths[side], depth + 1, out)?;
        }
    }
    Ok(())
}
