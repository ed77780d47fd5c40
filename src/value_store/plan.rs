//! Planning a commit's value changes: which buckets it rewrites (in runs of
//! adjacent ones, copy-on-write), where their blocks go, and the overflow
//! space long values take; then publishing the plan once it is durable.

use std::ops::Range;
use std::sync::Arc;

use super::bucket::{self, BucketEntry, InlineValue, Patched, Stored, INLINE_MAX, PAYLOAD};
use super::cache::ValueCache;
use super::directory::{by_bucket, BucketMeta, Directory};
use super::overflow::{self, Extents};
use super::{Purpose, ValueStore};
use crate::block::BlockBuf;
use crate::store::{Batch, BlockWrite, Notes, SlotSpace, Stream, Target};
use crate::trie::{common_prefix_len, KeyPath, ValueHash};
use crate::Error;

/// Bytes of entries under which a bucket is worth merging with a neighbour.
pub(super) const SMALL: usize = PAYLOAD / 4;

/// Blocks a plan that streams its writes starts at a time.
const WRITE_CHUNK: usize = 2048;

/// Changes to values, to be committed together.
pub(crate) struct ValuePlan {
    seqno: u64,
    /// The blocks to commit.
    writes: Vec<BlockWrite>,
    removed: Vec<KeyPath>,
    /// The new buckets' directory summaries: smallest key and summary.
    added: Vec<(KeyPath, BucketMeta)>,
    /// The buckets file's slots after the plan's allocations.
    space: SlotSpace,
    /// Slots of the buckets this plan replaces: reusable only by later commits.
    freed_slots: Vec<u32>,
    /// How many of `freed_slots` are staged.
    freed_staged: usize,
    /// Each new bucket's catalog note.
    notes: Notes,
    extents: Extents,
    released: Vec<(u64, u64)>,
    /// Buckets moved out of the regions the plan cleans.
    pub(crate) moved: usize,

    /// Each changed key's value before the commit, in key order: what sessions
    /// pinned to older commits read.
    pub(crate) previous: Vec<(KeyPath, Option<Vec<u8>>)>,
    /// Changed keys whose previous value is in overflow space: (index into
    /// `previous`, length, hash, start), read before the plan returns.
    previous_overflow: Vec<(usize, u32, ValueHash, u64)>,
}

impl ValueStore {
    /// Plans commit `seqno`'s changes (sorted by key, each key once; `None`
    /// deletes). Every [`WRITE_CHUNK`] blocks planned, `early` may stage the
    /// plan so far and start its writes, so the disk works while the rest is
    /// planned. Nothing changes until [`ValueStore::publish`].
    pub(crate) fn plan(
        &self,
        changes: &[(KeyPath, Option<Vec<u8>>)],
        seqno: u64,
        mut early: impl FnMut(&mut ValuePlan) -> Result<(), Error>,
    ) -> Result<ValuePlan, Error> {
        crate::trie::check_strictly_sorted(changes.iter().map(|(k, _)| k))?;
        for (_, value) in changes {
            crate::check_value_len(value.as_ref().map_or(0, Vec::len))?;
        }
        let state = self.state.read();
        let room = self.last_plan.room();
        let mut plan = ValuePlan {
            seqno,
            writes: Vec::new(),
            removed: Vec::with_capacity(room),
            added: Vec::with_capacity(room),
            space: state.space.clone(),
            freed_slots: Vec::with_capacity(room),
            freed_staged: 0,
            notes: Notes::default(),
            extents: state.extents.clone(),
            released: Vec::new(),
            moved: 0,
            previous: Vec::with_capacity(changes.len()),
            previous_overflow: Vec::new(),
        };
        // Each change's bucket (smallest key and slot), looked up once.
        let homes: Vec<Option<(KeyPath, &BucketMeta)>> = changes
            .iter()
            .map(|(k, _)| state.dir.bucket_of(k))
            .collect();
        // Each bucket with changes, in key order, as the commit's load
        // (`start_load`) brings it: mostly from RAM by then.
        let mut taken = std::collections::HashSet::with_capacity(changes.len());
        let mut take = |slot: u32| -> Result<Arc<BlockBuf>, Error> {
            if !taken.insert(slot) {
                return Err(Error::corrupt("bucket listed twice"));
            }
            let (block, from_disk) = self
                .read_buckets(&[slot], Purpose::Lookup)?
                .pop()
                .ok_or(Error::Internal("a bucket read answered nothing"))?;
            // The trie update beside the plan rebuilds elided subtrees from
            // these same buckets. They are the published ones: no publish
            // runs beside a plan (one writer).
            let block = block?;
            if from_disk {
                self.cache.put_bucket(slot, block.clone());
            }
            Ok(block)
        };

        // Buckets are rewritten in runs of adjacent ones, so that a bucket left
        // nearly empty merges with the next, and one overflowing can share with it.
        let neighbour = |slot| self.read_one(slot);
        let mut run = Run::default();
        // One bucket's entries before the changes, reused from bucket to bucket.
        let mut old = Vec::new();
        // The changes that fall in one bucket (or in the empty store).
        for Range { start: i, end: j } in by_bucket(&homes) {
            let bucket = homes[i];
            if let (Some(last), Some((min, _))) = (run.last, bucket) {
                if state.dir.successor(&last).map(|s| s.0) != Some(min) {
                    plan.flush(&mut run, &neighbour, &state.dir, None)?;
                }
            }
            // A bucket whose changes only write values over others of the
            // same length, standing alone, is copied and written over.
            let mut block = match bucket {
                Some((_, meta)) => Some(take(meta.slot)?),
                None => None,
            };
            if let (Some((min, meta)), None, Some(read)) = (bucket, run.last, &block) {
                let patched = bucket::patch(read, &changes[i..j], seqno)?;
                if let Some(patched) = patched.filter(|p| p.payload >= SMALL) {
                    plan.rewrite(min, meta, patched, &changes[i..j])?;
                    if plan.writes.len() >= WRITE_CHUNK {
                        early(&mut plan)?;
                    }
                    continue;
                }
            }
            old.clear();
            if let (Some((min, meta)), Some(read)) = (bucket, block.take()) {
                bucket::decode_into(&read, &mut old)?;
                run.take(min, meta.slot);
            }
            plan.merge(&mut old, &changes[i..j], &mut run.entries);
            let next_changed = homes.get(j).copied().flatten().map(|(min, _)| min);
            if !run.is_small() || run.last.is_none() {
                plan.flush(&mut run, &neighbour, &state.dir, next_changed)?;
            }
            if plan.writes.len() >= WRITE_CHUNK {
                early(&mut plan)?;
            }
        }
        plan.flush(&mut run, &neighbour, &state.dir, None)?;
        self.clean(&mut plan, &state.dir)?;
        // Space is released only at publish, so these still hold the old values.
        for (i, len, hash, start) in std::mem::take(&mut plan.previous_overflow) {
            plan.previous[i].1 = Some(overflow::read(&self.store, len, &hash, start)?);
        }
        Ok(plan)
    }

