//! The commit protocol (docs/format.md, "Commit protocol"): a commit's
//! blocks go to slots the durable state does not use (beside rewrites of
//! used slots' own bytes, which change nothing), with its log records
//! past their logs' ends, all synced; then the slot map, synced, is the
//! commit point; then the meta record. A failure before the commit point
//! leaves the durable state as it was; any failure poisons the store.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::batch::{BlockWrite, Place, Prewritten, Written};
use super::record_log::LogRecord;
use super::slot_map::{self, SlotMap};
use super::{catalog, Batch, Durable, Meta, Store, Target, TARGETS};
use crate::block::{BlockBuf, IoBuf, BLOCK_SIZE};
use crate::io::{may_still_land, DataFile, Io, Writes};
use crate::trie::Node;
use crate::Error;

impl Store {
    /// An empty batch for a commit of root `root` on the files as they are,
    /// with room for as much as the last commit staged.
    pub(crate) fn begin_batch(&self, root: Node) -> Batch {
        let mut batch = Batch::new(root, self.meta().lengths);
        batch.notes.reserve_exact(self.last_notes.room());
        batch.places_room = self.last_places.room();
        batch
    }

    /// Starts the writes staged in `batch` so far, ahead of its commit, so
    /// the disk works while the rest of the commit is computed; they move to
    /// [`Batch::early`], and later calls add to them. Each must go to a slot
    /// the durable state does not use, inside `batch.lengths` (room for which
    /// is reserved now). Nothing is durable, or poisoned, by this alone.
    pub(crate) fn write_early(&self, batch: &mut Batch) -> Result<(), Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        let mut writes = std::mem::take(&mut batch.writes);
        let rewrites = std::mem::take(&mut batch.rewrites);
        keep_last_writes(&mut writes);
        let places: Vec<(Target, u64)> = writes.iter().map(|w| (w.target, w.index)).collect();
        {
            let durable = self.durable.read();
            check_writes(&places, &batch.lengths, &durable.map)?;
            check_rewrites(&rewrites, &durable.map)?;
        }
        for t in Target::ALL {
            self.targets[t as usize].reserve(batch.lengths[t as usize])?;
        }
        let (places, pending) = self.start_writes(writes, rewrites)?;
        let room = batch.places_room;
        let early = batch.early.get_or_insert_with(|| {
            self.prewrites.fetch_add(1, Ordering::SeqCst);
            Prewritten {
                places: Vec::with_capacity(room),
                pending: Vec::new(),
                alive: self.prewrites.clone(),
            }
        });
        early.places.extend(places);
        early.pending.push(pending);
        Ok(())
    }

    /// Submits `writes` and `rewrites` together in file order, so
    /// neighbours can merge.
    fn start_writes(
        &self,
        writes: Vec<BlockWrite>,
        rewrites: Vec<BlockWrite>,
    ) -> Result<(Vec<Place>, Writes), Error> {
        let mut all: Vec<(BlockWrite, bool)> = writes
            .into_iter()
            .map(|w| (w, false))
            .chain(rewrites.into_iter().map(|w| (w, true)))
            .collect();
        all.sort_unstable_by_key(|(w, _)| (w.target as u8, w.index));
        let offsets = all
            .iter()
            .map(|(w, _)| w.index.checked_mul(BLOCK_SIZE as u64))
            .collect::<Option<Vec<u64>>>()
            .ok_or(Error::Internal("a block index past any file"))?;
        let places = all
            .iter()
            .map(|&(ref w, rewrite)| Place {
                target: w.target,
                index: w.index,
                rewrite,
            })
            .collect();
        let pending =
            self.io
                .start_all(all.into_iter().zip(offsets).map(|((w, _), offset)| {
                    (self.targets[w.target as usize].clone(), offset, w.block)
                }));
        Ok((places, pending))
    }

    /// Makes `batch` the next durable commit: on `Ok` it survives any crash,
    /// and the blocks written come back for the stores' caches (so a written
    /// block exists once in memory).
    /// On `Err` the store is poisoned (unless the batch was refused before
    /// any block of its own was written: blocks a prewrite wrote lie in free
    /// slots, which nothing uses), and reopening yields the state before the batch;
    /// except for [`Error::CommitDurable`] (the state after it) and
    /// [`Error::CommitInDoubt`] (either).
    pub(crate) fn persist(&self, mut batch: Batch) -> Result<Written, Error> {
        let _one_at_a_time = self.commit_lock.lock();
        self.check_usable()?;
        keep_last_writes(&mut batch.writes);
        let early = batch.early.take();
        // Early writes were checked against this same state: every commit
        // since would have been refused beside them.
        if self.prewrites.load(Ordering::SeqCst) != usize::from(early.is_some()) {
            return Err(Error::Internal(
                "a commit beside early writes it does not include",
            ));
        }
        let early_places = early.as_ref().map_or(&[][..], |e| &e.places);
        let places: Vec<(Target, u64)> = early_places
            .iter()
            .filter(|p| !p.rewrite)
            .map(|p| (p.target, p.index))
            .chain(batch.writes.iter().map(|w| (w.target, w.index)))
            .collect();
        self.last_notes.record(batch.notes.len());
        self.last_places.record(places.len());
        let (prev, map, payload) = {
            let durable = self.durable.read();
            let map = validate(&places, &batch.freed, &batch.lengths, &durable.map)?;
            check_rewrites(&batch.rewrites, &durable.map)?;
            let notes = std::mem::take(&mut batch.notes);
            let payload = catalog::record(notes, &places, &durable.map, &map)?;
            (durable.meta, map, payload)
        };
        let commit = Meta {
            seqno: prev.seqno + 1,
            root: batch.root,
            lengths: batch.lengths,
            prev_lengths: prev.lengths,
            ..Meta::default()
        };
        let (meta, map_blocks) = slot_map::encode(commit, &map);
        let map_file = &self.maps[meta.slot() as usize];
        // Room for every write first: a full disk refuses the commit here,
        // with nothing committed and the store still usable.
        for t in Target::ALL {
            self.targets[t as usize].reserve(batch.lengths[t as usize])?;
        }
        map_file.reserve(meta.map_blocks)?;
        let history = match batch.history.take() {
            Some(payload) => Some(self.history.lock().ready()?.prepare(
                &self.dir,
                meta.seqno,
                &[&payload],
            )?),
            None => None,
        };
        let history_blocks = history.as_ref().map(|h| h.2.len() as u64);
        let mut catalog = self.catalog.lock();
        let record = catalog
            .log
            .prepare(&self.dir, meta.seqno, &payload.parts())?;
        let record_blocks = record.2.len() as u64;
        // Past the last refusal: from here the commit lands or poisons.
        catalog.recent.push(payload);
        drop(catalog);
        let records = std::iter::once(record).chain(history).collect();
        let result = self.commit_locked(
            (batch.writes, batch.rewrites),
            early,
            records,
            &meta,
            map_file,
            map_blocks,
        );
        match result {
            Ok(_) => {
                *self.durable.write() = Durable { meta, map };
                self.catalog.lock().log.appended(meta.seqno, record_blocks);
                if let Some(blocks) = history_blocks {
                    self.history.lock().appended(meta.seqno, blocks);
                }
            }
            Err(ref e) => {
                tracing::error!(
                    seqno = meta.seqno,
                    error = %e,
                    "commit failed past its refusals: the handle is poisoned; reopen to get the last durable state"
                );
                self.poisoned.store(true, Ordering::SeqCst)
            }
        }
        result
    }

    fn commit_locked(
        &self,
        (writes, rewrites): (Vec<BlockWrite>, Vec<BlockWrite>),
        early: Option<Prewritten>,
        records: Vec<LogRecord>,
        meta: &Meta,
        map_file: &Arc<DataFile>,
        map_blocks: Vec<BlockBuf>,
    ) -> Result<Written, Error> {
        // 1. The blocks, to slots the durable state does not use (some
        // started early; rewrites beside them change no slot's bytes), and
        // the catalog and history records, past their
        // logs' ends; synced before the map names them. A failure here leaves
        // the durable state as it was.
        let logged: Vec<(Arc<DataFile>, Writes)> = records
            .into_iter()
            .map(|(file, first, blocks)| {
                let pending = self
                    .io
                    .start_all(blocks.into_iter().enumerate().map(|(i, b)| {
                        let offset = (first + i as u64) * BLOCK_SIZE as u64;
                        (file.clone(), offset, IoBuf::from(b))
                    }));
                (file, pending)
            })
            .collect();
        let (mut places, late) = self.start_writes(writes, rewrites)?;
        let mut blocks = Vec::new();
        if let Some(mut early) = early {
            places.splice(0..0, std::mem::take(&mut early.places));
            blocks = early.wait()?;
        }
        blocks.extend(late.wait()?);
        let files_written: Vec<Target> = Target::ALL
            .into_iter()
            .filter(|t| places.iter().any(|p| p.target == *t))
            .collect();
        let mut written: Vec<BlockWrite> = places
            .into_iter()
            .zip(blocks)
            .filter(|(place, _)| !place.rewrite)
            .map(|(place, block)| BlockWrite {
                target: place.target,
                index: place.index,
                block,
            })
            .collect();
        written.sort_unstable_by_key(|w| (w.target as u8, w.index));
        let written = Written(written);
        for t in files_written {
            self.targets[t as usize].sync()?;
        }
        for (file, pending) in logged {
            pending.wait()?;
            file.sync()?;
        }

        // 2. The slot map, synced: the commit point, since recovery rolls
        // forward to any whole map. If it fails, the map is erased so that the
        // error means "not committed"; only if that fails too is the outcome
        // open.
        if let Err(e) = write_synced(&self.io, map_file, 0, map_blocks) {
            // A map write the engine gave up on may land after the erase.
            let erased = map_file.erase().is_ok() && !may_still_land(&e);
            return Err(match erased {
                true => e,
                false => Error::CommitInDoubt(Box::new(e)),
            });
        }

        // 3. The meta record. A failure here leaves a durable commit that
        // reopening finds.
        write_meta(&self.io, &self.meta_file, meta)
            .map_err(|e| Error::CommitDurable(Box::new(e)))?;
        Ok(written)
    }
}

