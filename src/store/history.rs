//! The history log: one record per commit, written with the commit's blocks
//! and synced before its commit point, so every durable commit's record is on
//! disk (layout in docs/format.md, "History"). What a record says is the
//! layer above's; here it is a payload.
//!
//! Records older than the ones the layer above still needs are dropped by
//! copying the rest to `history.new` and renaming it over `history`, once the
//! dropped part is as large as half the kept part (and at least
//! [`super::Tuning::trim_blocks`]): the file stays within about 1.5 times what is kept,
//! and each kept byte is copied about twice over its life.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use super::framing;
use super::write_blocks;
use crate::block::{BlockBuf, BLOCK_SIZE};
use crate::io::{sync_dir, DataFile, Io};
use crate::Error;

pub(super) const FILE: &str = "history";
const NEW: &str = "history.new";
const MAGIC: &[u8; 8] = b"pthistry";

/// The history file and where its records lie.
pub(super) struct HistoryLog {
    pub(super) file: Arc<DataFile>,
    /// Where the next record goes, in blocks; nothing lies past it.
    pub(super) end: u64,
    /// Each record's seqno and first block, oldest first.
    starts: VecDeque<(u64, u64)>,
    /// The records open found, until the layer above takes them.
    pub(super) found: Vec<(u64, Vec<u8>)>,
    /// A rewrite's rename whose directory sync failed: the next commit
    /// syncs the directory before its commit point, so its record is not in
    /// a file whose name a power loss could undo.
    pub(super) dir_unsynced: bool,
}

/// Opens the history of a database whose durable commit is `durable`: the
/// records up to it, in order, with the rest of the file (a torn or
/// undurable tail) cut off.
pub(super) fn load(dir: &Path, file: Arc<DataFile>, durable: u64) -> Result<HistoryLog, Error> {
    remove_new(dir)?;
    let bytes = std::fs::read(dir.join(FILE)).map_err(|e| Error::io("reading", FILE, e))?;
    let (mut at, mut last) = (0, 0);
    let mut starts = VecDeque::new();
    let mut found = Vec::new();
    while let Some((seqno, payload, next)) = framing::parse(MAGIC, &bytes, at) {
        if seqno > durable || seqno <= last {
            break;
        }
        starts.push_back((seqno, (at / BLOCK_SIZE) as u64));
        found.push((seqno, payload.to_vec()));
        last = seqno;
        at = next;
    }
    let end = (at / BLOCK_SIZE) as u64;
    if bytes.len() as u64 != end * BLOCK_SIZE as u64 {
        file.truncate(end)?;
    }
    Ok(HistoryLog {
        file,
        end,
        starts,
        found,
        dir_unsynced: false,
    })
}

/// Blocks `from..to` of the file at `path`.
fn read_range(path: &Path, from: u64, to: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut bytes = vec![0; ((to - from) as usize) * BLOCK_SIZE];
    std::fs::File::open(path)?.read_exact_at(&mut bytes, from * BLOCK_SIZE as u64)?;
    Ok(bytes)
}

fn remove_new(dir: &Path) -> Result<(), Error> {
    match std::fs::remove_file(dir.join(NEW)) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("removing", NEW, e)),
    }
}

impl HistoryLog {
    /// The record of commit `seqno` in blocks, to be written at [`HistoryLog::end`].
    pub(super) fn record(seqno: u64, payload: &[u8]) -> Vec<BlockBuf> {
        framing::frame(MAGIC, seqno, payload)
    }

    /// Notes the record of commit `seqno`, `blocks` long, as durable.
    pub(super) fn appended(&mut self, seqno: u64, blocks: u64) {
        self.starts.push_back((seqno, self.end));
        self.end += blocks;
    }

    /// Empties the log, durably.
    pub(super) fn erase(&mut self) -> Result<(), Error> {
        self.file.erase()?;
        self.end = 0;
        self.starts.clear();
        Ok(())
    }

    /// Whether dropping the records before commit `keep_from` would shrink
    /// the file enough to rewrite it, and from which block.
    fn trim_point(&self, keep_from: u64, min_blocks: u64) -> Option<u64> {
        let first = self
            .starts
            .iter()
            .find(|(seqno, _)| *seqno >= keep_from)
            .map_or(self.end, |(_, start)| *start);
        let kept = self.end - first;
        (first >= min_blocks && first >= kept / 2).then_some(first)
    }

    /// Drops the records before commit `keep_from` if that pays: the kept
    /// ones are copied to a new file, which replaces this one whole. On
    /// failure the log is as it was.
    pub(super) fn trim(
        &mut self,
        dir: &Path,
        io: &Io,
        open: impl Fn(&Path) -> Result<DataFile, Error>,
        keep_from: u64,
        tuning: &super::Tuning,
    ) -> Result<(), Error> {
        let Some(first) = self.trim_point(keep_from, tuning.trim_blocks) else {
            return Ok(());
        };
        let file = Arc::new(open(&dir.join(NEW))?);
        let written = (|| {
            file.erase()?;
            file.reserve(self.end - first)?;
            // A batch at a time: the kept records are most of the history
            // (about 175 MB at 2^24 accounts), and read whole, then copied
            // into blocks, they sat beside the caches at once.
            let mut at = first;
            while at < self.end {
                let to = self.end.min(at + tuning.copy_batch);
                let kept = read_range(&dir.join(FILE), at, to)
                    .map_err(|e| Error::io("reading", FILE, e))?;
                write_blocks(io, &file, at - first, framing::to_blocks(&kept))?;
                at = to;
            }
            file.sync()?;
            std::fs::rename(dir.join(NEW), dir.join(FILE))
                .map_err(|e| Error::io("renaming", NEW, e))
        })();
        if let Err(e) = written {
            let _ = remove_new(dir);
            return Err(e);
        }
        // Renamed: the new file is the log from here on (under its final
        // name, for errors that name it), even before the rename is durable.
        self.file = open(&dir.join(FILE)).map(Arc::new).unwrap_or(file);
        self.end -= first;
        self.starts.retain(|(_, start)| *start >= first);
        for (_, start) in &mut self.starts {
            *start -= first;
        }
        self.dir_unsynced = true;
        self.sync_dir(dir)
    }

    /// Makes a rewrite's rename durable, if it is not yet.
    pub(super) fn sync_dir(&mut self, dir: &Path) -> Result<(), Error> {
        if self.dir_unsynced {
            sync_dir(dir)?;
            self.dir_unsynced = false;
        }
        Ok(())
    }
}
