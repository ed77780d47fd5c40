//! A fold that streams: the catalog file on disk is read a batch of blocks at a
//! time and merged with the records kept in RAM straight into the new
//! catalog file. Reading the old catalog file whole held it beside everything else
//! while a fold ran (381 MB at 2^27 accounts, 57 MB at 2^24).
//!
//! It needs a catalog file sorted by target, then slot, as every catalog file is
//! written now; one an older build wrote from a scan may not be, and is then
//! folded the whole way.
//! Anything it cannot use (a damaged or unsorted catalog file, a used slot
//! without a note) fails the write before the new catalog file replaces the old.

use std::sync::Arc;

use super::{
    entry_header, newest_notes, parse_entry, FileWriter, Header, Place, ENTRY_HEADER, FILE, NONE,
    VOID,
};
use crate::block::BLOCK_SIZE;
use crate::io::{DataFile, Dir};
use crate::store::chained_sum::ChainedSum;
use crate::store::slot_map::{SlotMap, SLOTTED};
use crate::Error;

/// Catalog file blocks read per batch.
const READ_BATCH: usize = 256;

/// The records since the catalog file of commit `base`, ready to merge into it.
pub(in crate::store) struct Merge {
    base: u64,
    payloads: Vec<Vec<u8>>,
    /// Each slot's newest record note, as [`newest_notes`] finds them.
    latest: [Vec<Place>; 2],
}

impl Merge {
    /// Indexes `payloads` (the records after the catalog file of `base`, in commit
    /// order) for files of `lengths` slots; `None` if one does not parse.
    pub(in crate::store) fn new(
        base: u64,
        payloads: Vec<Vec<u8>>,
        lengths: [u64; 2],
    ) -> Option<Merge> {
        Some(Merge {
            base,
            latest: newest_notes(&payloads, lengths)?,
            payloads,
        })
    }

    /// Writes the newest note of every slot `map` uses to `out`: the record's
    /// if one names it, else the catalog file's.
    pub(super) fn write(
        &self,
        dir: &Dir,
        map: &SlotMap,
        out: &mut FileWriter<'_>,
    ) -> Result<(), Error> {
        let cannot = |what| Error::corrupt(what).at("catalog", 0);
        let mut catalog_file = Stream::open(dir, self.base)?;
        let mut head = catalog_file.next_entry()?;
        for (t, target) in SLOTTED.iter().enumerate() {
            for slot in map.used(*target) {
                let slot = u32::try_from(slot).map_err(|_| cannot("a slot past u32"))?;
                // Notes of slots freed since the catalog file are passed over.
                while head.is_some_and(|h| h < (t, slot)) {
                    head = catalog_file.next_entry()?;
                }
                let place = self.latest[t].get(slot as usize).copied();
                let note = match place.unwrap_or((NONE, 0, 0)) {
                    (VOID, ..) => return Err(cannot("a used slot's newest note is empty")),
                    (NONE, ..) if head == Some((t, slot)) => &catalog_file.note[..],
                    (NONE, ..) => return Err(cannot("a used slot without a note")),
                    (c, len, start) => {
                        let start = start as usize;
                        &self.payloads[c as usize][start..start + len as usize]
                    }
                };
                out.push(&entry_header(*target, slot, note.len()))?;
                out.push(note)?;
            }
        }
        // The rest of the catalog file, for its order and its checksum.
        while head.is_some() {
            head = catalog_file.next_entry()?;
        }
        catalog_file.finish()
    }
}

/// The notes of the catalog file on disk, in order, read a batch at a time; each
/// block's checksum is taken as it goes by, and checked at the end.
struct Stream {
    file: Arc<DataFile>,
    /// Body bytes the header declares, and body blocks with padding.
    len: u64,
    blocks: u64,
    expected_sum: u64,
    /// Body blocks read so far, and their checksum.
    read: u64,
    sum: ChainedSum,
    /// Bytes read and not yet parsed start at `buf[at]`, body offset `offset`.
    buf: Vec<u8>,
    at: usize,
    offset: u64,
    last: Option<(usize, u32)>,
    /// The note of the entry [`Stream::next_entry`] returned last.
    note: Vec<u8>,
}

impl Stream {
    fn open(dir: &Dir, base: u64) -> Result<Stream, Error> {
        let bad = |what| Error::corrupt(what).at("catalog", 0);
        let file = dir.open_existing(FILE)?;
        let header = file.read_bytes(0, 1)?;
        let header = Header::check(&header).ok_or_else(|| bad("catalog file header"))?;
        if header.base != base {
            return Err(bad("the records do not follow the catalog file"));
        }
        Ok(Stream {
            file,
            len: header.len,
            blocks: header.len.div_ceil(BLOCK_SIZE as u64),
            expected_sum: header.sum,
            read: 0,
            sum: ChainedSum::default(),
            buf: Vec::new(),
            at: 0,
            offset: 0,
            last: None,
            note: Vec::new(),
        })
    }

