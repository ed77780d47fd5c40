//! The one traversal behind multi-proof verification and update verification.

use core::cmp::Ordering;

use super::MultiTerminal;
use crate::trie::node::{bit_at, prefix, Node, MAX_DEPTH};
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

/// Folds the proof's tree bottom-up: every terminal becomes `on_terminal(index,
/// terminal)`, every sibling (consumed in depth-first, left-to-right order)
/// becomes `on_sibling`, and every internal position joins its two children.
///
/// The terminals must have passed [`check_shape`]. Fails if the siblings run out
/// or some are left over.
pub(super) fn fold<T>(
    terminals: &[MultiTerminal],
    siblings: &[Node],
    on_terminal: &mut impl FnMut(usize, &MultiTerminal) -> T,
    on_sibling: &impl Fn(&Node) -> T,
    join: &impl Fn(T, T) -> T,
) -> Result<T, Error> {
    let mut walk = Walk {
        siblings,
        next_sibling: 0,
        on_terminal,
        on_sibling,
        join,
    };
    let out = walk.subtree(terminals, 0, 0)?;
    if walk.next_sibling != siblings.len() {
        return Err(Error::MalformedProof("unused siblings"));
    }
    Ok(out)
}

struct Walk<'a, FT, FS, FJ> {
    siblings: &'a [Node],
    next_sibling: usize,
    on_terminal: &'a mut FT,
    on_sibling: &'a FS,
    join: &'a FJ,
}

impl<T, FT, FS, FJ> Walk<'_, FT, FS, FJ>
where
    FT: FnMut(usize, &MultiTerminal) -> T,
    FS: Fn(&Node) -> T,
    FJ: Fn(T, T) -> T,
{
    /// `terminals` all lie below the position at `depth`; `first` is the index of
    /// `terminals[0]` in the whole proof.
    fn subtree(
        &mut self,
        terminals: &[MultiTerminal],
        depth: usize,
        first: usize,
    ) -> Result<T, Error> {
        match terminals {
            [] => {
                let sibling = self
                    .siblings
                    .get(self.next_sibling)
                    .ok_or(Error::MalformedProof("too few siblings"))?;
                self.next_sibling += 1;
                Ok((self.on_sibling)(sibling))
            }
            // check_shape guarantees a terminal at this depth is the only one here.
            [t] if t.depth as usize == depth => Ok((self.on_terminal)(first, t)),
            _ => {
                // Deeper terminals exist, so depth < 256.
                let split = terminals.partition_point(|t| !bit_at(&t.path, depth));
                let left = self.subtree(&terminals[..split], depth + 1, first)?;
                let right = self.subtree(&terminals[split..], depth + 1, first + split)?;
                Ok((self.join)(left, right))
            }
        }
    }
}
