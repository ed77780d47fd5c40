//! The witness pass: proves keys against the state before the commit, walking the
//! same pages and value-store answers as the update that follows.

use crate::trie::page::Page;
use crate::trie::page_id::PageId;
use crate::trie::proof::{prove_below, MultiProof};
use crate::trie::{KeyPath, NodeKind};
use crate::Error;

use super::worker::{Old, Pos, Worker};

impl Worker<'_> {
    /// Appends the proof of `keys` (sorted, distinct, non-empty, all under page
    /// `id`) to `out`, with every sibling left of them already there.
    pub(super) fn prove(
        &mut self,
        id: &PageId,
        old: &Old,
        keys: &[KeyPath],
        out: &mut MultiProof,
    ) -> Result<(), Error> {
        match old {
            Old::Page(page) => self.prove_at(page, id, Pos::ROOT, keys, out),
            Old::Entries(entries) => {
                prove_below(entries, keys, id.root_depth(), out);
                Ok(())
            }
        }
    }

    fn prove_at(
        &mut self,
        page: &Page,
        id: &PageId,
        pos: Pos,
        keys: &[KeyPath],
        out: &mut MultiProof,
    ) -> Result<(), Error> {
        let depth = pos.depth(id);
        if pos.is_bottom() {
            let index = pos.index();
            if *id == PageId::ROOT {
                if let Some(done) = self.done.proofs.remove(&index) {
                    out.terminals.extend(done.terminals);
                    out.siblings.extend(done.siblings);
                    return Ok(());
                }
            }
            let (child, old) = self.old_child(page, id, pos, &keys[0])?;
            self.prove(&child, &old, keys, out)?;
            // For the update pass, which walks here again if it changes keys below.
            if let Old::Page(page) = old {
                self.keep_page(child, page);
            }
            return Ok(());
        }
        if !pos.is_root() {
            let node = page.node(pos.cell());
            if NodeKind::of(&node) != NodeKind::Internal {
                let entries = self.entries(&keys[0], depth, &node)?;
                prove_below(&entries, keys, depth, out);
                return Ok(());
            }
        }
        let split = keys.partition_point(|k| !crate::trie::bit_at(k, depth));
        for (side, part) in [&keys[..split], &keys[split..]].into_iter().enumerate() {
            let child = pos.child(side);
            if part.is_empty() {
                out.siblings.push(page.node(child.cell()));
            } else {
                self.prove_at(page, id, child, part, out)?;
            }
        }
        Ok(())
    }
}
