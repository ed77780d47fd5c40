//! Fault injection: failing reads, writes and syncs, short writes, a disk that
//! runs out of space, and power loss that keeps, drops or tears each write not
//! yet synced. Built for the crate's tests and, with the `fault-injection`
//! feature, for torture programs outside it (`examples/torture`).
//!
//! The plan sits beneath both I/O engines: the thread pool asks it before
//! each pread and pwrite, the io_uring engine before each submission, and
//! carries an injected failure out through the kernel (a write cut short,
//! then a completion that fails), so its own error paths run as in
//! production. Syncs and allocations go through the files' own methods on
//! either engine. The ring can also be made to die mid-commit.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::block::{Block, BlockBuf, BLOCK_SIZE};

/// Sectors a block can tear at: a power loss may keep any prefix of them.
const SECTORS: u64 = (BLOCK_SIZE / 512) as u64;

/// One fault plan, shared by every file of a database
/// ([`crate::Options::faults`]). Every fault is off until set.
#[derive(Default)]
pub struct Faults {
    /// Writes that still succeed; after them every write fails (u64::MAX: never).
    pub(crate) writes_left: AtomicU64,
    /// A failing write first writes half its block (a torn write).
    pub(crate) short_writes: AtomicBool,
    pub(crate) fail_syncs: AtomicBool,
    /// Syncs that still succeed; the next one fails, and those after it
    /// succeed again (u64::MAX: never).
    pub(crate) sync_fails_after: AtomicU64,
    /// Syncs that still succeed; every one after them fails (u64::MAX: never).
    syncs_left: AtomicU64,
    pub(crate) fail_reads: AtomicBool,
    /// Blocks the files may still grow by before writes fail with ENOSPC
    /// (u64::MAX: unbounded).
    space_left: AtomicU64,
    /// Jobs the io_uring engine still takes; at the next one its ring dies
    /// (u64::MAX: never).
    ring_jobs_left: AtomicU64,
    unsynced: Mutex<Unsynced>,
}

/// What a simulated power loss does to each write not yet synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// The crate's own tests set the fields; the methods are the feature's API.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub enum PowerLoss {
    /// Every one is lost.
    DropAll,
    /// Each is kept or lost, chosen by a generator seeded with the value.
    Random(u64),
    /// Each is kept, lost, or torn: its first sectors (512 bytes each) written
    /// and the rest not; chosen by a generator seeded with the value.
    Torn(u64),
}

#[cfg(test)]
impl PowerLoss {
    /// `DropAll` without a seed, `Random` with one.
    pub(crate) fn from_seed(seed: Option<u64>) -> PowerLoss {
        seed.map_or(PowerLoss::DropAll, PowerLoss::Random)
    }
}

/// Writes since the last sync of their file, by file descriptor.
#[derive(Default)]
struct Unsynced {
    /// Each write's pre-image (`None`: it extended the file).
    /// Each is keyed by its file's inode.
    writes: Vec<(u64, u64, Option<BlockBuf>)>,
    /// Each file's length when its first unsynced write came.
    lengths: std::collections::HashMap<u64, u64>,
}

pub(crate) fn injected() -> io::Error {
    io::Error::other("injected fault")
}

/// What an injected fault does to one write, decided before it is issued.
pub(crate) enum WriteFault {
    /// Nothing: it is written.
    None,
    /// It fails, writing nothing.
    Fail,
    /// It writes its first half, then fails.
    Torn,
}

/// Takes one from `counter` unless it is u64::MAX (unlimited); false once it
/// is spent.
fn take(counter: &AtomicU64, n: u64) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| match left {
            u64::MAX => Some(u64::MAX),
            left => left.checked_sub(n),
        })
        .is_ok()
}

#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
impl Faults {
    /// A plan that injects nothing until told to.
    pub fn none() -> Faults {
        let f = Faults::default();
        f.writes_left.store(u64::MAX, Ordering::SeqCst);
        f.sync_fails_after.store(u64::MAX, Ordering::SeqCst);
        f.syncs_left.store(u64::MAX, Ordering::SeqCst);
        f.space_left.store(u64::MAX, Ordering::SeqCst);
        f.ring_jobs_left.store(u64::MAX, Ordering::SeqCst);
        f
    }

