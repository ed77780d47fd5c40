//! The value store (docs/design.md section 3): every key's value in the `buckets` file,
//! 4 KiB buckets of entries sorted by key, each bucket one contiguous key range.
//!
//! A directory in RAM (each bucket's smallest key in a sorted array, with a
//! 16-bit seeded fingerprint per entry) finds a key's bucket with no I/O, and the
//! fingerprints say when a key is certainly absent, so a read costs one bucket
//! read, or none.
//!
//! A commit rewrites the buckets it changes in runs of adjacent ones, each to a
//! free slot (copy-on-write). A run left under a quarter of a bucket takes in the
//! next bucket if the commit leaves that one untouched, so small buckets merge; an
//! overflowing run does the same, to share its load. The run's entries are then
//! cut into as many buckets as their bytes need, each cut placed nearest an even
//! share of the bytes among the gaps between neighbouring keys that part within
//! three bits of the run's common prefix (a part still too large is cut again).
//! Distinct keys always have such a gap, however many leading bits they share, so
//! clustered or adversarial keys cannot build chains; a bucket emptied by deletes
//! is freed. A prefix deeper than the bit where a cut's two keys part never spans
//! that cut, so the keys under a deep prefix (an elided page's) usually come from
//! one bucket read: how the trie rebuilds elided pages and finds leaf preimages.
//! The directory also keeps the first bits of each bucket's largest key, so a
//! prefix whose range begins past the last key of a bucket does not read it.
//! Values longer than [`INLINE_MAX`](bucket::INLINE_MAX) live in the `overflow` file; their bucket
//! entry keeps the value hash.
//!
//! Owns buckets, the directory and overflow space. Knows nothing of the trie: it
//! stores keys and values, and answers prefix queries.

#[cfg(test)]
mod bench;
mod bucket;
mod cache;
mod directory;
mod loading;
mod overflow;
mod plan;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use parking_lot::RwLock;

#[cfg(test)]
use bucket::INLINE_MAX;
use bucket::{BucketEntry, Stored};
use directory::Directory;
use overflow::Extents;
pub(crate) use plan::ValuePlan;

use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::clock::CacheCounts;
use crate::store::{stored_slot, Fetches, LastSize, Notes, Published, SlotSpace, Store, Target};
use crate::trie::{prefix, shares_prefix, KeyPath, ValueHash};
use crate::Error;
use cache::ValueCache;
use loading::InFlight;

struct ValueIndex {
    dir: Directory,
    /// The buckets file's slots.
    space: SlotSpace,
    extents: Extents,
    published: Published,
}

/// The entries of consecutive buckets from a key on, in key order, and the
/// smallest key of the bucket after them (`None`: they were the last).
pub(crate) type BucketRun = (Vec<(KeyPath, Vec<u8>)>, Option<KeyPath>);

/// A bucket block, or why the one read from the disk is not a bucket.
type Checked = Result<Arc<BlockBuf>, Error>;

/// Why buckets are read: what the cache keeps and how the read is counted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A reader's lookup: counted as a hit or a miss; what the disk gave
    /// is cached where the reader keeps it (not by a plan).
    Lookup,
    /// Ahead of a commit's moves (`load_victims`): counted as prefetched,
    /// and cached.
    Load,
    /// A scan passing over: counted as lookups, not cached.
    Scan,
    /// The cleaner reading the buckets it moves: neither counted, so the
    /// cache's hit rate is the readers', nor cached.
    Move,
}

/// A prefetch read of a bucket in flight: from which slot, as of which
/// generation; handed back to [`ValueStore::offer`] with the block.
pub(crate) struct BucketRead {
    slot: u32,
    generation: u64,
}

/// Keys and values on disk, with the RAM directory.
///
/// One writer: plan a commit, commit it, publish it (or drop the plan after a
/// failed commit, which poisons the store) before planning the next.
pub(crate) struct ValueStore {
    /// The engine its buckets live in.
    store: Arc<Store>,
    state: RwLock<ValueIndex>,
    /// Committed bucket blocks by slot, and long values by hash.
    cache: ValueCache,
    counts: CacheCounts,
    /// Buckets the last published plan rewrote: the next plan's room.
    last_plan: LastSize,
    /// Buckets a load is reading, which readers wait for.
    loads: InFlight,
}

