//! The storage engine's core: the database directory, its files, and the atomic
//! commit of a batch of block writes (docs/format.md, "Commit protocol").
//!
//! Commits are copy-on-write: a commit writes its blocks only to slots the
//! durable state does not use, syncs them, then writes and syncs the map of used
//! slots (the commit point) and the meta record. Recovery on open needs no
//! replay: it picks the newest commit whose map is whole. Any I/O error on the
//! way poisons the store: it refuses every operation until reopened, and
//! reopening yields the last durable state.
//!
//! Owns files, the lock, the I/O engine, which slots are used and the commit
//! protocol. Knows nothing of what pages and buckets mean: the page store and
//! value store build on it.

mod catalog;
mod chained_sum;
mod framing;
mod history;
mod meta;
mod published;
mod slot_map;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub(crate) use catalog::{Catalog, Notes};
pub(crate) use meta::Meta;
pub(crate) use published::{Published, SlotSpace};

use slot_map::{SlotMap, SLOTTED};

use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{
    create_dir_durable, may_still_land, sync_dir, DataFile, DirLock, Done, Io, IoBackend, Job, Op,
    Pending,
};
use crate::trie::{Node, TERMINATOR};
use crate::Error;

/// Number of data files a commit writes blocks to.
pub(crate) const TARGETS: usize = 3;

/// A data file a commit writes blocks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum Target {
    /// Trie pages.
    Pages = 0,
    /// Value-store buckets.
    Buckets = 1,
    /// Values too large for a bucket.
    Overflow = 2,
}

impl Target {
    pub(crate) const ALL: [Target; TARGETS] = [Target::Pages, Target::Buckets, Target::Overflow];

    fn file_name(self) -> &'static str {
        match self {
            Target::Pages => "pages",
            Target::Buckets => "buckets",
            Target::Overflow => "overflow",
        }
    }
}

/// Block `index` of a target file as a slot number. Slots are `u32`, so a
/// file of more blocks is full: `FileTooLarge`, never a wrapped number.
pub(crate) fn slot_number(index: u64) -> Result<u32, Error> {
    u32::try_from(index).map_err(|_| Error::Io {
        doing: "growing",
        file: None,
        source: std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            "a data file reached 2^32 blocks",
        ),
    })
}

/// [`slot_number`] for a block found in a file at open, where a number past
/// `u32` can only come from damage.
pub(crate) fn stored_slot(index: u64) -> Result<u32, Error> {
    u32::try_from(index).map_err(|_| Error::corrupt("data file longer than 2^32 blocks"))
}

/// One block a commit writes.
pub(crate) struct BlockWrite {
    pub(crate) target: Target,
    pub(crate) index: u64,
    pub(crate) block: BlockBuf,
}

/// Everything one commit changes.
pub(crate) struct Batch {
    pub(crate) root: Node,
    /// Blocks to write, each to a slot the durable state does not use.
    pub(crate) writes: Vec<BlockWrite>,
    /// Slots of `pages` and `buckets` the durable state uses and the commit
    /// stops using.
    pub(crate) freed: Vec<(Target, u32)>,
    /// Each target file's length in blocks after the commit.
    pub(crate) lengths: [u64; TARGETS],
    /// Writes started before the batch was complete ([`Store::write_early`]).
    pub(crate) early: Option<Prewritten>,
    /// The catalog note of each page and bucket written, so open can index
    /// them without reading them.
    pub(crate) notes: Notes,
    /// The commit's history record, if history is kept (see
    /// [`Store::take_history`]).
    pub(crate) history: Option<Vec<u8>>,
}

/// Block writes started ahead of their commit, so the disk works while the
/// rest of the commit is computed. Dropped without a commit, they are waited
/// for, and the slots they wrote stay free.
pub(crate) struct Prewritten {
    places: Vec<(Target, u64)>,
    /// One per [`Store::write_early`], in order.
    pending: Vec<Pending>,
    /// Prewrites alive in the store: a commit may not run beside one it does
    /// not include, whose writes could land on blocks the commit uses.
    alive: Arc<AtomicUsize>,
}

