//! Ordered iteration over a key range at one commit, while others land.
//!
//! The value store keeps keys in buckets of contiguous ranges, so a range is
//! read bucket run by bucket run, each run from one published state. That
//! state may be newer than the iteration's commit: the commit is pinned, and
//! the undos of the commits after it give back the old values of every
//! key they changed in the run's range.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Receiver;

use super::history::Pin;
use super::{Db, Shared};
use crate::trie::KeyPath;
use crate::value_store::BucketRun;
use crate::Error;

/// Buckets of the first run, read at once: a short range costs no thread.
const FIRST_RUN: usize = 8;
/// Buckets of each later run: enough to keep the disk busy on a cold range.
const RUN_BUCKETS: usize = 256;
/// Runs read ahead of the reader.
const RUNS_AHEAD: usize = 2;

/// Entries of `start..end` at a pinned commit, in key order.
pub(super) struct RangeIter {
    /// Runs after the first, read on another thread while these are used.
    /// Declared first, so its thread is joined before the pin goes.
    ahead: Option<ReadAhead>,
    shared: Arc<Shared>,
    /// Keeps the commit's undos.
    _pin: Pin,
    base: u64,
    /// Where the next run starts; `None` once the range is read.
    next: Option<KeyPath>,
    end: Option<KeyPath>,
    ready: std::vec::IntoIter<(KeyPath, Vec<u8>)>,
}

struct ReadAhead {
    runs: Receiver<Result<BucketRun, Error>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ReadAhead {
    /// Waits for the reader, which stops at its next send, so that it does
    /// not keep the database open after the iterator is gone.
    fn drop(&mut self) {
        let (_, unused) = crossbeam_channel::bounded(0);
        drop(std::mem::replace(&mut self.runs, unused));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ReadAhead {
    fn start(
        shared: &Arc<Shared>,
        from: KeyPath,
        end: Option<KeyPath>,
    ) -> Result<ReadAhead, Error> {
        let (tx, runs) = crossbeam_channel::bounded(RUNS_AHEAD);
        let shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("pagetrie-range".into())
            .spawn(move || {
                let mut from = from;
                loop {
                    let run = shared.values.range(&from, RUN_BUCKETS);
                    let after = match &run {
                        Ok((_, after)) => after.filter(|a| end.is_none_or(|end| *a < end)),
                        Err(_) => None,
                    };
                    if tx.send(run).is_err() {
                        return;
                    }
                    match after {
                        Some(a) => from = a,
                        None => return,
                    }
                }
            })?;
        Ok(ReadAhead {
            runs,
            thread: Some(thread),
        })
    }
}

impl RangeIter {
    /// The entries of `start..end` at the committed head.
    pub(super) fn at_head(
        shared: &Arc<Shared>,
        start: KeyPath,
        end: Option<KeyPath>,
    ) -> Result<RangeIter, Error> {
        shared.store.check_usable()?;
        let (pin, head) = Pin::head(&shared.snapshots);
        Ok(RangeIter::pinned(shared, pin, head.seqno, start, end))
    }

    /// The entries of `start..end` at commit `base`, which `pin` keeps.
    pub(super) fn pinned(
        shared: &Arc<Shared>,
        pin: Pin,
        base: u64,
        start: KeyPath,
        end: Option<KeyPath>,
    ) -> RangeIter {
        RangeIter {
            shared: shared.clone(),
            _pin: pin,
            base,
            next: end.is_none_or(|end| start < end).then_some(start),
            end,
            ready: Vec::new().into_iter(),
            ahead: None,
        }
    }

    /// Reads runs until some entries are ready or the range is done.
    fn fill(&mut self) -> Result<(), Error> {
        while self.ready.len() == 0 {
            let Some(from) = self.next else {
                return Ok(());
            };
            let s = &self.shared;
            let (stored, after) = match &self.ahead {
                Some(ahead) => ahead
                    .runs
                    .recv()
                    .map_err(|_| Error::Internal("the range reader stopped"))??,
                None => s.values.range(&from, FIRST_RUN)?,
            };
            // After the read: the logs of every commit it may show are in.
            let changed = s.snapshots.changed_in(self.base, &from, after.as_ref())?;
            let mut entries = if changed.is_empty() {
                stored
            } else {
                merge(stored, changed)
            };
            if let Some(end) = self.end {
                entries.truncate(entries.partition_point(|(k, _)| *k < end));
            }
            self.ready = entries.into_iter();
            self.next = after.filter(|a| self.end.is_none_or(|end| *a < end));
            if let (Some(next), None) = (self.next, &self.ahead) {
                self.ahead = Some(ReadAhead::start(&self.shared, next, self.end)?);
            }
        }
        Ok(())
    }

    /// Moves the entries below `end` (all that remain, if `None`) to `out`.
    pub(super) fn take_below(
        &mut self,
        end: Option<&KeyPath>,
        out: &mut Vec<(KeyPath, Vec<u8>)>,
    ) -> Result<(), Error> {
        loop {
            self.fill()?;
            let ready = self.ready.as_slice();
            let below = end.map_or(ready.len(), |end| ready.partition_point(|(k, _)| k < end));
            out.extend(self.ready.by_ref().take(below));
            if self.ready.len() > 0 || self.next.is_none() {
                return Ok(());
            }
        }
    }
}

/// `stored` with the values of `changed` in their place: `None` removes.
fn merge(
    stored: Vec<(KeyPath, Vec<u8>)>,
    changed: std::collections::BTreeMap<KeyPath, Option<Vec<u8>>>,
) -> Vec<(KeyPath, Vec<u8>)> {
    let mut out = Vec::with_capacity(stored.len() + changed.len());
    let mut changed = changed.into_iter().peekable();
    for (key, value) in stored {
        while let Some((k, v)) = changed.next_if(|(k, _)| *k < key) {
            out.extend(v.map(|v| (k, v)));
        }
        match changed.next_if(|(k, _)| *k == key) {
            Some((k, v)) => out.extend(v.map(|v| (k, v))),
            None => out.push((key, value)),
        }
    }
    out.extend(changed.filter_map(|(k, v)| v.map(|v| (k, v))));
    out
}

impl Iterator for RangeIter {
    type Item = Result<(KeyPath, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.fill() {
            // One error ends the iteration.
            self.next = None;
            self.ready = Vec::new().into_iter();
            self.ahead = None;
            return Some(Err(e));
        }
        self.ready.next().map(Ok)
    }
}

impl Db {
    /// Entries with `start <= key < end` (no `end`: to the last key) at the
    /// committed root, in key order.
    ///
    /// The iterator reads one root throughout, the one committed when it was
    /// made, while commits land on other threads; it keeps that root's
    /// overwritten values in RAM until dropped, as a session does. Reads go
    /// to the disk a run of buckets at a time.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = pagetrie::Db::open(pagetrie::Options::new(dir.path()))?;
    /// let session = db.begin_session();
    /// for i in 1..=5u8 {
    ///     session.write([i; 32], Some(vec![i]));
    /// }
    /// session.commit()?;
    /// let keys: Vec<u8> = db
    ///     .iter_range(&[2; 32], Some(&[5; 32]))?
    ///     .map(|entry| entry.map(|(key, _)| key[0]))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [2, 3, 4]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn iter_range(
        &self,
        start: &KeyPath,
        end: Option<&KeyPath>,
    ) -> Result<impl Iterator<Item = Result<(KeyPath, Vec<u8>), Error>> + '_, Error> {
        RangeIter::at_head(&self.shared, *start, end.copied())
    }
}
