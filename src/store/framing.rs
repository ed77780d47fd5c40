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
/// Written straight into the blocks: a commit's catalog record is megabytes,
/// and every copy of it was on the commit's critical path.
pub(super) fn frame(magic: &[u8; 8], seqno: u64, payload: &[u8]) -> Vec<BlockBuf> {
    use std::hash::Hasher;
    let mut header = [0u8; HEADER];
    header[0..8].copy_from_slice(magic);
    header[16..24].copy_from_slice(&seqno.to_le_bytes());
    header[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut sum = twox_hash::XxHash3_64::with_seed(0);
    sum.write(&header[16..]);
    sum.write(payload);
    header[8..16].copy_from_slice(&sum.finish().to_le_bytes());

    let first = payload.len().min(BLOCK_SIZE - HEADER);
    let mut blocks = Vec::with_capacity(1 + (payload.len() - first).div_ceil(BLOCK_SIZE));
    let mut b = padded(&payload[..first], HEADER);
    b.0[..HEADER].copy_from_slice(&header);
    blocks.push(b);
    blocks.extend(payload[first..].chunks(BLOCK_SIZE).map(|c| padded(c, 0)));
    blocks
}

/// A block holding `bytes` from byte `at`, zeros around them.
fn padded(bytes: &[u8], at: usize) -> BlockBuf {
    let mut b = Block::for_read();
    b.0[..at].fill(0);
    b.0[at..at + bytes.len()].copy_from_slice(bytes);
    b.0[at + bytes.len()..].fill(0);
    b
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
    bytes.chunks(BLOCK_SIZE).map(|c| padded(c, 0)).collect()
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
            let blocks = frame(b"testtest", 4, &payload);
            assert_eq!(blocks.len(), (HEADER + len).div_ceil(BLOCK_SIZE).max(1));
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
