//! The I/O layer: block reads and writes with many requests in flight, on an
//! io_uring ring or, where that cannot be set up, a small pool of threads doing
//! pread/pwrite. Callers hand over a block and get it back with the result on a
//! channel of their choosing.
//!
//! Owns files, descriptors, the ring and its threads. Knows nothing of what the
//! blocks mean: the stores above decide offsets and contents.

mod dir;
#[cfg(any(test, feature = "fault-injection"))]
pub(crate) mod faults;
mod file;
mod lone;
#[cfg(test)]
mod tests;
mod threads;
mod uring;

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

pub(crate) use dir::{replace_durably, Dir};
pub(crate) use file::{create_dir_durable, sync_dir, DataFile, DirLock, LOCK_FILE};

use crate::block::{Block, BlockBuf, IoBuf, BLOCK_SIZE};
use crate::Error;

/// Which I/O engine runs a database's reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoBackend {
    /// io_uring where it can be set up, the thread pool otherwise.
    #[default]
    Auto,
    /// io_uring only; opening fails where it cannot be set up.
    IoUring,
    /// The pread/pwrite thread pool, everywhere.
    ThreadPool,
}

/// The error of a job given up while the kernel may still carry it out: a
/// write that failed this way may yet land.
#[derive(Debug)]
pub(crate) struct Abandoned(pub(crate) String);

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Abandoned {}

/// Whether `e` is a write that failed but may still land ([`Abandoned`]).
pub(crate) fn may_still_land(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if source.get_ref().is_some_and(|inner| inner.is::<Abandoned>()))
}

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

impl Op {
    /// For errors: what a failed job was doing.
    fn doing(self) -> &'static str {
        match self {
            Op::Read => "reading",
            Op::Write => "writing",
        }
    }
}

/// What a job moves, with its block: a read fills a block of its own, a
/// write's block may be shared with others, who only read it.
pub(crate) enum Transfer {
    /// Reads the block at the job's offset into this one.
    Read(BlockBuf),
    /// Writes this block at the job's offset.
    Write(IoBuf),
}

impl Transfer {
    /// A read into a fresh block.
    pub(crate) fn read() -> Transfer {
        Transfer::Read(Block::for_read())
    }

    /// Read or write.
    pub(crate) fn op(&self) -> Op {
        match self {
            Transfer::Read(_) => Op::Read,
            Transfer::Write(_) => Op::Write,
        }
    }

    /// The block's bytes: those a read brought, or those written.
    pub(crate) fn block(&self) -> &Block {
        match self {
            Transfer::Read(b) => b,
            Transfer::Write(b) => b.block(),
        }
    }

    /// A read's block; `None` for a write.
    pub(crate) fn into_read(self) -> Option<BlockBuf> {
        match self {
            Transfer::Read(b) => Some(b),
            Transfer::Write(_) => None,
        }
    }
}

/// What a batch of jobs moves, so that its [`Pending`] gives back blocks of
/// the direction it started: a batch of writes cannot return a read.
pub(crate) trait Moves: Sized {
    /// The job's transfer.
    fn into_transfer(self) -> Transfer;
    /// `None` for a transfer of the other direction (never the one started).
    fn from_transfer(transfer: Transfer) -> Option<Self>;
}

/// A read into this block.
impl Moves for BlockBuf {
    fn into_transfer(self) -> Transfer {
        Transfer::Read(self)
    }

    fn from_transfer(transfer: Transfer) -> Option<BlockBuf> {
        transfer.into_read()
    }
}

/// A write of this block.
impl Moves for IoBuf {
    fn into_transfer(self) -> Transfer {
        Transfer::Write(self)
    }

    fn from_transfer(transfer: Transfer) -> Option<IoBuf> {
        match transfer {
            Transfer::Write(b) => Some(b),
            Transfer::Read(_) => None,
        }
    }
}

/// Reads and writes mixed, for the engine's tests.
#[cfg(test)]
impl Moves for Transfer {
    fn into_transfer(self) -> Transfer {
        self
    }

    fn from_transfer(transfer: Transfer) -> Option<Transfer> {
        Some(transfer)
    }
}

/// One block to move between memory and a file.
pub(crate) struct Job {
    pub(crate) file: Arc<DataFile>,
    pub(crate) offset: u64,
    pub(crate) transfer: Transfer,
    /// The caller's name for this job, returned with it.
    pub(crate) tag: u64,
    pub(crate) reply: Sender<Done>,
}

/// Where a job's block is: its file, by address so that naming it counts
/// no reference, and the offset.
pub(super) type Place = (*const DataFile, u64);

