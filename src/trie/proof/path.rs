//! A proof of one key's path: inclusion or non-inclusion.

use alloc::vec::Vec;

use crate::trie::node::{
    bit_at, hash_internal, hash_leaf, shares_prefix, KeyPath, Node, ValueHash, MAX_DEPTH,
    TERMINATOR,
};
use crate::Error;

/// A leaf's preimage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct LeafData {
    /// The key path stored in the leaf.
    pub key_path: KeyPath,
    /// The hash of its value.
    pub value_hash: ValueHash,
}

impl LeafData {
    /// The leaf node this preimage hashes to.
    pub fn node(&self) -> Node {
        hash_leaf(&self.key_path, &self.value_hash)
    }
}

/// The siblings along one key's path from the root down to the first leaf or
/// terminator, and that terminal.
///
/// It proves the key present (the terminal is the key's own leaf) or absent (a
/// terminator, or another key's leaf, sits where the key's path ends).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct PathProof {
    /// The terminal: `Some` leaf or `None` for a terminator.
    pub terminal: Option<LeafData>,
    /// `siblings[i]` is the sibling of the path's node at depth `i + 1`; the
    /// terminal sits at depth `siblings.len()`.
    pub siblings: Vec<Node>,
}

impl PathProof {
    /// Depth of the terminal node.
    pub fn depth(&self) -> usize {
        self.siblings.len()
    }

    /// Checks the proof for `key` against `root` and returns the key's value hash,
    /// or `None` if the proof shows the key absent.
    pub fn verify(&self, key: &KeyPath, root: &Node) -> Result<Option<ValueHash>, Error> {
        let depth = self.depth();
        if depth > MAX_DEPTH {
            return Err(Error::MalformedProof("path deeper than 256"));
        }
        let mut node = match &self.terminal {
            None => TERMINATOR,
            Some(leaf) if shares_prefix(&leaf.key_path, key, depth) => leaf.node(),
            Some(_) => return Err(Error::KeyNotCovered(*key)),
        };
        for (d, sibling) in self.siblings.iter().enumerate().rev() {
            node = if bit_at(key, d) {
                hash_internal(sibling, &node)
            } else {
                hash_internal(&node, sibling)
            };
        }
        if node != *root {
            return Err(Error::RootMismatch);
        }
        Ok(self
            .terminal
            .filter(|leaf| leaf.key_path == *key)
            .map(|leaf| leaf.value_hash))
    }
}
