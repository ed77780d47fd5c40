//! Fault injection for tests: failing reads, writes and syncs, short writes, and
//! power loss that keeps an arbitrary subset of the writes not yet synced.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::file::DataFile;
use crate::block::{Block, BlockBuf, BLOCK_SIZE};

/// One fault plan, shared by every file of a database.
#[derive(Default)]
pub(crate) struct Faults {
    /// Writes that still succeed; after them every write fails (u64::MAX: never).
    pub(crate) writes_left: AtomicU64,
    /// A failing write first writes half its block (a torn write).
    pub(crate) short_writes: AtomicBool,
    pub(crate) fail_syncs: AtomicBool,
    /// Syncs that still succeed; the next one fails, and those after it
    /// succeed again (u64::MAX: never).
    pub(crate) sync_fails_after: AtomicU64,
    pub(crate) fail_reads: AtomicBool,
    unsynced: Mutex<Unsynced>,
}

/// Writes since the last sync of their file, by file descriptor.
#[derive(Default)]
struct Unsynced {
    /// Each write's pre-image (`None`: it extended the file).
    writes: Vec<(i32, u64, Option<BlockBuf>)>,
    /// Each file's length when its first unsynced write came.
    lengths: std::collections::HashMap<i32, u64>,
}

fn injected() -> io::Error {
    io::Error::other("injected fault")
}

impl Faults {
    /// A plan that injects nothing until told to.
    pub(crate) fn none() -> Faults {
        let f = Faults::default();
        f.writes_left.store(u64::MAX, Ordering::SeqCst);
        f.sync_fails_after.store(u64::MAX, Ordering::SeqCst);
        f
    }

    pub(crate) fn before_read(&self) -> io::Result<()> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(injected());
        }
        Ok(())
    }

    pub(crate) fn before_sync(&self) -> io::Result<()> {
        let left = self.sync_fails_after.load(Ordering::SeqCst);
        if left != u64::MAX {
            self.sync_fails_after
                .store(left.checked_sub(1).unwrap_or(u64::MAX), Ordering::SeqCst);
            if left == 0 {
                return Err(injected());
            }
        }
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(injected());
        }
        Ok(())
    }

    pub(crate) fn write(&self, file: &DataFile, block: &Block, offset: u64) -> io::Result<()> {
        let raw = file.raw();
        let fd = file.fd();
        let len = raw.metadata()?.len();
        let before = if offset + BLOCK_SIZE as u64 <= len {
            let mut before = Block::zeroed();
            raw.read_exact_at(&mut before.0, offset)?;
            Some(before)
        } else {
            None
        };
        let mut unsynced = self.unsynced.lock();
        unsynced.lengths.entry(fd).or_insert(len);
        unsynced.writes.push((fd, offset, before));
        drop(unsynced);
        let ok = self
            .writes_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if ok {
            return raw.write_all_at(&block.0, offset);
        }
        if self.short_writes.load(Ordering::SeqCst) {
            raw.write_all_at(&block.0[..BLOCK_SIZE / 2], offset)?;
        }
        Err(injected())
    }

    /// A successful sync of `file` makes its writes so far durable.
    pub(crate) fn synced(&self, fd: i32) {
        let mut unsynced = self.unsynced.lock();
        unsynced.writes.retain(|(f, _, _)| *f != fd);
        unsynced.lengths.remove(&fd);
    }

    /// Power loss: with `seed` None every write not yet synced is undone; with a
    /// seed each is independently kept or undone (newest first, so a block written
    /// twice ends as either version or its original). A file ends as long as it was
    /// at its last sync or as its furthest kept write, whichever is longer.
    pub(crate) fn lose_power(&self, files: &[&DataFile], seed: Option<u64>) -> io::Result<()> {
        let mut rng = seed.map(|s| s | 1);
        let mut unsynced = self.unsynced.lock();
        let mut ends = unsynced.lengths.clone();
        while let Some((fd, offset, before)) = unsynced.writes.pop() {
            if let Some(r) = rng.as_mut() {
                *r ^= *r << 13;
                *r ^= *r >> 7;
                *r ^= *r << 17;
                if *r & 1 == 0 {
                    let end = ends.entry(fd).or_default();
                    *end = (*end).max(offset + BLOCK_SIZE as u64);
                    continue;
                }
            }
            if let Some(file) = files.iter().find(|f| f.fd() == fd) {
                let before = before.unwrap_or_else(Block::zeroed);
                file.raw().write_all_at(&before.0, offset)?;
            }
        }
        unsynced.lengths.clear();
        for (fd, end) in ends {
            if let Some(file) = files.iter().find(|f| f.fd() == fd) {
                file.raw().set_len(end)?;
            }
        }
        Ok(())
    }
}
