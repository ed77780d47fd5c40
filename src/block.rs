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

impl Block {
    /// A zeroed block on the heap.
    pub(crate) fn zeroed() -> Box<Block> {
        Box::new(Block([0; BLOCK_SIZE]))
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
