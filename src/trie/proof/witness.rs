//! The witness a commit returns: what a light client needs to check the commit.

use alloc::vec::Vec;

use super::{MultiProof, VerifiedMultiProof, Write};
use crate::trie::node::Node;
use crate::Error;

/// Proof of a commit: the multi-proof, against the root before the commit, of
/// every key the session read or wrote (values as hashes), and the writes applied
/// (sorted by key, each key once).
///
/// Verification needs only this crate's no_std side:
///
/// ```
/// use pagetrie::trie::{compute_root, hash_value, proof::{prove_multi, Witness}};
///
/// let entries = vec![([1u8; 32], hash_value(b"a")), ([200u8; 32], hash_value(b"b"))];
/// let prev_root = compute_root(entries.clone())?;
/// let writes = vec![([1u8; 32], None)]; // delete the first key
/// let witness = Witness { proof: prove_multi(&entries, &[[1u8; 32]])?, writes };
/// witness.verify(&prev_root)?.confirm(&[1u8; 32], Some(&hash_value(b"a")))?;
/// assert_eq!(witness.verify_update(&prev_root)?, compute_root(vec![entries[1]])?);
/// # Ok::<(), pagetrie::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "borsh",
    derive(borsh::BorshSerialize, borsh::BorshDeserialize)
)]
pub struct Witness {
    /// Paths of every key read or written, against the previous root.
    pub proof: MultiProof,
    /// The writes: a new value hash, or `None` for a delete.
    pub writes: Vec<Write>,
}

impl Witness {
    /// Checks the proof against `prev_root`; the result answers for every key the
    /// session read or wrote.
    pub fn verify(&self, prev_root: &Node) -> Result<VerifiedMultiProof<'_>, Error> {
        self.proof.verify(prev_root)
    }

    /// Checks the proof against `prev_root` and returns the root after the writes.
    pub fn verify_update(&self, prev_root: &Node) -> Result<Node, Error> {
        self.proof.verify_update(prev_root, &self.writes)
    }
}
