//! Which slot of the pages file holds which page, in 8 bytes of RAM per entry.
//!
//! An entry is a 32-bit fingerprint of the page id and the slot. A lookup yields
//! the slots whose fingerprint matches (almost always one); the page read from a
//! slot names itself, so a false match costs one wasted read and never a wrong
//! page. The fingerprint's seed is drawn at open, so nobody can aim page ids at
//! one fingerprint.

use crate::trie::page_id::PageId;

/// Slots per table before it doubles: 70% full at most.
const MAX_LOAD_NUM: usize = 7;
const MAX_LOAD_DEN: usize = 10;

pub(super) struct SlotIndex {
    /// 0 = empty; else fingerprint << 32 | (slot + 1).
    table: Vec<u64>,
    len: usize,
    seed: u64,
}

impl SlotIndex {
    pub(super) fn new(seed: u64) -> SlotIndex {
        SlotIndex {
            table: vec![0; 1024],
            len: 0,
            seed,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of RAM the table takes.
    pub(super) fn bytes(&self) -> usize {
        self.table.len() * 8
    }

    fn fingerprint(&self, id: &PageId) -> u32 {
        twox_hash::XxHash3_64::oneshot_with_seed(self.seed, &id.encode()) as u32
    }

    fn home(&self, fp: u32) -> usize {
        ((fp as u64 * self.table.len() as u64) >> 32) as usize
    }

    /// The slots that may hold `id`, best first.
    pub(super) fn candidates(&self, id: &PageId) -> impl Iterator<Item = u32> + '_ {
        let fp = self.fingerprint(id);
        let mask = self.table.len() - 1;
        let start = self.home(fp);
        (0..self.table.len())
            .map(move |i| self.table[(start + i) & mask])
            .take_while(|&e| e != 0)
            .filter(move |&e| (e >> 32) as u32 == fp)
            .map(|e| (e as u32) - 1)
    }

    pub(super) fn insert(&mut self, id: &PageId, slot: u32) {
        if (self.len + 1) * MAX_LOAD_DEN > self.table.len() * MAX_LOAD_NUM {
            self.grow();
        }
        let fp = self.fingerprint(id);
        self.place((fp as u64) << 32 | (slot as u64 + 1));
        self.len += 1;
    }

    /// Records that page `id` moved from slot `old` to slot `new`.
    pub(super) fn replace(&mut self, id: &PageId, old: u32, new: u32) {
        let fp = self.fingerprint(id);
        let entry = (fp as u64) << 32 | (old as u64 + 1);
        let mask = self.table.len() - 1;
        let mut i = self.home(fp);
        loop {
            match self.table[i] {
                e if e == entry => {
                    self.table[i] = (fp as u64) << 32 | (new as u64 + 1);
                    return;
                }
                0 => break,
                _ => i = (i + 1) & mask,
            }
        }
        // Not indexed at `old`: as a remove then an insert would leave it.
        self.insert(id, new);
    }

    /// Forgets that `slot` holds `id`.
    pub(super) fn remove(&mut self, id: &PageId, slot: u32) {
        let fp = self.fingerprint(id);
        let entry = (fp as u64) << 32 | (slot as u64 + 1);
        let mask = self.table.len() - 1;
        let mut i = self.home(fp);
        while self.table[i] != entry {
            if self.table[i] == 0 {
                return;
            }
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: pull later entries of the run into the hole
        // when their home allows it, so probes never stop early.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while self.table[j] != 0 {
            let home = self.home((self.table[j] >> 32) as u32);
            let distance_home = j.wrapping_sub(home) & mask;
            let distance_hole = j.wrapping_sub(hole) & mask;
            if distance_home >= distance_hole {
                self.table[hole] = self.table[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.table[hole] = 0;
        self.len -= 1;
    }

    fn place(&mut self, entry: u64) {
        let mask = self.table.len() - 1;
        let mut i = self.home((entry >> 32) as u32);
        while self.table[i] != 0 {
            i = (i + 1) & mask;
        }
        self.table[i] = entry;
    }

    fn grow(&mut self) {
        let doubled = vec![0; self.table.len() * 2];
        let old = std::mem::replace(&mut self.table, doubled);
        for e in old.into_iter().filter(|&e| e != 0) {
            self.place(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn id(n: u32) -> PageId {
        let mut id = PageId::ROOT;
        for i in 0..4 {
            id = id.child(((n >> (6 * i)) & 63) as u8).unwrap();
        }
        id
    }

    #[test]
    fn agrees_with_a_map_through_inserts_replaces_and_removes() {
        let mut index = SlotIndex::new(42);
        let mut model = HashMap::new();
        let mut rng = crate::test_support::Rng(7);
        for step in 0..50_000u32 {
            let r = rng.next();
            let n = (r % 20_000) as u32;
            match model.get(&n).copied() {
                Some(slot) if r & 0x100 != 0 => {
                    index.remove(&id(n), slot);
                    model.remove(&n);
                }
                Some(slot) if r & 0x200 != 0 => {
                    index.replace(&id(n), slot, step);
                    model.insert(n, step);
                }
                Some(_) => {}
                None => {
                    index.insert(&id(n), step);
                    model.insert(n, step);
                }
            }
        }
        assert_eq!(index.len(), model.len());
        let mut false_candidates = 0;
        for n in 0..20_000u32 {
            let found: Vec<u32> = index.candidates(&id(n)).collect();
            match model.get(&n) {
                // Exactly its one slot: a replaced slot must not linger.
                Some(slot) => assert_eq!(found, vec![*slot], "page {n}"),
                None => false_candidates += found.len(),
            }
        }
        // 32-bit fingerprints: a false candidate among ~10k absent ids is a 1e-5 event.
        assert!(false_candidates <= 1, "{false_candidates} false candidates");
        // Few bytes per page: the table never more than ~3x the entries' 8 bytes.
        assert!(index.bytes() <= index.len() * 8 * 3 + 8192);
    }
}
