//! The meta record: which commit is durable, and which slot map belongs to it.
//! Two slots in the `meta` file alternate by sequence number, so a torn write of
//! one leaves the other intact (layout in docs/format.md).

use super::TARGETS;
use crate::block::{Block, BlockBuf};
use crate::trie::Node;
use crate::Error;

const MAGIC: &[u8; 8] = b"pagetrie";
/// The format this build reads and writes: 3 is copy-on-write with slot maps.
pub(crate) const VERSION: u32 = 3;
const CHECKSUM: usize = 4088;

/// The durable state of the database as one commit left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Meta {
    /// Commits so far; 0 is the empty database.
    pub(crate) seqno: u64,
    pub(crate) root: Node,
    /// Blocks of this commit's slot map file (0: the empty database has none).
    pub(crate) map_blocks: u64,
    /// The checksum of the map's header, which holds a checksum of the rest:
    /// ties this record to exactly one map.
    pub(crate) map_sum: u64,
    /// Length in blocks of each target file after this commit.
    pub(crate) lengths: [u64; TARGETS],
    /// The same before it: what the commit before built on.
    pub(crate) prev_lengths: [u64; TARGETS],
}

impl Meta {
    /// The slot this record is written to.
    pub(crate) fn slot(&self) -> u64 {
        self.seqno % 2
    }

    pub(crate) fn encode(&self) -> BlockBuf {
        let mut b = Block::zeroed();
        b.0[0..8].copy_from_slice(MAGIC);
        b.0[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b.put_u64(16, self.seqno);
        b.0[24..56].copy_from_slice(&self.root);
        b.put_u64(56, self.map_blocks);
        b.put_u64(64, self.map_sum);
        for (i, len) in self.lengths.iter().chain(&self.prev_lengths).enumerate() {
            b.put_u64(72 + 8 * i, *len);
        }
        let sum = b.checksum(CHECKSUM);
        b.put_u64(CHECKSUM, sum);
        b
    }

    /// `Ok(None)` for a slot never written (all zero); an error for anything else
    /// that is not a valid record.
    pub(crate) fn decode(b: &Block) -> Result<Option<Meta>, Error> {
        if b.0.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if &b.0[0..8] != MAGIC {
            return Err(Error::corrupt("meta record magic"));
        }
        if b.u64_at(CHECKSUM) != b.checksum(CHECKSUM) {
            return Err(Error::corrupt("meta record checksum"));
        }
        let version = u32::from_le_bytes(b.array(8));
        if version != VERSION {
            return Err(Error::UnsupportedFormat {
                found: version,
                supported: VERSION,
            });
        }
        let mut lengths = [0u64; TARGETS];
        let mut prev_lengths = [0u64; TARGETS];
        for (i, len) in lengths.iter_mut().chain(&mut prev_lengths).enumerate() {
            *len = b.u64_at(72 + 8 * i);
        }
        Ok(Some(Meta {
            seqno: b.u64_at(16),
            root: b.array(24),
            map_blocks: b.u64_at(56),
            map_sum: b.u64_at(64),
            lengths,
            prev_lengths,
        }))
    }

    /// The newer of the valid records in the two slots (`None` where a slot is
    /// unwritten or torn). Valid records always come from consecutive commits.
    pub(crate) fn newest(slots: [Option<Meta>; 2]) -> Result<Option<Meta>, Error> {
        for (i, m) in slots.iter().enumerate() {
            if m.is_some_and(|m| m.slot() != i as u64) {
                return Err(Error::corrupt("meta record in the wrong slot"));
            }
        }
        match slots {
            [Some(a), Some(b)] if a.seqno.abs_diff(b.seqno) != 1 => {
                Err(Error::corrupt("meta records of non-consecutive commits"))
            }
            [a, b] => Ok(a.into_iter().chain(b).max_by_key(|m| m.seqno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_checks() {
        let m = Meta {
            seqno: 7,
            root: [3; 32],
            map_blocks: 4,
            map_sum: 99,
            lengths: [1, 2, 3],
            prev_lengths: [1, 1, 2],
        };
        let b = m.encode();
        assert_eq!(Meta::decode(&b).unwrap(), Some(m));
        assert_eq!(Meta::decode(&Block::zeroed()).unwrap(), None);
        for byte in [0, 9, 16, 30, 60, 80, 100, 4090] {
            let mut bad = b.clone();
            bad.0[byte] ^= 0x10;
            assert!(Meta::decode(&bad).is_err(), "byte {byte}");
        }
    }

    #[test]
    fn a_record_of_another_format_is_refused_by_name() {
        let mut b = Meta::default().encode();
        b.0[8..12].copy_from_slice(&2u32.to_le_bytes());
        let sum = b.checksum(CHECKSUM);
        b.put_u64(CHECKSUM, sum);
        assert!(matches!(
            Meta::decode(&b),
            Err(Error::UnsupportedFormat {
                found: 2,
                supported: VERSION
            })
        ));
    }

    #[test]
    fn the_newer_valid_slot_wins() {
        let at = |seqno| Meta {
            seqno,
            ..Meta::default()
        };
        assert_eq!(
            Meta::newest([Some(at(4)), Some(at(5))]).unwrap(),
            Some(at(5))
        );
        assert_eq!(Meta::newest([Some(at(4)), None]).unwrap(), Some(at(4)));
        assert_eq!(Meta::newest([None, Some(at(1))]).unwrap(), Some(at(1)));
        assert_eq!(Meta::newest([None, None]).unwrap(), None);
        assert!(Meta::newest([Some(at(3)), None]).is_err());
        assert!(Meta::newest([Some(at(4)), Some(at(7))]).is_err());
    }
}