impl Prewritten {
    /// Waits for every write; the blocks come back in the order of `places`.
    fn wait(&mut self) -> Result<Vec<BlockBuf>, Error> {
        let mut blocks = Vec::with_capacity(self.places.len());
        let mut first_error = None;
        for pending in std::mem::take(&mut self.pending) {
            match pending.wait() {
                Ok(b) => blocks.extend(b),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(blocks), Err)
    }
}

impl Drop for Prewritten {
    fn drop(&mut self) {
        // Waits for the writes first.
        self.pending.clear();
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The blocks a commit wrote, sorted by target and index.
pub(crate) struct Written(Vec<BlockWrite>);

impl Written {
    /// The blocks written to `target`, by slot, ascending. Only for `pages`
    /// and `buckets`, whose slots are u32 by construction.
    pub(crate) fn take(&mut self, target: Target) -> Vec<(u32, BlockBuf)> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|w| w.target == target);
        self.0 = rest;
        mine.into_iter()
            .filter_map(|w| Some((u32::try_from(w.index).ok()?, w.block)))
            .collect()
    }
}

impl Batch {
    /// A commit of root `root` that changes nothing yet, on files of `lengths`.
    pub(crate) fn new(root: Node, lengths: [u64; TARGETS]) -> Batch {
        Batch {
            root,
            writes: Vec::new(),
            freed: Vec::new(),
            lengths,
            early: None,
            notes: Notes::default(),
            history: None,
        }
    }
}

/// How to open a store.
pub(crate) struct StoreConfig {
    pub(crate) backend: IoBackend,
    pub(crate) tuning: Tuning,
    /// Faults injected into every file, beneath either engine.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) faults: Option<Arc<crate::io::faults::Faults>>,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            backend: default_backend(),
            tuning: Tuning::default(),
            #[cfg(any(test, feature = "fault-injection"))]
            faults: None,
        }
    }
}

/// Tests run on the engine `PAGETRIE_TEST_IO` names (`threads` or `uring`), so CI
/// can run the whole suite on each.
#[cfg(test)]
pub(crate) fn default_backend() -> IoBackend {
    match std::env::var("PAGETRIE_TEST_IO").as_deref() {
        Ok("threads") => IoBackend::ThreadPool,
        Ok("uring") => IoBackend::IoUring,
        _ => IoBackend::Auto,
    }
}

#[cfg(not(test))]
pub(crate) fn default_backend() -> IoBackend {
    IoBackend::Auto
}

/// The durable commit and the slots it uses.
#[derive(Clone)]
struct Durable {
    meta: Meta,
    map: SlotMap,
}

/// An open database directory.
pub(crate) struct Store {
    io: Io,
    targets: [Arc<DataFile>; TARGETS],
    /// Commit `n` writes its slot map to `maps[n % 2]`, so a commit never
    /// overwrites the map of the one before it: the durable meta record's map
    /// is always intact.
    maps: [Arc<DataFile>; 2],
    meta_file: Arc<DataFile>,
    durable: RwLock<Durable>,
    commit_lock: Mutex<()>,
    /// Prewrites not yet committed or dropped.
    prewrites: Arc<AtomicUsize>,
    poisoned: AtomicBool,
    dir: PathBuf,
    /// Where commits append their catalog records.
    log: Arc<DataFile>,
    catalog: Mutex<CatalogState>,
    /// Where commits append their history records.
    history: Mutex<history::HistoryLog>,
    tuning: Tuning,
    #[cfg(any(test, feature = "fault-injection"))]
    faults: Option<Arc<crate::io::faults::Faults>>,
    _lock: DirLock,
}

const MAP_FILES: [&str; 2] = ["slots0", "slots1"];

/// When the store rewrites its logs: production values by default, small
/// only in the tests that need folds and trims to happen often.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// Log blocks past which the catalog is folded into a new snapshot, if
    /// the log is also longer than the snapshot: open reads at most about
    /// twice the snapshot.
    pub(crate) fold_blocks: u64,
    /// Dropped history blocks below which the history file is not rewritten.
    pub(crate) trim_blocks: u64,
    /// Blocks a history rewrite copies per batch.
    pub(crate) copy_batch: u64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            fold_blocks: 4096,
            trim_blocks: 16384,
            copy_batch: 256,
        }
    }
}

#[cfg(test)]
impl StoreConfig {
    /// The default engine with [`Tuning::SMALL`]: for the tests of the
    /// store's mechanisms, whose folds and trims must happen, and be cut
    /// by their faults, within a few commits.
    pub(crate) fn small() -> StoreConfig {
        StoreConfig {
            tuning: Tuning::SMALL,
            ..StoreConfig::default()
        }
    }
}

#[cfg(test)]
impl Tuning {
    /// Folds, trims and copies in batches as often as they can happen.
    pub(crate) const SMALL: Tuning = Tuning {
        fold_blocks: 2,
        trim_blocks: 2,
        copy_batch: 3,
    };
}

