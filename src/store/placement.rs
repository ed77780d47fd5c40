//! Where a plan puts new blocks, so the disk takes a commit's writes as a few
//! long runs instead of one request a block.
//!
//! Each slotted file is cut into regions of [`Placement::region_slots`]
//! slots. A plan fills one region at a time, through its free slots in
//! ascending order: the lowest wholly free region first, else the next
//! region with free slots after the one the last plan filled, wrapping at
//! the end. The file keeps [`Placement::spare_percent`] of its slots free
//! before it grows, and since the search goes round the file, a region is
//! filled again only once every other has been: it has meanwhile lost the
//! blocks later commits rewrote, so the spare share buys runs of several
//! blocks without moving any. With [`Placement::cleaning`], a commit also
//! cleans: it picks the regions with the fewest used slots and moves their
//! blocks out (the stores rewrite them unchanged, into a region of their
//! own, apart from fresh blocks), so that by the next commit those regions
//! are wholly free: runs of whole regions, for the moved bytes.
//!
//! Owns a file's free slots as a plan sees them and the choice of regions.
//! May not read or write blocks, nor know what they hold: the page store and
//! the value store move the blocks it names, within their plans, so a move
//! is published (and survives a crash) exactly like a commit's own writes.

use std::collections::VecDeque;

use bitvec::order::Lsb0;
use bitvec::vec::BitVec;

use super::slot_number;
use crate::Error;

/// Commits whose freed slots stay untouched after the commit that freed them
/// is durable. 0: a slot freed by commit `n` may be written by commit `n + 1`
/// (commits are durable one at a time, so never before `n` is). The history
/// keeps older commits readable by their old values instead (`db::history`),
/// so no block is held back for it.
pub(crate) const RETAINED_COMMITS: u64 = 0;

/// How a file's slots are placed: fixed per open, not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Slots per region: 512 is 2 MiB, a run the disk takes at its
    /// sequential rate.
    pub(crate) region_slots: u32,
    /// Share of the file, in percent, kept free before it grows.
    pub(crate) spare_percent: u8,
    /// Whether commits move blocks out of the emptiest regions, so that
    /// later ones find wholly free regions.
    pub(crate) cleaning: bool,
    /// The most used slots in a row between two of a plan's writes that
    /// the plan writes again, unchanged, from RAM, so the two go out as one
    /// run (0: none). The stores decide which they can.
    pub(crate) rewrite_gap: u32,
}

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            region_slots: 512,
            spare_percent: 20,
            cleaning: false,
            rewrite_gap: 2,
        }
    }
}

/// Whose blocks an allocation places: each fills a region of its own, so
/// blocks that live long (moved by the cleaner) do not share regions with
/// fresh ones, most of which the next commits free again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    /// A commit's new and changed blocks.
    Fresh = 0,
    /// Blocks the cleaner moves.
    Moved = 1,
}

/// A file's free slots and length, as a plan allocates them.
///
/// A plan works on a copy; the copy becomes the published one once its
/// commit is durable. A slot a commit frees becomes free only
/// [`RETAINED_COMMITS`] commits after that commit is durable.
#[derive(Clone, Debug)]
pub(crate) struct SlotSpace {
    placement: Placement,
    /// One bit a slot, set when free; whole regions, so slots past the
    /// file's length in its last region count as free.
    free: BitVec<u64, Lsb0>,
    /// Free slots of each region.
    free_in: Vec<u32>,
    free_total: u64,
    /// Per stream, the next slot to look at in the region it fills.
    cursors: [Option<u64>; 2],
    /// Regions this plan cleans: nothing is placed in them.
    cleaning: Vec<u32>,
    /// Where the search for a wholly free region resumes: no region below
    /// holds one until a publish frees slots, so `release` resets it.
    wholly_free_from: u32,
    /// Where the search for a region with free slots resumes, kept from
    /// plan to plan so the plans go round the file.
    round_from: u32,
    /// Slots this plan allocated.
    allocated: u64,
    /// Slots freed by recent commits and not yet reusable, oldest first.
    held: VecDeque<(u64, Vec<u32>)>,
    length: u64,
}

