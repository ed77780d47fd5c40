//! Node kinds, their hashes, and key-path bit access (docs/design.md section 1).

/// A 32-byte key path. Callers hash their own keys; bit 0 is the most significant
/// bit of byte 0 and picks the child at depth 0.
pub type KeyPath = [u8; 32];

/// `blake3(value)`, untagged.
pub type ValueHash = [u8; 32];

/// A 32-byte trie node: a terminator, a leaf or an internal node.
pub type Node = [u8; 32];

/// The empty subtree at any depth, and the root of an empty trie.
pub const TERMINATOR: Node = [0; 32];

/// Key paths are 256 bits, so no node is deeper than this.
pub const MAX_DEPTH: usize = 256;

/// What a node is, read from its bytes alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// All 32 bytes zero: an empty subtree.
    Terminator,
    /// Most significant bit set: `blake3(key_path || value_hash)`.
    Leaf,
    /// Most significant bit clear and not all zero: `blake3(left || right)`.
    Internal,
}

impl NodeKind {
    /// Classifies `node` by its tag bit.
    pub fn of(node: &Node) -> NodeKind {
        if node[0] & 0x80 != 0 {
            NodeKind::Leaf
        } else if *node == TERMINATOR {
            NodeKind::Terminator
        } else {
            NodeKind::Internal
        }
    }
}

/// `blake3(value)`: the value hash a leaf commits to.
pub fn hash_value(value: &[u8]) -> ValueHash {
    *blake3::hash(value).as_bytes()
}

/// The leaf node of `key_path` holding a value with hash `value_hash`.
pub fn hash_leaf(key_path: &KeyPath, value_hash: &ValueHash) -> Node {
    let mut node = hash_pair(key_path, value_hash);
    node[0] |= 0x80;
    node
}

/// The internal node over `left` and `right`.
pub fn hash_internal(left: &Node, right: &Node) -> Node {
    let mut node = hash_pair(left, right);
    node[0] &= 0x7f;
    node
}

fn hash_pair(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut buf = [0u8; 64];
    buf[..32].copy_from_slice(a);
    buf[32..].copy_from_slice(b);
    *blake3::hash(&buf).as_bytes()
}

/// Bit `depth` of `path` (0 = most significant bit of byte 0): false = left,
/// true = right. A key path has 256 bits, so every `u8` names one.
#[inline]
pub fn bit(path: &KeyPath, depth: u8) -> bool {
    bit_at(path, depth as usize)
}

/// [`bit`] for the crate's walks, whose depths are below 256 by construction.
#[inline]
pub(crate) fn bit_at(path: &KeyPath, depth: usize) -> bool {
    path[depth / 8] & (0x80 >> (depth % 8)) != 0
}

/// `path` with every bit from `depth` on cleared: the canonical name of the position
/// at `depth` on `path`. A depth of 256 or more keeps the whole path.
pub fn prefix(path: &KeyPath, depth: usize) -> KeyPath {
    if depth >= MAX_DEPTH {
        return *path;
    }
    let mut out = [0u8; 32];
    let full = depth / 8;
    out[..full].copy_from_slice(&path[..full]);
    if !depth.is_multiple_of(8) {
        out[full] = path[full] & !(0xffu8 >> (depth % 8));
    }
    out
}

/// The greatest key whose first `depth` bits are those of `path`: the last
/// key of the subtree at `depth` on `path`.
pub(crate) fn prefix_last(path: &KeyPath, depth: usize) -> KeyPath {
    let mut last = prefix(path, depth);
    for bit in depth.min(MAX_DEPTH)..MAX_DEPTH {
        last[bit / 8] |= 0x80 >> (bit % 8);
    }
    last
}

/// How many leading bits `a` and `b` share (256 if equal).
pub(crate) fn common_prefix_len(a: &KeyPath, b: &KeyPath) -> usize {
    for (i, (x, y)) in a.chunks_exact(8).zip(b.chunks_exact(8)).enumerate() {
        let diff = u64::from_be_bytes(word(x)) ^ u64::from_be_bytes(word(y));
        if diff != 0 {
            return i * 64 + diff.leading_zeros() as usize;
        }
    }
    256
}

pub(crate) fn word(bytes: &[u8]) -> [u8; 8] {
    let mut w = [0u8; 8];
    w.copy_from_slice(bytes);
    w
}

