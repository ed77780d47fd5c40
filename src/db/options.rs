//! How to open a database.

use std::path::{Path, PathBuf};

use crate::{Error, IoBackend};

/// `mib` MiB in bytes; [`Options::validate`] has refused counts that overflow.
pub(crate) fn mib_bytes(mib: usize) -> usize {
    mib.saturating_mul(1 << 20)
}

/// Options for [`crate::Db::open`]: a path, then defaults that suit a node.
///
/// ```
/// let options = pagetrie::Options::new("/tmp/state")
///     .commit_workers(4)
///     .page_cache_mib(512)
///     .io_backend(pagetrie::IoBackend::Auto);
/// assert_eq!(options.path(), std::path::Path::new("/tmp/state"));
/// ```
#[derive(Clone)]
pub struct Options {
    pub(crate) path: PathBuf,
    pub(crate) commit_workers: usize,
    pub(crate) import_memory_mib: usize,
    pub(crate) io_backend: IoBackend,
    pub(crate) page_cache_mib: usize,
    pub(crate) value_cache_mib: usize,
    pub(crate) metrics: bool,
    pub(crate) history: usize,
    pub(crate) prefetch_hints: usize,
    pub(crate) history_budget_mib: usize,
    pub(crate) snapshot_budget_mib: usize,
    pub(crate) tuning: crate::store::Tuning,
    pub(crate) fold_in_background: bool,
    pub(crate) warm_at_open: bool,
    pub(crate) slow_commit_threshold: std::time::Duration,
    /// Faults injected into every file, for tests.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) faults: Option<std::sync::Arc<crate::io::faults::Faults>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("path", &self.path)
            .field("commit_workers", &self.commit_workers)
            .field("import_memory_mib", &self.import_memory_mib)
            .field("io_backend", &self.io_backend)
            .field("page_cache_mib", &self.page_cache_mib)
            .field("value_cache_mib", &self.value_cache_mib)
            .field("metrics", &self.metrics)
            .field("history", &self.history)
            .field("prefetch_hints", &self.prefetch_hints)
            .field("history_budget_mib", &self.history_budget_mib)
            .field("snapshot_budget_mib", &self.snapshot_budget_mib)
            .field("catalog_fold_blocks", &self.tuning.fold_blocks)
            .field("history_trim_blocks", &self.tuning.trim_blocks)
            .field("spare_space_percent", &self.tuning.placement.spare_percent)
            .field("region_blocks", &self.tuning.placement.region_slots)
            .field("clean_regions", &self.tuning.placement.cleaning)
            .field("rewrite_gap_blocks", &self.tuning.placement.rewrite_gap)
            .field("fold_in_background", &self.fold_in_background)
            .field("warm_at_open", &self.warm_at_open)
            .field("slow_commit_threshold", &self.slow_commit_threshold)
            .finish()
    }
}

impl Options {
    /// Runs every read, write and sync of the database through `faults`,
    /// on whichever I/O engine it runs. For torture tests.
    #[cfg(feature = "fault-injection")]
    pub fn faults(mut self, faults: std::sync::Arc<crate::faults::Faults>) -> Options {
        self.faults = Some(faults);
        self
    }

