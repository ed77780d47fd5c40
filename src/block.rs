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
/// and takes them back on drop; it never shrinks, so RSS is the peak of blocks
/// alive at once.
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

pub(crate) use pool::release_free;

mod pool {
    use std::alloc::{handle_alloc_error, Layout};
    use std::ptr::NonNull;

    use parking_lot::Mutex;

    use super::{Block, BlockBuf, BLOCK_SIZE};

    /// Blocks per slab: 2 MiB, large enough for the allocator to map it directly.
    const SLAB_BLOCKS: usize = 512;

    struct Free(Vec<NonNull<Block>>);

    // SAFETY: the free list holds blocks no BlockBuf owns.
    unsafe impl Send for Free {}

    static FREE: Mutex<Free> = parking_lot::const_mutex(Free(Vec::new()));

    pub(super) fn take() -> BlockBuf {
        let mut free = FREE.lock();
        if let Some(block) = free.0.pop() {
            return BlockBuf(block);
        }
        let first = slab();
        free.0.extend((1..SLAB_BLOCKS).map(|i| {
            // SAFETY: `i` is within the slab, so the pointer stays in its allocation.
            unsafe { first.add(i) }
        }));
        BlockBuf(first)
    }

    pub(super) fn give_back(block: NonNull<Block>) {
        FREE.lock().0.push(block);
    }

    /// Hands the memory of every free block back to the kernel; the blocks
    /// stay in the pool and fault in as zero pages when next used. Free blocks
    /// that lie next to each other go in one call.
    pub(crate) fn release_free() {
        let free = FREE.lock();
        let mut starts: Vec<usize> = free.0.iter().map(|b| b.as_ptr() as usize).collect();
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
            // SAFETY: [start, end) is whole free blocks of the pool's slabs,
            // which are private anonymous mappings; no BlockBuf owns them
            // while FREE is locked (blocks leave the list only under it), and
            // MADV_DONTNEED there only swaps their contents for zero pages. A
            // failure leaves the memory resident, nothing worse.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }

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
}
