//! The public API (docs/design.md section 7): [`Db`], [`Session`], their options,
//! metrics and commit output.
//!
//! Owns the order of a commit: check the session is current, update the trie
//! (`update`), plan both stores, commit one batch, publish. May not
//! reach below the stores' crate-visible APIs: what pages and buckets look like
//! is theirs.

mod build_dir;
mod commit;
mod export;
mod hint_filter;
mod history;
mod import;
mod metrics;
mod options;
mod overlay;
mod pending;
mod prefetch;
mod range;
mod restore;
mod session;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};

pub use import::ImportProgress;
pub use metrics::Metrics;
pub use options::Options;
pub use overlay::Overlay;
pub use pending::Pending;
pub use restore::Restore;
pub use session::{CommitOutput, Finished, Session};

use history::{Chain, Head, Replay, Snapshots};
use metrics::CommitTimers;

/// Keys with a value each (`None`: absent or deleted), sorted by key.
pub(crate) type KeyedValues = Vec<(KeyPath, Option<Vec<u8>>)>;

/// What a session read: the keys its witness proves, and the value hash it
/// saw for each present one (sorted by key), which spares the commit a
/// bucket read where the key's leaf is that hash.
#[derive(Default)]
pub(crate) struct Reads {
    pub(crate) keys: Vec<KeyPath>,
    pub(crate) seen: Vec<(KeyPath, crate::trie::ValueHash)>,
}

use crate::page_store::PageStore;
use crate::store::{Store, StoreConfig};
use crate::trie::page::PAGE_SIZE;
use crate::trie::proof::MultiProof;
use crate::trie::{KeyPath, Node};
use crate::value_store::ValueStore;
use crate::Error;

/// An open database: the trie's root, committed state readable from any thread,
/// and sessions that change it.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
/// let session = db.begin_session();
/// session.write([1; 32], Some(b"one".to_vec()));
/// let out = session.commit_and_prove()?;
/// assert_eq!(db.root()?, out.root);
/// assert_eq!(db.read(&[1; 32])?, Some(b"one".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Db {
    shared: Arc<Shared>,
    /// The page fetcher, the cache warmer and the catalog folder.
    threads: Vec<std::thread::JoinHandle<()>>,
}

pub(crate) struct Shared {
    store: Arc<Store>,
    values: ValueStore,
    pages: PageStore,
    options: Options,
    /// The head sessions start from, and the old values their snapshots need.
    snapshots: Arc<Snapshots>,
    /// Held for a whole commit: one writer at a time.
    writer: Mutex<()>,
    /// Whether open indexed the stores from the catalog, without reading
    /// every block.
    opened_from_catalog: bool,
    timers: CommitTimers,
    /// Keys whose pages and bucket to load; `None` once the Db is dropped.
    prefetch: RwLock<Option<Sender<prefetch::Hints>>>,
    /// The hints sent and not yet acted on, bounded.
    hints: prefetch::HintQueue,
    /// Wakes the folder thread after a commit; `None` once the Db is dropped.
    folds: RwLock<Option<Sender<()>>>,
}

