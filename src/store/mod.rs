//! The storage engine's core: the database directory, its files, and the atomic
//! commit of a batch of block writes (docs/design.md section 5).
//!
//! A commit writes every changed block to the WAL and syncs it, writes the meta
//! slot for the new sequence number and syncs it, then writes the blocks in place
//! and syncs those files. Recovery on open replays a WAL that belongs to the
//! durable meta record. Any I/O error on the way poisons the store: it refuses
//! every operation until reopened, and reopening yields the last durable state.
//!
//! Owns files, the lock, the I/O engine and the commit protocol. Knows nothing of
//! what pages and buckets mean: the page store and value store build on it.

mod meta;
mod published;
#[cfg(test)]
mod tests;
mod wal;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

pub(crate) use meta::Meta;
pub(crate) use published::{Published, SlotSpace};
use wal::Place;

/// A WAL file is cut back only when longer than twice the log it receives plus
/// this many blocks (16 MiB).
const WAL_SLACK_BLOCKS: u64 = 4096;

use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{
    create_dir_durable, may_still_land, sync_dir, DataFile, DirLock, Io, IoBackend, Op,
};
use crate::trie::{Node, TERMINATOR};
use crate::Error;

/// Number of files a commit writes in place.
pub(crate) const TARGETS: usize = 3;

/// A file a commit writes in place.
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

    fn from_u8(b: u8) -> Option<Target> {
        Target::ALL.get(b as usize).copied()
    }

    fn file_name(self) -> &'static str {
        match self {
            Target::Pages => "pages",
            Target::Buckets => "buckets",
            Target::Overflow => "overflow",
        }
    }
}

const FREE_MAGIC: &[u8; 8] = b"ptfree\0\0";
const FREE_CHECKSUM: usize = BLOCK_SIZE - 8;

/// The block that marks a slot of a target file free, written by commit `seqno`.
/// Stores rebuild their free lists from these at open.
pub(crate) fn free_mark(seqno: u64) -> BlockBuf {
    let mut b = Block::zeroed();
    b.0[..8].copy_from_slice(FREE_MAGIC);
    b.put_u64(8, seqno);
    let sum = b.checksum(FREE_CHECKSUM);
    b.put_u64(FREE_CHECKSUM, sum);
    b
}

/// Whether `b` is a [`free_mark`].
pub(crate) fn is_free_mark(b: &Block) -> bool {
    &b.0[..8] == FREE_MAGIC && b.u64_at(FREE_CHECKSUM) == b.checksum(FREE_CHECKSUM)
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
    pub(crate) writes: Vec<BlockWrite>,
    /// Each target file's length in blocks after the commit.
    pub(crate) lengths: [u64; TARGETS],
}

/// How to open a store.
pub(crate) struct StoreConfig {
    pub(crate) backend: IoBackend,
    /// Faults injected into every file (forces the thread-pool engine, whose I/O
    /// goes through the files' own methods).
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) faults: Option<Arc<crate::io::faults::Faults>>,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            backend: default_backend(),
            #[cfg(any(test, feature = "fault-injection"))]
            faults: None,
        }
    }
}

/// Tests run on the engine `PAGETRIE_TEST_IO` names (`threads` or `uring`), so CI
/// can run the whole suite on each.
#[cfg(test)]
fn default_backend() -> IoBackend {
    match std::env::var("PAGETRIE_TEST_IO").as_deref() {
        Ok("threads") => IoBackend::ThreadPool,
        Ok("uring") => IoBackend::IoUring,
        _ => IoBackend::Auto,
    }
}

#[cfg(not(test))]
fn default_backend() -> IoBackend {
    IoBackend::Auto
}

/// An open database directory.
pub(crate) struct Store {
    io: Io,
    targets: [Arc<DataFile>; TARGETS],
    /// Commit `n` logs to `wals[n % 2]`, so a commit never overwrites the log of
    /// the one before it: the durable meta record's log is always intact.
    wals: [Arc<DataFile>; 2],
    meta_file: Arc<DataFile>,
    durable: RwLock<Meta>,
    commit_lock: Mutex<()>,
    poisoned: AtomicBool,
    _lock: DirLock,
}