impl SlotSpace {
    /// A file of `length` blocks with `free` slots, placed by `placement`.
    pub(crate) fn new(length: u64, free: Vec<u32>, placement: Placement) -> SlotSpace {
        let region = u64::from(placement.region_slots.max(1));
        let regions = length.div_ceil(region);
        let mut space = SlotSpace {
            placement: Placement {
                region_slots: region as u32,
                ..placement
            },
            free: BitVec::repeat(false, (regions * region) as usize),
            free_in: vec![0; regions as usize],
            free_total: 0,
            cursors: [None; 2],
            cleaning: Vec::new(),
            wholly_free_from: 0,
            round_from: 0,
            allocated: 0,
            held: VecDeque::new(),
            length,
        };
        for slot in free
            .into_iter()
            .map(u64::from)
            .chain(length..regions * region)
        {
            space.mark_free(slot);
        }
        // No commit seen yet: as if the last wrote half the free slots
        // (about a commit's writes where the spare share is sized for
        // runs), so the first commits after an open find regions cleaned
        // for them as later ones do.
        space.choose_victims(space.free_total / 2);
        space
    }

    fn region_slots(&self) -> u64 {
        u64::from(self.placement.region_slots)
    }

    fn regions(&self) -> u32 {
        self.free_in.len() as u32
    }

    fn mark_free(&mut self, slot: u64) {
        let i = slot as usize;
        if i < self.free.len() && !self.free[i] {
            self.free.set(i, true);
            let r = (slot / self.region_slots()) as usize;
            self.free_in[r] += 1;
            self.free_total += 1;
        }
    }

    /// A free slot for `stream`'s next block: the next one up in the region
    /// it fills, or the first of another region.
    pub(crate) fn allocate(&mut self, stream: Stream) -> Result<u32, Error> {
        let region = self.region_slots();
        loop {
            if let Some(from) = self.cursors[stream as usize] {
                let end = (from / region + 1) * region;
                let next = self.free[from as usize..end as usize].first_one();
                if let Some(offset) = next {
                    let slot = from + offset as u64;
                    let number = slot_number(slot)?;
                    self.free.set(slot as usize, false);
                    self.free_in[(slot / region) as usize] -= 1;
                    self.free_total -= 1;
                    self.allocated += 1;
                    self.length = self.length.max(slot + 1);
                    self.cursors[stream as usize] = (slot + 1 < end).then_some(slot + 1);
                    return Ok(number);
                }
            }
            let chosen = self.choose();
            self.cursors[stream as usize] = Some(u64::from(chosen) * region);
        }
    }

    /// Whether a region is open for a stream or being cleaned.
    fn busy(&self, r: u32) -> bool {
        let region = self.region_slots();
        self.cleaning.contains(&r)
            || self
                .cursors
                .iter()
                .flatten()
                .any(|&c| c / region == u64::from(r))
    }

    /// The region a stream fills next: the lowest wholly free one; else a
    /// new one at the end while the file keeps less than its spare share
    /// free; else the next with a free slot after the last one chosen,
    /// round the file. Going round keeps a commit's writes ascending
    /// (this disk took that faster than the same requests in the order of
    /// the emptiest regions) and gives each region the longest time to
    /// lose blocks before it is filled again: as many free slots where the
    /// plan writes as taking the emptiest, without keeping regions sorted.
    fn choose(&mut self) -> u32 {
        let full = self.placement.region_slots;
        // Within a plan regions only fill, so the scans resume where the
        // last ones stopped.
        let wholly_free = (self.wholly_free_from..self.regions())
            .find(|&r| self.free_in[r as usize] == full && !self.busy(r));
        if let Some(r) = wholly_free {
            self.wholly_free_from = r;
            return r;
        }
        self.wholly_free_from = self.regions();
        if self.below_spare() {
            return self.grow();
        }
        let from = self.round_from.min(self.regions());
        let partly_free = (from..self.regions())
            .chain(0..from)
            .find(|&r| self.free_in[r as usize] > 0 && !self.busy(r));
        match partly_free {
            Some(r) => {
                self.round_from = r;
                r
            }
            None => self.grow(),
        }
    }

