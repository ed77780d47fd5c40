//! The page fetcher: loads the trie pages on a key's path and the buckets its
//! commit reads (its value's, and those its elided subtree spans) into the
//! stores' caches, on the I/O engine, while execution goes on.
//!
//! One thread per database, many reads in flight. It only fills caches, and only
//! with committed blocks: the stores check each block's generation on arrival.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use crossbeam_channel::{select, Receiver};

use super::Shared;
use crate::page_store::{PageRead, Prefetch};
use crate::store::Fetches;
use crate::trie::page_id::{PageId, MAX_PAGE_LEVEL};
use crate::trie::{KeyPath, MAX_DEPTH};
use crate::value_store::BucketRead;

/// What to load for a key.
#[derive(Clone, Copy)]
pub(super) struct Hint {
    pub(super) key: KeyPath,
    /// Whether to load the key's own bucket (the pages on its path and the
    /// buckets its elided subtree spans always are).
    pub(super) bucket: bool,
}

/// Hints as sent: a session's come first; a bulk batch replaces the one
/// before it, which a retry or the next operation makes stale.
pub(super) enum Hints {
    Session(Vec<Hint>),
    Bulk(Vec<Hint>),
    /// Answered once every hint sent before it has been acted on and its
    /// reads have arrived: tests wait on it instead of on a quiet spell.
    #[cfg(test)]
    Barrier(crossbeam_channel::Sender<()>),
}

/// Sessions' hints sent and not yet acted on, at most `limit`
/// ([`crate::Options::prefetch_hints`]): past it, new hints are dropped
/// (counted), since a hint only saves a later read and a queue of millions
/// would hold their keys in RAM for reads that come too late to help. A bulk
/// batch (one operation's keys) is cut to `limit` and replaces the one
/// before it, whose count the fetcher keeps in `bulk`.
pub(super) struct HintQueue {
    queued: AtomicUsize,
    bulk: AtomicUsize,
    dropped: AtomicU64,
    /// Sessions' hints dropped (a bulk batch's cut is by design, not a
    /// full queue) since the last report to the log.
    unreported: AtomicU64,
    limit: usize,
}

impl HintQueue {
    pub(super) fn new(limit: usize) -> HintQueue {
        HintQueue {
            queued: AtomicUsize::new(0),
            bulk: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
            limit,
        }
    }

    /// Cuts a bulk batch to the limit, counting what it drops.
    pub(super) fn cut_bulk(&self, mut hints: Vec<Hint>) -> Vec<Hint> {
        if hints.len() > self.limit {
            let dropped = hints.len() - self.limit;
            self.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
            hints.truncate(self.limit);
        }
        hints
    }

