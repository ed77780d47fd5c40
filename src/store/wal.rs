//! The redo log: every block a commit changes, written and synced before the meta
//! record that makes the commit durable, and replayed on open if the crash came
//! before all of them reached their files (layout in docs/format.md).
//!
//! A log describes its commit in full (root, lengths, a checksum of its body), so
//! recovery can finish a commit whose meta record was lost or damaged.

use std::sync::Arc;

use super::{Meta, Target, TARGETS};
use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{DataFile, Io, Op};
use crate::Error;

const MAGIC: &[u8; 8] = b"pagetwal";
const HEADER: usize = 128;
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

/// A whole, verified log.
pub(crate) struct Logged {
    /// The commit's meta record, as the log describes it.
    pub(crate) meta: Meta,
    pub(crate) places: Vec<Place>,
    /// The changed blocks, in the order of `places`.
    pub(crate) blocks: Vec<BlockBuf>,
}

/// The most blocks one commit may change (the header counts them in a u32).
pub(crate) const MAX_RECORDS: usize = u32::MAX as usize;

/// The log of `commit` writing `data` to `places` (same order): header blocks, then
/// the data. Returns it with `commit`'s `wal_blocks` and `wal_sum` filled in.
pub(crate) fn encode(
    mut commit: Meta,
    places: &[Place],
    data: Vec<BlockBuf>,
) -> (Meta, Vec<BlockBuf>) {
    debug_assert!(places.len() == data.len() && places.len() <= MAX_RECORDS);
    let count = header_blocks(places.len());
    let mut log: Vec<BlockBuf> = (0..count)
        .map(|h| {
            let mut b = Block::zeroed();
            b.0[0..8].copy_from_slice(MAGIC);
            b.put_u64(8, commit.seqno);
            b.0[16..20].copy_from_slice(&(places.len() as u32).to_le_bytes());
            b.0[20..24].copy_from_slice(&(h as u32).to_le_bytes());
            let chunk = places.iter().skip(h * PER_HEADER).take(PER_HEADER);
            for (i, place) in chunk.enumerate() {
                let at = HEADER + i * DESCRIPTOR;
                b.0[at] = place.target as u8;
                b.put_u64(at + 8, place.index);
            }
            seal(&mut b);
            b
        })
        .collect();
    log.extend(data);
    let body_sum = chained_sum(&log[1..]);
    let first = &mut log[0];
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
    seal(first);
    commit.wal_sum = first.u64_at(CHECKSUM);
    commit.wal_blocks = log.len() as u64;
    (commit, log)
}

/// Reads the log in `wal` if it is the whole, intact log of commit `seqno`.
/// `Ok(None)`: it is not (another commit's, or cut short by a crash); I/O errors
/// and a verified log naming impossible places are errors.
pub(crate) fn read(io: &Io, wal: &Arc<DataFile>, seqno: u64) -> Result<Option<Logged>, Error> {
    let available = wal.blocks()?;
    if available == 0 {
        return Ok(None);
    }
    let first = io.read(wal, 0)?;
    if !sealed(&first) || first.u64_at(8) != seqno {
        return Ok(None);
    }
    let records = u32::from_le_bytes(first.array(16)) as usize;
    let total = (header_blocks(records) + records) as u64;
    if available < total {
        return Ok(None);
    }
    let mut log = vec![first];
    log.extend(io.run_all((1..total).map(|i| {
        (
            wal.clone(),
            Op::Read,
            i * BLOCK_SIZE as u64,
            Block::zeroed(),
        )
    }))?);
    if chained_sum(&log[1..]) != log[0].u64_at(24) {
        return Ok(None);
    }
    let first = &log[0];
    let mut lengths = [0u64; TARGETS];
    let mut prev_lengths = [0u64; TARGETS];
    for (i, len) in lengths.iter_mut().chain(&mut prev_lengths).enumerate() {
        *len = first.u64_at(64 + 8 * i);
    }
    let meta = Meta {
        seqno,
        root: first.array(32),
        wal_blocks: total,
        wal_sum: first.u64_at(CHECKSUM),
        lengths,
        prev_lengths,
    };
    let places = places(&log, records)?;
    let blocks = log.split_off(header_blocks(records));
    Ok(Some(Logged {
        meta,
        places,
        blocks,
    }))
}

fn seal(b: &mut Block) {
    let sum = b.checksum(CHECKSUM);
    b.put_u64(CHECKSUM, sum);
}

fn sealed(b: &Block) -> bool {
    &b.0[0..8] == MAGIC && b.u64_at(CHECKSUM) == b.checksum(CHECKSUM)
}

/// Number of header blocks in front of `records` data blocks.
fn header_blocks(records: usize) -> usize {
    records.div_ceil(PER_HEADER).max(1)
}

/// xxh3 over the concatenated xxh3 of each block.
fn chained_sum(blocks: &[BlockBuf]) -> u64 {
    let sums: Vec<u8> = blocks
        .iter()
        .flat_map(|b| b.checksum(BLOCK_SIZE).to_le_bytes())
        .collect();
    twox_hash::XxHash3_64::oneshot(&sums)
}

/// The places named by a verified log's header blocks.
fn places(log: &[BlockBuf], records: usize) -> Result<Vec<Place>, Error> {
    let mut out = Vec::with_capacity(records);
    for (h, b) in log.iter().take(header_blocks(records)).enumerate() {
        if !sealed(b) || b.u64_at(8) != log[0].u64_at(8) || b.0[20..24] != (h as u32).to_le_bytes()
        {
            return Err(Error::corrupt("WAL header block out of place"));
        }
        let chunk = records.saturating_sub(h * PER_HEADER).min(PER_HEADER);
        for i in 0..chunk {
            let at = HEADER + i * DESCRIPTOR;
            let target =
                Target::from_u8(b.0[at]).ok_or(Error::corrupt("WAL names an unknown file"))?;
            out.push(Place {
                target,
                index: b.u64_at(at + 8),
            });
        }
    }
    Ok(out)
}
