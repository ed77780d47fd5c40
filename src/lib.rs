//! pagetrie: a merklized key-value state database for blockchain nodes.
//!
//! State lives in a binary merkle trie (the same commitment as NOMT's Blake3 binary
//! trie) whose nodes are stored in 4 KiB pages, each a rootless subtree six levels
//! deep, over a value store of 4 KiB buckets, each a sorted key range, found
//! through a directory in RAM. A node opens a [`Db`], runs each block through a
//! [`Session`] (reads, buffered writes, prefetch hints) and commits it with
//! [`Session::commit_and_prove`], which returns the new root and a [`Witness`] a
//! light client can check. Or it finishes the session first
//! ([`Session::finish`]: root and witness, nothing written) and keeps it as an
//! [`Overlay`] ([`Finished::into_overlay`]) that the next block executes on
//! ([`Db::begin_session_on`]) before either is committed. A new replica takes
//! the state from peers it does not trust: [`Db::export`] cuts it into
//! [`Chunk`]s that each prove themselves against the root, and [`Db::restore`]
//! checks every chunk before storing it. The recent commits stay readable and
//! provable at their roots ([`Db::roots`], [`Db::read_at`], [`Db::prove_at`]),
//! and a reorg rolls back to one of them ([`Db::rollback`]). The trie core is
//! public too: hashing, the canonical builder ([`trie::compute_root`]), proofs
//! and their verification ([`trie::proof`]).
//!
//! Without the default `std` feature the crate is `no_std + alloc` and keeps the
//! verification side only, for light clients and zk provers.
//!
//! ```
//! use pagetrie::trie::{compute_root, hash_value, proof::prove_multi};
//!
//! let mut entries: Vec<_> = (0u8..10)
//!     .map(|i| (*blake3::hash(&[i]).as_bytes(), hash_value(&[i; 3])))
//!     .collect();
//! entries.sort();
//! let root = compute_root(entries.clone())?;
//!
//! let keys = [entries[3].0, [7u8; 32]];
//! let proof = prove_multi(&entries, &keys)?;
//! let verified = proof.verify(&root)?;
//! assert_eq!(verified.get(&keys[0])?, Some(entries[3].1));
//! assert_eq!(verified.get(&keys[1])?, None); // proven absent
//! # Ok::<(), pagetrie::Error>(())
//! ```

#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]

extern crate alloc;

#[cfg(feature = "std")]
mod block;
mod bytes;
#[cfg(feature = "std")]
mod clock;
#[cfg(feature = "std")]
mod db;
mod error;
#[cfg(all(test, feature = "std"))]
mod fuzz_tests;
#[cfg(feature = "std")]
mod io;
#[cfg(feature = "std")]
mod page_store;
#[cfg(feature = "std")]
mod store;
#[cfg(all(test, feature = "std"))]
mod test_support;
pub mod trie;
#[cfg(feature = "std")]
mod update;
#[cfg(feature = "std")]
mod value_store;

/// Fault injection for torture tests (the `fault-injection` feature): a
/// [`faults::Faults`] plan given to [`Options::faults`] fails chosen reads,
/// writes and syncs or fills the disk, and [`Db::lose_power`] simulates a
/// power loss.
#[cfg(feature = "fault-injection")]
pub mod faults {
    pub use crate::io::faults::{Faults, PowerLoss};
}

#[cfg(feature = "std")]
pub use db::{
    CommitOutput, Db, Finished, ImportProgress, Metrics, Options, Overlay, Pending, Restore,
    Session,
};
pub use error::Error;
#[cfg(feature = "std")]
pub use io::IoBackend;
pub use trie::proof::{Chunk, MultiProof, Witness};
pub use trie::{KeyPath, Node, ValueHash};

/// The longest value the database stores, in bytes (1 GiB); longer ones are
/// refused with [`Error::ValueTooLarge`] by a commit, an import, a restore
/// and a state-sync chunk alike. Every format that records a value's length
/// (buckets, undo records, chunks, import spills) has room above it, and a
/// commit that replaces a value holds it several times in RAM.
pub const MAX_VALUE_LEN: u64 = 1 << 30;

/// Refuses a value of `len` bytes if it is over [`MAX_VALUE_LEN`]: the one
/// check every path that takes values in makes.
pub(crate) fn check_value_len(len: usize) -> Result<(), Error> {
    match len as u64 > MAX_VALUE_LEN {
        true => Err(Error::ValueTooLarge(len)),
        false => Ok(()),
    }
}

// A value's length is a u32 in every format, and u32::MAX marks an absent
// value in undo records.
const _: () = assert!(MAX_VALUE_LEN < u32::MAX as u64);

/// The README's examples run as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
