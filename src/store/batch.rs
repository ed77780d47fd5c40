//! What a commit hands the store: the blocks it writes (some started early),
//! the slots it frees, the files' lengths and its log records' payloads; and
//! the blocks it wrote, handed back for the caches.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::Notes;
use crate::block::{BlockBuf, IoBuf};
use crate::io::Writes;
use crate::trie::Node;
use crate::Error;

/// Number of data files a commit writes blocks to.
pub(crate) const TARGETS: usize = 3;

/// A data file a commit writes blocks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub(crate) enum Target {
    /// Trie pages.
    Pages = 0,
    /// Value-store buckets.
    Buckets = 1,
    /// Values too large for a bucket.
    Overflow = 2,
}

impl Target {
    pub(crate) const ALL: [Target; TARGETS] = [Target::Pages, Target::Buckets, Target::Overflow];

    pub(super) fn file_name(self) -> &'static str {
        match self {
            Target::Pages => "pages",
            Target::Buckets => "buckets",
            Target::Overflow => "overflow",
        }
    }
}

/// Block `index` of a target file as a slot number. Slots are `u32`, so a
/// file of more blocks is full: `FileTooLarge`, never a wrapped number.
pub(crate) fn slot_number(index: u64) -> Result<u32, Error> {
    u32::try_from(index).map_err(|_| Error::Io {
        doing: "growing",
        file: None,
        source: std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            "a data file reached 2^32 blocks",
        ),
    })
}

/// [`slot_number`] for a block found in a file at open, where a number past
/// `u32` can only come from damage.
pub(crate) fn stored_slot(index: u64) -> Result<u32, Error> {
    u32::try_from(index).map_err(|_| Error::corrupt("data file longer than 2^32 blocks"))
}

/// One block a commit writes.
pub(crate) struct BlockWrite {
    pub(crate) target: Target,
    pub(crate) index: u64,
    pub(crate) block: IoBuf,
}

/// How many items one of a commit's buffers reached, so the next commit's
/// starts with room for them instead of doubling its way there: at 2^24
/// accounts a batch's notes reached 10 MB through buffers of 1, 2, 4, 8 and
/// 16 MB, and glibc keeps such freed halves in the arena of the thread that
/// grew them.
#[derive(Default)]
pub(crate) struct LastSize(AtomicUsize);

impl LastSize {
    /// Room for the next commit's buffer: a quarter more than the last
    /// reached, since one that outgrows its room is copied into one twice as
    /// large.
    pub(crate) fn room(&self) -> usize {
        let last = self.0.load(Ordering::Relaxed);
        last + last / 4
    }

    /// The size a commit's buffer reached.
    pub(crate) fn record(&self, items: usize) {
        self.0.store(items, Ordering::Relaxed);
    }
}

/// Everything one commit changes.
pub(crate) struct Batch {
    pub(crate) root: Node,
    /// Blocks to write, each to a slot the durable state does not use.
    pub(crate) writes: Vec<BlockWrite>,
    /// Rewrites: the very bytes a slot the durable state uses holds, written
    /// again between a commit's writes so that the disk takes them as one
    /// run. What the slot holds never changes, before, during or after the
    /// write, torn or not, so the commit protocol is untouched; they are no
    /// part of the slot map, the catalog or the blocks handed back.
    pub(crate) rewrites: Vec<BlockWrite>,
    /// Slots of `pages` and `buckets` the durable state uses and the commit
    /// stops using.
    pub(crate) freed: Vec<(Target, u32)>,
    /// Each target file's length in blocks after the commit.
    pub(crate) lengths: [u64; TARGETS],
    /// Writes started before the batch was complete ([`super::Store::write_early`]).
    pub(crate) early: Option<Prewritten>,
    /// The catalog note of each page and bucket written, so open can index
    /// them without reading them.
    pub(crate) notes: Notes,
    /// The commit's history record, if history is kept (see
    /// [`super::Store::read_history`]).
    pub(crate) history: Option<Vec<u8>>,
    /// Room for the places of its early writes, from the batch before it.
    pub(super) places_room: usize,
}

/// Where a started write goes; a rewrite's block comes back too, unused.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) target: Target,
    pub(super) index: u64,
    pub(super) rewrite: bool,
}

/// Block writes started ahead of their commit, so the disk works while the
/// rest of the commit is computed. Dropped without a commit, they are waited
/// for, and the slots they wrote stay free.
pub(crate) struct Prewritten {
    pub(super) places: Vec<Place>,
    /// One per [`super::Store::write_early`], in order.
    pub(super) pending: Vec<Writes>,
    /// Prewrites alive in the store: a commit may not run beside one it does
    /// not include, whose writes could land on blocks the commit uses.
    pub(super) alive: Arc<AtomicUsize>,
}

impl Prewritten {
    /// Waits for every write; the blocks come back in the order of `places`.
    pub(super) fn wait(&mut self) -> Result<Vec<IoBuf>, Error> {
        let mut blocks = Vec::with_capacity(self.places.len());
        let mut first_error = None;
        for pending in std::mem::take(&mut self.pending) {
            match pending.wait() {
                Ok(done) => blocks.extend(done),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(blocks), Err)
    }
}

impl Drop for Prewritten {
    fn drop(&mut self) {
        // Waits for the writes first.
        self.pending.clear();
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The blocks a commit wrote, sorted by target and index.
pub(crate) struct Written(pub(super) Vec<BlockWrite>);

impl Written {
    /// The blocks written to `target` from blocks of their own (not shared),
    /// by slot, ascending. Only for `pages` and `buckets`, whose slots are
    /// u32 by construction.
    pub(crate) fn take(&mut self, target: Target) -> Vec<(u32, BlockBuf)> {
        // Sized first: a hundred thousand blocks a commit, pushed one by one,
        // went through a doubling buffer's copies.
        let n = self.0.iter().filter(|w| w.target == target).count();
        let mut mine = Vec::with_capacity(n);
        for w in self.0.extract_if(.., |w| w.target == target) {
            if let (Ok(slot), IoBuf::Owned(block)) = (u32::try_from(w.index), w.block) {
                mine.push((slot, block));
            }
        }
        mine
    }
}

impl Batch {
    /// Adds a store's plan so far: its `writes` (moved out), the slots of
    /// `target` it frees, and the file's `length` after it. Plans stage part
    /// by part, each part's writes and frees once.
    pub(crate) fn stage(
        &mut self,
        target: Target,
        writes: &mut Vec<BlockWrite>,
        freed: impl IntoIterator<Item = u32>,
        length: u64,
    ) {
        self.writes.append(writes);
        self.freed
            .extend(freed.into_iter().map(|slot| (target, slot)));
        self.lengths[target as usize] = length;
    }

    /// A commit of root `root` that changes nothing yet, on files of `lengths`.
    pub(crate) fn new(root: Node, lengths: [u64; TARGETS]) -> Batch {
        Batch {
            root,
            writes: Vec::new(),
            rewrites: Vec::new(),
            freed: Vec::new(),
            lengths,
            early: None,
            notes: Notes::default(),
            history: None,
            places_room: 0,
        }
    }
}
