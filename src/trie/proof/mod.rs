//! Proofs against a root: single-path proofs, multi-proofs that store each shared
//! sibling once, update verification, state-sync chunks with range proofs, an
//! in-memory prover and the byte encoding.
//!
//! Everything here is no_std + alloc, so light clients and zk provers can verify.

mod chunk;
mod codec;
mod multi;
mod path;
mod prover;
mod walk;
mod witness;

pub use chunk::Chunk;
pub use multi::{MultiProof, MultiTerminal, VerifiedMultiProof};
pub use path::{LeafData, PathProof};
#[cfg(feature = "std")]
pub(crate) use prover::prove_below;
pub use prover::{prove_multi, prove_path};
pub use witness::Witness;

/// A write checked by [`MultiProof::verify_update`]: the new value hash, or `None`
/// for a delete.
pub type Write = (crate::KeyPath, Option<crate::ValueHash>);
