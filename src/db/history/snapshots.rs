//! Snapshots: the committed head, the live sessions' bases, and the old values
//! those sessions still need.
//!
//! The stores hold one state, the newest published one. A session pinned to an
//! older commit reads the store and then the undos of the commits after its
//! base: undo `s` holds, for each key commit `s` wrote, its value before `s`
//! (the same [`Undo`] the history keeps, shared). The
//! first undo after the base that names the key has the base's value; if none
//! does, the key has not changed since the base and the store's value is it.
//!
//! An undo is installed before its commit publishes, so a reader that sees the
//! new store state also sees the undo; the head (root and base of new sessions)
//! moves after the publish. An undo is dropped once no live session's base is
//! older than its commit, or, oldest first, once the undos take more than
//! their budget ([`crate::Options::snapshot_budget_mib`]): sessions whose
//! base is older than an undo so dropped fail their next read with
//! [`Error::SnapshotTooOld`] instead of holding RAM without bound.
//!
//! The head moves together with the history's chain ([`Chain`]), so a
//! reader takes the two as one.
//!
//! Owns the head and the sessions' pins, taken and released only through
//! [`Pin`]. Knows nothing of blocks or the trie: it sees keys and values only.

use std::collections::{BTreeMap, VecDeque};

use parking_lot::RwLock;

use std::sync::Arc;

use super::chain::{first_named, oldest_values, Chain};
use super::undo::Undo;
use crate::trie::{KeyPath, Node};
use crate::Error;

/// The newest commit readers can see: where new sessions start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) seqno: u64,
    pub(crate) root: Node,
}

struct SnapshotState {
    head: Head,
    /// The undos that reach back from the head.
    chain: Chain,
    /// Live pins by base seqno, with their counts.
    pins: BTreeMap<u64, usize>,
    /// Oldest first; every undo's commit is newer than the oldest pin's base.
    undos: VecDeque<Arc<Undo>>,
    /// The most `undos` may take.
    budget: usize,
    /// The oldest base the undos still serve: older ones dropped for the
    /// budget.
    floor: u64,
}

/// How much the snapshots hold, for [`crate::Metrics`].
pub(crate) struct Retained {
    pub(crate) sessions: u64,
    /// Undos kept for sessions.
    pub(crate) undos: u64,
    /// What those not in the history take.
    pub(crate) bytes: u64,
    /// Commits the history reaches back, and the RAM it holds.
    pub(crate) history: u64,
    pub(crate) history_bytes: u64,
}

pub(crate) struct Snapshots {
    state: RwLock<SnapshotState>,
}

impl Snapshots {
    /// Snapshots at `head` with the history `chain`, whose sessions' undos
    /// take at most `budget` bytes.
    pub(crate) fn new(head: Head, chain: Chain, budget: usize) -> Snapshots {
        Snapshots {
            state: RwLock::new(SnapshotState {
                head,
                chain,
                pins: BTreeMap::new(),
                undos: VecDeque::new(),
                budget,
                floor: 0,
            }),
        }
    }

    pub(crate) fn head(&self) -> Head {
        self.state.read().head
    }

    /// The head and the chain that reaches back from it.
    pub(crate) fn head_and_chain(&self) -> (Head, Chain) {
        let state = self.state.read();
        (state.head, state.chain.clone())
    }

    /// Pins the head, and returns it with the chain behind it.
    fn pin_head(&self) -> (Head, Chain) {
        let mut state = self.state.write();
        let head = state.head;
        *state.pins.entry(head.seqno).or_insert(0) += 1;
        (head, state.chain.clone())
    }

    fn pin_at(&self, seqno: u64) {
        *self.state.write().pins.entry(seqno).or_insert(0) += 1;
    }

    fn unpin(&self, base: u64) {
        let mut state = self.state.write();
        if let Some(count) = state.pins.get_mut(&base) {
            *count -= 1;
            if *count == 0 {
                state.pins.remove(&base);
            }
        }
        state.prune();
    }

    /// Records the values a commit replaces (its undo). Call before the
    /// stores publish it.
    pub(crate) fn install(&self, undo: Arc<Undo>) {
        let mut state = self.state.write();
        state.undos.push_back(undo);
        state.prune();
    }

    /// Makes `head` the state new sessions start from, and `chain` the
    /// history behind it. Call after the stores publish it.
    pub(crate) fn advance(&self, head: Head, chain: Chain) {
        let mut state = self.state.write();
        state.head = head;
        state.chain = chain;
        state.prune();
    }

    /// The heads the commits after `seqno` made, oldest first; `None` if the
    /// undo of one of them is gone (dropped for the budget, or no pin kept it).
    pub(crate) fn heads_after(&self, seqno: u64) -> Option<Vec<Head>> {
        let state = self.state.read();
        let newer = state.undos.partition_point(|undo| undo.seqno <= seqno);
        let heads: Vec<Head> = state
            .undos
            .range(newer..)
            .map(|undo| Head {
                seqno: undo.seqno,
                root: undo.root_after,
            })
            .collect();
        // One undo for each commit, each seqno once: a refused commit's undo
        // (installed, never published) fails this too.
        let complete = state.head.seqno.checked_sub(seqno) == Some(heads.len() as u64)
            && heads.iter().zip(seqno + 1..).all(|(h, s)| h.seqno == s)
            && heads.last().is_none_or(|h| *h == state.head);
        complete.then_some(heads)
    }

