//! Values too long for a bucket: contiguous extents of the overflow file, checked
//! against the value hash their bucket entry keeps.

use std::collections::BTreeMap;

use crate::block::{Block, BLOCK_SIZE};
use crate::store::{BlockWrite, Store, Target};
use crate::trie::{hash_value, ValueHash};
use crate::Error;

/// Blocks a value of `len` bytes takes.
pub(super) fn blocks_for(len: usize) -> u64 {
    len.div_ceil(BLOCK_SIZE).max(1) as u64
}

/// Free space of the overflow file: extents by start, and the file's length.
#[derive(Clone, Default)]
pub(super) struct Extents {
    free: BTreeMap<u64, u64>,
    pub(super) len: u64,
}

impl Extents {
    /// Rebuilds free space from the extents in use (any order); overlapping extents
    /// or extents past the end are corruption.
    pub(super) fn from_used(mut used: Vec<(u64, u64)>, len: u64) -> Result<Extents, Error> {
        used.sort_unstable();
        let mut free = BTreeMap::new();
        let mut at = 0;
        for (start, blocks) in used {
            if start < at || start.checked_add(blocks).is_none_or(|end| end > len) {
                return Err(Error::corrupt(
                    "overflow extents overlap or run past the file",
                ));
            }
            if start > at {
                free.insert(at, start - at);
            }
            at = start + blocks;
        }
        if len > at {
            free.insert(at, len - at);
        }
        Ok(Extents { free, len })
    }

    /// First fit, else the end of the file.
    pub(super) fn allocate(&mut self, blocks: u64) -> u64 {
        let fit = self
            .free
            .iter()
            .find(|(_, &n)| n >= blocks)
            .map(|(&s, &n)| (s, n));
        match fit {
            Some((start, n)) => {
                self.free.remove(&start);
                if n > blocks {
                    self.free.insert(start + blocks, n - blocks);
                }
                start
            }
            None => {
                self.len += blocks;
                self.len - blocks
            }
        }
    }

    /// Returns an extent, merging it with free neighbours.
    pub(super) fn release(&mut self, start: u64, blocks: u64) {
        let (mut start, mut blocks) = (start, blocks);
        if let Some((&s, &n)) = self.free.range(..start).next_back() {
            if s + n == start {
                self.free.remove(&s);
                start = s;
                blocks += n;
            }
        }
        if let Some(n) = self.free.remove(&(start + blocks)) {
            blocks += n;
        }
        self.free.insert(start, blocks);
    }
}

/// The blocks writing `value` at `start`.
pub(super) fn write(value: &[u8], start: u64) -> Vec<BlockWrite> {
    value
        .chunks(BLOCK_SIZE)
        .chain(value.is_empty().then_some(&[][..]))
        .enumerate()
        .map(|(i, chunk)| {
            let mut block = Block::zeroed();
            block.0[..chunk.len()].copy_from_slice(chunk);
            BlockWrite {
                target: Target::Overflow,
                index: start + i as u64,
                block: block.into(),
            }
        })
        .collect()
}

/// Reads `len` bytes from `start` and checks them against `hash`.
pub(super) fn read(
    store: &Store,
    len: u32,
    hash: &ValueHash,
    start: u64,
) -> Result<Vec<u8>, Error> {
    let len = len as usize;
    let blocks = store.read_blocks(Target::Overflow, start..start + blocks_for(len))?;
    let mut value = Vec::with_capacity(len);
    for b in blocks {
        let take = (len - value.len()).min(BLOCK_SIZE);
        value.extend_from_slice(&b.0[..take]);
    }
    if hash_value(&value) != *hash {
        return Err(Error::corrupt("overflow value does not match its hash").at("overflow", start));
    }
    Ok(value)
}
