//! The catalog: a short note per used slot of `pages` and `buckets`, saying
//! what the stores above need to index that block without reading it (layout
//! in docs/format.md, "Catalog"). Open reads the notes, not every block.
//!
//! A commit appends one record to `catalog.log` with the notes of the slots
//! it writes, synced with its blocks before the commit point, so every
//! durable commit's record is on disk. Once the log outgrows the catalog file,
//! the newest note of every used slot is folded into a new catalog file,
//! `catalog`, which replaces the old one whole (written beside it, synced,
//! renamed), and the log starts again.
//!
//! The catalog only makes open fast. If any part of it is missing or damaged,
//! or it lacks a note for a used slot, open ignores it: the stores read every
//! block as before, and a fresh catalog file replaces it. The notes' contents are
//! the stores'; here they are bytes.

mod keeper;
mod merge;

use std::ops::Range;
use std::sync::Arc;

use super::chained_sum::ChainedSum;
use super::framing::to_blocks;
use super::record_log::{Keep, RecordLog};
use super::slot_map::{SlotMap, SLOTTED};
use super::{Meta, Target};
use crate::block::{Block, BLOCK_SIZE};
use crate::io::{DataFile, Dir, Io};
use crate::Error;

pub(super) use keeper::Keeper;
use merge::{Merge, Payloads, LOG_READ_BUDGET};

const LOG: &str = "catalog.log";
const FILE: &str = "catalog";
const FILE_NEW: &str = "catalog.new";
const FILE_MAGIC: &[u8; 8] = b"ptcatsnp";
const RECORD_MAGIC: &[u8; 8] = b"ptcatrec";
/// Version 2 added the largest key's first bits to bucket notes; a version 1
/// file is still read (its bucket notes end before them). An older build
/// finds a version 2 file unusable and rebuilds the catalog by a scan.
const VERSION: u64 = 2;
const OLDEST_READ: u64 = 1;
const CHECKSUM: usize = 4088;
/// A note entry's header: target, slot, length.
const ENTRY_HEADER: usize = 9;
/// Blocks of catalog file written per batch: bounds the RAM a catalog file write takes.
const WRITE_BATCH: usize = 256;

/// Notes for slots, in the order added. An empty note says the slot's block
/// has none: open cannot use the catalog while that slot is used.
#[derive(Default)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Notes {
    buf: Vec<u8>,
    /// The entries as runs of one target in ascending slot order, so that a
    /// record is put in order by moving whole runs: a commit's plans allocate
    /// each target's slots in order, a part at a time, so its notes are a few
    /// such runs.
    runs: Vec<Run>,
}

/// A run of entries of [`Notes`] of one target in ascending slot order: where
/// it starts in the buffer, and its first and last (target, slot).
#[derive(Clone, Copy)]
struct Run {
    start: usize,
    first: (u8, u32),
    last: (u8, u32),
}

impl Run {
    /// Whether an entry for `key` may follow in this run: the same target,
    /// a later slot.
    fn goes_on_to(&self, key: (u8, u32)) -> bool {
        self.last.0 == key.0 && self.last < key
    }
}

