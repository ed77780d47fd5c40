//! A bucket: one 4 KiB block of entries sorted by key (layout in docs/format.md).

use crate::block::{Block, BlockBuf, BLOCK_SIZE};
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
/// Bytes after an overflow entry's tag: length, hash, start block.
const OVERFLOW_BODY: usize = 4 + 32 + 8;

/// Values up to this long are held inside [`InlineValue`], with no heap
/// allocation: balances, nonces and storage slots all fit.
const SHORT_MAX: usize = 32;

/// A value stored in its bucket. Planning a commit decodes every entry of
/// every bucket it rewrites, so short values must not cost an allocation each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InlineValue {
    Short { len: u8, bytes: [u8; SHORT_MAX] },
    Long(Vec<u8>),
}

impl InlineValue {
    pub(crate) fn new(v: &[u8]) -> InlineValue {
        if v.len() <= SHORT_MAX {
            let mut bytes = [0; SHORT_MAX];
            bytes[..v.len()].copy_from_slice(v);
            InlineValue::Short {
                len: v.len() as u8,
                bytes,
            }
        } else {
            InlineValue::Long(v.to_vec())
        }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            InlineValue::Short { len, bytes } => &bytes[..*len as usize],
            InlineValue::Long(v) => v,
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.as_slice().to_vec()
    }
}

/// Where an entry's value lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    Inline(InlineValue),
    /// `len` bytes in the overflow file from block `start`, hashing to `hash`.
    Overflow {
        len: u32,
        hash: ValueHash,
        start: u64,
    },
}

impl Stored {
    /// The overflow extent `(start, blocks)` the value occupies, if any.
    pub(crate) fn extent(&self) -> Option<(u64, u64)> {
        match self {
            Stored::Overflow { len, start, .. } => {
                Some((*start, super::overflow::blocks_for(*len as usize)))
            }
            Stored::Inline(_) => None,
        }
    }

    fn encoded_len(&self) -> usize {
        match self {
            Stored::Inline(v) => 1 + v.as_slice().len(),
            Stored::Overflow { .. } => 1 + OVERFLOW_BODY,
        }
    }
}

/// One key and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BucketEntry {
    pub(crate) key: KeyPath,
    pub(crate) stored: Stored,
}

impl BucketEntry {
    pub(super) fn encoded_len(&self) -> usize {
        32 + self.stored.encoded_len()
    }
}

/// Bytes `entries` take in a bucket.
pub(super) fn payload_len(entries: &[BucketEntry]) -> usize {
    entries.iter().map(BucketEntry::encoded_len).sum()
}

/// Bytes an entry holding `value` takes in a bucket.
pub(super) fn entry_len(value: &[u8]) -> usize {
    33 + if value.len() <= INLINE_MAX {
        value.len()
    } else {
        OVERFLOW_BODY
    }
}

/// Bytes the entries of bucket `b` take, from a walk of their lengths that
/// stops at the first out of bounds.
pub(super) fn payload_of(b: &Block) -> usize {
    layout(b, |_| {}) - HEADER
}

/// Where the entries of bucket `b` end, from a walk of their lengths that
/// stops at the first out of bounds; `extent` is told each overflow extent
/// `(start, blocks)` passed.
fn layout(b: &Block, mut extent: impl FnMut((u64, u64))) -> usize {
    let mut at = HEADER;
    for _ in 0..u16::from_le_bytes(b.array(6)) {
        let (tag, end) = match b.0.get(at + 32) {
            Some(&tag) => (tag, at + 33 + body_len(tag)),
            None => break,
        };
        if end > CHECKSUM {
            break;
        }
        if tag == OVERFLOW_TAG {
            let len = u32::from_le_bytes(b.array(at + 33));
            extent((
                b.u64_at(at + 33 + 36),
                super::overflow::blocks_for(len as usize),
            ));
        }
        at = end;
    }
    at
}

