//! Stateless re-execution: a block checked from the root before it, its
//! witness and the values it read, without the state.
//!
//! The verifier checks the witness against the previous root and every
//! shipped value against the witness, executes the block with revm on a
//! database that answers from them alone, applies the writes it computed
//! itself with [`pagetrie::MultiProof::verify_update`] and compares the
//! result with the root the block claims.

use std::collections::HashMap;

use pagetrie::trie::hash_value;
use pagetrie::trie::proof::VerifiedMultiProof;
use pagetrie::{KeyPath, MultiProof, Node, Witness};

use crate::{
    execute_block, validate, Block, BlockOutcome, Chain, Changes, Error, Header, Source, StateDb,
};

/// What a block producer ships beside a block for a stateless verifier: the
/// multi-proof of the witness `commit_and_prove` returned and the values the
/// block read. The witness's writes stay behind: the verifier computes the
/// block's writes itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockProof {
    /// Proves every key the block read or wrote against the root before it.
    pub multiproof: MultiProof,
    /// Every present key the block read before writing it, with its value
    /// (the multi-proof holds only their hashes), sorted by key.
    pub values: Vec<(KeyPath, Vec<u8>)>,
}

impl BlockProof {
    /// The proof of a block whose commit returned `witness` and whose
    /// execution returned `changes`.
    pub fn new(witness: Witness, changes: Changes) -> BlockProof {
        BlockProof {
            multiproof: witness.proof,
            values: changes.reads,
        }
    }

    /// Bytes shipped: [`BlockProof::encode`]'s length.
    pub fn encoded_len(&self) -> usize {
        8 + self.multiproof.encoded_len()
            + 4
            + self
                .values
                .iter()
                .map(|(_, v)| 32 + 4 + v.len())
                .sum::<usize>()
    }

    /// The bytes shipped: the multi-proof's encoding (length-prefixed, u64
    /// little-endian), then the value count (u32) and each key, value length
    /// (u32) and value.
    pub fn encode(&self) -> Vec<u8> {
        let multiproof = self.multiproof.encode();
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&(multiproof.len() as u64).to_le_bytes());
        out.extend_from_slice(&multiproof);
        out.extend_from_slice(&(self.values.len() as u32).to_le_bytes());
        for (key, value) in &self.values {
            out.extend_from_slice(key);
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    /// Decodes [`BlockProof::encode`]'s bytes; [`Error::Malformed`] for any
    /// other, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<BlockProof, Error> {
        let mut rest = bytes;
        let proof_len = usize::try_from(u64::from_le_bytes(take(&mut rest)?))
            .map_err(|_| Error::Malformed("multi-proof length"))?;
        if proof_len > rest.len() {
            return Err(Error::Malformed("multi-proof longer than the bytes"));
        }
        let (multiproof, after) = rest.split_at(proof_len);
        let multiproof = MultiProof::decode(multiproof)?;
        rest = after;
        let count = u32::from_le_bytes(take(&mut rest)?) as usize;
        // Each value takes at least 36 bytes: no allocation beyond the input.
        if count > rest.len() / 36 {
            return Err(Error::Malformed("more values than the bytes hold"));
        }
        let mut values = Vec::with_capacity(count);
        for _ in 0..count {
            let key: KeyPath = take(&mut rest)?;
            let len = u32::from_le_bytes(take(&mut rest)?) as usize;
            if len > rest.len() {
                return Err(Error::Malformed("value longer than the bytes"));
            }
            let (value, after) = rest.split_at(len);
            values.push((key, value.to_vec()));
            rest = after;
        }
        if !rest.is_empty() {
            return Err(Error::Malformed("bytes after the last value"));
        }
        Ok(BlockProof { multiproof, values })
    }
}

/// The next `N` bytes of `rest`.
fn take<const N: usize>(rest: &mut &[u8]) -> Result<[u8; N], Error> {
    if rest.len() < N {
        return Err(Error::Malformed("truncated"));
    }
    let (head, tail) = rest.split_at(N);
    *rest = tail;
    let mut out = [0u8; N];
    out.copy_from_slice(head);
    Ok(out)
}

/// State known only through a verified witness and values checked against
/// it.
struct WitnessSource<'a> {
    proven: VerifiedMultiProof<'a>,
    values: HashMap<KeyPath, &'a [u8]>,
}

