//! The history: what takes the committed state back to each of the recent
//! commits [`crate::Options::history`] keeps.
//!
//! Each commit keeps an [`Undo`], the old values of the keys it changed (a
//! reverse log; docs/architecture.md says why not old blocks). The chain of
//! undos, newest last, links each retained root to the one before it. The
//! value of a key `d` commits back is its value in the oldest of the newest
//! `d` undos that names it, else its committed value. A rollback by `k` is an
//! ordinary commit of those values for every key the newest `k` undos name,
//! after which those undos are gone.
//!
//! The store keeps a record per commit (the undo, or how many undos a
//! rollback dropped); open replays them. Owns the records' layout and the
//! chain; knows nothing of blocks or the trie.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::KeyedValues;
use crate::block::Block;
use crate::trie::page::{Page, PAGE_SIZE};
use crate::trie::page_id::PageId;
use crate::trie::{KeyPath, Node};
use crate::Error;

/// Pages of levels up to this one (the root page and its 64 children: the
/// trie's top 12 levels) are kept in undos as they were before the commit,
/// so a proof back recomputes only the subtrees below them that it enters.
pub(crate) const KEPT_PAGE_LEVEL: usize = 1;

/// A page as a commit found it: `None` if it did not exist.
pub(crate) type OldPage = (PageId, Option<Arc<Page>>);

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
    pages: Vec<OldPage>,
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
        pages: Vec<OldPage>,
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
    fn get(&self, key: &KeyPath) -> Option<Option<&[u8]>> {
        let p = self.prefix(key);
        let (from, to) = (self.index[p] as usize, self.index[p + 1] as usize);
        let i = from + self.keys[from..to].binary_search(key).ok()?;
        Some(self.value(i))
    }

    /// The keys in `from..to` (no `to`: to the last key) with their old
    /// values, in key order.
    fn range<'a>(
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
        let pages = self.pages.len() * (33 + PAGE_SIZE);
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
        for (id, page) in &self.pages {
            out.extend_from_slice(&id.encode());
            out.push(u8::from(page.is_some()));
            if let Some(page) = page {
                out.extend_from_slice(page.as_bytes());
            }
        }
        Ok(out)
    }

    /// The RAM it holds, for [`crate::Metrics`].
    pub(super) fn bytes(&self) -> usize {
        size_of::<Undo>()
            + self.keys.len() * 40
            + self.index.len() * 4
            + self.values.len()
            + self.pages.len() * (size_of::<OldPage>() + PAGE_SIZE)
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
enum Record {
    Undo(Undo),
    Rollback(usize),
}

fn decode(seqno: u64, bytes: &[u8]) -> Option<Record> {
    let mut r = Reader(bytes);
    let record = match r.take(1)?[0] {
        UNDO => {
            let root_before = r.take(32)?.try_into().ok()?;
            let root_after = r.take(32)?.try_into().ok()?;
            let count = r.u64()?;
            let mut undo =
                Undo::new(seqno, root_before, root_after, &Vec::new(), Vec::new()).ok()?;
            // Exactly, not by doubling: 64 replayed undos held a third more
            // than they used. A key takes at least 36 bytes of the record.
            let fits = usize::try_from(count).ok()?.min(r.0.len() / 36);
            undo.keys.reserve_exact(fits);
            undo.spans.0.reserve_exact(fits);
            for _ in 0..count {
                let key = r.take(32)?.try_into().ok()?;
                let len = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
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
            let pages = u32::from_le_bytes(r.take(4)?.try_into().ok()?);
            for _ in 0..pages {
                let id = PageId::decode(r.take(32)?.try_into().ok()?).ok()?;
                let page = match r.take(1)?[0] {
                    0 => None,
                    1 => {
                        let mut block = Block::zeroed();
                        block.0.copy_from_slice(r.take(PAGE_SIZE)?);
                        let page = Page::from_block(block);
                        page.check(&id).ok()?;
                        Some(Arc::new(page))
                    }
                    _ => return None,
                };
                undo.pages.push((id, page));
            }
            Record::Undo(undo)
        }
        ROLLBACK => Record::Rollback(usize::try_from(r.u64()?).ok()?),
        _ => return None,
    };
    r.0.is_empty().then_some(record)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The old value of `key` in the oldest of `undos` (oldest first) that names
/// it: its value before them all, if any of them changed it.
pub(crate) fn first_named<'a>(
    undos: impl IntoIterator<Item = &'a Arc<Undo>>,
    key: &KeyPath,
) -> Option<Option<&'a [u8]>> {
    undos.into_iter().find_map(|undo| undo.get(key))
}

/// [`first_named`] for every key in `from..to` (no `to`: to the last key)
/// that `wanted` accepts and any of `undos` names.
pub(crate) fn oldest_values<'a>(
    undos: impl IntoIterator<Item = &'a Arc<Undo>>,
    from: &KeyPath,
    to: Option<&KeyPath>,
    wanted: impl Fn(&KeyPath) -> bool,
) -> BTreeMap<KeyPath, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for undo in undos {
        for (key, value) in undo.range(from, to).filter(|(key, _)| wanted(key)) {
            out.entry(*key).or_insert_with(|| value.map(<[u8]>::to_vec));
        }
    }
    out
}