impl Store {
    /// Opens (creating if absent) the database in `dir`, recovering the last durable
    /// commit.
    pub(crate) fn open(dir: &Path, config: StoreConfig) -> Result<Store, Error> {
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
        let wals = [open("wal0")?, open("wal1")?];
        let targets = [
            open(Target::Pages.file_name())?,
            open(Target::Buckets.file_name())?,
            open(Target::Overflow.file_name())?,
        ];
        // New files' names must survive a crash as well as their contents.
        sync_dir(dir)?;
        #[cfg(any(test, feature = "fault-injection"))]
        let backend = match config.faults {
            Some(_) => IoBackend::ThreadPool,
            None => config.backend,
        };
        #[cfg(not(any(test, feature = "fault-injection")))]
        let backend = config.backend;
        let io = Io::start(backend, Some(lock.fd()))?;
        let meta = recover(&io, &meta_file, &wals, &targets)?;
        Ok(Store {
            io,
            targets,
            wals,
            meta_file,
            durable: RwLock::new(meta),
            commit_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            _lock: lock,
        })
    }

    /// The durable state.
    pub(crate) fn meta(&self) -> Meta {
        *self.durable.read()
    }

    /// The I/O engine, for reads that overlap other work.
    pub(crate) fn io(&self) -> &Io {
        &self.io
    }

    /// The file behind `target`.
    pub(crate) fn file(&self, target: Target) -> &Arc<DataFile> {
        &self.targets[target as usize]
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

    /// Makes `batch` the next durable commit: on `Ok` it survives any crash.
    /// On `Err` the store is poisoned (unless the batch was refused before
    /// anything was written), and reopening yields the state before the batch;
    /// except for [`Error::CommitDurable`] (the state after it) and
    /// [`Error::CommitInDoubt`] (either).
    pub(crate) fn commit(&self, batch: Batch) -> Result<Meta, Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        validate(&batch)?;
        // Room for the in-place writes first: a full disk refuses the commit
        // here, with nothing written and the store still usable.
        for t in Target::ALL {
            self.targets[t as usize].reserve(batch.lengths[t as usize])?;
        }
        let result = self.commit_locked(batch);
        if result.is_err() {
            self.poisoned.store(true, Ordering::SeqCst);
        }
        result
    }

    fn commit_locked(&self, mut batch: Batch) -> Result<Meta, Error> {
        // In-place writes run concurrently, so a block written twice keeps only
        // its last write.
        let mut last = std::collections::HashMap::with_capacity(batch.writes.len());
        for (i, w) in batch.writes.iter().enumerate() {
            last.insert((w.target, w.index), i);
        }
        if last.len() < batch.writes.len() {
            let mut i = 0;
            batch.writes.retain(|w| {
                i += 1;
                last[&(w.target, w.index)] == i - 1
            });
        }
        let prev = self.meta();
        let places: Vec<Place> = batch
            .writes
            .iter()
            .map(|w| Place {
                target: w.target,
                index: w.index,
            })
            .collect();
        let commit = Meta {
            seqno: prev.seqno + 1,
            root: batch.root,
            lengths: batch.lengths,
            prev_lengths: prev.lengths,
            ..Meta::default()
        };
        let (meta, log) = wal::encode(
            commit,
            &places,
            batch.writes.into_iter().map(|w| w.block).collect(),
        );
        let headers = log.len() - places.len();
        let wal = &self.wals[meta.slot() as usize];

        // 1. The log, synced: the commit point, since recovery rolls forward
        // to any whole log. If it fails, the log is erased so that the error
        // means "not committed"; only if that fails too is the outcome open.
        let mut returned = match write_log(&self.io, wal, log) {
            Ok(returned) => returned,
            Err(e) => {
                // A log write the engine gave up on may land after the erase.
                let erased = wal.erase().is_ok() && !may_still_land(&e);
                return Err(match erased {
                    true => e,
                    false => Error::CommitInDoubt(Box::new(e)),
                });
            }
        };

        // 2. The meta record, then 3. in place, reusing the blocks the log
        // write handed back; synced before the next commit may overwrite the
        // log. A failure here leaves a durable commit that reopening finishes.
        let durable = |e: Error| Error::CommitDurable(Box::new(e));
        write_meta(&self.io, &self.meta_file, &meta).map_err(durable)?;
        *self.durable.write() = meta;
        let blocks = returned.split_off(headers);
        apply(&self.io, &self.targets, &places, blocks).map_err(durable)?;
        Ok(meta)
    }

