//! Stored values the key layout does not decode fail the block with
//! [`Error::Corrupt`], never a panic, whichever path reads them.

mod common;

use common::*;
use pagetrie::KeyPath;
use pagetrie_revm::consensus::transaction::SignerRecoverable;
use pagetrie_revm::revm::primitives::keccak256;
use pagetrie_revm::revm::DatabaseRef;
use pagetrie_revm::{execute_block, keys, token, Error, Reader, StateDb};

/// Commits `value` at `key` over the genesis, then runs a block in which
/// the first transaction's sender (or the token, for `key`s of its) is
/// read.
fn block_over(key: KeyPath, value: Vec<u8>) -> Result<(), Error> {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let session = db.begin_session();
    session.write(key, Some(value));
    session.commit().unwrap();
    let mut chain = Producer::new(&db.root().unwrap());
    let mut block = chain.next_block(8);
    block.body.transactions.truncate(4); // an ether transfer first, a token transfer last
    let session = db.begin_session();
    execute_block(&mut StateDb::new(&session), &chain.chain, &block).map(|_| ())
}

/// The sender of transaction `index` of the tests' first block.
fn sender(index: usize) -> pagetrie_revm::revm::primitives::Address {
    let block = Producer::new(&[0; 32]).next_block(index + 1);
    block.body.transactions[index].recover_signer().unwrap()
}

#[test]
fn a_corrupt_account_record_fails_the_block() {
    let sender = sender(0);
    let result = block_over(keys::account(&sender), vec![1; 42]);
    assert!(matches!(result, Err(Error::Corrupt { key, .. }) if key == keys::account(&sender)));
}

#[test]
fn corrupt_or_mismatched_code_fails_the_block() {
    let code_key = keys::code(&keccak256(token::RUNTIME));
    let result = block_over(code_key, vec![0x60, 0x00]);
    assert!(matches!(result, Err(Error::Corrupt { key, .. }) if key == code_key));
}

#[test]
fn a_corrupt_slot_fails_the_block_and_a_read() {
    let sender = sender(3);
    let slot = token::balance_slot(&sender);
    let key = keys::storage(&token_address(), &slot);
    let result = block_over(key, vec![0, 5]);
    assert!(matches!(result, Err(Error::Corrupt { key: k, .. }) if k == key));

    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let session = db.begin_session();
    session.write(key, Some(vec![1; 33]));
    session.commit().unwrap();
    let read = Reader(&db).storage_ref(token_address(), slot);
    assert!(matches!(read, Err(Error::Corrupt { key: k, .. }) if k == key));
}