impl Notes {
    /// Adds the note `write` appends to the buffer it is given, for `slot`
    /// of `target`.
    pub(crate) fn add(&mut self, target: Target, slot: u32, write: impl FnOnce(&mut Vec<u8>)) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&entry_header(target, slot, 0));
        write(&mut self.buf);
        let len = (self.buf.len() - at - ENTRY_HEADER) as u32;
        self.buf[at + 5..at + 9].copy_from_slice(&len.to_le_bytes());
        let key = (target as u8, slot);
        match self.runs.last_mut() {
            Some(run) if run.goes_on_to(key) => run.last = key,
            _ => self.runs.push(Run {
                start: at,
                first: key,
                last: key,
            }),
        }
    }

    /// Bytes of notes held.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Room for `bytes` more bytes of notes, taken at once.
    pub(crate) fn reserve_exact(&mut self, bytes: usize) {
        self.buf.reserve_exact(bytes);
    }

    /// Moves `other`'s notes to the end of these.
    pub(crate) fn append(&mut self, other: &mut Notes) {
        let offset = self.buf.len();
        for run in other.runs.drain(..) {
            match self.runs.last_mut() {
                Some(last) if last.goes_on_to(run.first) => last.last = run.last,
                _ => self.runs.push(Run {
                    start: run.start + offset,
                    ..run
                }),
            }
        }
        self.buf.append(&mut other.buf);
    }

    /// Each run and where its bytes lie, in the order added.
    fn run_bytes(&self) -> impl Iterator<Item = (&Run, Range<usize>)> {
        let ends = self.runs.iter().skip(1).map(|r| r.start);
        let ends = ends.chain(std::iter::once(self.buf.len()));
        self.runs
            .iter()
            .zip(ends)
            .map(|(run, end)| (run, run.start..end))
    }

    fn entries(&self) -> NoteIter<'_> {
        NoteIter {
            buf: &self.buf,
            at: 0,
        }
    }
}

/// Note entries of a buffer: (offset of the note, target, slot, note); `Err`
/// at the first that does not parse.
struct NoteIter<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for NoteIter<'a> {
    type Item = Result<(usize, Target, u32, &'a [u8]), ()>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at == self.buf.len() {
            return None;
        }
        let parsed = parse_entry(self.buf, self.at);
        match parsed {
            Some((target, slot, start, end)) => {
                self.at = end;
                Some(Ok((start, target, slot, &self.buf[start..end])))
            }
            None => {
                self.at = self.buf.len();
                Some(Err(()))
            }
        }
    }
}

/// The entry at `at`: target, slot and the note's byte range.
fn parse_entry(buf: &[u8], at: usize) -> Option<(Target, u32, usize, usize)> {
    let header = buf.get(at..at.checked_add(ENTRY_HEADER)?)?;
    let target = *Target::ALL.get(header[0] as usize)?;
    let slot = u32::from_le_bytes(header[1..5].try_into().ok()?);
    let len = u32::from_le_bytes(header[5..9].try_into().ok()?) as usize;
    let start = at + ENTRY_HEADER;
    let end = start.checked_add(len)?;
    (end <= buf.len()).then_some((target, slot, start, end))
}

/// The notes of every used slot of one durable state, as open found them.
pub(crate) struct Catalog {
    /// The catalog file's notes, then each record's, in commit order: kept as
    /// they were read or made, since joining them cost a fold a copy of
    /// the whole catalog (over 100 MB at 2^24 accounts).
    chunks: Vec<Vec<u8>>,
    /// Per slotted target: each used slot and where its note lies (chunk,
    /// start, end), by slot, ascending.
    notes: [Vec<(u32, u32, usize, usize)>; 2],
}

impl Catalog {
    /// Each used slot of `target` (`pages` or `buckets`) with its note, by
    /// slot, ascending.
    pub(crate) fn notes(&self, target: Target) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        let list = SLOTTED
            .iter()
            .position(|&t| t == target)
            .map_or(&[][..], |t| &self.notes[t][..]);
        list.iter()
            .map(|&(slot, chunk, start, end)| (slot, &self.chunks[chunk as usize][start..end]))
    }
}

/// The records since the catalog file, kept in RAM while they are small
/// ([`Tuning::recent_bytes`](crate::store::Tuning)), so that a fold need not
/// read them back: the log, just written, is slow to read on a busy disk.
pub(super) struct Recent {
    /// The commit the catalog file describes.
    pub(super) base: u64,
    /// The payloads of commits `base + 1` on, in order; `None` once too
    /// large (a fold then reads the log). Each is kept as `record` made it:
    /// appending them to one buffer cost the commit a copy and fresh pages.
    pub(super) payloads: Option<Vec<Payload>>,
    /// The RAM they take.
    pub(super) len: usize,
    /// The most bytes kept.
    max: usize,
}

