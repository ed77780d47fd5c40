//! A fold that streams: the catalog file on disk and each record since it are
//! read a batch of blocks at a time and merged straight into the new catalog
//! file. Reading either whole held it beside everything else while a fold ran
//! (the catalog file is 381 MB at 2^27 accounts, and so is the log by the time
//! it folds).
//!
//! It needs every source sorted by target, then slot: every catalog file and
//! record is written so now. One an older build wrote may not be, and is then
//! folded the whole way. Anything it cannot use (a damaged or unsorted source,
//! a used slot without a note) fails the write before the new catalog file
//! replaces the old.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::file::{FileWriter, Header, FILE};
use super::notes::{entry_header, parse_entry, Payload};
use crate::block::BLOCK_SIZE;
use crate::io::{DataFile, Dir};
use crate::store::chained_sum::ChainedSum;
use crate::store::record_log::PayloadReader;
use crate::store::slot_map::{SlotMap, SLOTTED};
use crate::Error;

/// Catalog file blocks read per batch.
const READ_BATCH: u64 = 256;

/// RAM for the log records' read buffers together, shared out among them.
pub(super) const LOG_READ_BUDGET: u64 = 16 << 20;

/// The records since the catalog file of commit `base`, ready to merge into it.
pub(super) struct Merge {
    pub(super) base: u64,
    pub(super) payloads: Payloads,
}

/// The payloads of the records after the catalog file, in commit order.
pub(super) enum Payloads {
    /// Kept in RAM since they were written.
    Ram(Vec<Payload>),
    /// Read back from the log.
    Log(Vec<PayloadReader>),
}

impl Merge {
    /// Writes the newest note of every slot `map` uses to `out`: the newest
    /// record's that names it, else the catalog file's.
    pub(super) fn write(
        self,
        dir: &Dir,
        map: &SlotMap,
        out: &mut FileWriter<'_>,
    ) -> Result<(), Error> {
        let cannot = |what| Error::corrupt(what).at("catalog", 0);
        let mut sources = vec![Stream::catalog_file(dir, self.base)?];
        match self.payloads {
            Payloads::Ram(payloads) => sources.extend(payloads.into_iter().map(Stream::ram)),
            Payloads::Log(readers) => sources.extend(readers.into_iter().map(Stream::record)),
        }
        // Each source's next entry, least first; of entries for one slot, the
        // newest source's wins.
        let mut heads = BinaryHeap::with_capacity(sources.len());
        for (i, source) in sources.iter_mut().enumerate() {
            if let Some(at) = source.next_entry()? {
                heads.push(Reverse((at, i)));
            }
        }
        let mut here = Vec::new();
        for (t, target) in SLOTTED.iter().enumerate() {
            for slot in map.used(*target) {
                let slot = u32::try_from(slot).map_err(|_| cannot("a slot past u32"))?;
                // Notes of slots freed since are passed over.
                while let Some(&Reverse((at, i))) = heads.peek() {
                    if at > (t, slot) {
                        break;
                    }
                    heads.pop();
                    if at == (t, slot) {
                        here.push(i);
                    } else if let Some(at) = sources[i].next_entry()? {
                        heads.push(Reverse((at, i)));
                    }
                }
                let Some(&newest) = here.iter().max() else {
                    return Err(cannot("a used slot without a note"));
                };
                let note = &sources[newest].note;
                if note.is_empty() {
                    return Err(cannot("a used slot's newest note is empty"));
                }
                out.push(&entry_header(*target, slot, note.len()))?;
                out.push(note)?;
                for i in here.drain(..) {
                    if let Some(at) = sources[i].next_entry()? {
                        heads.push(Reverse((at, i)));
                    }
                }
            }
        }
        // The rest of every source, for its order and its checksum.
        for mut source in sources {
            while source.next_entry()?.is_some() {}
            source.finish()?;
        }
        Ok(())
    }
}

