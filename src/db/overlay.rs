//! Overlays: finished sessions kept in memory, uncommitted, that further
//! sessions build on, so a node executes block n+1 while block n is voted on
//! or written, and competing blocks fork from one parent.
//!
//! An overlay keeps its trie update (root, witness, page changes) and its
//! writes. Its view is every change of its uncommitted ancestors and its own,
//! in persistent maps that share structure with the parent's view: building
//! it costs what the overlay changed, and a read probes one map whatever the
//! chain's length. Below the view lies the committed state the chain began on,
//! pinned like a session's base, so reads through an overlay see its state
//! exactly whatever commits land meanwhile (until the old values that takes
//! outgrow [`crate::Options::snapshot_budget_mib`]: then
//! [`Error::SnapshotTooOld`]).
//!
//! Committing an overlay commits its uncommitted ancestors first, in order;
//! each is refused with [`Error::StaleSession`] unless the committed root is
//! its parent's. A trie update on an overlay reads the stores under the view,
//! which is right as long as the committed state lies on the overlay's chain:
//! checked under the writer lock before it runs, and after, for every commit
//! that landed meanwhile (the update runs beside commits, so a pipeline
//! finishes block n+1 while block n commits; if one left the chain, it runs
//! again under the lock).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::commit::{Prepared, UpdateInput};
use super::history::{Head, Pin};
use super::{CommitOutput, Shared};
use super::{KeyedValues, Reads};
use crate::page_store::seal_shared;
use crate::trie::proof::MultiProof;
use crate::trie::proof::Witness;
use crate::trie::{KeyPath, Node};
use crate::update::Unwritten;
use crate::Error;

/// What a session (and what finishing it makes) builds on: a committed state,
/// or an overlay.
pub(super) struct Base {
    /// The state the session sees before its own writes.
    pub(super) head: Head,
    /// The committed state under `unwritten`; pinned.
    pub(super) below: Head,
    pin: Pin,
    /// The overlay `head` is, while it is uncommitted: cut once it commits,
    /// so a pipeline of overlays does not keep its whole history alive.
    parent: Mutex<Option<Overlay>>,
    /// The changes from `below` to `head`; `None` when they are the same.
    pub(super) unwritten: Option<Unwritten>,
    /// Overlays whose changes `unwritten` holds.
    covers: usize,
}

impl Base {
    /// The committed head.
    pub(super) fn committed(shared: &Arc<Shared>) -> Base {
        let (pin, head) = Pin::head(&shared.snapshots);
        Base {
            head,
            below: head,
            pin,
            parent: Mutex::new(None),
            unwritten: None,
            covers: 0,
        }
    }

    /// The same state, pinned again, for another session.
    pub(super) fn duplicate(&self) -> Base {
        Base {
            head: self.head,
            below: self.below,
            pin: self.pin.again(),
            parent: Mutex::new(self.parent()),
            unwritten: self.unwritten.clone(),
            covers: self.covers,
        }
    }

    /// The uncommitted overlay it builds on, if any.
    pub(super) fn parent(&self) -> Option<Overlay> {
        self.parent.lock().clone()
    }

    /// Commits the uncommitted overlay it builds on, if any; its failure is
    /// reported as an ancestor's ([`Error::AncestorFailed`]).
    pub(super) fn commit_parent(&self) -> Result<(), Error> {
        match self.parent() {
            Some(parent) => parent
                .commit()
                .map(drop)
                .map_err(|e| e.of_ancestor(parent.root())),
            None => Ok(()),
        }
    }

