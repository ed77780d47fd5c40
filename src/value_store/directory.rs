//! Which bucket holds a key, and whether it may: the value store's RAM summary.
//!
//! Buckets hold contiguous key ranges; the directory maps each bucket's smallest
//! key to its slot, a 16-bit fingerprint per entry and the first bits of its
//! largest key (so a prefix query can skip a bucket that ends below it). A key
//! belongs to the bucket with the greatest smallest-key not above it (the first
//! bucket for keys below all), so every key has exactly one bucket and a lookup
//! costs no I/O; a key whose fingerprint the bucket lacks is absent without a
//! read.
//!
//! The smallest keys lie in one sorted array, with an index by their top bits
//! that narrows a lookup to the few buckets sharing them: a read, a hint, the
//! plan and the trie update each look keys up here, so a lookup must cost a
//! handful of comparisons in memory that sits together, not a B-tree's walk.
//! A commit replaces the buckets it rewrote over the same range where they
//! lie, and moves the array once for its splits and merges
//! ([`Directory::apply`]).

use crate::bytes::Cursor;
use crate::trie::{KeyPath, KeyWords};

pub(super) struct BucketMeta {
    pub(super) slot: u32,
    fingerprints: Box<[u16]>,
    /// The first 64 bits of the bucket's largest key ([`UNKNOWN_LAST`] for a
    /// bucket noted before they were kept): a prefix query whose range
    /// begins in this bucket, past every key it holds, skips its read.
    last: u64,
}

/// The `last` of a bucket whose largest key is not known: above every
/// prefix, so no query skips it.
const UNKNOWN_LAST: u64 = u64::MAX;

impl BucketMeta {
    /// A summary held only while [`Directory::apply`] moves buckets.
    fn placeholder() -> BucketMeta {
        BucketMeta {
            slot: 0,
            fingerprints: Box::new([]),
            last: UNKNOWN_LAST,
        }
    }

    /// Whether its largest key is known (not for a bucket noted before
    /// they were kept).
    pub(super) fn knows_last(&self) -> bool {
        self.last != UNKNOWN_LAST
    }

    /// Records `key` as its largest.
    pub(super) fn learn_last(&mut self, key: &KeyPath) {
        self.last = KeyWords::new(key).first_word();
    }

    /// The same bucket's summary, its keys unchanged, rewritten to `slot`.
    pub(super) fn moved_to(&self, slot: u32) -> BucketMeta {
        BucketMeta {
            slot,
            fingerprints: self.fingerprints.clone(),
            last: self.last,
        }
    }
}

/// A bucket as its catalog note describes it.
pub(super) struct Noted {
    pub(super) min: KeyPath,
    pub(super) meta: BucketMeta,
    /// The overflow extents (start, blocks) its values use.
    pub(super) extents: Vec<(u64, u64)>,
}

/// The most top bits the index keys on: 2^20 entries of 4 bytes.
const MAX_INDEX_BITS: u32 = 20;

pub(super) struct Directory {
    /// Each bucket's smallest key, ascending.
    mins: Vec<KeyWords>,
    /// The summary of the bucket at the same position in `mins`.
    metas: Vec<BucketMeta>,
    /// `starts[p]`: the position of the first bucket whose smallest key's
    /// top `bits` bits are `p` or more; one more entry at the end.
    starts: Vec<u32>,
    bits: u32,
    seed: u64,
    entries: usize,
}

impl Directory {
    pub(super) fn new(seed: u64) -> Directory {
        Directory {
            mins: Vec::new(),
            metas: Vec::new(),
            starts: vec![0, 0],
            bits: 0,
            seed,
            entries: 0,
        }
    }

    fn fingerprint(&self, key: &KeyPath) -> u16 {
        twox_hash::XxHash3_64::oneshot_with_seed(self.seed, key) as u16
    }

    /// Entries in all buckets.
    pub(super) fn entries(&self) -> usize {
        self.entries
    }

    pub(super) fn buckets(&self) -> usize {
        self.mins.len()
    }

    /// Bytes of RAM the summary takes.
    pub(super) fn ram_bytes(&self) -> usize {
        self.mins.capacity() * std::mem::size_of::<KeyWords>()
            + self.metas.capacity() * std::mem::size_of::<BucketMeta>()
            + self.starts.capacity() * 4
            + self.entries * 2
    }

