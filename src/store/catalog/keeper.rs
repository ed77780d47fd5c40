//! The catalog's upkeep between commits: its log, when to fold the log into a
//! new catalog file, and the catalog file written at open when the stores had to read
//! every block. Runs under the store's commit lock, as a commit does.

use std::sync::Arc;

use super::{
    from_scan, load, write_file, Catalog, Merge, Notes, Payloads, Recent, Source, LOG_READ_BUDGET,
};
use crate::io::Dir;
use crate::store::record_log::RecordLog;
use crate::store::slot_map::SlotMap;
use crate::store::{Meta, Store, Tuning};
use crate::Error;

/// The catalog's state in an open store.
pub(in crate::store) struct Keeper {
    /// Where commits append their records.
    pub(in crate::store) log: RecordLog,
    /// The seed the stores' fingerprints in the notes are made with.
    seed: u64,
    /// What open found; taken by [`Store::finish_open`].
    found: Option<Arc<Catalog>>,
    /// Whether open found a usable catalog.
    usable: bool,
    /// Notes the stores made by reading every block, when the catalog was
    /// unusable: the next catalog file.
    scanned: Notes,
    /// The records since the catalog file, while they fit in RAM.
    pub(in crate::store) recent: Recent,
    /// The log length from which to fold (raised after a failed fold).
    fold_at: u64,
}

impl Keeper {
    /// Opens the catalog of `durable` in `dir` (see [`load`]).
    pub(in crate::store) fn open(
        dir: &Dir,
        durable: &Meta,
        map: &SlotMap,
        fresh_seed: u64,
        tuning: &Tuning,
    ) -> Result<Keeper, Error> {
        let mut log = RecordLog::open(dir, super::LOG, super::RECORD_MAGIC)?;
        let found = load(dir, &mut log, durable, map, fresh_seed, tuning.recent_bytes)?;
        Ok(Keeper {
            log,
            seed: found.seed,
            usable: found.catalog.is_some(),
            found: found.catalog.map(Arc::new),
            scanned: Notes::default(),
            recent: found.recent,
            fold_at: tuning.fold_blocks.max(found.file_blocks),
        })
    }
}

impl Store {
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
    /// they read every block instead, writes their notes as a new catalog file.
    /// Returns whether open used the catalog. A catalog file that cannot be
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
        let Some(catalog) = from_scan(scanned, &durable.meta, &durable.map) else {
            return false;
        };
        let source = Source::Catalog(&catalog);
        match self.replace_file(&mut state, durable.meta.seqno, source) {
            Ok(_) => state.usable = true,
            Err(e) => tracing::warn!(
                error = %e,
                "writing the catalog read at open failed: the next open reads every block again"
            ),
        }
        false
    }

    /// Folds the catalog log into a new catalog file once it has grown past the
    /// catalog file; called between commits. A fold that fails is tried again
    /// once the log has doubled: the log stays valid meanwhile.
    pub(crate) fn maybe_fold(&self) {
        let _one_at_a_time = self.commit_lock.lock();
        let mut state = self.catalog.lock();
        if state.log.end() <= state.fold_at || !state.usable || self.check_usable().is_err() {
            return;
        }
        let durable = self.durable.read().clone();
        let started = std::time::Instant::now();
        let log_blocks = state.log.end();
        let report = |blocks: u64| {
            tracing::info!(
                seqno = durable.meta.seqno,
                log_blocks,
                catalog_blocks = blocks,
                ms = started.elapsed().as_millis() as u64,
                "catalog folded"
            );
        };
        // The catalog file streams into the new one, with the records since it
        // from RAM, else streamed from the log.
        let base = state.recent.base;
        let durable_seqno = durable.meta.seqno;
        let payloads = match state.recent.payloads.take() {
            Some(payloads) => Some(Payloads::Ram(payloads)),
            None => state
                .log
                .readers_after(base, durable_seqno, LOG_READ_BUDGET)
                .map(Payloads::Log),
        };
        if let Some(payloads) = payloads {
            let source = Source::Merge(Merge { base, payloads }, &durable.map);
            match self.replace_file(&mut state, durable_seqno, source) {
                Ok(blocks) => return report(blocks),
                // Replaced, but the log was not emptied.
                Err(e) if state.recent.base != base => {
                    tracing::warn!(error = %e, "catalog folded, but its log not emptied; it is emptied before the next record");
                    state.fold_at = state.fold_at.max(state.log.end() * 2);
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "catalog fold failed; reading the catalog back whole")
                }
            }
        }
        // A catalog file the merge cannot use (written unsorted by an older
        // build, or damaged), or a write that failed: read back whole, as
        // open reads it.
        let seed = state.seed;
        let max = self.tuning.recent_bytes;
        let folded = load(
            &self.dir,
            &mut state.log,
            &durable.meta,
            &durable.map,
            seed,
            max,
        )
        .ok()
        .and_then(|found| found.catalog.map(|c| (found.seed, c)));
        let result = match folded {
            Some((seed, c)) if seed == state.seed => {
                self.replace_file(&mut state, durable.meta.seqno, Source::Catalog(&c))
            }
            // Reading it back discarded it: the next open reads every block.
            _ => {
                tracing::warn!(
                    "catalog discarded after a failed fold: the next open reads every block"
                );
                state.usable = false;
                return;
            }
        };
        match result {
            Ok(blocks) => report(blocks),
            Err(e) => {
                tracing::warn!(error = %e, "catalog fold failed; tried again once the log has doubled");
                state.fold_at = state.fold_at.max(state.log.end() * 2);
            }
        }
    }

    /// Writes the catalog file of commit `seqno` from `source` and empties
    /// the log; returns the file's length in blocks.
    fn replace_file(
        &self,
        state: &mut Keeper,
        seqno: u64,
        source: Source<'_>,
    ) -> Result<u64, Error> {
        let blocks = write_file(&self.dir, &self.io, seqno, state.seed, source)?;
        state.fold_at = self.tuning.fold_blocks.max(blocks);
        state.recent.restart(seqno);
        // A crash before this leaves records the catalog file already holds: open
        // skips them.
        state.log.erase()?;
        Ok(blocks)
    }
}