    /// Makes a committed plan visible; `written` is what the commit wrote to
    /// the buckets file: the plan's new buckets, for the cache as they are.
    /// The cache's share is returned, for the caller to apply beside the
    /// rest of its publish, and the directory's replaced summaries, for it
    /// to free there too.
    pub(crate) fn publish(
        &self,
        plan: ValuePlan,
        written: Vec<(u32, BlockBuf)>,
    ) -> (CacheUpdate<'_>, Replaced) {
        self.last_plan
            .record(plan.added.len().max(plan.removed.len()));
        let update = CacheUpdate {
            cache: &self.cache,
            freed: plan.freed_slots.clone(),
            written,
        };
        let mut state = self.state.write();
        state.published.publish();
        let replaced = Replaced(state.dir.apply(&plan.removed, plan.added));
        state.space = plan.space;
        state.space.release(plan.seqno, plan.freed_slots);
        state.extents = plan.extents;
        // Freed only now: until the commit was durable, readers could still want them.
        for (start, blocks) in plan.released {
            state.extents.release(start, blocks);
        }
        (update, replaced)
    }
}

/// A publish's changes to the bucket cache: the freed slots' buckets out,
/// the written ones in. Applied after the publish, and so outside the
/// store's lock: every bucket a reader put in the cache for a freed slot it
/// put under that lock, from the directory before the publish (a reader
/// checks the generation before it caches), so it is there to be forgotten;
/// a reader that misses a written bucket meanwhile reads it from the disk.
#[must_use = "the cache keeps freed buckets and lacks the written ones until applied"]
pub(crate) struct CacheUpdate<'a> {
    cache: &'a ValueCache,
    freed: Vec<u32>,
    written: Vec<(u32, BlockBuf)>,
}

/// The directory's summaries of the buckets a publish rewrote in place: at
/// 2^24 freeing them takes some 10 ms a commit, which the committing thread
/// need not spend under the store's lock.
#[must_use = "freed where the commit has a CPU to spare"]
pub(crate) struct Replaced(Vec<BucketMeta>);

impl Replaced {
    /// Frees the summaries.
    pub(crate) fn free(self) {
        drop(self.0);
    }
}

impl CacheUpdate<'_> {
    /// Forgets the freed slots' buckets, then caches the written ones.
    pub(crate) fn apply(self) {
        for slot in self.freed {
            self.cache.forget_bucket(slot);
        }
        for (slot, block) in self.written {
            self.cache.put_bucket(slot, Arc::new(block));
        }
    }
}

