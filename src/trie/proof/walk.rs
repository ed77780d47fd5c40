//! The one traversal behind multi-proof verification and update verification.

use core::cmp::Ordering;

use super::MultiTerminal;
use crate::trie::node::{bit_at, prefix, KeyPath, Node, MAX_DEPTH};
use crate::Error;

/// Rejects terminals that could not come from one trie: deeper than 256, an empty
/// terminal's path carrying bits past its depth, or terminals out of order or
/// overlapping (one position inside another's subtree).
pub(super) fn check_shape(terminals: &[MultiTerminal]) -> Result<(), Error> {
    for t in terminals {
        let depth = t.depth as usize;
        if depth > MAX_DEPTH {
            return Err(Error::MalformedProof("terminal deeper than 256"));
        }
        if t.value_hash.is_none() && prefix(&t.path, depth) != t.path {
            return Err(Error::MalformedProof(
                "bits set past an empty terminal's depth",
            ));
        }
    }
    for pair in terminals.windows(2) {
        let shallower = pair[0].depth.min(pair[1].depth) as usize;
        match first_difference(&pair[0].path, &pair[1].path) {
            Some((at, Ordering::Less)) if at < shallower => {}
            _ => return Err(Error::MalformedProof("terminals out of order or nested")),
        }
    }
    Ok(())
}

/// The first bit where `a` and `b` differ, and how `a` compares to `b` there.
fn first_difference(a: &[u8; 32], b: &[u8; 32]) -> Option<(usize, Ordering)> {
    let i = (0..32).find(|&i| a[i] != b[i])?;
    let at = i * 8 + (a[i] ^ b[i]).leading_zeros() as usize;
    Some((at, a[i].cmp(&b[i])))
}

/// An off-path subtree the walk meets: its position (the first `depth` bits
/// of `position`, every later bit zero) and depth.
#[derive(Clone, Copy, Debug)]
pub(super) struct Gap {
    pub(super) position: KeyPath,
    pub(super) depth: usize,
}

/// The proof's stored siblings, handed out in the order the walk meets gaps.
pub(super) struct Siblings<'a> {
    nodes: &'a [Node],
    next: usize,
}

impl Siblings<'_> {
    /// The next stored sibling.
    pub(super) fn take(&mut self) -> Result<Node, Error> {
        let node = self
            .nodes
            .get(self.next)
            .ok_or(Error::MalformedProof("too few siblings"))?;
        self.next += 1;
        Ok(*node)
    }
}

/// Computes over the proof's tree bottom-up: every terminal becomes `on_terminal(index,
/// terminal)`, every off-path subtree becomes `on_gap(gap, siblings)` (which
/// usually takes the next stored sibling; a range proof computes some gaps
/// instead), and every internal position joins its two children.
///
/// The terminals must have passed [`check_shape`]. Fails if a callback fails or
/// stored siblings are left over.
pub(super) fn bottom_up<T>(
    terminals: &[MultiTerminal],
    siblings: &[Node],
    on_terminal: &mut impl FnMut(usize, &MultiTerminal) -> Result<T, Error>,
    on_gap: &mut impl FnMut(Gap, &mut Siblings) -> Result<T, Error>,
    join: &impl Fn(T, T) -> T,
) -> Result<T, Error> {
    let mut walk = Walk {
        siblings: Siblings {
            nodes: siblings,
            next: 0,
        },
        on_terminal,
        on_gap,
        join,
    };
    let out = walk.subtree(terminals, [0; 32], 0, 0)?;
    if walk.siblings.next != siblings.len() {
        return Err(Error::MalformedProof("unused siblings"));
    }
    Ok(out)
}

struct Walk<'a, 's, FT, FS, FJ> {
    siblings: Siblings<'s>,
    on_terminal: &'a mut FT,
    on_gap: &'a mut FS,
    join: &'a FJ,
}

impl<T, FT, FS, FJ> Walk<'_, '_, FT, FS, FJ>
where
    FT: FnMut(usize, &MultiTerminal) -> Result<T, Error>,
    FS: FnMut(Gap, &mut Siblings) -> Result<T, Error>,
    FJ: Fn(T, T) -> T,
{
    /// `terminals` all lie below `position` at `depth`; `first` is the index of
    /// `terminals[0]` in the whole proof.
    fn subtree(
        &mut self,
        terminals: &[MultiTerminal],
        position: KeyPath,
        depth: usize,
        first: usize,
    ) -> Result<T, Error> {
        match terminals {
            [] => (self.on_gap)(Gap { position, depth }, &mut self.siblings),
            // check_shape guarantees a terminal at this depth is the only one here.
            [t] if t.depth as usize == depth => (self.on_terminal)(first, t),
            _ => {
                // Deeper terminals exist, so depth < 256.
                let split = terminals.partition_point(|t| !bit_at(&t.path, depth));
                let mut right_position = position;
                right_position[depth / 8] |= 0x80 >> (depth % 8);
                let left = self.subtree(&terminals[..split], position, depth + 1, first)?;
                let right = self.subtree(
                    &terminals[split..],
                    right_position,
                    depth + 1,
                    first + split,
                )?;
                Ok((self.join)(left, right))
            }
        }
    }
}