    fn top_bits(&self, key: &KeyWords) -> usize {
        match self.bits {
            0 => 0,
            bits => (key.first_word() >> (64 - bits)) as usize,
        }
    }

    /// The position of the bucket `key` belongs to; `None` if there are none.
    fn position(&self, key: &KeyWords) -> Option<usize> {
        if self.mins.is_empty() {
            return None;
        }
        let p = self.top_bits(key);
        let (lo, hi) = (self.starts[p] as usize, self.starts[p + 1] as usize);
        // Buckets before `lo` start below `key`'s top bits, those from `hi`
        // above them.
        let at_most = lo + self.mins[lo..hi].partition_point(|min| min <= key);
        Some(at_most.saturating_sub(1))
    }

    /// The position of the bucket whose smallest key is `min`, if any.
    fn find(&self, min: &KeyWords) -> Option<usize> {
        let i = self.position(min)?;
        (self.mins[i] == *min).then_some(i)
    }

    /// The bucket `key` belongs to: its smallest key and summary.
    pub(super) fn bucket_of(&self, key: &KeyPath) -> Option<(KeyPath, &BucketMeta)> {
        let i = self.position(&KeyWords::new(key))?;
        Some((self.mins[i].key(), &self.metas[i]))
    }

    /// The bucket after the one whose smallest key is `min`: smallest key and slot.
    pub(super) fn successor(&self, min: &KeyPath) -> Option<(KeyPath, u32)> {
        let min = KeyWords::new(min);
        let i = self.position(&min)?;
        let next = if self.mins[i] > min { i } else { i + 1 };
        Some((self.mins.get(next)?.key(), self.metas[next].slot))
    }

    /// Up to `count` buckets in key order from the one `key` belongs to: their
    /// slots, and the smallest key of the bucket after them (`None`: they
    /// reach the last bucket).
    pub(super) fn run_from(&self, key: &KeyPath, count: usize) -> (Vec<u32>, Option<KeyPath>) {
        let Some(first) = self.position(&KeyWords::new(key)) else {
            return (Vec::new(), None);
        };
        let end = first.saturating_add(count).min(self.mins.len());
        let slots = self.metas[first..end].iter().map(|m| m.slot).collect();
        (slots, self.mins.get(end).map(KeyWords::key))
    }

    /// Forgets every bucket's largest key, as notes written before they were
    /// kept leave them.
    #[cfg(test)]
    pub(super) fn forget_lasts(&mut self) {
        for meta in &mut self.metas {
            meta.last = UNKNOWN_LAST;
        }
    }