impl Recent {
    /// None yet after a catalog file of commit `base`; up to `max` bytes.
    pub(super) fn new(base: u64, max: usize) -> Recent {
        Recent {
            base,
            payloads: Some(Vec::new()),
            len: 0,
            max,
        }
    }

    /// Starts again after a catalog file of commit `base`.
    pub(super) fn restart(&mut self, base: u64) {
        *self = Recent::new(base, self.max);
    }

    /// Adds the payload of the next commit's record.
    pub(super) fn push(&mut self, mut payload: Payload) {
        let Some(payloads) = &mut self.payloads else {
            return;
        };
        if self.len + payload.ram() > self.max {
            self.payloads = None;
            return;
        }
        self.len += payload.ram();
        // Grown by appending the plans' notes, it had a third more room than
        // bytes (about 10 MB a commit at 2^24 accounts, kept until a fold);
        // shrinking a heap block in place frees the rest without a copy.
        payload.shrink_to_fit();
        payloads.push(payload);
    }
}

/// What open found of the catalog.
struct Found {
    /// The fingerprint seed the notes were made with.
    seed: u64,
    file_blocks: u64,
    /// The commit the catalog file describes, and the payloads of the log's
    /// records after it, if they fit in RAM.
    recent: Recent,
    /// `None`: unusable.
    catalog: Option<Catalog>,
}

/// Reads the catalog of `durable` (whose used slots `map` gives) in `dir`,
/// with `log` cut to its records, or, if it cannot serve, removes the
/// catalog file and empties the log, so that later records never join stale
/// ones. `fresh_seed` is the seed when there is no usable catalog file.
fn load(
    dir: &Dir,
    log: &mut RecordLog,
    durable: &Meta,
    map: &SlotMap,
    fresh_seed: u64,
    recent_max: usize,
) -> Result<Found, Error> {
    // Without a catalog file the log has nothing to join: it is emptied unread.
    if let Some(catalog_file) = read_file(dir).filter(|(base, ..)| *base <= durable.seqno) {
        let records = LogPayloads::load(log, catalog_file.0, durable.seqno)?;
        if let Some(found) = usable(catalog_file, records, durable, map, recent_max) {
            return Ok(found);
        }
    }
    if durable.seqno > 0 {
        tracing::warn!(
            seqno = durable.seqno,
            "catalog missing, damaged or behind the durable commit: discarded; open reads every block and writes a new one"
        );
    }
    dir.remove(FILE)?;
    log.erase()?;
    Ok(Found {
        seed: fresh_seed,
        file_blocks: 0,
        recent: Recent::new(0, recent_max),
        catalog: None,
    })
}

/// The catalog of a whole catalog file `(base, seed, notes)` and the log's
/// `records`, if they reach `durable` and note every used slot; their
/// payloads kept for the next fold if they total at most `recent_max` bytes.
fn usable(
    (base, seed, catalog_file): (u64, u64, Vec<u8>),
    records: LogPayloads,
    durable: &Meta,
    map: &SlotMap,
    recent_max: usize,
) -> Option<Found> {
    let file_blocks = 1 + catalog_file.len().div_ceil(BLOCK_SIZE) as u64;
    if records.last != durable.seqno {
        return None;
    }
    let LogPayloads {
        joined: after,
        lens,
        ..
    } = records;
    let mut recent = Recent::new(base, recent_max);
    // One payload per record, as a fold streams each in its own order;
    // copied until they no longer fit (about 400 MB of log at 2^27 do not).
    let mut at = 0;
    for len in lens {
        if recent.payloads.is_none() {
            break;
        }
        recent.push(Payload::in_order(after[at..at + len].to_vec()));
        at += len;
    }
    let catalog = fold(vec![catalog_file, after], durable, map)?;
    Some(Found {
        seed,
        file_blocks,
        recent,
        catalog: Some(catalog),
    })
}