    /// Lets `n` more writes succeed, then fails every write after them; with
    /// `torn`, a failing write first writes half its block.
    pub fn fail_writes_after(&self, n: u64, torn: bool) {
        self.short_writes.store(torn, Ordering::SeqCst);
        self.writes_left.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more syncs succeed, then fails the next one only.
    pub fn fail_one_sync_after(&self, n: u64) {
        self.sync_fails_after.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more syncs succeed, then fails every sync after them.
    pub fn fail_syncs_after(&self, n: u64) {
        self.syncs_left.store(n, Ordering::SeqCst);
    }

    /// Fails every sync from now on (or none, with `false`).
    pub fn fail_syncs(&self, fail: bool) {
        self.fail_syncs.store(fail, Ordering::SeqCst);
    }

    /// Fails every read from now on (or none, with `false`).
    pub fn fail_reads(&self, fail: bool) {
        self.fail_reads.store(fail, Ordering::SeqCst);
    }

    /// Lets the files grow by `blocks` more blocks in all; past that, writes
    /// and allocations that would grow a file fail with ENOSPC.
    pub fn disk_full_after(&self, blocks: u64) {
        self.space_left.store(blocks, Ordering::SeqCst);
    }

    /// Lets the io_uring engine take `n` more jobs; at the next one its ring
    /// dies, failing every job in flight as abandoned (the kernel may still
    /// carry them out) and every job after. Does nothing on the thread pool.
    pub fn kill_ring_after(&self, n: u64) {
        self.ring_jobs_left.store(n, Ordering::SeqCst);
    }

    /// Fails every write and sync from now on, as after a power cut, until
    /// [`Faults::clear`].
    pub(crate) fn cut_power(&self) {
        self.fail_writes_after(0, false);
        self.fail_syncs(true);
    }

    /// Turns every fault off (writes not yet synced stay tracked).
    pub fn clear(&self) {
        self.writes_left.store(u64::MAX, Ordering::SeqCst);
        self.short_writes.store(false, Ordering::SeqCst);
        self.fail_syncs.store(false, Ordering::SeqCst);
        self.sync_fails_after.store(u64::MAX, Ordering::SeqCst);
        self.syncs_left.store(u64::MAX, Ordering::SeqCst);
        self.fail_reads.store(false, Ordering::SeqCst);
        self.space_left.store(u64::MAX, Ordering::SeqCst);
        self.ring_jobs_left.store(u64::MAX, Ordering::SeqCst);
    }

    /// Before the io_uring engine takes a job: an error means its ring dies.
    pub(crate) fn before_ring_job(&self) -> io::Result<()> {
        match take(&self.ring_jobs_left, 1) {
            true => Ok(()),
            false => Err(io::Error::other("injected fault: the io_uring ring died")),
        }
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
        if self.fail_syncs.load(Ordering::SeqCst) || !take(&self.syncs_left, 1) {
            return Err(injected());
        }
        Ok(())
    }

    /// Before a file grows by `blocks` blocks of allocated space.
    pub(crate) fn before_reserve(&self, blocks: u64) -> io::Result<()> {
        match take(&self.space_left, blocks) {
            true => Ok(()),
            false => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
        }
    }

    /// Before a write of a block at `offset` of `file` is issued: keeps what
    /// it overwrites, for a power loss, and says what the write does; fails
    /// with ENOSPC if it would grow the file past the space left.
    pub(crate) fn before_write(&self, raw: &File, offset: u64) -> io::Result<WriteFault> {
        let meta = raw.metadata()?;
        let (inode, len) = (std::os::unix::fs::MetadataExt::ino(&meta), meta.len());
        let before = if offset + BLOCK_SIZE as u64 <= len {
            let mut before = Block::zeroed();
            raw.read_exact_at(&mut before.0, offset)?;
            Some(before)
        } else {
            if !take(&self.space_left, 1) {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            None
        };
        let mut unsynced = self.unsynced.lock();
        unsynced.lengths.entry(inode).or_insert(len);
        unsynced.writes.push((inode, offset, before));
        drop(unsynced);
        Ok(match take(&self.writes_left, 1) {
            true => WriteFault::None,
            false if self.short_writes.load(Ordering::SeqCst) => WriteFault::Torn,
            false => WriteFault::Fail,
        })
    }

    /// A write on the thread pool, through the plan.
    pub(crate) fn write(&self, raw: &File, block: &Block, offset: u64) -> io::Result<()> {
        match self.before_write(raw, offset)? {
            WriteFault::None => raw.write_all_at(&block.0, offset),
            WriteFault::Torn => {
                raw.write_all_at(&block.0[..BLOCK_SIZE / 2], offset)?;
                Err(injected())
            }
            WriteFault::Fail => Err(injected()),
        }
    }

    /// A successful sync of `file` makes its writes so far durable.
    pub(crate) fn synced(&self, inode: u64) {
        let mut unsynced = self.unsynced.lock();
        unsynced.writes.retain(|(f, _, _)| *f != inode);
        unsynced.lengths.remove(&inode);
    }

    /// Applies `loss` to every write not yet synced, newest first, so a block
    /// written twice ends as either version, its original, or a tear of them. A
    /// file ends as long as it was at its last sync or as its furthest kept
    /// write, whichever is longer.
    pub(crate) fn lose_power(&self, files: &[File], loss: PowerLoss) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let inode = |f: &File| f.metadata().map_or(u64::MAX, |m| m.ino());
        let (mut rng, tears) = match loss {
            PowerLoss::DropAll => (None, false),
            PowerLoss::Random(seed) => (Some(seed | 1), false),
            PowerLoss::Torn(seed) => (Some(seed | 1), true),
        };
        let mut next = || {
            rng.as_mut().map(|r| {
                *r ^= *r << 13;
                *r ^= *r >> 7;
                *r ^= *r << 17;
                *r
            })
        };
        let mut unsynced = self.unsynced.lock();
        let mut ends = unsynced.lengths.clone();
        while let Some((inode_of_write, offset, before)) = unsynced.writes.pop() {
            // Sectors of the new contents that survive: all, none, or a prefix.
            let kept = match next() {
                None => 0,
                Some(r) if r & 1 == 0 => SECTORS,
                Some(r) if tears && r & 2 == 0 => (r >> 8) % SECTORS,
                Some(_) => 0,
            };
            if kept > 0 {
                let end = ends.entry(inode_of_write).or_default();
                *end = (*end).max(offset + BLOCK_SIZE as u64);
            }
            if kept == SECTORS {
                continue;
            }
            if let Some(file) = files.iter().find(|f| inode(f) == inode_of_write) {
                let before = before.unwrap_or_else(Block::zeroed);
                let from = kept as usize * 512;
                file.write_all_at(&before.0[from..], offset + from as u64)?;
            }
        }
        unsynced.lengths.clear();
        for (ino, end) in ends {
            if let Some(file) = files.iter().find(|f| inode(f) == ino) {
                file.set_len(end)?;
            }
        }
        Ok(())
    }
}