    /// Every bucket's smallest key, slot and entry count, in key order.
    pub(super) fn sizes(&self) -> impl Iterator<Item = (KeyPath, u32, usize)> + '_ {
        self.mins
            .iter()
            .zip(&self.metas)
            .map(|(min, meta)| (min.key(), meta.slot, meta.fingerprints.len()))
    }

    /// Whether `meta`'s bucket may hold `key` (false: it certainly does not).
    pub(super) fn may_hold(&self, meta: &BucketMeta, key: &KeyPath) -> bool {
        let fp = self.fingerprint(key);
        meta.fingerprints.contains(&fp)
    }

    /// Buckets that may hold keys starting with the first `depth` bits of `prefix`
    /// (which has every later bit zero), in key order.
    pub(super) fn overlapping(&self, prefix: &KeyPath, depth: usize) -> Vec<u32> {
        let at = KeyWords::new(prefix);
        let Some(mut first) = self.position(&at) else {
            return Vec::new();
        };
        // The bucket the prefix's range begins in often ends below it (a cut
        // between subtrees): its largest key's first bits are then smaller.
        let bits = depth.min(64);
        let mask = u64::MAX.checked_shl((64 - bits) as u32).unwrap_or(0);
        let skip = (self.metas[first].last & mask) < (at.first_word() & mask);
        let later = self.mins[first + 1..]
            .iter()
            .take_while(|min| crate::trie::shares_prefix(&min.key(), prefix, depth))
            .count();
        let end = first + 1 + later;
        first += skip as usize;
        self.metas[first..end]
            .iter()
            .map(|meta| meta.slot)
            .collect()
    }

    /// The summary of the bucket in `slot` holding `keys` (non-empty, sorted):
    /// its smallest key and what [`Directory::apply`] adds. Computed
    /// while a commit plans, so that publishing (which readers wait for) only
    /// installs it.
    pub(super) fn summarize<'k>(
        &self,
        slot: u32,
        keys: impl Iterator<Item = &'k KeyPath>,
    ) -> (KeyPath, BucketMeta) {
        let (mut min, mut last) = (None, UNKNOWN_LAST);
        let fingerprints = keys
            .inspect(|k| {
                min.get_or_insert(**k);
                last = KeyWords::new(k).first_word();
            })
            .map(|k| self.fingerprint(k))
            .collect();
        let meta = BucketMeta {
            slot,
            fingerprints,
            last,
        };
        (min.unwrap_or_default(), meta)
    }

    /// Drops the buckets whose smallest keys are `removed` and adds those
    /// summarized by [`Directory::summarize`] in `added`, each in place of
    /// the one with the same smallest key if there is one (the last of
    /// several with the same key wins). A bucket rewritten over the same
    /// range keeps its smallest key and is replaced where it lies; the rest
    /// (splits, merges) take one pass that moves the runs between them whole.
    /// Returns the summaries replaced in place, for the caller to free where
    /// it costs the commit nothing (at 2^24, some 10 ms of frees a commit).
    pub(super) fn apply(
        &mut self,
        removed: &[KeyPath],
        added: Vec<(KeyPath, BucketMeta)>,
    ) -> Vec<BucketMeta> {
        let mut added: Vec<(KeyWords, BucketMeta)> = added
            .into_iter()
            .map(|(min, meta)| (KeyWords::new(&min), meta))
            .collect();
        // Stable: of equal keys, the last added stays last, and stays.
        added.sort_by_key(|a| a.0);
        let mut kept: Vec<(KeyWords, BucketMeta)> = Vec::with_capacity(added.len());
        for (min, meta) in added {
            if kept.last().is_some_and(|k| k.0 == min) {
                kept.pop();
            }
            kept.push((min, meta));
        }
        let added_keys: Vec<KeyWords> = kept.iter().map(|(min, _)| *min).collect();
        let mut inserts = Vec::new();
        let mut replaced = Vec::with_capacity(kept.len());
        for (min, meta) in kept {
            match self.find(&min) {
                Some(i) => {
                    self.entries -= self.metas[i].fingerprints.len();
                    self.entries += meta.fingerprints.len();
                    replaced.push(std::mem::replace(&mut self.metas[i], meta));
                }
                None => inserts.push((min, meta)),
            }
        }
        // Removed and added again: replaced above, not removed.
        let mut deletes: Vec<usize> = removed
            .iter()
            .map(KeyWords::new)
            .filter(|min| added_keys.binary_search(min).is_err())
            .filter_map(|min| self.find(&min))
            .collect();
        deletes.sort_unstable();
        deletes.dedup();
        if inserts.is_empty() && deletes.is_empty() {
            return replaced;
        }
        // In place: a second copy of both arrays (130 MB at 2^27) would sit
        // beside them in every commit that splits or merges a bucket. They
        // grow by doubling: growing by the inserts alone copied both in
        // nearly every commit.
        self.entries -= deletes
            .iter()
            .map(|&i| self.metas[i].fingerprints.len())
            .sum::<usize>();
        remove_at(&mut self.metas, &deletes);
        remove_at(&mut self.mins, &deletes);
        // Inserts from the last: the buckets above each move up by the
        // inserts still to place, each bucket once.
        let mut src = self.mins.len();
        self.mins.reserve(inserts.len());
        self.metas.reserve(inserts.len());
        for _ in 0..inserts.len() {
            self.mins.push(KeyWords::new(&[0; 32]));
            self.metas.push(BucketMeta::placeholder());
        }
        for (shift, (min, meta)) in (1..=inserts.len()).rev().zip(inserts.into_iter().rev()) {
            let pos = self.mins[..src].partition_point(|m| *m < min);
            self.mins.copy_within(pos..src, pos + shift);
            for j in (pos..src).rev() {
                self.metas.swap(j, j + shift);
            }
            self.entries += meta.fingerprints.len();
            self.mins[pos + shift - 1] = min;
            self.metas[pos + shift - 1] = meta;
            src = pos;
        }
        self.index();
        replaced
    }

    /// Rebuilds `starts` for about two buckets per index entry.
    fn index(&mut self) {
        let len = self.mins.len();
        self.bits = match len {
            0..4 => 0,
            _ => (len.ilog2() - 1).min(MAX_INDEX_BITS),
        };
        let prefixes = 1usize << self.bits;
        let mut starts = Vec::with_capacity(prefixes + 1);
        let mut i = 0;
        for p in 0..prefixes {
            while i < len && self.top_bits(&self.mins[i]) < p {
                i += 1;
            }
            starts.push(i as u32);
        }
        starts.push(len as u32);
        self.starts = starts;
    }

    /// Appends to `out` the catalog note of a bucket: its smallest key, its
    /// summary and the overflow `extents` (start, blocks) its values use.
    pub(super) fn note(
        min: &KeyPath,
        meta: &BucketMeta,
        extents: impl Iterator<Item = (u64, u64)>,
        out: &mut Vec<u8>,
    ) {
        out.extend_from_slice(min);
        out.extend_from_slice(&(meta.fingerprints.len() as u32).to_le_bytes());
        for fp in meta.fingerprints.iter() {
            out.extend_from_slice(&fp.to_le_bytes());
        }
        let at = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut count = 0u32;
        for (start, blocks) in extents {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&blocks.to_le_bytes());
            count += 1;
        }
        out[at..at + 4].copy_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&meta.last.to_le_bytes());
    }

    /// The bucket in `slot` from its catalog note ([`Directory::note`]).
    pub(super) fn from_note(slot: u32, note: &[u8]) -> Option<Noted> {
        let mut r = Cursor::new(note);
        let min: KeyPath = r.array()?;
        let n = r.u32()? as usize;
        let fingerprints = r
            .take(n.checked_mul(2)?)?
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let e = r.u32()? as usize;
        let extents = r
            .take(e.checked_mul(16)?)?
            .chunks(16)
            .map(|c| {
                let (start, blocks) = c.split_at(8);
                (
                    u64::from_le_bytes(start.try_into().unwrap_or_default()),
                    u64::from_le_bytes(blocks.try_into().unwrap_or_default()),
                )
            })
            .collect();
        // Notes written before the largest key was kept end here.
        let last = match r.remaining() {
            0 => UNKNOWN_LAST,
            _ => r.u64()?,
        };
        (n > 0 && r.remaining() == 0).then_some(Noted {
            min,
            meta: BucketMeta {
                slot,
                fingerprints,
                last,
            },
            extents,
        })
    }
}