/// What the catalog takes of its log: the records after the catalog file of
/// commit `base` up to the `durable` one, without a gap.
fn since(base: u64, durable: u64) -> impl FnMut(u64) -> Keep {
    let mut last = base;
    move |seqno| {
        if seqno > durable || (seqno > base && seqno != last + 1) {
            return Keep::Stop;
        }
        if seqno <= base {
            return Keep::Skip;
        }
        last = seqno;
        Keep::Record
    }
}

/// The payloads of the log's records that [`since`] takes, joined, each
/// one's length, and the last one's commit.
struct LogPayloads {
    joined: Vec<u8>,
    lens: Vec<usize>,
    last: u64,
}

impl LogPayloads {
    /// Reads them from `log`, after the catalog file of commit `base` up to
    /// the `durable` one.
    fn load(log: &mut RecordLog, base: u64, durable: u64) -> Result<LogPayloads, Error> {
        let mut out = LogPayloads {
            joined: Vec::new(),
            lens: Vec::new(),
            last: base,
        };
        log.load(since(base, durable), |seqno, payload| {
            out.joined.extend_from_slice(payload);
            out.lens.push(payload.len());
            out.last = seqno;
            Ok(())
        })?;
        Ok(out)
    }
}

/// A catalog file's block 0 (layout in docs/format.md).
struct Header {
    base: u64,
    seed: u64,
    /// Body bytes, and the chained checksum of the body's blocks.
    len: u64,
    sum: u64,
}

