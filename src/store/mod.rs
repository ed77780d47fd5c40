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
//! Owns files, the lock, the I/O engine, which slots are used, the commit
//! protocol and the two logs commits append to (the catalog's and the
//! history). Knows nothing of what pages and buckets mean: the page store and
//! value store build on it.
//!
//! By concern: [`batch`] what a commit hands over, [`persist`] the commit protocol,
//! [`recovery`] open's choice of the durable commit, [`reads`] block reads,
//! [`record_log`] the logs, [`catalog`] and [`history_log`] what is kept in them,
//! [`config`] how a store is opened.

mod batch;
mod catalog;
mod chained_sum;
mod config;
mod framing;
mod history_log;
mod meta;
mod persist;
mod placement;
mod published;
mod reads;
mod record_log;
mod recovery;
mod slot_map;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub(crate) use batch::{slot_number, stored_slot, Batch, BlockWrite, LastSize, Target, TARGETS};
pub(crate) use catalog::{Catalog, Notes};
pub(crate) use config::{default_backend, StoreConfig, Tuning};
pub(crate) use meta::Meta;
pub(crate) use placement::{Placement, SlotSpace, Stream};
pub(crate) use published::Published;
pub(crate) use reads::Fetches;

use slot_map::SlotMap;

use crate::io::{create_dir_durable, DataFile, Dir, DirLock, Io};
use crate::Error;

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
    /// Bytes of notes and places of writes the last committed batch held.
    last_notes: LastSize,
    last_places: LastSize,
    poisoned: AtomicBool,
    dir: Dir,
    /// The catalog: its log and its upkeep.
    catalog: Mutex<catalog::Keeper>,
    /// Where commits append their history records.
    history: Mutex<history_log::HistoryLog>,
    tuning: Tuning,
    _lock: DirLock,
}

const MAP_FILES: [&str; 2] = ["slots0", "slots1"];

impl Store {
    /// Opens (creating if absent) the database in `dir`, recovering the last durable
    /// commit.
    pub(crate) fn open(path: &Path, config: StoreConfig) -> Result<Store, Error> {
        recovery::refuse_older_format(path)?;
        create_dir_durable(path)?;
        let lock = DirLock::acquire(path)?;
        let dir = Dir::new(path);
        #[cfg(any(test, feature = "fault-injection"))]
        let dir = dir.with_faults(config.faults.clone());
        let meta_file = dir.open("meta")?;
        let maps = [dir.open(MAP_FILES[0])?, dir.open(MAP_FILES[1])?];
        let targets = Target::ALL.map(|t| dir.open(t.file_name()));
        let [pages, buckets, overflow] = targets;
        let targets = [pages?, buckets?, overflow?];
        // New files' names must survive a crash as well as their contents.
        dir.sync()?;
        let io = Io::start(config.backend, Some(lock.fd()))?;
        let durable = recovery::recover(&io, &meta_file, &maps, &targets)?;
        let seed = recovery::random_seed();
        let catalog =
            catalog::Keeper::open(&dir, &durable.meta, &durable.map, seed, &config.tuning)?;
        let history = history_log::open(&dir, durable.meta.seqno)?;
        Ok(Store {
            io,
            targets,
            maps,
            meta_file,
            durable: RwLock::new(durable),
            commit_lock: Mutex::new(()),
            prewrites: Arc::new(AtomicUsize::new(0)),
            last_notes: LastSize::default(),
            last_places: LastSize::default(),
            poisoned: AtomicBool::new(false),
            dir,
            catalog: Mutex::new(catalog),
            history: Mutex::new(history),
            tuning: config.tuning,
            _lock: lock,
        })
    }

    /// How the pages and buckets files place new blocks.
    pub(crate) fn placement(&self) -> Placement {
        self.tuning.placement
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

    /// A handle on every file, for tests that model power loss.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn files(&self) -> Result<Vec<std::fs::File>, Error> {
        let history = self.history.lock().file().clone();
        let log = self.catalog.lock().log.file().clone();
        self.targets
            .iter()
            .chain(&self.maps)
            .chain([&self.meta_file, &log, &history])
            .map(|f| {
                f.raw()
                    .try_clone()
                    .map_err(|e| Error::io("reopening", f.name(), e))
            })
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