    /// Whether fewer slots are free than the spare share of the file. The
    /// plan's own allocations count as used: the share is what stays free
    /// beside a commit's writes, for the next commit's runs and the
    /// cleaner's room.
    fn below_spare(&self) -> bool {
        let capacity = u64::from(self.regions()) * self.region_slots();
        self.free_total * 100 < capacity * u64::from(self.placement.spare_percent)
    }

    /// Adds a wholly free region past the end.
    fn grow(&mut self) -> u32 {
        let r = self.regions();
        let region = self.region_slots() as usize;
        self.free.resize(self.free.len() + region, true);
        self.free_in.push(region as u32);
        self.free_total += region as u64;
        r
    }

    /// Chooses the regions the next plan cleans, so that the commit after
    /// it, if it writes as much as the last one (`last` slots, moves
    /// included), finds wholly free regions: the regions with the fewest
    /// used slots, while their blocks number at most half of `last` (so a
    /// commit moves at most as many blocks as it writes of its own) and
    /// fit, beside `last` fresh blocks and the
    /// victims' own free slots, in the file's free slots: a move never
    /// grows the file. Chosen at publish, so their blocks can be read into
    /// RAM before the next commit moves them ([`SlotSpace::victims`]).
    fn choose_victims(&mut self, last: u64) {
        self.cleaning.clear();
        // No spare share, no runs to clean for: moves would only add
        // writes (3,000 a commit at 2^22 accounts, for runs of 2 blocks).
        if !self.placement.cleaning || self.placement.spare_percent == 0 {
            return;
        }
        let region = self.region_slots();
        let full = self.placement.region_slots;
        let wholly_free = (0..self.regions())
            .filter(|&r| self.free_in[r as usize] == full && !self.busy(r))
            .count() as u64;
        // The next commit takes the wholly free regions there are now; the
        // ones cleaned now serve the commit after it, which then needs as
        // many again (with room for the moves' own region). Aiming at the
        // next commit alone left every other commit to scattered slots: it
        // found the regions its predecessor had just emptied used up.
        let mut short = (2 * last + region).saturating_sub(wholly_free * region);
        let mut budget = last / 2;
        let mut room = self.free_total.saturating_sub(last);
        let mut victims: Vec<(u32, u32)> = (0..self.regions())
            .map(|r| (full - self.free_in[r as usize], r))
            .filter(|&(used, r)| used > 0 && used < full && !self.busy(r))
            .collect();
        victims.sort_unstable();
        for (used, r) in victims {
            let locked = u64::from(full - used);
            let used = u64::from(used);
            if short == 0 || used > budget || locked + used > room {
                break;
            }
            budget -= used;
            room -= locked + used;
            short = short.saturating_sub(locked);
            self.cleaning.push(r);
        }
    }

    /// The used slots of the regions chosen for cleaning: a plan moves out
    /// each block it finds live there and does not rewrite already. Nothing
    /// is placed in those regions until the plan is published.
    pub(crate) fn victims(&self) -> Vec<u32> {
        let region = self.region_slots();
        let mut slots = Vec::new();
        for &r in &self.cleaning {
            let start = u64::from(r) * region;
            let bits = &self.free[start as usize..(start + region) as usize];
            slots.extend(bits.iter_zeros().map(|i| (start + i as u64) as u32));
        }
        slots
    }

