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

/// The history file. Its records are read once, by the layer above
/// ([`Store::read_history`]), a record at a time; until then the log's end is
/// unknown, so anything that appends or trims reads them first, unseen.
pub(super) struct HistoryLog {
    log: RecordLog,
    /// The durable commit, while the records are unread.
    unread: Option<u64>,
}

/// Opens the history of a database whose durable commit is `durable`.
pub(super) fn open(dir: &Dir, durable: u64) -> Result<HistoryLog, Error> {
    Ok(HistoryLog {
        log: RecordLog::open(dir, FILE, MAGIC)?,
        unread: Some(durable),
    })
}

impl HistoryLog {
    /// Hands `each` the records up to the durable commit, in order, if they
    /// are still unread, and cuts the rest of the file (a torn or undurable
    /// tail).
    fn read(&mut self, each: impl FnMut(u64, &[u8]) -> Result<(), Error>) -> Result<(), Error> {
        let Some(durable) = self.unread else {
            return Ok(());
        };
        let mut last = 0;
        self.log.load(
            |seqno| {
                if seqno > durable || seqno <= last {
                    return Keep::Stop;
                }
                last = seqno;
                Keep::Record
            },
            each,
        )?;
        self.unread = None;
        Ok(())
    }

    /// The log, its records read.
    pub(super) fn ready(&mut self) -> Result<&mut RecordLog, Error> {
        self.read(|_, _| Ok(()))?;
        Ok(&mut self.log)
    }

    /// Notes the record of commit `seqno`, `blocks` long, as durable; the
    /// log was made [`HistoryLog::ready`] to prepare it.
    pub(super) fn appended(&mut self, seqno: u64, blocks: u64) {
        self.log.appended(seqno, blocks);
    }

    /// The log as it is, read or not: for what needs only its file.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(super) fn file(&self) -> &std::sync::Arc<crate::io::DataFile> {
        self.log.file()
    }

    /// The block from which dropping the records before commit `keep_from`
    /// would shrink the file enough to rewrite it, if it would.
    fn trim_point(&self, keep_from: u64, min_blocks: u64) -> Option<u64> {
        let first = self.log.start_of(keep_from);
        let kept = self.log.end() - first;
        (first >= min_blocks && first >= kept / 2).then_some(first)
    }
}

impl Store {
    /// Hands `each` the history records of every durable commit that wrote
    /// one since the file was last emptied or trimmed, oldest first, each
    /// with its commit's seqno, one at a time: open holds what the layer
    /// above keeps of them, not the file. Once; later calls hand none.
    pub(crate) fn read_history(
        &self,
        each: impl FnMut(u64, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.history.lock().read(each)
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
        if history.ready().is_err() {
            return;
        }
        if let Some(first) = history.trim_point(keep_from, self.tuning.trim_blocks) {
            let kept = history.log.end() - first;
            match history
                .log
                .drop_before(&self.dir, &self.io, first, self.tuning.copy_batch)
            {
                Ok(()) => tracing::info!(
                    dropped_blocks = first,
                    kept_blocks = kept,
                    "history trimmed"
                ),
                Err(e) => tracing::warn!(error = %e, "history trim failed; the records stay"),
            }
        }
    }

    /// Drops every history record, durably.
    pub(crate) fn erase_history(&self) -> Result<(), Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        let mut history = self.history.lock();
        // An empty file stays as it is: open with no history syncs nothing.
        if history.log.is_empty()? {
            history.unread = None;
            return Ok(());
        }
        // Nothing left to read, even if the erase fails part way: the log
        // erases again before its next append.
        history.unread = None;
        history.log.erase()
    }
}