/// Writes run concurrently, so a block written twice keeps only its last
/// write.
fn keep_last_writes(writes: &mut Vec<BlockWrite>) {
    // No plan repeats a block; only the rare batch that does pays for a map.
    if !any_twice(writes.iter().map(|w| (w.target, w.index))) {
        return;
    }
    let mut last = std::collections::HashMap::with_capacity(writes.len());
    for (i, w) in writes.iter().enumerate() {
        last.insert((w.target, w.index), i);
    }
    let mut i = 0;
    writes.retain(|w| {
        i += 1;
        last[&(w.target, w.index)] == i - 1
    });
}

/// Whether a block occurs twice among `places`: sorted, not hashed, as a
/// commit checks some 100,000 at 2^24 (a hashed set took some 10 ms of it).
fn any_twice(places: impl Iterator<Item = (Target, u64)>) -> bool {
    let mut keys: Vec<(u8, u64)> = places.map(|(t, i)| (t as u8, i)).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

/// Checks a commit's writes (`places`: early and late, each block once) and
/// frees against the durable state's `map` before any of its blocks is
/// written, and returns the map after it. A violation is a bug above and must
/// not poison the store: a write past `lengths`, a file shrunk under used
/// slots, a write over a used slot (the durable state would lose it), a block
/// written twice (both in flight, either could land last), or a free of a slot
/// not in use.
fn validate(
    places: &[(Target, u64)],
    freed: &[(Target, u32)],
    lengths: &[u64; TARGETS],
    map: &SlotMap,
) -> Result<SlotMap, Error> {
    check_writes(places, lengths, map)?;
    let mut after = map.clone();
    for &(target, slot) in freed {
        if !map.is_used(target, slot as u64) {
            return Err(Error::Internal("a commit frees a slot not in use"));
        }
        after.set(target, slot as u64, false);
    }
    for &(target, index) in places {
        after.set(target, index, true);
    }
    Ok(after)
}

/// [`validate`]'s checks of the writes alone, which early writes pass before
/// they start.
fn check_writes(
    places: &[(Target, u64)],
    lengths: &[u64; TARGETS],
    map: &SlotMap,
) -> Result<(), Error> {
    if map.past(lengths) {
        return Err(Error::Internal("a commit shrinks a file under used slots"));
    }
    for &(target, index) in places {
        if index >= lengths[target as usize] {
            return Err(Error::Internal(
                "a commit writes past the lengths it declares",
            ));
        }
        if map.is_used(target, index) {
            return Err(Error::Internal("a commit overwrites a slot in use"));
        }
    }
    if any_twice(places.iter().copied()) {
        return Err(Error::Internal("a commit writes a block twice at once"));
    }
    Ok(())
}

/// Checks a commit's rewrites against the durable state's `map`: each goes
/// to a slot it uses (a rewrite of a free one is a bug above), once.
fn check_rewrites(rewrites: &[BlockWrite], map: &SlotMap) -> Result<(), Error> {
    if rewrites.iter().any(|w| !map.is_used(w.target, w.index)) {
        return Err(Error::Internal("a commit rewrites a slot not in use"));
    }
    if any_twice(rewrites.iter().map(|w| (w.target, w.index))) {
        return Err(Error::Internal("a commit rewrites a block twice at once"));
    }
    Ok(())
}

/// Writes `blocks` to `file` from block `first` on and syncs it.
fn write_synced(
    io: &Io,
    file: &Arc<DataFile>,
    first: u64,
    blocks: Vec<BlockBuf>,
) -> Result<(), Error> {
    io.write_blocks(file, first, blocks)?;
    file.sync()
}

/// Writes `meta` to its slot and syncs it.
pub(super) fn write_meta(io: &Io, meta_file: &Arc<DataFile>, meta: &Meta) -> Result<(), Error> {
    write_synced(io, meta_file, meta.slot(), vec![meta.encode()])
}
