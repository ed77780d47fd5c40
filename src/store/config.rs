//! How a store is opened: its I/O engine, when it rewrites its logs, and
//! (in tests) the faults its files carry.

#[cfg(any(test, feature = "fault-injection"))]
use std::sync::Arc;

use crate::io::IoBackend;

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

/// When the store rewrites its logs: production values by default, small
/// only in the tests that need folds and trims to happen often.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// Log blocks past which the catalog is folded into a new catalog file, if
    /// the log is also longer than the catalog file: open reads at most about
    /// twice the catalog file.
    pub(crate) fold_blocks: u64,
    /// Dropped history blocks below which the history file is not rewritten.
    pub(crate) trim_blocks: u64,
    /// Blocks a history rewrite copies per batch.
    pub(crate) copy_batch: u64,
    /// Catalog log bytes kept in RAM for the next fold, past which the fold
    /// reads them back from the log instead.
    pub(crate) recent_bytes: usize,
    /// Where the pages and buckets files place new blocks.
    pub(crate) placement: super::Placement,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            fold_blocks: 4096,
            trim_blocks: 16384,
            copy_batch: 256,
            recent_bytes: 64 << 20,
            placement: super::Placement::default(),
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
        // Every fold reads its records back from the log.
        recent_bytes: 0,
        // Regions of 8 slots, so cleaning happens within a few commits.
        placement: super::Placement {
            region_slots: 8,
            spare_percent: 25,
            cleaning: true,
            rewrite_gap: 2,
        },
    };
}
