//! An append-only log of framed records, one per commit ([`super::framing`]):
//! the catalog's log and the history are each one. It knows where its records
//! lie, appends a commit's record, cuts a torn tail at open and drops old
//! records by rewriting the rest through a durable replace. What a record says
//! is its owner's.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::framing;
use crate::block::BlockBuf;
use crate::block::BLOCK_SIZE;
use crate::io::{DataFile, Dir, Io};
use crate::Error;

/// A commit's record for a log file: the file, the block it starts at, its
/// blocks.
pub(super) type LogRecord = (Arc<DataFile>, u64, Vec<BlockBuf>);

/// What opening a log does with a record that checks.
pub(super) enum Keep {
    /// Hands it to the owner.
    Record,
    /// Passes over it: still part of the log, not wanted.
    Skip,
    /// Ends the log before it.
    Stop,
}

/// An open record log.
pub(super) struct RecordLog {
    file: Arc<DataFile>,
    name: &'static str,
    magic: &'static [u8; 8],
    /// Where the next record goes, in blocks; nothing durable lies past it.
    end: u64,
    /// Each record's seqno and first block, oldest first.
    starts: VecDeque<(u64, u64)>,
    /// A rewrite's rename whose directory sync failed: the next append syncs
    /// the directory before its commit point, so its record is not in a file
    /// whose name a power loss could undo.
    dir_unsynced: bool,
    /// An erase that failed part way: the file may still hold records, or a
    /// truncation a power loss could undo. The next append erases it first,
    /// so its record never lands behind a gap or beside stale ones.
    unerased: bool,
}

/// The file a rewrite of the log `name` is written to before it replaces it.
fn new_name(name: &str) -> String {
    format!("{name}.new")
}

impl RecordLog {
    /// Opens the log `name` of `magic`, removing a rewrite a crash cut
    /// short; [`RecordLog::load`] then finds its records.
    pub(super) fn open(
        dir: &Dir,
        name: &'static str,
        magic: &'static [u8; 8],
    ) -> Result<RecordLog, Error> {
        dir.remove(&new_name(name))?;
        Ok(RecordLog {
            file: dir.open(name)?,
            name,
            magic,
            end: 0,
            starts: VecDeque::new(),
            dir_unsynced: false,
            unerased: false,
        })
    }

    /// Hands `each` the payload of every record `keep` accepts, oldest first,
    /// up to the first it stops at or that does not check. Records are read
    /// one at a time, so open holds one record, not the log. What follows
    /// them (a torn or undurable tail) is cut off: the next record goes there.
    pub(super) fn load(
        &mut self,
        mut keep: impl FnMut(u64) -> Keep,
        mut each: impl FnMut(u64, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let len = self.file.byte_len()?;
        let (mut at, mut starts) = (0, VecDeque::new());
        while let Some((seqno, bytes, payload, blocks)) = self.read_record(at, len)? {
            match keep(seqno) {
                Keep::Stop => break,
                Keep::Skip => {}
                Keep::Record => {
                    starts.push_back((seqno, at));
                    each(seqno, &bytes[payload])?;
                }
            }
            at += blocks;
        }
        self.end = at;
        self.starts = starts;
        if len != at * BLOCK_SIZE as u64 {
            self.file.truncate(at)?;
        }
        Ok(())
    }

    /// The record at block `at` of the file, `len` bytes long: its seqno, its
    /// bytes, where its payload lies in them, and its length in blocks;
    /// `None` if none checks there.
    #[allow(clippy::type_complexity)]
    fn read_record(
        &self,
        at: u64,
        len: u64,
    ) -> Result<Option<(u64, Vec<u8>, Range<usize>, u64)>, Error> {
        let block = BLOCK_SIZE as u64;
        let whole = len / block;
        if at >= whole {
            return Ok(None);
        }
        let mut bytes = self.file.read_bytes(at, at + 1)?;
        let Some(head) = framing::Head::parse(self.magic, &bytes) else {
            return Ok(None);
        };
        // A length past the file's end is a torn or damaged header: never
        // read (or allocated) past what is there.
        let blocks = (framing::HEADER as u64)
            .checked_add(head.len)
            .map(|n| n.div_ceil(block))
            .filter(|&n| n <= whole - at);
        let Some(blocks) = blocks else {
            return Ok(None);
        };
        if blocks > 1 {
            bytes.extend(self.file.read_bytes(at + 1, at + blocks)?);
        }
        let Some((seqno, payload, _)) = framing::parse(self.magic, &bytes, 0) else {
            return Ok(None);
        };
        let payload = framing::HEADER..framing::HEADER + payload.len();
        Ok(Some((seqno, bytes, payload, blocks)))
    }

    /// The file, for power-loss tests.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(super) fn file(&self) -> &Arc<DataFile> {
        &self.file
    }