impl ValueStore {
    /// Builds the directory and free space from the catalog of `store`, or
    /// without one, by reading every used bucket (and hands the store the
    /// notes for a new one); caches up to `cache_bytes` of buckets.
    pub(crate) fn open(store: &Arc<Store>, cache_bytes: usize) -> Result<ValueStore, Error> {
        let meta = store.meta();
        let buckets_len = meta.lengths[Target::Buckets as usize];
        let mut state = ValueIndex {
            dir: Directory::new(store.seed()),
            space: SlotSpace::new(
                buckets_len,
                store.free_slots(Target::Buckets)?,
                store.placement(),
            ),
            extents: Extents::default(),
            published: Published::default(),
        };
        let mut used_extents = Vec::new();
        match store.catalog() {
            Some(catalog) => {
                let mut buckets = Vec::new();
                for (slot, note) in catalog.notes(Target::Buckets) {
                    let noted = Directory::from_note(slot, note).ok_or_else(|| {
                        Error::corrupt("catalog note of a bucket").at("catalog", slot as u64)
                    })?;
                    buckets.push((noted.min, noted.meta));
                    used_extents.extend(noted.extents);
                }
                state.dir.apply(&[], buckets);
            }
            None => store.add_scanned(scan(store, &mut state.dir, &mut used_extents)?),
        }
        state.extents = Extents::from_used(used_extents, meta.lengths[Target::Overflow as usize])?;
        Ok(ValueStore {
            store: store.clone(),
            state: RwLock::new(state),
            cache: ValueCache::new(cache_bytes / BLOCK_SIZE),
            counts: CacheCounts::default(),
            last_plan: LastSize::default(),
            loads: InFlight::default(),
        })
    }

    /// Bucket reads answered from RAM, bucket reads that went to the disk,
    /// and buckets read into the cache ahead of the reads wanting them.
    pub(crate) fn cache_counts(&self) -> (u64, u64, u64) {
        self.counts.get()
    }

    /// Starts reading into `fetches`, unless cached, the buckets a commit of
    /// `key` reads to rebuild the subtree under its first `depth` bits (which
    /// may begin in the bucket before `key`'s), and `key`'s own bucket only if
    /// `own` (false when the caller reads it itself). Also for an absent key:
    /// the commit that inserts it reads the bucket its range falls in.
    pub(crate) fn prefetch<W: From<BucketRead>>(
        &self,
        key: &KeyPath,
        depth: usize,
        own: bool,
        fetches: &mut Fetches<W>,
    ) {
        let (slots, generation) = {
            let state = self.state.read();
            let Some((_, meta)) = state.dir.bucket_of(key) else {
                return;
            };
            // `key`'s own bucket apart: an absent key's may end below the
            // prefix, holding none of its keys, and the insert still reads it.
            let mut slots = state.dir.overlapping(&prefix(key, depth), depth);
            slots.retain(|&slot| slot != meta.slot);
            if own {
                slots.push(meta.slot);
            }
            (slots, state.published.generation())
        };
        for slot in slots {
            if !self.cache.has_bucket(slot) {
                let read = BucketRead { slot, generation };
                fetches.start(&self.store, Target::Buckets, slot, W::from(read));
            }
        }
    }

    /// Caches a bucket a [`ValueStore::prefetch`] read if it is still the
    /// committed one.
    pub(crate) fn offer(&self, read: BucketRead, block: BlockBuf) {
        // A bad block is left for the read that needs it to report. Checked
        // before the lock, which a publish waits on.
        if bucket::verify(&block).is_err() {
            return;
        }
        // Held while caching, so no publish frees the slot in between;
        // recursive, so that a publish waiting for the lock does not hold
        // this back while a plan, holding it, waits for this bucket.
        let state = self.state.read_recursive();
        // A lookup that raced the prefetch has counted the read already.
        if state.published.is_current(read.generation) && !self.cache.has_bucket(read.slot) {
            self.cache.put_bucket(read.slot, Arc::new(block));
            self.counts.prefetched(1);
        }
    }

