//! Which bucket holds a key, and whether it may: the value store's RAM summary.
//!
//! Buckets hold contiguous key ranges; the directory maps each bucket's smallest
//! key to its slot and a 16-bit fingerprint per entry. A key belongs to the bucket
//! with the greatest smallest-key not above it (the first bucket for keys below
//! all), so every key has exactly one bucket and a lookup costs no I/O; a key
//! whose fingerprint the bucket lacks is absent without a read.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::bytes::Cursor;
use crate::trie::{KeyPath, KeyWords};

pub(super) struct BucketMeta {
    pub(super) slot: u32,
    fingerprints: Box<[u16]>,
}

/// A bucket as its catalog note describes it.
pub(super) struct Noted {
    pub(super) min: KeyPath,
    pub(super) meta: BucketMeta,
    /// The overflow extents (start, blocks) its values use.
    pub(super) extents: Vec<(u64, u64)>,
}

/// Bytes read from the front of a note.
pub(super) struct Directory {
    map: BTreeMap<KeyWords, BucketMeta>,
    seed: u64,
    entries: usize,
}

impl Directory {
    pub(super) fn new(seed: u64) -> Directory {
        Directory {
            map: BTreeMap::new(),
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
        self.map.len()
    }

    /// Bytes of RAM the summary takes, counting B-tree overhead at 1.5x.
    pub(super) fn ram_bytes(&self) -> usize {
        let per_bucket = (32 + std::mem::size_of::<BucketMeta>()) * 3 / 2 + 16;
        self.map.len() * per_bucket + self.entries * 2
    }

    /// The bucket `key` belongs to: its smallest key and summary.
    pub(super) fn bucket_of(&self, key: &KeyPath) -> Option<(KeyPath, &BucketMeta)> {
        self.bucket_at(&KeyWords::new(key))
            .map(|(min, meta)| (min.key(), meta))
    }

    fn bucket_at(&self, key: &KeyWords) -> Option<(&KeyWords, &BucketMeta)> {
        self.map
            .range(..=key)
            .next_back()
            .or_else(|| self.map.iter().next())
    }

    /// The bucket after the one whose smallest key is `min`: smallest key and slot.
    pub(super) fn successor(&self, min: &KeyPath) -> Option<(KeyPath, u32)> {
        self.map
            .range((Bound::Excluded(KeyWords::new(min)), Bound::Unbounded))
            .next()
            .map(|(k, meta)| (k.key(), meta.slot))
    }

    /// Up to `count` buckets in key order from the one `key` belongs to: their
    /// slots, and the smallest key of the bucket after them (`None`: they
    /// reach the last bucket).
    pub(super) fn run_from(&self, key: &KeyPath, count: usize) -> (Vec<u32>, Option<KeyPath>) {
        let Some((first, _)) = self.bucket_at(&KeyWords::new(key)) else {
            return (Vec::new(), None);
        };
        let mut run = self.map.range(first..);
        let slots = run
            .by_ref()
            .take(count)
            .map(|(_, meta)| meta.slot)
            .collect();
        (slots, run.next().map(|(min, _)| min.key()))
    }

    /// Every bucket's smallest key, slot and entry count, in key order.
    pub(super) fn sizes(&self) -> impl Iterator<Item = (KeyPath, u32, usize)> + '_ {
        self.map
            .iter()
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
        let first = self.bucket_at(&at).map(|(min, meta)| (*min, meta.slot));
        let later = self
            .map
            .range((Bound::Excluded(at), Bound::Unbounded))
            .take_while(|(min, _)| crate::trie::shares_prefix(&min.key(), prefix, depth))
            .map(|(min, meta)| (*min, meta.slot));
        let mut slots: Vec<(KeyWords, u32)> = first.into_iter().chain(later).collect();
        slots.dedup();
        slots.into_iter().map(|(_, slot)| slot).collect()
    }

    /// The summary of the bucket in `slot` holding `keys` (non-empty, sorted):
    /// its smallest key and what [`Directory::insert_summary`] adds. Computed
    /// while a commit plans, so that publishing (which readers wait for) only
    /// installs it.
    pub(super) fn summarize<'k>(
        &self,
        slot: u32,
        keys: impl Iterator<Item = &'k KeyPath>,
    ) -> (KeyPath, BucketMeta) {
        let mut min = None;
        let fingerprints = keys
            .inspect(|k| {
                min.get_or_insert(**k);
            })
            .map(|k| self.fingerprint(k))
            .collect();
        (min.unwrap_or_default(), BucketMeta { slot, fingerprints })
    }

    /// Adds a bucket summarized by [`Directory::summarize`], in place of the
    /// one with the same smallest key if there is one.
    pub(super) fn insert_summary(&mut self, min: KeyPath, meta: BucketMeta) {
        self.entries += meta.fingerprints.len();
        if let Some(old) = self.map.insert(KeyWords::new(&min), meta) {
            self.entries -= old.fingerprints.len();
        }
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
        (n > 0 && r.remaining() == 0).then_some(Noted {
            min,
            meta: BucketMeta { slot, fingerprints },
            extents,
        })
    }

    /// Drops the bucket whose smallest key is `min`.
    pub(super) fn remove(&mut self, min: &KeyPath) {
        if let Some(meta) = self.map.remove(&KeyWords::new(min)) {
            self.entries -= meta.fingerprints.len();
        }
    }
}
