//! Buckets read ahead of the readers that want them, each usable as soon as
//! it arrives: a commit's trie update and value plan start while the
//! buckets its changes fall in are still being read, and a reader that
//! needs one of those waits for that bucket, not for all of them, nor
//! reads it a second time.
//!
//! Owns the set of buckets in flight and the load that brings them. A
//! bucket is cached as a prefetched one is ([`ValueStore::offer`]), and a
//! read that fails is left for the reader needing the bucket to report.

use std::collections::HashSet;
use std::ops::Range;

use parking_lot::{Condvar, Mutex};

use super::bucket::{entry_len, payload_of, PAYLOAD};
use super::directory::{by_bucket, BucketMeta, Directory};
use super::plan::SMALL;
use super::{BucketRead, ValueStore};
use crate::block::Block;
use crate::store::Target;
use crate::trie::{prefix, shares_prefix, KeyPath};

impl ValueStore {
    /// The buckets that `changes` (sorted by key) fall in and that the cache
    /// lacks, with the next bucket of each that the changes look likely to
    /// leave overflowing or under a quarter full (the plan then takes that
    /// one in too), at most half the cache's worth, so that none pushes
    /// another out before it is used: marked on their way, so that from now
    /// on a reader that needs one waits for [`BucketLoad::run`] to bring it.
    ///
    /// The trie update asks the value store for the keys of each subtree
    /// it does not store, at depth `subtree_depth` as a rule: the buckets
    /// beside a changed one that such a subtree of its first or last change
    /// spans are loaded too (left to the trie workers, they were lone reads
    /// queued behind the commit's writes).
    pub(crate) fn start_load(
        &self,
        changes: &[(KeyPath, Option<Vec<u8>>)],
        subtree_depth: usize,
    ) -> BucketLoad<'_> {
        let room = self.cache.capacity() / 2;
        let state = self.state.read();
        let dir = &state.dir;
        let homes: Vec<_> = changes.iter().map(|(k, _)| dir.bucket_of(k)).collect();
        let groups: Vec<Range<usize>> = by_bucket(&homes).collect();
        // In two halves, the second on a thread of its own: the commit's
        // other threads start after this, so a CPU would idle through it
        // (at 2^24 some 30 ms of directory and cache lookups).
        let (first, second) = groups.split_at(groups.len() / 2);
        let list = |groups: &[Range<usize>]| {
            let mut listing = Listing::default();
            for range in groups {
                self.list(
                    dir,
                    changes,
                    &homes,
                    range.clone(),
                    subtree_depth,
                    &mut listing,
                );
            }
            listing
        };
        let (mut listing, rest) = std::thread::scope(|s| {
            let other = std::thread::Builder::new()
                .name("pagetrie-list".into())
                .spawn_scoped(s, || list(second));
            let listing = list(first);
            let rest = match other {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => list(second),
            };
            (listing, rest)
        });
        listing.append(rest);
        let Listing {
            mut slots,
            mut neighbours,
            ..
        } = listing;
        slots.truncate(room);
        neighbours.truncate(room);
        self.loads.start(&slots);
        BucketLoad {
            values: self,
            slots,
            neighbours,
            generation: state.published.generation(),
        }
    }

    /// Lists in `listing` what the changes in `range` (falling in one
    /// bucket, `homes[range.start]`) call for: the buckets their unstored
    /// subtrees span, their own, and the next one if the plan may take it in.
    fn list(
        &self,
        dir: &Directory,
        changes: &[(KeyPath, Option<Vec<u8>>)],
        homes: &[Option<(KeyPath, &BucketMeta)>],
        range: Range<usize>,
        subtree_depth: usize,
        listing: &mut Listing,
    ) {
        let next_changed = homes.get(range.end).copied().flatten();
        let Some((min, meta)) = homes[range.start] else {
            return;
        };
        let group = &changes[range];
        let after = dir.successor(&min);
        for slot in spanned(dir, group, &min, after.map(|a| a.0), subtree_depth) {
            if slot != meta.slot && !self.cache.has_bucket(slot) {
                listing.add(slot, None);
            }
        }
        // The next bucket, if the plan may take it in (a neighbour read
        // in the plan waits behind the commit's writes: 1.4 ms each, some
        // 150 a commit at 2^24, mostly next to buckets that take new keys).
        let next = after
            .filter(|&(next, slot)| {
                next_changed.is_none_or(|h| h.0 != next) && !self.cache.has_bucket(slot)
            })
            .map(|(_, slot)| Neighbour {
                slot,
                change: change_len(dir, meta, group),
            });
        if !self.cache.has_bucket(meta.slot) {
            listing.add(meta.slot, next);
            return;
        }
        // One in RAM is judged now, unless its changes keep its size:
        // then the plan takes a neighbour in only if it is already small,
        // which is rare, and not worth a walk of every bucket here.
        if let Some(next) = next.filter(|n| n.change != 0) {
            if self
                .cache
                .bucket(meta.slot)
                .is_some_and(|b| next.taken_in(&b))
            {
                listing.add(next.slot, None);
            }
        }
    }
}

