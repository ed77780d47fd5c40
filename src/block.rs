//! The 4 KiB block: the unit of every disk read and write, aligned for O_DIRECT.
//! Shared by the page format above and the I/O layer below, so neither depends on
//! the other.

use alloc::boxed::Box;

/// Bytes in a block.
pub(crate) const BLOCK_SIZE: usize = 4096;

/// One block of bytes, 4096-aligned in memory.
#[repr(C, align(4096))]
#[derive(Clone)]
pub(crate) struct Block(pub(crate) [u8; BLOCK_SIZE]);

/// Spare blocks kept per thread: a fresh 4096-aligned allocation per read cost
/// about as much as the read itself at queue depth 1 (glibc's aligned malloc).
#[cfg(feature = "std")]
const SPARES_PER_THREAD: usize = 64;

#[cfg(feature = "std")]
std::thread_local! {
    static SPARES: core::cell::RefCell<alloc::vec::Vec<Box<Block>>> =
        const { core::cell::RefCell::new(alloc::vec::Vec::new()) };
}

impl Block {
    /// A zeroed block on the heap.
    pub(crate) fn zeroed() -> Box<Block> {
        Box::new(Block([0; BLOCK_SIZE]))
    }

    /// A block to read into: a spare of this thread's with stale contents, or a
    /// new one. Every read overwrites the whole block or fails.
    #[cfg(feature = "std")]
    pub(crate) fn for_read() -> Box<Block> {
        SPARES
            .with(|s| s.borrow_mut().pop())
            .unwrap_or_else(Block::zeroed)
    }

    /// Keeps `block` as a spare for this thread's next [`Block::for_read`].
    #[cfg(feature = "std")]
    pub(crate) fn recycle(block: Box<Block>) {
        SPARES.with(|s| {
            let mut spares = s.borrow_mut();
            if spares.len() < SPARES_PER_THREAD {
                spares.push(block);
            }
        })
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