/// A key path as four big-endian words: it orders as the bytes do, in word
/// comparisons instead of a call to `memcmp`, for the maps searched on every
/// read (the value store's directory, a session's writes).
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct KeyWords([u64; 4]);

#[cfg(feature = "std")]
impl KeyWords {
    pub(crate) fn new(key: &KeyPath) -> KeyWords {
        let mut words = [0u64; 4];
        for (w, bytes) in words.iter_mut().zip(key.chunks_exact(8)) {
            *w = u64::from_be_bytes(word(bytes));
        }
        KeyWords(words)
    }

    /// The key's first eight bytes, big-endian.
    pub(crate) fn first_word(&self) -> u64 {
        self.0[0]
    }

    pub(crate) fn key(&self) -> KeyPath {
        let mut key = [0u8; 32];
        for (bytes, w) in key.chunks_exact_mut(8).zip(self.0) {
            bytes.copy_from_slice(&w.to_be_bytes());
        }
        key
    }
}

/// Whether `a` and `b` agree on their first `depth` bits.
pub fn shares_prefix(a: &KeyPath, b: &KeyPath, depth: usize) -> bool {
    common_prefix_len(a, b) >= depth.min(MAX_DEPTH)
}

/// The canonical parent of two canonical subtrees: a lone leaf rises, an empty pair
/// is empty.
pub(crate) fn join_canonical(left: Node, right: Node) -> Node {
    match (NodeKind::of(&left), NodeKind::of(&right)) {
        (NodeKind::Terminator, NodeKind::Terminator) => TERMINATOR,
        (NodeKind::Leaf, NodeKind::Terminator) => left,
        (NodeKind::Terminator, NodeKind::Leaf) => right,
        _ => hash_internal(&left, &right),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_kinds() {
        let leaf = hash_leaf(&[1; 32], &[2; 32]);
        let internal = hash_internal(&leaf, &TERMINATOR);
        assert_eq!(NodeKind::of(&leaf), NodeKind::Leaf);
        assert_eq!(NodeKind::of(&internal), NodeKind::Internal);
        assert_eq!(NodeKind::of(&TERMINATOR), NodeKind::Terminator);
    }

    #[test]
    fn bits_and_prefixes() {
        let mut p = [0u8; 32];
        p[0] = 0b1010_0000;
        p[31] = 1;
        assert!(bit_at(&p, 0) && !bit_at(&p, 1) && bit_at(&p, 2) && bit_at(&p, 255));
        assert_eq!(prefix(&p, 1)[0], 0b1000_0000);
        assert_eq!(prefix(&p, 255)[31], 0);
        assert_eq!(prefix(&p, 256), p);
        assert!(shares_prefix(&p, &[0xbf; 32], 3) && !shares_prefix(&p, &[0xbf; 32], 4));
        assert_eq!(prefix_last(&[0; 32], 2)[0], 0x3f);
        assert_eq!(prefix_last(&[0; 32], 0), [0xff; 32]);
        assert_eq!(prefix_last(&p, 256), p);
    }

    /// `KeyWords` must order keys as their bytes do, and give them back.
    #[test]
    fn key_words_order_as_bytes() {
        let mut keys: Vec<KeyPath> = Vec::new();
        for i in 0..32 {
            for b in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut k = [0x5a; 32];
                k[i] = b;
                keys.push(k);
            }
        }
        for a in &keys {
            for b in &keys {
                assert_eq!(KeyWords::new(a).cmp(&KeyWords::new(b)), a.cmp(b));
            }
            assert_eq!(KeyWords::new(a).key(), *a);
        }
    }

    /// `shares_prefix` compares words; it must agree with masking both keys.
    #[test]
    fn shares_prefix_is_equal_prefixes() {
        let a = [0x5a; 32];
        for flip in [0, 7, 8, 63, 64, 65, 200, 255] {
            let mut b = a;
            b[flip / 8] ^= 0x80 >> (flip % 8);
            for depth in [0, 1, 7, 8, 9, 63, 64, 65, 127, 200, 255, 256, 300] {
                assert_eq!(
                    shares_prefix(&a, &b, depth),
                    prefix(&a, depth) == prefix(&b, depth),
                    "flip {flip} depth {depth}"
                );
            }
        }
    }
}