impl Header {
    /// The header in `block`, if its magic, version and checksum hold.
    fn check(block: &[u8]) -> Option<Header> {
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
fn read_file(dir: &Dir) -> Option<(u64, u64, Vec<u8>)> {
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

/// Where a slot's newest note lies: (chunk, length, start), or [`NONE`] if no
/// note names the slot, or [`VOID`] if the newest is empty (no note serves it).
type Place = (u32, u32, u64);
const NONE: u32 = u32::MAX;
const VOID: u32 = u32::MAX - 1;

/// Each slot's newest note in `chunks` (notes in commit order), per slot of
/// files of `lengths` slots (pages, buckets; 16 bytes a slot: 4.6 million
/// slots at 2^27); `None` if an entry does not parse.
fn newest_notes(chunks: &[Vec<u8>], lengths: [u64; 2]) -> Option<[Vec<Place>; 2]> {
    let mut latest: [Vec<Place>; 2] = Default::default();
    for (t, len) in lengths.into_iter().enumerate() {
        latest[t] = vec![(NONE, 0, 0); usize::try_from(len).ok()?];
    }
    for (c, chunk) in chunks.iter().enumerate() {
        let c = u32::try_from(c).ok().filter(|&c| c < VOID)?;
        for entry in (NoteIter { buf: chunk, at: 0 }) {
            let (start, target, slot, note) = entry.ok()?;
            let Some(t) = SLOTTED.iter().position(|&s| s == target) else {
                continue;
            };
            if let Some(place) = latest[t].get_mut(slot as usize) {
                *place = match u32::try_from(note.len()).ok()? {
                    0 => (VOID, 0, 0),
                    len => (c, len, start as u64),
                };
            }
        }
    }
    Some(latest)
}

/// The newest note of each used slot in `chunks` (notes in commit order);
/// `None` if a used slot has none.
fn fold(chunks: Vec<Vec<u8>>, durable: &Meta, map: &SlotMap) -> Option<Catalog> {
    let latest = newest_notes(&chunks, SLOTTED.map(|t| durable.lengths[t as usize]))?;
    let mut notes: [Vec<(u32, u32, usize, usize)>; 2] = Default::default();
    for (t, target) in SLOTTED.iter().enumerate() {
        for slot in map.used(*target) {
            let (chunk, len, start) = *latest[t].get(slot as usize)?;
            if chunk == NONE || chunk == VOID {
                return None;
            }
            let start = usize::try_from(start).ok()?;
            notes[t].push((
                u32::try_from(slot).ok()?,
                chunk,
                start,
                start + len as usize,
            ));
        }
    }
    Some(Catalog { chunks, notes })
}

/// The little-endian u64 at `at` of `bytes` (which has it).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The payload of commit `seqno`'s record: the batch's
/// `notes`, plus an empty note for each slot of `pages` and `buckets` it
/// writes without one (of `written`), so no older note outlives its block. A
/// note for a slot the commit does not write (one used in its map `after`
/// and not in the durable `before`), or two for one slot, is a bug above.
pub(super) fn record(
    notes: Notes,
    written: &[(Target, u64)],
    before: &SlotMap,
    after: &SlotMap,
) -> Result<Payload, Error> {
    let mut noted = SlotMap::default();
    for entry in notes.entries() {
        let (_, target, slot, _) =
            entry.map_err(|()| Error::Internal("a malformed catalog note"))?;
        let slot = slot as u64;
        if !after.is_used(target, slot)
            || before.is_used(target, slot)
            || noted.is_used(target, slot)
        {
            return Err(Error::Internal(
                "a catalog note for a block the commit does not write",
            ));
        }
        noted.set(target, slot, true);
    }
    let unnoted = written
        .iter()
        .filter(|&&(t, slot)| SLOTTED.contains(&t) && !noted.is_used(t, slot));
    let mut payload = notes;
    for &(target, slot) in unnoted {
        let slot = u32::try_from(slot).map_err(|_| Error::Internal("a slot past u32"))?;
        payload.add(target, slot, |_| {});
    }
    Ok(sorted(payload))
}

/// A commit's catalog record payload: notes, and the ranges of them that
/// put them in target, then slot order, as a fold streams them. Not moved
/// into that order here: the log's framing copies the ranges anyway, and a
/// sorted copy (about 12 MB at 2^24 accounts, in fresh memory) cost the
/// commit about 10 ms.
pub(super) struct Payload {
    buf: Vec<u8>,
    order: Vec<Range<usize>>,
}

impl Payload {
    /// A payload already in order.
    pub(super) fn in_order(buf: Vec<u8>) -> Payload {
        Payload {
            order: std::iter::once(0..buf.len()).collect(),
            buf,
        }
    }

    /// The payload's bytes in order, in parts.
    pub(super) fn parts(&self) -> Vec<&[u8]> {
        self.order.iter().map(|r| &self.buf[r.clone()]).collect()
    }

    /// Part `i` of [`Payload::parts`], if there is one.
    fn part(&self, i: usize) -> Option<&[u8]> {
        self.order.get(i).map(|r| &self.buf[r.clone()])
    }

    /// The RAM it takes: its bytes, and its order (an entry each where the
    /// runs overlapped).
    pub(super) fn ram(&self) -> usize {
        self.buf.len() + self.order.len() * std::mem::size_of::<Range<usize>>()
    }

    /// Frees the buffer's room beyond its bytes.
    pub(super) fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
    }

    /// The payload's bytes in order, in one buffer.
    #[cfg(test)]
    fn into_sorted(self) -> Vec<u8> {
        match self.order[..] {
            [ref whole] if *whole == (0..self.buf.len()) => self.buf,
            _ => self.parts().concat(),
        }
    }
}

/// `notes` (which parse) as a payload in target, then slot order: whole runs
/// while they do not overlap, else entry by entry.
fn sorted(notes: Notes) -> Payload {
    let mut runs: Vec<_> = notes
        .run_bytes()
        .map(|(run, range)| (*run, range))
        .collect();
    runs.sort_unstable_by_key(|(run, _)| run.first);
    let order = match runs.windows(2).all(|w| w[0].0.last < w[1].0.first) {
        true => runs.into_iter().map(|(_, range)| range).collect(),
        false => {
            let mut entries: Vec<_> = notes
                .entries()
                .flatten()
                .map(|(start, target, slot, note)| {
                    (
                        (target as u8, slot),
                        start - ENTRY_HEADER..start + note.len(),
                    )
                })
                .collect();
            entries.sort_unstable_by_key(|e| e.0);
            entries.into_iter().map(|(_, range)| range).collect()
        }
    };
    Payload {
        buf: notes.buf,
        order,
    }
}

/// The catalog of the notes a scan of every used block made, sorted by
/// target and slot as every catalog file is written; `None` if a used slot has none.
fn from_scan(notes: Notes, durable: &Meta, map: &SlotMap) -> Option<Catalog> {
    fold(vec![notes.buf], durable, map)
}

/// Where a catalog file's notes come from.
enum Source<'a> {
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
fn write_file(dir: &Dir, io: &Io, seqno: u64, seed: u64, source: Source<'_>) -> Result<u64, Error> {
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

fn entry_header(target: Target, slot: u32, len: usize) -> [u8; ENTRY_HEADER] {
    let mut h = [0; ENTRY_HEADER];
    h[0] = target as u8;
    h[1..5].copy_from_slice(&slot.to_le_bytes());
    h[5..9].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// A catalog file's body, written a batch of blocks at a time.
struct FileWriter<'a> {
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
    fn push(&mut self, bytes: &[u8]) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::super::framing;
    use super::*;

    fn meta(seqno: u64, lengths: [u64; 3]) -> Meta {
        Meta {
            seqno,
            lengths,
            ..Meta::default()
        }
    }

    /// The record payload of commit `seqno` writing `written` into an
    /// empty store, as it comes back from the log.
    fn written_by(seqno: u64, notes: &Notes, written: &[(Target, u64)]) -> Result<Vec<u8>, Error> {
        let mut after = SlotMap::default();
        for &(t, s) in written {
            after.set(t, s, true);
        }
        let record = record(notes.clone(), written, &SlotMap::default(), &after)?;
        let blocks = framing::frame(RECORD_MAGIC, seqno, &record.parts());
        let bytes = record.into_sorted();
        let log: Vec<u8> = blocks.iter().flat_map(|b| b.0).collect();
        let (found, payload, next) = framing::parse(RECORD_MAGIC, &log, 0).unwrap();
        assert_eq!((found, next), (seqno, blocks.len() * BLOCK_SIZE));
        assert_eq!(payload, bytes, "the payload kept in RAM is the one logged");
        Ok(bytes)
    }

    #[test]
    fn the_newest_note_of_each_used_slot_wins_and_an_unnoted_write_voids_it() {
        let mut first = Notes::default();
        first.add(Target::Pages, 1, |b| b.extend_from_slice(b"page one"));
        first.add(Target::Buckets, 0, |b| b.extend_from_slice(b"bucket"));
        let written = [
            (Target::Pages, 1),
            (Target::Buckets, 0),
            (Target::Overflow, 9),
        ];
        let one = written_by(1, &first, &written).unwrap();
        let mut second = Notes::default();
        second.add(Target::Pages, 2, |b| b.extend_from_slice(b"page two"));
        let written = [(Target::Pages, 2), (Target::Buckets, 3)];
        let two = written_by(2, &second, &written).unwrap();
        let bytes = [one.as_slice(), two.as_slice()].concat();

        let mut map = SlotMap::default();
        for (t, s) in [(Target::Pages, 1), (Target::Pages, 2), (Target::Buckets, 0)] {
            map.set(t, s, true);
        }
        // One chunk per record, as a fold from RAM sees them, or all in one,
        // as open does: the same catalog.
        let chunks = vec![one, two];
        let catalog = fold(chunks, &meta(2, [4, 4, 10]), &map).unwrap();
        let joined = fold(vec![bytes.clone()], &meta(2, [4, 4, 10]), &map).unwrap();
        for target in SLOTTED {
            assert!(catalog.notes(target).eq(joined.notes(target)));
        }
        let pages: Vec<_> = catalog.notes(Target::Pages).collect();
        assert_eq!(pages, vec![(1, &b"page one"[..]), (2, &b"page two"[..])]);
        let buckets: Vec<_> = catalog.notes(Target::Buckets).collect();
        assert_eq!(buckets, vec![(0, &b"bucket"[..])]);
        // Bucket 3 was written without a note: while it is used, the catalog
        // cannot serve.
        map.set(Target::Buckets, 3, true);
        assert!(fold(vec![bytes], &meta(2, [4, 4, 10]), &map).is_none());
    }

    #[test]
    fn a_note_for_a_block_not_written_is_refused() {
        let mut notes = Notes::default();
        notes.add(Target::Pages, 5, |b| b.push(1));
        let e = written_by(1, &notes, &[(Target::Pages, 4)]).err();
        assert!(matches!(e, Some(Error::Internal(_))), "{e:?}");
    }

    /// A fold streams records in target and slot order, whatever order the
    /// stores noted their slots in, and the slots written without a note.
    #[test]
    fn a_record_lists_its_slots_in_order() {
        let mut notes = Notes::default();
        notes.add(Target::Buckets, 2, |b| b.push(1));
        notes.add(Target::Pages, 9, |b| b.push(2));
        notes.add(Target::Pages, 3, |b| b.push(3));
        let written = [
            (Target::Buckets, 2),
            (Target::Pages, 9),
            (Target::Pages, 3),
            (Target::Buckets, 1),
            (Target::Pages, 4),
        ];
        let bytes = written_by(1, &notes, &written).unwrap();
        let listed: Vec<_> = (NoteIter { buf: &bytes, at: 0 })
            .map(|e| e.map(|(_, t, s, note)| (t, s, note.to_vec())).unwrap())
            .collect();
        let expected = [
            (Target::Pages, 3, vec![3]),
            (Target::Pages, 4, vec![]),
            (Target::Pages, 9, vec![2]),
            (Target::Buckets, 1, vec![]),
            (Target::Buckets, 2, vec![1]),
        ];
        assert_eq!(listed, expected);
    }

    /// Runs that overlap are put in order entry by entry; runs joined by
    /// `append` stay one where they continue each other in one target.
    #[test]
    fn notes_are_sorted_whether_their_runs_overlap_or_not() {
        let keys = |bytes: &[u8]| -> Vec<(Target, u32)> {
            (NoteIter { buf: bytes, at: 0 })
                .map(|e| e.map(|(_, t, s, _)| (t, s)).unwrap())
                .collect()
        };
        let mut a = Notes::default();
        for s in [1, 5, 9] {
            a.add(Target::Pages, s, |b| b.push(s as u8));
        }
        let mut b = Notes::default();
        for s in [3, 7] {
            b.add(Target::Pages, s, |b| b.push(s as u8));
        }
        let mut overlapping = a.clone();
        overlapping.append(&mut b.clone());
        assert_eq!(overlapping.runs.len(), 2);
        let expected: Vec<_> = [1, 3, 5, 7, 9].map(|s| (Target::Pages, s)).into();
        assert_eq!(keys(&sorted(overlapping).into_sorted()), expected);

        let mut c = Notes::default();
        c.add(Target::Pages, 10, |b| b.push(10));
        c.add(Target::Buckets, 0, |b| b.push(0));
        let mut continued = a.clone();
        continued.append(&mut c);
        // Pages 1 to 10, then the bucket: a run holds one target.
        assert_eq!(continued.runs.len(), 2);
        assert_eq!(continued.runs[0].last, (Target::Pages as u8, 10));
        let mut apart = b.clone();
        let mut d = Notes::default();
        d.add(Target::Pages, 0, |b| b.push(0));
        apart.append(&mut d);
        assert_eq!(apart.runs.len(), 2);
        let bytes = sorted(apart).into_sorted();
        assert_eq!(keys(&bytes), [0, 3, 7].map(|s| (Target::Pages, s)));
        // Each note still follows its own header.
        let notes: Vec<_> = (NoteIter { buf: &bytes, at: 0 })
            .map(|e| e.unwrap().3.to_vec())
            .collect();
        assert_eq!(notes, [vec![0], vec![3], vec![7]]);
    }
}