    /// The value of `key` at commit `base`, given `current`, its value read
    /// from the store just before (at `base` or any later commit).
    pub(crate) fn resolve(
        &self,
        base: u64,
        key: &KeyPath,
        current: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let state = self.state.read();
        state.serves(base)?;
        let newer = state.undos.partition_point(|undo| undo.seqno <= base);
        Ok(match first_named(state.undos.range(newer..), key) {
            Some(old) => old.map(<[u8]>::to_vec),
            None => current,
        })
    }

    /// The values at commit `base` of the keys in `from..to` (no `to`: to the
    /// last key) that commits after `base` changed, in key order. With the
    /// store's entries of that range read just before, at `base` or later,
    /// they give the range at `base`.
    pub(crate) fn changed_in(
        &self,
        base: u64,
        from: &KeyPath,
        to: Option<&KeyPath>,
    ) -> Result<BTreeMap<KeyPath, Option<Vec<u8>>>, Error> {
        let state = self.state.read();
        state.serves(base)?;
        let newer = state.undos.partition_point(|undo| undo.seqno <= base);
        Ok(oldest_values(state.undos.range(newer..), from, to, |_| {
            true
        }))
    }

    pub(crate) fn retained(&self) -> Retained {
        let state = self.state.read();
        Retained {
            sessions: state.pins.values().sum::<usize>() as u64,
            undos: state.undos.len() as u64,
            bytes: state.own_bytes() as u64,
            history: state.chain.len() as u64,
            history_bytes: state.chain.bytes() as u64,
        }
    }
}

/// A pin on a commit: the values at it stay readable while the pin lives.
pub(crate) struct Pin {
    snapshots: Arc<Snapshots>,
    seqno: u64,
}

impl Pin {
    /// The commit it pins.
    pub(crate) fn seqno(&self) -> u64 {
        self.seqno
    }

    /// Pins the committed head.
    pub(crate) fn head(snapshots: &Arc<Snapshots>) -> (Pin, Head) {
        let (pin, head, _) = Pin::head_with_chain(snapshots);
        (pin, head)
    }

    /// Pins the committed head, and returns it with the chain behind it.
    pub(crate) fn head_with_chain(snapshots: &Arc<Snapshots>) -> (Pin, Head, Chain) {
        let (head, chain) = snapshots.pin_head();
        let pin = Pin {
            snapshots: snapshots.clone(),
            seqno: head.seqno,
        };
        (pin, head, chain)
    }

    /// Another pin on the same commit.
    pub(crate) fn again(&self) -> Pin {
        Pin::at(&self.snapshots, self.seqno)
    }

    /// Pins commit `seqno`, which a pin this one outlives must already keep
    /// readable.
    pub(crate) fn at(snapshots: &Arc<Snapshots>, seqno: u64) -> Pin {
        snapshots.pin_at(seqno);
        Pin {
            snapshots: snapshots.clone(),
            seqno,
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.snapshots.unpin(self.seqno);
    }
}

impl SnapshotState {
    /// Drops the undos no pin needs: those of commits at or before both the
    /// oldest pin's base that is not expired and the head (an undo past the
    /// head is being published). Then, while the undos take more than the
    /// budget, the oldest one before the head's: the bases before it expire.
    /// The head commit's own undo stays, so a read that began one commit
    /// before it (`Db::read`, unpinned) still resolves; the budget may be
    /// overshot by that one undo.
    fn prune(&mut self) {
        let oldest = self
            .pins
            .range(self.floor..)
            .next()
            .map_or(u64::MAX, |(&seqno, _)| seqno);
        let keep_after = oldest.min(self.head.seqno);
        while self
            .undos
            .front()
            .is_some_and(|undo| undo.seqno <= keep_after)
        {
            self.undos.pop_front();
        }
        let mut own = self.own_bytes();
        let floor = self.floor;
        while own > self.budget
            && self
                .undos
                .front()
                .is_some_and(|undo| undo.seqno < self.head.seqno)
        {
            if let Some(undo) = self.undos.pop_front() {
                if !self.chain.holds(&undo) {
                    own -= undo.bytes();
                }
                // A base at the dropped commit or after needs none of it.
                self.floor = self.floor.max(undo.seqno);
            }
        }
        // Once for the pins this expired.
        if self.pins.range(floor..self.floor).next().is_some() {
            tracing::warn!(
                floor = self.floor,
                budget_mib = self.budget >> 20,
                "snapshot budget exceeded: sessions, overlays and iterators begun before commit {} now fail with SnapshotTooOld",
                self.floor
            );
        }
    }

    /// Bytes of the undos the budget bounds. Those the history's chain keeps
    /// too cost nothing: they stay in RAM either way, so dropping them would
    /// refuse snapshots whose values are still here. One being installed
    /// (its commit has not advanced the head yet, nor joined the chain)
    /// counts once it has: the history may keep it, and it must not make
    /// older ones go before then.
    fn own_bytes(&self) -> usize {
        self.undos
            .iter()
            .filter(|undo| undo.seqno <= self.head.seqno && !self.chain.holds(undo))
            .map(|undo| undo.bytes())
            .sum()
    }

