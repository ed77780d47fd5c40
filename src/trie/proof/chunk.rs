//! State-sync chunks: the entries of one key range, with the proof that they
//! are every key of that range at a root, so a node can take state from peers
//! it does not trust.
//!
//! The proof is the multi-proof of the range's two boundary keys without the
//! siblings that lie inside the range: the verifier computes those from the
//! entries, and takes the ones outside from the proof. A key left out of or
//! added to the range changes a computed subtree, and so the root.

use alloc::vec::Vec;
use core::cell::Cell;

use super::walk::{bottom_up, check_shape, Gap};
use super::MultiProof;
use crate::trie::builder::{build_subtree, check_strictly_sorted, Discard};
use crate::trie::node::{
    hash_internal, hash_value, prefix, prefix_last, shares_prefix, KeyPath, Node, ValueHash,
};
use crate::Error;

/// Consecutive entries of the state at a root: every key `k` with
/// `start <= k < end` (no end: to the last key), with its value, and the
/// proof of it.
///
/// A chunk's range starts at the zero key or at its own first entry, and ends
/// at the end of the key space or at a key present in the state (the next
/// chunk's first entry), which the proof shows present. So one state cut at
/// the same keys gives the same chunks, and a chunk whose range was moved is
/// refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct Chunk {
    start: KeyPath,
    end: Option<KeyPath>,
    entries: Vec<(KeyPath, Vec<u8>)>,
    proof: MultiProof,
}

/// Where a subtree lies against a chunk's range.
#[derive(PartialEq)]
enum Side {
    Inside,
    Outside,
    /// A boundary runs through it.
    Across,
}

impl Chunk {
    /// A chunk of the range `start..end` holding `entries` (sorted, each key
    /// once), from `proof`, a multi-proof covering `start` and `end` (it may
    /// cover more keys). The siblings inside the range are dropped from the
    /// proof, since the entries determine them. Nothing is verified here:
    /// see [`Chunk::verify`].
    pub fn new(
        start: KeyPath,
        end: Option<KeyPath>,
        entries: Vec<(KeyPath, Vec<u8>)>,
        proof: &MultiProof,
    ) -> Result<Chunk, Error> {
        check_lengths(&entries)?;
        check_shape(&proof.terminals)?;
        let range = Range { start, end };
        let mut kept = Vec::new();
        // The terminals stay: each says what sits at a position on a boundary path.
        bottom_up(
            &proof.terminals,
            &proof.siblings,
            &mut |_, _| Ok(()),
            &mut |gap, siblings| {
                let node = siblings.take()?;
                if range.side(&gap) != Side::Inside {
                    kept.push(node);
                }
                Ok(())
            },
            &|(), ()| (),
        )?;
        Ok(Chunk {
            start,
            end,
            entries,
            proof: MultiProof {
                terminals: proof.terminals.clone(),
                siblings: kept,
            },
        })
    }

    /// A decoded chunk, as it came.
    pub(super) fn from_parts(
        start: KeyPath,
        end: Option<KeyPath>,
        entries: Vec<(KeyPath, Vec<u8>)>,
        proof: MultiProof,
    ) -> Chunk {
        Chunk {
            start,
            end,
            entries,
            proof,
        }
    }

    /// The first key of the range.
    pub fn start(&self) -> &KeyPath {
        &self.start
    }

    /// The key after the range (the next chunk's start), or `None` for the
    /// last chunk.
    pub fn end(&self) -> Option<&KeyPath> {
        self.end.as_ref()
    }

    /// Every key of the range with its value, in key order.
    pub fn entries(&self) -> &[(KeyPath, Vec<u8>)] {
        &self.entries
    }

    /// The entries, taken out of the chunk.
    pub fn into_entries(self) -> Vec<(KeyPath, Vec<u8>)> {
        self.entries
    }

    /// The boundary paths, without the siblings inside the range.
    pub fn proof(&self) -> &MultiProof {
        &self.proof
    }