    /// `overlay`'s state.
    pub(super) fn on(overlay: &Overlay) -> Base {
        let node = &overlay.node;
        let shared = &node.shared;
        if node.committed.load(Ordering::SeqCst) {
            // Its state is in the store: read there, pinned. The overlay's
            // own pin keeps it readable.
            return Base {
                head: node.head,
                below: node.head,
                pin: Pin::at(&shared.snapshots, node.head.seqno),
                parent: Mutex::new(None),
                unwritten: None,
                covers: 0,
            };
        }
        // The chain still uncommitted, newest first. The overlay's view
        // covers it (commits only take ancestors off its bottom); rebuilt
        // without those, so their changes are not held twice.
        let mut live = vec![overlay.clone()];
        while let Some(parent) = live.last().and_then(|o| o.node.base.parent()) {
            if parent.node.committed.load(Ordering::SeqCst) {
                break;
            }
            live.push(parent);
        }
        let oldest = &live[live.len() - 1].node;
        let below = oldest.base.head;
        let unwritten = if live.len() == 1 + node.base.covers {
            node.view.clone()
        } else {
            let mut view = Unwritten::default();
            for o in live.iter().rev() {
                view.extend(&o.node.own);
            }
            view
        };
        Base {
            head: node.head,
            below,
            pin: Pin::at(&shared.snapshots, below.seqno),
            parent: Mutex::new(Some(overlay.clone())),
            unwritten: Some(unwritten),
            covers: live.len(),
        }
    }

    /// Whether the stores, at committed state `now`, under `unwritten` show
    /// exactly `head`: `now` must be `below`, `head` itself, or a state on the
    /// chain between them (the same root at the same height is the same
    /// state, whichever fork committed it).
    pub(super) fn sees(&self, now: Head) -> bool {
        if now == self.head || now == self.below {
            return true;
        }
        let mut next = self.parent();
        while let Some(o) = next {
            if o.node.head == now {
                return true;
            }
            next = o.node.base.parent();
        }
        false
    }

    /// The value of `key` at `head`.
    pub(super) fn read(&self, shared: &Shared, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        read_through(self.unwritten.as_ref(), shared, self.pin.seqno(), key)
    }
}

/// The value of `key` in `unwritten` if it changes it, else at commit `pinned`.
fn read_through(
    unwritten: Option<&Unwritten>,
    shared: &Shared,
    pinned: u64,
    key: &KeyPath,
) -> Result<Option<Vec<u8>>, Error> {
    // The view answers from RAM, but a poisoned handle answers nothing.
    shared.store.check_usable()?;
    if let Some(value) = unwritten.and_then(|u| u.values.get(key)) {
        return Ok(value.as_ref().map(|(_, v)| v.to_vec()));
    }
    shared.read_pinned(pinned, key)
}

/// A finished session kept in memory, uncommitted: its root and witness, what
/// it reads, and sessions built on it ([`crate::Db::begin_session_on`]). Cheap
/// to clone; `Send + Sync`. Dropping every clone (and every session and
/// overlay built on it) discards it and frees its memory.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
/// let block = db.begin_session();
/// block.write([1; 32], Some(vec![1]));
/// let parent = block.finish()?.into_overlay();
/// // Two competing children of the same parent.
/// let a = db.begin_session_on(&parent);
/// a.write([2; 32], Some(vec![2]));
/// let a = a.finish()?.into_overlay();
/// let b = db.begin_session_on(&parent);
/// b.write([2; 32], Some(vec![3]));
/// let b = b.finish()?.into_overlay();
/// assert_eq!(b.read(&[1; 32])?, Some(vec![1]));
/// a.commit()?; // the parent first, then `a`
/// assert_eq!(db.root()?, a.root());
/// assert!(matches!(b.commit(), Err(pagetrie::Error::StaleSession)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Overlay {
    node: Arc<OverlayNode>,
}

struct OverlayNode {
    shared: Arc<Shared>,
    base: Base,
    /// Its state: one commit past its base.
    head: Head,
    witness: Witness,
    /// Its own changes.
    own: Unwritten,
    /// The base's view with its own changes over it.
    view: Unwritten,
    /// The update, until committed (or refused).
    pending: Mutex<Option<Prepared>>,
    committed: AtomicBool,
}

impl Overlay {
    pub(super) fn new(shared: Arc<Shared>, prepared: Prepared, base: Base) -> Overlay {
        let own = prepared.unwritten();
        let mut view = base.unwritten.clone().unwrap_or_default();
        view.extend(&own);
        let (root, witness) = (prepared.root, prepared.witness.clone());
        Overlay::from_parts(shared, base, (root, witness), (own, view), Some(prepared))
    }

