//! Undo records: the old values of the keys one commit changed, and the top
//! pages it replaced, as kept in RAM and as written to the store's history
//! log (layout in docs/format.md, "History").

use crate::bytes::Cursor;
use crate::db::KeyedValues;
use crate::page_store::{
    decode_change, encode_change, PageChange, CHANGE_RAM_BYTES, CHANGE_RECORD_BYTES,
};
use crate::trie::{KeyPath, Node};
use crate::Error;

/// Pages of levels up to this one (the root page and its 64 children: the
/// trie's top 12 levels) are kept in undos as they were before the commit,
/// so a proof back recomputes only the subtrees below them that it enters.
pub(crate) const KEPT_PAGE_LEVEL: usize = 1;

const UNDO: u8 = 0;
const ROLLBACK: u8 = 1;
/// An absent old value's length in a record.
const ABSENT: u32 = u32::MAX;

/// The old values of the keys one commit changed, compactly: a retained
/// commit at 2^24 accounts holds about 50,000.
pub(crate) struct Undo {
    /// The commit, for trimming the store's records.
    pub(crate) seqno: u64,
    pub(crate) root_before: Node,
    pub(crate) root_after: Node,
    /// Sorted, each once.
    keys: Vec<KeyPath>,
    /// Where the keys of each `index_bits`-bit prefix start in `keys` (one
    /// more entry at the end): a lookup probes a handful of keys, not a
    /// binary search's worth of cache misses, which with 60 undos to look
    /// through cost more than the disk read of a key none of them names.
    index: Vec<u32>,
    index_bits: u32,
    /// Where each key's old value lies in `values`.
    spans: Spans,
    values: Vec<u8>,
    /// The pages of levels up to [`KEPT_PAGE_LEVEL`] the commit changed, as
    /// they were before it.
    pub(super) pages: Vec<PageChange>,
}

impl Undo {
    /// The undo of commit `seqno` from `root_before` to `root_after`, which
    /// replaced `previous` (sorted by key, each key once) and the top pages
    /// `pages`.
    pub(crate) fn new(
        seqno: u64,
        root_before: Node,
        root_after: Node,
        previous: &KeyedValues,
        pages: Vec<PageChange>,
    ) -> Result<Undo, Error> {
        let mut undo = Undo {
            seqno,
            root_before,
            root_after,
            keys: Vec::with_capacity(previous.len()),
            index: Vec::new(),
            index_bits: 0,
            spans: Spans(Vec::with_capacity(previous.len())),
            values: Vec::new(),
            pages,
        };
        for (key, value) in previous {
            undo.push(*key, value.as_deref())?;
        }
        undo.build_index();
        Ok(undo)
    }

    /// About one key per prefix, up to 2^20 prefixes. Called once the keys
    /// are in: the values' spare capacity goes back too.
    fn build_index(&mut self) {
        self.values.shrink_to_fit();
        self.index_bits = match self.keys.len() {
            0..16 => 0,
            n => n.ilog2().min(20),
        };
        let prefixes = 1usize << self.index_bits;
        self.index = Vec::with_capacity(prefixes + 1);
        let mut at = 0;
        for prefix in 0..prefixes {
            while self.keys.get(at).is_some_and(|k| self.prefix(k) < prefix) {
                at += 1;
            }
            self.index.push(at as u32);
        }
        self.index.push(self.keys.len() as u32);
    }

    fn prefix(&self, key: &KeyPath) -> usize {
        match self.index_bits {
            0 => 0,
            bits => (u32::from_be_bytes([key[0], key[1], key[2], key[3]]) >> (32 - bits)) as usize,
        }
    }

    fn push(&mut self, key: KeyPath, value: Option<&[u8]>) -> Result<(), Error> {
        if self.keys.last().is_some_and(|last| *last >= key) {
            return Err(Error::Internal("an undo's keys out of order"));
        }
        if let Some(v) = value {
            self.values.extend_from_slice(v);
        }
        self.keys.push(key);
        self.spans.push(value.map(<[u8]>::len));
        Ok(())
    }

    /// The old value of `key`, if this commit changed it.
    pub(super) fn get(&self, key: &KeyPath) -> Option<Option<&[u8]>> {
        let p = self.prefix(key);
        let (from, to) = (self.index[p] as usize, self.index[p + 1] as usize);
        let i = from + self.keys[from..to].binary_search(key).ok()?;
        Some(self.value(i))
    }