/// How far the history reaches back at most: commits, and the RAM their
/// undos take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) commits: usize,
    pub(crate) bytes: usize,
}

impl Window {
    /// Drops undos from the front of `undos` (oldest first) until it fits.
    fn fit(&self, undos: &mut Vec<Arc<Undo>>) {
        let mut bytes: usize = undos.iter().map(|undo| undo.bytes()).sum();
        let mut over = undos.len().saturating_sub(self.commits);
        for undo in &undos[..over] {
            bytes -= undo.bytes();
        }
        while bytes > self.bytes && over < undos.len() {
            bytes -= undos[over].bytes();
            over += 1;
        }
        undos.drain(..over);
    }
}

/// The retained undos, oldest first; shared, so a reader keeps the chain it
/// began with while commits go on.
#[derive(Clone, Default)]
pub(crate) struct Chain(Arc<Vec<Arc<Undo>>>);

impl Chain {
    /// The chain the store's `records` (oldest first) leave behind a head of
    /// root `head`, at most `window` long: the one the commits that made them
    /// left, if `window` has not changed since. Undos that do not link up to the
    /// head (history was off for a while, or the file was damaged) are not
    /// kept: the history then reaches back less far, never to a wrong state.
    pub(crate) fn replay(records: Vec<(u64, Vec<u8>)>, head: &Node, window: Window) -> Chain {
        let mut undos: Vec<Arc<Undo>> = Vec::new();
        for (seqno, bytes) in records {
            match decode(seqno, &bytes) {
                // The window applies at each step, as it did when they were made.
                Some(Record::Undo(undo)) => {
                    undos.push(Arc::new(undo));
                    window.fit(&mut undos);
                }
                Some(Record::Rollback(dropped)) => {
                    undos.truncate(undos.len().saturating_sub(dropped))
                }
                // Checked but unreadable (another build's, say): a gap, like
                // commits made with no history.
                None => undos.clear(),
            }
        }
        let mut expected = *head;
        let linked = undos
            .iter()
            .rev()
            .take_while(|undo| {
                let links = undo.root_after == expected;
                expected = undo.root_before;
                links
            })
            .count();
        undos.drain(..undos.len() - linked);
        Chain(Arc::new(undos))
    }

    /// How many commits back it reaches.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The retained roots, the head's (`head`) first.
    pub(crate) fn roots(&self, head: &Node) -> Vec<Node> {
        std::iter::once(*head)
            .chain(self.0.iter().rev().map(|undo| undo.root_before))
            .collect()
    }

    /// How many commits before the head `root` is (0: the head's own root),
    /// the newest such if it appears more than once.
    pub(crate) fn depth_of(&self, head: &Node, root: &Node) -> Option<usize> {
        self.roots(head).iter().position(|r| r == root)
    }

    /// The newest `depth` undos, oldest first.
    fn newest(&self, depth: usize) -> &[Arc<Undo>] {
        &self.0[self.0.len() - depth.min(self.0.len())..]
    }

    /// The value of `key` `depth` commits back, if a commit since changed
    /// it; `None`: it is the same as at the head.
    pub(crate) fn changed_value(&self, depth: usize, key: &KeyPath) -> Option<Option<&[u8]>> {
        first_named(self.newest(depth), key)
    }

    /// The writes that take the head back `depth` commits: every key the
    /// newest `depth` undos name (of those `wanted` accepts), with its value
    /// there. Sorted by key.
    pub(crate) fn writes_back(
        &self,
        depth: usize,
        wanted: impl Fn(&KeyPath) -> bool,
    ) -> KeyedValues {
        oldest_values(self.newest(depth), &[0; 32], None, wanted)
            .into_iter()
            .collect()
    }

