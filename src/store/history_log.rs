//! The history log: one record per commit, written with the commit's blocks
//! and synced before its commit point, so every durable commit's record is on
//! disk (layout in docs/format.md, "History"). What a record says is the
//! layer above's; here it is a payload.
//!
//! Records older than the ones the layer above still needs are dropped by
//! rewriting the rest ([`RecordLog::drop_before`]) once the dropped part is as
//! large as half the kept part (and at least [`super::Tuning::trim_blocks`]):
//! the file stays within about 1.5 times what is kept, and each kept byte is
//! copied about twice over its life.

use super::record_log::{Keep, RecordLog};
use super::Store;
use crate::io::Dir;
use crate::Error;

pub(super) const FILE: &str = "history";
const MAGIC: &[u8; 8] = b"pthistry";

/// The history file, and the records open found until the layer above
/// takes them.
pub(super) struct HistoryLog {
    pub(super) log: RecordLog,
    found: Vec<(u64, Vec<u8>)>,
}

/// Opens the history of a database whose durable commit is `durable`: the
/// records up to it, in order, with the rest of the file (a torn or
/// undurable tail) cut off.
pub(super) fn load(dir: &Dir, durable: u64) -> Result<HistoryLog, Error> {
    let mut last = 0;
    let mut log = RecordLog::open(dir, FILE, MAGIC)?;
    let records = log.load(|seqno| {
        if seqno > durable || seqno <= last {
            return Keep::Stop;
        }
        last = seqno;
        Keep::Record
    })?;
    let found = records
        .kept
        .into_iter()
        .map(|(seqno, payload)| (seqno, records.bytes[payload].to_vec()))
        .collect();
    Ok(HistoryLog { log, found })
}

impl HistoryLog {
    /// The block from which dropping the records before commit `keep_from`
    /// would shrink the file enough to rewrite it, if it would.
    fn trim_point(&self, keep_from: u64, min_blocks: u64) -> Option<u64> {
        let first = self.log.start_of(keep_from);
        let kept = self.log.end() - first;
        (first >= min_blocks && first >= kept / 2).then_some(first)
    }
}

impl Store {
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
        let mut history = self.history.lock();
        if let Some(first) = history.trim_point(keep_from, self.tuning.trim_blocks) {
            let _ = history
                .log
                .drop_before(&self.dir, &self.io, first, self.tuning.copy_batch);
        }
    }

    /// Drops every history record, durably.
    pub(crate) fn erase_history(&self) -> Result<(), Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        self.history.lock().log.erase()
    }
}