    /// Options for the database in directory `path` (created if absent), with
    /// [`Options::default_commit_workers`], the I/O engine chosen automatically, a 1 GiB
    /// page cache, a 256 MiB value cache, 1 GiB for imports, metrics on, a
    /// history of 64 commits and a fifth of the files kept free.
    pub fn new(path: impl AsRef<Path>) -> Options {
        Options {
            path: path.as_ref().to_path_buf(),
            commit_workers: Options::default_commit_workers(),
            import_memory_mib: 1024,
            io_backend: crate::store::default_backend(),
            page_cache_mib: 1024,
            value_cache_mib: 256,
            metrics: true,
            history: 64,
            prefetch_hints: 1 << 16,
            history_budget_mib: 512,
            snapshot_budget_mib: 512,
            tuning: crate::store::Tuning::default(),
            fold_in_background: true,
            warm_at_open: false,
            slow_commit_threshold: std::time::Duration::from_secs(5),
            #[cfg(any(test, feature = "fault-injection"))]
            faults: None,
        }
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Commit workers unless set: two per CPU. The value planner and the I/O
    /// ring run beside them; with one worker per CPU the trie update, the
    /// longer of the two halves of a commit, got half of two CPUs (measured
    /// at 2^24 on two CPUs: the commit took 12% less with four workers than
    /// with two).
    pub fn default_commit_workers() -> usize {
        2 * std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Threads that update the trie during a commit (at least 1: open
    /// refuses 0 with [`crate::Error::InvalidOptions`]).
    pub fn commit_workers(mut self, workers: usize) -> Options {
        self.commit_workers = workers;
        self
    }

    /// RAM [`crate::Db::import`] may use to sort and commit entries, beyond the
    /// caches (default 1024 MiB; at least 1).
    pub fn import_memory_mib(mut self, mib: usize) -> Options {
        self.import_memory_mib = mib;
        self
    }

    /// The I/O engine: [`IoBackend::Auto`] (io_uring, else the thread pool, and
    /// [`crate::Metrics::io_fallback`] says why), or either one forced.
    pub fn io_backend(mut self, backend: IoBackend) -> Options {
        self.io_backend = backend;
        self
    }

    /// RAM for trie pages beyond the three top levels, which are always cached.
    pub fn page_cache_mib(mut self, mib: usize) -> Options {
        self.page_cache_mib = mib;
        self
    }

    /// RAM for value-store buckets and for values too long for a bucket
    /// (contract code, say), in one budget (default 256 MiB): a long value is
    /// cached by its hash at the blocks it takes, if it takes at most a
    /// quarter of the budget.
    pub fn value_cache_mib(mut self, mib: usize) -> Options {
        self.value_cache_mib = mib;
        self
    }

    /// Whether to time commit phases (I/O and cache counters are always kept).
    pub fn metrics(mut self, on: bool) -> Options {
        self.metrics = on;
        self
    }

    /// How many commits before the newest stay readable, provable and
    /// restorable (default 64): [`crate::Db::roots`], [`crate::Db::read_at`],
    /// [`crate::Db::prove_at`] and [`crate::Db::rollback`] reach that far
    /// back. Each commit then also writes the old values of the keys it
    /// writes; 0 keeps no history and writes nothing for it (and open
    /// discards any kept before).
    pub fn history(mut self, commits: usize) -> Options {
        self.history = commits;
        self
    }

    /// RAM the history's old values may take (default 512 MiB): past it the
    /// history keeps fewer commits than [`Options::history`], oldest dropped
    /// first ([`crate::Db::roots`] lists what it reaches). A commit of
    /// millions of keys otherwise keeps an undo of that size for the whole
    /// window. At 2^24 accounts a transfer block's undo takes about 3 MB.
    pub fn history_budget_mib(mut self, mib: usize) -> Options {
        self.history_budget_mib = mib;
        self
    }

    /// RAM the old values kept for live snapshots (sessions, overlays and
    /// iterators that began before later commits) may take (default 512
    /// MiB), beyond those the history keeps anyway ([`Options::history`]:
    /// the two share the values, and count them once). Past it the oldest
    /// kept values are dropped and the snapshots that needed them fail
    /// their next read with
    /// [`crate::Error::SnapshotTooOld`], as MVCC databases do; a snapshot
    /// held across hundreds of blocks otherwise keeps every value they
    /// replaced.
    pub fn snapshot_budget_mib(mut self, mib: usize) -> Options {
        self.snapshot_budget_mib = mib;
        self
    }

    /// The history's bounds: commits and bytes.
    pub(crate) fn history_window(&self) -> super::history::Window {
        super::history::Window {
            commits: self.history,
            bytes: mib_bytes(self.history_budget_mib),
        }
    }

    /// Refuses a value out of range, naming its field: a MiB count whose
    /// bytes do not fit a `usize` (it would wrap to a small budget), or a
    /// zero where something must exist. [`crate::Db::open`] checks this first.
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let mib = [
            ("import_memory_mib", self.import_memory_mib),
            ("page_cache_mib", self.page_cache_mib),
            ("value_cache_mib", self.value_cache_mib),
            ("history_budget_mib", self.history_budget_mib),
            ("snapshot_budget_mib", self.snapshot_budget_mib),
        ];
        for (field, mib) in mib {
            if mib > usize::MAX >> 20 {
                return Err(Error::InvalidOptions {
                    field,
                    reason: "more MiB than the address space holds",
                });
            }
        }
        let at_least_one = [
            ("commit_workers", self.commit_workers as u64),
            ("import_memory_mib", self.import_memory_mib as u64),
            ("catalog_fold_blocks", self.tuning.fold_blocks),
            ("history_trim_blocks", self.tuning.trim_blocks),
            (
                "region_blocks",
                u64::from(self.tuning.placement.region_slots),
            ),
        ];
        for (field, value) in at_least_one {
            if value == 0 {
                return Err(Error::InvalidOptions {
                    field,
                    reason: "must be at least 1",
                });
            }
        }
        if self.tuning.placement.spare_percent > 90 {
            return Err(Error::InvalidOptions {
                field: "spare_space_percent",
                reason: "must be at most 90",
            });
        }
        Ok(())
    }

    /// Prefetch hints ([`crate::Session::warm_up`], rollbacks' and proofs' keys) that
    /// may wait for the prefetcher at once (default 65,536, about 2 MiB);
    /// past that, new hints are dropped ([`crate::Metrics::hints_dropped`]):
    /// a hint only saves a later read, and one that waits behind so many
    /// arrives too late to.
    pub fn prefetch_hints(mut self, hints: usize) -> Options {
        self.prefetch_hints = hints;
        self
    }

    /// Catalog log blocks (4 KiB each) past which the catalog is folded into
    /// a new snapshot, if the log is also longer than the snapshot (default
    /// 4096, at least 1). The catalog lets open skip reading every block;
    /// a smaller value folds more often and keeps open shorter.
    pub fn catalog_fold_blocks(mut self, blocks: u64) -> Options {
        self.tuning.fold_blocks = blocks;
        self
    }

    /// Blocks of history records older than the window that may pile up
    /// before the history file is rewritten without them (default 16384,
    /// at least 1; a rewrite also waits until they are half what is kept).
    pub fn history_trim_blocks(mut self, blocks: u64) -> Options {
        self.tuning.trim_blocks = blocks;
        self
    }

    /// Share of the pages and buckets files, in percent, kept free beside a
    /// commit's writes so that commits write their blocks in runs (default
    /// 20, at most 90). A commit fills wholly free regions
    /// ([`Options::region_blocks`]) first; else, while less than this share
    /// is free, new ones at the end; else the free slots of the regions
    /// after the one the last commit filled, going round the file. A region
    /// is filled again only after all the others, having lost meanwhile the
    /// blocks later commits rewrote, so the spare share means several free
    /// slots in a row where a commit writes, fewer write requests
    /// ([`crate::Metrics::write_runs`]) for the same bytes, and larger
    /// files: at 2^24 accounts, 20 halved the requests and took commits 13
    /// to 19% shorter than 0, for 30% more disk; at 2^27, whose blocks are
    /// rewritten more rarely, commits 5% shorter for 24% more disk.
    /// [`Options::clean_regions`] adds moves for runs of whole regions.
    /// docs/benchmarks.md ("Writes in long runs") has the curve. Placement
    /// only: a database may be reopened with another value; a larger one
    /// grows its files on the next commits, a smaller one leaves them as
    /// large as they are.
    pub fn spare_space_percent(mut self, percent: u8) -> Options {
        self.tuning.placement.spare_percent = percent;
        self
    }

    /// Whether commits keep wholly free regions by moving the live blocks
    /// out of the emptiest ones (off by default; nothing moves without a
    /// [`Options::spare_space_percent`]). On, each commit moves at most as
    /// many blocks as it writes of its own ([`crate::Metrics::blocks_moved`]),
    /// only into free slots outside the regions it empties, and the
    /// commits after it write whole regions: runs of hundreds of blocks
    /// for the moves' bytes, which did not make commits faster on the disk
    /// docs/benchmarks.md measured. Placement only: a database may be
    /// reopened with another value.
    pub fn clean_regions(mut self, on: bool) -> Options {
        self.tuning.placement.cleaning = on;
        self
    }

    /// The longest gap, in blocks, between two pages a commit writes that
    /// it fills by writing the pages there again, unchanged, from the page
    /// cache, so the disk takes the two and the gap as one request (default
    /// 2; 0: never). A gap is filled only if every page in it is in RAM.
    /// The bytes are those the disk already holds, so a crash or a failed
    /// write at any point leaves every page as it was. Going round the file
    /// ([`Options::spare_space_percent`]) a commit's pages land about every
    /// other slot: at 2^24 accounts, 2 took a third of the write requests
    /// away for a fifth more bytes written
    /// ([`crate::Metrics::blocks_rewritten`]) and commits about 4% shorter
    /// (at 2^27 a quarter, commits level); 8 wrote 60% more bytes and made
    /// commits slower (docs/benchmarks.md,
    /// "Writes in long runs"). Placement only: a database may be reopened
    /// with another value.
    pub fn rewrite_gap_blocks(mut self, blocks: u32) -> Options {
        self.tuning.placement.rewrite_gap = blocks;
        self
    }

    /// Blocks (4 KiB each) in a region of the pages and buckets files
    /// (default 512, 2 MiB; at least 1): the longest run a commit writes
    /// in one place, and the unit the cleaner empties
    /// ([`Options::clean_regions`]). Placement only: a database may be
    /// reopened with another value.
    pub fn region_blocks(mut self, blocks: u32) -> Options {
        self.tuning.placement.region_slots = blocks;
        self
    }

    /// Whether catalog folds run on a thread of their own after a commit
    /// returns, beside the next block's execution (default), or on the
    /// committing thread, lengthening the commit that asks for one. The
    /// same thread reads in the blocks the next commit's cleaning moves
    /// ([`Options::clean_regions`]); off, that commit reads them.
    pub fn fold_in_background(mut self, on: bool) -> Options {
        self.fold_in_background = on;
        self
    }

    /// Whether [`crate::Db::open`] fills the page cache before it returns,
    /// when it opens from the catalog (off by default: a thread fills it
    /// beside the first blocks). On, open takes longer (about 1 GiB of
    /// reads with the default cache) and the first block after it runs at
    /// the speed of the later ones, its reads no longer sharing the disk
    /// with the warming. A disk read that fails while warming fails the
    /// open with that error; a block that is not the page expected is left
    /// out of the cache, for the read that needs it to report.
    pub fn warm_at_open(mut self, on: bool) -> Options {
        self.warm_at_open = on;
        self
    }

    /// A commit that takes this long or longer (default 5 s; from taking the
    /// writer lock to durable) is logged as a `tracing` warning, with its
    /// seqno and milliseconds. [`crate::Db::import`]'s commits are not.
    pub fn slow_commit_threshold(mut self, threshold: std::time::Duration) -> Options {
        self.slow_commit_threshold = threshold;
        self
    }
}
