//! Stateless re-execution: every honest block verifies from its proof
//! alone against the parent header the verifier holds, and each kind of
//! tampering with the header, the body or the proof is rejected.

mod common;

use common::*;
use pagetrie::{Db, KeyPath};
use pagetrie_revm::consensus::proofs::calculate_transaction_root;
use pagetrie_revm::consensus::transaction::SignerRecoverable;
use pagetrie_revm::consensus::{Signed, TxEnvelope};
use pagetrie_revm::revm::primitives::{Address, B256, U256};
use pagetrie_revm::{
    execute_block, keys, verify_block, Block, BlockOutcome, BlockProof, Chain, Error, Header,
    HeaderError, Signature, StateDb,
};

/// A committed block and what the verifier gets.
struct Proven {
    chain: Chain,
    /// The verifier's own last header.
    parent: Header,
    /// The block as shipped, sealed.
    block: Block,
    proof: BlockProof,
}

fn run(db: &Db, producer: &mut Producer, n: usize) -> (Proven, BlockOutcome) {
    let parent = producer.parent.clone();
    let block = producer.next_block(n);
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &producer.chain, &block).unwrap();
    let changes = state.finish().unwrap();
    let out = session.commit_and_prove().unwrap();
    let block = producer.seal(&outcome, block, &out.root);
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
        chain: producer.chain.clone(),
        parent,
        block,
        proof,
    };
    (proven, outcome)
}

fn verify(p: &Proven) -> Result<BlockOutcome, Error> {
    verify_block(&p.chain, &p.parent, &p.block, &p.proof)
}

#[test]
fn every_honest_block_verifies_from_its_shipped_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    let mut recorded_back = 0;
    for _ in 0..6 {
        let (mut proven, outcome) = run(&db, &mut producer, 64);
        let bytes = proven.proof.encode();
        assert_eq!(bytes.len(), proven.proof.encoded_len());
        proven.proof = BlockProof::decode(&bytes).unwrap();
        assert_eq!(verify(&proven).unwrap(), outcome);
        // BLOCKHASH three blocks back, read from the history contract
        // through the witness.
        let calls_recorder =
            proven.block.body.transactions.iter().any(|tx| {
                pagetrie_revm::consensus::Transaction::to(tx) == Some(recorder_address())
            });
        if proven.block.header.number > 3 && calls_recorder {
            recorded_back += 1;
        }
    }
    assert!(recorded_back > 0);
}

/// A block of the chain after a few, with its proof.
fn proven_block() -> Proven {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    run(&db, &mut producer, 64);
    let (proven, _) = run(&db, &mut producer, 64);
    verify(&proven).unwrap();
    proven
}

/// A producer that changes its block's transaction `index` (an EIP-1559
/// transfer), signs it again with the sender's key and commits the header
/// to the new body: only re-execution can tell.
fn change_transfer(p: &mut Proven, f: impl FnOnce(&mut pagetrie_revm::consensus::TxEip1559)) {
    let tx = &mut p.block.body.transactions;
    let index = tx
        .iter()
        .position(|tx| match tx {
            TxEnvelope::Eip1559(s) => {
                s.tx().input.is_empty() && s.tx().to.to() != Some(&tx_sender(tx))
            }
            _ => false,
        })
        .unwrap();
    let sender = tx_sender(&tx[index]);
    let TxEnvelope::Eip1559(signed) = &tx[index] else {
        unreachable!()
    };
    let mut changed = signed.tx().clone();
    f(&mut changed);
    let wallet = (0..ACCOUNTS)
        .map(wallet)
        .find(|w| w.address() == sender)
        .unwrap();
    tx[index] = wallet.sign(changed).unwrap();
    p.block.header.transactions_root = calculate_transaction_root(tx);
}

fn tx_sender(tx: &TxEnvelope) -> Address {
    tx.recover_signer().unwrap()
}