/// Encodes `entries` (sorted, fitting [`PAYLOAD`]) as commit `seqno`'s bucket.
pub(super) fn encode(entries: &[BucketEntry], seqno: u64) -> BlockBuf {
    debug_assert!(payload_len(entries) <= PAYLOAD);
    // Every byte is written below: zeroing the whole block first showed in
    // the value planner's profile.
    let mut b = Block::for_read();
    b.0[0..4].copy_from_slice(MAGIC);
    b.0[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b.0[6..8].copy_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut at = HEADER;
    for e in entries {
        b.0[at..at + 32].copy_from_slice(&e.key);
        at += 32;
        match &e.stored {
            Stored::Inline(v) => {
                let v = v.as_slice();
                b.0[at] = v.len() as u8;
                b.0[at + 1..at + 1 + v.len()].copy_from_slice(v);
                at += 1 + v.len();
            }
            Stored::Overflow { len, hash, start } => {
                b.0[at] = OVERFLOW_TAG;
                b.0[at + 1..at + 5].copy_from_slice(&len.to_le_bytes());
                b.0[at + 5..at + 37].copy_from_slice(hash);
                b.put_u64(at + 37, *start);
                at += 1 + OVERFLOW_BODY;
            }
        }
    }
    b.0[at..CHECKSUM].fill(0);
    seal(&mut b, seqno);
    b
}

/// Stamps a bucket's block as commit `seqno`'s and sets its checksum.
fn seal(b: &mut Block, seqno: u64) {
    b.put_u64(8, seqno);
    let sum = b.checksum(CHECKSUM);
    b.put_u64(CHECKSUM, sum);
}

/// Bytes an entry holds after its key and tag byte.
fn body_len(tag: u8) -> usize {
    if tag == OVERFLOW_TAG {
        OVERFLOW_BODY
    } else {
        tag as usize
    }
}

/// Whether a block is a bucket (checksum and magic), without decoding it.
pub(super) fn is_bucket(b: &Block) -> bool {
    &b.0[0..4] == MAGIC && b.u64_at(CHECKSUM) == b.checksum(CHECKSUM)
}

/// An entry borrowed from a bucket's block.
#[derive(Clone, Copy, Debug)]
pub(super) struct EntryRef<'a> {
    pub(super) key: KeyPath,
    inline: Option<&'a [u8]>,
    overflow: (u32, ValueHash, u64),
    /// Where the entry ends in its block.
    end: usize,
}

impl<'a> EntryRef<'a> {
    /// The value's length, wherever it lives.
    pub(super) fn value_len(&self) -> usize {
        self.inline.map_or(self.overflow.0 as usize, <[u8]>::len)
    }

    /// The value's hash: computed for an inline value, stored for one in
    /// overflow space.
    pub(super) fn value_hash(&self) -> ValueHash {
        self.inline.map_or(self.overflow.1, hash_value)
    }

    /// The value, if it is in the bucket (not in overflow space).
    pub(super) fn inline(&self) -> Option<&'a [u8]> {
        self.inline
    }

    /// Where the value is in overflow space, if it is: length, hash, start.
    pub(super) fn overflow(&self) -> Option<(u32, ValueHash, u64)> {
        self.inline.is_none().then_some(self.overflow)
    }

    pub(super) fn to_owned(self) -> BucketEntry {
        let stored = match self.inline {
            Some(v) => Stored::Inline(InlineValue::new(v)),
            None => {
                let (len, hash, start) = self.overflow;
                Stored::Overflow { len, hash, start }
            }
        };
        BucketEntry {
            key: self.key,
            stored,
        }
    }

    /// The overflow extent `(start, blocks)` this entry's value occupies, if any.
    pub(super) fn extent(&self) -> Option<(u64, u64)> {
        self.overflow()
            .map(|(len, _, start)| (start, super::overflow::blocks_for(len as usize)))
    }
}

/// Checks a block read from the disk: checksum, magic, version, every entry
/// in bounds and the keys strictly ascending. A block is verified once, where
/// it enters RAM; [`entries`] then reads it (or one [`encode`] made) without
/// checking again, since every bucket access of a commit goes through it.
pub(super) fn verify(b: &Block) -> Result<(), Error> {
    if !is_bucket(b) {
        return Err(Error::corrupt("bucket checksum or magic"));
    }
    let mut prev: Option<KeyPath> = None;
    for e in entries(b)? {
        let key = e?.key;
        if prev.is_some_and(|p| p >= key) {
            return Err(Error::corrupt("bucket entries out of order"));
        }
        prev = Some(key);
    }
    Ok(())
}

/// The entries of a bucket, in key order, borrowed from its block without
/// copying. The block must have passed [`verify`] or come from [`encode`];
/// anything out of bounds is still [`Error::Corrupt`], never a panic.
pub(super) fn entries(b: &Block) -> Result<Entries<'_>, Error> {
    if &b.0[0..4] != MAGIC {
        return Err(Error::corrupt("bucket checksum or magic"));
    }
    if b.0[4..6] != VERSION.to_le_bytes() {
        return Err(Error::corrupt("unknown bucket format version"));
    }
    Ok(Entries {
        b,
        at: HEADER,
        left: u16::from_le_bytes(b.array(6)) as usize,
    })
}

/// The entries of a bucket from the first whose key is at least `from`.
pub(super) fn entries_from<'a>(b: &'a Block, from: &KeyPath) -> Result<Entries<'a>, Error> {
    let mut entries = entries(b)?;
    entries.skip_below(from);
    Ok(entries)
}

/// A bucket's entries, decoded one at a time; see [`entries`].
pub(super) struct Entries<'a> {
    b: &'a Block,
    /// Where the next entry starts.
    at: usize,
    /// Entries not yet decoded.
    left: usize,
}