/// Whether a write at `next` continues one at `last`: the next block of the
/// same file, so the two can go to the kernel as one request.
pub(super) fn continues(last: Place, next: Place) -> bool {
    std::ptr::eq(last.0, next.0) && last.1 + BLOCK_SIZE as u64 == next.1
}

/// A finished job: its transfer (with the data read, or written) and the result.
pub(crate) struct Done {
    pub(crate) tag: u64,
    pub(crate) transfer: Transfer,
    pub(crate) result: io::Result<()>,
}

impl Job {
    fn finish(self, result: io::Result<()>) {
        let done = Done {
            tag: self.tag,
            transfer: self.transfer,
            result,
        };
        // A caller that stopped listening no longer wants the block.
        let _ = self.reply.send(done);
    }
}

/// Counters of the I/O issued.
#[derive(Default, Debug)]
pub(crate) struct IoCounters {
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
    /// Runs the writes form: a write to the block after the one the job
    /// before it (in one [`Io::start_all`]) wrote continues that run.
    pub(crate) write_runs: AtomicU64,
    /// Jobs an engine has started and not yet finished: while there are
    /// any, its thread needs a CPU to finish them.
    active: AtomicUsize,
}

/// The running I/O engine. Dropping it finishes every job in flight, then stops.
pub(crate) struct Io {
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
    uring: bool,
    fallback_reason: Option<String>,
    pub(crate) counters: Arc<IoCounters>,
    /// Work of the database's own threads under way ([`Io::busy`]).
    busy: AtomicUsize,
}

/// Marks the database's threads busy while it lives; see [`Io::busy`].
pub(crate) struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Requests the uring ring keeps in flight at most: past the disk's own
/// queue (128 here), so that a commit's writes keep it busy while the ring's
/// thread waits for a CPU the trie's workers hold. At 2^24 1024 ended a
/// commit's writes sooner than 256 (the wait after planning 143 against 176
/// ms), 512 and 4096 later.
const RING_DEPTH: u32 = 1024;
/// Reads one [`Io::read_all`] keeps in flight at most. At 2^24 the value
/// plan's batch of bucket reads at the start of a commit, all at once, held
/// the commit's workers 15 ms a read with the CPUs idle (the commit now
/// loads those buckets ahead of its workers). In windows of 512
/// the commit's median over 8 alternated pairs went from 977 to 937 ms
/// (shorter in 6 pairs); in windows of 128 the plan's reads took twice as
/// long and the commit longer.
const READ_WINDOW: usize = 512;
/// The thread pool's size.
const POOL_THREADS: usize = 16;

