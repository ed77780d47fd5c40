//! Reads of blocks by slot, for the stores above: one at a time, many at
//! once, or started and answered on a channel.

use super::{Store, Target};
use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{Done, Job, Op};
use crate::Error;

impl Store {
    /// Starts reading slot `slot` of `target`: the block arrives on `reply`,
    /// tagged `tag`. For a reader that keeps many reads in flight.
    pub(crate) fn start_read(
        &self,
        target: Target,
        slot: u32,
        tag: u64,
        reply: &crossbeam_channel::Sender<Done>,
    ) {
        self.io.submit(Job {
            file: self.file(target).clone(),
            op: Op::Read,
            offset: slot as u64 * BLOCK_SIZE as u64,
            block: Block::for_read(),
            tag,
            reply: reply.clone(),
        });
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
        self.io.run_all(indices.into_iter().map(|i| {
            (
                file.clone(),
                Op::Read,
                i * BLOCK_SIZE as u64,
                Block::for_read(),
            )
        }))
    }
}