impl ValueStore {
    /// Moves out the buckets of the regions the plan cleans
    /// ([`SlotSpace::victims`]) that it does not rewrite already: each is
    /// written again as it is, into the moved blocks' region.
    fn clean(&self, plan: &mut ValuePlan, dir: &Directory) -> Result<(), Error> {
        let victims = plan.space.victims();
        if victims.is_empty() {
            return Ok(());
        }
        let freed: std::collections::HashSet<u32> = plan.freed_slots.iter().copied().collect();
        let wanted: Vec<u32> = victims
            .into_iter()
            .filter(|slot| !freed.contains(slot))
            .collect();
        let blocks = self.read_buckets(&wanted, Purpose::Move)?;
        for (slot, (block, _)) in wanted.into_iter().zip(blocks) {
            let block = block?;
            let entries: Vec<BucketEntry> = bucket::decode(&block)?;
            let Some((min, meta)) = entries.first().and_then(|e| dir.bucket_of(&e.key)) else {
                continue;
            };
            if meta.slot != slot {
                continue;
            }
            plan.removed.push(min);
            plan.freed_slots.push(slot);
            let meta = meta.moved_to(plan.space.allocate(Stream::Moved)?);
            let extents: Vec<(u64, u64)> =
                entries.iter().filter_map(|e| e.stored.extent()).collect();
            plan.add_bucket(BlockBuf::clone(&block), min, meta, extents.into_iter());
            plan.moved += 1;
        }
        Ok(())
    }
}

impl ValuePlan {
    /// Moves the plan's writes and frees so far to `batch`, and sets the
    /// files' lengths; may be called again as the plan grows.
    pub(crate) fn stage(&mut self, batch: &mut Batch) {
        let freed = self.freed_slots[self.freed_staged..].iter().copied();
        batch.stage(
            Target::Buckets,
            &mut self.writes,
            freed,
            self.space.length(),
        );
        self.freed_staged = self.freed_slots.len();
        batch.lengths[Target::Overflow as usize] = self.extents.len;
        batch.notes.append(&mut self.notes);
    }

    /// Appends to `out` `old` (a bucket's entries, taken) with `changes`
    /// applied; overflow space for new long values is allocated, and the space
    /// of replaced ones released at publish.
    fn merge(
        &mut self,
        old: &mut Vec<BucketEntry>,
        changes: &[(KeyPath, Option<Vec<u8>>)],
        out: &mut Vec<BucketEntry>,
    ) {
        out.reserve(old.len() + changes.len());
        let mut old = old.drain(..).peekable();
        for (key, value) in changes {
            while let Some(e) = old.next_if(|e| e.key < *key) {
                out.push(e);
            }
            let previous = match old.next_if(|e| e.key == *key).map(|e| e.stored) {
                None => None,
                Some(Stored::Inline(v)) => Some(v.to_vec()),
                Some(Stored::Overflow { len, hash, start }) => {
                    self.released
                        .push((start, overflow::blocks_for(len as usize)));
                    self.previous_overflow
                        .push((self.previous.len(), len, hash, start));
                    None
                }
            };
            self.previous.push((*key, previous));
            let Some(value) = value else { continue };
            let stored = if value.len() <= INLINE_MAX {
                Stored::Inline(InlineValue::new(value))
            } else {
                let start = self.extents.allocate(overflow::blocks_for(value.len()));
                self.writes.extend(overflow::write(value, start));
                Stored::Overflow {
                    len: value.len() as u32,
                    hash: crate::trie::hash_value(value),
                    start,
                }
            };
            out.push(BucketEntry { key: *key, stored });
        }
        out.extend(old);
    }

    /// Writes bucket `min` (summarized by `meta`) anew as `patched`,
    /// `changes` written over its values, to a free slot; its old slot is
    /// freed.
    fn rewrite(
        &mut self,
        min: KeyPath,
        meta: &BucketMeta,
        patched: Patched,
        changes: &[(KeyPath, Option<Vec<u8>>)],
    ) -> Result<(), Error> {
        for ((key, _), old) in changes.iter().zip(patched.previous) {
            self.previous.push((*key, Some(old)));
        }
        self.removed.push(min);
        self.freed_slots.push(meta.slot);
        let slot = self.space.allocate(Stream::Fresh)?;
        let mut meta = meta.moved_to(slot);
        // Noted before the largest key was kept: learned now, as a full
        // rewrite would.
        if !meta.knows_last() {
            if let Some(last) = bucket::entries(&patched.block)?.last() {
                meta.learn_last(&last?.key);
            }
        }
        self.add_bucket(patched.block, min, meta, patched.extents.into_iter());
        Ok(())
    }

