//! The framing of the records commits append to a log file (the catalog log,
//! the history): a header with the log's magic, a checksum, the commit's
//! seqno and the payload's length, then the payload, zero-padded to whole
//! blocks. A record that does not check ends its log: what follows it is a
//! torn or undurable tail.

use crate::block::{Block, BlockBuf, BLOCK_SIZE};

/// A record's header: magic, checksum (of seqno, length and payload), seqno,
/// payload length.
pub(super) const HEADER: usize = 32;

/// `payload` as the record of commit `seqno` in a log of `magic`, in blocks.
pub(super) fn frame(magic: &[u8; 8], seqno: u64, payload: &[u8]) -> Vec<BlockBuf> {
    let mut bytes = Vec::with_capacity(HEADER + payload.len());
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&seqno.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(payload);
    let sum = twox_hash::XxHash3_64::oneshot(&bytes[16..]);
    bytes[8..16].copy_from_slice(&sum.to_le_bytes());
    to_blocks(&bytes)
}

/// The payload length a framed record's first block declares.
pub(super) fn payload_len(first: &Block) -> usize {
    let mut len = [0; 8];
    len.copy_from_slice(&first.0[24..32]);
    u64::from_le_bytes(len) as usize
}

/// The record of a log of `magic` at byte `at` of `log`: its seqno, its
/// payload and where the next record begins; `None` if none checks there.
pub(super) fn parse<'a>(
    magic: &[u8; 8],
    log: &'a [u8],
    at: usize,
) -> Option<(u64, &'a [u8], usize)> {
    let header = log.get(at..at.checked_add(HEADER)?)?;
    if &header[0..8] != magic {
        return None;
    }
    let seqno = u64::from_le_bytes(header[16..24].try_into().ok()?);
    let len = usize::try_from(u64::from_le_bytes(header[24..32].try_into().ok()?)).ok()?;
    let end = (at + HEADER).checked_add(len)?;
    let summed = log.get(at + 16..end)?;
    if twox_hash::XxHash3_64::oneshot(summed) != u64::from_le_bytes(header[8..16].try_into().ok()?)
    {
        return None;
    }
    let next = end.div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
    Some((seqno, &log[at + HEADER..end], next))
}

/// `bytes` in zero-padded blocks.
pub(super) fn to_blocks(bytes: &[u8]) -> Vec<BlockBuf> {
    bytes
        .chunks(BLOCK_SIZE)
        .map(|chunk| {
            let mut b = Block::zeroed();
            b.0[..chunk.len()].copy_from_slice(chunk);
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_record_ends_the_log() {
        let blocks = frame(b"testtest", 3, &[7; 5000]);
        let log: Vec<u8> = blocks.iter().flat_map(|b| b.0).collect();
        assert_eq!(
            parse(b"testtest", &log, 0),
            Some((3, &[7u8; 5000][..], 8192))
        );
        assert_eq!(payload_len(&blocks[0]), 5000);
        assert!(parse(b"othermag", &log, 0).is_none());
        for at in [0, 9, 17, 25, 40, 4100] {
            let mut bad = log.clone();
            bad[at] ^= 1;
            assert!(parse(b"testtest", &bad, 0).is_none(), "byte {at}");
        }
        assert!(parse(b"testtest", &log[..5000], 0).is_none());
    }
}