struct CatalogState {
    /// The seed the stores' fingerprints in the notes are made with.
    seed: u64,
    /// What open found; taken by [`Store::finish_open`].
    found: Option<Arc<Catalog>>,
    /// Whether open found a usable catalog.
    usable: bool,
    /// Notes the stores made by reading every block, when the catalog was
    /// unusable: the next snapshot.
    scanned: Notes,
    snapshot_blocks: u64,
    /// The records since the snapshot, while they fit in RAM.
    recent: catalog::Recent,
    /// Where the next record goes, in blocks.
    log_end: u64,
    /// The log length from which to fold (raised after a failed fold).
    fold_at: u64,
}

impl Store {
    /// Opens (creating if absent) the database in `dir`, recovering the last durable
    /// commit.
    pub(crate) fn open(dir: &Path, config: StoreConfig) -> Result<Store, Error> {
        refuse_older_format(dir)?;
        create_dir_durable(dir)?;
        let lock = DirLock::acquire(dir)?;
        let open = |name: &str| -> Result<Arc<DataFile>, Error> {
            #[allow(unused_mut)]
            let mut file = DataFile::open(&dir.join(name))?;
            #[cfg(any(test, feature = "fault-injection"))]
            {
                file.faults = config.faults.clone();
            }
            Ok(Arc::new(file))
        };
        let meta_file = open("meta")?;
        let maps = [open(MAP_FILES[0])?, open(MAP_FILES[1])?];
        let targets = [
            open(Target::Pages.file_name())?,
            open(Target::Buckets.file_name())?,
            open(Target::Overflow.file_name())?,
        ];
        // New files' names must survive a crash as well as their contents.
        sync_dir(dir)?;
        let io = Io::start(config.backend, Some(lock.fd()))?;
        let durable = recover(&io, &meta_file, &maps, &targets)?;
        let log = open(catalog::LOG)?;
        let found = catalog::load(dir, &log, &durable.meta, &durable.map, random_seed())?;
        let usable = found.catalog.is_some();
        let history = history::load(dir, open(history::FILE)?, durable.meta.seqno)?;
        Ok(Store {
            io,
            targets,
            maps,
            meta_file,
            durable: RwLock::new(durable),
            commit_lock: Mutex::new(()),
            prewrites: Arc::new(AtomicUsize::new(0)),
            poisoned: AtomicBool::new(false),
            dir: dir.to_path_buf(),
            log,
            catalog: Mutex::new(CatalogState {
                seed: found.seed,
                found: found.catalog.map(Arc::new),
                usable,
                scanned: Notes::default(),
                snapshot_blocks: found.snapshot_blocks,
                recent: found.recent,
                log_end: found.log_end,
                fold_at: config.tuning.fold_blocks.max(found.snapshot_blocks),
            }),
            history: Mutex::new(history),
            tuning: config.tuning,
            #[cfg(any(test, feature = "fault-injection"))]
            faults: config.faults.clone(),
            _lock: lock,
        })
    }

    /// The seed of the fingerprints the stores keep in their catalog notes:
    /// drawn when the catalog is made, so nobody can aim keys at one
    /// fingerprint, and kept with it.
    pub(crate) fn seed(&self) -> u64 {
        self.catalog.lock().seed
    }

    /// The notes of every used slot, if open found them all: the stores index
    /// their blocks from these instead of reading them. `None` after
    /// [`Store::finish_open`], or if the stores must read every block (and
    /// hand their notes to [`Store::add_scanned`]).
    pub(crate) fn catalog(&self) -> Option<Arc<Catalog>> {
        self.catalog.lock().found.clone()
    }

    /// Notes a store made by reading its blocks, because there was no catalog.
    pub(crate) fn add_scanned(&self, mut notes: Notes) {
        self.catalog.lock().scanned.append(&mut notes);
    }

    /// Ends the opening of the stores: drops the catalog they read, or, if
    /// they read every block instead, writes their notes as a new snapshot.
    /// Returns whether open used the catalog. A snapshot that cannot be
    /// written only leaves the next open to read every block again.
    pub(crate) fn finish_open(&self) -> bool {
        let _one_at_a_time = self.commit_lock.lock();
        let mut state = self.catalog.lock();
        state.found = None;
        if state.usable {
            return true;
        }
        let scanned = std::mem::take(&mut state.scanned);
        let durable = self.durable.read().clone();
        // Sorted by target and slot, as the next fold streams it.
        let Some(catalog) = catalog::from_scan(scanned, &durable.meta, &durable.map) else {
            return false;
        };
        let source = catalog::Source::Catalog(&catalog);
        if self
            .replace_snapshot(&mut state, durable.meta.seqno, source)
            .is_ok()
        {
            state.usable = true;
        }
        false
    }