impl Db {
    /// Opens the database in `options.path`, creating it if absent and recovering
    /// the last durable commit if the process before stopped mid-commit.
    ///
    /// Fails with [`Error::Locked`] if another handle has it open, and with
    /// [`Error::Corrupt`] (never a panic) if its files are damaged.
    pub fn open(options: Options) -> Result<Db, Error> {
        options.validate()?;
        let started = std::time::Instant::now();
        let config = StoreConfig {
            backend: options.io_backend,
            tuning: options.tuning,
            #[cfg(any(test, feature = "fault-injection"))]
            faults: options.faults.clone(),
        };
        let store = Arc::new(Store::open(&options.path, config)?);
        let values = ValueStore::open(&store, options::mib_bytes(options.value_cache_mib))?;
        let pages = PageStore::open(
            &store,
            options::mib_bytes(options.page_cache_mib) / PAGE_SIZE,
        )?;
        let opened_from_catalog = store.finish_open();
        if options.warm_at_open {
            while pages.warm()? {}
        }
        let (keys_tx, keys_rx) = crossbeam_channel::unbounded();
        let (folds_tx, folds_rx) = crossbeam_channel::bounded(1);
        let meta = store.meta();
        let chain = match options.history {
            // History off: whatever was kept before is dropped, unread.
            0 => {
                store.erase_history()?;
                Chain::default()
            }
            _ => {
                let mut replay = Replay::new(options.history_window());
                store.read_history(|seqno, record| {
                    replay.push(seqno, record);
                    Ok(())
                })?;
                replay.finish(&meta.root)
            }
        };
        let prefetch_hints = options.prefetch_hints;
        let snapshot_budget = options::mib_bytes(options.snapshot_budget_mib);
        let shared = Arc::new(Shared {
            store,
            values,
            pages,
            options,
            snapshots: Arc::new(Snapshots::new(
                Head {
                    seqno: meta.seqno,
                    root: meta.root,
                },
                chain,
                snapshot_budget,
            )),
            writer: Mutex::new(()),
            opened_from_catalog,
            timers: CommitTimers::default(),
            prefetch: RwLock::new(Some(keys_tx)),
            hints: prefetch::HintQueue::new(prefetch_hints),
            folds: RwLock::new(Some(folds_tx)),
        });
        let fetcher = prefetch::start(Arc::downgrade(&shared), keys_rx)?;
        let warmer = prefetch::start_warming(Arc::downgrade(&shared))?;
        let folder = start_folding(Arc::downgrade(&shared), folds_rx)?;
        tracing::info!(
            path = %shared.options.path.display(),
            seqno = meta.seqno,
            from_catalog = opened_from_catalog,
            history = shared.snapshots.retained().history,
            ms = started.elapsed().as_millis() as u64,
            "opened"
        );
        Ok(Db {
            shared,
            threads: vec![fetcher, warmer, folder],
        })
    }

    /// Waits until the page warmer has finished and the fetcher has acted on
    /// every hint sent so far, with all its reads arrived.
    #[cfg(test)]
    pub(crate) fn settle_prefetch(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let warmer = self
            .threads
            .iter()
            .find(|t| t.thread().name() == Some(prefetch::WARM_THREAD));
        while warmer.is_some_and(|t| !t.is_finished()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the warmer never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let (done, arrived) = crossbeam_channel::bounded(1);
        if let Some(keys) = self.shared.prefetch.read().as_ref() {
            keys.send(prefetch::Hints::Barrier(done)).unwrap();
            arrived.recv().unwrap();
        }
    }

    /// The root of the committed trie: the newest commit that sessions begin
    /// on and [`Db::read`] answers from.
    ///
    /// Fails with [`Error::Poisoned`] once a commit has failed: the root on
    /// the disk may then be one this handle never published.
    pub fn root(&self) -> Result<Node, Error> {
        self.shared.store.check_usable()?;
        Ok(self.shared.snapshots.head().root)
    }

    /// The committed value of `key`: at [`Db::root`] as read just before, or at
    /// a commit that landed since. Safe from any thread, also while a commit
    /// runs: it sees the state before or after that commit, never a mix. For
    /// several reads at one root, use a [`Session`].
    pub fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        loop {
            // Unpinned: commits landing during the read may expire its
            // base (`Options::snapshot_budget_mib`); a newer one answers.
            let base = self.shared.snapshots.head().seqno;
            match self.shared.read_pinned(base, key) {
                Err(Error::SnapshotTooOld) => continue,
                read => return read,
            }
        }
    }