impl Io {
    /// Starts the engine `choice` asks for. With [`IoBackend::Auto`], a ring that
    /// cannot be created (old kernel, seccomp, no permission) means the thread pool,
    /// and [`Io::fallback_reason`] says why.
    pub(crate) fn start(choice: IoBackend, hold: Option<std::os::fd::RawFd>) -> io::Result<Io> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let counters = Arc::new(IoCounters::default());
        let uring_result = match choice {
            IoBackend::ThreadPool => None,
            _ => Some(uring::start(RING_DEPTH, rx.clone(), counters.clone(), hold)),
        };
        let (threads, uring, fallback_reason) = match (choice, uring_result) {
            (_, Some(Ok(handle))) => (vec![handle], true, None),
            (IoBackend::IoUring, Some(Err(e))) => return Err(e),
            (_, Some(Err(e))) => (
                pool(rx, &counters)?,
                false,
                Some(format!("io_uring unavailable: {e}")),
            ),
            (_, None) => (pool(rx, &counters)?, false, None),
        };
        Ok(Io {
            jobs: Some(tx),
            threads,
            uring,
            fallback_reason,
            counters,
            busy: AtomicUsize::new(0),
        })
    }

    /// Says the database's threads need the CPUs (a commit's workers) until
    /// the guard drops: lone reads meanwhile sleep instead of polling.
    pub(crate) fn busy(&self) -> Busy<'_> {
        self.busy.fetch_add(1, Ordering::Relaxed);
        Busy(&self.busy)
    }

    /// Whether jobs run on io_uring.
    pub(crate) fn is_uring(&self) -> bool {
        self.uring
    }

    /// Why `Auto` fell back to the thread pool, if it did.
    pub(crate) fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Queues `job`; its [`Done`] arrives on the job's reply channel.
    pub(crate) fn submit(&self, job: Job) {
        match self.jobs.as_ref() {
            Some(jobs) => {
                if let Err(e) = jobs.send(job) {
                    e.into_inner()
                        .finish(Err(io::Error::other("I/O engine stopped")));
                }
            }
            None => job.finish(Err(io::Error::other("I/O engine stopped"))),
        }
    }

    /// Writes `blocks` to `file` from block `first` on, and waits for them.
    pub(crate) fn write_blocks(
        &self,
        file: &Arc<DataFile>,
        first: u64,
        blocks: Vec<BlockBuf>,
    ) -> Result<(), Error> {
        let jobs = blocks.into_iter().enumerate().map(|(i, b)| {
            let offset = (first + i as u64) * BLOCK_SIZE as u64;
            (file.clone(), offset, IoBuf::from(b))
        });
        self.run_all(jobs).map(drop)
    }

    /// Runs `jobs` (a file, an offset and a block to read into or write
    /// each) concurrently and waits for all of them; the blocks come back in
    /// the order given. Fails with the first error after every job has finished.
    pub(crate) fn run_all<T: Moves>(
        &self,
        jobs: impl IntoIterator<Item = (Arc<DataFile>, u64, T)>,
    ) -> Result<Vec<T>, Error> {
        self.start_all(jobs).wait()
    }

    /// Reads the blocks at `places` (a file and an offset each) concurrently
    /// and waits for them; they come back in the order given. Fails with
    /// the first error, as [`Io::read_each`] meets it.
    pub(crate) fn read_all(
        &self,
        places: impl IntoIterator<Item = (Arc<DataFile>, u64)>,
    ) -> Result<Vec<BlockBuf>, Error> {
        let places: Vec<(Arc<DataFile>, u64)> = places.into_iter().collect();
        in_order(places.len(), |f| self.read_each(places, f))
    }

    /// Reads the blocks at `places` concurrently, handing each to `f` with
    /// its index as it arrives. At most [`READ_WINDOW`] are in flight at
    /// once: enough to keep the disk busy, and few enough that another
    /// thread's read does not queue behind thousands. After a window with
    /// an error, the window after it, already started, is waited for, and
    /// none later starts; reads never started are not handed to `f`.
    pub(crate) fn read_each(
        &self,
        places: Vec<(Arc<DataFile>, u64)>,
        mut f: impl FnMut(usize, Result<BlockBuf, Error>),
    ) {
        let start = |chunk: &[(Arc<DataFile>, u64)]| {
            self.start_all(
                chunk
                    .iter()
                    .map(|(file, offset)| (file.clone(), *offset, Block::for_read())),
            )
        };
        // Two half windows: the next is in flight while the first is awaited.
        let window = READ_WINDOW / 2;
        let mut chunks = places.chunks(window).enumerate();
        let mut ahead = chunks.next().map(|(n, chunk)| (n, start(chunk)));
        let mut failed = false;
        while let Some((n, pending)) = ahead.take() {
            if !failed {
                ahead = chunks.next().map(|(n, chunk)| (n, start(chunk)));
            }
            pending.each(|i, read| {
                failed |= read.is_err();
                f(n * window + i, read);
            });
        }
    }

    /// Starts `jobs` concurrently; [`Pending::wait`] collects them.
    pub(crate) fn start_all<T: Moves>(
        &self,
        jobs: impl IntoIterator<Item = (Arc<DataFile>, u64, T)>,
    ) -> Pending<T> {
        let (tx, rx) = crossbeam_channel::unbounded();
        // Each job's file and direction, to say where a failure was.
        let mut what = Vec::new();
        let mut last_write: Option<Place> = None;
        let mut runs = 0;
        for (file, offset, moved) in jobs {
            let transfer = moved.into_transfer();
            if transfer.op() == Op::Write {
                let here = (Arc::as_ptr(&file), offset);
                runs += u64::from(!last_write.is_some_and(|last| continues(last, here)));
                last_write = Some(here);
            }
            what.push((file.clone(), transfer.op()));
            self.submit(Job {
                file,
                offset,
                transfer,
                tag: what.len() as u64 - 1,
                reply: tx.clone(),
            });
        }
        self.counters.write_runs.fetch_add(runs, Ordering::Relaxed);
        Pending {
            rx,
            what,
            answered: 0,
            moves: std::marker::PhantomData,
        }
    }

    /// Counts `blocks` read on a caller's thread outside the engine.
    pub(crate) fn count_reads(&self, blocks: u64) {
        self.counters.reads.fetch_add(blocks, Ordering::Relaxed);
    }

    /// Reads one block on the calling thread: a lone read skips the hand-off
    /// to the engine's threads. With io_uring, no job in the ring and no
    /// [`Io::busy`] work under way, on a ring of the thread's own, polled.
    pub(crate) fn read(&self, file: &Arc<DataFile>, offset: u64) -> Result<BlockBuf, Error> {
        let mut block = Block::for_read();
        count(&self.counters, Op::Read);
        // A poll would take the CPU the ring's thread or a commit's workers
        // want. A thread of its own reading beside it (the warmer, a fold)
        // still has the other CPU.
        let polled = self.uring
            && self.busy.load(Ordering::Relaxed) == 0
            && self.counters.active.load(Ordering::Relaxed) == 0;
        let read = match polled {
            true => file.read_block_polled(&mut block, offset),
            false => file.read_block(&mut block, offset),
        };
        read.map_err(|e| Error::io("reading", file.name(), e))?;
        Ok(block)
    }
}