    /// Folds the catalog log into a new snapshot once it has grown past the
    /// snapshot; called between commits. A fold that fails is tried again
    /// once the log has doubled: the log stays valid meanwhile.
    pub(crate) fn maybe_fold(&self) {
        let _one_at_a_time = self.commit_lock.lock();
        let mut state = self.catalog.lock();
        if state.log_end <= state.fold_at || !state.usable || self.check_usable().is_err() {
            return;
        }
        let durable = self.durable.read().clone();
        // The snapshot streams into the new one, with the records since it
        // from RAM, else from the log.
        let base = state.recent.base;
        let payloads = match state.recent.payloads.take() {
            Some(payloads) => Some(payloads),
            None => catalog::records_since(&self.dir, base, durable.meta.seqno).map(|p| vec![p]),
        };
        let lengths = SLOTTED.map(|t| durable.meta.lengths[t as usize]);
        if let Some(merge) = payloads.and_then(|p| catalog::Merge::new(base, p, lengths)) {
            let source = catalog::Source::Merge(&merge, &durable.map);
            match self.replace_snapshot(&mut state, durable.meta.seqno, source) {
                Ok(()) => return,
                // Replaced, but the log was not emptied.
                Err(_) if state.recent.base != base => {
                    state.fold_at = state.log_end * 2;
                    return;
                }
                Err(_) => {}
            }
        }
        // A snapshot the merge cannot use (written unsorted by an older
        // build, or damaged), or a write that failed: read back whole, as
        // open reads it.
        let folded = catalog::load(
            &self.dir,
            &self.log,
            &durable.meta,
            &durable.map,
            state.seed,
        )
        .ok()
        .and_then(|found| found.catalog.map(|c| (found.seed, c)));
        let result = match folded {
            Some((seed, c)) if seed == state.seed => {
                self.replace_snapshot(&mut state, durable.meta.seqno, catalog::Source::Catalog(&c))
            }
            // Reading it back discarded it: the next open reads every block.
            _ => {
                state.usable = false;
                state.log_end = 0;
                return;
            }
        };
        if result.is_err() {
            state.fold_at = state.log_end * 2;
        }
    }

    /// The history records open found, oldest first, each with its commit's
    /// seqno: those of every durable commit that wrote one since the file was
    /// last emptied or trimmed. Taken once; later calls return none.
    pub(crate) fn take_history(&self) -> Vec<(u64, Vec<u8>)> {
        std::mem::take(&mut self.history.lock().found)
    }

    /// Drops the history records of commits before `keep_from` when that
    /// shrinks the file enough to pay for rewriting it. Called between
    /// commits; a rewrite that fails leaves the records as they were.
    pub(crate) fn trim_history(&self, keep_from: u64) {
        let _one_at_a_time = self.commit_lock.lock();
        if self.check_usable().is_err() {
            return;
        }
        let open = |path: &Path| -> Result<DataFile, Error> {
            #[allow(unused_mut)]
            let mut file = DataFile::open(path)?;
            #[cfg(any(test, feature = "fault-injection"))]
            {
                file.faults = self.faults.clone();
            }
            Ok(file)
        };
        let _ = self
            .history
            .lock()
            .trim(&self.dir, &self.io, open, keep_from, &self.tuning);
    }

