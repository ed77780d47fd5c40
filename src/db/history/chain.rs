//! The chain of retained undos, newest last, that links each retained root
//! to the one before it, and the window that bounds it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::undo::{decode, Record, Undo};
use crate::db::KeyedValues;
use crate::page_store::PageChange;
use crate::trie::{KeyPath, Node};

/// The old value of `key` in the oldest of `undos` (oldest first) that names
/// it: its value before them all, if any of them changed it.
pub(crate) fn first_named<'a>(
    undos: impl IntoIterator<Item = &'a Arc<Undo>>,
    key: &KeyPath,
) -> Option<Option<&'a [u8]>> {
    undos.into_iter().find_map(|undo| undo.get(key))
}

/// [`first_named`] for every key in `from..to` (no `to`: to the last key)
/// that `wanted` accepts and any of `undos` names.
pub(crate) fn oldest_values<'a>(
    undos: impl IntoIterator<Item = &'a Arc<Undo>>,
    from: &KeyPath,
    to: Option<&KeyPath>,
    wanted: impl Fn(&KeyPath) -> bool,
) -> BTreeMap<KeyPath, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for undo in undos {
        for (key, value) in undo.range(from, to).filter(|(key, _)| wanted(key)) {
            out.entry(*key).or_insert_with(|| value.map(<[u8]>::to_vec));
        }
    }
    out
}

/// How far the history reaches back at most: commits, and the RAM their
/// undos take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) commits: usize,
    pub(crate) bytes: usize,
}

impl Window {
    /// Drops undos from the front of `undos` (oldest first), which take
    /// `bytes` in all, until it fits; returns what the rest take.
    fn fit(&self, undos: &mut VecDeque<Arc<Undo>>, mut bytes: usize) -> usize {
        while undos.len() > self.commits || (bytes > self.bytes && !undos.is_empty()) {
            if let Some(undo) = undos.pop_front() {
                bytes -= undo.bytes();
            }
        }
        bytes
    }

    /// Whether a commit's `undo` fits at all: one that does not would be
    /// dropped as it is kept, so no record of it is written.
    pub(crate) fn holds(&self, undo: &Undo) -> bool {
        self.commits > 0 && undo.bytes() <= self.bytes
    }
}

/// The chain a store's history records rebuild at open, fed one record at a
/// time, oldest first, and kept within the window as it goes: open holds the
/// window's undos and one record, in time linear in the records.
pub(crate) struct Replay {
    undos: VecDeque<Arc<Undo>>,
    bytes: usize,
    window: Window,
}

impl Replay {
    pub(crate) fn new(window: Window) -> Replay {
        Replay {
            undos: VecDeque::new(),
            bytes: 0,
            window,
        }
    }

    /// Applies the record of commit `seqno`.
    pub(crate) fn push(&mut self, seqno: u64, bytes: &[u8]) {
        match decode(seqno, bytes) {
            // The window applies at each step, as it did when they were made.
            Some(Record::Undo(undo)) => {
                self.bytes += undo.bytes();
                self.undos.push_back(Arc::new(undo));
                self.bytes = self.window.fit(&mut self.undos, self.bytes);
            }
            Some(Record::Rollback(dropped)) => {
                for _ in 0..dropped.min(self.undos.len()) {
                    if let Some(undo) = self.undos.pop_back() {
                        self.bytes -= undo.bytes();
                    }
                }
            }
            // Checked but unreadable (another build's, say): a gap, like
            // commits made with no history.
            None => {
                self.undos.clear();
                self.bytes = 0;
            }
        }
    }

    /// The chain behind a head of root `head`: the one the commits that made
    /// the records left, if the window has not changed since. Undos that do
    /// not link up to the head (history was off for a while, a commit's undo
    /// outgrew the window, or the file was damaged) are not kept: the
    /// history then reaches back less far, never to a wrong state.
    pub(crate) fn finish(self, head: &Node) -> Chain {
        let mut undos = self.undos;
        let mut expected = *head;
        let linked = undos
            .iter()
            .rev()
            .take_while(|undo| {
                let links = undo.root_after == expected;
                expected = undo.root_before;
                links
            })
            .count();
        undos.drain(..undos.len() - linked);
        Chain(Arc::new(undos.into()))
    }
}

