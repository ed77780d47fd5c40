//! A bucket: one 4 KiB block of entries sorted by key (layout in docs/format.md).

use crate::block::{Block, BLOCK_SIZE};
use crate::trie::{hash_value, KeyPath, ValueHash};
use crate::Error;

const MAGIC: &[u8; 4] = b"ptbk";
const VERSION: u16 = 1;
const HEADER: usize = 16;
const CHECKSUM: usize = BLOCK_SIZE - 8;
/// Bytes of entries a bucket holds.
pub(super) const PAYLOAD: usize = CHECKSUM - HEADER;
/// The largest value stored in its bucket; longer ones go to the overflow file.
pub(crate) const INLINE_MAX: usize = 254;
const OVERFLOW_TAG: u8 = 255;

/// Where an entry's value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    Inline(Vec<u8>),
    /// `len` bytes in the overflow file from block `start`, hashing to `hash`.
    Overflow {
        len: u32,
        hash: ValueHash,
        start: u64,
    },
}

impl Stored {
    pub(crate) fn value_hash(&self) -> ValueHash {
        match self {
            Stored::Inline(v) => hash_value(v),
            Stored::Overflow { hash, .. } => *hash,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Stored::Inline(v) => 1 + v.len(),
            Stored::Overflow { .. } => 1 + 4 + 32 + 8,
        }
    }
}

/// One key and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: KeyPath,
    pub(crate) stored: Stored,
}

impl Entry {
    pub(super) fn encoded_len(&self) -> usize {
        32 + self.stored.encoded_len()
    }
}

/// Bytes `entries` take in a bucket.
pub(super) fn payload_len(entries: &[Entry]) -> usize {
    entries.iter().map(Entry::encoded_len).sum()
}

/// Encodes `entries` (sorted, fitting [`PAYLOAD`]) as commit `seqno`'s bucket.
pub(super) fn encode(entries: &[Entry], seqno: u64) -> Box<Block> {
    debug_assert!(payload_len(entries) <= PAYLOAD);
    let mut b = Block::zeroed();
    b.0[0..4].copy_from_slice(MAGIC);
    b.0[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b.0[6..8].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    b.put_u64(8, seqno);
    let mut at = HEADER;
    for e in entries {
        b.0[at..at + 32].copy_from_slice(&e.key);
        at += 32;
        match &e.stored {
            Stored::Inline(v) => {
                b.0[at] = v.len() as u8;
                b.0[at + 1..at + 1 + v.len()].copy_from_slice(v);
                at += 1 + v.len();
            }
            Stored::Overflow { len, hash, start } => {
                b.0[at] = OVERFLOW_TAG;
                b.0[at + 1..at + 5].copy_from_slice(&len.to_le_bytes());
                b.0[at + 5..at + 37].copy_from_slice(hash);
                b.put_u64(at + 37, *start);
                at += 45;
            }
        }
    }
    let sum = b.checksum(CHECKSUM);
    b.put_u64(CHECKSUM, sum);
    b
}

/// Whether a block is a bucket (checksum and magic), without decoding it.
pub(super) fn is_bucket(b: &Block) -> bool {
    &b.0[0..4] == MAGIC && b.u64_at(CHECKSUM) == b.checksum(CHECKSUM)
}

/// Decodes a bucket; anything malformed is [`Error::Corrupt`].
pub(super) fn decode(b: &Block) -> Result<Vec<Entry>, Error> {
    if !is_bucket(b) {
        return Err(Error::Corrupt("bucket checksum or magic"));
    }
    if b.0[4..6] != VERSION.to_le_bytes() {
        return Err(Error::Corrupt("unknown bucket format version"));
    }
    let count = u16::from_le_bytes(b.array(6)) as usize;
    let mut entries = Vec::with_capacity(count);
    let mut at = HEADER;
    let bad = || Error::Corrupt("bucket entry out of bounds");
    for _ in 0..count {
        if at + 33 > CHECKSUM {
            return Err(bad());
        }
        let key: KeyPath = b.array(at);
        let tag = b.0[at + 32];
        at += 33;
        let stored = if tag == OVERFLOW_TAG {
            if at + 44 > CHECKSUM {
                return Err(bad());
            }
            let s = Stored::Overflow {
                len: u32::from_le_bytes(b.array(at)),
                hash: b.array(at + 4),
                start: b.u64_at(at + 36),
            };
            at += 44;
            s
        } else {
            let len = tag as usize;
            if at + len > CHECKSUM {
                return Err(bad());
            }
            at += len;
            Stored::Inline(b.0[at - len..at].to_vec())
        };
        if entries.last().is_some_and(|e: &Entry| e.key >= key) {
            return Err(Error::Corrupt("bucket entries out of order"));
        }
        entries.push(Entry { key, stored });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let entries = vec![
            Entry {
                key: [1; 32],
                stored: Stored::Inline(vec![]),
            },
            Entry {
                key: [2; 32],
                stored: Stored::Inline(vec![7; INLINE_MAX]),
            },
            Entry {
                key: [3; 32],
                stored: Stored::Overflow {
                    len: 99_999,
                    hash: [9; 32],
                    start: 12,
                },
            },
        ];
        let b = encode(&entries, 5);
        assert_eq!(decode(&b).unwrap(), entries);
        for at in [0, 6, 20, 60, 400, 4090] {
            let mut bad = b.clone();
            bad.0[at] ^= 1;
            assert!(decode(&bad).is_err(), "byte {at}");
        }
    }
}