/// Writes started and not yet collected.
pub(crate) type Writes = Pending<IoBuf>;

/// Jobs started by [`Io::start_all`] and not yet collected, each moving a `T`.
pub(crate) struct Pending<T> {
    rx: Receiver<Done>,
    what: Vec<(Arc<DataFile>, Op)>,
    answered: usize,
    moves: std::marker::PhantomData<T>,
}

impl<T: Moves> Pending<T> {
    /// Waits for every job; the blocks come back in the order the jobs
    /// were given. Fails with the first error after every job has finished.
    pub(crate) fn wait(self) -> Result<Vec<T>, Error> {
        in_order(self.what.len(), |f| self.each(f))
    }

    /// Hands each job's outcome to `f` as it finishes, with the job's index
    /// in the order given, until every job has answered or the engine has
    /// dropped the rest unanswered.
    pub(crate) fn each(mut self, mut f: impl FnMut(usize, Result<T, Error>)) {
        while self.answered < self.what.len() {
            let Ok(done) = self.rx.recv() else { break };
            self.answered += 1;
            let i = done.tag as usize;
            let Some((file, op)) = self.what.get(i) else {
                continue;
            };
            let moved = match done.result {
                Err(e) => Err(Error::io(op.doing(), file.name(), e)),
                Ok(()) => T::from_transfer(done.transfer)
                    .ok_or(Error::Internal("an I/O job came back turned around")),
            };
            f(i, moved);
        }
    }
}

/// The `n` outcomes `each` hands over by index, in any order, in index
/// order; the first error handed over, or one for an index never handed.
fn in_order<T>(
    n: usize,
    each: impl FnOnce(&mut dyn FnMut(usize, Result<T, Error>)),
) -> Result<Vec<T>, Error> {
    let mut slots: Vec<Option<T>> = (0..n).map(|_| None).collect();
    let mut first_error = None;
    each(&mut |i, outcome| match (outcome, slots.get_mut(i)) {
        (Ok(t), Some(slot)) => *slot = Some(t),
        (Ok(_), None) => {
            first_error.get_or_insert(Error::Internal("an I/O job answered for another"));
        }
        (Err(e), _) => {
            first_error.get_or_insert(e);
        }
    });
    if let Some(e) = first_error {
        return Err(e);
    }
    slots
        .into_iter()
        .map(|t| t.ok_or(Error::Internal("an I/O job never answered")))
        .collect()
}

impl<T> Drop for Pending<T> {
    /// Jobs not collected are waited for all the same: a write still in
    /// flight could otherwise land after a later write to the same block.
    fn drop(&mut self) {
        while self.answered < self.what.len() && self.rx.recv().is_ok() {
            self.answered += 1;
        }
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn pool(rx: Receiver<Job>, counters: &Arc<IoCounters>) -> io::Result<Vec<JoinHandle<()>>> {
    (0..POOL_THREADS)
        .map(|i| threads::spawn(i, rx.clone(), counters.clone()))
        .collect()
}

fn count(counters: &IoCounters, op: Op) {
    let c = match op {
        Op::Read => &counters.reads,
        Op::Write => &counters.writes,
    };
    c.fetch_add(1, Ordering::Relaxed);
}

/// Counts a job an engine starts.
fn started(counters: &IoCounters, op: Op) {
    count(counters, op);
    counters.active.fetch_add(1, Ordering::Relaxed);
}

/// Finishes a job an engine started ([`started`]); counted done before the
/// reply, so a caller the reply wakes sees the engine idle.
fn finish(counters: &IoCounters, job: Job, result: io::Result<()>) {
    counters.active.fetch_sub(1, Ordering::Relaxed);
    job.finish(result);
}
