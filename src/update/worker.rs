//! One commit worker: proves and updates the subtrees it is given, page by
//! page, in one walk.

use std::collections::HashMap;
use std::sync::Arc;

use crate::page_store::{ChangedPage, PageStore};
use crate::trie::page::{cell, Page};
use crate::trie::page_id::{PageId, PAGE_DEPTH};
use crate::trie::proof::{prove_below, MultiProof};
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
    /// The update's pages go to a commit of the committed state: a page it
    /// changes leaves the cache to be changed in place, not copied.
    pub(crate) take_pages: bool,
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

    /// Page `id`, if stored, for the update to change: taken out of the
    /// cache where the update's pages go to a commit (then `true`).
    fn page_to_change(&self, id: &PageId) -> Result<Option<(Arc<Page>, bool)>, Error> {
        let unwritten = self.unwritten.is_some_and(|u| u.pages.contains_key(id));
        if self.take_pages && !unwritten {
            if let Some(page) = self.pages.take_to_change(id) {
                return Ok(Some((page, true)));
            }
        }
        Ok(self.page(id)?.map(|page| (page, false)))
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
    /// A stored page; `taken` out of the cache for the update to change.
    Page { page: Arc<Page>, taken: bool },
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

/// A root page's child another worker walked: the subtree after its
/// changes, if it had any, and the proof of its keys (empty if none).
pub(super) struct ChildDone {
    pub(super) updated: Option<Subtree>,
    pub(super) proof: MultiProof,
}

/// What a walk does under a position: proves `keys` (sorted, distinct)
/// against the state before the commit and applies `changes` (sorted).
#[derive(Clone, Copy)]
pub(super) struct Work<'c> {
    pub(super) keys: &'c [KeyPath],
    pub(super) changes: &'c [Change],
}

impl<'c> Work<'c> {
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.changes.is_empty()
    }

    /// A key under the position; the work is not empty.
    fn any_key(&self) -> &'c KeyPath {
        match self.keys.first() {
            Some(key) => key,
            None => &self.changes[0].0,
        }
    }

    /// The keys whose seen value hashes are tried against a leaf at the
    /// position: the proven ones (with the witness, the changed ones among
    /// them), else the changed.
    fn candidates(&self) -> impl Iterator<Item = &'c KeyPath> {
        let changed = if self.keys.is_empty() {
            self.changes
        } else {
            &[]
        };
        self.keys.iter().chain(changed.iter().map(|c| &c.0))
    }

    /// Proves the keys over `before`, the entries under the position at
    /// `depth`, into `out`; the entries after the changes, if there are any.
    fn prove_and_apply(
        self,
        before: &[Entry],
        depth: usize,
        out: &mut MultiProof,
    ) -> Option<Vec<Entry>> {
        if !self.keys.is_empty() {
            prove_below(before, self.keys, depth, out);
        }
        (!self.changes.is_empty()).then(|| apply(before, self.changes))
    }

    /// The work left and right of bit `depth`.
    fn split(self, depth: usize) -> [Work<'c>; 2] {
        let k = self
            .keys
            .partition_point(|k| !crate::trie::bit_at(k, depth));
        let c = self
            .changes
            .partition_point(|c| !crate::trie::bit_at(&c.0, depth));
        [
            Work {
                keys: &self.keys[..k],
                changes: &self.changes[..c],
            },
            Work {
                keys: &self.keys[k..],
                changes: &self.changes[c..],
            },
        ]
    }
}

/// Walks pages top-down along the proven and changed keys, once: at each
/// position it reads the state before the commit for the witness and
/// changes a copy of the page for the update.
pub(super) struct Worker<'a> {
    tree: Tree<'a>,
    /// Page changes: `None` deletes.
    pub(super) pages: super::PageChanges,
    /// The root page's children other workers walked, by index.
    pub(super) done: HashMap<u8, ChildDone>,
}