    /// The blocks of `slots`, from the cache where it has them, each with whether
    /// it came from the disk; one from the disk that fails [`bucket::verify`]
    /// is that error instead. The caller checks that they are committed ones
    /// (the generation) before using or caching them: a slot a publish freed
    /// may hold anything, so a failed check there means looking again.
    fn read_buckets(&self, slots: &[u32], purpose: Purpose) -> Result<Vec<(Checked, bool)>, Error> {
        let mut found: Vec<Option<(Checked, bool)>> = slots
            .iter()
            .map(|s| self.cache.bucket(*s).map(|b| (Ok(b), false)))
            .collect();
        // One a load has on its way is waited for and found in the cache,
        // or, if its read failed, read here.
        let absent: Vec<usize> = (0..slots.len()).filter(|&i| found[i].is_none()).collect();
        if !absent.is_empty() {
            self.loads.wait_for(absent.iter().map(|&i| slots[i]));
            for i in absent {
                found[i] = self.cache.bucket(slots[i]).map(|b| (Ok(b), false));
            }
        }
        let missing: Vec<usize> = (0..slots.len()).filter(|&i| found[i].is_none()).collect();
        // A load counts what it caches, once it knows the blocks current.
        if matches!(purpose, Purpose::Lookup | Purpose::Scan) {
            self.counts
                .count((slots.len() - missing.len()) as u64, missing.len() as u64);
        }
        let blocks = match missing.as_slice() {
            [] => Vec::new(),
            [one] => vec![self.store.read(Target::Buckets, slots[*one] as u64)?],
            many => self
                .store
                .read_blocks(Target::Buckets, many.iter().map(|&i| slots[i] as u64))?,
        };
        for (i, block) in missing.into_iter().zip(blocks) {
            let checked = bucket::verify(&block)
                .map(|()| Arc::new(block))
                .map_err(|e| e.at("buckets", slots[i] as u64));
            found[i] = Some((checked, true));
        }
        Ok(found.into_iter().flatten().collect())
    }

    /// The committed bucket at `slot`, from the cache or verified from the
    /// disk, not cached: for a plan, under the state's read lock.
    fn read_one(&self, slot: u32) -> Result<Arc<BlockBuf>, Error> {
        let mut read = self.read_buckets(&[slot], Purpose::Lookup)?;
        read.pop()
            .ok_or(Error::Internal("a bucket read answered nothing"))?
            .0
    }

    /// Keys stored.
    pub(crate) fn len(&self) -> usize {
        self.state.read().dir.entries()
    }

    /// Buckets in use.
    pub(crate) fn buckets(&self) -> usize {
        self.state.read().dir.buckets()
    }

    /// Bytes of RAM the directory and summaries take.
    pub(crate) fn ram_bytes(&self) -> usize {
        self.state.read().dir.ram_bytes()
    }

    /// The slot of the bucket that may hold `key`, or `None` if `key` is certainly
    /// absent.
    #[cfg(test)]
    fn slot_for(&self, key: &KeyPath) -> Option<u32> {
        let state = self.state.read();
        let (_, meta) = state.dir.bucket_of(key)?;
        state.dir.may_hold(meta, key).then_some(meta.slot)
    }

    /// Runs `f` on the committed contents of the buckets `slots_of` picks from the
    /// directory, consistent with one published state even while commits run: a
    /// commit writes only slots the published state does not use, and a publish
    /// in between (which frees slots for the next) means looking again.
    /// Blocks read from the disk are cached unless a scan read them.
    fn with_committed(
        &self,
        purpose: Purpose,
        slots_of: impl Fn(&Directory) -> Vec<u32>,
        mut f: impl FnMut(&Block) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // Even answers from RAM alone: a poisoned store answers nothing.
        self.store.check_usable()?;
        loop {
            let (generation, slots) = {
                let state = self.state.read();
                (state.published.generation(), slots_of(&state.dir))
            };
            let blocks = self.read_buckets(&slots, purpose)?;
            let state = self.state.read();
            if !state.published.is_current(generation) {
                continue;
            }
            let mut result = Ok(());
            for (slot, (block, from_disk)) in slots.iter().zip(blocks) {
                result = result.and_then(|()| {
                    let block = block?;
                    if from_disk && matches!(purpose, Purpose::Lookup | Purpose::Load) {
                        self.cache.put_bucket(*slot, block.clone());
                        if purpose == Purpose::Load {
                            self.counts.prefetched(1);
                        }
                    }
                    f(&block).map_err(|e| e.at("buckets", *slot as u64))
                });
            }
            return result;
        }
    }