    /// Whether the file holds nothing at all.
    pub(super) fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.file.byte_len()? == 0)
    }

    /// The log's length in blocks.
    pub(super) fn end(&self) -> u64 {
        self.end
    }

    /// The record of commit `seqno`, whose payload `parts` make one after
    /// another, in blocks, where it goes, and room reserved for it: the
    /// commit writes and syncs it before its commit point, then calls
    /// [`RecordLog::appended`].
    pub(super) fn prepare(
        &mut self,
        dir: &Dir,
        seqno: u64,
        parts: &[&[u8]],
    ) -> Result<LogRecord, Error> {
        if self.dir_unsynced {
            dir.sync()?;
            self.dir_unsynced = false;
        }
        if self.unerased {
            self.file.erase()?;
            // A load since may have found records the erase meant to drop.
            self.end = 0;
            self.starts.clear();
            self.unerased = false;
        }
        let blocks = framing::frame(self.magic, seqno, parts);
        self.file.reserve(self.end + blocks.len() as u64)?;
        Ok((self.file.clone(), self.end, blocks))
    }

    /// Notes the record of commit `seqno`, `blocks` long, as durable.
    pub(super) fn appended(&mut self, seqno: u64, blocks: u64) {
        self.starts.push_back((seqno, self.end));
        self.end += blocks;
    }

    /// Empties the log, durably. If that fails the log is empty all the same
    /// and the next append erases the file again before it writes.
    pub(super) fn erase(&mut self) -> Result<(), Error> {
        // Whatever step fails, the truncation may have happened: the old
        // records and their end are no longer a place to append after.
        self.end = 0;
        self.starts.clear();
        self.unerased = true;
        self.file.erase()?;
        self.unerased = false;
        Ok(())
    }

    /// The first block of the oldest record of commit `seqno` or later, or
    /// the end if there is none.
    pub(super) fn start_of(&self, seqno: u64) -> u64 {
        self.starts
            .iter()
            .find(|(s, _)| *s >= seqno)
            .map_or(self.end, |(_, start)| *start)
    }

    /// Readers of the payloads of the records after commit `base` up to the
    /// `durable` one, oldest first, that share `budget` bytes of read buffer
    /// (a block each at least); `None` unless the log holds every one of them.
    pub(super) fn readers_after(
        &self,
        base: u64,
        durable: u64,
        budget: u64,
    ) -> Option<Vec<PayloadReader>> {
        let after: Vec<_> = self.starts.iter().filter(|(s, _)| *s > base).collect();
        let runs = after
            .iter()
            .zip(base + 1..)
            .all(|(&&(s, _), want)| s == want);
        let last = after.last().map_or(base, |(s, _)| *s);
        let batch = (budget / BLOCK_SIZE as u64 / after.len().max(1) as u64).max(1);
        (runs && last == durable).then(|| {
            after
                .iter()
                .map(|&&(seqno, first)| PayloadReader {
                    file: self.file.clone(),
                    name: self.name,
                    magic: self.magic,
                    seqno,
                    next: first,
                    batch,
                    started: None,
                })
                .collect()
        })
    }

    /// Drops the records before block `first`: the rest is copied,
    /// `copy_batch` blocks at a time, to a new file that replaces this one.
    /// On failure the log is as it was.
    pub(super) fn drop_before(
        &mut self,
        dir: &Dir,
        io: &Io,
        first: u64,
        copy_batch: u64,
    ) -> Result<(), Error> {
        let new = new_name(self.name);
        let file = dir.open(&new)?;
        let written = (|| {
            file.erase()?;
            file.reserve(self.end - first)?;
            // A batch at a time: the kept records are most of a history
            // (about 175 MB at 2^24 accounts), and read whole, then copied
            // into blocks, they sat beside the caches at once.
            let mut at = first;
            while at < self.end {
                let to = self.end.min(at + copy_batch.max(1));
                let kept = self.file.read_bytes(at, to)?;
                io.write_blocks(&file, at - first, framing::to_blocks(&kept))?;
                at = to;
            }
            file.sync()?;
            dir.rename(&new, self.name)
        })();
        if let Err(e) = written {
            let _ = dir.remove(&new);
            return Err(e);
        }
        // Renamed: the new file is the log from here on (under its final
        // name, for errors that name it), even before the rename is durable.
        self.file = dir.open(self.name).unwrap_or(file);
        self.end -= first;
        self.starts.retain(|(_, start)| *start >= first);
        for (_, start) in &mut self.starts {
            *start -= first;
        }
        self.dir_unsynced = true;
        dir.sync()?;
        self.dir_unsynced = false;
        Ok(())
    }
}