    /// Records the slots durable commit `seqno` freed; they (and any held
    /// longer than the window) become free once `RETAINED_COMMITS` more
    /// commits are durable; then chooses the regions the next plan cleans.
    pub(crate) fn release(&mut self, seqno: u64, slots: Vec<u32>) {
        self.cleaning.clear();
        self.wholly_free_from = 0;
        let last = std::mem::take(&mut self.allocated);
        self.held.push_back((seqno, slots));
        while let Some((freed_by, _)) = self.held.front() {
            if freed_by + RETAINED_COMMITS > seqno {
                break;
            }
            if let Some((_, slots)) = self.held.pop_front() {
                for slot in slots {
                    self.mark_free(slot.into());
                }
            }
        }
        self.choose_victims(last);
    }

    /// The file's length in blocks.
    pub(crate) fn length(&self) -> u64 {
        self.length
    }

    /// Regions of the file and how many are wholly free.
    #[cfg(test)]
    pub(crate) fn regions_free(&self) -> (u32, u32) {
        let full = self.placement.region_slots;
        let free = self.free_in.iter().filter(|&&f| f == full).count() as u32;
        (self.regions(), free)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(region_slots: u32, spare_percent: u8, cleaning: bool) -> Placement {
        Placement {
            region_slots,
            spare_percent,
            cleaning,
            rewrite_gap: 0,
        }
    }

    #[test]
    fn a_plan_fills_a_wholly_free_region_before_scattered_slots() {
        // Region 0 has scattered holes, region 1 is wholly free.
        let free = vec![1, 3, 8, 9, 10, 11, 12, 13, 14, 15];
        let mut space = SlotSpace::new(16, free, placed(8, 0, false));
        let got: Vec<u32> = (0..9)
            .map(|_| space.allocate(Stream::Fresh).unwrap())
            .collect();
        assert_eq!(got, vec![8, 9, 10, 11, 12, 13, 14, 15, 1]);
        assert_eq!(space.length(), 16);
    }

    #[test]
    fn the_file_grows_by_a_region_while_below_its_spare_share() {
        let free = vec![3];
        let mut space = SlotSpace::new(16, free.clone(), placed(8, 25, false));
        // 1 of 16 free is below 25%: a new region, in order.
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 16);
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 17);
        assert_eq!(space.length(), 18);
        // Without a spare share, the hole is used first.
        let mut space = SlotSpace::new(16, free, placed(8, 0, false));
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 3);
    }

    #[test]
    fn moved_blocks_fill_a_region_apart_from_fresh_ones() {
        let mut space = SlotSpace::new(0, Vec::new(), placed(4, 0, false));
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 0);
        assert_eq!(space.allocate(Stream::Moved).unwrap(), 4);
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 1);
        assert_eq!(space.allocate(Stream::Moved).unwrap(), 5);
    }

    #[test]
    fn cleaning_names_the_emptiest_regions_and_places_nothing_there() {
        // Region 0 has one block used, region 1 three, region 2 four;
        // regions 3 and 4 are wholly free.
        let free = vec![1, 2, 3, 7, 12, 13, 14, 15, 16, 17, 18, 19];
        // Without a spare share there are no runs to clean for.
        assert!(SlotSpace::new(20, free.clone(), placed(4, 0, true))
            .victims()
            .is_empty());
        // Nor without cleaning.
        assert!(SlotSpace::new(20, free.clone(), placed(4, 25, false))
            .victims()
            .is_empty());
        let mut space = SlotSpace::new(20, free, placed(4, 25, true));
        // An open cleans for its first commit too.
        assert_eq!(space.victims(), vec![0]);
        let fresh: Vec<u32> = (0..4)
            .map(|_| space.allocate(Stream::Fresh).unwrap())
            .collect();
        assert_eq!(fresh, vec![12, 13, 14, 15]);
        // Published: four allocations allow two moves, so region 0's one
        // block is named, not region 1's three.
        space.release(1, Vec::new());
        assert_eq!(space.victims(), vec![0]);
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 16);
        assert_eq!(space.allocate(Stream::Moved).unwrap(), 7);
        // The move published, region 0 is wholly free.
        space.release(2, vec![0]);
        assert_eq!(space.regions_free(), (5, 1));
    }

    #[test]
    fn a_freed_slot_waits_for_its_commit() {
        let mut space = SlotSpace::new(4, Vec::new(), placed(4, 0, false));
        // A plan is a copy: slots it frees are not free to itself.
        let mut plan = space.clone();
        assert_eq!(plan.allocate(Stream::Fresh).unwrap(), 4);
        space = plan;
        space.release(1, vec![2]);
        // The region being filled first, then the freed slot.
        let next: Vec<u32> = (0..4)
            .map(|_| space.allocate(Stream::Fresh).unwrap())
            .collect();
        assert_eq!(RETAINED_COMMITS, 0);
        assert_eq!(next, vec![5, 6, 7, 2]);
    }

    /// Commits that each free `per_commit` random live blocks and write as
    /// many, the cleaner's victims moved as the stores move them; returns
    /// each commit's fresh blocks per run of consecutive slots.
    fn simulate(placement: Placement, live: u32, per_commit: usize, commits: usize) -> Vec<f64> {
        let mut space = SlotSpace::new(0, Vec::new(), placement);
        let mut used: Vec<u32> = (0..live)
            .map(|_| space.allocate(Stream::Fresh).unwrap())
            .collect();
        space.release(0, Vec::new());
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut random = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut runs = Vec::new();
        for seqno in 1..=commits as u64 {
            let mut freed = Vec::new();
            let victims = space.victims();
            for slot in &victims {
                let at = used.iter().position(|s| s == slot).unwrap();
                used[at] = space.allocate(Stream::Moved).unwrap();
                freed.push(*slot);
            }
            let mut fresh = Vec::new();
            for _ in 0..per_commit {
                let at = random(used.len());
                freed.push(used[at]);
                used[at] = space.allocate(Stream::Fresh).unwrap();
                fresh.push(used[at]);
            }
            fresh.sort_unstable();
            let breaks = fresh.windows(2).filter(|w| w[1] != w[0] + 1).count();
            runs.push(fresh.len() as f64 / (breaks + 1) as f64);
            space.release(seqno, freed);
        }
        runs
    }

    #[test]
    fn cleaning_a_commit_ahead_gives_every_commit_long_runs() {
        // Regions of 64, 4096 live blocks, a tenth rewritten a commit, a
        // third of the file spare: once the file has settled, every commit
        // writes whole regions. Cleaning only for the next commit left
        // the commits to scattered slots (runs of about 3).
        let runs = simulate(placed(64, 33, true), 4096, 410, 60);
        let settled = &runs[20..];
        let worst = settled.iter().copied().fold(f64::INFINITY, f64::min);
        assert!(worst >= 32.0, "fresh blocks per run: {runs:?}");
    }

    #[test]
    fn a_plan_looks_for_free_slots_after_the_region_the_last_one_filled() {
        // Three regions of 4, a hole in each.
        let mut space = SlotSpace::new(12, vec![1, 5, 9], placed(4, 0, false));
        assert_eq!(space.allocate(Stream::Fresh).unwrap(), 1);
        // Published, with slot 0 freed: the next plan goes on from slot 2,
        // round the file.
        space.release(1, vec![0]);
        let next: Vec<u32> = (0..3)
            .map(|_| space.allocate(Stream::Fresh).unwrap())
            .collect();
        assert_eq!(next, vec![5, 9, 0]);
    }

    #[test]
    fn going_round_the_file_gives_runs_without_moving_a_block() {
        // As the cleaning simulation, without cleaning: nothing is moved
        // (`simulate` moves the victims), and a spare share lengthens the
        // runs, since each region has lost blocks for a whole round of the
        // file by the time it is filled again.
        let settled = |spare| {
            let runs = simulate(placed(64, spare, false), 4096, 410, 60);
            runs[20..].iter().sum::<f64>() / 40.0
        };
        let (none, some) = (settled(0), settled(40));
        assert!(none < 1.5, "fresh blocks per run at spare 0: {none}");
        assert!(some > 3.0, "fresh blocks per run at spare 40: {some}");
    }
}