    /// Checks against `root` alone that the entries are exactly every key of
    /// the chunk's range, with their values.
    ///
    /// Fails with [`Error::MalformedChunk`] for a chunk no honest exporter
    /// makes (entries out of order or outside the range, a range that starts
    /// or ends where chunks do not), [`Error::MalformedProof`] for a proof
    /// that does not show the range's boundaries, and [`Error::RootMismatch`]
    /// when entries, values or proof differ from the state at `root`.
    pub fn verify(&self, root: &Node) -> Result<(), Error> {
        let range = Range {
            start: self.start,
            end: self.end,
        };
        check_strictly_sorted(self.entries.iter().map(|(k, _)| k))
            .map_err(|_| Error::MalformedChunk("entries not in strictly ascending order"))?;
        check_lengths(&self.entries)?;
        if self.end.is_some_and(|end| end <= self.start) {
            return Err(Error::MalformedChunk("empty range"));
        }
        if self.entries.iter().any(|(k, _)| !range.contains(k)) {
            return Err(Error::MalformedChunk("an entry outside the range"));
        }
        let starts_at_entry = self.entries.first().is_some_and(|(k, _)| *k == self.start);
        if self.start != [0; 32] && !starts_at_entry {
            return Err(Error::MalformedChunk(
                "the range starts neither at the zero key nor at its first entry",
            ));
        }
        check_shape(&self.proof.terminals)?;
        if let Some(end) = &self.end {
            let shown = self.proof.terminal_of(end);
            if !shown.is_some_and(|t| t.path == *end && t.value_hash.is_some()) {
                return Err(Error::MalformedChunk(
                    "the proof does not show the range's end present",
                ));
            }
        }
        let hashed: Vec<(KeyPath, ValueHash)> = self
            .entries
            .iter()
            .map(|(k, v)| (*k, hash_value(v)))
            .collect();
        // Entries not yet placed under a terminal or gap; both come in key order.
        let next = Cell::new(0usize);
        let take_below = |position: &KeyPath, depth: usize| {
            let from = next.get();
            let to = from
                + hashed[from..]
                    .iter()
                    .take_while(|(k, _)| shares_prefix(k, position, depth))
                    .count();
            next.set(to);
            &hashed[from..to]
        };
        let computed = bottom_up(
            &self.proof.terminals,
            &self.proof.siblings,
            &mut |_, t| {
                let below = take_below(&t.path, t.depth as usize);
                let expected = match t.value_hash {
                    Some(vh) if range.contains(&t.path) => Some((t.path, vh)),
                    _ => None,
                };
                if below.first().copied() != expected || below.len() > 1 {
                    return Err(Error::RootMismatch);
                }
                Ok(t.node())
            },
            &mut |gap, siblings| {
                let below = take_below(&gap.position, gap.depth);
                match range.side(&gap) {
                    Side::Inside => Ok(build_subtree(below, gap.depth, &mut Discard)),
                    Side::Outside => siblings.take(),
                    Side::Across => Err(Error::MalformedProof(
                        "a range boundary runs through a subtree the proof does not open",
                    )),
                }
            },
            &|left, right| hash_internal(&left, &right),
        )?;
        if computed != *root || next.get() != hashed.len() {
            return Err(Error::RootMismatch);
        }
        Ok(())
    }
}

/// A chunk's key range.
#[derive(Clone, Copy)]
struct Range {
    start: KeyPath,
    end: Option<KeyPath>,
}

impl Range {
    fn contains(&self, key: &KeyPath) -> bool {
        *key >= self.start && self.end.is_none_or(|end| *key < end)
    }

    /// Where the subtree at `gap` lies: its keys run from its position to the
    /// position with every bit from its depth on set.
    fn side(&self, gap: &Gap) -> Side {
        let first = prefix(&gap.position, gap.depth);
        let last = prefix_last(&gap.position, gap.depth);
        let before_end = |key: &KeyPath| self.end.is_none_or(|end| *key < end);
        if first >= self.start && before_end(&last) {
            Side::Inside
        } else if last < self.start || !before_end(&first) {
            Side::Outside
        } else {
            Side::Across
        }
    }
}

/// Refuses a value over [`crate::MAX_VALUE_LEN`]: no database holds one, and
/// a chunk's encoding has room for no more.
fn check_lengths(entries: &[(KeyPath, Vec<u8>)]) -> Result<(), Error> {
    entries
        .iter()
        .try_for_each(|(_, value)| crate::check_value_len(value.len()))
}
