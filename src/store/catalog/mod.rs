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
//!
//! By concept: [`notes`] a commit's notes and its record, [`file`] the catalog
//! file, [`merge`] the fold streamed from the file and the records, [`keeper`]
//! the upkeep between commits; here, what open finds and the catalog it makes.

mod file;
mod keeper;
mod merge;
mod notes;

use super::record_log::{Keep, RecordLog};
use super::slot_map::{SlotMap, SLOTTED};
use super::{Meta, Target};
use crate::block::BLOCK_SIZE;
use crate::io::Dir;
use crate::Error;

use file::{read_file, write_file, Source, FILE};
pub(super) use keeper::Keeper;
use merge::{Merge, Payloads, LOG_READ_BUDGET};
#[cfg(test)]
use notes::sorted;
use notes::NoteIter;
pub(crate) use notes::Notes;
pub(super) use notes::{record, Payload};

const LOG: &str = "catalog.log";
const RECORD_MAGIC: &[u8; 8] = b"ptcatrec";

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
            "catalog missing, damaged or behind the durable commit: discarded; opens read every block until a new one is written"
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
        for entry in NoteIter::new(chunk) {
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

/// The catalog of the notes a scan of every used block made, sorted by
/// target and slot as every catalog file is written; `None` if a used slot has none.
fn from_scan(notes: Notes, durable: &Meta, map: &SlotMap) -> Option<Catalog> {
    fold(vec![notes.buf], durable, map)
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
        let listed: Vec<_> = NoteIter::new(&bytes)
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
            NoteIter::new(bytes)
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
        let notes: Vec<_> = NoteIter::new(&bytes)
            .map(|e| e.unwrap().3.to_vec())
            .collect();
        assert_eq!(notes, [vec![0], vec![3], vec![7]]);
    }
}