    /// A multi-proof of `keys` (present or absent) at the committed root
    /// ([`Db::root`]), as an RPC such as `eth_getProof` needs. Waits for a
    /// commit in progress.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
    /// let session = db.begin_session();
    /// session.write([1; 32], Some(b"one".to_vec()));
    /// session.commit()?;
    /// let proof = db.prove(&[[1; 32], [2; 32]])?;
    /// let verified = proof.verify(&db.root()?)?;
    /// verified.confirm(&[1; 32], Some(&pagetrie::trie::hash_value(b"one")))?;
    /// verified.confirm(&[2; 32], None)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn prove(&self, keys: &[KeyPath]) -> Result<MultiProof, Error> {
        self.shared.prove_head(keys)
    }

    /// A session on the current root. Many may exist; the first to commit wins,
    /// and the others are then refused with [`Error::StaleSession`].
    pub fn begin_session(&self) -> Session {
        let base = overlay::Base::committed(&self.shared);
        Session::new(self.shared.clone(), pending::Footing::Known(base))
    }

    /// A session on `parent`'s state: it reads through `parent` and its
    /// uncommitted ancestors, then the database, and commits after them.
    /// Any number may build on one overlay (competing blocks); the first
    /// committed wins, and the others are refused with
    /// [`Error::StaleSession`].
    pub fn begin_session_on(&self, parent: &Overlay) -> Session {
        Session::new(self.shared.clone(), pending::Footing::Known(parent.base()))
    }

    /// A session on `parent`'s state, before its trie update has run: it
    /// reads through `parent`'s writes and those below it at once; finishing,
    /// committing or proving it, or asking its [`Session::prev_root`], runs
    /// `parent`'s update first unless it ran ([`Pending::finish`]). Fails with
    /// [`Error::PendingFailed`] if that update ran and failed.
    pub fn begin_session_on_pending(&self, parent: &Pending) -> Result<Session, Error> {
        Ok(Session::new(self.shared.clone(), parent.footing()?))
    }

    /// The database's counters.
    pub fn metrics(&self) -> Metrics {
        let s = &self.shared;
        let io = s.store.io();
        let writes = io.counters.writes.load(Ordering::Relaxed);
        let (page_hits, page_misses, pages_prefetched) = s.pages.cache_counts();
        let (value_hits, value_misses, buckets_prefetched) = s.values.cache_counts();
        let retained = s.snapshots.retained();
        let (hints_queued, hints_dropped) = s.hints.counts();
        Metrics {
            reads_issued: io.counters.reads.load(Ordering::Relaxed),
            writes_issued: writes,
            bytes_written: writes * PAGE_SIZE as u64,
            write_runs: io.counters.write_runs.load(Ordering::Relaxed),
            page_cache_hits: page_hits,
            page_cache_misses: page_misses,
            pages_prefetched,
            hints_queued: hints_queued as u64,
            hints_dropped,
            value_cache_hits: value_hits,
            value_cache_misses: value_misses,
            buckets_prefetched,
            commits: s.timers.commits.load(Ordering::Relaxed),
            live_sessions: retained.sessions,
            retained_versions: retained.undos,
            retained_version_bytes: retained.bytes,
            history_commits: retained.history,
            history_bytes: retained.history_bytes,
            commit_trie_ns: s.timers.trie_ns.load(Ordering::Relaxed),
            witness_bytes: s.timers.witness_bytes.load(Ordering::Relaxed),
            blocks_moved: s.timers.blocks_moved.load(Ordering::Relaxed),
            blocks_rewritten: s.timers.blocks_rewritten.load(Ordering::Relaxed),
            commit_plan_ns: s.timers.plan_ns.load(Ordering::Relaxed),
            commit_write_ns: s.timers.write_ns.load(Ordering::Relaxed),
            pages_stored: s.pages.len() as u64,
            keys_stored: s.values.len() as u64,
            ram_index_bytes: (s.pages.index_bytes() + s.values.ram_bytes()) as u64,
            buckets: s.values.buckets() as u64,
            direct_io: s.store.is_direct(),
            opened_from_catalog: s.opened_from_catalog,
            io_uring: io.is_uring(),
            io_fallback: io.fallback_reason().map(str::to_owned),
        }
    }
}

#[cfg(feature = "fault-injection")]
impl Db {
    /// Simulates a power loss and closes the handle: what happens to each
    /// write not yet synced is up to `loss`. The plan fails every write and
    /// sync from then on, until [`crate::faults::Faults::clear`]. Does
    /// nothing to a database opened without [`Options::faults`].
    pub fn lose_power(mut self, loss: crate::faults::PowerLoss) -> Result<(), Error> {
        let Some(faults) = self.shared.options.faults.clone() else {
            return Ok(());
        };
        let files = self.shared.store.files()?;
        // The power goes first: a fold or trim the folder thread is running
        // fails at its next write or sync, as it would stop, instead of
        // writing after the loss.
        faults.cut_power();
        self.stop_threads();
        faults.lose_power(&files, loss)?;
        Ok(())
    }
}

