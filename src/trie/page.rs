//! The 4 KiB page: a rootless subtree six levels deep plus 64 bytes of metadata
//! (byte layout in docs/format.md).

use super::node::{bit_at, KeyPath, Node};
use super::page_id::{PageId, PAGE_DEPTH};
use crate::block::{Block, BlockBuf, SharedBlock, BLOCK_SIZE};
use crate::Error;

/// Bytes in a page: one block.
pub const PAGE_SIZE: usize = BLOCK_SIZE;

/// Node cells in a page: 2 + 4 + ... + 64.
pub const NODES_PER_PAGE: usize = (1 << (PAGE_DEPTH + 1)) - 2;

/// The first of the 64 bottom cells, whose nodes root the child pages.
pub const FIRST_BOTTOM_CELL: usize = NODES_PER_PAGE - 64;

const ID: usize = NODES_PER_PAGE * 32;
const ELIDED: usize = ID + 32;
const LEAVES: usize = ELIDED + 8;
const MAGIC: usize = LEAVES + 8;
const VERSION: usize = MAGIC + 4;
const CHECKSUM: usize = PAGE_SIZE - 8;
const MAGIC_BYTES: [u8; 4] = *b"ptpg";
const FORMAT_VERSION: u16 = 2;

/// Slot of the node `rel_depth` levels below the page's root position (1 to 6)
/// whose path from there is the `rel_depth`-bit number `bits`.
pub fn cell(rel_depth: usize, bits: usize) -> usize {
    debug_assert!((1..=PAGE_DEPTH).contains(&rel_depth) && bits < 1 << rel_depth);
    (1 << rel_depth) - 2 + bits
}

/// Slot of the node at `depth` on `key`'s path, in the page [`PageId::holding`] it.
pub fn cell_on_path(key: &KeyPath, depth: usize) -> usize {
    let root_depth = (depth - 1) / PAGE_DEPTH * PAGE_DEPTH;
    let rel_depth = depth - root_depth;
    let bits = (root_depth..depth).fold(0, |acc, d| acc << 1 | bit_at(key, d) as usize);
    cell(rel_depth, bits)
}

/// The two children of a cell above the bottom row.
pub fn child_cells(cell: usize) -> Option<(usize, usize)> {
    (cell < FIRST_BOTTOM_CELL).then(|| (2 * cell + 2, 2 * cell + 3))
}

/// The child page index (0 to 63) rooted at a bottom-row cell.
pub fn child_page_index(cell: usize) -> Option<u8> {
    (FIRST_BOTTOM_CELL..NODES_PER_PAGE)
        .contains(&cell)
        .then(|| (cell - FIRST_BOTTOM_CELL) as u8)
}

/// One page, in a block ready for O_DIRECT I/O.
#[derive(Clone)]
pub struct Page(BlockBuf);

impl Page {
    /// An all-zero page: every cell a terminator, no metadata.
    pub fn zeroed() -> Page {
        Page(Block::zeroed())
    }

    /// A blank page naming itself `id`: every cell a terminator, no child stored.
    pub fn new(id: &PageId) -> Page {
        let mut page = Page::zeroed();
        page.0 .0[ID..ID + 32].copy_from_slice(&id.encode());
        page.set_elided_children(u64::MAX);
        page
    }

    /// A page over a block read from disk; [`Page::check`] it before trusting it.
    pub fn from_block(block: BlockBuf) -> Page {
        Page(block)
    }

    /// The page's block, to be written to disk.
    pub fn into_block(self) -> BlockBuf {
        self.0
    }

    /// The node in `cell` (below [`NODES_PER_PAGE`]).
    pub fn node(&self, cell: usize) -> Node {
        let mut node = [0u8; 32];
        node.copy_from_slice(&self.0 .0[cell * 32..cell * 32 + 32]);
        node
    }

    /// Stores `node` in `cell`.
    pub fn set_node(&mut self, cell: usize, node: &Node) {
        self.0 .0[cell * 32..cell * 32 + 32].copy_from_slice(node);
    }

    /// The id the page names itself by.
    pub fn id(&self) -> Result<PageId, Error> {
        PageId::decode(&self.0.array(ID))
    }

    /// Bit `i` set: child page `i` is elided (rebuilt from the value store).
    pub fn elided_children(&self) -> u64 {
        self.0.u64_at(ELIDED)
    }

    /// Sets the elided-children bitmap.
    pub fn set_elided_children(&mut self, bits: u64) {
        self.0.put_u64(ELIDED, bits);
    }