/// The retained undos, oldest first; shared, so a reader keeps the chain it
/// began with while commits go on.
#[derive(Clone, Default)]
pub(crate) struct Chain(Arc<Vec<Arc<Undo>>>);

impl Chain {
    /// How many commits back it reaches.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The retained roots, the head's (`head`) first.
    pub(crate) fn roots(&self, head: &Node) -> Vec<Node> {
        std::iter::once(*head)
            .chain(self.0.iter().rev().map(|undo| undo.root_before))
            .collect()
    }

    /// How many commits before the head `root` is (0: the head's own root),
    /// the newest such if it appears more than once.
    pub(crate) fn depth_of(&self, head: &Node, root: &Node) -> Option<usize> {
        self.roots(head).iter().position(|r| r == root)
    }

    /// The newest `depth` undos, oldest first.
    fn newest(&self, depth: usize) -> &[Arc<Undo>] {
        &self.0[self.0.len() - depth.min(self.0.len())..]
    }

    /// The value of `key` `depth` commits back, if a commit since changed
    /// it; `None`: it is the same as at the head.
    pub(crate) fn changed_value(&self, depth: usize, key: &KeyPath) -> Option<Option<&[u8]>> {
        first_named(self.newest(depth), key)
    }

    /// The writes that take the head back `depth` commits: every key the
    /// newest `depth` undos name (of those `wanted` accepts), with its value
    /// there. Sorted by key.
    pub(crate) fn writes_back(
        &self,
        depth: usize,
        wanted: impl Fn(&KeyPath) -> bool,
    ) -> KeyedValues {
        oldest_values(self.newest(depth), &[0; 32], None, wanted)
            .into_iter()
            .collect()
    }

    /// The top pages (levels up to
    /// [`KEPT_PAGE_LEVEL`](super::undo::KEPT_PAGE_LEVEL)) that differ
    /// `depth` commits back, as they were there.
    pub(crate) fn pages_back(&self, depth: usize) -> Vec<PageChange> {
        let mut out = BTreeMap::new();
        for undo in self.newest(depth) {
            for (id, page) in &undo.pages {
                out.entry(*id).or_insert_with(|| page.clone());
            }
        }
        out.into_iter().collect()
    }

    /// The chain after a commit that kept `undo`, within `window`.
    pub(crate) fn pushed(&self, undo: Arc<Undo>, window: Window) -> Chain {
        let mut undos: VecDeque<Arc<Undo>> = self.0.iter().cloned().collect();
        undos.push_back(undo);
        let bytes = undos.iter().map(|undo| undo.bytes()).sum();
        window.fit(&mut undos, bytes);
        Chain(Arc::new(undos.into()))
    }

    /// The chain after a rollback of `depth` commits.
    pub(crate) fn popped(&self, depth: usize) -> Chain {
        let keep = self.0.len().saturating_sub(depth);
        Chain(Arc::new(self.0[..keep].to_vec()))
    }

    /// The oldest commit whose record the store must keep; `next` (the next
    /// commit) if none.
    pub(crate) fn keep_from(&self, next: u64) -> u64 {
        self.0.first().map_or(next, |undo| undo.seqno)
    }

    /// Whether it keeps `undo` (the same one, not an equal one).
    pub(crate) fn holds(&self, undo: &Arc<Undo>) -> bool {
        // Oldest first, one undo per commit: in seqno order.
        self.0
            .binary_search_by_key(&undo.seqno, |u| u.seqno)
            .is_ok_and(|i| Arc::ptr_eq(&self.0[i], undo))
    }

    /// The RAM it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.0.iter().map(|undo| undo.bytes()).sum()
    }
}