    /// Takes as many of sessions' `hints` as fit; returns those and the
    /// rest, dropped.
    pub(super) fn admit(&self, mut hints: Vec<Hint>) -> (Vec<Hint>, Vec<Hint>) {
        let mut taken = 0;
        let _ = self
            .queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| {
                taken = hints.len().min(self.limit.saturating_sub(queued));
                Some(queued + taken)
            });
        let dropped = hints.split_off(taken);
        self.dropped
            .fetch_add(dropped.len() as u64, Ordering::Relaxed);
        self.unreported
            .fetch_add(dropped.len() as u64, Ordering::Relaxed);
        (hints, dropped)
    }

    /// Sessions' hints the full queue dropped since the last call.
    pub(super) fn dropped_since_report(&self) -> u64 {
        self.unreported.swap(0, Ordering::Relaxed)
    }

    /// `n` sessions' hints acted on or discarded.
    pub(super) fn release(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::SeqCst);
    }

    /// Hints queued now (sessions' and the bulk batch's), and dropped so far.
    pub(super) fn counts(&self) -> (usize, u64) {
        (
            self.queued.load(Ordering::SeqCst) + self.bulk.load(Ordering::SeqCst),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

/// A read in flight: the token of the store that started it.
enum Wanted {
    Page(PageRead),
    Bucket(BucketRead),
}

impl From<PageRead> for Wanted {
    fn from(read: PageRead) -> Wanted {
        Wanted::Page(read)
    }
}

impl From<BucketRead> for Wanted {
    fn from(read: BucketRead) -> Wanted {
        Wanted::Bucket(read)
    }
}

/// Starts the fetcher thread; it stops when every sender is gone.
pub(super) fn start(
    shared: Weak<Shared>,
    keys: Receiver<Hints>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("pagetrie-prefetch".into())
        .spawn(move || Fetcher::new().run(&shared, &keys))
}

/// The warmer thread's name (tests wait for it to end).
pub(super) const WARM_THREAD: &str = "pagetrie-warm";

/// Starts the thread that reads into the page cache the pages an open from
/// the catalog did not read; it stops when they are read or the database
/// closes.
pub(super) fn start_warming(shared: Weak<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(WARM_THREAD.into())
        .spawn(move || loop {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            // Closing, or nothing left, or an error (which reads report).
            if shared.prefetch.read().is_none() || !matches!(shared.pages.warm(), Ok(true)) {
                return;
            }
        })
}

/// Reads in flight at most: a bulk batch (a rollback's, a proof back's) names
/// up to `prefetch_hints` keys of up to eight blocks each, which must not
/// all wait in RAM at once.
const MAX_IN_FLIGHT: usize = 8192;

struct Fetcher {
    /// Sessions' hints not yet acted on, oldest first.
    queue: std::collections::VecDeque<Hint>,
    /// The newest bulk batch's hints not yet acted on.
    bulk: std::vec::IntoIter<Hint>,
    fetches: Fetches<Wanted>,
    /// Barriers waiting for the fetcher to be idle.
    #[cfg(test)]
    barriers: Vec<crossbeam_channel::Sender<()>>,
}

impl Fetcher {
    fn new() -> Fetcher {
        Fetcher {
            queue: Default::default(),
            bulk: Vec::new().into_iter(),
            fetches: Fetches::new(),
            #[cfg(test)]
            barriers: Vec::new(),
        }
    }

    /// Answers the barriers once nothing is queued or in flight.
    #[cfg(test)]
    fn answer_barriers(&mut self) {
        if self.queue.is_empty() && self.bulk.len() == 0 && self.fetches.len() == 0 {
            for barrier in self.barriers.drain(..) {
                let _ = barrier.send(());
            }
        }
    }

    fn run(&mut self, shared: &Weak<Shared>, keys: &Receiver<Hints>) {
        let arrivals = self.fetches.arrivals().clone();
        loop {
            select! {
                recv(keys) -> key => {
                    let (Ok(hints), Some(shared)) = (key, shared.upgrade()) else { return };
                    match hints {
                        Hints::Session(hints) => self.queue.extend(hints),
                        Hints::Bulk(hints) => {
                            shared.hints.bulk.store(hints.len(), Ordering::SeqCst);
                            self.bulk = hints.into_iter();
                        }
                        #[cfg(test)]
                        Hints::Barrier(barrier) => self.barriers.push(barrier),
                    }
                    self.pump(&shared);
                }
                recv(arrivals) -> finished => {
                    let (Ok(finished), Some(shared)) = (finished, shared.upgrade()) else { return };
                    match self.fetches.finish(finished) {
                        Some((Wanted::Page(read), Some(block))) => shared.pages.offer(read, block),
                        Some((Wanted::Page(_), None)) => {}
                        Some((Wanted::Bucket(read), Some(block))) => shared.values.offer(read, block),
                        Some((Wanted::Bucket(_), None)) | None => {}
                    }
                    self.pump(&shared);
                }
            }
            #[cfg(test)]
            self.answer_barriers();
        }
    }

    /// Acts on queued hints while fewer than [`MAX_IN_FLIGHT`] reads are out.
    fn pump(&mut self, shared: &Arc<Shared>) {
        while self.fetches.len() < MAX_IN_FLIGHT {
            let hint = match self.queue.pop_front() {
                Some(hint) => {
                    shared.hints.release(1);
                    hint
                }
                None => match self.bulk.next() {
                    Some(hint) => {
                        shared.hints.bulk.store(self.bulk.len(), Ordering::SeqCst);
                        hint
                    }
                    None => return,
                },
            };
            self.fetch(shared, hint);
        }
    }

    /// Hands the stores the pages on `hint`'s path, top down, and the buckets
    /// under the first page not stored, whose subtree the commit rebuilds
    /// from them, with the key's own if the hint asks.
    fn fetch(&mut self, shared: &Arc<Shared>, hint: Hint) {
        let key = &hint.key;
        let mut elided = None;
        for level in 0..=MAX_PAGE_LEVEL {
            let id = PageId::on_path(key, level);
            if shared.pages.prefetch(&id, &mut self.fetches) == Prefetch::Absent {
                elided = Some(id.root_depth());
                break;
            }
        }
        match elided {
            Some(depth) => shared
                .values
                .prefetch(key, depth, hint.bucket, &mut self.fetches),
            // Under all of its bits: the key's own bucket alone.
            None if hint.bucket => shared
                .values
                .prefetch(key, MAX_DEPTH, true, &mut self.fetches),
            None => {}
        }
    }
}
