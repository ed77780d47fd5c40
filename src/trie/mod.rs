//! The binary merkle trie (docs/design.md sections 1 and 2): node hashing, the canonical
//! builder, proofs and the page layout.
//!
//! Owns what the trie *is*: pure functions over nodes, entries and page bytes. It
//! may not touch files, I/O or threads; the stores and the trie update build on
//! it, and without the `std` feature it is all that remains (minus pages), so
//! verification runs in no_std + alloc.

mod builder;
mod node;
#[cfg(feature = "std")]
#[allow(dead_code)] // The page store (next layer up) is the user; pages are crate-internal.
pub(crate) mod page;
#[cfg(feature = "std")]
#[allow(dead_code)]
pub(crate) mod page_id;
pub mod proof;

pub use builder::compute_root;
#[cfg(feature = "std")]
pub(crate) use builder::{build_subtree, check_strictly_sorted, Discard};
pub use node::{
    bit, hash_internal, hash_leaf, hash_value, KeyPath, Node, NodeKind, ValueHash, MAX_DEPTH,
    TERMINATOR,
};
#[cfg(feature = "std")]
pub(crate) use node::{
    bit_at, common_prefix_len, join_canonical, prefix, prefix_last, shares_prefix, KeyWords,
};
