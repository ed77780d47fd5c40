//! The io_uring engine: one thread owns the ring, batches every queued job into it,
//! and sends each completion back to whoever asked.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, TryRecvError};
use io_uring::{opcode, squeue, types, IoUring, Probe};

use super::{count, IoCounters, Job, Op};
use crate::block::BLOCK_SIZE;

const EINTR: i32 = 4;
const EAGAIN: i32 = 11;
const EBUSY: i32 = 16;

/// Creates the ring here, so a failure reaches the caller, then runs it on a thread.
pub(super) fn start(
    depth: u32,
    jobs: Receiver<Job>,
    counters: Arc<IoCounters>,
) -> io::Result<JoinHandle<()>> {
    let ring = IoUring::new(depth)?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    if !probe.is_supported(opcode::Read::CODE) || !probe.is_supported(opcode::Write::CODE) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "kernel lacks IORING_OP_READ/WRITE",
        ));
    }
    std::thread::Builder::new()
        .name("pagetrie-uring".into())
        .spawn(move || Ring::new(ring, counters).run(jobs))
}

/// A job in the ring and how many of its bytes are done (short transfers resume).
struct InFlight {
    job: Job,
    done: usize,
}

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
        let capacity = self.ring.params().sq_entries() as usize;
        let mut open = true;
        loop {
            // Block for work only when nothing is in flight.
            if self.in_flight == 0 {
                match open.then(|| jobs.recv().ok()).flatten() {
                    Some(job) => self.start(job),
                    None => return,
                }
            }
            while open && self.in_flight < capacity {
                match jobs.try_recv() {
                    Ok(job) => self.start(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => open = false,
                }
            }
            self.submit_and_wait();
            self.reap();
        }
    }

    fn start(&mut self, job: Job) {
        count(&self.counters, job.op);
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(InFlight { job, done: 0 });
        self.in_flight += 1;
        self.push(slot);
    }

    /// Queues the rest of slot `slot`'s transfer.
    fn push(&mut self, slot: usize) {
        let Some(f) = self.slots[slot].as_mut() else {
            return;
        };
        let fd = types::Fd(f.job.file.fd());
        let len = (BLOCK_SIZE - f.done) as u32;
        let offset = f.job.offset + f.done as u64;
        let entry: squeue::Entry = match f.job.op {
            Op::Read => {
                let ptr = f.job.block.0[f.done..].as_mut_ptr();
                opcode::Read::new(fd, ptr, len).offset(offset).build()
            }
            Op::Write => {
                let ptr = f.job.block.0[f.done..].as_ptr();
                opcode::Write::new(fd, ptr, len).offset(offset).build()
            }
        }
        .user_data(slot as u64);
        loop {
            // SAFETY: the buffer is the job's boxed block, owned by `self.slots[slot]`
            // and neither touched nor freed until this entry's completion is reaped
            // (moving the Box within `slots` does not move the block); the job's
            // Arc<DataFile> keeps the descriptor open as long.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return;
            }
            // Submission queue full: hand it to the kernel and retry.
            let _ = self.ring.submit();
        }
    }

    fn submit_and_wait(&mut self) {
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => return,
                Err(e) if matches!(e.raw_os_error(), Some(EINTR) | Some(EAGAIN)) => continue,
                // The completion queue is full: reap first.
                Err(e) if e.raw_os_error() == Some(EBUSY) => return,
                Err(_) => {
                    // Nothing sensible to do but let the kernel recover; jobs in flight
                    // still own their buffers, so they cannot be failed and freed here.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    return;
                }
            }
        }
    }

    fn reap(&mut self) {
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
                    errno => Some(Err(io::Error::from_raw_os_error(errno))),
                }
            } else if res == 0 {
                Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "block transfer past the end of the file",
                )))
            } else {
                f.done += res as usize;
                (f.done == BLOCK_SIZE).then_some(Ok(()))
            };
            match outcome {
                None => self.push(slot),
                Some(result) => {
                    if let Some(f) = self.slots[slot].take() {
                        f.job.finish(result);
                    }
                    self.free.push(slot);
                    self.in_flight -= 1;
                }
            }
        }
    }
}
