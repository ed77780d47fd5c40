//! Stateless re-execution: every honest block verifies from its proof
//! alone, and each kind of tampering is rejected.

mod common;

use common::*;
use pagetrie::{Db, KeyPath, Node};
use pagetrie_revm::revm::primitives::{Address, B256, U256};
use pagetrie_revm::{execute_block, token, verify_block, Block, BlockProof, Error, StateDb};

/// A committed block and what the verifier gets.
struct Proven {
    block: Block,
    prev_root: Node,
    /// The hash of the block before, as the verifier's chain has it.
    parent_hash: B256,
    root: Node,
    proof: BlockProof,
}

fn run(db: &Db, chain: &mut Chain, n: usize) -> (Proven, pagetrie_revm::BlockOutcome) {
    let block = chain.next_block(n);
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &block).unwrap();
    let changes = state.finish().unwrap();
    let out = session.commit_and_prove().unwrap();
    chain.sealed(&block, &out.root);
    let witness_and_values = out.witness.encoded_len()
        + changes
            .reads
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>();
    let proof = BlockProof::new(out.witness, changes);
    // The witness's writes are not shipped: the verifier computes them.
    assert!(proof.encoded_len() < witness_and_values);
    let proven = Proven {
        parent_hash: block.header.parent_hash,
        block,
        prev_root: out.prev_root,
        root: out.root,
        proof,
    };
    (proven, outcome)
}

fn verify(p: &Proven) -> Result<pagetrie_revm::BlockOutcome, Error> {
    verify_block(&p.prev_root, &p.parent_hash, &p.block, &p.proof, &p.root)
}

#[test]
fn every_honest_block_verifies_from_its_shipped_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut chain = Chain::new();
    for _ in 0..6 {
        let (mut proven, outcome) = run(&db, &mut chain, 64);
        let bytes = proven.proof.encode();
        assert_eq!(bytes.len(), proven.proof.encoded_len());
        proven.proof = BlockProof::decode(&bytes).unwrap();
        assert_eq!(verify(&proven).unwrap(), outcome);
    }
}

/// A block of the chain after a few, with its proof.
fn proven_block() -> Proven {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut chain = Chain::new();
    run(&db, &mut chain, 64);
    let (proven, _) = run(&db, &mut chain, 64);
    verify(&proven).unwrap();
    proven
}

/// A key the witness says nothing about.
fn uncovered_key(p: &Proven) -> KeyPath {
    let proven = p.proof.multiproof.verify(&p.prev_root).unwrap();
    (0u64..)
        .map(|i| *blake3::hash(&i.to_be_bytes()).as_bytes())
        .find(|k| matches!(proven.get(k), Err(pagetrie::Error::KeyNotCovered(_))))
        .unwrap()
}

#[test]
fn a_tampered_value_is_rejected() {
    let mut p = proven_block();
    for i in [0, p.proof.values.len() / 2, p.proof.values.len() - 1] {
        let mut tampered = p.proof.values.clone();
        let key = tampered[i].0;
        tampered[i].1[0] ^= 1;
        std::mem::swap(&mut p.proof.values, &mut tampered);
        assert!(matches!(verify(&p), Err(Error::ValueMismatch(k)) if k == key));
        std::mem::swap(&mut p.proof.values, &mut tampered);
    }
}

#[test]
fn a_missing_value_is_rejected() {
    let mut p = proven_block();
    let (key, _) = p.proof.values.remove(p.proof.values.len() / 3);
    assert!(matches!(verify(&p), Err(Error::MissingValue(k)) if k == key));
}

#[test]
fn a_value_for_a_key_outside_the_witness_is_rejected() {
    let mut p = proven_block();
    let key = uncovered_key(&p);
    p.proof.values.push((key, vec![1]));
    assert!(matches!(verify(&p), Err(Error::KeyNotCovered(k)) if k == key));
}

#[test]
fn a_transaction_reaching_outside_the_witness_is_rejected() {
    let mut p = proven_block();
    let tx = p.block.txs.iter_mut().find(|tx| pays_another(tx)).unwrap();
    tx.to = Some(Address::repeat_byte(0x99));
    assert!(matches!(verify(&p), Err(Error::KeyNotCovered(_))));
}

/// Whether `tx` sends ether to another account (a transfer to oneself
/// changes nothing whatever the amount).
fn pays_another(tx: &pagetrie_revm::Tx) -> bool {
    tx.data.is_empty() && tx.to.is_some_and(|to| to != tx.caller)
}

#[test]
fn a_changed_amount_is_rejected() {
    let mut p = proven_block();
    let tx = p.block.txs.iter_mut().find(|tx| pays_another(tx)).unwrap();
    tx.value += U256::from(1);
    let r = verify(&p);
    assert!(matches!(r, Err(Error::RootMismatch { .. })), "{r:?}");

    let mut p = proven_block();
    let tx = p
        .block
        .txs
        .iter_mut()
        .find(|tx| {
            // A transfer to another holder that succeeds.
            tx.data.starts_with(&token::TRANSFER)
                && tx.data[16..36] != tx.caller[..]
                && U256::from_be_slice(&tx.data[36..68]) < U256::from(TOKENS_EACH)
        })
        .unwrap();
    let mut data = tx.data.to_vec();
    data[67] ^= 1;
    tx.data = data.into();
    let r = verify(&p);
    assert!(matches!(r, Err(Error::RootMismatch { .. })), "{r:?}");
}

#[test]
fn a_dropped_transaction_is_rejected() {
    let mut p = proven_block();
    p.block.txs.pop();
    assert!(matches!(verify(&p), Err(Error::RootMismatch { .. })));
}

#[test]
fn wrong_roots_are_rejected() {
    let mut p = proven_block();
    p.root[5] ^= 1;
    assert!(matches!(verify(&p), Err(Error::RootMismatch { .. })));
    p.root[5] ^= 1;
    p.prev_root[0] ^= 1;
    assert!(matches!(
        verify(&p),
        Err(Error::Pagetrie(pagetrie::Error::RootMismatch))
    ));
    p.prev_root[0] ^= 1;
    // A sibling of the proof changed: it no longer hashes to the root.
    p.proof.multiproof.siblings[0][0] ^= 1;
    assert!(matches!(
        verify(&p),
        Err(Error::Pagetrie(pagetrie::Error::RootMismatch))
    ));
}

#[test]
fn truncated_bytes_are_refused() {
    let p = proven_block();
    let bytes = p.proof.encode();
    let step = (bytes.len() / 500).max(1);
    for len in (0..bytes.len()).step_by(step).chain([bytes.len() - 1]) {
        assert!(BlockProof::decode(&bytes[..len]).is_err(), "length {len}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        BlockProof::decode(&longer),
        Err(Error::Malformed(_))
    ));
}

#[test]
fn a_block_on_another_parent_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut chain = Chain::new();
    run(&db, &mut chain, 64);
    let parent = chain.parent_hash;
    // A producer lying about the parent hash: the witness and the root are
    // honest for the block it executed.
    chain.parent_hash = B256::repeat_byte(0x5a);
    let (mut p, outcome) = run(&db, &mut chain, 64);
    assert_eq!(verify(&p).unwrap(), outcome);
    p.parent_hash = parent;
    let r = verify(&p);
    assert!(
        matches!(r, Err(Error::ParentHash { expected, found })
            if expected == parent && found == B256::repeat_byte(0x5a)),
        "{r:?}"
    );
}