    /// Reads the next batch of body blocks; false if none is left.
    fn load(&mut self) -> Result<bool, Error> {
        if self.read == self.blocks {
            return Ok(false);
        }
        let n = (self.blocks - self.read).min(READ_BATCH as u64) as usize;
        self.offset += self.at as u64;
        self.buf.drain(..self.at);
        self.at = 0;
        let from = self.buf.len();
        let first = 1 + self.read;
        let blocks = self.file.read_bytes(first, first + n as u64)?;
        if blocks.len() != n * BLOCK_SIZE {
            return Err(
                Error::corrupt("a catalog file shorter than its header says").at("catalog", 0),
            );
        }
        self.buf.extend_from_slice(&blocks);
        for block in self.buf[from..].chunks(BLOCK_SIZE) {
            self.sum.add(block);
        }
        self.read += n as u64;
        Ok(true)
    }

    /// The next entry's slotted target (its index in `SLOTTED`) and slot, its
    /// note in `self.note`; `None` past the last.
    fn next_entry(&mut self) -> Result<Option<(usize, u32)>, Error> {
        let bad = |what| Error::corrupt(what).at("catalog", 0);
        loop {
            if self.offset + self.at as u64 >= self.len {
                return Ok(None);
            }
            // The body ends at `len`: parse only what lies before it.
            let end = usize::try_from(self.len - self.offset)
                .unwrap_or(usize::MAX)
                .min(self.buf.len());
            let parsed = match self.buf.get(self.at..end) {
                Some(rest) if rest.len() >= ENTRY_HEADER => parse_entry(rest, 0),
                _ => None,
            };
            let Some((target, slot, start, stop)) = parsed else {
                if end < self.buf.len() || !self.load()? {
                    return Err(bad("a catalog file entry past the end"));
                }
                continue;
            };
            self.note.clear();
            self.note
                .extend_from_slice(&self.buf[self.at + start..self.at + stop]);
            self.at += stop;
            let Some(t) = SLOTTED.iter().position(|&s| s == target) else {
                continue;
            };
            if self.last.is_some_and(|last| last >= (t, slot)) {
                return Err(bad("catalog file notes out of order"));
            }
            self.last = Some((t, slot));
            return Ok(Some((t, slot)));
        }
    }

