//! The checksum the slot maps' and the catalog file's headers carry over
//! their bodies: xxh3 over the concatenated xxh3 of each whole block, taken a
//! block at a time, so a writer or a reader need not hold the body at once.

use std::hash::Hasher;

use twox_hash::XxHash3_64;

/// A chained checksum being taken.
pub(super) struct ChainedSum(XxHash3_64);

impl Default for ChainedSum {
    fn default() -> ChainedSum {
        ChainedSum(XxHash3_64::with_seed(0))
    }
}

impl ChainedSum {
    /// Adds the next block.
    pub(super) fn add(&mut self, block: &[u8]) {
        self.0.write(&XxHash3_64::oneshot(block).to_le_bytes());
    }

    /// The checksum of the blocks added.
    pub(super) fn finish(&self) -> u64 {
        self.0.finish()
    }

    /// The checksum of `blocks`.
    pub(super) fn of<'a>(blocks: impl IntoIterator<Item = &'a [u8]>) -> u64 {
        let mut sum = ChainedSum::default();
        for block in blocks {
            sum.add(block);
        }
        sum.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streaming gives what the format defines: xxh3 of the sums, concatenated.
    #[test]
    fn a_block_at_a_time_is_the_sum_of_the_sums() {
        let blocks: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 4096]).collect();
        let sums: Vec<u8> = blocks
            .iter()
            .flat_map(|b| XxHash3_64::oneshot(b).to_le_bytes())
            .collect();
        let expected = XxHash3_64::oneshot(&sums);
        assert_eq!(ChainedSum::of(blocks.iter().map(|b| &b[..])), expected);
        assert_eq!(ChainedSum::of(std::iter::empty()), XxHash3_64::oneshot(&[]));
    }
}