/// One record's payload read from its log a batch of blocks at a time, so a
/// reader need not hold it whole; its checksum is checked after the last byte.
pub(super) struct PayloadReader {
    file: Arc<DataFile>,
    name: &'static str,
    magic: &'static [u8; 8],
    seqno: u64,
    /// The next block to read.
    next: u64,
    batch: u64,
    /// Once the header is read: payload bytes not yet handed out, and the
    /// check of those that were.
    started: Option<(u64, framing::Check)>,
}

impl PayloadReader {
    /// Appends the next bytes of the payload to `buf`; false once none are
    /// left. A record that is short, is not the one expected or fails its
    /// checksum is corruption.
    pub(super) fn read_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, Error> {
        let (name, at) = (self.name, self.next);
        let bad = |what| Error::corrupt(what).at(name, at);
        let block = BLOCK_SIZE as u64;
        let want = match &self.started {
            Some((0, _)) => return Ok(false),
            Some((left, _)) => left.div_ceil(block).min(self.batch),
            None => self.batch,
        };
        let bytes = self.file.read_bytes(self.next, self.next + want)?;
        let (skip, (left, check)) = match &mut self.started {
            Some(started) => (0, started),
            None => {
                let head = framing::Head::parse(self.magic, &bytes)
                    .filter(|h| h.seqno == self.seqno)
                    .ok_or_else(|| bad("a log record's header"))?;
                (
                    framing::HEADER,
                    self.started.insert((head.len, head.check())),
                )
            }
        };
        // Whole blocks of this record only: a first batch may run past it.
        let end = left
            .checked_add(skip as u64)
            .ok_or_else(|| bad("a log record's length"))?;
        let blocks = end.div_ceil(block).min(want);
        if (bytes.len() as u64) < blocks * block {
            return Err(bad("a log record past the end of its file"));
        }
        let take = (*left).min(blocks * block - skip as u64) as usize;
        let payload = &bytes[skip..skip + take];
        check.add(payload);
        buf.extend_from_slice(payload);
        *left -= take as u64;
        self.next += blocks;
        if *left == 0 && !check.holds() {
            return Err(bad("a log record's checksum"));
        }
        Ok(true)
    }
}
