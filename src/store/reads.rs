//! Reads of blocks by slot, for the stores above: one at a time, many at
//! once, or started for a prefetcher ([`Fetches`]) and answered on its
//! channel.

use std::collections::{HashMap, HashSet};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::{Store, Target};
use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{Done, Job, Transfer};
use crate::Error;

/// Block reads started for a prefetcher, answered on one channel, each with
/// what the store that started it wants done with the block (`W`, the
/// store's own token: where it read and as of which generation). Each block
/// is read once at a time. The prefetcher hands keys to the stores and tokens
/// back to them; it never sees a slot.
pub(crate) struct Fetches<W> {
    reply: Sender<Done>,
    arrivals: Receiver<Done>,
    next_tag: u64,
    in_flight: HashMap<u64, ((Target, u32), W)>,
    reading: HashSet<(Target, u32)>,
}

impl<W> Fetches<W> {
    pub(crate) fn new() -> Fetches<W> {
        let (reply, arrivals) = unbounded();
        Fetches {
            reply,
            arrivals,
            next_tag: 0,
            in_flight: HashMap::new(),
            reading: HashSet::new(),
        }
    }

    /// Where finished reads arrive, for [`Fetches::finish`].
    pub(crate) fn arrivals(&self) -> &Receiver<Done> {
        &self.arrivals
    }

    /// Reads in flight.
    pub(crate) fn len(&self) -> usize {
        self.in_flight.len()
    }

    /// Starts reading `slot` of `target` for `wanted`, unless that block is
    /// being read already.
    pub(crate) fn start(&mut self, store: &Store, target: Target, slot: u32, wanted: W) {
        if !self.reading.insert((target, slot)) {
            return;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        self.in_flight.insert(tag, ((target, slot), wanted));
        store.io.submit(Job {
            file: store.file(target).clone(),
            offset: slot as u64 * BLOCK_SIZE as u64,
            transfer: Transfer::read(),
            tag,
            reply: self.reply.clone(),
        });
    }

    /// The token of the read `done` answered, with its block; no block if
    /// the read failed (the reader that needs the block reads it again and
    /// sees the error).
    pub(crate) fn finish(&mut self, done: Done) -> Option<(W, Option<BlockBuf>)> {
        let (place, wanted) = self.in_flight.remove(&done.tag)?;
        self.reading.remove(&place);
        Some((
            wanted,
            done.result.ok().and_then(|_| done.transfer.into_read()),
        ))
    }
}

/// Blocks read per batch when a store reads many slots in order.
const SCAN_BATCH: usize = 1024;

impl Store {
    /// Reads the blocks of `slots` of `target` a batch at a time and hands
    /// each to `each` with its position in `slots`, in order.
    pub(crate) fn for_each_block(
        &self,
        target: Target,
        slots: &[u64],
        mut each: impl FnMut(usize, BlockBuf) -> Result<(), Error>,
    ) -> Result<(), Error> {
        for (batch, chunk) in slots.chunks(SCAN_BATCH).enumerate() {
            let blocks = self.read_blocks(target, chunk.iter().copied())?;
            for (i, block) in blocks.into_iter().enumerate() {
                each(batch * SCAN_BATCH + i, block)?;
            }
        }
        Ok(())
    }

    /// Whether the data files bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.file(Target::Pages).is_direct()
    }

    /// Reads block `index` of `target` and waits for it.
    pub(crate) fn read(&self, target: Target, index: u64) -> Result<BlockBuf, Error> {
        self.check_usable()?;
        self.io.read(self.file(target), index * BLOCK_SIZE as u64)
    }

    /// Reads blocks `indices` of `target` concurrently, returned in the same order.
    pub(crate) fn read_blocks(
        &self,
        target: Target,
        indices: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<BlockBuf>, Error> {
        self.check_usable()?;
        let file = self.file(target);
        self.io.read_all(
            indices
                .into_iter()
                .map(|i| (file.clone(), i * BLOCK_SIZE as u64)),
        )
    }

    /// Reads blocks `indices` of `target` concurrently, handing each to `f`
    /// with its position in `indices` as it arrives; none once the store is
    /// unusable.
    pub(crate) fn read_each(
        &self,
        target: Target,
        indices: impl IntoIterator<Item = u64>,
        f: impl FnMut(usize, Result<BlockBuf, Error>),
    ) {
        if self.check_usable().is_err() {
            return;
        }
        let file = self.file(target);
        let places = indices
            .into_iter()
            .map(|i| (file.clone(), i * BLOCK_SIZE as u64))
            .collect();
        self.io.read_each(places, f);
    }

    /// Reads the consecutive blocks of `target` from `first` into `blocks`
    /// in one request on the calling thread, and returns how many there
    /// were (fewer where the file ends). Each counts as a block read.
    pub(crate) fn read_span(
        &self,
        target: Target,
        first: u64,
        blocks: &mut [Block],
    ) -> Result<usize, Error> {
        self.check_usable()?;
        let offset = first
            .checked_mul(BLOCK_SIZE as u64)
            .ok_or(Error::Internal("a block index past any file"))?;
        let read = self.file(target).read_into(blocks, offset)? / BLOCK_SIZE;
        self.io.count_reads(read as u64);
        Ok(read)
    }
}
