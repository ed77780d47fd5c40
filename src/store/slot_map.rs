//! Which slots of `pages` and `buckets` the durable state uses, and the file
//! each commit writes it to (layout in docs/format.md).
//!
//! A commit never overwrites a used slot: its blocks go to free ones, and the
//! new map says which slots are used afterwards. The map of commit `n` is
//! written to `slots{n % 2}` and synced after the commit's blocks and before its
//! meta record: that sync is the commit point. Its header describes the commit
//! in full (root, lengths, a checksum of the body), so recovery can finish a
//! commit whose meta record was lost or damaged. No block data goes through it.

use std::sync::Arc;

use bitvec::order::Lsb0;
use bitvec::vec::BitVec;

use super::chained_sum::ChainedSum;
use super::{Meta, Target, TARGETS};
use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{DataFile, Io};
use crate::Error;

const MAGIC: &[u8; 8] = b"ptslots\0";
const CHECKSUM: usize = 4088;
/// Bits per body block.
const BITS_PER_BLOCK: u64 = BLOCK_SIZE as u64 * 8;

/// The targets whose slots the map tracks: both hold one self-contained block
/// per slot. Overflow space is derived from the buckets that reference it.
pub(crate) const SLOTTED: [Target; 2] = [Target::Pages, Target::Buckets];

/// One bit per slot, bit `i` of word `i / 64` for slot `i`: the order the
/// map file stores its words in.
type Bits = BitVec<u64, Lsb0>;

/// Used slots of each slotted target, one bit per slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotMap {
    bits: [Bits; 2],
}

fn which(target: Target) -> Option<usize> {
    SLOTTED.iter().position(|&t| t == target)
}

impl SlotMap {
    /// Whether `slot` of `target` is used. Overflow space is not tracked: false.
    pub(crate) fn is_used(&self, target: Target, slot: u64) -> bool {
        let Some(t) = which(target) else {
            return false;
        };
        usize::try_from(slot)
            .ok()
            .and_then(|s| self.bits[t].get(s).map(|b| *b))
            .unwrap_or(false)
    }

    /// Marks `slot` of `target` used or free.
    pub(crate) fn set(&mut self, target: Target, slot: u64, used: bool) {
        let Some(t) = which(target) else { return };
        let slot = slot as usize;
        let bits = &mut self.bits[t];
        if bits.len() <= slot {
            // Whole words, as the file holds them.
            bits.resize((slot + 1).next_multiple_of(64), false);
        }
        bits.set(slot, used);
    }

    /// The highest used slot of `target`: a commit's checks run this for
    /// every part of its writes.
    fn last_used(&self, target: Target) -> Option<u64> {
        self.bits[which(target)?].last_one().map(|s| s as u64)
    }

    /// The used slots of `target`, ascending.
    pub(crate) fn used(&self, target: Target) -> Vec<u64> {
        let Some(t) = which(target) else {
            return Vec::new();
        };
        self.bits[t].iter_ones().map(|s| s as u64).collect()
    }

    /// The free slots of `target` below `length`, ascending.
    pub(crate) fn free(&self, target: Target, length: u64) -> Vec<u64> {
        let Some(t) = which(target) else {
            return (0..length).collect();
        };
        let bits = &self.bits[t];
        let mapped = (length as usize).min(bits.len());
        let unmapped = mapped as u64..length;
        bits[..mapped]
            .iter_zeros()
            .map(|s| s as u64)
            .chain(unmapped)
            .collect()
    }

    /// Whether a slot at or past its file's length is marked used.
    pub(crate) fn past(&self, lengths: &[u64; TARGETS]) -> bool {
        SLOTTED
            .iter()
            .any(|&t| self.last_used(t).is_some_and(|s| s >= lengths[t as usize]))
    }
}

/// Body blocks of a map for files of `lengths` (`None`: no file is that long).
fn body_blocks(lengths: &[u64; TARGETS]) -> Option<u64> {
    let mut bits = 0u64;
    for t in SLOTTED {
        bits = bits.checked_add(lengths[t as usize].div_ceil(64).checked_mul(64)?)?;
    }
    Some(bits.div_ceil(BITS_PER_BLOCK))
}