    /// Drops every history record, durably.
    pub(crate) fn erase_history(&self) -> Result<(), Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        self.history.lock().erase()
    }

    /// Writes the snapshot of commit `seqno` from `source` and empties the log.
    fn replace_snapshot(
        &self,
        state: &mut CatalogState,
        seqno: u64,
        source: catalog::Source<'_>,
    ) -> Result<(), Error> {
        #[allow(unused_mut)]
        let mut file = DataFile::open(&catalog::snapshot_path(&self.dir))?;
        #[cfg(any(test, feature = "fault-injection"))]
        {
            file.faults = self.faults.clone();
        }
        let blocks = catalog::write_snapshot(
            &self.dir,
            &self.io,
            Arc::new(file),
            seqno,
            state.seed,
            source,
        )?;
        state.snapshot_blocks = blocks;
        state.fold_at = self.tuning.fold_blocks.max(blocks);
        state.recent.restart(seqno);
        // A crash before this leaves records the snapshot already holds: open
        // skips them.
        self.log.erase()?;
        state.log_end = 0;
        Ok(())
    }

    /// The durable state.
    pub(crate) fn meta(&self) -> Meta {
        self.durable.read().meta
    }

    /// The slots of `target` the durable state uses, ascending.
    pub(crate) fn used_slots(&self, target: Target) -> Vec<u64> {
        self.durable.read().map.used(target)
    }

    /// The slots of `target` the durable state does not use, ascending.
    pub(crate) fn free_slots(&self, target: Target) -> Result<Vec<u32>, Error> {
        let durable = self.durable.read();
        let length = durable.meta.lengths[target as usize];
        durable
            .map
            .free(target, length)
            .into_iter()
            .map(stored_slot)
            .collect()
    }

    /// The I/O engine, for reads that overlap other work.
    pub(crate) fn io(&self) -> &Io {
        &self.io
    }

    /// The file behind `target`.
    pub(crate) fn file(&self, target: Target) -> &Arc<DataFile> {
        &self.targets[target as usize]
    }

    /// Starts reading slot `slot` of `target`: the block arrives on `reply`,
    /// tagged `tag`. For a reader that keeps many reads in flight.
    pub(crate) fn start_read(
        &self,
        target: Target,
        slot: u32,
        tag: u64,
        reply: &crossbeam_channel::Sender<Done>,
    ) {
        self.io.submit(Job {
            file: self.file(target).clone(),
            op: Op::Read,
            offset: slot as u64 * BLOCK_SIZE as u64,
            block: Block::for_read(),
            tag,
            reply: reply.clone(),
        });
    }

    /// Whether the data files bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.file(Target::Pages).is_direct()
    }

    /// Reads block `index` of `target` and waits for it.
    pub(crate) fn read(&self, target: Target, index: u64) -> Result<BlockBuf, Error> {
        self.check_usable()?;
        self.io.read(self.file(target), index * BLOCK_SIZE as u64)
    }

    /// Reads blocks `indices` of `target` concurrently, returned in the same order.
    pub(crate) fn read_blocks(
        &self,
        target: Target,
        indices: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<BlockBuf>, Error> {
        self.check_usable()?;
        let file = self.file(target);
        self.io.run_all(indices.into_iter().map(|i| {
            (
                file.clone(),
                Op::Read,
                i * BLOCK_SIZE as u64,
                Block::for_read(),
            )
        }))
    }

    /// Starts the writes staged in `batch` so far, ahead of its commit, so
    /// the disk works while the rest of the commit is computed; they move to
    /// [`Batch::early`], and later calls add to them. Each must go to a slot
    /// the durable state does not use, inside `batch.lengths` (room for which
    /// is reserved now). Nothing is durable, or poisoned, by this alone.
    pub(crate) fn write_early(&self, batch: &mut Batch) -> Result<(), Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        let mut writes = std::mem::take(&mut batch.writes);
        keep_last_writes(&mut writes);
        let places: Vec<(Target, u64)> = writes.iter().map(|w| (w.target, w.index)).collect();
        check_writes(&places, &batch.lengths, &self.durable.read().map)?;
        for t in Target::ALL {
            self.targets[t as usize].reserve(batch.lengths[t as usize])?;
        }
        let (places, pending) = self.start_writes(writes)?;
        let early = batch.early.get_or_insert_with(|| {
            self.prewrites.fetch_add(1, Ordering::SeqCst);
            Prewritten {
                places: Vec::new(),
                pending: Vec::new(),
                alive: self.prewrites.clone(),
            }
        });
        early.places.extend(places);
        early.pending.push(pending);
        Ok(())
    }

    /// Submits `writes` in file order, so neighbours can merge.
    fn start_writes(
        &self,
        mut writes: Vec<BlockWrite>,
    ) -> Result<(Vec<(Target, u64)>, Pending), Error> {
        writes.sort_unstable_by_key(|w| (w.target as u8, w.index));
        let offsets = writes
            .iter()
            .map(|w| w.index.checked_mul(BLOCK_SIZE as u64))
            .collect::<Option<Vec<u64>>>()
            .ok_or(Error::Internal("a block index past any file"))?;
        let places = writes.iter().map(|w| (w.target, w.index)).collect();
        let pending = self
            .io
            .start_all(writes.into_iter().zip(offsets).map(|(w, offset)| {
                (
                    self.targets[w.target as usize].clone(),
                    Op::Write,
                    offset,
                    w.block,
                )
            }));
        Ok((places, pending))
    }

    /// Makes `batch` the next durable commit: on `Ok` it survives any crash,
    /// and the blocks written come back for the stores' caches (so a written
    /// block exists once in memory).
    /// On `Err` the store is poisoned (unless the batch was refused before
    /// any block of its own was written: blocks a prewrite wrote lie in free
    /// slots, which nothing uses), and reopening yields the state before the batch;
    /// except for [`Error::CommitDurable`] (the state after it) and
    /// [`Error::CommitInDoubt`] (either).
    pub(crate) fn commit(&self, mut batch: Batch) -> Result<Written, Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        keep_last_writes(&mut batch.writes);
        let early = batch.early.take();
        // Early writes were checked against this same state: every commit
        // since would have been refused beside them.
        if self.prewrites.load(Ordering::SeqCst) != usize::from(early.is_some()) {
            return Err(Error::Internal(
                "a commit beside early writes it does not include",
            ));
        }
        let early_places = early.as_ref().map_or(&[][..], |e| &e.places);
        let places: Vec<(Target, u64)> = early_places
            .iter()
            .copied()
            .chain(batch.writes.iter().map(|w| (w.target, w.index)))
            .collect();
        let (prev, map, (record, payload)) = {
            let durable = self.durable.read();
            let map = validate(&places, &batch.freed, &batch.lengths, &durable.map)?;
            let seqno = durable.meta.seqno + 1;
            let notes = std::mem::take(&mut batch.notes);
            let record = catalog::record(seqno, notes, &places, &durable.map, &map)?;
            (durable.meta, map, record)
        };
        let commit = Meta {
            seqno: prev.seqno + 1,
            root: batch.root,
            lengths: batch.lengths,
            prev_lengths: prev.lengths,
            ..Meta::default()
        };
        let (meta, map_blocks) = slot_map::encode(commit, &map);
        let map_file = &self.maps[meta.slot() as usize];
        // Room for every write first: a full disk refuses the commit here,
        // with nothing committed and the store still usable.
        for t in Target::ALL {
            self.targets[t as usize].reserve(batch.lengths[t as usize])?;
        }
        map_file.reserve(meta.map_blocks)?;
        let history = match batch.history.take() {
            Some(payload) => {
                let blocks = history::HistoryLog::record(meta.seqno, &payload);
                let mut log = self.history.lock();
                log.sync_dir(&self.dir)?;
                log.file.reserve(log.end + blocks.len() as u64)?;
                Some((log.file.clone(), log.end, blocks))
            }
            None => None,
        };
        let history_blocks = history.as_ref().map(|h| h.2.len() as u64);
        let mut catalog_state = self.catalog.lock();
        let log_end = catalog_state.log_end;
        let record_blocks = record.len() as u64;
        self.log.reserve(log_end + record_blocks)?;
        // Past the last refusal: from here the commit lands or poisons.
        catalog_state.recent.push(payload);
        drop(catalog_state);
        let records = std::iter::once((self.log.clone(), log_end, record))
            .chain(history)
            .collect();
        let result = self.commit_locked(batch.writes, early, records, &meta, map_file, map_blocks);
        match result {
            Ok(_) => {
                *self.durable.write() = Durable { meta, map };
                self.catalog.lock().log_end = log_end + record_blocks;
                if let Some(blocks) = history_blocks {
                    self.history.lock().appended(meta.seqno, blocks);
                }
            }
            Err(_) => self.poisoned.store(true, Ordering::SeqCst),
        }
        result
    }

    fn commit_locked(
        &self,
        writes: Vec<BlockWrite>,
        early: Option<Prewritten>,
        records: Vec<LogRecord>,
        meta: &Meta,
        map_file: &Arc<DataFile>,
        map_blocks: Vec<BlockBuf>,
    ) -> Result<Written, Error> {
        // 1. The blocks, to slots the durable state does not use (some
        // started early), and the catalog and history records, past their
        // logs' ends; synced before the map names them. A failure here leaves
        // the durable state as it was.
        let logged: Vec<(Arc<DataFile>, Pending)> = records
            .into_iter()
            .map(|(file, first, blocks)| {
                let pending = self
                    .io
                    .start_all(blocks.into_iter().enumerate().map(|(i, b)| {
                        let offset = (first + i as u64) * BLOCK_SIZE as u64;
                        (file.clone(), Op::Write, offset, b)
                    }));
                (file, pending)
            })
            .collect();
        let (mut places, late) = self.start_writes(writes)?;
        let mut blocks = Vec::new();
        if let Some(mut early) = early {
            places.splice(0..0, std::mem::take(&mut early.places));
            blocks = early.wait()?;
        }
        blocks.extend(late.wait()?);
        let files_written: Vec<Target> = Target::ALL
            .into_iter()
            .filter(|t| places.iter().any(|p| p.0 == *t))
            .collect();
        let mut written: Vec<BlockWrite> = places
            .into_iter()
            .zip(blocks)
            .map(|((target, index), block)| BlockWrite {
                target,
                index,
                block,
            })
            .collect();
        written.sort_unstable_by_key(|w| (w.target as u8, w.index));
        let written = Written(written);
        for t in files_written {
            self.targets[t as usize].sync()?;
        }
        for (file, pending) in logged {
            pending.wait()?;
            file.sync()?;
        }

        // 2. The slot map, synced: the commit point, since recovery rolls
        // forward to any whole map. If it fails, the map is erased so that the
        // error means "not committed"; only if that fails too is the outcome
        // open.
        if let Err(e) = write_synced(&self.io, map_file, 0, map_blocks) {
            // A map write the engine gave up on may land after the erase.
            let erased = map_file.erase().is_ok() && !may_still_land(&e);
            return Err(match erased {
                true => e,
                false => Error::CommitInDoubt(Box::new(e)),
            });
        }

        // 3. The meta record. A failure here leaves a durable commit that
        // reopening finds.
        write_meta(&self.io, &self.meta_file, meta)
            .map_err(|e| Error::CommitDurable(Box::new(e)))?;
        Ok(written)
    }

    /// Every file, for tests that model power loss.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn files(&self) -> Vec<Arc<DataFile>> {
        let history = self.history.lock().file.clone();
        self.targets
            .iter()
            .chain(&self.maps)
            .chain([&self.meta_file, &self.log, &history])
            .cloned()
            .collect()
    }

    /// Fails with [`Error::Poisoned`] once a commit has failed: callers must check
    /// this even for answers they could give from memory.
    pub(crate) fn check_usable(&self) -> Result<(), Error> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(Error::Poisoned);
        }
        Ok(())
    }
}