    /// Every file, for tests that model power loss.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn files(&self) -> Vec<&DataFile> {
        self.targets
            .iter()
            .chain(&self.wals)
            .chain([&self.meta_file])
            .map(|f| &**f)
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

/// Checks that `batch` stays within the lengths it declares, before anything is
/// written: a violation is a bug above, and must not poison the store.
fn validate(batch: &Batch) -> Result<(), Error> {
    if batch.writes.len() > wal::MAX_RECORDS {
        return Err(Error::CommitTooLarge {
            blocks: batch.writes.len(),
        });
    }
    if batch
        .writes
        .iter()
        .any(|w| w.index >= batch.lengths[w.target as usize])
    {
        return Err(Error::Internal(
            "a commit writes past the lengths it declares",
        ));
    }
    Ok(())
}

/// Writes `log` to the start of `wal` and syncs it; returns the blocks.
///
/// The file held the log of commit n - 1, obsolete since commit n is durable:
/// if it is far longer than this log, it is cut first, or one large commit (an
/// import's) would leave it large forever. Only then: writing past the end of
/// a file takes ext4's slow path, so a log of a usual size overwrites. A lost
/// cut leaves stale blocks past the log's end, which its header excludes.
fn write_log(io: &Io, wal: &Arc<DataFile>, log: Vec<BlockBuf>) -> Result<Vec<BlockBuf>, Error> {
    let needed = log.len() as u64;
    if wal.blocks()? > 2 * needed + WAL_SLACK_BLOCKS {
        wal.shrink_to(needed)?;
    }
    let returned = io.run_all(
        log.into_iter()
            .enumerate()
            .map(|(i, b)| (wal.clone(), Op::Write, (i * BLOCK_SIZE) as u64, b)),
    )?;
    wal.sync()?;
    Ok(returned)
}

/// Writes `meta` to its slot and syncs it.
fn write_meta(io: &Io, meta_file: &Arc<DataFile>, meta: &Meta) -> Result<(), Error> {
    io.run_all([(
        meta_file.clone(),
        Op::Write,
        meta.slot() * BLOCK_SIZE as u64,
        meta.encode(),
    )])?;
    meta_file.sync()?;
    Ok(())
}

/// Writes `blocks` to `places` and syncs every file written.
fn apply(
    io: &Io,
    targets: &[Arc<DataFile>; TARGETS],
    places: &[Place],
    blocks: Vec<BlockBuf>,
) -> Result<(), Error> {
    let offsets = places
        .iter()
        .map(|p| p.index.checked_mul(BLOCK_SIZE as u64))
        .collect::<Option<Vec<u64>>>()
        .ok_or(Error::corrupt("a block index past any file"))?;
    io.run_all(
        places
            .iter()
            .zip(offsets)
            .zip(blocks)
            .map(|((p, offset), b)| (targets[p.target as usize].clone(), Op::Write, offset, b)),
    )?;
    for t in Target::ALL {
        if places.iter().any(|p| p.target == t) {
            targets[t as usize].sync()?;
        }
    }
    Ok(())
}

/// Finds the durable commit and finishes its in-place writes, in case a crash cut
/// them short (replaying writes that landed changes nothing).
///
/// The durable commit is the newest valid meta record, or the commit after it if
/// that one's log is whole: its meta record may have been torn or damaged after its
/// in-place writes began. The chosen record is written and synced again before the
/// replay, so the state recovery builds on is on disk even if the crashed process
/// never saw its own syncs succeed.
fn recover(
    io: &Io,
    meta_file: &Arc<DataFile>,
    wals: &[Arc<DataFile>; 2],
    targets: &[Arc<DataFile>; TARGETS],
) -> Result<Meta, Error> {
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
            for t in targets.iter().chain(wals) {
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
    let next = base.seqno + 1;
    let (meta, log) = match wal::read(io, &wals[(next % 2) as usize], next)? {
        Some(log) if log.meta.prev_lengths == base.lengths => (log.meta, Some(log)),
        _ if base.seqno == 0 => (base, None),
        _ => match wal::read(io, &wals[base.slot() as usize], base.seqno)? {
            Some(log) if log.meta == base => (base, Some(log)),
            _ => {
                let wal = ["wal0", "wal1"][base.slot() as usize];
                return Err(Error::corrupt("the durable commit's log is damaged").at(wal, 0));
            }
        },
    };
    if log.is_some() {
        wals[meta.slot() as usize].sync()?;
    }
    write_meta(io, meta_file, &meta)?;

    // Applying a commit only writes within or past the lengths before it,
    // and never past the lengths after it.
    check_lengths(targets, &meta.prev_lengths)?;
    if let Some(log) = log {
        if let Some(p) = log
            .places
            .iter()
            .find(|p| p.index >= meta.lengths[p.target as usize])
        {
            let wal = ["wal0", "wal1"][meta.slot() as usize];
            return Err(Error::corrupt("the log writes past its commit's lengths").at(wal, p.index));
        }
        apply(io, targets, &log.places, log.blocks)?;
    }
    check_lengths(targets, &meta.lengths)?;
    Ok(meta)
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