/// The buckets a load reads, each once, in the order listed.
#[derive(Default)]
struct Listing {
    slots: Vec<u32>,
    /// By `slots`: the neighbour to judge once that bucket arrives.
    neighbours: Vec<Option<Neighbour>>,
    listed: HashSet<u32>,
}

impl Listing {
    /// Lists `slot` unless it is already.
    fn add(&mut self, slot: u32, neighbour: Option<Neighbour>) {
        if self.listed.insert(slot) {
            self.slots.push(slot);
            self.neighbours.push(neighbour);
        }
    }

    /// Lists after these the slots of `other` not listed yet.
    fn append(&mut self, other: Listing) {
        for (slot, neighbour) in other.slots.into_iter().zip(other.neighbours) {
            self.add(slot, neighbour);
        }
    }
}

/// The bucket after one a commit changes, and the bytes the changes add to
/// that one: the plan takes it in if they leave that one overflowing or
/// under a quarter full.
#[derive(Clone, Copy)]
pub(super) struct Neighbour {
    slot: u32,
    change: isize,
}

impl Neighbour {
    /// Whether the plan will take it in, judging by the changed bucket's
    /// `block`.
    fn taken_in(self, block: &Block) -> bool {
        let bytes = payload_of(block) as isize + self.change;
        bytes > PAYLOAD as isize || bytes < SMALL as isize
    }
}

/// The buckets the subtrees at `depth` of the first and last of `changes`
/// span, when they may reach past their bucket (smallest key `min`, the
/// next one's `next`): a subtree reaches back only if its key shares the
/// prefix with `min`, forward only if it shares it with `next`.
fn spanned(
    dir: &Directory,
    changes: &[(KeyPath, Option<Vec<u8>>)],
    min: &KeyPath,
    next: Option<KeyPath>,
    depth: usize,
) -> Vec<u32> {
    let (Some((first, _)), Some((last, _))) = (changes.first(), changes.last()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if shares_prefix(first, min, depth) {
        out.extend(dir.overlapping(&prefix(first, depth), depth));
    }
    if next.is_some_and(|next| shares_prefix(last, &next, depth)) {
        out.extend(dir.overlapping(&prefix(last, depth), depth));
    }
    out
}

/// The bytes `changes` add to the bucket `meta` summarizes, as its
/// fingerprints tell: a key they do not name is new, one they name keeps its
/// value's length. An estimate: wrong, it costs a read, the plan's own or
/// one it did not need.
fn change_len(dir: &Directory, meta: &BucketMeta, changes: &[(KeyPath, Option<Vec<u8>>)]) -> isize {
    let mut bytes = 0;
    for (key, value) in changes {
        match (value, dir.may_hold(meta, key)) {
            (Some(value), false) => bytes += entry_len(value) as isize,
            (None, true) => bytes -= entry_len(&[]) as isize,
            _ => {}
        }
    }
    bytes
}

/// Buckets marked on their way by [`ValueStore::start_load`], read by
/// [`BucketLoad::run`]. However it ends, each is marked arrived, so no
/// reader waits for a bucket nothing brings.
pub(crate) struct BucketLoad<'a> {
    pub(super) values: &'a ValueStore,
    pub(super) slots: Vec<u32>,
    /// By `slots`: the next bucket the plan may take in with that one.
    neighbours: Vec<Option<Neighbour>>,
    /// The published state the slots are of.
    pub(super) generation: u64,
}

