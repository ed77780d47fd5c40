//! Reads a thread waits for alone (a session's read of one value), through
//! an io_uring ring the thread owns, polled rather than slept on.
//!
//! A thread that sleeps through its read is woken by the completion, and on
//! a virtual machine whose idle CPUs halt that wake-up cost 13 to 15 us of a
//! 65 to 85 us read against psync (docs/architecture.md, "Lone reads"). Polling keeps the CPU awake: the
//! ring defers completions to its own thread and raises a flag in shared
//! memory when one is waiting, so the poll is a load, not a system call. It
//! gives up after [`POLL_FOR`] and sleeps, so a slow device costs little CPU.
//!
//! The ring reads into a block of its own, copied out once the read is done:
//! if the ring fails with a read in the kernel's hands, the ring and that
//! block are leaked, and no memory the kernel may still write is ever freed.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use io_uring::{opcode, types, IoUring};
use libc::{EAGAIN, EBUSY, EINTR};

use crate::block::{Block, BlockBuf, BLOCK_SIZE};

/// How long a read is polled before its thread sleeps: well past a read's
/// usual latency, so only a slow device or a queue of writes ahead of it
/// makes the thread sleep.
const POLL_FOR: Duration = Duration::from_millis(1);
/// Passing failures of the ring (interrupted, busy) after which it is given up.
const RETRIES: u32 = 100;

/// A thread's ring and the block it reads into.
struct Lone {
    ring: IoUring,
    block: BlockBuf,
}

/// What this thread has: not yet tried, a ring, or none to be had.
enum State {
    Untried,
    Ready(Box<Lone>),
    Unavailable,
}

thread_local! {
    static LONE: RefCell<State> = const { RefCell::new(State::Untried) };
}

// Reads this thread completed on its ring, for the tests.
#[cfg(test)]
thread_local! {
    static POLLED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Reads the calling thread completed on its ring so far.
#[cfg(test)]
pub(super) fn polled_reads() -> u64 {
    POLLED.with(|p| p.get())
}

/// Reads the block at `offset` of `fd` into `block` on this thread's ring;
/// the bytes read, or `None` where this thread has no ring (the kernel lacks
/// what it needs, or it failed before), and the caller reads another way.
pub(super) fn read(fd: RawFd, block: &mut Block, offset: u64) -> Option<io::Result<usize>> {
    // While the thread's locals are torn down, no ring: pread.
    LONE.try_with(|cell| {
        let mut state = cell.borrow_mut();
        if let State::Untried = *state {
            *state = new_ring().map_or(State::Unavailable, |lone| State::Ready(Box::new(lone)));
        }
        let State::Ready(lone) = &mut *state else {
            return None;
        };
        match lone.read(fd, offset) {
            Ok(res) => {
                let n = res.as_ref().map_or(0, |&n| n.min(BLOCK_SIZE));
                block.0[..n].copy_from_slice(&lone.block.0[..n]);
                #[cfg(test)]
                POLLED.with(|p| p.set(p.get() + 1));
                Some(res)
            }
            Err(Broken) => {
                // The read may still be in flight into the ring's block.
                if let State::Ready(lone) = std::mem::replace(&mut *state, State::Unavailable) {
                    std::mem::forget(lone);
                }
                None
            }
        }
    })
    .ok()
    .flatten()
}

/// The ring a read was in flight on failed: it may still land.
struct Broken;

/// A ring of two entries that only this thread submits to, whose
/// completions wait for it and raise the task-run flag; `None` where the
/// kernel lacks any of that.
fn new_ring() -> Option<Lone> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .build(2)
        .ok()?;
    Some(Lone {
        ring,
        block: Block::zeroed(),
    })
}

impl Lone {
    /// The read's result: bytes read or the kernel's error.
    fn read(&mut self, fd: RawFd, offset: u64) -> Result<io::Result<usize>, Broken> {
        let entry = opcode::Read::new(types::Fd(fd), self.block.0.as_mut_ptr(), BLOCK_SIZE as u32)
            .offset(offset)
            .build();
        // SAFETY: the buffer is this ring's own block, which lives as long as
        // the ring and is leaked with it if the read's end is not seen
        // (`Broken`); the caller's borrow of the file keeps `fd` open until
        // the completion is reaped here.
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            // Empty before each read unless an entry got stuck in it.
            return Err(Broken);
        }
        let started = Instant::now();
        let mut submitted = false;
        let mut failures = 0;
        loop {
            if let Some(done) = self.ring.completion().next() {
                let res = done.result();
                return Ok(match usize::try_from(res) {
                    Ok(n) => Ok(n),
                    Err(_) => Err(io::Error::from_raw_os_error(-res)),
                });
            }
            let sleep = started.elapsed() >= POLL_FOR;
            if submitted && !sleep && !self.ring.submission().taskrun() {
                std::hint::spin_loop();
                continue;
            }
            match self.ring.submit_and_wait(usize::from(sleep)) {
                Ok(_) => submitted = true,
                Err(e) if matches!(e.raw_os_error(), Some(EINTR | EAGAIN | EBUSY)) => {
                    failures += 1;
                    if failures == RETRIES {
                        return Err(Broken);
                    }
                }
                // Even unsubmitted, the entry stays queued: the ring is spent.
                Err(_) => return Err(Broken),
            }
        }
    }
}
