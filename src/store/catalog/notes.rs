//! A commit's notes and the record made of them: an entry (target, slot,
//! note) per block it writes, kept as runs in slot order so the record is
//! put in order by moving whole runs.

use std::ops::Range;

use super::super::slot_map::{SlotMap, SLOTTED};
use super::super::Target;
use crate::Error;

/// A note entry's header: target, slot, length.
pub(super) const ENTRY_HEADER: usize = 9;

/// Notes for slots, in the order added. An empty note says the slot's block
/// has none: open cannot use the catalog while that slot is used.
#[derive(Default)]
#[cfg_attr(test, derive(Clone))]
pub(crate) struct Notes {
    pub(super) buf: Vec<u8>,
    /// The entries as runs of one target in ascending slot order, so that a
    /// record is put in order by moving whole runs: a commit's plans allocate
    /// each target's slots in order, a part at a time, so its notes are a few
    /// such runs.
    pub(super) runs: Vec<Run>,
}

/// A run of entries of [`Notes`] of one target in ascending slot order: where
/// it starts in the buffer, and its first and last (target, slot).
#[derive(Clone, Copy)]
pub(super) struct Run {
    start: usize,
    first: (u8, u32),
    pub(super) last: (u8, u32),
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
pub(super) struct NoteIter<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> NoteIter<'a> {
    /// The entries of `buf`, from its start.
    pub(super) fn new(buf: &'a [u8]) -> NoteIter<'a> {
        NoteIter { buf, at: 0 }
    }
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
pub(super) fn parse_entry(buf: &[u8], at: usize) -> Option<(Target, u32, usize, usize)> {
    let header = buf.get(at..at.checked_add(ENTRY_HEADER)?)?;
    let target = *Target::ALL.get(header[0] as usize)?;
    let slot = u32::from_le_bytes(header[1..5].try_into().ok()?);
    let len = u32::from_le_bytes(header[5..9].try_into().ok()?) as usize;
    let start = at + ENTRY_HEADER;
    let end = start.checked_add(len)?;
    (end <= buf.len()).then_some((target, slot, start, end))
}

pub(super) fn entry_header(target: Target, slot: u32, len: usize) -> [u8; ENTRY_HEADER] {
    let mut h = [0; ENTRY_HEADER];
    h[0] = target as u8;
    h[1..5].copy_from_slice(&slot.to_le_bytes());
    h[5..9].copy_from_slice(&(len as u32).to_le_bytes());
    h
}

/// The payload of commit `seqno`'s record: the batch's
/// `notes`, plus an empty note for each slot of `pages` and `buckets` it
/// writes without one (of `written`), so no older note outlives its block. A
/// note for a slot the commit does not write (one used in its map `after`
/// and not in the durable `before`), or two for one slot, is a bug above.
pub(in crate::store) fn record(
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
pub(in crate::store) struct Payload {
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
    pub(in crate::store) fn parts(&self) -> Vec<&[u8]> {
        self.order.iter().map(|r| &self.buf[r.clone()]).collect()
    }

    /// Part `i` of [`Payload::parts`], if there is one.
    pub(super) fn part(&self, i: usize) -> Option<&[u8]> {
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
    pub(super) fn into_sorted(self) -> Vec<u8> {
        match self.order[..] {
            [ref whole] if *whole == (0..self.buf.len()) => self.buf,
            _ => self.parts().concat(),
        }
    }
}

/// `notes` (which parse) as a payload in target, then slot order: whole runs
/// while they do not overlap, else entry by entry.
pub(super) fn sorted(notes: Notes) -> Payload {
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
