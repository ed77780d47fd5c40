//! The retained roots: reads and proofs at them, and rollback to them.

use std::collections::HashSet;
use std::sync::Arc;

use super::chain::Chain;
use super::snapshots::{Head, Pin};
use super::undo::KEPT_PAGE_LEVEL;
use crate::db::commit::Step;
use crate::db::prefetch::Hint;
use crate::db::{Db, KeyedValues, Reads, Shared};
use crate::page_store::ChangedPage;
use crate::trie::page_id::PageId;
use crate::trie::proof::MultiProof;
use crate::trie::{hash_value, KeyPath, Node};
use crate::update::{update_trie, Change, Unwritten};
use crate::Error;

impl Db {
    /// The retained roots, newest (the committed root, [`Db::root`]) first:
    /// at most [`crate::Options::history`] commits back; fewer after a
    /// rollback, after an open with a longer window than before, or on a
    /// database that has not made that many commits.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()).history(2))?;
    /// let empty = db.root()?;
    /// for i in 1..=3u8 {
    ///     let session = db.begin_session();
    ///     session.write([i; 32], Some(vec![i]));
    ///     session.commit()?;
    /// }
    /// let roots = db.roots()?;
    /// assert_eq!((roots.len(), roots[0]), (3, db.root()?));
    /// assert!(!roots.contains(&empty));
    /// assert_eq!(db.read_at(&roots[2], &[2; 32])?, None);
    /// assert_eq!(db.read_at(&roots[1], &[2; 32])?, Some(vec![2]));
    /// assert_eq!(db.rollback(2)?, roots[2]);
    /// assert_eq!(db.roots()?, roots[2..]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Fails with [`Error::Poisoned`] once a commit has failed: the roots
    /// held in RAM may then no longer be those on the disk.
    pub fn roots(&self) -> Result<Vec<Node>, Error> {
        self.shared.store.check_usable()?;
        let (head, chain) = self.shared.snapshots.head_and_chain();
        Ok(chain.roots(&head.root))
    }

    /// Makes the root `commits` commits back ([`Db::roots`]`[commits]`) the
    /// committed root again and returns it; durable on return. It is a commit
    /// of the old values: sessions and overlays begun before it are refused
    /// at commit ([`Error::StaleSession`]), later commits build on the
    /// restored root, and the commits rolled back are gone from
    /// [`Db::roots`]. A crash leaves the state before or after it, never a
    /// mix.
    ///
    /// Fails with [`Error::RollbackTooFar`], changing nothing, if the history
    /// does not reach that far. `rollback(0)` changes nothing.
    pub fn rollback(&self, commits: usize) -> Result<Node, Error> {
        self.shared.rollback(commits)
    }

    /// The value of `key` in the state whose root is `root`, one of
    /// [`Db::roots`]; [`Error::UnknownRoot`] for any other. Safe from any
    /// thread while commits and rollbacks run.
    pub fn read_at(&self, root: &Node, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        // Also for answers from the undos: a poisoned handle answers nothing.
        self.shared.store.check_usable()?;
        loop {
            let (pin, head, chain) = Pin::head_with_chain(&self.shared.snapshots);
            let value = match chain.depth_of(&head.root, root) {
                None => Err(Error::UnknownRoot),
                Some(depth) => match chain.changed_value(depth, key) {
                    Some(old) => Ok(old.map(<[u8]>::to_vec)),
                    None => self.shared.read_pinned(head.seqno, key),
                },
            };
            drop(pin);
            // Commits that landed meanwhile expired the head it pinned
            // (`Options::snapshot_budget_mib`): again, from the new head.
            if !matches!(value, Err(Error::SnapshotTooOld)) {
                return value;
            }
        }
    }