    /// Reads into the cache the buckets that `keys` (sorted) fall in and
    /// that it lacks, and returns once all are there: [`loading::BucketLoad::run`] of
    /// [`ValueStore::start_load`] for rewrites of those keys.
    #[cfg(test)]
    pub(crate) fn load_buckets<'a>(&self, keys: impl Iterator<Item = &'a KeyPath>) {
        let rewrites: Vec<_> = keys.map(|k| (*k, Some(Vec::new()))).collect();
        self.start_load(&rewrites, crate::trie::MAX_DEPTH).run();
    }

    /// Reads into the cache the buckets the next plan will move
    /// ([`SlotSpace::victims`]), up to a quarter of the cache, so that its
    /// commit does not wait for them.
    pub(crate) fn load_victims(&self) {
        let victims = self.state.read().space.victims();
        let room = self.cache.capacity() / 4;
        let slots_of = |_: &Directory| {
            let mut slots = victims.clone();
            slots.retain(|s| !self.cache.has_bucket(*s));
            slots.truncate(room);
            slots
        };
        let _ = self.with_committed(Purpose::Load, slots_of, |_| Ok(()));
    }

    fn entry(&self, key: &KeyPath) -> Result<Option<BucketEntry>, Error> {
        let mut found = None;
        let slot_of = |dir: &Directory| match dir.bucket_of(key) {
            Some((_, meta)) if dir.may_hold(meta, key) => vec![meta.slot],
            _ => Vec::new(),
        };
        self.with_committed(Purpose::Lookup, slot_of, |block| {
            found = bucket::find(block, key)?;
            Ok(())
        })?;
        Ok(found)
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        loop {
            let generation = self.state.read().published.generation();
            let (len, hash, start) = match self.entry(key)? {
                None => return Ok(None),
                Some(BucketEntry {
                    stored: Stored::Inline(v),
                    ..
                }) => return Ok(Some(v.to_vec())),
                Some(BucketEntry {
                    stored: Stored::Overflow { len, hash, start },
                    ..
                }) => (len, hash, start),
            };
            if let Some(value) = self.read_overflow(generation, len, &hash, start, true)? {
                return Ok(Some(value));
            }
        }
    }

    /// A value in overflow space, found in a bucket of the state published at
    /// `generation`: from the cache if it holds it, else from the disk, then
    /// cached if `fill` (a scan passes over without filling). `None` if a
    /// publish since freed its space, which may hold another value by now:
    /// the caller looks again.
    fn read_overflow(
        &self,
        generation: u64,
        len: u32,
        hash: &ValueHash,
        start: u64,
        fill: bool,
    ) -> Result<Option<Vec<u8>>, Error> {
        if let Some(value) = self.cache.value(hash) {
            return Ok(Some(value.to_vec()));
        }
        match overflow::read(&self.store, len, hash, start) {
            Err(Error::Corrupt { .. }) if !self.state.read().published.is_current(generation) => {
                Ok(None)
            }
            Ok(value) => {
                if fill {
                    self.cache.put_value(*hash, &value);
                }
                Ok(Some(value))
            }
            Err(e) => Err(e),
        }
    }

    /// Every key starting with the first `depth` bits of `path`, with its value
    /// hash, in key order.
    pub(crate) fn entries_with_prefix(
        &self,
        path: &KeyPath,
        depth: usize,
    ) -> Result<Vec<(KeyPath, ValueHash)>, Error> {
        let start = prefix(path, depth);
        let mut out = Vec::new();
        self.with_committed(
            Purpose::Lookup,
            |dir| dir.overlapping(&start, depth),
            |block| {
                // Most of the bucket lies outside a deep prefix: the walk
                // starts at `start` (its smallest key) and stops at the first
                // key past it.
                for e in bucket::entries_from(block, &start)? {
                    let e = e?;
                    if !shares_prefix(&e.key, &start, depth) {
                        break;
                    }
                    out.push((e.key, e.value_hash()));
                }
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// The entries from `from` on, in key order, of up to `buckets` buckets of
    /// one published state, and the smallest key of the bucket after them
    /// (`None`: they were the last). Every stored key from `from` up to that
    /// one is among the entries.
    pub(crate) fn range(&self, from: &KeyPath, buckets: usize) -> Result<BucketRun, Error> {
        loop {
            let generation = self.state.read().published.generation();
            let after = std::cell::Cell::new(None);
            // Buckets are about half full of 40-byte entries or fuller.
            let mut out = Vec::with_capacity(buckets * 64);
            let mut overflows = Vec::new();
            let run = |dir: &Directory| {
                let (slots, next) = dir.run_from(from, buckets);
                after.set(next);
                slots
            };
            self.with_committed(Purpose::Scan, run, |block| {
                for e in bucket::entries(block)? {
                    let e = e?;
                    if e.key < *from {
                        continue;
                    }
                    if let Some((len, hash, start)) = e.overflow() {
                        overflows.push((out.len(), len, hash, start));
                    }
                    out.push((e.key, e.inline().map(<[u8]>::to_vec).unwrap_or_default()));
                }
                Ok(())
            })?;
            let mut moved = false;
            for (i, len, hash, start) in overflows {
                match self.read_overflow(generation, len, &hash, start, false)? {
                    Some(value) => out[i].1 = value,
                    None => {
                        moved = true;
                        break;
                    }
                }
            }
            if !moved {
                return Ok((out, after.get()));
            }
        }
    }

    /// Keys to cut the stored state at so that each piece holds about
    /// `bytes` of keys and values, ascending, each a bucket's smallest (so
    /// present) key. Sizes are estimated from a sample of buckets.
    pub(crate) fn cut_points(&self, bytes: usize) -> Result<Vec<KeyPath>, Error> {
        const SAMPLE: usize = 32;
        // Bytes per entry in sampled buckets, evenly spaced; overflow values
        // count by the length their entry records, unread.
        let (mut entries, mut total) = (0usize, 0usize);
        let sample = |dir: &Directory| {
            let step = dir.buckets().div_ceil(SAMPLE).max(1);
            dir.sizes().step_by(step).map(|(_, slot, _)| slot).collect()
        };
        self.with_committed(Purpose::Scan, sample, |block| {
            for e in bucket::entries(block)? {
                entries += 1;
                total += 32 + e?.value_len();
            }
            Ok(())
        })?;
        let per_entry = total.checked_div(entries).unwrap_or(40).max(1);
        let per_piece = (bytes / per_entry).max(1);
        let state = self.state.read();
        let mut cuts = Vec::new();
        let mut held = 0usize;
        for (min, _, count) in state.dir.sizes() {
            if held >= per_piece {
                cuts.push(min);
                held = 0;
            }
            held += count;
        }
        Ok(cuts)
    }
}

/// Reads every used bucket of `store` into `dir` and `used_extents`; returns
/// their catalog notes.
fn scan(
    store: &Store,
    dir: &mut Directory,
    used_extents: &mut Vec<(u64, u64)>,
) -> Result<Notes, Error> {
    let mut notes = Notes::default();
    let mut ranges: Vec<(KeyPath, KeyPath)> = Vec::new();
    let mut keys = Vec::with_capacity(128);
    let mut extents = Vec::new();
    let mut buckets = Vec::new();
    let used = store.used_slots(Target::Buckets);
    store.for_each_block(Target::Buckets, &used, |i, block| {
        let slot = used[i];
        let at = |e: Error| e.at("buckets", slot);
        keys.clear();
        extents.clear();
        bucket::verify(&block).map_err(at)?;
        for e in bucket::entries(&block).map_err(at)? {
            let e = e.map_err(at)?;
            keys.push(e.key);
            extents.extend(e.extent());
        }
        let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
            return Err(at(Error::corrupt("empty bucket")));
        };
        ranges.push((*first, *last));
        let slot = stored_slot(slot)?;
        let (min, meta) = dir.summarize(slot, keys.iter());
        notes.add(Target::Buckets, slot, |b| {
            Directory::note(&min, &meta, extents.iter().copied(), b)
        });
        used_extents.extend_from_slice(&extents);
        buckets.push((min, meta));
        Ok(())
    })?;
    dir.apply(&[], buckets);
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[0].1 >= w[1].0) || ranges.len() != dir.buckets() {
        return Err(Error::corrupt("buckets overlap"));
    }
    Ok(notes)
}