/// The map file of `commit` holding `map`: the header, then the body. Returns
/// it with `commit`'s `map_blocks` and `map_sum` filled in.
pub(crate) fn encode(mut commit: Meta, map: &SlotMap) -> (Meta, Vec<BlockBuf>) {
    let mut words: Vec<u64> = Vec::new();
    for (t, target) in SLOTTED.iter().enumerate() {
        let count = commit.lengths[*target as usize].div_ceil(64) as usize;
        let these = map.bits[t].as_raw_slice();
        words.extend(
            these
                .iter()
                .copied()
                .chain(std::iter::repeat(0))
                .take(count),
        );
    }
    let mut file = vec![Block::zeroed()];
    for chunk in words.chunks(BLOCK_SIZE / 8) {
        let mut b = Block::zeroed();
        for (i, w) in chunk.iter().enumerate() {
            b.put_u64(8 * i, *w);
        }
        file.push(b);
    }
    let body = file.len() as u64 - 1;
    let body_sum = chained_sum(&file[1..]);
    let first = &mut file[0];
    first.0[0..8].copy_from_slice(MAGIC);
    first.put_u64(8, commit.seqno);
    first.put_u64(16, body);
    first.put_u64(24, body_sum);
    first.0[32..64].copy_from_slice(&commit.root);
    for (i, len) in commit
        .lengths
        .iter()
        .chain(&commit.prev_lengths)
        .enumerate()
    {
        first.put_u64(64 + 8 * i, *len);
    }
    let sum = first.checksum(CHECKSUM);
    first.put_u64(CHECKSUM, sum);
    commit.map_sum = sum;
    commit.map_blocks = file.len() as u64;
    (commit, file)
}

/// Reads the map in `file` if it is the whole, intact map of commit `seqno`.
/// `Ok(None)`: it is not (another commit's, or cut short by a crash). I/O
/// errors are errors, and so is a map whose header holds but whose body size
/// does not match its lengths, or which marks slots past its files' ends: no
/// crash makes those, only damage, and the commit may have been acknowledged.
pub(crate) fn read(
    io: &Io,
    file: &Arc<DataFile>,
    seqno: u64,
) -> Result<Option<(Meta, SlotMap)>, Error> {
    let available = file.blocks()?;
    if available == 0 {
        return Ok(None);
    }
    let first = io.read(file, 0)?;
    if &first.0[0..8] != MAGIC
        || first.u64_at(CHECKSUM) != first.checksum(CHECKSUM)
        || first.u64_at(8) != seqno
    {
        return Ok(None);
    }
    let mut lengths = [0u64; TARGETS];
    let mut prev_lengths = [0u64; TARGETS];
    for (i, len) in lengths.iter_mut().chain(&mut prev_lengths).enumerate() {
        *len = first.u64_at(64 + 8 * i);
    }
    let body = first.u64_at(16);
    if Some(body) != body_blocks(&lengths) {
        return Err(Error::corrupt("slot map of the wrong size"));
    }
    if available < 1 + body {
        return Ok(None);
    }
    let blocks = io.read_all((1..=body).map(|i| (file.clone(), i * BLOCK_SIZE as u64)))?;
    if chained_sum(&blocks) != first.u64_at(24) {
        return Ok(None);
    }
    let mut all = blocks
        .iter()
        .flat_map(|b| (0..BLOCK_SIZE / 8).map(|i| b.u64_at(8 * i)));
    let mut map = SlotMap::default();
    for (t, target) in SLOTTED.iter().enumerate() {
        let count = lengths[*target as usize].div_ceil(64) as usize;
        map.bits[t] = Bits::from_vec(all.by_ref().take(count).collect());
    }
    if map.past(&lengths) {
        return Err(Error::corrupt("slot map marks slots past a file's end"));
    }
    let meta = Meta {
        seqno,
        root: first.array(32),
        map_blocks: 1 + body,
        map_sum: first.u64_at(CHECKSUM),
        lengths,
        prev_lengths,
    };
    Ok(Some((meta, map)))
}

/// The chained checksum of `blocks`.
fn chained_sum(blocks: &[BlockBuf]) -> u64 {
    ChainedSum::of(blocks.iter().map(|b| &b.0[..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn used_and_free_slots_round_trip() {
        let mut map = SlotMap::default();
        for s in [0, 3, 64, 65, 200] {
            map.set(Target::Buckets, s, true);
        }
        map.set(Target::Pages, 7, true);
        map.set(Target::Buckets, 3, false);
        map.set(Target::Overflow, 1, true);
        assert_eq!(map.used(Target::Buckets), vec![0, 64, 65, 200]);
        assert_eq!(map.used(Target::Pages), vec![7]);
        assert!(!map.is_used(Target::Overflow, 1));
        assert_eq!(map.free(Target::Pages, 9), vec![0, 1, 2, 3, 4, 5, 6, 8]);
        assert!(map.past(&[7, 201, 0]) && !map.past(&[8, 201, 0]));
    }

    #[test]
    fn body_size_follows_the_lengths() {
        assert_eq!(body_blocks(&[0, 0, 5]), Some(0));
        assert_eq!(body_blocks(&[1, 1, 0]), Some(1));
        assert_eq!(body_blocks(&[BITS_PER_BLOCK, 1, 0]), Some(2));
        assert_eq!(body_blocks(&[u64::MAX, 1, 0]), None);
    }
}