/// A commit's record for a log file: the file, the block it starts at, its
/// blocks.
type LogRecord = (Arc<DataFile>, u64, Vec<BlockBuf>);

/// Writes run concurrently, so a block written twice keeps only its last
/// write.
fn keep_last_writes(writes: &mut Vec<BlockWrite>) {
    let mut last = std::collections::HashMap::with_capacity(writes.len());
    for (i, w) in writes.iter().enumerate() {
        last.insert((w.target, w.index), i);
    }
    if last.len() < writes.len() {
        let mut i = 0;
        writes.retain(|w| {
            i += 1;
            last[&(w.target, w.index)] == i - 1
        });
    }
}

/// Checks a commit's writes (`places`: early and late, each block once) and
/// frees against the durable state's `map` before any of its blocks is
/// written, and returns the map after it. A violation is a bug above and must
/// not poison the store: a write past `lengths`, a file shrunk under used
/// slots, a write over a used slot (the durable state would lose it), a block
/// written twice (both in flight, either could land last), or a free of a slot
/// not in use.
fn validate(
    places: &[(Target, u64)],
    freed: &[(Target, u32)],
    lengths: &[u64; TARGETS],
    map: &SlotMap,
) -> Result<SlotMap, Error> {
    check_writes(places, lengths, map)?;
    let mut after = map.clone();
    for &(target, slot) in freed {
        if !map.is_used(target, slot as u64) {
            return Err(Error::Internal("a commit frees a slot not in use"));
        }
        after.set(target, slot as u64, false);
    }
    for &(target, index) in places {
        after.set(target, index, true);
    }
    Ok(after)
}