impl<'a> WitnessSource<'a> {
    /// Checks `proof`'s multi-proof against `prev_root` and each value against
    /// the witness.
    fn new(prev_root: &Node, proof: &'a BlockProof) -> Result<WitnessSource<'a>, Error> {
        let proven = proof.multiproof.verify(prev_root)?;
        let mut values = HashMap::with_capacity(proof.values.len());
        for (key, value) in &proof.values {
            match proven_hash(&proven, key)? {
                None => return Err(Error::UnprovenValue(*key)),
                Some(hash) if hash != hash_value(value) => return Err(Error::ValueMismatch(*key)),
                Some(_) => {}
            }
            if values.insert(*key, value.as_slice()).is_some() {
                return Err(Error::Malformed("a key shipped twice"));
            }
        }
        Ok(WitnessSource { proven, values })
    }
}

/// The value hash the witness proves for `key`, or that it is absent.
fn proven_hash(
    proven: &VerifiedMultiProof<'_>,
    key: &KeyPath,
) -> Result<Option<pagetrie::ValueHash>, Error> {
    proven.get(key).map_err(|e| match e {
        pagetrie::Error::KeyNotCovered(key) => Error::KeyNotCovered(key),
        other => Error::Pagetrie(other),
    })
}

impl Source for WitnessSource<'_> {
    fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        match proven_hash(&self.proven, key)? {
            None => Ok(None),
            // Checked against the witness when the source was made.
            Some(_) => match self.values.get(key) {
                Some(value) => Ok(Some(value.to_vec())),
                None => Err(Error::MissingValue(*key)),
            },
        }
    }
}

/// Checks `block` as the child of `parent` and re-executes it from `proof`
/// alone; returns what the block did.
///
/// `parent` must come from the verifier's own chain (the genesis header,
/// or the last block it verified): its state root is the root the witness
/// is checked against, and its hash, number, timestamp, gas limit, base fee
/// and blob gas are what the header must follow. Senders are recovered from
/// the signatures here, not taken from the producer.
///
/// What the consensus layer decides is taken as given: withdrawals (which
/// credit any amount), the beacon root, prevrandao and the beneficiary.
///
/// Rejects, in this order: a block longer than Osaka allows
/// ([`Error::BlockTooLarge`]), a header that does not follow the parent or
/// whose transactions or withdrawals root is not its body's
/// ([`Error::Header`]); a multi-proof that does not verify against the
/// parent's state root ([`Error::Pagetrie`] with
/// [`pagetrie::Error::RootMismatch`]), a shipped value that is not the
/// proven one ([`Error::ValueMismatch`], [`Error::UnprovenValue`]) or a
/// key shipped twice ([`Error::Malformed`]); a forged signature
/// ([`Error::InvalidSignature`]), an invalid transaction or block (as
/// [`execute_block`] does); a read of a key proven present with no value
/// shipped ([`Error::MissingValue`]) or of a key the witness does not cover
/// ([`Error::KeyNotCovered`]); gas used, blob gas used, receipts root, logs
/// bloom or requests hash other than re-execution's ([`Error::Header`]);
/// and any other state root ([`Error::RootMismatch`]).
pub fn verify_block(
    chain: &Chain,
    parent: &Header,
    block: &Block,
    proof: &BlockProof,
) -> Result<BlockOutcome, Error> {
    validate::check_size(chain, block)?;
    validate::check_before(chain, parent, block)?;
    let prev_root: Node = parent.state_root.0;
    let mut state = StateDb::new(WitnessSource::new(&prev_root, proof)?);
    let outcome = execute_block(&mut state, chain, block)?;
    let writes: Vec<_> = state
        .finish()?
        .writes
        .into_iter()
        .map(|(key, value)| (key, value.as_deref().map(hash_value)))
        .collect();
    let computed = proof
        .multiproof
        .verify_update(&prev_root, &writes)
        .map_err(|e| match e {
            pagetrie::Error::KeyNotCovered(key) => Error::KeyNotCovered(key),
            other => Error::Pagetrie(other),
        })?;
    let sealed = outcome.sealed_header(chain, &block.header, &block.body, &computed);
    validate::check_after(&sealed, &block.header)?;
    let claimed: Node = block.header.state_root.0;
    if computed != claimed {
        return Err(Error::RootMismatch { claimed, computed });
    }
    Ok(outcome)
}
