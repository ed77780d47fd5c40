//! The framing of the records commits append to a log file (the catalog log,
//! the history): a header with the log's magic, a checksum, the commit's
//! seqno and the payload's length, then the payload, zero-padded to whole
//! blocks. A record that does not check ends its log: what follows it is a
//! torn or undurable tail.

use std::hash::Hasher;

use crate::block::{Block, BlockBuf, BLOCK_SIZE};

/// A record's header: magic, checksum (of seqno, length and payload), seqno,
/// payload length.
pub(super) const HEADER: usize = 32;

/// The payload `parts` make, one after another, as the record of commit
/// `seqno` in a log of `magic`, in blocks. Written straight into the blocks:
/// a commit's catalog record is megabytes, and every copy of it was on the
/// commit's critical path.
pub(super) fn frame(magic: &[u8; 8], seqno: u64, parts: &[&[u8]]) -> Vec<BlockBuf> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut header = [0u8; HEADER];
    header[0..8].copy_from_slice(magic);
    header[16..24].copy_from_slice(&seqno.to_le_bytes());
    header[24..32].copy_from_slice(&(len as u64).to_le_bytes());
    let mut sum = twox_hash::XxHash3_64::with_seed(0);
    sum.write(&header[16..]);
    for part in parts {
        sum.write(part);
    }
    header[8..16].copy_from_slice(&sum.finish().to_le_bytes());

    let mut blocks = Vec::with_capacity((HEADER + len).div_ceil(BLOCK_SIZE));
    let mut block = Block::for_read();
    block.0[..HEADER].copy_from_slice(&header);
    let mut at = HEADER;
    for part in parts {
        let mut rest = *part;
        while !rest.is_empty() {
            if at == BLOCK_SIZE {
                blocks.push(std::mem::replace(&mut block, Block::for_read()));
                at = 0;
            }
            let n = rest.len().min(BLOCK_SIZE - at);
            block.0[at..at + n].copy_from_slice(&rest[..n]);
            at += n;
            rest = &rest[n..];
        }
    }
    block.0[at..].fill(0);
    blocks.push(block);
    blocks
}

/// A block holding `bytes` from its start, zeros after them.
fn padded(bytes: &[u8]) -> BlockBuf {
    let mut b = Block::for_read();
    b.0[..bytes.len()].copy_from_slice(bytes);
    b.0[bytes.len()..].fill(0);
    b
}

/// The record of a log of `magic` at byte `at` of `log`: its seqno, its
/// payload and where the next record begins; `None` if none checks there.
pub(super) fn parse<'a>(
    magic: &[u8; 8],
    log: &'a [u8],
    at: usize,
) -> Option<(u64, &'a [u8], usize)> {
    let head = Head::parse(magic, log.get(at..)?)?;
    let start = at + HEADER;
    let payload = log.get(start..start.checked_add(usize::try_from(head.len).ok()?)?)?;
    let mut check = head.check();
    check.add(payload);
    if !check.holds() {
        return None;
    }
    let next = (start + payload.len()).div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
    Some((head.seqno, payload, next))
}

/// A record's header, before its payload is read.
pub(super) struct Head {
    pub(super) seqno: u64,
    /// Payload bytes.
    pub(super) len: u64,
    sum: u64,
}

impl Head {
    /// The header `bytes` start with, if it is one of a log of `magic`.
    pub(super) fn parse(magic: &[u8; 8], bytes: &[u8]) -> Option<Head> {
        let header = bytes.get(..HEADER)?;
        let u64_at = |at: usize| header[at..at + 8].try_into().ok().map(u64::from_le_bytes);
        (&header[0..8] == magic).then_some(())?;
        Some(Head {
            sum: u64_at(8)?,
            seqno: u64_at(16)?,
            len: u64_at(24)?,
        })
    }

    /// The check of this record's payload, to be fed it in order.
    pub(super) fn check(&self) -> Check {
        let mut sum = twox_hash::XxHash3_64::with_seed(0);
        sum.write(&self.seqno.to_le_bytes());
        sum.write(&self.len.to_le_bytes());
        Check {
            sum,
            expected: self.sum,
        }
    }
}

/// A record's checksum taken over its payload a piece at a time, so a
/// reader need not hold the payload whole.
pub(super) struct Check {
    sum: twox_hash::XxHash3_64,
    expected: u64,
}

impl Check {
    /// Adds the next bytes of the payload.
    pub(super) fn add(&mut self, bytes: &[u8]) {
        self.sum.write(bytes);
    }

    /// Whether the payload added checks.
    pub(super) fn holds(&self) -> bool {
        self.sum.finish() == self.expected
    }
}

/// `bytes` in zero-padded blocks.
pub(super) fn to_blocks(bytes: &[u8]) -> Vec<BlockBuf> {
    bytes.chunks(BLOCK_SIZE).map(padded).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_record_ends_the_log() {
        let blocks = frame(b"testtest", 3, &[&[7; 5000]]);
        let log: Vec<u8> = blocks.iter().flat_map(|b| b.0).collect();
        assert_eq!(
            parse(b"testtest", &log, 0),
            Some((3, &[7u8; 5000][..], 8192))
        );
        assert!(parse(b"othermag", &log, 0).is_none());
        for at in [0, 9, 17, 25, 40, 4100] {
            let mut bad = log.clone();
            bad[at] ^= 1;
            assert!(parse(b"testtest", &bad, 0).is_none(), "byte {at}");
        }
        assert!(parse(b"testtest", &log[..5000], 0).is_none());
        // Payloads ending on, just before and just after a block boundary.
        for len in [
            0,
            1,
            BLOCK_SIZE - HEADER - 1,
            BLOCK_SIZE - HEADER,
            BLOCK_SIZE - HEADER + 1,
        ] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8 | 1).collect();
            let blocks = frame(b"testtest", 4, &[&payload]);
            assert_eq!(blocks.len(), (HEADER + len).div_ceil(BLOCK_SIZE).max(1));
            // The same payload in parts, cut anywhere, frames the same.
            for cut in [0, len / 3, len] {
                let (a, b) = payload.split_at(cut);
                let parts = frame(b"testtest", 4, &[a, &[], b]);
                assert!(parts.iter().map(|b| b.0).eq(blocks.iter().map(|b| b.0)));
            }
            let log: Vec<u8> = blocks.iter().flat_map(|b| b.0).collect();
            let next = blocks.len() * BLOCK_SIZE;
            assert_eq!(
                parse(b"testtest", &log, 0),
                Some((4, &payload[..], next)),
                "{len}"
            );
            assert!(log[HEADER + len..].iter().all(|&x| x == 0), "{len}");
        }
    }
}
