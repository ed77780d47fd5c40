//! A cursor over bytes: the one way the crate's decoders (undo records,
//! catalog notes, proofs and chunks) take fields off an encoded buffer.
//! Every read is bounds-checked; `None` means the buffer ran out.

/// Reads fields off the front of a byte slice.
pub(crate) struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor(bytes)
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    /// The next `N` bytes, copied.
    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// A little-endian u16.
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian u64 (the verification side, without `std`, reads none).
    #[cfg_attr(not(feature = "std"), allow(dead_code))]
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.0.len()
    }
}
