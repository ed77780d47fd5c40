//! One commit worker: updates and proves the subtrees it is given, page by page.

use std::collections::HashMap;
use std::sync::Arc;

use crate::page_store::PageStore;
use crate::trie::page::{cell, Page};
use crate::trie::page_id::{PageId, PAGE_DEPTH};
use crate::trie::{hash_leaf, KeyPath, Node, NodeKind, ValueHash, TERMINATOR};
use crate::value_store::ValueStore;

use super::Unwritten;
use crate::Error;

/// A subtree with fewer leaves than this is not stored as a page: it is rebuilt
/// from the value store (one bucket read) when needed. docs/design.md section 2.
pub(crate) const STORE_MIN_LEAVES: u64 = 20;

/// A key and its new value hash; `None` deletes.
pub(crate) type Change = (KeyPath, Option<ValueHash>);
/// A key and its value hash.
pub(super) type Entry = (KeyPath, ValueHash);

/// The state a worker reads: the committed one, under `unwritten` changes
/// when the update builds on uncommitted overlays.
#[derive(Clone, Copy)]
pub(crate) struct Tree<'a> {
    pub(crate) pages: &'a PageStore,
    pub(crate) values: &'a ValueStore,
    pub(crate) unwritten: Option<&'a Unwritten>,
    /// Value hashes the caller saw for some keys in this state, sorted by key.
    /// Hints only: one is used where it hashes to the leaf the trie holds.
    pub(crate) seen: &'a [(KeyPath, ValueHash)],
}

impl Tree<'_> {
    /// The value hash the caller saw for `key`, if any.
    fn seen(&self, key: &KeyPath) -> Option<ValueHash> {
        let i = self.seen.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
        Some(self.seen[i].1)
    }

    /// Page `id`, if stored.
    pub(super) fn page(&self, id: &PageId) -> Result<Option<Arc<Page>>, Error> {
        if let Some(page) = self.unwritten.and_then(|u| u.pages.get(id)) {
            return Ok(page.clone());
        }
        self.pages.get(id)
    }

    /// Every key under the first `depth` bits of `at` (later bits zero), with
    /// its value hash, in key order.
    pub(super) fn entries_with_prefix(
        &self,
        at: &KeyPath,
        depth: usize,
    ) -> Result<Vec<Entry>, Error> {
        let stored = self.values.entries_with_prefix(at, depth)?;
        Ok(match self.unwritten {
            Some(u) => u.merge_prefix(at, depth, stored),
            None => stored,
        })
    }
}

/// What lies under a page position before the commit.
pub(super) enum Old {
    /// A stored page.
    Page(Arc<Page>),
    /// An elided subtree (or a leaf, or nothing): its entries.
    Entries(Vec<Entry>),
}

/// A subtree after the commit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Subtree {
    pub(super) node: Node,
    /// Leaves gained (negative: lost).
    pub(super) delta: i64,
    /// Whether the subtree is now stored as a page.
    pub(super) stored: bool,
}

/// A position inside a page: `r` levels below the page's root (0 is the root
/// itself, which the page does not hold), `bits` the path from there.
#[derive(Clone, Copy)]
pub(super) struct Pos {
    r: usize,
    bits: usize,
}

impl Pos {
    pub(super) const ROOT: Pos = Pos { r: 0, bits: 0 };

    pub(super) fn cell(self) -> usize {
        cell(self.r, self.bits)
    }

    /// The child page index of a bottom position.
    pub(super) fn index(self) -> u8 {
        self.bits as u8
    }

    pub(super) fn child(self, side: usize) -> Pos {
        Pos {
            r: self.r + 1,
            bits: self.bits * 2 + side,
        }
    }

    pub(super) fn is_root(self) -> bool {
        self.r == 0
    }

    /// Bottom position `index`: where child page `index` hangs.
    pub(super) fn bottom(index: u8) -> Pos {
        Pos {
            r: PAGE_DEPTH,
            bits: index as usize,
        }
    }

    pub(super) fn is_bottom(self) -> bool {
        self.r == PAGE_DEPTH
    }

    pub(super) fn depth(self, id: &PageId) -> usize {
        id.root_depth() + self.r
    }
}

/// Results for the root page's children, computed by other workers.
#[derive(Default)]
pub(super) struct ChildResults {
    pub(super) updated: HashMap<u8, Subtree>,
    pub(super) proofs: HashMap<u8, crate::trie::proof::MultiProof>,
}

/// Walks pages top-down along the changed and proven keys. Holds the pages it
/// changed and the value-store answers it got, which its second pass reuses.
pub(super) struct Worker<'a> {
    tree: Tree<'a>,
    entries: HashMap<(usize, KeyPath), Vec<Entry>>,
    /// Pages the witness pass looked up, each taken again by the update
    /// pass: one lookup in the shared cache a page, not two.
    seen_pages: HashMap<PageId, Arc<Page>>,
    /// Page changes: `None` deletes.
    pub(super) pages: super::PageChanges,
    pub(super) done: ChildResults,
}

