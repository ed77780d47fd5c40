//! The catalog file: the newest note of every used slot as of one commit,
//! written whole beside the old one, synced and renamed over it.

use super::super::chained_sum::ChainedSum;
use super::super::framing::to_blocks;
use super::super::slot_map::{SlotMap, SLOTTED};
use super::notes::entry_header;
#[cfg(test)]
use super::notes::Notes;
use super::{Catalog, Merge};
use crate::block::{Block, BLOCK_SIZE};
use crate::io::{DataFile, Dir, Io};
use crate::Error;
use std::sync::Arc;

pub(super) const FILE: &str = "catalog";
const FILE_NEW: &str = "catalog.new";
const FILE_MAGIC: &[u8; 8] = b"ptcatsnp";
/// Version 2 added the largest key's first bits to bucket notes; a version 1
/// file is still read (its bucket notes end before them). An older build
/// finds a version 2 file unusable and rebuilds the catalog by a scan.
const VERSION: u64 = 2;
const OLDEST_READ: u64 = 1;
pub(super) const CHECKSUM: usize = 4088;
/// Blocks of catalog file written per batch: bounds the RAM a catalog file write takes.
const WRITE_BATCH: usize = 256;

/// A catalog file's block 0 (layout in docs/format.md).
pub(super) struct Header {
    pub(super) base: u64,
    pub(super) seed: u64,
    /// Body bytes, and the chained checksum of the body's blocks.
    pub(super) len: u64,
    pub(super) sum: u64,
}

impl Header {
    /// The header in `block`, if its magic, version and checksum hold.
    pub(super) fn check(block: &[u8]) -> Option<Header> {
        let valid = block.len() == BLOCK_SIZE
            && &block[0..8] == FILE_MAGIC
            && u64_at(block, CHECKSUM) == twox_hash::XxHash3_64::oneshot(&block[..CHECKSUM])
            && (OLDEST_READ..=VERSION).contains(&u64_at(block, 8));
        valid.then(|| Header {
            base: u64_at(block, 16),
            seed: u64_at(block, 24),
            len: u64_at(block, 32),
            sum: u64_at(block, 40),
        })
    }
}

/// The catalog file's commit, seed and notes, if it is whole.
pub(super) fn read_file(dir: &Dir) -> Option<(u64, u64, Vec<u8>)> {
    let catalog_file = dir.read(FILE).ok()??;
    let header = Header::check(catalog_file.get(..BLOCK_SIZE)?)?;
    let (base, seed) = (header.base, header.seed);
    let len = usize::try_from(header.len).ok()?;
    let padded = len.checked_next_multiple_of(BLOCK_SIZE)?;
    let body = catalog_file.get(BLOCK_SIZE..BLOCK_SIZE.checked_add(padded)?)?;
    if ChainedSum::of(body.chunks(BLOCK_SIZE)) != header.sum {
        return None;
    }
    let mut bytes = catalog_file;
    bytes.drain(..BLOCK_SIZE);
    bytes.truncate(len);
    Some((base, seed, bytes))
}

/// The little-endian u64 at `at` of `bytes` (which has it).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Where a catalog file's notes come from.
pub(super) enum Source<'a> {
    /// Notes as they are, in any order: how a scan's catalog file was written
    /// before folds streamed (tests make such catalog files).
    #[cfg(test)]
    Notes(&'a Notes),
    Catalog(&'a Catalog),
    /// The catalog file on disk merged with the records in RAM, for the slots
    /// the map uses.
    Merge(Merge, &'a SlotMap),
}

/// Writes the catalog file of commit `seqno` with `seed` and replaces the old one;
/// returns its length in blocks. The caller empties the log after.
pub(super) fn write_file(
    dir: &Dir,
    io: &Io,
    seqno: u64,
    seed: u64,
    source: Source<'_>,
) -> Result<u64, Error> {
    let file = dir.open(FILE_NEW)?;
    file.erase()?;
    let mut out = FileWriter {
        io,
        file: &file,
        pending: Vec::with_capacity(BLOCK_SIZE * WRITE_BATCH),
        next: 1,
        sum: ChainedSum::default(),
        len: 0,
    };
    match source {
        #[cfg(test)]
        Source::Notes(notes) => out.push(&notes.buf)?,
        Source::Merge(merge, map) => merge.write(dir, map, &mut out)?,
        Source::Catalog(catalog) => {
            for target in SLOTTED {
                for (slot, note) in catalog.notes(target) {
                    out.push(&entry_header(target, slot, note.len()))?;
                    out.push(note)?;
                }
            }
        }
    }
    out.flush(true)?;
    let mut header = Block::zeroed();
    header.0[0..8].copy_from_slice(FILE_MAGIC);
    header.put_u64(8, VERSION);
    header.put_u64(16, seqno);
    header.put_u64(24, seed);
    header.put_u64(32, out.len);
    header.put_u64(40, out.sum.finish());
    let sum = header.checksum(CHECKSUM);
    header.put_u64(CHECKSUM, sum);
    let blocks = out.next;
    io.write_blocks(&file, 0, vec![header])?;
    file.sync()?;
    dir.replace(FILE_NEW, FILE)?;
    Ok(blocks)
}

/// A catalog file's body, written a batch of blocks at a time.
pub(super) struct FileWriter<'a> {
    io: &'a Io,
    file: &'a Arc<DataFile>,
    pending: Vec<u8>,
    /// The block the pending bytes start at.
    next: u64,
    /// The body's checksum, over the blocks written.
    sum: ChainedSum,
    len: u64,
}

impl FileWriter<'_> {
    pub(super) fn push(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.pending.extend_from_slice(bytes);
        self.len += bytes.len() as u64;
        if self.pending.len() >= BLOCK_SIZE * WRITE_BATCH {
            self.flush(false)?;
        }
        Ok(())
    }

    /// Writes the whole blocks pending, and with `last` the zero-padded rest.
    fn flush(&mut self, last: bool) -> Result<(), Error> {
        let whole = match last {
            true => self.pending.len().div_ceil(BLOCK_SIZE) * BLOCK_SIZE,
            false => self.pending.len() / BLOCK_SIZE * BLOCK_SIZE,
        };
        self.pending.resize(self.pending.len().max(whole), 0);
        let blocks = to_blocks(&self.pending[..whole]);
        for b in &blocks {
            self.sum.add(&b.0);
        }
        let n = blocks.len() as u64;
        self.file.reserve(self.next + n)?;
        self.io.write_blocks(self.file, self.next, blocks)?;
        self.next += n;
        self.pending.drain(..whole);
        Ok(())
    }
}