    /// A session's commit on `base`, a committed state, as an overlay that
    /// reads its state and that sessions build on: `writes` are the
    /// session's, as a view's values.
    pub(super) fn of_commit(
        shared: Arc<Shared>,
        base: Base,
        out: CommitOutput,
        writes: Unwritten,
    ) -> Overlay {
        let changes = (writes.clone(), writes);
        Overlay::from_parts(shared, base, (out.root, out.witness), changes, None)
    }

    /// One commit past `base`: its root and witness, its own changes and its
    /// view, and its update (`None`: committed).
    fn from_parts(
        shared: Arc<Shared>,
        base: Base,
        (root, witness): (Node, Witness),
        (own, view): (Unwritten, Unwritten),
        pending: Option<Prepared>,
    ) -> Overlay {
        let committed = AtomicBool::new(pending.is_none());
        Overlay {
            node: Arc::new(OverlayNode {
                shared,
                head: Head {
                    seqno: base.head.seqno + 1,
                    root,
                },
                witness,
                base,
                own,
                view,
                pending: Mutex::new(pending),
                committed,
            }),
        }
    }

    /// The root it was built on: its parent's.
    pub fn prev_root(&self) -> Node {
        self.node.base.head.root
    }

    /// Its root.
    pub fn root(&self) -> Node {
        self.node.head.root
    }

    /// Proof of every key its session read or wrote against
    /// [`Overlay::prev_root`], and its writes.
    pub fn witness(&self) -> &Witness {
        &self.node.witness
    }

    /// The value of `key` in its state.
    pub fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        // The view holds the base's changes too: one probe, then the store.
        let node = &self.node;
        read_through(Some(&node.view), &node.shared, node.base.pin.seqno(), key)
    }

    /// Whether it is committed (durable). Once the handle is poisoned
    /// ([`Error::Poisoned`]), that is known only of an overlay whose commit
    /// returned (or failed with [`Error::CommitDurable`]) before: for any
    /// other it fails with `Poisoned`.
    ///
    /// Its state counts as committed once a commit of any fork made the same
    /// root at the same height durable, even if later commits built on it,
    /// as long as the snapshots' undos still reach back to it (they do while
    /// [`crate::Options::snapshot_budget_mib`] keeps them; past it this says
    /// `false`). A state committed and rolled back since counts too: it was
    /// durable.
    pub fn is_committed(&self) -> Result<bool, Error> {
        if self.node.committed.load(Ordering::SeqCst) {
            return Ok(true);
        }
        self.node.shared.store.check_usable()?;
        let mut pending = self.node.pending.lock();
        if self.state_committed() {
            self.committed(&mut pending);
            return Ok(true);
        }
        Ok(false)
    }

    /// Whether a commit, of this overlay or of another fork, made its state
    /// (the same root at the same height) durable: the head, or one of the
    /// heads since the committed state its chain began on.
    fn state_committed(&self) -> bool {
        let head = self.node.head;
        let snapshots = &self.node.shared.snapshots;
        snapshots.head() == head
            || snapshots
                .heads_after(self.node.base.below.seqno)
                .is_some_and(|heads| heads.contains(&head))
    }

    /// Makes it durable, after its uncommitted ancestors, in order, and
    /// returns its root, now the committed one; on return it survives any
    /// crash. Committing it again does nothing, and neither does committing
    /// it once its state was committed by another fork (the same root at the
    /// same height, even if built on since; see [`Overlay::is_committed`]). Like [`crate::Session::commit`],
    /// it returns the root; the witness is [`Overlay::witness`].
    ///
    /// Fails with [`Error::StaleSession`], changing nothing of its own, if the
    /// committed root is no longer its parent's: another fork was committed.
    /// Fails with [`Error::AncestorFailed`], changing nothing of its own, if
    /// committing an uncommitted ancestor failed. Ancestors committed before
    /// the failure stay committed. A commit refused with nothing changed (a
    /// full disk, say) can be tried again, and sessions built on it still
    /// commit after it.
    pub fn commit(&self) -> Result<Node, Error> {
        let root = self.node.head.root;
        let mut pending = self.node.pending.lock();
        if self.node.committed.load(Ordering::SeqCst) {
            return Ok(root);
        }
        let shared = &self.node.shared;
        shared.store.check_usable()?;
        // An identical state is committed (the same root at the same
        // height), maybe built on since: nothing to write.
        if !self.state_committed() {
            self.node.base.commit_parent()?;
            let prepared = pending.as_ref().ok_or(Error::StaleSession)?;
            if let Err(e) = shared.commit_prepared(prepared) {
                // Durable all the same: say so, to every clone.
                if matches!(e, Error::CommitDurable(_)) {
                    self.committed(&mut pending);
                }
                return Err(e);
            }
        }
        self.committed(&mut pending);
        Ok(root)
    }

    /// Marks it committed: its update (`pending`, locked) and its parent are
    /// no longer needed.
    fn committed(&self, pending: &mut Option<Prepared>) {
        self.node.committed.store(true, Ordering::SeqCst);
        pending.take();
        self.node.base.parent.lock().take();
    }

    /// The base of a session on it.
    pub(super) fn base(&self) -> Base {
        Base::on(self)
    }
}