impl Entries<'_> {
    /// Steps over the entries whose key is below `from`, reading a length
    /// and the key's first word for most: a prefix query or a lookup walks
    /// half a bucket, and decoding each entry it passed showed in the
    /// commit's profile. An entry out of bounds stops the walk before it, so
    /// the next [`Iterator::next`] reports it.
    fn skip_below(&mut self, from: &KeyPath) {
        let from_word = crate::trie::KeyWords::new(from).first_word();
        while self.left > 0 && self.at + 33 <= CHECKSUM {
            let word = u64::from_be_bytes(self.b.array(self.at));
            if word > from_word
                || (word == from_word && self.b.0[self.at..self.at + 32] >= from[..])
            {
                return;
            }
            let end = self.at + 33 + body_len(self.b.0[self.at + 32]);
            if end > CHECKSUM {
                return;
            }
            self.at = end;
            self.left -= 1;
        }
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<EntryRef<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (b, at) = (self.b, self.at);
        let bad = || Error::corrupt("bucket entry out of bounds");
        if at + 33 > CHECKSUM {
            self.left = 0;
            return Some(Err(bad()));
        }
        let key: KeyPath = b.array(at);
        let tag = b.0[at + 32];
        let body = at + 33;
        if tag == OVERFLOW_TAG {
            if body + OVERFLOW_BODY > CHECKSUM {
                self.left = 0;
                return Some(Err(bad()));
            }
            self.at = body + OVERFLOW_BODY;
            Some(Ok(EntryRef {
                key,
                end: self.at,
                inline: None,
                overflow: (
                    u32::from_le_bytes(b.array(body)),
                    b.array(body + 4),
                    b.u64_at(body + 36),
                ),
            }))
        } else {
            let len = tag as usize;
            if body + len > CHECKSUM {
                self.left = 0;
                return Some(Err(bad()));
            }
            self.at = body + len;
            Some(Ok(EntryRef {
                key,
                end: self.at,
                inline: Some(&b.0[body..body + len]),
                overflow: (0, [0; 32], 0),
            }))
        }
    }
}

/// Decodes a whole bucket into owned entries.
pub(super) fn decode(b: &Block) -> Result<Vec<BucketEntry>, Error> {
    let mut out = Vec::new();
    decode_into(b, &mut out)?;
    Ok(out)
}

/// Appends a whole bucket's entries to `out`, whose allocation a caller
/// decoding many buckets reuses.
pub(super) fn decode_into(b: &Block, out: &mut Vec<BucketEntry>) -> Result<(), Error> {
    for e in entries(b)? {
        out.push(e?.to_owned());
    }
    Ok(())
}

/// A bucket rewritten by [`patch`].
pub(super) struct Patched {
    pub(super) block: BlockBuf,
    /// Each changed key's value before, in the order of the changes.
    pub(super) previous: Vec<Vec<u8>>,
    /// Bytes of entries it holds (as [`payload_len`] counts them).
    pub(super) payload: usize,
    /// The overflow extents (start, blocks) its values use.
    pub(super) extents: Vec<(u64, u64)>,
}

/// Commit `seqno`'s version of bucket `b` with `changes` (sorted, each key
/// once) applied, if every change gives a key the bucket holds inline a
/// value of the same length: the common case of a balance or a counter
/// updated. The values are written over in a copy of the block, which keeps
/// the keys, their order and the overflow extents, so the planner skips
/// decoding the bucket and encoding it again. `None` if any change inserts,
/// deletes or resizes.
pub(super) fn patch(
    b: &Block,
    changes: &[(KeyPath, Option<Vec<u8>>)],
    seqno: u64,
) -> Result<Option<Patched>, Error> {
    let mut spots = Vec::with_capacity(changes.len());
    let mut walk = entries(b)?;
    for (key, value) in changes {
        // Skipping compares a word of each key passed: decoding every entry
        // made this walk the value planner's hottest loop.
        walk.skip_below(key);
        let e = match walk.next() {
            Some(e) => e?,
            None => return Ok(None),
        };
        match (e.inline, value) {
            (Some(old), Some(new)) if e.key == *key && old.len() == new.len() => {
                spots.push((e.end, old, new))
            }
            _ => return Ok(None),
        }
    }
    let mut extents = Vec::new();
    let end = layout(b, |extent| extents.push(extent));
    let mut block = Block::for_read();
    block.0.copy_from_slice(&b.0);
    let previous = spots.iter().map(|(_, old, _)| old.to_vec()).collect();
    for (at, _, new) in spots {
        block.0[at - new.len()..at].copy_from_slice(new);
    }
    seal(&mut block, seqno);
    Ok(Some(Patched {
        block,
        previous,
        payload: end - HEADER,
        extents,
    }))
}

/// The entry for `key`, copying only that one.
pub(super) fn find(b: &Block, key: &KeyPath) -> Result<Option<BucketEntry>, Error> {
    match entries_from(b, key)?.next() {
        Some(e) => {
            let e = e?;
            Ok((e.key == *key).then(|| e.to_owned()))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests;