    /// Leaves in the subtree under the page's root position: what decides whether
    /// the page is stored at all.
    pub fn leaves(&self) -> u64 {
        self.0.u64_at(LEAVES)
    }

    /// Sets the leaf count.
    pub fn set_leaves(&mut self, leaves: u64) {
        self.0.put_u64(LEAVES, leaves);
    }

    /// Stamps the page with magic, version and checksum; the last step before the
    /// page goes to disk.
    pub fn seal(&mut self) {
        let b = &mut self.0;
        b.0[MAGIC..MAGIC + 4].copy_from_slice(&MAGIC_BYTES);
        b.0[VERSION..VERSION + 2].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let sum = b.checksum(CHECKSUM);
        b.put_u64(CHECKSUM, sum);
    }

    /// Checks a page read from disk: magic, version, checksum, and that it is the
    /// page `expected`.
    pub fn check(&self, expected: &PageId) -> Result<(), Error> {
        if self.verified_id()? != *expected {
            return Err(Error::corrupt("page holds another page id"));
        }
        Ok(())
    }

    /// The id the page names, after checking that it is an intact page: a damaged
    /// page must not pass for another page's.
    pub fn verified_id(&self) -> Result<PageId, Error> {
        if self.0 .0[MAGIC..MAGIC + 4] != MAGIC_BYTES {
            return Err(Error::corrupt("page magic"));
        }
        if self.0 .0[VERSION..VERSION + 2] != FORMAT_VERSION.to_le_bytes() {
            return Err(Error::corrupt("unknown page format version"));
        }
        if self.0.u64_at(CHECKSUM) != self.0.checksum(CHECKSUM) {
            return Err(Error::corrupt("page checksum"));
        }
        self.id()
    }

    /// The page's bytes, as written to disk.
    pub fn as_bytes(&self) -> &[u8; PAGE_SIZE] {
        &self.0 .0
    }
}

// SAFETY: a page owns its block, which stays where it is while the page
// lives, and is changed only through `&mut Page`, which no shared holder has.
unsafe impl SharedBlock for Page {
    fn block(&self) -> &Block {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::node::{hash_leaf, MAX_DEPTH};

    #[test]
    fn cell_arithmetic() {
        assert_eq!(NODES_PER_PAGE, 126);
        assert_eq!(
            (cell(1, 0), cell(1, 1), cell(2, 0), cell(6, 63)),
            (0, 1, 2, 125)
        );
        assert_eq!(child_cells(0), Some((2, 3)));
        assert_eq!(child_cells(61), Some((124, 125)));
        assert_eq!(child_cells(62), None);
        assert_eq!(
            (child_page_index(62), child_page_index(125)),
            (Some(0), Some(63))
        );
        assert_eq!(child_page_index(61), None);
        let key = [0b1011_0111; 32];
        assert_eq!(cell_on_path(&key, 1), cell(1, 1));
        assert_eq!(cell_on_path(&key, 6), cell(6, 0b101101));
        assert_eq!(cell_on_path(&key, 7), cell(1, 1));
        assert_eq!(cell_on_path(&key, MAX_DEPTH), cell(4, 0b0111));
        // A bottom cell's child page is the next page on the path.
        let s = cell_on_path(&key, 12);
        let page = PageId::holding(&key, 12);
        assert_eq!(
            page.child(child_page_index(s).unwrap()),
            Some(PageId::holding(&key, 13))
        );
    }

    #[test]
    fn layout_fills_exactly_one_page() {
        assert_eq!(core::mem::size_of::<Block>(), PAGE_SIZE);
        assert_eq!(core::mem::align_of::<Block>(), PAGE_SIZE);
        assert_eq!(VERSION + 2 + 2, CHECKSUM);
    }

    #[test]
    fn seal_and_check() {
        let id = PageId::ROOT.child(9).unwrap();
        let mut page = Page::new(&id);
        page.set_node(17, &hash_leaf(&[1; 32], &[2; 32]));
        page.set_elided_children(1 << 40);
        page.set_leaves(7);
        page.seal();
        page.check(&id).unwrap();
        assert_eq!((page.leaves(), page.elided_children()), (7, 1 << 40));
        assert!(page.check(&PageId::ROOT).is_err());
        for byte in [0, 17 * 32 + 5, ID, ELIDED, LEAVES, MAGIC, VERSION, CHECKSUM] {
            let mut bad = page.clone();
            bad.0 .0[byte] ^= 1;
            assert!(
                bad.check(&id).is_err(),
                "flip in byte {byte} went unnoticed"
            );
        }
    }
}