/// [`validate`]'s checks of the writes alone, which early writes pass before
/// they start.
fn check_writes(
    places: &[(Target, u64)],
    lengths: &[u64; TARGETS],
    map: &SlotMap,
) -> Result<(), Error> {
    if map.past(lengths) {
        return Err(Error::Internal("a commit shrinks a file under used slots"));
    }
    let mut seen = std::collections::HashSet::with_capacity(places.len());
    for &(target, index) in places {
        if index >= lengths[target as usize] {
            return Err(Error::Internal(
                "a commit writes past the lengths it declares",
            ));
        }
        if map.is_used(target, index) {
            return Err(Error::Internal("a commit overwrites a slot in use"));
        }
        if !seen.insert((target, index)) {
            return Err(Error::Internal("a commit writes a block twice at once"));
        }
    }
    Ok(())
}

/// Writes `blocks` to `file` from block `first` on.
fn write_blocks(
    io: &Io,
    file: &Arc<DataFile>,
    first: u64,
    blocks: Vec<BlockBuf>,
) -> Result<(), Error> {
    io.run_all(blocks.into_iter().enumerate().map(|(i, b)| {
        (
            file.clone(),
            Op::Write,
            (first + i as u64) * BLOCK_SIZE as u64,
            b,
        )
    }))
    .map(drop)
}

