//! Page ids: a page's path of 6-bit child indices from the root page.

use super::node::{bit_at, prefix, KeyPath, MAX_DEPTH};
use crate::Error;

/// Trie levels per page: each page is a rootless subtree six levels deep.
pub const PAGE_DEPTH: usize = 6;

/// The most child indices a page id has. 256 = 42 * 6 + 4: the pages at this level
/// use only their top four levels and have no child pages.
pub const MAX_PAGE_LEVEL: usize = (MAX_DEPTH - 1) / PAGE_DEPTH;

/// Which page: the first `6 * level` bits of `path` are its child indices.
///
/// Ordering is depth-first: a page sorts before its children, children by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageId {
    path: KeyPath,
    level: u8,
}

impl PageId {
    /// The root page: its cells hold the nodes at depths 1 to 6.
    pub const ROOT: PageId = PageId {
        path: [0; 32],
        level: 0,
    };

    /// The page at `level` on `key`'s path. `level` is at most [`MAX_PAGE_LEVEL`].
    pub fn on_path(key: &KeyPath, level: usize) -> PageId {
        debug_assert!(level <= MAX_PAGE_LEVEL);
        PageId {
            path: prefix(key, level * PAGE_DEPTH),
            level: level as u8,
        }
    }

    /// The page holding the node at `depth` (1 to 256) on `key`'s path.
    pub fn holding(key: &KeyPath, depth: usize) -> PageId {
        PageId::on_path(key, (depth - 1) / PAGE_DEPTH)
    }

    /// How many child indices lead here from the root page.
    pub fn level(&self) -> usize {
        self.level as usize
    }

    /// The path leading here: the first [`PageId::root_depth`] bits of the
    /// keys below, the later bits zero.
    pub(crate) fn path(&self) -> &KeyPath {
        &self.path
    }

    /// Depth of the node this page's subtree hangs from (its cells start one deeper).
    pub fn root_depth(&self) -> usize {
        self.level() * PAGE_DEPTH
    }

    /// The child index taken at `level` (less than [`PageId::level`]).
    pub fn index_at(&self, level: usize) -> u8 {
        (0..PAGE_DEPTH).fold(0u8, |acc, i| {
            acc << 1 | bit_at(&self.path, level * PAGE_DEPTH + i) as u8
        })
    }

    /// Child `index` (0 to 63), or `None` below the deepest page level.
    pub fn child(&self, index: u8) -> Option<PageId> {
        if self.level() >= MAX_PAGE_LEVEL || index >= 64 {
            return None;
        }
        let mut path = self.path;
        let start = self.root_depth();
        for i in 0..PAGE_DEPTH {
            if index & (0x20 >> i) != 0 {
                let d = start + i;
                path[d / 8] |= 0x80 >> (d % 8);
            }
        }
        Some(PageId {
            path,
            level: self.level + 1,
        })
    }

    /// The parent page, or `None` for the root page.
    pub fn parent(&self) -> Option<PageId> {
        let level = self.level().checked_sub(1)?;
        Some(PageId::on_path(&self.path, level))
    }

    /// 32 bytes naming this page, unique among all page ids: the big-endian number
    /// `n` with `n(root) = 0` and `n(child i of p) = 64 * n(p) + i + 1`.
    pub fn encode(&self) -> [u8; 32] {
        let mut n = U256::ZERO;
        for level in 0..self.level() {
            n = n.shl6_add(self.index_at(level) as u64 + 1);
        }
        n.to_be_bytes()
    }

    /// The page id [`PageId::encode`] turned into `bytes`; an error for numbers no
    /// page id encodes to.
    pub fn decode(bytes: &[u8; 32]) -> Result<PageId, Error> {
        let mut n = U256::from_be_bytes(bytes);
        let mut indices = [0u8; MAX_PAGE_LEVEL];
        let mut level = 0;
        while !n.is_zero() {
            if level == MAX_PAGE_LEVEL {
                return Err(Error::corrupt("page id deeper than 42 levels"));
            }
            let (rest, low) = n.minus_one().shr6();
            indices[level] = low;
            level += 1;
            n = rest;
        }
        let mut id = PageId::ROOT;
        for &index in indices[..level].iter().rev() {
            id = id
                .child(index)
                .ok_or(Error::corrupt("page id deeper than 42 levels"))?;
        }
        Ok(id)
    }
}

/// Just enough 256-bit arithmetic for page id numbers; `0` is the most significant limb.
#[derive(Clone, Copy, PartialEq, Eq)]
struct U256([u64; 4]);

impl U256 {
    const ZERO: U256 = U256([0; 4]);

    fn is_zero(&self) -> bool {
        *self == U256::ZERO
    }