    /// Reads what is left and checks the body's checksum.
    fn finish(mut self) -> Result<(), Error> {
        while self.load()? {
            self.buf.clear();
            self.at = 0;
        }
        match self.sum.finish() == self.expected_sum {
            true => Ok(()),
            false => Err(Error::corrupt("catalog file checksum").at("catalog", 0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{fold, from_scan, read_file, write_file, Notes, Source};
    use super::*;
    use crate::io::{Io, IoBackend};
    use crate::store::{Meta, Target};

    fn note(notes: &mut Notes, target: Target, slot: u32, text: &str) {
        notes.add(target, slot, |b| b.extend_from_slice(text.as_bytes()));
    }

    fn catalog_file(dir: &Path, io: &Io, base: u64, source: Source<'_>) {
        write_file(&dir_of(dir), io, base, 7, source).unwrap();
    }

    fn dir_of(path: &Path) -> Dir {
        Dir::new(path)
    }

    /// The notes of the catalog file on disk, per target, by slot.
    fn notes_on_disk(dir: &Path, map: &SlotMap, lengths: [u64; 3]) -> Vec<(Target, u32, Vec<u8>)> {
        let (_, _, bytes) = read_file(&dir_of(dir)).unwrap();
        let meta = Meta {
            lengths,
            ..Meta::default()
        };
        let catalog = fold(vec![bytes], &meta, map).unwrap();
        SLOTTED
            .iter()
            .flat_map(|&t| catalog.notes(t).map(move |(s, n)| (t, s, n.to_vec())))
            .collect()
    }

    #[test]
    fn a_streamed_fold_writes_what_a_whole_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::start(IoBackend::ThreadPool, None).unwrap();
        let lengths = [8, 8, 0];
        // The catalog file of commit 3: pages 1, 2, 5 and buckets 0, 3.
        let mut old = Notes::default();
        for (t, s, text) in [
            (Target::Pages, 1, "p1"),
            (Target::Pages, 2, "p2"),
            (Target::Pages, 5, "p5"),
            (Target::Buckets, 0, "b0"),
            (Target::Buckets, 3, "b3"),
        ] {
            note(&mut old, t, s, text);
        }
        catalog_file(dir.path(), &io, 3, Source::Notes(&old));
        // Records after it: page 2 rewritten twice, page 6 and bucket 4 new,
        // page 5 and bucket 0 freed (page 5's slot noted empty, then reused).
        let mut one = Notes::default();
        note(&mut one, Target::Pages, 2, "p2 again");
        note(&mut one, Target::Pages, 6, "p6");
        one.add(Target::Pages, 5, |_| {});
        let mut two = Notes::default();
        note(&mut two, Target::Pages, 2, "p2 third");
        note(&mut two, Target::Buckets, 4, "b4");
        note(&mut two, Target::Pages, 5, "p5 new");
        let payloads = vec![one.buf.clone(), two.buf.clone()];
        let mut map = SlotMap::default();
        for (t, s) in [
            (Target::Pages, 1),
            (Target::Pages, 2),
            (Target::Pages, 5),
            (Target::Pages, 6),
            (Target::Buckets, 3),
            (Target::Buckets, 4),
        ] {
            map.set(t, s, true);
        }
        let merge = Merge::new(3, payloads.clone(), [8, 8]).unwrap();
        catalog_file(dir.path(), &io, 5, Source::Merge(&merge, &map));
        let streamed = notes_on_disk(dir.path(), &map, lengths);

        // The same through the whole-read fold, from the old catalog file.
        let dir2 = tempfile::tempdir().unwrap();
        catalog_file(dir2.path(), &io, 3, Source::Notes(&old));
        let (_, _, bytes) = read_file(&dir_of(dir2.path())).unwrap();
        let meta = Meta {
            lengths,
            ..Meta::default()
        };
        let whole = fold([vec![bytes], payloads].concat(), &meta, &map).unwrap();
        let expected: Vec<_> = SLOTTED
            .iter()
            .flat_map(|&t| whole.notes(t).map(move |(s, n)| (t, s, n.to_vec())))
            .collect();
        assert_eq!(streamed, expected);
        assert_eq!(streamed.len(), 6);
        assert!(streamed.contains(&(Target::Pages, 2, b"p2 third".to_vec())));
        assert!(streamed.contains(&(Target::Pages, 5, b"p5 new".to_vec())));

        // A used slot whose newest note is empty cannot be served.
        let mut three = Notes::default();
        three.add(Target::Buckets, 4, |_| {});
        let voided = Merge::new(5, vec![three.buf], [8, 8]).unwrap();
        let source = Source::Merge(&voided, &map);
        assert!(write_file(&dir_of(dir.path()), &io, 6, 7, source).is_err());
        // And the catalog file it failed to replace is whole.
        assert_eq!(notes_on_disk(dir.path(), &map, lengths), streamed);
    }

    /// Version 1 files (bucket notes without the largest key) are still
    /// read; a version not known yet is not.
    #[test]
    fn a_catalog_file_of_a_known_version_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::start(IoBackend::ThreadPool, None).unwrap();
        let mut notes = Notes::default();
        note(&mut notes, Target::Pages, 1, "p1");
        catalog_file(dir.path(), &io, 1, Source::Notes(&notes));
        let path = dir.path().join(FILE);
        let written = std::fs::read(&path).unwrap();
        for (version, read) in [(1u64, true), (2, true), (3, false)] {
            let mut bytes = written.clone();
            bytes[8..16].copy_from_slice(&version.to_le_bytes());
            let sum = twox_hash::XxHash3_64::oneshot(&bytes[..super::super::CHECKSUM]);
            bytes[super::super::CHECKSUM..BLOCK_SIZE].copy_from_slice(&sum.to_le_bytes());
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(
                read_file(&dir_of(dir.path())).is_some(),
                read,
                "version {version}"
            );
        }
    }

    #[test]
    fn an_unsorted_or_damaged_catalog_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::start(IoBackend::ThreadPool, None).unwrap();
        let mut map = SlotMap::default();
        map.set(Target::Pages, 1, true);
        map.set(Target::Pages, 2, true);
        // A scan notes slots in the order the stores open, as an older
        // build wrote them.
        let mut unsorted = Notes::default();
        note(&mut unsorted, Target::Pages, 2, "p2");
        note(&mut unsorted, Target::Pages, 1, "p1");
        catalog_file(dir.path(), &io, 1, Source::Notes(&unsorted));
        let merge = Merge::new(1, Vec::new(), [8, 8]).unwrap();
        assert!(write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(&merge, &map)).is_err());
        // Written through `from_scan`, as open writes it now, it streams.
        let meta = Meta {
            lengths: [8, 8, 0],
            ..Meta::default()
        };
        let scanned = from_scan(unsorted, &meta, &map).unwrap();
        catalog_file(dir.path(), &io, 1, Source::Catalog(&scanned));
        write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(&merge, &map)).unwrap();
        let streamed = notes_on_disk(dir.path(), &map, [8, 8, 0]);
        assert_eq!(streamed.len(), 2);

        // Sorted, then one byte of its body flipped: the checksum says so.
        let mut sorted = Notes::default();
        note(&mut sorted, Target::Pages, 1, "p1");
        note(&mut sorted, Target::Pages, 2, "p2");
        catalog_file(dir.path(), &io, 1, Source::Notes(&sorted));
        let path = dir.path().join(FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[BLOCK_SIZE + 12] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(&merge, &map)).is_err());
        // Records of another catalog file's commit do not merge into this one.
        let other = Merge::new(9, Vec::new(), [8, 8]).unwrap();
        assert!(write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(&other, &map)).is_err());
    }
}