impl std::fmt::Debug for Overlay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overlay")
            .field("seqno", &self.node.head.seqno)
            .field("committed", &self.node.committed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// Updates on a base: a session's finish and its proofs, which run beside
/// commits while the committed state stays on the base's chain.
impl Shared {
    /// Takes the writer lock and checks that the stores show `base`'s state
    /// under its unwritten changes.
    fn writer_seeing(&self, base: &Base) -> Result<MutexGuard<'_, ()>, Error> {
        let writer = self.writer.lock();
        self.store.check_usable()?;
        if !base.sees(self.snapshots.head()) {
            return Err(Error::StaleSession);
        }
        Ok(writer)
    }

    /// The trie update and witness of `writes` on `base`, beside commits: a
    /// commit of an overlay on `base`'s chain changes nothing the update sees
    /// through `base`'s view, so a pipeline's next block is finished while
    /// its parent commits. If any other commit landed meanwhile, the update
    /// runs again under the writer lock.
    pub(super) fn finish(
        &self,
        base: &Base,
        writes: KeyedValues,
        reads: Reads,
        prove: bool,
    ) -> Result<Prepared, Error> {
        let _busy = self.store.io().busy();
        let start = {
            let _writer = self.writer_seeing(base)?;
            self.snapshots.head()
        };
        let workers = self.options.commit_workers;
        let unwritten = base.unwritten.as_ref();
        let input = UpdateInput::new(&writes, reads, prove)?;
        let trie = self.update(base.head, &input, unwritten, workers, None);
        let _writer = self.writer_seeing(base)?;
        let on_chain = |heads: Vec<Head>| heads.into_iter().all(|head| base.sees(head));
        let mut trie = match trie {
            Ok(trie)
                if self
                    .snapshots
                    .heads_after(start.seqno)
                    .is_some_and(on_chain) =>
            {
                trie
            }
            // Dropped first: its page changes are a commit's worth of RAM.
            // A deeper chain whose ancestors committed meanwhile lands here
            // too, since a committed overlay lets go of its parent.
            first => {
                drop(first);
                self.update(base.head, &input, unwritten, workers, None)?
            }
        };
        // A finished block's pages are shared with the overlays built on it.
        seal_shared(&mut trie.pages);
        Ok(Prepared::new(base.head, writes, input.changes, trie, prove))
    }

    /// A multi-proof of `keys` at `base`.
    pub(super) fn prove(&self, base: &Base, keys: &[KeyPath]) -> Result<MultiProof, Error> {
        let _writer = self.writer_seeing(base)?;
        self.prove_locked(base.head, keys, base.unwritten.as_ref())
    }
}
