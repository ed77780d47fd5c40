//! The redo log: every block a commit changes, written and synced before the meta
//! record that makes the commit durable, and replayed on open if the crash came
//! before all of them reached their files (layout in docs/format.md).

use super::{Target, TARGETS};
use crate::block::Block;
use crate::Error;

const MAGIC: &[u8; 8] = b"pagetwal";
const HEADER: usize = 32;
const CHECKSUM: usize = 4088;
const DESCRIPTOR: usize = 16;
/// Block descriptors per header block.
const PER_HEADER: usize = (CHECKSUM - HEADER) / DESCRIPTOR;

/// One changed block: where it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) target: Target,
    pub(crate) index: u64,
}

/// The WAL blocks for commit `seqno` writing `places` (in order): header blocks,
/// then the data blocks, which the caller appends in the same order.
pub(crate) fn headers(seqno: u64, places: &[Place]) -> Vec<Box<Block>> {
    let count = places.len().div_ceil(PER_HEADER).max(1);
    (0..count)
        .map(|h| {
            let mut b = Block::zeroed();
            b.0[0..8].copy_from_slice(MAGIC);
            b.put_u64(8, seqno);
            b.0[16..20].copy_from_slice(&(places.len() as u32).to_le_bytes());
            b.0[20..24].copy_from_slice(&(h as u32).to_le_bytes());
            let chunk = places.iter().skip(h * PER_HEADER).take(PER_HEADER);
            for (i, place) in chunk.enumerate() {
                let at = HEADER + i * DESCRIPTOR;
                b.0[at] = place.target as u8;
                b.put_u64(at + 8, place.index);
            }
            let sum = b.checksum(CHECKSUM);
            b.put_u64(CHECKSUM, sum);
            b
        })
        .collect()
}

/// Number of header blocks in front of `records` data blocks.
pub(crate) fn header_blocks(records: usize) -> usize {
    records.div_ceil(PER_HEADER).max(1)
}

/// The checksum a meta record keeps of its whole WAL.
pub(crate) fn chained_sum(blocks: &[Box<Block>]) -> u64 {
    let sums: Vec<u8> = blocks
        .iter()
        .flat_map(|b| b.checksum(crate::block::BLOCK_SIZE).to_le_bytes())
        .collect();
    twox_hash::XxHash3_64::oneshot(&sums)
}

/// What the first WAL block says about which commit wrote it.
pub(crate) enum Owner {
    /// A valid header of commit `seqno` with `records` data blocks.
    Commit { seqno: u64, records: usize },
    /// Not a valid header.
    Invalid,
}

pub(crate) fn owner(first: &Block) -> Owner {
    if &first.0[0..8] != MAGIC || first.u64_at(CHECKSUM) != first.checksum(CHECKSUM) {
        return Owner::Invalid;
    }
    Owner::Commit {
        seqno: first.u64_at(8),
        records: u32::from_le_bytes(first.array(16)) as usize,
    }
}

/// The places named by a whole, checksum-verified WAL's header blocks.
pub(crate) fn places(blocks: &[Box<Block>], records: usize) -> Result<Vec<Place>, Error> {
    let mut out = Vec::with_capacity(records);
    for (h, b) in blocks.iter().take(header_blocks(records)).enumerate() {
        let chunk = records.saturating_sub(h * PER_HEADER).min(PER_HEADER);
        for i in 0..chunk {
            let at = HEADER + i * DESCRIPTOR;
            let target =
                Target::from_u8(b.0[at]).ok_or(Error::Corrupt("WAL names an unknown file"))?;
            out.push(Place {
                target,
                index: b.u64_at(at + 8),
            });
        }
    }
    if out.len() != records || blocks.len() != header_blocks(records) + records {
        return Err(Error::Corrupt("WAL length disagrees with its header"));
    }
    debug_assert!(out.iter().all(|p| (p.target as usize) < TARGETS));
    Ok(out)
}
