//! The 4 KiB block: the unit of every disk read and write, aligned for O_DIRECT.
//! Shared by the page format above and the I/O layer below, so neither depends on
//! the other.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Arc;

/// Bytes in a block.
pub(crate) const BLOCK_SIZE: usize = 4096;

/// One block of bytes, 4096-aligned in memory.
#[repr(C, align(4096))]
#[derive(Clone)]
pub(crate) struct Block(pub(crate) [u8; BLOCK_SIZE]);

impl Block {
    /// A zeroed block from the pool.
    pub(crate) fn zeroed() -> BlockBuf {
        let mut block = pool::take();
        (*block).0.fill(0);
        block
    }

    /// A block to read into, with stale contents: every read overwrites the
    /// whole block or fails.
    pub(crate) fn for_read() -> BlockBuf {
        pool::take()
    }

    /// `N` bytes at `at`, copied out.
    pub(crate) fn array<const N: usize>(&self, at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.0[at..at + N]);
        out
    }

    /// The little-endian u64 at `at`.
    pub(crate) fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.array(at))
    }

    /// Writes `v` little-endian at `at`.
    pub(crate) fn put_u64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// xxh3-64 of the first `len` bytes: the checksum every on-disk block carries.
    #[cfg(feature = "std")]
    pub(crate) fn checksum(&self, len: usize) -> u64 {
        twox_hash::XxHash3_64::oneshot(&self.0[..len])
    }
}

/// An owned block, like `BlockBuf` without its cost: glibc serves a 4096-aligned
/// allocation of 4096 bytes from an 8 KiB chunk, so caches of boxed blocks took
/// twice their size. Blocks come from a pool that carves them out of 2 MiB slabs
/// and takes them back on drop; free blocks that sit unused for a while are
/// handed back to the kernel, so one burst (a huge value read once) does not
/// raise RSS for good.
pub(crate) struct BlockBuf(NonNull<Block>);

// SAFETY: a BlockBuf owns its block exclusively, as a Box does.
unsafe impl Send for BlockBuf {}
// SAFETY: through a shared BlockBuf the block is only read.
unsafe impl Sync for BlockBuf {}

impl Deref for BlockBuf {
    type Target = Block;

    fn deref(&self) -> &Block {
        // SAFETY: the pool hands out each initialized block to one owner at a time.
        unsafe { self.0.as_ref() }
    }
}

impl DerefMut for BlockBuf {
    fn deref_mut(&mut self) -> &mut Block {
        // SAFETY: as in deref; `&mut self` makes this the only access.
        unsafe { self.0.as_mut() }
    }
}

impl Clone for BlockBuf {
    fn clone(&self) -> BlockBuf {
        let mut copy = pool::take();
        (*copy).0.copy_from_slice(&(**self).0);
        copy
    }
}

impl Drop for BlockBuf {
    fn drop(&mut self) {
        pool::give_back(self.0);
    }
}

/// A block its owner shares with others (a page an overlay shows), which a
/// write takes from where it lies instead of from a copy.
///
/// # Safety
///
/// The kernel reads the block through a raw pointer while the write is in
/// flight: `block` must return the same block at the same address on every
/// call, and its bytes must not change while any holder of the value lives.
pub(crate) unsafe trait SharedBlock: Send + Sync {
    /// The block's bytes.
    fn block(&self) -> &Block;
}

/// The buffer of a block's write: owned, or shared (the job holds it until
/// the write is done). Reads fill a [`BlockBuf`] of their own, never an
/// `IoBuf` ([`crate::io::Transfer`]).
pub(crate) enum IoBuf {
    /// A block of the job's own.
    Owned(BlockBuf),
    /// A block others hold too, who only read it.
    Shared(Arc<dyn SharedBlock>),
}

impl IoBuf {
    /// The block's bytes.
    pub(crate) fn block(&self) -> &Block {
        match self {
            IoBuf::Owned(b) => b,
            IoBuf::Shared(s) => s.block(),
        }
    }
}

impl From<BlockBuf> for IoBuf {
    fn from(block: BlockBuf) -> IoBuf {
        IoBuf::Owned(block)
    }
}

pub(crate) use pool::{release_free, release_idle};

mod pool {
    use std::alloc::{handle_alloc_error, Layout};
    use std::ptr::NonNull;
    use std::time::{Duration, Instant};

    use parking_lot::Mutex;

    use super::{Block, BlockBuf, BLOCK_SIZE};

    /// Blocks per slab: 2 MiB, large enough for the allocator to map it directly.
    const SLAB_BLOCKS: usize = 512;
    /// Free blocks unused for a whole period are handed back to the kernel,
    /// past the [`KEEP`] nearest use. Longer than a block's cycle, so a
    /// commit's buffers stay resident from one block to the next.
    const IDLE: Duration = Duration::from_secs(10);
    /// Idle free blocks kept resident all the same (16 MiB).
    const KEEP: usize = 4096;
    /// Pool operations between looks at the clock.
    const TICK: u32 = 4096;