    /// Whether the undos still take commit `base` back: not if one it needs
    /// was dropped for the budget.
    fn serves(&self, base: u64) -> Result<(), Error> {
        match base < self.floor {
            true => Err(Error::SnapshotTooOld),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u8) -> KeyPath {
        [i; 32]
    }

    fn undo(seqno: u64, before: Vec<(KeyPath, Option<Vec<u8>>)>) -> Arc<Undo> {
        Arc::new(Undo::new(seqno, [0; 32], [0; 32], &before, Vec::new()).unwrap())
    }

    fn head(seqno: u64) -> Head {
        Head {
            seqno,
            root: [seqno as u8; 32],
        }
    }

    #[test]
    fn a_pinned_base_reads_its_values_until_unpinned() {
        let v = Arc::new(Snapshots::new(head(0), Chain::default(), usize::MAX));
        let (pin, base) = Pin::head(&v);
        assert_eq!(base, head(0));
        v.install(undo(1, vec![(key(1), None), (key(2), Some(vec![2]))]));
        // Before and after the publish: the store may show commit 0 or 1.
        assert_eq!(v.resolve(0, &key(1), Some(vec![9])).unwrap(), None);
        v.advance(head(1), Chain::default());
        v.install(undo(
            2,
            vec![(key(1), Some(vec![10])), (key(3), Some(vec![3]))],
        ));
        v.advance(head(2), Chain::default());
        assert_eq!(v.resolve(0, &key(1), Some(vec![11])).unwrap(), None);
        assert_eq!(v.resolve(0, &key(2), None).unwrap(), Some(vec![2]));
        assert_eq!(
            v.resolve(0, &key(3), Some(vec![30])).unwrap(),
            Some(vec![3])
        );
        assert_eq!(
            v.resolve(1, &key(1), Some(vec![11])).unwrap(),
            Some(vec![10])
        );
        assert_eq!(v.resolve(0, &key(4), Some(vec![4])).unwrap(), Some(vec![4]));
        assert_eq!(v.retained().undos, 2);
        drop(pin);
        let r = v.retained();
        assert_eq!((r.sessions, r.undos, r.bytes), (0, 0, 0));
    }

    /// What a finish beside commits checks: every head since it began, or
    /// none if one is not known.
    #[test]
    fn the_heads_since_a_commit_are_known_while_pinned() {
        let v = Arc::new(Snapshots::new(head(0), Chain::default(), usize::MAX));
        let (pin, _) = Pin::head(&v);
        let commit = |seqno: u64, publish: bool| {
            let root = head(seqno).root;
            let u = Undo::new(seqno, [0; 32], root, &vec![(key(1), None)], Vec::new());
            v.install(Arc::new(u.unwrap()));
            if publish {
                v.advance(head(seqno), Chain::default());
            }
        };
        assert_eq!(v.heads_after(0), Some(vec![]));
        commit(1, true);
        commit(2, true);
        assert_eq!(v.heads_after(0), Some(vec![head(1), head(2)]));
        assert_eq!(v.heads_after(1), Some(vec![head(2)]));
        assert_eq!(v.heads_after(2), Some(vec![]));
        // A commit refused after its undo was installed: not known.
        commit(3, false);
        assert_eq!(v.heads_after(2), None);
        drop(pin);
    }

    #[test]
    fn past_the_budget_old_bases_expire_but_never_the_one_before_the_head() {
        // No room at all: every undo the budget may drop goes.
        let v = Arc::new(Snapshots::new(head(0), Chain::default(), 0));
        let (pin, _) = Pin::head(&v);
        v.install(undo(1, vec![(key(1), Some(vec![1]))]));
        v.advance(head(1), Chain::default());
        // The head's own undo stays: a read begun at 0, unpinned or not,
        // still resolves.
        assert_eq!(v.resolve(0, &key(1), None).unwrap(), Some(vec![1]));
        v.install(undo(2, vec![(key(1), Some(vec![2]))]));
        v.advance(head(2), Chain::default());
        assert!(matches!(
            v.resolve(0, &key(1), None),
            Err(Error::SnapshotTooOld)
        ));
        assert_eq!(v.resolve(1, &key(1), None).unwrap(), Some(vec![2]));
        // The expired pin holds nothing past the head's undo.
        assert_eq!(v.retained().undos, 1);
        drop(pin);
        assert_eq!(v.retained().undos, 0);
    }

    #[test]
    fn an_undo_being_published_is_kept_without_pins() {
        let v = Arc::new(Snapshots::new(head(4), Chain::default(), usize::MAX));
        v.install(undo(5, vec![(key(1), Some(vec![1]))]));
        let (pin, _) = Pin::head(&v);
        drop(pin);
        // The head is still 4: a session may yet begin there.
        assert_eq!(v.retained().undos, 1);
        v.advance(head(5), Chain::default());
        assert_eq!(v.retained().undos, 0);
    }
}