    /// The top pages (levels up to [`KEPT_PAGE_LEVEL`]) that differ `depth`
    /// commits back, as they were there.
    pub(crate) fn pages_back(&self, depth: usize) -> Vec<OldPage> {
        let mut out = BTreeMap::new();
        for undo in self.newest(depth) {
            for (id, page) in &undo.pages {
                out.entry(*id).or_insert_with(|| page.clone());
            }
        }
        out.into_iter().collect()
    }

    /// The chain after a commit that kept `undo`, within `window`.
    pub(crate) fn pushed(&self, undo: Arc<Undo>, window: Window) -> Chain {
        let mut undos: Vec<Arc<Undo>> = self.0.as_ref().clone();
        undos.push(undo);
        window.fit(&mut undos);
        Chain(Arc::new(undos))
    }

    /// The chain after a rollback of `depth` commits.
    pub(crate) fn popped(&self, depth: usize) -> Chain {
        let keep = self.0.len().saturating_sub(depth);
        Chain(Arc::new(self.0[..keep].to_vec()))
    }

    /// The oldest commit whose record the store must keep; `next` (the next
    /// commit) if none.
    pub(crate) fn keep_from(&self, next: u64) -> u64 {
        self.0.first().map_or(next, |undo| undo.seqno)
    }

    /// The RAM it holds.
    pub(crate) fn bytes(&self) -> usize {
        self.0.iter().map(|undo| undo.bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn undo(seqno: u64, before: u8, after: u8, entries: &[(u8, Option<&[u8]>)]) -> Undo {
        let previous = entries
            .iter()
            .map(|(k, v)| ([*k; 32], v.map(<[u8]>::to_vec)))
            .collect();
        Undo::new(seqno, [before; 32], [after; 32], &previous, Vec::new()).unwrap()
    }

    /// A window of `n` commits, whatever their bytes.
    fn commits(n: usize) -> Window {
        Window {
            commits: n,
            bytes: usize::MAX,
        }
    }

    fn records(items: Vec<(u64, Vec<u8>)>, head: u8, window: usize) -> Chain {
        Chain::replay(items, &[head; 32], commits(window))
    }

    #[test]
    fn spans_hold_values_at_the_limit_past_4_gib_in_all() {
        let max = crate::MAX_VALUE_LEN as usize;
        let mut spans = Spans(Vec::new());
        for _ in 0..5 {
            spans.push(Some(max));
        }
        spans.push(None);
        spans.push(Some(0));
        spans.push(Some(max));
        assert_eq!(spans.get(0), Some(0..max));
        assert_eq!(spans.get(4), Some(4 * max..5 * max));
        assert_eq!(spans.get(5), None);
        assert_eq!(spans.get(6), Some(5 * max..5 * max));
        assert_eq!(spans.get(7), Some(5 * max..6 * max));
        assert!(spans.end() > u32::MAX as u64);
    }

    #[test]
    fn a_record_naming_more_value_than_it_holds_is_refused_unread() {
        let mut record = vec![UNDO];
        record.extend_from_slice(&[1; 32]);
        record.extend_from_slice(&[2; 32]);
        record.extend_from_slice(&1u64.to_le_bytes());
        record.extend_from_slice(&[3; 32]);
        let over = crate::MAX_VALUE_LEN as u32 + 1;
        let mut damaged = record.clone();
        damaged.extend_from_slice(&over.to_le_bytes());
        damaged.extend_from_slice(&[0; 64]);
        damaged.extend_from_slice(&0u32.to_le_bytes());
        assert!(decode(7, &damaged).is_none());
        // The same record naming a short value reads.
        record.extend_from_slice(&64u32.to_le_bytes());
        record.extend_from_slice(&[0; 64]);
        record.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(decode(7, &record), Some(Record::Undo(_))));
    }

    #[test]
    fn an_undo_round_trips_and_answers_by_key() {
        let u = undo(7, 1, 2, &[(1, None), (3, Some(b"")), (5, Some(b"five"))]);
        let Some(Record::Undo(back)) = decode(7, &u.encode().unwrap()) else {
            panic!("not an undo")
        };
        assert_eq!(back.encode().unwrap(), u.encode().unwrap());
        assert_eq!(back.get(&[1; 32]), Some(None));
        assert_eq!(back.get(&[3; 32]), Some(Some(&b""[..])));
        assert_eq!(back.get(&[5; 32]), Some(Some(&b"five"[..])));
        assert_eq!(back.get(&[4; 32]), None);
        let bytes = u.encode().unwrap();
        assert!(decode(7, &bytes[..bytes.len() - 1]).is_none());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(7, &longer).is_none());
    }