impl<'a> Worker<'a> {
    pub(super) fn new(tree: Tree<'a>) -> Worker<'a> {
        Worker {
            tree,
            pages: Vec::new(),
            done: HashMap::new(),
        }
    }

    /// The child page hanging from bottom position `pos` of `page` (page `id`),
    /// and its contents before the commit. `work` lies under it.
    pub(super) fn old_child(
        &mut self,
        page: &Page,
        id: &PageId,
        pos: Pos,
        work: Work<'_>,
    ) -> Result<(PageId, Old), Error> {
        let child = child_id(id, pos.index())?;
        let node = page.node(pos.cell());
        if !is_stored(page, pos.index()) {
            let entries = self.entries(work, child.root_depth(), &node)?;
            return Ok((child, Old::Entries(entries)));
        }
        if NodeKind::of(&node) != NodeKind::Internal {
            return Err(Error::corrupt("a page is stored under a leaf"));
        }
        let found = match work.changes.is_empty() {
            true => self.tree.page(&child)?.map(|page| (page, false)),
            false => self.tree.page_to_change(&child)?,
        };
        match found {
            Some((page, taken)) => Ok((child, Old::Page { page, taken })),
            None => Err(Error::corrupt("a page marked stored is missing")),
        }
    }

    /// The entries under the position at `depth` on `work`'s path, whose
    /// node is `node`: none for a terminator, one of the keys itself for its
    /// leaf when the hash the caller saw matches, else one value-store
    /// prefix query.
    fn entries(&mut self, work: Work<'_>, depth: usize, node: &Node) -> Result<Vec<Entry>, Error> {
        let kind = NodeKind::of(node);
        if kind == NodeKind::Terminator {
            return Ok(Vec::new());
        }
        // A leaf that is a key read with the value the caller saw needs no
        // bucket: the common case of a key read, then written.
        if kind == NodeKind::Leaf {
            for key in work.candidates() {
                if let Some(hash) = self.tree.seen(key) {
                    if hash_leaf(key, &hash) == *node {
                        return Ok(vec![(*key, hash)]);
                    }
                }
            }
        }
        let at = crate::trie::prefix(work.any_key(), depth);
        let found = self.tree.entries_with_prefix(&at, depth)?;
        let agrees = match kind {
            NodeKind::Leaf => found.len() == 1 && hash_leaf(&found[0].0, &found[0].1) == *node,
            _ => found.len() >= 2,
        };
        if !agrees {
            return Err(Error::corrupt("the value store disagrees with the trie"));
        }
        Ok(found)
    }

    /// Proves `work`'s keys into `out` (after every sibling left of them)
    /// and applies its changes to the subtree rooted at page `id`; the
    /// subtree after the changes, if there are any. Records the page changes.
    pub(super) fn walk(
        &mut self,
        id: PageId,
        old: Old,
        work: Work<'_>,
        out: &mut MultiProof,
    ) -> Result<Option<Subtree>, Error> {
        match old {
            Old::Page { page, .. } if work.changes.is_empty() => {
                self.walk_at(At::Read(&page), &id, Pos::ROOT, work, out)?;
                Ok(None)
            }
            Old::Page { page, taken } => {
                // The walk reads each cell before it writes it, so the page
                // can change in place where nothing else holds it.
                let mut new = Arc::try_unwrap(page).unwrap_or_else(|shared| Page::clone(&shared));
                let (node, delta) = self
                    .walk_at(At::Write(&mut new), &id, Pos::ROOT, work, out)?
                    .ok_or(Error::Internal("a page update returned no node"))?;
                // The count comes from disk: checked, never wrapped.
                let leaves = i64::try_from(new.leaves())
                    .ok()
                    .and_then(|n| n.checked_add(delta))
                    .and_then(|n| u64::try_from(n).ok())
                    .ok_or(Error::corrupt("page leaf count"))?;
                let stored = leaves >= STORE_MIN_LEAVES;
                new.set_leaves(leaves);
                let page = stored.then(|| Arc::new(new));
                self.pages.push(ChangedPage { id, page, taken });
                Ok(Some(Subtree {
                    node,
                    delta,
                    stored,
                }))
            }
            Old::Entries(old) => {
                let Some(new) = work.prove_and_apply(&old, id.root_depth(), out) else {
                    return Ok(None);
                };
                let (node, stored) = self.build(id, &new)?;
                Ok(Some(Subtree {
                    node,
                    delta: new.len() as i64 - old.len() as i64,
                    stored,
                }))
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
        self.pages.push(ChangedPage {
            id,
            page: Some(Arc::new(page)),
            taken: false,
        });
        Ok((node, true))
    }

    /// [`Worker::walk`] under `pos` of stored page `id`, which `at` holds
    /// as it was before the commit below `pos`; writable exactly when `work`
    /// has changes, and then the position's new node and the leaves gained
    /// come back.
    fn walk_at(
        &mut self,
        mut at: At<'_>,
        id: &PageId,
        pos: Pos,
        work: Work<'_>,
        out: &mut MultiProof,
    ) -> Result<Option<(Node, i64)>, Error> {
        let depth = pos.depth(id);
        if pos.is_bottom() {
            return self.walk_child(at, id, pos, work, out);
        }
        if !pos.is_root() {
            let node = at.page().node(pos.cell());
            if NodeKind::of(&node) != NodeKind::Internal {
                // At most one leaf here: the region's entries, proven and rebuilt.
                let before = self.entries(work, depth, &node)?;
                let (At::Write(new), Some(after)) = (at, work.prove_and_apply(&before, depth, out))
                else {
                    return Ok(None);
                };
                let node = self.build_at(new, id, pos, &after)?;
                return Ok(Some((node, after.len() as i64 - before.len() as i64)));
            }
        }
        let mut nodes = [TERMINATOR; 2];
        let mut delta = 0;
        for (side, part) in work.split(depth).into_iter().enumerate() {
            let child = pos.child(side);
            // Read before the walk below writes it.
            nodes[side] = at.page().node(child.cell());
            if !work.keys.is_empty() && part.keys.is_empty() {
                out.siblings.push(nodes[side]);
            }
            if part.is_empty() {
                continue;
            }
            if let Some((node, d)) = self.walk_at(at.below(&part), id, child, part, out)? {
                nodes[side] = node;
                delta += d;
            }
        }
        Ok(match at {
            At::Write(new) => Some((join(new, pos, nodes), delta)),
            At::Read(_) => None,
        })
    }

    /// [`Worker::walk_at`] at bottom position `pos`: the child page hanging
    /// there, or the root page's child another worker did.
    fn walk_child(
        &mut self,
        at: At<'_>,
        id: &PageId,
        pos: Pos,
        work: Work<'_>,
        out: &mut MultiProof,
    ) -> Result<Option<(Node, i64)>, Error> {
        let index = pos.index();
        let done = match *id == PageId::ROOT {
            true => self.done.remove(&index),
            false => None,
        };
        let updated = match done {
            Some(ChildDone { updated, proof }) => {
                if updated.is_none() != work.changes.is_empty() {
                    return Err(Error::Internal("a root child's update is missing"));
                }
                out.terminals.extend(proof.terminals);
                out.siblings.extend(proof.siblings);
                updated
            }
            None => {
                let (child, before) = self.old_child(at.page(), id, pos, work)?;
                self.walk(child, before, work, out)?
            }
        };
        Ok(match (updated, at) {
            (Some(u), At::Write(new)) => {
                set_child(new, index, &u.node, u.stored);
                Some((u.node, u.delta))
            }
            _ => None,
        })
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

/// The page a walk is in: read only, or changed as it goes, each cell read
/// before it is written.
enum At<'p> {
    Read(&'p Page),
    Write(&'p mut Page),
}

impl At<'_> {
    fn page(&self) -> &Page {
        match self {
            At::Read(page) => page,
            At::Write(page) => page,
        }
    }

    /// The page for the walk of `part` below: writable if it changes anything.
    fn below(&mut self, part: &Work<'_>) -> At<'_> {
        if part.changes.is_empty() {
            return At::Read(self.page());
        }
        match self {
            At::Write(page) => At::Write(page),
            At::Read(page) => At::Read(page),
        }
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