impl<'a> Worker<'a> {
    pub(super) fn new(tree: Tree<'a>) -> Worker<'a> {
        Worker {
            tree,
            entries: HashMap::new(),
            seen_pages: HashMap::new(),
            pages: Vec::new(),
            done: ChildResults::default(),
        }
    }

    /// Keeps page `id` for [`Worker::old`] to take instead of looking it up again.
    pub(super) fn keep_page(&mut self, id: PageId, page: Arc<Page>) {
        self.seen_pages.insert(id, page);
    }

    /// The child page hanging from bottom position `pos` of `page` (page `id`),
    /// and its contents before the commit. `key` lies under it.
    pub(super) fn old_child(
        &mut self,
        page: &Page,
        id: &PageId,
        pos: Pos,
        key: &KeyPath,
    ) -> Result<(PageId, Old), Error> {
        let child = child_id(id, pos.index())?;
        let node = page.node(pos.cell());
        let old = self.old(&child, &node, is_stored(page, pos.index()), key)?;
        Ok((child, old))
    }

    /// The old contents of the subtree rooted at page `id`, whose root node is
    /// `node`; `stored` says whether its page exists. `key` lies under it.
    fn old(&mut self, id: &PageId, node: &Node, stored: bool, key: &KeyPath) -> Result<Old, Error> {
        if !stored {
            return Ok(Old::Entries(self.entries(key, id.root_depth(), node)?));
        }
        if NodeKind::of(node) != NodeKind::Internal {
            return Err(Error::corrupt("a page is stored under a leaf"));
        }
        if let Some(page) = self.seen_pages.remove(id) {
            return Ok(Old::Page(page));
        }
        match self.tree.page(id)? {
            Some(page) => Ok(Old::Page(page)),
            None => Err(Error::corrupt("a page marked stored is missing")),
        }
    }

    /// The entries under the position at `depth` on `key`'s path, whose node is
    /// `node`: none for a terminator, `key` itself for its leaf when the hash
    /// the caller saw matches, else one value-store prefix query.
    pub(super) fn entries(
        &mut self,
        key: &KeyPath,
        depth: usize,
        node: &Node,
    ) -> Result<Vec<Entry>, Error> {
        let kind = NodeKind::of(node);
        if kind == NodeKind::Terminator {
            return Ok(Vec::new());
        }
        // A leaf that is `key` with the value the caller saw needs no bucket:
        // the common case of a key read, then written.
        if kind == NodeKind::Leaf {
            if let Some(hash) = self.tree.seen(key) {
                if hash_leaf(key, &hash) == *node {
                    return Ok(vec![(*key, hash)]);
                }
            }
        }
        let at = crate::trie::prefix(key, depth);
        if let Some(found) = self.entries.get(&(depth, at)) {
            return Ok(found.clone());
        }
        let found = self.tree.entries_with_prefix(&at, depth)?;
        let agrees = match kind {
            NodeKind::Leaf => found.len() == 1 && hash_leaf(&found[0].0, &found[0].1) == *node,
            _ => found.len() >= 2,
        };
        if !agrees {
            return Err(Error::corrupt("the value store disagrees with the trie"));
        }
        self.entries.insert((depth, at), found.clone());
        Ok(found)
    }

    /// The subtree rooted at page `id` after `changes` (sorted, non-empty, all
    /// under it). Records the page changes.
    pub(super) fn update(
        &mut self,
        id: PageId,
        old: Old,
        changes: &[Change],
    ) -> Result<Subtree, Error> {
        match old {
            Old::Page(page) => {
                let mut page = Page::clone(&page);
                let (node, delta) = self.update_at(&mut page, &id, Pos::ROOT, changes)?;
                // The count comes from disk: checked, never wrapped.
                let leaves = i64::try_from(page.leaves())
                    .ok()
                    .and_then(|n| n.checked_add(delta))
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or(Error::corrupt("page leaf count"))?;
                let stored = leaves >= STORE_MIN_LEAVES;
                if stored {
                    page.set_leaves(leaves);
                    self.pages.push((id, Some(Arc::new(page))));
                } else {
                    self.pages.push((id, None));
                }
                Ok(Subtree {
                    node,
                    delta,
                    stored,
                })
            }
            Old::Entries(old) => {
                let new = apply(&old, changes);
                let (node, stored) = self.build(id, &new)?;
                Ok(Subtree {
                    node,
                    delta: new.len() as i64 - old.len() as i64,
                    stored,
                })
            }
        }
    }

    /// The subtree rooted at page `id` holding `entries`: stored as pages if it
    /// has enough leaves, else only hashed.
    fn build(&mut self, id: PageId, entries: &[Entry]) -> Result<(Node, bool), Error> {
        if (entries.len() as u64) < STORE_MIN_LEAVES {
            let node =
                crate::trie::build_subtree(entries, id.root_depth(), &mut crate::trie::Discard);
            return Ok((node, false));
        }
        let mut page = Page::new(&id);
        let node = self.build_at(&mut page, &id, Pos::ROOT, entries)?;
        page.set_leaves(entries.len() as u64);
        self.pages.push((id, Some(Arc::new(page))));
        Ok((node, true))
    }

    /// Applies `changes` (non-empty) under `pos` of a stored page; returns the
    /// position's new node and the leaves gained.
    fn update_at(
        &mut self,
        page: &mut Page,
        id: &PageId,
        pos: Pos,
        changes: &[Change],
    ) -> Result<(Node, i64), Error> {
        let depth = pos.depth(id);
        if pos.is_bottom() {
            return self.update_child(page, id, pos, changes);
        }
        if !pos.is_root() {
            let node = page.node(pos.cell());
            if NodeKind::of(&node) != NodeKind::Internal {
                // At most one leaf here: rebuild the region from entries.
                let old = self.entries(&changes[0].0, depth, &node)?;
                let new = apply(&old, changes);
                let node = self.build_at(page, id, pos, &new)?;
                return Ok((node, new.len() as i64 - old.len() as i64));
            }
        }
        let split = changes.partition_point(|c| !crate::trie::bit_at(&c.0, depth));
        let mut nodes = [TERMINATOR; 2];
        let mut delta = 0;
        for (side, part) in [&changes[..split], &changes[split..]]
            .into_iter()
            .enumerate()
        {
            let child = pos.child(side);
            if part.is_empty() {
                nodes[side] = page.node(child.cell());
            } else {
                let (node, d) = self.update_at(page, id, child, part)?;
                nodes[side] = node;
                delta += d;
            }
        }
        Ok((join(page, pos, nodes), delta))
    }

    /// Applies `changes` to the child page rooted at bottom position `pos`.
    fn update_child(
        &mut self,
        page: &mut Page,
        id: &PageId,
        pos: Pos,
        changes: &[Change],
    ) -> Result<(Node, i64), Error> {
        let index = pos.index();
        let updated = match self.done.updated.get(&index) {
            Some(done) if *id == PageId::ROOT => *done,
            _ => {
                let (child, old) = self.old_child(page, id, pos, &changes[0].0)?;
                self.update(child, old, changes)?
            }
        };
        set_child(page, index, &updated.node, updated.stored);
        Ok((updated.node, updated.delta))
    }

    /// Writes the subtree holding `entries` under `pos`, where nothing is stored
    /// yet (every cell below is a terminator and no child page exists).
    fn build_at(
        &mut self,
        page: &mut Page,
        id: &PageId,
        pos: Pos,
        entries: &[Entry],
    ) -> Result<Node, Error> {
        if !pos.is_root() && entries.len() <= 1 {
            let node = entries.first().map_or(TERMINATOR, |(k, v)| hash_leaf(k, v));
            page.set_node(pos.cell(), &node);
            return Ok(node);
        }
        if pos.is_bottom() {
            let index = pos.index();
            let (node, stored) = self.build(child_id(id, index)?, entries)?;
            set_child(page, index, &node, stored);
            return Ok(node);
        }
        let depth = pos.depth(id);
        let split = entries.partition_point(|e| !crate::trie::bit_at(&e.0, depth));
        let left = self.build_at(page, id, pos.child(0), &entries[..split])?;
        let right = self.build_at(page, id, pos.child(1), &entries[split..])?;
        Ok(join(page, pos, [left, right]))
    }
}

fn child_id(id: &PageId, index: u8) -> Result<PageId, Error> {
    id.child(index)
        .ok_or(Error::corrupt("a page below the deepest level"))
}

/// Whether child page `index` of `page` is stored.
fn is_stored(page: &Page, index: u8) -> bool {
    page.elided_children() >> index & 1 == 0
}

fn set_child(page: &mut Page, index: u8, node: &Node, stored: bool) {
    page.set_node(cell(PAGE_DEPTH, index as usize), node);
    let bits = page.elided_children() & !(1 << index);
    page.set_elided_children(bits | (!stored as u64) << index);
}

/// Joins two children into `pos`: a lone leaf rises, and the cells it left are
/// cleared so every cell below a leaf or terminator stays a terminator.
fn join(page: &mut Page, pos: Pos, children: [Node; 2]) -> Node {
    let node = crate::trie::join_canonical(children[0], children[1]);
    if NodeKind::of(&node) != NodeKind::Internal {
        for side in 0..2 {
            page.set_node(pos.child(side).cell(), &TERMINATOR);
        }
    }
    if !pos.is_root() {
        page.set_node(pos.cell(), &node);
    }
    node
}

/// `old` (sorted) with `changes` (sorted) applied.
pub(super) fn apply(old: &[Entry], changes: &[Change]) -> Vec<Entry> {
    let mut out = Vec::with_capacity(old.len() + changes.len());
    let mut old = old.iter().peekable();
    for (key, value) in changes {
        while let Some(e) = old.next_if(|e| e.0 < *key) {
            out.push(*e);
        }
        old.next_if(|e| e.0 == *key);
        if let Some(vh) = value {
            out.push((*key, *vh));
        }
    }
    out.extend(old);
    out
}