/// Where a [`Stream`]'s bytes come from.
enum Feed {
    /// The catalog file's body: `len` bytes in `blocks` blocks after the
    /// header, `read` of them so far, with the checksum taken as they go by.
    CatalogFile {
        file: Arc<DataFile>,
        len: u64,
        blocks: u64,
        read: u64,
        sum: ChainedSum,
        expected: u64,
    },
    Record(PayloadReader),
    /// A payload kept in RAM, handed over a part of its order at a time
    /// (`next` the part after those handed over).
    Ram {
        payload: Payload,
        next: usize,
    },
}

/// The note entries of one source, in order, read a batch at a time.
struct Stream {
    feed: Feed,
    /// Bytes read and not yet parsed start at `buf[at]`.
    buf: Vec<u8>,
    at: usize,
    last: Option<(usize, u32)>,
    /// The note of the entry [`Stream::next_entry`] returned last.
    note: Vec<u8>,
}

impl Stream {
    fn new(feed: Feed) -> Stream {
        Stream {
            feed,
            buf: Vec::new(),
            at: 0,
            last: None,
            note: Vec::new(),
        }
    }

    /// The catalog file of commit `base` in `dir`.
    fn catalog_file(dir: &Dir, base: u64) -> Result<Stream, Error> {
        let bad = |what| Error::corrupt(what).at("catalog", 0);
        let file = dir.open_existing(FILE)?;
        let header = file.read_bytes(0, 1)?;
        let header = Header::check(&header).ok_or_else(|| bad("catalog file header"))?;
        if header.base != base {
            return Err(bad("the records do not follow the catalog file"));
        }
        let feed = Feed::CatalogFile {
            file,
            len: header.len,
            blocks: header.len.div_ceil(BLOCK_SIZE as u64),
            read: 0,
            sum: ChainedSum::default(),
            expected: header.sum,
        };
        Ok(Stream::new(feed))
    }

    fn record(reader: PayloadReader) -> Stream {
        Stream::new(Feed::Record(reader))
    }

    fn ram(payload: Payload) -> Stream {
        Stream::new(Feed::Ram { payload, next: 0 })
    }

    /// Appends the next batch of bytes to the buffer; false if none is left.
    fn load(&mut self) -> Result<bool, Error> {
        self.buf.drain(..self.at);
        self.at = 0;
        match &mut self.feed {
            Feed::Ram { payload, next } => match payload.part(*next) {
                Some(part) => {
                    self.buf.extend_from_slice(part);
                    *next += 1;
                    Ok(true)
                }
                None => Ok(false),
            },
            Feed::Record(reader) => reader.read_into(&mut self.buf),
            Feed::CatalogFile {
                file,
                len,
                blocks,
                read,
                sum,
                ..
            } => {
                if *read == *blocks {
                    return Ok(false);
                }
                let n = (*blocks - *read).min(READ_BATCH);
                let first = 1 + *read;
                let bytes = file.read_bytes(first, first + n)?;
                if bytes.len() as u64 != n * BLOCK_SIZE as u64 {
                    return Err(
                        Error::corrupt("a catalog file shorter than its header says")
                            .at("catalog", 0),
                    );
                }
                for block in bytes.chunks(BLOCK_SIZE) {
                    sum.add(block);
                }
                // The body's bytes only, not the last block's padding.
                let body = (*len - *read * BLOCK_SIZE as u64).min(bytes.len() as u64);
                self.buf.extend_from_slice(&bytes[..body as usize]);
                *read += n;
                Ok(true)
            }
        }
    }