    /// `self * 64 + small`, for `small <= 64`; page id numbers stay below 2^253.
    fn shl6_add(self, small: u64) -> U256 {
        let l = self.0;
        let mut out = [
            l[0] << 6 | l[1] >> 58,
            l[1] << 6 | l[2] >> 58,
            l[2] << 6 | l[3] >> 58,
            l[3] << 6,
        ];
        // 64 takes seven bits, so the add can carry out of the low limb.
        let mut carry = small;
        for limb in out.iter_mut().rev() {
            let (v, overflow) = limb.overflowing_add(carry);
            *limb = v;
            carry = overflow as u64;
        }
        U256(out)
    }

    /// `(self / 64, self % 64)`.
    fn shr6(self) -> (U256, u8) {
        let l = self.0;
        let low = (l[3] & 63) as u8;
        (
            U256([
                l[0] >> 6,
                l[1] >> 6 | l[0] << 58,
                l[2] >> 6 | l[1] << 58,
                l[3] >> 6 | l[2] << 58,
            ]),
            low,
        )
    }

    /// `self - 1` for a non-zero `self`.
    fn minus_one(self) -> U256 {
        let mut l = self.0;
        for limb in l.iter_mut().rev() {
            let (v, borrow) = limb.overflowing_sub(1);
            *limb = v;
            if !borrow {
                break;
            }
        }
        U256(l)
    }

    fn to_be_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (chunk, limb) in out.chunks_exact_mut(8).zip(self.0) {
            chunk.copy_from_slice(&limb.to_be_bytes());
        }
        out
    }

    fn from_be_bytes(bytes: &[u8; 32]) -> U256 {
        let mut l = [0u64; 4];
        for (limb, chunk) in l.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *limb = u64::from_be_bytes(b);
        }
        U256(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_parents_and_indices() {
        let a = PageId::ROOT.child(5).unwrap().child(63).unwrap();
        assert_eq!(a.level(), 2);
        assert_eq!((a.index_at(0), a.index_at(1)), (5, 63));
        assert_eq!(a.parent().unwrap().parent(), Some(PageId::ROOT));
        assert_eq!(PageId::ROOT.parent(), None);
        assert!(PageId::ROOT < PageId::ROOT.child(0).unwrap());
    }

    #[test]
    fn deepest_level_has_no_children() {
        let mut id = PageId::ROOT;
        for i in 0..MAX_PAGE_LEVEL {
            id = id.child((i * 7 % 64) as u8).unwrap();
        }
        assert_eq!(id.child(0), None);
        assert_eq!(PageId::holding(&[0xff; 32], 256).level(), MAX_PAGE_LEVEL);
        assert_eq!(PageId::holding(&[0xff; 32], 6), PageId::ROOT);
        assert_eq!(
            PageId::holding(&[0xff; 32], 7),
            PageId::ROOT.child(63).unwrap()
        );
    }

    #[test]
    fn encoding_round_trips_and_numbers_levels_in_order() {
        assert_eq!(PageId::ROOT.encode(), [0; 32]);
        let c = PageId::ROOT.child(0).unwrap();
        assert_eq!(c.encode()[31], 1);
        assert_eq!(PageId::ROOT.child(63).unwrap().encode()[31], 64);
        assert_eq!(c.child(0).unwrap().encode()[31], 65);
        let mut id = PageId::ROOT;
        for i in 0..MAX_PAGE_LEVEL {
            id = id.child(63 - (i % 64) as u8).unwrap();
            assert_eq!(PageId::decode(&id.encode()).unwrap(), id);
        }
        assert!(PageId::decode(&[0xff; 32]).is_err());
    }

    /// Index 63 adds 64 after the shift; with the low limb all ones that carries.
    #[test]
    fn encoding_carries_across_limbs() {
        for path in [
            [62u8; 10].as_slice(),
            &[14, 62, 62, 62, 62, 62, 62, 62, 62, 62],
        ] {
            let mut id = PageId::ROOT;
            for &i in path {
                id = id.child(i).unwrap();
            }
            let child = id.child(63).unwrap();
            assert_eq!(PageId::decode(&child.encode()).unwrap(), child);
            assert_ne!(child.encode(), id.child(46).unwrap().encode());
        }
        // Every index at every level round-trips.
        let mut id = PageId::ROOT;
        for level in 0..MAX_PAGE_LEVEL {
            for i in 0..64 {
                let c = id.child(i).unwrap();
                assert_eq!(
                    PageId::decode(&c.encode()).unwrap(),
                    c,
                    "level {level} index {i}"
                );
            }
            id = id.child(if level % 2 == 0 { 63 } else { 62 }).unwrap();
        }
    }
}