    /// A multi-proof of `keys` (present or absent) at `root`, one of
    /// [`Db::roots`]; [`Error::UnknownRoot`] for any other.
    ///
    /// The history keeps old values and the trie's top two page levels (its
    /// top 12 levels) as they were, so this recomputes, from the committed
    /// trie, only the subtrees below those that `keys` enter, with the
    /// values changed in them since `root`. A key in a sparse region of the
    /// trie (a subtree with fewer than 20 keys above depth 12, elided rather
    /// than stored as pages) makes it recompute the whole trie at `root`
    /// instead, whose cost grows with every key changed since (figures in
    /// docs/benchmarks.md). It runs beside commits and never holds them back:
    /// a commit that lands during it spoils the attempt, which is made again.
    /// Fails with [`Error::Busy`], changing nothing, if commits landed during
    /// each of a few attempts.
    pub fn prove_at(&self, root: &Node, keys: &[KeyPath]) -> Result<MultiProof, Error> {
        self.shared.store.check_usable()?;
        let mut keys = keys.to_vec();
        keys.sort_unstable();
        keys.dedup();
        for _ in 0..PROOF_BACK_ATTEMPTS {
            // Without the writer lock, a commit landing meanwhile can mix
            // blocks of two states; a proof that verifies against `root`
            // shows its values all the same.
            let (head, chain) = self.shared.snapshots.head_and_chain();
            let proof = self.shared.prove_back(&head, &chain, root, &keys);
            if let Ok(Some(proof)) = proof {
                return Ok(proof);
            }
            // Held only to compare: a commit publishes and moves the head
            // under it, so an unmoved head means no commit spoiled this
            // attempt, and its outcome stands.
            let _writer = self.shared.writer.lock();
            if self.shared.snapshots.head() == head {
                return Err(proof.err().unwrap_or(Error::Internal(
                    "the history does not lead to a retained root",
                )));
            }
        }
        Err(Error::Busy)
    }
}

impl Shared {
    /// See [`Db::rollback`].
    fn rollback(&self, commits: usize) -> Result<Node, Error> {
        let _writer = self.writer.lock();
        self.store.check_usable()?;
        let (head, chain) = self.snapshots.head_and_chain();
        if commits > chain.len() {
            return Err(Error::RollbackTooFar {
                requested: commits,
                retained: chain.len(),
            });
        }
        if commits == 0 {
            return Ok(head.root);
        }
        let target = chain.roots(&head.root)[commits];
        let writes = chain.writes_back(commits, |_| true);
        // The keys' own buckets the commit loads itself.
        self.load_for(&writes, false);
        let workers = self.unloaded_workers();
        let (mut prepared, building) =
            self.prepare_and_plan(head, writes, Reads::default(), false, workers)?;
        if prepared.root != target {
            return Err(Error::Internal(
                "the history does not lead to a retained root",
            ));
        }
        prepared.step = Step::Rollback(commits);
        let pages = std::mem::take(&mut prepared.pages);
        self.apply(&prepared, pages, Some(building))?;
        Ok(prepared.root)
    }

    /// The proof of `keys` (sorted, each once) at `root`, recomputed from
    /// `head` and the changes since (`chain`, the history behind it); `None` if it does not
    /// prove `keys` at `root`. Without the writer lock, that or an error may
    /// mean only that a commit landed meanwhile and mixed two states.
    ///
    /// The top pages come from the undos as they were at `root`; below them,
    /// only the subtrees the keys' paths enter are recomputed, from the head
    /// and the values changed under them since. If that proof does not
    /// verify (a subtree elided at `root` above the kept pages' reach draws
    /// on keys outside those subtrees), the whole trie at `root` is
    /// recomputed instead.
    fn prove_back(
        &self,
        head: &Head,
        chain: &Chain,
        root: &Node,
        keys: &[KeyPath],
    ) -> Result<Option<MultiProof>, Error> {
        let head = *head;
        let depth = chain.depth_of(&head.root, root).ok_or(Error::UnknownRoot)?;
        let at_root = Head {
            seqno: head.seqno,
            root: *root,
        };
        if depth == 0 {
            let proof = self.prove_locked(head, keys, None)?;
            return Ok(proves(&proof, root, keys).then_some(proof));
        }
        if let Some(proof) = self.prove_over_kept_pages(&head, chain, depth, root, keys)? {
            return Ok(Some(proof));
        }
        let back = self.back_to(&head, &chain.writes_back(depth, |_| true), |_| true)?;
        let proof = self.prove_locked(at_root, keys, Some(&back))?;
        Ok(proves(&proof, root, keys).then_some(proof))
    }