    /// The free blocks, a stack: the top is used first, so the bottom is
    /// what sat unused longest.
    pub(super) struct Pool {
        free: Vec<NonNull<Block>>,
        /// The bottom `released` free blocks have had their memory handed
        /// back; they fault in as zero pages when next used.
        released: usize,
        /// The fewest free blocks since `since`: those below sat unused.
        low: usize,
        since: Option<Instant>,
        ops: u32,
        /// Free blocks taken off the list to be handed back, by the caller
        /// once it has let go of the pool's lock ([`Pool::settle`]): a
        /// `madvise` of a burst's worth held every allocation up.
        pending: Option<Released>,
    }

    /// Free blocks off the list while their memory is handed back.
    pub(super) struct Released(Vec<NonNull<Block>>);

    // SAFETY: the free list holds blocks no BlockBuf owns.
    unsafe impl Send for Pool {}
    // SAFETY: as the free list: blocks no BlockBuf owns.
    unsafe impl Send for Released {}

    static POOL: Mutex<Pool> = parking_lot::const_mutex(Pool::new());

    pub(super) fn take() -> BlockBuf {
        let (block, pending) = {
            let mut pool = POOL.lock();
            (pool.take(Instant::now), pool.pending.take())
        };
        hand_back(pending);
        block
    }

    pub(super) fn give_back(block: NonNull<Block>) {
        let pending = {
            let mut pool = POOL.lock();
            pool.give(block, Instant::now);
            pool.pending.take()
        };
        hand_back(pending);
    }

    /// Hands back the memory of `released`, outside the lock, then returns
    /// the blocks to the pool.
    fn hand_back(released: Option<Released>) {
        if let Some(released) = released {
            released.madvise();
            POOL.lock().put_released(released);
        }
    }

    /// Ends the pool's period if it has lasted long enough, handing back the
    /// blocks that sat unused through it: for callers between bursts of
    /// work (a commit's end), so a quiet process releases them too.
    pub(crate) fn release_idle() {
        let pending = {
            let mut pool = POOL.lock();
            pool.look(Instant::now());
            pool.pending.take()
        };
        hand_back(pending);
    }

    /// Hands the memory of every free block back to the kernel; the blocks
    /// stay in the pool and fault in as zero pages when next used.
    pub(crate) fn release_free() {
        let pending = {
            let mut pool = POOL.lock();
            let all = pool.free.len();
            pool.release(all);
            pool.pending.take()
        };
        hand_back(pending);
    }

    impl Pool {
        pub(super) const fn new() -> Pool {
            Pool {
                free: Vec::new(),
                released: 0,
                low: 0,
                since: None,
                ops: 0,
                pending: None,
            }
        }

        pub(super) fn take(&mut self, now: impl FnOnce() -> Instant) -> BlockBuf {
            let block = match self.free.pop() {
                Some(block) => block,
                None => {
                    let first = slab();
                    self.free.extend((1..SLAB_BLOCKS).map(|i| {
                        // SAFETY: `i` is within the slab, so the pointer stays in its allocation.
                        unsafe { first.add(i) }
                    }));
                    first
                }
            };
            self.released = self.released.min(self.free.len());
            self.low = self.low.min(self.free.len());
            self.tick(now);
            BlockBuf(block)
        }

        pub(super) fn give(&mut self, block: NonNull<Block>, now: impl FnOnce() -> Instant) {
            self.free.push(block);
            self.tick(now);
        }

        /// Every [`TICK`] operations: once a period has passed, releases
        /// the free blocks that sat unused through it.
        fn tick(&mut self, now: impl FnOnce() -> Instant) {
            self.ops = self.ops.wrapping_add(1);
            if self.ops.is_multiple_of(TICK) {
                self.look(now());
            }
        }

        /// Ends the period if it has lasted [`IDLE`] at `now`.
        pub(super) fn look(&mut self, now: Instant) {
            match self.since {
                Some(since) if now.duration_since(since) < IDLE => return,
                Some(_) => self.release(self.low.saturating_sub(KEEP)),
                None => {}
            }
            self.since = Some(now);
            self.low = self.free.len();
        }

        /// Takes the bottom `n` free blocks not yet released off the list,
        /// for [`Pool::settle`] (or the global pool's caller) to hand back.
        fn release(&mut self, n: usize) {
            if n <= self.released || self.pending.is_some() {
                return;
            }
            let blocks: Vec<NonNull<Block>> = self.free.drain(self.released..n).collect();
            self.low = self.low.min(self.free.len());
            self.pending = Some(Released(blocks));
        }

