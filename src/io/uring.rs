//! The io_uring engine: one thread owns the ring, batches every queued job into it,
//! and sends each completion back to whoever asked.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, TryRecvError};
use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::{continues, finish, started, IoCounters, Job, Op, Transfer};
use crate::block::{Block, IoBuf, BLOCK_SIZE};

use libc::{EAGAIN, EBUSY, EINTR};

/// Failed submissions in a row (1 ms apart) after which the ring is given up.
const SUBMIT_ATTEMPTS: u32 = 100;
/// Writes to consecutive blocks of one file that one vectored request
/// carries at most (1 MiB): the kernel's CPU goes by requests, not bytes.
const RUN_MAX: usize = 256;

/// Creates the ring here, so a failure reaches the caller, then runs it on a thread.
///
/// `hold` (the directory lock's descriptor) is registered with the ring. When a
/// process dies, the kernel tears its ring down asynchronously and writes in
/// flight may still land after the process is gone; the ring's reference keeps
/// the lock held until they have, so the next process to open the database
/// cannot read or write beside them.
pub(super) fn start(
    depth: u32,
    jobs: Receiver<Job>,
    counters: Arc<IoCounters>,
    hold: Option<RawFd>,
) -> io::Result<JoinHandle<()>> {
    let ring = IoUring::new(depth)?;
    if let Some(fd) = hold {
        ring.submitter().register_files(&[fd])?;
    }
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    if ![
        opcode::Read::CODE,
        opcode::Write::CODE,
        opcode::Writev::CODE,
    ]
    .into_iter()
    .all(|code| probe.is_supported(code))
    {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel lacks IORING_OP_READ/WRITE/WRITEV",
        ));
    }
    std::thread::Builder::new()
        .name("pagetrie-uring".into())
        .spawn(move || Ring::new(ring, counters).run(jobs))
}

/// A request in the ring: one job, or a run of writes to consecutive blocks
/// of one file, and how many of its bytes are done (short transfers resume).
struct InFlight {
    jobs: Vec<Job>,
    /// A run's blocks from the first byte not yet written: the kernel may
    /// read the array until the request completes.
    iovecs: Vec<libc::iovec>,
    done: usize,
    /// An injected failure: the transfer stops after `cut` bytes and its
    /// next entry goes to no file, so the kernel fails it and the completion
    /// reports this error instead.
    fault: Option<(io::Error, usize)>,
}

/// A descriptor no file has: the kernel fails an entry on it with EBADF.
const NO_FILE: RawFd = -1;

struct Ring {
    ring: IoUring,
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
    counters: Arc<IoCounters>,
}

impl Ring {
    fn new(ring: IoUring, counters: Arc<IoCounters>) -> Ring {
        Ring {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            counters,
        }
    }

    fn run(mut self, jobs: Receiver<Job>) {
        match self.serve(&jobs) {
            // Nothing in flight: the lock need not outlive the ring, which the
            // kernel may take a while to tear down.
            Ok(()) => {
                let _ = self.ring.submitter().unregister_files();
            }
            Err(e) => self.abandon(&e),
        }
    }

    /// Serves jobs until the channel closes, or fails if the ring stops working.
    fn serve(&mut self, jobs: &Receiver<Job>) -> io::Result<()> {
        let capacity = self.ring.params().sq_entries() as usize;
        let mut open = true;
        loop {
            let mut batch = Vec::new();
            // Block for work only when nothing is in flight.
            if self.in_flight == 0 {
                match open.then(|| jobs.recv().ok()).flatten() {
                    Some(job) => batch.push(job),
                    None => return Ok(()),
                }
            }
            while open && self.in_flight + batch.len() < capacity {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.start_batch(batch)?;
            self.submit_and_wait()?;
            self.reap()?;
        }
    }

    /// Starts `batch` in order, a write to the block after the one before it,
    /// in the same file, joining that one's request. A job the fault plan
    /// touches goes alone; jobs after one the ring dies at are dropped
    /// unstarted, as those still in the channel are.
    fn start_batch(&mut self, batch: Vec<Job>) -> io::Result<()> {
        let mut run: Vec<Job> = Vec::new();
        for job in batch {
            started(&self.counters, job.transfer.op());
            let fault = match injected(&job) {
                Ok(fault) => fault,
                Err(dies) => {
                    self.start(run, None)?;
                    // A ring that dies takes this job down with those in flight.
                    self.start(vec![job], None)?;
                    return Err(dies);
                }
            };
            let joins = fault.is_none()
                && run.len() < RUN_MAX
                && run.last().is_some_and(|last| follows(last, &job));
            if !joins {
                self.start(std::mem::take(&mut run), None)?;
            }
            if fault.is_some() {
                self.start(vec![job], fault)?;
            } else {
                run.push(job);
            }
        }
        self.start(run, None)
    }

    /// Puts `jobs` (one, or a run; none is nothing to do) in a slot and
    /// queues their request.
    fn start(&mut self, jobs: Vec<Job>, fault: Option<(io::Error, usize)>) -> io::Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(InFlight {
            jobs,
            iovecs: Vec::new(),
            done: 0,
            fault,
        });
        self.in_flight += 1;
        self.push(slot)
    }