    /// The proof at `root`, `depth` commits before `head`, from the top
    /// pages the undos kept and the subtrees below them that `keys` enter,
    /// recomputed; `None` if it does not prove them at `root`.
    pub(in crate::db) fn prove_over_kept_pages(
        &self,
        head: &Head,
        chain: &Chain,
        depth: usize,
        root: &Node,
        keys: &[KeyPath],
    ) -> Result<Option<MultiProof>, Error> {
        let entered: HashSet<PageId> = keys
            .iter()
            .map(|key| PageId::on_path(key, KEPT_PAGE_LEVEL + 1))
            .collect();
        let within = |key: &KeyPath| entered.contains(&PageId::on_path(key, KEPT_PAGE_LEVEL + 1));
        let mut back = self.back_to(head, &chain.writes_back(depth, within), |id| {
            id.level() > KEPT_PAGE_LEVEL
        })?;
        for (id, page) in chain.pages_back(depth) {
            back.pages.insert(id, page);
        }
        let at_root = Head {
            seqno: head.seqno,
            root: *root,
        };
        // An elided subtree that draws on keys outside the recomputed ones
        // fails its check here, or gives a proof that does not verify.
        Ok(self
            .prove_locked(at_root, keys, Some(&back))
            .ok()
            .filter(|proof| proves(proof, root, keys)))
    }

    /// The changes that `writes` make to the head, as pages and values over
    /// the stores (like an overlay's), keeping the pages `keep` accepts.
    fn back_to(
        &self,
        head: &Head,
        writes: &KeyedValues,
        keep: impl Fn(&PageId) -> bool,
    ) -> Result<Unwritten, Error> {
        let mut back = Unwritten::default();
        let mut changes: Vec<Change> = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            let value = value
                .as_ref()
                .map(|v| (hash_value(v), Arc::<[u8]>::from(v.as_slice())));
            changes.push((*key, value.as_ref().map(|(hash, _)| *hash)));
            back.values.insert(*key, value);
        }
        self.load_for(&changes, false);
        let workers = self.unloaded_workers();
        let trie = update_trie(self.tree(None), &head.root, &changes, &[], workers, None)?;
        for ChangedPage { id, page, .. } in trie.pages {
            if keep(&id) {
                back.pages.insert(id, page);
            }
        }
        Ok(back)
    }

    /// Threads for a trie update whose blocks no session loaded beforehand:
    /// they wait on the disk more than they hash, so more of them than
    /// CPUs keep more reads in flight (`rollback(10)` at 2^24: the trie
    /// update took 14.8 s on 2 threads, 8.2 s on 16).
    fn unloaded_workers(&self) -> usize {
        self.options.commit_workers.max(UNLOADED_WORKERS)
    }

    /// Starts loading the pages (and with `buckets` the buckets) that
    /// changing `keys` reads, as a session's reads would have: on the
    /// prefetcher's many reads in flight, while the commit reads them one at
    /// a time.
    fn load_for<T>(&self, keys: &[(KeyPath, T)], buckets: bool) {
        let hints = keys.iter().map(|(key, _)| Hint {
            key: *key,
            bucket: buckets,
        });
        self.prefetch_bulk(hints.collect());
    }
}

/// Whether `proof` verifies against `root` and covers every key of `keys`.
fn proves(proof: &MultiProof, root: &Node, keys: &[KeyPath]) -> bool {
    proof
        .verify(root)
        .is_ok_and(|verified| keys.iter().all(|key| verified.get(key).is_ok()))
}

/// See [`Shared::unloaded_workers`].
const UNLOADED_WORKERS: usize = 16;

/// Tries of a proof back before commits landing during each make it give up.
const PROOF_BACK_ATTEMPTS: usize = 4;