    /// The next entry's slotted target (its index in `SLOTTED`) and slot, its
    /// note in `self.note`; `None` past the last.
    fn next_entry(&mut self) -> Result<Option<(usize, u32)>, Error> {
        let bad = |what| Error::corrupt(what).at("catalog", 0);
        loop {
            let Some((target, slot, start, stop)) = parse_entry(&self.buf[self.at..], 0) else {
                if self.load()? {
                    continue;
                }
                return match self.at == self.buf.len() {
                    true => Ok(None),
                    false => Err(bad("a catalog entry past the end")),
                };
            };
            self.note.clear();
            self.note
                .extend_from_slice(&self.buf[self.at + start..self.at + stop]);
            self.at += stop;
            let Some(t) = SLOTTED.iter().position(|&s| s == target) else {
                continue;
            };
            if self.last.is_some_and(|last| last >= (t, slot)) {
                return Err(bad("catalog notes out of order"));
            }
            self.last = Some((t, slot));
            return Ok(Some((t, slot)));
        }
    }

    /// Checks the checksum of a source read to its end.
    fn finish(self) -> Result<(), Error> {
        match self.feed {
            Feed::CatalogFile { sum, expected, .. } if sum.finish() != expected => {
                Err(Error::corrupt("catalog file checksum").at("catalog", 0))
            }
            // A record's reader checked it after its last byte.
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{
        fold, from_scan, load, read_file, sorted, write_file, Notes, Source, LOG, RECORD_MAGIC,
    };
    use super::*;
    use crate::io::{Io, IoBackend};
    use crate::store::record_log::RecordLog;
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

    /// `payloads` as records of commits `base + 1` on in a fresh log in
    /// `dir`, and readers of them `batch` blocks at a time.
    fn logged(dir: &Path, io: &Io, base: u64, payloads: &[Vec<u8>], batch: u64) -> Payloads {
        let mut log = RecordLog::open(&dir_of(dir), LOG, RECORD_MAGIC).unwrap();
        for (seqno, payload) in (base + 1..).zip(payloads) {
            let (file, at, blocks) = log.prepare(&dir_of(dir), seqno, &[payload]).unwrap();
            let n = blocks.len() as u64;
            io.write_blocks(&file, at, blocks).unwrap();
            log.appended(seqno, n);
        }
        let last = base + payloads.len() as u64;
        // A budget that gives each reader `batch` blocks.
        let budget = batch * BLOCK_SIZE as u64 * payloads.len().max(1) as u64;
        assert!(log.readers_after(base, last + 1, budget).is_none());
        Payloads::Log(log.readers_after(base, last, budget).unwrap())
    }

    fn in_ram(payloads: &[Vec<u8>]) -> Payloads {
        Payloads::Ram(payloads.iter().cloned().map(Payload::in_order).collect())
    }

    /// A map using pages `0..n`, and a catalog file's notes for them.
    fn pages_noted_old(n: u32) -> (SlotMap, Notes) {
        let mut map = SlotMap::default();
        let mut old = Notes::default();
        for s in 0..n {
            map.set(Target::Pages, s as u64, true);
            note(&mut old, Target::Pages, s, "old");
        }
        (map, old)
    }

    /// `notes`' payload as a commit's record holds it.
    fn payload(notes: Notes) -> Vec<u8> {
        sorted(notes).into_sorted()
    }

    #[test]
    fn a_streamed_fold_writes_what_a_whole_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::start(IoBackend::ThreadPool, None).unwrap();
        let lengths = [3000, 8, 0];
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
        // Records after it: page 2 rewritten twice, page 6 and bucket 4 new,
        // page 5 and bucket 0 freed (page 5's slot noted empty, then reused),
        // and pages 100 to 2999 in a record many blocks long, whose entries
        // straddle block boundaries.
        let mut one = Notes::default();
        note(&mut one, Target::Pages, 6, "p6");
        note(&mut one, Target::Pages, 2, "p2 again");
        one.add(Target::Pages, 5, |_| {});
        for s in (100..3000).rev() {
            note(&mut one, Target::Pages, s, &format!("page number {s}"));
        }
        let mut two = Notes::default();
        note(&mut two, Target::Buckets, 4, "b4");
        note(&mut two, Target::Pages, 2, "p2 third");
        note(&mut two, Target::Pages, 5, "p5 new");
        let payloads = vec![payload(one.clone()), payload(two.clone())];
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
        for s in 100..3000 {
            map.set(Target::Pages, s, true);
        }

        // The whole-read fold, from the old catalog file.
        catalog_file(dir.path(), &io, 3, Source::Notes(&old));
        let (_, _, bytes) = read_file(&dir_of(dir.path())).unwrap();
        let meta = Meta {
            lengths,
            ..Meta::default()
        };
        let whole = fold([vec![bytes], payloads.clone()].concat(), &meta, &map).unwrap();
        let expected: Vec<_> = SLOTTED
            .iter()
            .flat_map(|&t| whole.notes(t).map(move |(s, n)| (t, s, n.to_vec())))
            .collect();
        assert_eq!(expected.len(), 6 + 2900);
        assert!(expected.contains(&(Target::Pages, 2, b"p2 third".to_vec())));
        assert!(expected.contains(&(Target::Pages, 5, b"p5 new".to_vec())));
        assert!(payloads[0].len() > 10 * BLOCK_SIZE);

        // An empty record, and one that ends on a block's edge (four notes of
        // 1016 bytes with their headers, after the record's 32), first: the
        // records after them note the same slots, so the result is the same.
        let mut edge = Notes::default();
        for s in 100..104 {
            let text = format!("page number {s}");
            note(&mut edge, Target::Pages, s, &format!("{text:<1007}"));
        }
        let mut payloads = payloads;
        payloads.insert(0, Vec::new());
        payloads.insert(0, payload(edge.clone()));
        // In RAM, as the commits made them: in runs, not yet put in order.
        let made = Vec::from([edge, Notes::default(), one, two].map(sorted));
        assert!(made[2].parts().len() > 1000);
        let mut made = Some(made);
        assert_eq!(32 + payloads[0].len(), BLOCK_SIZE);

        // Streamed, with the records in RAM or read from the log a block or
        // many at a time: the same.
        for (how, batch) in [("ram", 0), ("log", 1), ("log", 2), ("log", 256)] {
            let logs = tempfile::tempdir().unwrap();
            let payloads = match how {
                "ram" => Payloads::Ram(made.take().unwrap()),
                _ => logged(logs.path(), &io, 3, &payloads, batch),
            };
            catalog_file(dir.path(), &io, 3, Source::Notes(&old));
            let merge = Merge { base: 3, payloads };
            catalog_file(dir.path(), &io, 5, Source::Merge(merge, &map));
            assert_eq!(
                notes_on_disk(dir.path(), &map, lengths),
                expected,
                "{how} {batch}"
            );
        }

        // A used slot whose newest note is empty cannot be served.
        let mut three = Notes::default();
        three.add(Target::Buckets, 4, |_| {});
        let voided = Merge {
            base: 5,
            payloads: in_ram(&[payload(three)]),
        };
        let source = Source::Merge(voided, &map);
        assert!(write_file(&dir_of(dir.path()), &io, 6, 7, source).is_err());
        // And the catalog file it failed to replace is whole.
        assert_eq!(notes_on_disk(dir.path(), &map, lengths), expected);
    }

    #[test]
    fn a_record_unsorted_or_damaged_in_the_log_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::start(IoBackend::ThreadPool, None).unwrap();
        let (map, old) = pages_noted_old(1000);
        let mut record = Notes::default();
        for s in (0..1000).rev() {
            note(&mut record, Target::Pages, s, "a newer note");
        }
        let fold_with = |payloads: Payloads| {
            catalog_file(dir.path(), &io, 1, Source::Notes(&old));
            let merge = Merge { base: 1, payloads };
            write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(merge, &map))
        };
        // As an older build logged it, unsorted.
        let unsorted = vec![record.buf.clone()];
        assert!(fold_with(in_ram(&unsorted)).is_err());
        let logs = tempfile::tempdir().unwrap();
        assert!(fold_with(logged(logs.path(), &io, 1, &unsorted, 2)).is_err());
        // Sorted, it folds; with one byte of it flipped on disk, it does not:
        // the header's checksum, its seqno, or a byte of a note in the first
        // block or the fourth (each entry 21 bytes from byte 32), which only
        // the checksum catches.
        let good = vec![payload(record)];
        let logs = tempfile::tempdir().unwrap();
        fold_with(logged(logs.path(), &io, 1, &good, 2)).unwrap();
        let note_byte = |entry: usize| 32 + 21 * entry + 9 + 3;
        assert_eq!(note_byte(583) / BLOCK_SIZE, 2);
        assert_eq!(note_byte(600) / BLOCK_SIZE, 3);
        for at in [8, 20, note_byte(100), note_byte(600)] {
            let logs = tempfile::tempdir().unwrap();
            let payloads = logged(logs.path(), &io, 1, &good, 2);
            let path = logs.path().join(LOG);
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[at] ^= 1;
            std::fs::write(&path, bytes).unwrap();
            assert!(fold_with(payloads).is_err(), "byte {at}");
        }
    }

    /// Open keeps each record since the catalog file for the next fold, as
    /// the commit made it, if they fit the RAM allowed; else none.
    #[test]
    fn open_keeps_the_records_for_the_next_fold_only_if_they_fit() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::start(IoBackend::ThreadPool, None).unwrap();
        let (map, old) = pages_noted_old(100);
        let mut records = vec![Notes::default(), Notes::default()];
        for s in 0..100u32 {
            note(&mut records[(s % 2) as usize], Target::Pages, s, "newer");
        }
        let payloads: Vec<_> = records.into_iter().map(payload).collect();
        let meta = Meta {
            seqno: 3,
            lengths: [100, 0, 0],
            ..Meta::default()
        };
        let total = payloads.iter().map(Vec::len).sum::<usize>();
        for (max, kept) in [(2 * total, true), (total - 1, false)] {
            catalog_file(dir.path(), &io, 1, Source::Notes(&old));
            std::fs::remove_file(dir.path().join(LOG)).ok();
            let _ = logged(dir.path(), &io, 1, &payloads, 1);
            let mut log = RecordLog::open(&dir_of(dir.path()), LOG, RECORD_MAGIC).unwrap();
            let found = load(&dir_of(dir.path()), &mut log, &meta, &map, 7, max).unwrap();
            let catalog = found.catalog.unwrap();
            assert!(catalog.notes(Target::Pages).all(|(_, n)| n == b"newer"));
            let recent = found
                .recent
                .payloads
                .map(|p| p.into_iter().map(|p| p.into_sorted()).collect::<Vec<_>>());
            assert_eq!(recent, kept.then(|| payloads.clone()), "max {max}");
        }
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
            let sum = twox_hash::XxHash3_64::oneshot(&bytes[..super::super::file::CHECKSUM]);
            bytes[super::super::file::CHECKSUM..BLOCK_SIZE].copy_from_slice(&sum.to_le_bytes());
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
        let merge = || Merge {
            base: 1,
            payloads: in_ram(&[]),
        };
        assert!(write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(merge(), &map)).is_err());
        // Written through `from_scan`, as open writes it now, it streams.
        let meta = Meta {
            lengths: [8, 8, 0],
            ..Meta::default()
        };
        let scanned = from_scan(unsorted, &meta, &map).unwrap();
        catalog_file(dir.path(), &io, 1, Source::Catalog(&scanned));
        write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(merge(), &map)).unwrap();
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
        assert!(write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(merge(), &map)).is_err());
        // Records of another catalog file's commit do not merge into this one.
        let other = Merge {
            base: 9,
            payloads: in_ram(&[]),
        };
        assert!(write_file(&dir_of(dir.path()), &io, 2, 7, Source::Merge(other, &map)).is_err());
    }
}