    #[test]
    fn the_prefix_index_finds_every_key_and_no_other() {
        // Uniform keys, and clustered ones that share their first bytes.
        for spread in [true, false] {
            let keys: Vec<KeyPath> = (0..5000u32)
                .map(|i| {
                    let mut k = [0u8; 32];
                    let bytes = if spread {
                        *blake3::hash(&i.to_le_bytes()).as_bytes()
                    } else {
                        k
                    };
                    k[..8].copy_from_slice(&bytes[..8]);
                    k[28..].copy_from_slice(&i.to_be_bytes());
                    k
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let previous = keys.iter().map(|k| (*k, Some(k[28..].to_vec()))).collect();
            let u = Undo::new(1, [0; 32], [1; 32], &previous, Vec::new()).unwrap();
            assert_eq!(u.index_bits, 12);
            for k in &keys {
                assert_eq!(u.get(k), Some(Some(&k[28..])));
                let mut other = *k;
                other[31] ^= 0x80;
                if keys.binary_search(&other).is_err() {
                    assert_eq!(u.get(&other), None);
                }
            }
        }
    }

    #[test]
    fn values_back_come_from_the_oldest_undo_that_names_the_key() {
        // Roots 1 -> 2 -> 3: key 9 was "a", then "b", now "c".
        let chain = Chain::default()
            .pushed(Arc::new(undo(1, 1, 2, &[(9, Some(b"a"))])), commits(8))
            .pushed(
                Arc::new(undo(2, 2, 3, &[(8, None), (9, Some(b"b"))])),
                commits(8),
            );
        let head = [3; 32];
        assert_eq!(chain.roots(&head), vec![[3; 32], [2; 32], [1; 32]]);
        assert_eq!(chain.depth_of(&head, &[1; 32]), Some(2));
        assert_eq!(chain.depth_of(&head, &[4; 32]), None);
        assert_eq!(chain.changed_value(0, &[9; 32]), None);
        assert_eq!(chain.changed_value(1, &[9; 32]), Some(Some(&b"b"[..])));
        assert_eq!(chain.changed_value(2, &[9; 32]), Some(Some(&b"a"[..])));
        assert_eq!(chain.changed_value(2, &[8; 32]), Some(None));
        assert_eq!(chain.changed_value(2, &[7; 32]), None);
        assert_eq!(
            chain.writes_back(2, |_| true),
            vec![([8; 32], None), ([9; 32], Some(b"a".to_vec()))]
        );
        assert_eq!(chain.popped(1).roots(&[2; 32]), vec![[2; 32], [1; 32]]);
        assert_eq!(
            chain
                .pushed(Arc::new(undo(3, 3, 4, &[])), commits(2))
                .roots(&[4; 32])
                .len(),
            3
        );
    }

    #[test]
    fn replay_applies_rollbacks_and_keeps_only_what_links_to_the_head() {
        let items = vec![
            (1, undo(1, 0, 1, &[]).encode().unwrap()),
            (2, undo(2, 1, 2, &[]).encode().unwrap()),
            (3, undo(3, 2, 3, &[]).encode().unwrap()),
            (4, rollback_record(2)),
            (5, undo(5, 1, 5, &[]).encode().unwrap()),
        ];
        let chain = records(items.clone(), 5, 64);
        assert_eq!(chain.roots(&[5; 32]), vec![[5; 32], [1; 32], [0; 32]]);
        assert_eq!(chain.keep_from(6), 1);
        assert_eq!(records(items.clone(), 5, 1).len(), 1);
        // Window 2: undo 1 had left when the rollback came.
        assert_eq!(
            records(items.clone(), 5, 2).roots(&[5; 32]),
            vec![[5; 32], [1; 32]]
        );
        // A head the records do not lead to: nothing links.
        assert_eq!(records(items.clone(), 9, 64).len(), 0);
        // A gap (commits without records): only what is after it links.
        let gap = vec![items[0].clone(), (7, undo(7, 6, 7, &[]).encode().unwrap())];
        assert_eq!(records(gap, 7, 64).roots(&[7; 32]), vec![[7; 32], [6; 32]]);
        // A record that does not decode ends what came before it.
        let mut bad = items.clone();
        bad.insert(4, (4, vec![9, 9]));
        assert_eq!(records(bad, 5, 64).roots(&[5; 32]), vec![[5; 32], [1; 32]]);
    }
}