/// Writes `blocks` to `file` from block `first` on and syncs it.
fn write_synced(
    io: &Io,
    file: &Arc<DataFile>,
    first: u64,
    blocks: Vec<BlockBuf>,
) -> Result<(), Error> {
    write_blocks(io, file, first, blocks)?;
    file.sync()
}

/// Writes `meta` to its slot and syncs it.
fn write_meta(io: &Io, meta_file: &Arc<DataFile>, meta: &Meta) -> Result<(), Error> {
    write_synced(io, meta_file, meta.slot(), vec![meta.encode()])
}

/// A directory written by format 2 has WAL files: refused before anything in
/// it is opened or created, so it stays exactly as it was.
fn refuse_older_format(dir: &Path) -> Result<(), Error> {
    if dir.join("wal0").exists() || dir.join("wal1").exists() {
        return Err(Error::UnsupportedFormat {
            found: 2,
            supported: meta::VERSION,
        });
    }
    Ok(())
}

/// Finds the durable commit and its slot map.
///
/// The durable commit is the newest valid meta record, or the commit after it
/// if that one's map is whole: its meta record may have been torn or damaged
/// after the map's sync, the commit point. The chosen record is written and
/// synced again, and every file it depends on synced, so the state recovery
/// builds on is on disk even if the crashed process never saw its own syncs
/// succeed.
fn recover(
    io: &Io,
    meta_file: &Arc<DataFile>,
    maps: &[Arc<DataFile>; 2],
    targets: &[Arc<DataFile>; TARGETS],
) -> Result<Durable, Error> {
    let meta_blocks = meta_file.blocks()?;
    let mut slots = [None, None];
    for (i, slot) in slots.iter_mut().enumerate() {
        if (i as u64) < meta_blocks {
            // Only checksum and magic failures (a torn write) are tolerated here.
            *slot = match Meta::decode(&*io.read(meta_file, (i * BLOCK_SIZE) as u64)?) {
                Ok(m) => m,
                Err(Error::Corrupt { .. }) => None,
                Err(e) => return Err(e),
            };
        }
    }
    let base = match Meta::newest(slots)? {
        Some(m) => m,
        None => {
            for t in targets.iter().chain(maps) {
                if t.blocks()? > 0 {
                    return Err(Error::corrupt("data files without a valid meta record"));
                }
            }
            Meta {
                root: TERMINATOR,
                ..Meta::default()
            }
        }
    };
    let next = base
        .seqno
        .checked_add(1)
        .ok_or(Error::corrupt("meta record sequence number at its limit"))?;
    let at = |slot: u64| MAP_FILES[slot as usize];
    let (meta, map) = match slot_map::read(io, &maps[(next % 2) as usize], next)
        .map_err(|e| e.at(at(next % 2), 0))?
    {
        Some((meta, map)) if meta.prev_lengths == base.lengths => (meta, map),
        _ if base.seqno == 0 => (base, SlotMap::default()),
        _ => match slot_map::read(io, &maps[base.slot() as usize], base.seqno)
            .map_err(|e| e.at(at(base.slot()), 0))?
        {
            Some((meta, map)) if meta == base => (base, map),
            _ => {
                return Err(Error::corrupt("the durable commit's slot map is damaged")
                    .at(at(base.slot()), 0))
            }
        },
    };
    check_lengths(targets, &meta.lengths)?;
    // A map of a commit that did not become durable (its erasure may not
    // have been synced) must not come back after a later commit reuses the
    // slots it names.
    let other = &maps[(next % 2) as usize];
    if meta.seqno == base.seqno && other.blocks()? > 0 {
        other.erase()?;
    }
    if meta.seqno > 0 {
        for file in targets.iter().chain([&maps[meta.slot() as usize]]) {
            file.sync()?;
        }
    }
    write_meta(io, meta_file, &meta)?;
    Ok(Durable { meta, map })
}

/// A seed nobody outside the process can predict.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
}

fn check_lengths(
    targets: &[Arc<DataFile>; TARGETS],
    lengths: &[u64; TARGETS],
) -> Result<(), Error> {
    for (t, (target, len)) in targets.iter().zip(Target::ALL.iter().zip(lengths)) {
        if t.blocks()? < *len {
            return Err(
                Error::corrupt("data file shorter than committed").at(target.file_name(), *len)
            );
        }
    }
    Ok(())
}