        /// Returns blocks whose memory was handed back to the bottom of the
        /// list, among the released ones.
        pub(super) fn put_released(&mut self, released: Released) {
            let at = self.released.min(self.free.len());
            let n = released.0.len();
            self.free.splice(at..at, released.0);
            self.released = at + n;
        }

        /// Hands back what [`Pool::release`] took off, here: for a pool no
        /// other thread shares.
        #[cfg(test)]
        pub(super) fn settle(&mut self) {
            if let Some(released) = self.pending.take() {
                released.madvise();
                self.put_released(released);
            }
        }

        /// Free blocks whose memory is still resident.
        #[cfg(test)]
        pub(super) fn resident(&self) -> usize {
            self.free.len() - self.released
        }
    }

    impl Released {
        /// Hands the blocks' memory back to the kernel; blocks that lie next
        /// to each other go in one call.
        fn madvise(&self) {
            let mut starts: Vec<usize> = self.0.iter().map(|b| b.as_ptr() as usize).collect();
            starts.sort_unstable();
            let mut i = 0;
            while i < starts.len() {
                let start = starts[i];
                let mut end = start + BLOCK_SIZE;
                i += 1;
                while starts.get(i) == Some(&end) {
                    end += BLOCK_SIZE;
                    i += 1;
                }
                // SAFETY: [start, end) is whole blocks of the pool's slabs,
                // which are private anonymous mappings, that this value holds
                // off the free list: no BlockBuf owns them and no `take` can
                // hand them out until they are put back. MADV_DONTNEED there
                // only swaps their contents for zero pages; a failure leaves
                // the memory resident, nothing worse.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
                }
            }
        }
    }

    #[cfg(test)]
    pub(super) const TEST_IDLE: Duration = IDLE;
    #[cfg(test)]
    pub(super) const TEST_KEEP: usize = KEEP;

    /// A new zeroed slab, never freed: its blocks cycle through the free list.
    ///
    /// An anonymous mapping, not `alloc_zeroed`: at 4096-byte alignment the
    /// allocator zeroes the slab by hand after the kernel has already zeroed
    /// its pages, and that second pass over every new slab showed in profiles
    /// while the caches fill.
    fn slab() -> NonNull<Block> {
        let layout = Layout::new::<[Block; SLAB_BLOCKS]>();
        // SAFETY: a fresh private anonymous mapping aliases nothing; the
        // kernel returns it page-aligned (so block-aligned) and zero-filled,
        // or MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            handle_alloc_error(layout);
        }
        NonNull::new(ptr.cast::<Block>()).unwrap_or_else(|| handle_alloc_error(layout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_released_to_the_kernel_stay_usable() {
        let blocks: Vec<BlockBuf> = (0..600)
            .map(|i| {
                let mut b = Block::zeroed();
                (*b).0.fill(i as u8 | 1);
                b
            })
            .collect();
        drop(blocks);
        release_free();
        for _ in 0..600 {
            assert!((*Block::zeroed()).0.iter().all(|&x| x == 0));
            let mut b = Block::for_read();
            (*b).0.fill(7);
            assert!((*b).0.iter().all(|&x| x == 7));
        }
    }

    #[test]
    fn free_blocks_unused_for_a_period_are_released_and_stay_usable() {
        use std::time::Instant;
        let mut pool = pool::Pool::new();
        let start = Instant::now();
        let at = |secs: u64| start + pool::TEST_IDLE * secs as u32;
        // A burst: 20,000 blocks taken, written, given back.
        let burst: Vec<BlockBuf> = (0..20_000).map(|_| pool.take(|| at(0))).collect();
        pool.look(at(0));
        for mut b in burst {
            (*b).0.fill(3);
            let b = std::mem::ManuallyDrop::new(b);
            pool.give(b.0, || at(0));
        }
        let free = pool.resident();
        assert!(free >= 20_000);
        // Not a whole period yet: nothing is released.
        pool.look(at(0));
        pool.settle();
        assert_eq!(pool.resident(), free);
        // A period in which a few blocks cycle: all but the kept ones and
        // those in use are released.
        pool.look(at(1));
        pool.settle();
        let cycling: Vec<BlockBuf> = (0..100).map(|_| pool.take(|| at(1))).collect();
        for b in cycling {
            let b = std::mem::ManuallyDrop::new(b);
            pool.give(b.0, || at(1));
        }
        pool.look(at(2));
        pool.settle();
        assert!(
            pool.resident() <= pool::TEST_KEEP + 100,
            "{}",
            pool.resident()
        );
        // Released blocks are taken again like any other.
        let again: Vec<BlockBuf> = (0..20_000).map(|_| pool.take(|| at(2))).collect();
        for mut b in again {
            (*b).0[100] = 9;
            assert_eq!((*b).0[100], 9);
            let b = std::mem::ManuallyDrop::new(b);
            pool.give(b.0, || at(2));
        }
    }
}
