//! Reads of blocks by slot, for the stores above: one at a time, many at
//! once, or started for a prefetcher ([`Fetches`]) and answered on its
//! channel.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::{Store, Target};
use crate::block::{Block, BlockBuf, BLOCK_SIZE};
use crate::io::{Done, Job, Op};
use crate::Error;

/// Block reads started for a prefetcher, answered on one channel, each with
/// what the store that started it wants done with the block (`W`, the
/// store's own token: where it read and as of which generation). Each block
/// is read once at a time. The prefetcher hands keys to the stores and tokens
/// back to them; it never sees a slot.
pub(crate) struct Fetches<W> {
    reply: Sender<Done>,
    arrivals: Receiver<Done>,
    next_tag: u64,
    in_flight: HashMap<u64, ((Target, u32), W)>,
    reading: HashSet<(Target, u32)>,
}

impl<W> Fetches<W> {
    pub(crate) fn new() -> Fetches<W> {
        let (reply, arrivals) = unbounded();
        Fetches {
            reply,
            arrivals,
            next_tag: 0,
            in_flight: HashMap::new(),
            reading: HashSet::new(),
        }
    }

    /// Where finished reads arrive, for [`Fetches::finish`].
    pub(crate) fn arrivals(&self) -> &Receiver<Done> {
        &self.arrivals
    }

    /// Reads in flight.
    pub(crate) fn len(&self) -> usize {
        self.in_flight.len()
    }

    /// Starts reading `slot` of `target` for `wanted`, unless that block is
    /// being read already.
    pub(crate) fn start(&mut self, store: &Store, target: Target, slot: u32, wanted: W) {
        if !self.reading.insert((target, slot)) {
            return;
        }
        let tag = self.next_tag;
        self.next_tag += 1;
        self.in_flight.insert(tag, ((target, slot), wanted));
        store.io.submit(Job {
            file: store.file(target).clone(),
            op: Op::Read,
            offset: slot as u64 * BLOCK_SIZE as u64,
            block: Block::for_read(),
            tag,
            reply: self.reply.clone(),
        });
    }

    /// The token of the read `done` answered, with its block; no block if
    /// the read failed (the reader that needs the block reads it again and
    /// sees the error).
    pub(crate) fn finish(&mut self, done: Done) -> Option<(W, Option<BlockBuf>)> {
        let (place, wanted) = self.in_flight.remove(&done.tag)?;
        self.reading.remove(&place);
        Some((wanted, done.result.ok().map(|_| done.block)))
    }
}

/// Prefetch reads in flight by slot, so that a reader wanting the same block
/// waits for it to land rather than reading it a second time: a second read
/// joins the device's queue behind the prefetches, so it costs more than the
/// wait, and it doubles the device's work.
#[derive(Default)]
pub(crate) struct Landings {
    in_flight: Mutex<HashSet<u32>>,
    /// Signalled whenever a prefetch lands; its few waiters look again.
    landed: Condvar,
}

/// How long a reader waits for a prefetch before reading the block itself:
/// the prefetch may wait behind many others, or its reader may have gone.
#[cfg(not(test))]
const LANDING_WAIT: Duration = Duration::from_millis(10);
/// Longer in tests, whose threads a loaded machine may hold back that long.
#[cfg(test)]
const LANDING_WAIT: Duration = Duration::from_millis(300);

impl Landings {
    /// A prefetch of `slot` starts (or is on its way already).
    pub(crate) fn expect(&self, slot: u32) {
        self.in_flight.lock().insert(slot);
    }

    /// The prefetch of `slot` ended (its block cached or not).
    pub(crate) fn land(&self, slot: u32) {
        if self.in_flight.lock().remove(&slot) {
            self.landed.notify_all();
        }
    }

    /// Waits for the prefetch of `slot` in flight, if there is one; whether
    /// one landed meanwhile.
    pub(crate) fn wait(&self, slot: u32) -> bool {
        let deadline = Instant::now() + LANDING_WAIT;
        let mut in_flight = self.in_flight.lock();
        if !in_flight.contains(&slot) {
            return false;
        }
        while in_flight.contains(&slot) {
            if self.landed.wait_until(&mut in_flight, deadline).timed_out() {
                return !in_flight.contains(&slot);
            }
        }
        true
    }
}

/// Blocks read per batch when a store reads many slots in order.
const SCAN_BATCH: usize = 1024;

impl Store {
    /// Reads the blocks of `slots` of `target` a batch at a time and hands
    /// each to `each` with its position in `slots`, in order.
    pub(crate) fn for_each_block(
        &self,
        target: Target,
        slots: &[u64],
        mut each: impl FnMut(usize, BlockBuf) -> Result<(), Error>,
    ) -> Result<(), Error> {
        for (batch, chunk) in slots.chunks(SCAN_BATCH).enumerate() {
            let blocks = self.read_blocks(target, chunk.iter().copied())?;
            for (i, block) in blocks.into_iter().enumerate() {
                each(batch * SCAN_BATCH + i, block)?;
            }
        }
        Ok(())
    }

    /// Whether the data files bypass the OS page cache.
    pub(crate) fn is_direct(&self) -> bool {
        self.file(Target::Pages).is_direct()
    }

    /// Reads block `index` of `target` and waits for it.
    pub(crate) fn read(&self, target: Target, index: u64) -> Result<BlockBuf, Error> {
        self.check_usable()?;
        self.io.read(self.file(target), index * BLOCK_SIZE as u64)
    }

    /// Reads blocks `indices` of `target` concurrently, returned in the same order.
    pub(crate) fn read_blocks(
        &self,
        target: Target,
        indices: impl IntoIterator<Item = u64>,
    ) -> Result<Vec<BlockBuf>, Error> {
        self.check_usable()?;
        let file = self.file(target);
        self.io.run_all(indices.into_iter().map(|i| {
            (
                file.clone(),
                Op::Read,
                i * BLOCK_SIZE as u64,
                Block::for_read(),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_reader_waits_for_a_prefetch_in_flight_and_only_for_one() {
        let landings = Arc::new(Landings::default());
        assert!(!landings.wait(7), "nothing in flight: no wait");

        landings.expect(7);
        landings.expect(7); // a second hint for the block keeps the first landing
        let lander = {
            let landings = Arc::clone(&landings);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                landings.land(7);
            })
        };
        assert!(landings.wait(7), "the prefetch landed while waiting");
        lander.join().unwrap();
        assert!(!landings.wait(7), "landed reads are forgotten");

        landings.expect(8);
        let started = Instant::now();
        assert!(!landings.wait(8), "a read that never lands is given up on");
        assert!(started.elapsed() >= LANDING_WAIT);
    }
}
