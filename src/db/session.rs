//! Sessions: a block's reads and buffered writes, then its commit.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use super::commit::Prepared;
use super::hint_filter::HintFilter;
use super::history::Head;
use super::overlay::{Base, Overlay};
use super::pending::{Footing, Pending};
use super::prefetch::Hint;
use super::{KeyedValues, Reads, Shared};
use crate::trie::proof::{MultiProof, Witness};
use crate::trie::{hash_value, KeyPath, KeyWords, Node, ValueHash};
use crate::update::Unwritten;
use crate::Error;

/// A finished session: its new root and witness, computed on its base, not yet
/// durable ([`Session::finish`]). Dropping it discards the session's writes.
pub struct Finished {
    shared: Arc<Shared>,
    prepared: Prepared,
    base: Base,
}

impl Finished {
    /// The root the session started from.
    pub fn prev_root(&self) -> Node {
        self.prepared.prev_root()
    }

    /// The root once committed.
    pub fn root(&self) -> Node {
        self.prepared.root
    }

    /// Proof of every key the session read or wrote against
    /// [`Finished::prev_root`], and its writes.
    pub fn witness(&self) -> &Witness {
        &self.prepared.witness
    }

    /// Makes the session's writes durable, after the uncommitted overlays it
    /// was built on, in order; on return they survive any crash.
    ///
    /// Fails with [`Error::StaleSession`], changing nothing of its own, if the
    /// committed root is no longer the one it was built on; with
    /// [`Error::AncestorFailed`], changing nothing of its own, if committing
    /// an uncommitted overlay it builds on failed; see
    /// [`Error::CommitDurable`] and [`Error::CommitInDoubt`] for what other
    /// errors mean.
    pub fn commit(self) -> Result<CommitOutput, Error> {
        self.base.commit_parent()?;
        self.shared.commit_prepared(&self.prepared)?;
        Ok(self.prepared.into_output())
    }

    /// Keeps it in memory, uncommitted, for sessions to build on
    /// ([`crate::Db::begin_session_on`]) and to commit later.
    pub fn into_overlay(self) -> Overlay {
        Overlay::new(self.shared, self.prepared, self.base)
    }
}

/// What [`Session::commit_and_prove`] returns.
#[derive(Clone, Debug)]
pub struct CommitOutput {
    /// The root the session started from.
    pub prev_root: Node,
    /// The root after the commit, now durable.
    pub root: Node,
    /// Proof of every key the session read or wrote against `prev_root`, and
    /// the writes: `witness.verify_update(&prev_root)` yields `root`.
    pub witness: Witness,
}

/// One block's worth of work against a fixed root: a snapshot whose reads see
/// the state at [`Session::prev_root`] plus the session's own writes, buffered
/// writes, and hints that start loading what a key's commit will need.
/// `Send + Sync`: execution threads may share it.
///
/// While a session lives, the old values of keys that later commits change are
/// kept in RAM for it ([`crate::Metrics::retained_version_bytes`]), up to
/// [`crate::Options::snapshot_budget_mib`]; past that its reads fail with
/// [`Error::SnapshotTooOld`]. Drop sessions that are done.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
/// let session = db.begin_session();
/// session.warm_up(&[7; 32]);
/// assert_eq!(session.read(&[7; 32])?, None);
/// session.write([7; 32], Some(vec![1, 2, 3]));
/// assert_eq!(session.read(&[7; 32])?, Some(vec![1, 2, 3]));
/// let out = session.commit_and_prove()?;
/// assert_eq!(out.witness.verify_update(&out.prev_root)?, out.root);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Session {
    shared: Arc<Shared>,
    pub(super) footing: Footing,
    writes: Mutex<BTreeMap<KeyWords, Option<Vec<u8>>>>,
    /// Keys read and the hash of the value each had, if present: each key
    /// once, so a session that reads one key over and over holds one entry.
    reads: Mutex<HashMap<KeyPath, Option<ValueHash>>>,
    /// The keys hinted lately, so a key is sent once: the fetcher's cache
    /// checks for a key cost more than this filter's probe. Of a fixed size.
    hinted: Mutex<HintFilter>,
}