    /// The keys in `from..to` (no `to`: to the last key) with their old
    /// values, in key order.
    pub(super) fn range<'a>(
        &'a self,
        from: &KeyPath,
        to: Option<&KeyPath>,
    ) -> impl Iterator<Item = (&'a KeyPath, Option<&'a [u8]>)> + 'a {
        let first = self.keys.partition_point(|k| k < from);
        let last = to.map_or(self.keys.len(), |to| self.keys.partition_point(|k| k < to));
        (first..last.max(first)).map(move |i| (&self.keys[i], self.value(i)))
    }

    fn value(&self, i: usize) -> Option<&[u8]> {
        self.spans.get(i).map(|span| &self.values[span])
    }

    /// Its record: kind, the two roots, the entry count, then each key with
    /// its old value's length (`u32::MAX`: absent) and bytes; then the page
    /// count and each page's id, whether it existed, and its bytes if so.
    ///
    /// Fails only for an old value too long for the record's length field,
    /// which no value under [`crate::MAX_VALUE_LEN`] is.
    pub(crate) fn encode(&self) -> Result<Vec<u8>, Error> {
        let pages = self.pages.len() * CHANGE_RECORD_BYTES;
        let mut out = Vec::with_capacity(77 + self.keys.len() * 36 + self.values.len() + pages);
        out.push(UNDO);
        out.extend_from_slice(&self.root_before);
        out.extend_from_slice(&self.root_after);
        out.extend_from_slice(&(self.keys.len() as u64).to_le_bytes());
        for (i, key) in self.keys.iter().enumerate() {
            out.extend_from_slice(key);
            let value = self.value(i);
            let len = match value {
                None => ABSENT,
                Some(v) => u32::try_from(v.len())
                    .ok()
                    .filter(|&len| len != ABSENT)
                    .ok_or(Error::Internal(
                        "an old value too long for a history record",
                    ))?,
            };
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(value.unwrap_or_default());
        }
        out.extend_from_slice(&(self.pages.len() as u32).to_le_bytes());
        for change in &self.pages {
            encode_change(&mut out, change);
        }
        Ok(out)
    }

    /// The RAM it holds, for [`crate::Metrics`].
    pub(super) fn bytes(&self) -> usize {
        size_of::<Undo>()
            + self.keys.len() * 40
            + self.index.len() * 4
            + self.values.len()
            + self.pages.len() * CHANGE_RAM_BYTES
    }
}

/// Where each of an undo's old values lies in its bytes: the value's end,
/// with [`Spans::ABSENT`] set for a key that had none. The values lie end to
/// end, so the end is all a span needs: 8 bytes a key, and no bound on the
/// total but the address space.
struct Spans(Vec<u64>);

impl Spans {
    const ABSENT: u64 = 1 << 63;

    /// Adds the next value's span: `len` bytes, or `None` for no value.
    fn push(&mut self, len: Option<usize>) {
        let end = self.end() + len.unwrap_or(0) as u64;
        self.0.push(match len {
            Some(_) => end,
            None => end | Spans::ABSENT,
        });
    }

    /// Where the values so far end.
    fn end(&self) -> u64 {
        self.0.last().map_or(0, |end| end & !Spans::ABSENT)
    }

    /// Value `i`'s bytes, if it has a value.
    fn get(&self, i: usize) -> Option<core::ops::Range<usize>> {
        let end = self.0[i];
        if end & Spans::ABSENT != 0 {
            return None;
        }
        let start = i.checked_sub(1).map_or(0, |p| self.0[p] & !Spans::ABSENT);
        Some(start as usize..end as usize)
    }
}

/// A rollback's record: how many undos it dropped.
pub(crate) fn rollback_record(dropped: usize) -> Vec<u8> {
    let mut out = vec![ROLLBACK];
    out.extend_from_slice(&(dropped as u64).to_le_bytes());
    out
}

/// What a record says.
pub(super) enum Record {
    Undo(Undo),
    Rollback(usize),
}

pub(super) fn decode(seqno: u64, bytes: &[u8]) -> Option<Record> {
    let mut r = Cursor::new(bytes);
    let record = match r.u8()? {
        UNDO => {
            let root_before = r.array()?;
            let root_after = r.array()?;
            let count = r.u64()?;
            let mut undo =
                Undo::new(seqno, root_before, root_after, &Vec::new(), Vec::new()).ok()?;
            // Exactly, not by doubling: 64 replayed undos held a third more
            // than they used. A key takes at least 36 bytes of the record.
            let fits = usize::try_from(count).ok()?.min(r.remaining() / 36);
            undo.keys.reserve_exact(fits);
            undo.spans.0.reserve_exact(fits);
            for _ in 0..count {
                let key = r.array()?;
                let len = r.u32()?;
                let value = match len {
                    ABSENT => None,
                    // Any length the field holds: an older build wrote
                    // values up to 4 GiB; one longer than the record is
                    // refused before anything is allocated.
                    len => Some(r.take(len as usize)?),
                };
                undo.push(key, value).ok()?;
            }
            undo.build_index();
            let pages = r.u32()?;
            for _ in 0..pages {
                undo.pages.push(decode_change(&mut r)?);
            }
            Record::Undo(undo)
        }
        ROLLBACK => Record::Rollback(usize::try_from(r.u64()?).ok()?),
        _ => return None,
    };
    (r.remaining() == 0).then_some(record)
}

// The history's unit tests, beside the codec whose private parts they check.
#[cfg(test)]
#[path = "tests.rs"]
mod tests;