    /// Adds a new bucket, written to `meta.slot`, with its catalog note.
    fn add_bucket(
        &mut self,
        block: BlockBuf,
        min: KeyPath,
        meta: BucketMeta,
        extents: impl Iterator<Item = (u64, u64)>,
    ) {
        self.writes.push(BlockWrite {
            target: Target::Buckets,
            index: meta.slot as u64,
            block: block.into(),
        });
        self.notes.add(Target::Buckets, meta.slot, |b| {
            Directory::note(&min, &meta, extents, b)
        });
        self.added.push((min, meta));
    }

    /// Writes `run` out as buckets, each to a free slot; the run's old slots
    /// are freed. A run under a quarter full, or overflowing, first takes in
    /// the next bucket if this commit leaves it untouched (`next_changed` names
    /// the next bucket that has changes), so small buckets merge and full ones
    /// share their load.
    fn flush(
        &mut self,
        run: &mut Run,
        neighbour: &dyn Fn(u32) -> Result<Arc<BlockBuf>, Error>,
        dir: &Directory,
        next_changed: Option<KeyPath>,
    ) -> Result<(), Error> {
        if run.slots.is_empty() && run.entries.is_empty() {
            return Ok(());
        }
        let bytes = bucket::payload_len(&run.entries);
        if run.is_small() || bytes > PAYLOAD {
            if let Some((min, slot)) = run.last.and_then(|last| dir.successor(&last)) {
                if Some(min) != next_changed {
                    let block = neighbour(slot)?;
                    let decoded = bucket::decode(&block).map_err(|e| e.at("buckets", slot as u64));
                    run.entries.extend(decoded?);
                    run.take(min, slot);
                }
            }
        }
        let Run {
            entries,
            slots,
            mins,
            ..
        } = std::mem::take(run);
        self.removed.extend(mins);
        self.freed_slots.extend(slots);
        for part in split(entries) {
            let slot = self.space.allocate(Stream::Fresh)?;
            let block = bucket::encode(&part, self.seqno);
            let (min, meta) = dir.summarize(slot, part.iter().map(|e| &e.key));
            self.add_bucket(
                block,
                min,
                meta,
                part.iter().filter_map(|e| e.stored.extent()),
            );
        }
        Ok(())
    }
}

/// Adjacent buckets being rewritten together: their entries after the changes,
/// their slots and smallest keys.
#[derive(Default)]
struct Run {
    entries: Vec<BucketEntry>,
    slots: Vec<u32>,
    mins: Vec<KeyPath>,
    last: Option<KeyPath>,
}

impl Run {
    fn take(&mut self, min: KeyPath, slot: u32) {
        self.slots.push(slot);
        self.mins.push(min);
        self.last = Some(min);
    }

    /// Under a quarter of a bucket: worth merging with a neighbour.
    fn is_small(&self) -> bool {
        bucket::payload_len(&self.entries) < SMALL
    }
}

/// How far below the keys' common prefix a cut may fall: cuts stay on bit
/// boundaries (so a deep prefix's keys share one bucket) yet can land near the
/// middle of the bytes instead of wherever the first differing bit happens to fall.
const CUT_SLACK_BITS: usize = 3;

/// `entries` (sorted) cut into as few bucket-sized runs as fit, each cut at the
/// bit-aligned boundary nearest an even share of the bytes.
fn split(entries: Vec<BucketEntry>) -> Vec<Vec<BucketEntry>> {
    let total = bucket::payload_len(&entries);
    if total <= PAYLOAD {
        return if entries.is_empty() {
            Vec::new()
        } else {
            vec![entries]
        };
    }
    let parts = total.div_ceil(PAYLOAD);
    let base = common_prefix_len(&entries[0].key, &entries[entries.len() - 1].key);
    // (index, bytes before it) of every allowed cut; the first differing bit
    // always provides one.
    let mut cuts = Vec::new();
    let mut before = 0;
    for i in 1..entries.len() {
        before += entries[i - 1].encoded_len();
        if common_prefix_len(&entries[i - 1].key, &entries[i].key) < base + CUT_SLACK_BITS {
            cuts.push((i, before));
        }
    }
    let mut chosen: Vec<usize> = (1..parts)
        .filter_map(|j| {
            let target = j * total / parts;
            cuts.iter()
                .min_by_key(|(_, b)| b.abs_diff(target))
                .map(|(i, _)| *i)
        })
        .collect();
    chosen.dedup();
    let mut out = Vec::new();
    let mut rest = entries;
    for cut in chosen.into_iter().rev() {
        let tail = rest.split_off(cut);
        out.push(tail);
    }
    out.push(rest);
    out.reverse();
    // A part the alignment left too large is cut again, finer.
    out.into_iter().flat_map(split).collect()
}