impl Session {
    /// A session on `footing`.
    pub(super) fn new(shared: Arc<Shared>, footing: Footing) -> Session {
        Session {
            footing,
            writes: Mutex::new(BTreeMap::new()),
            reads: Mutex::new(HashMap::new()),
            hinted: Mutex::new(HintFilter::new(shared.options.prefetch_hints)),
            shared,
        }
    }

    /// The root this session started from. On a [`Pending`] session whose
    /// update has not run, it runs it first ([`Pending::finish`]), and fails
    /// as that does.
    pub fn prev_root(&self) -> Result<Node, Error> {
        Ok(self.footing.resolve()?.head.root)
    }

    /// A hint that `key` will be read or written: starts loading the trie pages on
    /// its path and the bucket of its value, unless this session hinted it
    /// lately (among about its last [`crate::Options::prefetch_hints`]
    /// distinct keys; an older one is sent again, which costs the fetcher a
    /// cache check). Reads and writes do not hint: without warning a prefetch can
    /// only start when the read does, and on the device it would slow the
    /// session's own reads more than it would shorten the commit.
    pub fn warm_up(&self, key: &KeyPath) {
        if !self.hinted.lock().insert(key) {
            return;
        }
        let hint = Hint {
            key: *key,
            bucket: true,
        };
        // A hint the full queue dropped is not taken as sent.
        if !self.shared.prefetch(vec![hint]).is_empty() {
            self.hinted.lock().remove(key);
        }
    }