#[cfg(test)]
impl Db {
    /// The stores, for tests that check what a commit left in them.
    pub(crate) fn parts(&self) -> (&Store, &PageStore, &ValueStore) {
        (&self.shared.store, &self.shared.pages, &self.shared.values)
    }
}

impl Db {
    /// Stops the fetcher, the warmer and the folder.
    fn stop_threads(&mut self) {
        self.shared.prefetch.write().take();
        // A fold asked for still runs, then the folder stops.
        self.shared.folds.write().take();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Db {
    /// Stops the fetcher, the warmer and the folder before the files close, so that the
    /// directory is free to reopen once the Db and its sessions are gone.
    fn drop(&mut self) {
        self.stop_threads();
    }
}

impl Shared {
    /// The value of `key` at commit `base`, which a pin keeps readable.
    fn read_pinned(&self, base: u64, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        // The store first: whatever commit it shows, the undos of every
        // commit up to it are installed by then.
        let current = self.values.get(key)?;
        self.snapshots.resolve(base, key, current)
    }

    /// Starts loading what reading or writing the hinted keys will need;
    /// returns those dropped because the queue was full
    /// ([`crate::Options::prefetch_hints`]), which the session may hint again.
    fn prefetch(&self, hints: Vec<prefetch::Hint>) -> Vec<prefetch::Hint> {
        let sender = self.prefetch.read();
        // Closing: nothing will act on hints, now or later.
        let Some(keys) = sender.as_ref() else {
            return Vec::new();
        };
        let (taken, dropped) = self.hints.admit(hints);
        let n = taken.len();
        // The fetcher is gone: nothing will act on them.
        if n > 0 && keys.send(prefetch::Hints::Session(taken)).is_err() {
            self.hints.release(n);
        }
        dropped
    }

    /// [`Shared::prefetch`] for one operation's many keys (a rollback, a
    /// proof back): served after sessions' hints, and dropped for the next
    /// such batch.
    fn prefetch_bulk(&self, hints: Vec<prefetch::Hint>) {
        let sender = self.prefetch.read();
        if let Some(keys) = sender.as_ref() {
            // Always sent, if only to end the batch before it.
            let _ = keys.send(prefetch::Hints::Bulk(self.hints.cut_bulk(hints)));
        }
    }
}

/// Starts the thread that, after each commit, reads in the blocks the next
/// commit's cleaning moves, and folds the catalog's log into a new snapshot
/// when it has grown enough, off the committing thread: a fold (about half a second
/// at 2^24 accounts) then overlaps the next block's execution. It holds the
/// store's commit lock as a fold on the committing thread did, so a commit
/// that comes first waits for it. It stops when the Db closes.
fn start_folding(
    shared: std::sync::Weak<Shared>,
    folds: crossbeam_channel::Receiver<()>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("pagetrie-fold".into())
        .spawn(move || {
            for () in folds.iter() {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                // The blocks the next commit's cleaning moves, read beside
                // the next block's execution; an error here meets that
                // commit's own read of them.
                let _ = shared.pages.load_victims();
                shared.values.load_victims();
                shared.store.maybe_fold();
            }
        })
}

impl Shared {
    /// Asks the folder thread to fold the catalog if it is due, or folds
    /// here without [`Options::fold_in_background`].
    fn fold_later(&self) {
        if !self.options.fold_in_background {
            self.store.maybe_fold();
            return;
        }
        let asked = match self.folds.read().as_ref() {
            // Full: a fold is already asked for.
            Some(folds) => !matches!(
                folds.try_send(()),
                Err(crossbeam_channel::TrySendError::Disconnected(()))
            ),
            None => false,
        };
        // Closed, or the folder is gone: fold here.
        if !asked {
            self.store.maybe_fold();
        }
    }
}