impl BucketLoad<'_> {
    /// Reads the buckets into the cache, each usable once it arrives, and
    /// then the neighbours the plan will take in with them, a chunk later;
    /// returns when all have. At most the engine's read window in flight,
    /// so a commit's first writes do not queue behind all of them.
    pub(crate) fn run(mut self) {
        let values = self.values;
        let generation = self.generation;
        let first = self.slots.len();
        let mut next: Vec<u32> = Vec::new();
        let mut at = 0;
        while at < first || !next.is_empty() {
            let end = first.min(at + LOAD_CHUNK);
            // Marked first, so that the plan waits for them, not reads them.
            values.loads.start(&next);
            self.slots.extend_from_slice(&next);
            let batch: Vec<u32> = next
                .drain(..)
                .chain(self.slots[at..end].iter().copied())
                .collect();
            let judged = &self.neighbours[at..end];
            let skip = batch.len() - (end - at);
            values.store.read_each(
                Target::Buckets,
                batch.iter().map(|&s| u64::from(s)),
                |i, block| {
                    let slot = batch[i];
                    if let Ok(block) = block {
                        let neighbour = i.checked_sub(skip).and_then(|j| judged[j]);
                        if let Some(neighbour) = neighbour.filter(|n| n.taken_in(&block)) {
                            next.push(neighbour.slot);
                        }
                        values.offer(BucketRead { slot, generation }, block);
                    }
                    values.loads.arrived(slot);
                },
            );
            next.retain(|&s| !values.cache.has_bucket(s));
            at = end;
        }
    }
}

/// Buckets a load reads before it reads the neighbours they call for.
const LOAD_CHUNK: usize = 512;

impl Drop for BucketLoad<'_> {
    fn drop(&mut self) {
        self.values.loads.end(&self.slots);
    }
}

/// The buckets being loaded, by slot.
#[derive(Default)]
pub(super) struct InFlight {
    slots: Mutex<HashSet<u32>>,
    arrived: Condvar,
}

impl InFlight {
    /// Marks `slots` as on their way.
    pub(super) fn start(&self, slots: &[u32]) {
        self.slots.lock().extend(slots.iter().copied());
    }

    /// Marks `slot` arrived (cached, or failed) and wakes its waiters.
    pub(super) fn arrived(&self, slot: u32) {
        if self.slots.lock().remove(&slot) {
            self.arrived.notify_all();
        }
    }

    /// Marks all of `slots` arrived: what a load did not see arrive (the
    /// engine dropped its reads) its readers read for themselves.
    pub(super) fn end(&self, slots: &[u32]) {
        let mut in_flight = self.slots.lock();
        for slot in slots {
            in_flight.remove(slot);
        }
        drop(in_flight);
        self.arrived.notify_all();
    }

    /// Waits until none of `slots` is in flight.
    pub(super) fn wait_for(&self, slots: impl Iterator<Item = u32> + Clone) {
        let mut in_flight = self.slots.lock();
        while !in_flight.is_empty() && slots.clone().any(|s| in_flight.contains(&s)) {
            self.arrived.wait(&mut in_flight);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::InFlight;

    #[test]
    fn a_reader_waits_for_its_bucket_only() {
        let loads = Arc::new(InFlight::default());
        loads.start(&[1, 2]);
        loads.wait_for([3].into_iter());
        let waiter = {
            let loads = loads.clone();
            std::thread::spawn(move || loads.wait_for([1].into_iter()))
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished());
        loads.arrived(2);
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "woken by another bucket");
        loads.arrived(1);
        waiter.join().unwrap();
    }

    #[test]
    fn an_ended_load_releases_every_waiter() {
        let loads = Arc::new(InFlight::default());
        loads.start(&[5, 6, 7]);
        let waiters: Vec<_> = [5, 7]
            .into_iter()
            .map(|slot| {
                let loads = loads.clone();
                std::thread::spawn(move || loads.wait_for([slot].into_iter()))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        assert!(waiters.iter().all(|w| !w.is_finished()));
        loads.end(&[5, 6, 7]);
        for w in waiters {
            w.join().unwrap();
        }
        loads.wait_for([5, 6, 7].into_iter());
    }
}