    /// The value of `key`: the session's own write if it made one, else its
    /// value at [`Session::prev_root`] (through the overlays it builds on),
    /// whatever commits land meanwhile (or [`Error::SnapshotTooOld`] once they
    /// replaced more than the snapshot budget holds). The key's proof goes
    /// into the witness.
    pub fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        if let Some(written) = self.writes.lock().get(&KeyWords::new(key)) {
            return Ok(written.clone());
        }
        let value = self.footing.read(&self.shared, key)?;
        // Hashed now, while the value is at hand: the commit then knows the
        // leaf of a key that was read before it was written without reading
        // its bucket again.
        let hash = value.as_deref().map(hash_value);
        self.reads.lock().entry(*key).or_insert(hash);
        Ok(value)
    }

    /// Sets `key` to `value` (`None` deletes) when the session commits; a later
    /// write to the same key replaces this one.
    pub fn write(&self, key: KeyPath, value: Option<Vec<u8>>) {
        self.writes.lock().insert(KeyWords::new(&key), value);
    }

    /// Commits the session's writes atomically and durably, and proves every key
    /// it read or wrote against the root it started from.
    ///
    /// Fails with [`Error::StaleSession`] if another commit landed since the
    /// session began (nothing is written), and with [`Error::ValueTooLarge`] for
    /// a value over [`crate::MAX_VALUE_LEN`] bytes. On an overlay, it is
    /// [`Session::finish`] then [`Finished::commit`].
    pub fn commit_and_prove(self) -> Result<CommitOutput, Error> {
        let Some(head) = self.committed_base() else {
            return self.finish()?.commit();
        };
        let (writes, reads) = self.take();
        self.shared.commit(head, writes, reads, true)
    }

    /// Its base if that is a committed state (no overlay or pending
    /// session in between).
    fn committed_base(&self) -> Option<Head> {
        match &self.footing {
            Footing::Known(base) if base.unwritten.is_none() => Some(base.head),
            _ => None,
        }
    }

    /// The new root and the witness of the session's writes on its base, with
    /// nothing written: what a block producer puts in a header before the
    /// block is durable. [`Finished::commit`] makes it durable.
    ///
    /// Fails with [`Error::StaleSession`] if the committed state is no longer
    /// on the session's base (another commit landed since a session on the
    /// database began; another fork was committed under an overlay), and with
    /// [`Error::ValueTooLarge`] for a value over [`crate::MAX_VALUE_LEN`] bytes.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
    /// let session = db.begin_session();
    /// session.write([7; 32], Some(vec![1]));
    /// let finished = session.finish()?;
    /// let header_root = finished.root(); // before anything is durable
    /// assert_eq!(finished.witness().verify_update(&finished.prev_root())?, header_root);
    /// assert_eq!(finished.commit()?.root, header_root);
    /// assert_eq!(db.root()?, header_root);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finish(self) -> Result<Finished, Error> {
        self.finish_proving(true)
    }

    fn finish_proving(self, prove: bool) -> Result<Finished, Error> {
        let (writes, reads) = self.take();
        let base = self.footing.into_base()?;
        let prepared = self.shared.finish(&base, writes, reads, prove)?;
        Ok(Finished {
            shared: self.shared,
            prepared,
            base,
        })
    }

    /// Ends the session without its trie update: its writes become a
    /// [`Pending`] session that sessions build on at once
    /// ([`crate::Db::begin_session_on_pending`]), and whose update runs when
    /// [`Pending::finish`] or [`Pending::commit`] is called (on any thread)
    /// or a session on it needs its root. So a node executes the next block while this one's root is
    /// computed and written.
    ///
    /// Fails with [`Error::ValueTooLarge`] for a value over
    /// [`crate::MAX_VALUE_LEN`] bytes; a stale base shows when it finishes.
    pub fn into_pending(self) -> Result<Pending, Error> {
        Pending::new(self)
    }

    /// Finishes it into an overlay for [`Pending::commit`]: on a committed
    /// state it commits too, the update overlapping the writes as in
    /// [`Session::commit_and_prove`]; else the overlay is left to commit.
    /// `view` is its writes as a view's values ([`Session::writes_as_view`]).
    pub(super) fn finish_committing(self, view: Unwritten) -> Result<Overlay, Error> {
        let (writes, reads) = self.take();
        let base = self.footing.into_base()?;
        if base.unwritten.is_some() {
            let prepared = self.shared.finish(&base, writes, reads, true)?;
            return Ok(Overlay::new(self.shared, prepared, base));
        }
        let out = self.shared.commit(base.head, writes, reads, true)?;
        Ok(Overlay::of_commit(self.shared, base, out, view))
    }

    /// Its writes as a view's values, each with its hash; fails for a value
    /// too large to commit.
    pub(super) fn writes_as_view(&self) -> Result<Unwritten, Error> {
        let mut view = Unwritten::default();
        for (key, value) in self.writes.lock().iter() {
            crate::check_value_len(value.as_ref().map_or(0, Vec::len))?;
            let entry = value
                .as_ref()
                .map(|v| (hash_value(v), Arc::from(v.as_slice())));
            view.values.insert(key.key(), entry);
        }
        Ok(view)
    }

    /// A multi-proof of `keys` (present or absent) at the session's base root,
    /// [`Session::prev_root`] (its overlays included); its own writes are not
    /// in it.
    ///
    /// Proofs come from the trie's current pages, so once the committed state
    /// has left the session's base this fails with [`Error::StaleSession`],
    /// like committing would.
    pub fn prove(&self, keys: &[KeyPath]) -> Result<MultiProof, Error> {
        self.shared.prove(&*self.footing.resolve()?, keys)
    }

    /// Commits like [`Session::commit_and_prove`], without building a witness;
    /// returns the new root.
    pub fn commit(self) -> Result<Node, Error> {
        let Some(head) = self.committed_base() else {
            return Ok(self.finish_proving(false)?.commit()?.root);
        };
        let (writes, reads) = self.take();
        Ok(self.shared.commit(head, writes, reads, false)?.root)
    }

    /// Entries in the read log.
    #[cfg(test)]
    pub(super) fn reads_logged(&self) -> usize {
        self.reads.lock().len()
    }

    /// The writes, sorted by key, and the reads.
    fn take(&self) -> (KeyedValues, Reads) {
        let writes = std::mem::take(&mut *self.writes.lock());
        let reads = std::mem::take(&mut *self.reads.lock());
        // Room for the written keys too, which a proving commit adds.
        let mut keys = Vec::with_capacity(reads.len() + writes.len());
        keys.extend(reads.keys());
        let mut seen: Vec<(KeyPath, ValueHash)> = Vec::with_capacity(reads.len());
        seen.extend(reads.into_iter().filter_map(|(k, h)| Some((k, h?))));
        seen.sort_unstable_by_key(|e| e.0);
        let writes = writes.into_iter().map(|(k, v)| (k.key(), v)).collect();
        (writes, Reads { keys, seen })
    }
}