/// Removes the items at `positions` (ascending, distinct) from `v`, moving
/// each kept one once.
/// The index ranges of `homes` (the buckets of sorted keys, as
/// [`Directory::bucket_of`] names them) whose keys share one bucket.
pub(super) fn by_bucket<'h>(
    homes: &'h [Option<(KeyPath, &BucketMeta)>],
) -> impl Iterator<Item = std::ops::Range<usize>> + 'h {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at;
        let min = homes.get(start)?.map(|h| h.0);
        at += 1;
        while at < homes.len() && homes[at].map(|h| h.0) == min {
            at += 1;
        }
        Some(start..at)
    })
}

fn remove_at<T>(v: &mut Vec<T>, positions: &[usize]) {
    let mut gone = positions.iter().peekable();
    let mut i = 0;
    v.retain(|_| {
        let drop = gone.next_if_eq(&&i).is_some();
        i += 1;
        !drop
    });
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::test_support::Rng;

    fn meta(slot: u32, entries: usize) -> BucketMeta {
        BucketMeta {
            slot,
            fingerprints: vec![0; entries].into(),
            last: UNKNOWN_LAST,
        }
    }

    /// A random key; with `skewed`, all share their first six bytes, so the
    /// index narrows nothing.
    fn key(rng: &mut Rng, skewed: bool) -> KeyPath {
        let mut k = [0u8; 32];
        for chunk in k.chunks_mut(8) {
            chunk.copy_from_slice(&rng.next().to_be_bytes());
        }
        if skewed {
            k[..6].fill(0x42);
        }
        k
    }

    /// Every lookup agrees with a B-tree model through batches of removes,
    /// replacements and additions, at sizes around the index's steps.
    #[test]
    fn lookups_agree_with_a_sorted_map_through_applies() {
        for skewed in [false, true] {
            let mut rng = Rng(if skewed { 11 } else { 5 });
            let mut dir = Directory::new(7);
            let mut model: BTreeMap<KeyPath, (u32, usize)> = BTreeMap::new();
            let mut slot = 0u32;
            for round in 0..40 {
                let existing: Vec<KeyPath> = model.keys().copied().collect();
                let mut removed = Vec::new();
                let mut added = Vec::new();
                for k in &existing {
                    match rng.next() % 8 {
                        0 => removed.push(*k),
                        1 => {
                            slot += 1;
                            added.push((*k, meta(slot, 2)));
                        }
                        _ => {}
                    }
                }
                for _ in 0..(rng.next() % (2 * round + 3)) {
                    slot += 1;
                    added.push((key(&mut rng, skewed), meta(slot, 3)));
                }
                for k in &removed {
                    model.remove(k);
                }
                for (k, m) in &added {
                    model.insert(*k, (m.slot, m.fingerprints.len()));
                }
                dir.apply(&removed, added);

                let listed: Vec<(KeyPath, u32, usize)> = dir.sizes().collect();
                let expected: Vec<(KeyPath, u32, usize)> =
                    model.iter().map(|(k, &(s, n))| (*k, s, n)).collect();
                assert_eq!(listed, expected, "round {round}");
                assert_eq!(dir.entries(), model.values().map(|v| v.1).sum::<usize>());
                let mut probes: Vec<KeyPath> = (0..50).map(|_| key(&mut rng, skewed)).collect();
                probes.extend(model.keys().take(20).copied());
                probes.extend([[0; 32], [0xff; 32]]);
                for probe in probes {
                    let want = model
                        .range(..=probe)
                        .next_back()
                        .or_else(|| model.iter().next())
                        .map(|(k, v)| (*k, v.0));
                    let got = dir.bucket_of(&probe).map(|(k, m)| (k, m.slot));
                    assert_eq!(got, want, "bucket of {probe:?}");
                    let (run, next) = dir.run_from(&probe, 3);
                    if let Some((first, _)) = want {
                        let mut from = model.range(first..);
                        let slots: Vec<u32> = from.by_ref().take(3).map(|(_, v)| v.0).collect();
                        assert_eq!((run, next), (slots, from.next().map(|(k, _)| *k)));
                        let succ = model
                            .range((std::ops::Bound::Excluded(first), std::ops::Bound::Unbounded))
                            .next()
                            .map(|(k, v)| (*k, v.0));
                        assert_eq!(dir.successor(&first), succ);
                    }
                    for depth in [0, 3, 8, 16, 40, 60] {
                        let at = crate::trie::prefix(&probe, depth);
                        let first = model
                            .range(..=at)
                            .next_back()
                            .or_else(|| model.iter().next());
                        let later = model
                            .range((std::ops::Bound::Excluded(at), std::ops::Bound::Unbounded))
                            .take_while(|(k, _)| crate::trie::shares_prefix(k, &at, depth));
                        let want: Vec<u32> =
                            first.into_iter().chain(later).map(|(_, v)| v.0).collect();
                        let mut want = want;
                        want.dedup();
                        assert_eq!(dir.overlapping(&at, depth), want, "depth {depth}");
                    }
                }
            }
            assert!(dir.buckets() > 100, "{}", dir.buckets());
        }
    }

    /// Of several buckets added with one smallest key, the last stays.
    #[test]
    fn the_last_of_equal_keys_wins() {
        let mut dir = Directory::new(1);
        dir.apply(&[], vec![([1; 32], meta(1, 1)), ([1; 32], meta(2, 4))]);
        assert_eq!(dir.buckets(), 1);
        assert_eq!(dir.entries(), 4);
        assert_eq!(dir.bucket_of(&[0; 32]).map(|(_, m)| m.slot), Some(2));
        // Removed and added at once: replaced.
        dir.apply(&[[1; 32]], vec![([1; 32], meta(3, 2))]);
        assert_eq!(dir.bucket_of(&[9; 32]).map(|(_, m)| m.slot), Some(3));
        dir.apply(&[[1; 32]], Vec::new());
        assert!(dir.bucket_of(&[9; 32]).is_none() && dir.buckets() == 0);
    }
}