    /// Queues the rest of slot `slot`'s transfer.
    fn push(&mut self, slot: usize) -> io::Result<()> {
        let Some(f) = self.slots[slot].as_mut() else {
            return Ok(());
        };
        let entry = if f.jobs.len() > 1 {
            f.vectored()
        } else {
            f.single()
        }
        .user_data(slot as u64);
        // SAFETY: the buffers are the jobs' blocks, owned by `self.slots[slot]` (or,
        // shared, kept alive by the job's Arc and never changed while shared)
        // and neither touched nor freed until this entry's completion is reaped, or
        // leaked by `abandon` (moving the handle within `slots` moves neither the
        // blocks nor a run's iovec array, which is rebuilt only after its entry
        // completed); the jobs' Arc<DataFile> keeps the descriptor open as long.
        if unsafe { self.ring.submission().push(&entry) }.is_ok() {
            return Ok(());
        }
        // Unreachable while each slot has one entry queued and slots in flight are
        // capped at the queue's size; kept as a clean failure all the same.
        Err(io::Error::other("io_uring submission queue full"))
    }

    fn submit_and_wait(&mut self) -> io::Result<()> {
        let mut failures = 0;
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(EINTR) => continue,
                // The completion queue is full: reap first.
                Err(e) if e.raw_os_error() == Some(EBUSY) => return Ok(()),
                Err(e) => {
                    failures += 1;
                    if failures == SUBMIT_ATTEMPTS {
                        return Err(e);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }

    /// Fails every job in flight. The kernel may still be using their blocks, so
    /// each is leaked (a shared one stays alive for good, its handle forgotten)
    /// and the caller gets a fresh owned one: 4 KiB a job, on a path that only
    /// a broken ring or a panic takes.
    fn abandon(&mut self, why: &io::Error) {
        for slot in self.slots.iter_mut() {
            let Some(f) = slot.take() else { continue };
            for mut job in f.jobs {
                let fresh = match job.transfer {
                    Transfer::Read(_) => Transfer::Read(Block::zeroed()),
                    Transfer::Write(_) => Transfer::Write(IoBuf::Owned(Block::zeroed())),
                };
                std::mem::forget(std::mem::replace(&mut job.transfer, fresh));
                let error =
                    io::Error::new(why.kind(), super::Abandoned(format!("io_uring: {why}")));
                finish(&self.counters, job, Err(error));
            }
        }
        self.in_flight = 0;
    }

    fn reap(&mut self) -> io::Result<()> {
        let finished: Vec<(usize, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (slot, res) in finished {
            let Some(f) = self.slots[slot].as_mut() else {
                continue;
            };
            let outcome = if res < 0 {
                match -res {
                    EINTR | EAGAIN => None,
                    errno => Some(Err(match f.fault.take() {
                        Some((injected, _)) => injected,
                        None => io::Error::from_raw_os_error(errno),
                    })),
                }
            } else if res == 0 {
                Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "block transfer past the end of the file",
                )))
            } else {
                f.done += res as usize;
                (f.done == f.jobs.len() * BLOCK_SIZE).then_some(Ok(()))
            };
            match outcome {
                None => self.push(slot)?,
                Some(result) => {
                    if let Some(f) = self.slots[slot].take() {
                        finish_all(&self.counters, f.jobs, result);
                    }
                    self.free.push(slot);
                    self.in_flight -= 1;
                }
            }
        }
        Ok(())
    }
}

impl InFlight {
    /// The entry for a lone job's remaining bytes: an injected fault cuts
    /// it short, then sends it to no file.
    fn single(&mut self) -> squeue::Entry {
        let job = &mut self.jobs[0];
        let (fd, end) = match &self.fault {
            Some((_, cut)) if self.done < *cut => (job.file.fd(), *cut),
            Some(_) => (NO_FILE, BLOCK_SIZE),
            None => (job.file.fd(), BLOCK_SIZE),
        };
        let fd = types::Fd(fd);
        let len = (end - self.done) as u32;
        let offset = job.offset + self.done as u64;
        match &mut job.transfer {
            Transfer::Read(block) => {
                let ptr = block.0[self.done..].as_mut_ptr();
                opcode::Read::new(fd, ptr, len).offset(offset).build()
            }
            Transfer::Write(block) => {
                let ptr = block.block().0[self.done..].as_ptr();
                opcode::Write::new(fd, ptr, len).offset(offset).build()
            }
        }
    }

