//! Ordered iteration over a key range at one commit, while others land.
//!
//! The value store keeps keys in buckets of contiguous ranges, so a range is
//! read bucket run by bucket run, each run from one published state. That
//! state may be newer than the iteration's commit: the commit is pinned, and
//! the undo logs of the commits after it give back the old values of every
//! key they changed in the run's range.

use std::collections::VecDeque;
use std::sync::Arc;

use super::overlay::Pin;
use super::{Db, Shared};
use crate::trie::KeyPath;
use crate::Error;

/// Buckets read at a time: enough to keep the disk busy on a cold range.
const RUN_BUCKETS: usize = 64;

/// Entries of `start..end` at a pinned commit, in key order.
pub(super) struct RangeIter {
    shared: Arc<Shared>,
    /// Keeps the commit's undo logs.
    _pin: Pin,
    base: u64,
    /// Where the next run starts; `None` once the range is read.
    next: Option<KeyPath>,
    end: Option<KeyPath>,
    ready: VecDeque<(KeyPath, Vec<u8>)>,
}

impl RangeIter {
    /// The entries of `start..end` at the committed head.
    pub(super) fn at_head(
        shared: &Arc<Shared>,
        start: KeyPath,
        end: Option<KeyPath>,
    ) -> Result<RangeIter, Error> {
        shared.store.check_usable()?;
        let (pin, head) = Pin::head(shared);
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
            ready: VecDeque::new(),
        }
    }

    /// Reads runs until some entries are ready or the range is done.
    fn fill(&mut self) -> Result<(), Error> {
        while self.ready.is_empty() {
            let Some(from) = self.next else {
                return Ok(());
            };
            let s = &self.shared;
            let (stored, after) = s.values.range(&s.store, &from, RUN_BUCKETS)?;
            // After the read: the logs of every commit it may show are in.
            let changed = s.versions.changed_in(self.base, &from, after.as_ref());
            let mut changed = changed.into_iter().peekable();
            for (key, value) in stored {
                while let Some((k, v)) = changed.next_if(|(k, _)| *k < key) {
                    self.ready.extend(v.map(|v| (k, v)));
                }
                match changed.next_if(|(k, _)| *k == key) {
                    Some((k, v)) => self.ready.extend(v.map(|v| (k, v))),
                    None => self.ready.push_back((key, value)),
                }
            }
            for (k, v) in changed {
                self.ready.extend(v.map(|v| (k, v)));
            }
            self.next = after.filter(|a| self.end.is_none_or(|end| *a < end));
            if let Some(end) = self.end {
                while self.ready.back().is_some_and(|(k, _)| *k >= end) {
                    self.ready.pop_back();
                }
            }
        }
        Ok(())
    }
}

impl Iterator for RangeIter {
    type Item = Result<(KeyPath, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.fill() {
            // One error ends the iteration.
            self.next = None;
            self.ready.clear();
            return Some(Err(e));
        }
        self.ready.pop_front().map(Ok)
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