/// A key the witness says nothing about.
fn uncovered_key(p: &Proven) -> KeyPath {
    let proven = p.proof.multiproof.verify(&p.parent.state_root.0).unwrap();
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
fn a_key_shipped_twice_and_a_value_the_witness_proves_absent_are_rejected() {
    let mut p = proven_block();
    let first = p.proof.values[0].clone();
    p.proof.values.insert(1, first);
    assert!(matches!(verify(&p), Err(Error::Malformed(_))));
    p.proof.values.remove(1);
    // The first withdrawal goes to a new account: read, proven absent.
    let absent = keys::account(&p.block.body.withdrawals.as_ref().unwrap()[0].address);
    p.proof.values.push((absent, vec![1; 40]));
    p.proof.values.sort();
    assert!(matches!(verify(&p), Err(Error::UnprovenValue(k)) if k == absent));
}

#[test]
fn a_transaction_reaching_outside_the_witness_is_rejected() {
    let mut p = proven_block();
    change_transfer(&mut p, |tx| tx.to = Address::repeat_byte(0x99).into());
    assert!(matches!(verify(&p), Err(Error::KeyNotCovered(_))));
}

#[test]
fn a_changed_amount_is_rejected() {
    let mut p = proven_block();
    change_transfer(&mut p, |tx| tx.value += U256::from(1));
    let r = verify(&p);
    assert!(matches!(r, Err(Error::RootMismatch { .. })), "{r:?}");
}

#[test]
fn a_changed_body_is_rejected_by_the_header_before_execution() {
    let mut p = proven_block();
    p.block.body.transactions.pop();
    let r = verify(&p);
    assert!(
        matches!(
            r,
            Err(Error::Header(HeaderError::Commitment {
                field: "transactions_root",
                ..
            }))
        ),
        "{r:?}"
    );
    let mut p = proven_block();
    p.block.body.withdrawals.as_mut().unwrap()[0].amount += 1;
    let r = verify(&p);
    assert!(
        matches!(
            r,
            Err(Error::Header(HeaderError::Commitment {
                field: "withdrawals_root",
                ..
            }))
        ),
        "{r:?}"
    );
    // Dropped, with the header committing to the shorter body: the gas
    // used no longer adds up.
    let mut p = proven_block();
    p.block.body.transactions.pop();
    p.block.header.transactions_root = calculate_transaction_root(&p.block.body.transactions);
    let r = verify(&p);
    assert!(
        matches!(r, Err(Error::Header(HeaderError::GasUsed { .. }))),
        "{r:?}"
    );
}

#[test]
fn a_signature_that_recovers_no_sender_is_rejected() {
    let mut p = proven_block();
    let txs = &mut p.block.body.transactions;
    let index = txs
        .iter()
        .position(|tx| matches!(tx, TxEnvelope::Eip1559(_)))
        .unwrap();
    let TxEnvelope::Eip1559(signed) = &txs[index] else {
        unreachable!()
    };
    let forged = Signed::new_unhashed(
        signed.tx().clone(),
        Signature::new(U256::ZERO, U256::ZERO, false),
    );
    txs[index] = forged.into();
    p.block.header.transactions_root = calculate_transaction_root(txs);
    let r = verify(&p);
    assert!(
        matches!(r, Err(Error::InvalidSignature { index: i }) if i == index),
        "{r:?}"
    );
}

/// `p` with its header changed by `f`, checked to fail as `expected` says.
fn rejects(f: impl FnOnce(&mut Header), expected: impl FnOnce(&HeaderError) -> bool) {
    let mut p = proven_block();
    f(&mut p.block.header);
    let r = verify(&p);
    assert!(matches!(&r, Err(Error::Header(e)) if expected(e)), "{r:?}");
}

#[test]
fn a_header_that_does_not_follow_its_parent_is_rejected() {
    rejects(
        |h| h.number += 1,
        |e| matches!(e, HeaderError::Number { .. }),
    );
    rejects(
        |h| h.number = u64::MAX,
        |e| matches!(e, HeaderError::Number { .. }),
    );
    rejects(
        |h| h.parent_hash = B256::repeat_byte(0x5a),
        |e| matches!(e, HeaderError::ParentHash { found, .. } if *found == B256::repeat_byte(0x5a)),
    );
    rejects(
        |h| h.timestamp -= 12,
        |e| matches!(e, HeaderError::Timestamp { .. }),
    );
    rejects(
        |h| h.gas_limit = u64::MAX,
        |e| matches!(e, HeaderError::GasLimit { .. }),
    );
    rejects(
        |h| h.gas_limit += h.gas_limit / 1024,
        |e| matches!(e, HeaderError::GasLimit { .. }),
    );
    rejects(
        |h| h.base_fee_per_gas = h.base_fee_per_gas.map(|f| f + 1),
        |e| matches!(e, HeaderError::BaseFee { .. }),
    );
    rejects(
        |h| h.excess_blob_gas = Some(1),
        |e| matches!(e, HeaderError::ExcessBlobGas { .. }),
    );
    rejects(
        |h| h.requests_hash = None,
        |e| matches!(e, HeaderError::Field("requests_hash")),
    );
    rejects(
        |h| h.difficulty = U256::from(1),
        |e| matches!(e, HeaderError::Field("difficulty")),
    );
}

/// The blob gas of one blob.
const BLOB: u64 = 131_072;

#[test]
fn blob_gas_past_the_block_limit_or_not_in_whole_blobs_is_rejected() {
    // Osaka: at most 9 blobs a block.
    rejects(
        |h| h.blob_gas_used = Some(10 * BLOB),
        |e| matches!(e, HeaderError::BlobGasLimit { max, found } if *max == 9 * BLOB && *found == 10 * BLOB),
    );
    rejects(
        |h| h.blob_gas_used = Some(1),
        |e| matches!(e, HeaderError::BlobGasLimit { .. }),
    );
}

#[test]
fn fields_of_later_forks_and_an_oversized_block_are_rejected() {
    rejects(
        |h| h.slot_number = Some(1),
        |e| matches!(e, HeaderError::Field("slot_number")),
    );
    rejects(
        |h| h.block_access_list_hash = Some(B256::ZERO),
        |e| matches!(e, HeaderError::Field("block_access_list_hash")),
    );
    // Refused by its size before anything else is looked at.
    let mut p = proven_block();
    p.block.header.extra_data = vec![0; 8 << 20].into();
    let r = verify(&p);
    assert!(
        matches!(r, Err(Error::BlockTooLarge { max: 8_388_608, .. })),
        "{r:?}"
    );
}

#[test]
fn a_header_whose_execution_fields_are_not_re_executions_is_rejected() {
    rejects(
        |h| h.gas_used -= 1,
        |e| matches!(e, HeaderError::GasUsed { .. }),
    );
    rejects(
        |h| h.receipts_root = B256::repeat_byte(1),
        |e| {
            matches!(
                e,
                HeaderError::Commitment {
                    field: "receipts_root",
                    ..
                }
            )
        },
    );
    rejects(
        |h| h.logs_bloom = Default::default(),
        |e| matches!(e, HeaderError::LogsBloom),
    );
    rejects(
        |h| h.requests_hash = Some(B256::repeat_byte(1)),
        |e| {
            matches!(
                e,
                HeaderError::Commitment {
                    field: "requests_hash",
                    ..
                }
            )
        },
    );
    // One blob more or less than re-execution used.
    rejects(
        |h| {
            h.blob_gas_used = h
                .blob_gas_used
                .map(|u| if u == 0 { BLOB } else { u - BLOB })
        },
        |e| matches!(e, HeaderError::BlobGasUsed { .. }),
    );
}

#[test]
fn wrong_roots_are_rejected() {
    let mut p = proven_block();
    p.block.header.state_root.0[5] ^= 1;
    assert!(matches!(verify(&p), Err(Error::RootMismatch { .. })));
    p.block.header.state_root.0[5] ^= 1;
    p.parent.state_root.0[0] ^= 1;
    // The parent changed: the header no longer follows it.
    let r = verify(&p);
    assert!(
        matches!(r, Err(Error::Header(HeaderError::ParentHash { .. }))),
        "{r:?}"
    );
    p.parent.state_root.0[0] ^= 1;
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
fn a_proof_for_another_parent_state_is_rejected() {
    // The proof of the first block shipped with the second.
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    let (first, _) = run(&db, &mut producer, 64);
    let (mut second, _) = run(&db, &mut producer, 64);
    second.proof = first.proof;
    assert!(matches!(
        verify(&second),
        Err(Error::Pagetrie(pagetrie::Error::RootMismatch))
    ));
}