    /// The entry for a run's remaining bytes: one vectored write from the
    /// first byte not yet written. Only writes join a run ([`follows`]).
    fn vectored(&mut self) -> squeue::Entry {
        let (skip, within) = (self.done / BLOCK_SIZE, self.done % BLOCK_SIZE);
        debug_assert!(self.jobs.iter().all(|job| job.transfer.op() == Op::Write));
        self.iovecs = self.jobs[skip..]
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let block = job.transfer.block();
                let from = if i == 0 { within } else { 0 };
                libc::iovec {
                    iov_base: block.0[from..].as_ptr() as *mut libc::c_void,
                    iov_len: BLOCK_SIZE - from,
                }
            })
            .collect();
        let first = &self.jobs[0];
        let fd = types::Fd(first.file.fd());
        opcode::Writev::new(fd, self.iovecs.as_ptr(), self.iovecs.len() as u32)
            .offset(first.offset + self.done as u64)
            .build()
    }
}

/// Whether `next` writes the block right after the one `last` writes, in
/// the same file, so both can go in one request.
fn follows(last: &Job, next: &Job) -> bool {
    last.transfer.op() == Op::Write
        && next.transfer.op() == Op::Write
        && continues(
            (Arc::as_ptr(&last.file), last.offset),
            (Arc::as_ptr(&next.file), next.offset),
        )
}

/// Finishes every job of a request with its one outcome: the first jobs
/// with copies of an error, the last with the error itself.
fn finish_all(counters: &IoCounters, mut jobs: Vec<Job>, result: io::Result<()>) {
    let Some(last) = jobs.pop() else { return };
    for job in jobs {
        let copy = match &result {
            Ok(()) => Ok(()),
            Err(e) => Err(match e.raw_os_error() {
                Some(errno) => io::Error::from_raw_os_error(errno),
                None => io::Error::new(e.kind(), e.to_string()),
            }),
        };
        finish(counters, job, copy);
    }
    finish(counters, last, result);
}

/// What the fault plan of `job`'s file injects into it: `Err` if the ring
/// dies at it, else the failure it meets, if any, and the bytes it moves
/// before (half a block for a torn write).
#[cfg(any(test, feature = "fault-injection"))]
fn injected(job: &Job) -> io::Result<Option<(io::Error, usize)>> {
    use super::faults::{self, WriteFault};
    let Some(plan) = &job.file.faults else {
        return Ok(None);
    };
    plan.before_ring_job()?;
    Ok(match &job.transfer {
        Transfer::Read(_) => plan.before_read().err().map(|e| (e, 0)),
        Transfer::Write(_) => match plan.before_write(job.file.raw(), job.offset) {
            Err(e) => Some((e, 0)),
            Ok(WriteFault::None) => None,
            Ok(WriteFault::Fail) => Some((faults::injected(), 0)),
            Ok(WriteFault::Torn) => Some((faults::injected(), BLOCK_SIZE / 2)),
        },
    })
}

#[cfg(not(any(test, feature = "fault-injection")))]
fn injected(_: &Job) -> io::Result<Option<(io::Error, usize)>> {
    Ok(None)
}

impl Drop for Ring {
    /// A panic on the ring thread must not free blocks the kernel still writes.
    fn drop(&mut self) {
        if self.in_flight > 0 {
            self.abandon(&io::Error::other("I/O engine stopped"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::DataFile;

    use crate::io::tests::Held;

    /// A ring dropped with work in flight (a panic on its thread) fails each job,
    /// handing back a fresh block instead of one the kernel may still own;
    /// a shared block being written is kept alive for good.
    #[test]
    fn a_ring_dropped_mid_flight_fails_its_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(DataFile::open(&dir.path().join("f")).unwrap());
        file.write_block(&Block([7; BLOCK_SIZE]), 0).unwrap();
        let mut ring = Ring::new(IoUring::new(8).unwrap(), Arc::default());
        let (tx, rx) = crossbeam_channel::unbounded();
        let held = Arc::new(Held(Block::zeroed()));
        for tag in 0..3 {
            let transfer = match tag {
                2 => Transfer::Write(IoBuf::Shared(held.clone())),
                _ => Transfer::Read(Block::zeroed()),
            };
            let job = Job {
                file: file.clone(),
                offset: 0,
                transfer,
                tag,
                reply: tx.clone(),
            };
            ring.start_batch(vec![job]).unwrap();
        }
        drop(ring);
        drop(tx);
        let done: Vec<_> = rx.iter().collect();
        assert_eq!(done.len(), 3);
        for d in done {
            assert!(d.result.is_err());
            match d.transfer {
                Transfer::Read(block) => assert!(block.0.iter().all(|&b| b == 0)),
                Transfer::Write(IoBuf::Owned(_)) => assert_eq!(d.tag, 2),
                Transfer::Write(IoBuf::Shared(_)) => panic!("the shared block came back"),
            }
        }
        assert_eq!(Arc::strong_count(&held), 2, "the kernel's handle was kept");
    }
}
