//! The same blocks on pagetrie and on revm's in-memory database: equal
//! outcomes (every receipt: status, gas, logs), equal state (every account
//! and slot), and pagetrie's root equal to the root of the in-memory state
//! in the key layout, computed by the trie core alone.

mod common;

use common::*;
use pagetrie_revm::consensus::transaction::SignerRecoverable;
use pagetrie_revm::consensus::{Transaction, TxEnvelope};
use pagetrie_revm::revm::database::AccountState;
use pagetrie_revm::revm::primitives::{Address, Bytes, TxKind, U256};
use pagetrie_revm::revm::DatabaseRef;
use pagetrie_revm::{execute_block, genesis, token, Block, Error, Reader, StateDb};

#[test]
fn pagetrie_and_the_in_memory_database_agree_on_every_block() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let genesis_root = db.root().unwrap();
    assert_eq!(genesis_root, expected_root(&mem));
    let mut producer = Producer::new(&genesis_root);
    let genesis = producer.parent.clone();
    let mut blocks: Vec<Block> = Vec::new();
    let mut outcomes = Vec::new();
    for _ in 0..8 {
        let block = producer.next_block(64);
        let session = db.begin_session();
        let mut state = StateDb::new(&session);
        let ours = execute_block(&mut state, &producer.chain, &block).unwrap();
        state.finish().unwrap();
        let root = session.commit_and_prove().unwrap().root;
        let theirs = execute_block(&mut mem, &producer.chain, &block).unwrap();
        assert_eq!(ours, theirs, "block {}", block.header.number);
        assert_eq!(root, expected_root(&mem), "block {}", block.header.number);
        blocks.push(producer.seal(&ours, block, &root));
        outcomes.push(ours);
    }
    assert_same_state(&db, &mem);

    // The blocks did what the comparison is meant to cover.
    let receipts: Vec<_> = outcomes.iter().flat_map(|o| o.receipts.clone()).collect();
    assert!(
        receipts.iter().any(|r| !r.status()),
        "no transaction reverted"
    );
    assert!(receipts.iter().any(|r| !r.logs().is_empty()), "no log");
    let types: std::collections::HashSet<_> = blocks
        .iter()
        .flat_map(|b| b.body.transactions.iter().map(|tx| tx.tx_type() as u8))
        .collect();
    assert_eq!(types.len(), 5, "transaction types {types:?}");
    assert!(blocks.iter().any(|b| b.header.blob_gas_used > Some(0)));
    let reader = Reader(&db);
    let (mut deployed, mut destroyed, mut recorded) = (0, 0, 0);
    for block in &blocks {
        for tx in &block.body.transactions {
            if !TxEnvelope::is_create(tx) {
                continue;
            }
            let sender = tx.recover_signer().unwrap();
            let created = sender.create(tx.nonce());
            let slot = token::balance_slot(&sender);
            if *tx.input() == token::deploy_code(500) {
                assert_eq!(reader.storage_ref(created, slot).unwrap(), U256::from(500));
                deployed += 1;
            } else {
                assert_eq!(reader.basic_ref(created).unwrap(), None);
                assert_eq!(reader.storage_ref(created, U256::ZERO).unwrap(), U256::ZERO);
                let theirs = &mem.cache.accounts[&created];
                assert!(matches!(theirs.account_state, AccountState::NotExisting));
                destroyed += 1;
            }
        }
    }
    // BLOCKHASH one and three blocks back, served by the history contract.
    let hash_of = |number: u64| match number {
        0 => genesis.hash_slow(),
        n => blocks[n as usize - 1].header.hash_slow(),
    };
    for block in &blocks[3..] {
        if block
            .body
            .transactions
            .iter()
            .any(|tx| tx.to() == Some(recorder_address()))
        {
            let n = block.header.number;
            let slot = |s: u64| {
                reader
                    .storage_ref(recorder_address(), U256::from(s))
                    .unwrap()
            };
            assert_eq!(slot(2 * n), U256::from_be_bytes(hash_of(n - 1).0));
            assert_eq!(slot(2 * n + 1), U256::from_be_bytes(hash_of(n - 3).0));
            recorded += 1;
        }
    }
    assert!(
        deployed > 0 && destroyed > 0 && recorded > 0,
        "{deployed} {destroyed} {recorded}"
    );
}

#[test]
fn withdrawals_credit_gwei_after_the_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    let block = producer.next_block(0);
    let withdrawals = block.body.withdrawals.clone().unwrap();
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    execute_block(&mut state, &producer.chain, &block).unwrap();
    state.finish().unwrap();
    session.commit().unwrap();
    let reader = Reader(&db);
    for w in withdrawals.iter() {
        let balance = reader.basic_ref(w.address).unwrap().unwrap().balance;
        let before = if balance > ether() {
            ether()
        } else {
            U256::ZERO
        };
        assert_eq!(balance - before, U256::from(w.amount) * U256::from(GWEI));
    }
}

/// The block with transaction `index` of `block` replaced by `tx`, signed
/// by wallet `from`.
fn with_tx(block: &mut Block, index: usize, tx: pagetrie_revm::consensus::TxEnvelope) {
    block.body.transactions[index] = tx;
}

#[test]
fn both_refuse_an_invalid_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mem) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    let mut block = producer.next_block(1);
    // A nonce ahead of the sender's, then a chain id of another chain.
    let bad_nonce = eip1559(
        5,
        TxKind::Call(Address::ZERO),
        U256::ZERO,
        Bytes::new(),
        21_000,
    );
    let mut other_chain = eip1559(
        0,
        TxKind::Call(Address::ZERO),
        U256::ZERO,
        Bytes::new(),
        21_000,
    );
    other_chain.chain_id = CHAIN_ID + 1;
    for tx in [bad_nonce, other_chain] {
        block.body.transactions.truncate(1);
        block
            .body
            .transactions
            .push(producer.wallet(7).sign(tx).unwrap());
        let session = db.begin_session();
        let ours = execute_block(&mut StateDb::new(&session), &producer.chain, &block);
        // The in-memory database keeps what a failed block committed.
        let theirs = execute_block(&mut mem.clone(), &producer.chain, &block);
        for result in [ours, theirs] {
            assert!(
                matches!(result, Err(Error::InvalidTransaction { index: 1, .. })),
                "{result:?}"
            );
        }
    }
}

#[test]
fn a_forged_signature_recovers_another_sender_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    let mut block = producer.next_block(2);
    // One transaction's signature over another's fields: whoever it
    // recovers to did not sign it, and holds nothing.
    let pagetrie_revm::consensus::TxEnvelope::Eip1559(signed) = &block.body.transactions[0] else {
        panic!("the first transaction is an EIP-1559 transfer");
    };
    let mut forged = signed.tx().clone();
    forged.value = ether() / U256::from(2);
    let forged = pagetrie_revm::consensus::Signed::new_unhashed(forged, *signed.signature());
    with_tx(&mut block, 0, forged.into());
    let result = execute_block(
        &mut StateDb::new(&db.begin_session()),
        &producer.chain,
        &block,
    );
    assert!(
        matches!(
            result,
            Err(Error::InvalidTransaction { index: 0, .. })
                | Err(Error::InvalidSignature { index: 0 })
        ),
        "{result:?}"
    );
    // A signature that recovers no key at all.
    let pagetrie_revm::consensus::TxEnvelope::Eip1559(signed) = &block.body.transactions[1] else {
        panic!("the second transaction is an EIP-1559 transfer");
    };
    let zero = pagetrie_revm::consensus::Signed::new_unhashed(
        signed.tx().clone(),
        pagetrie_revm::Signature::new(U256::ZERO, U256::ZERO, false),
    );
    with_tx(&mut block, 1, zero.into());
    let result = execute_block(
        &mut StateDb::new(&db.begin_session()),
        &producer.chain,
        &block,
    );
    assert!(
        matches!(result, Err(Error::InvalidSignature { index: 1 })),
        "{result:?}"
    );
}

#[test]
fn a_transaction_asking_for_more_gas_than_is_left_is_refused_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    // An ether transfer (limit 21,000), then a token transfer (100,000,
    // about half of it used): it fits what it would use, not its limit.
    let transfer = eip1559(
        0,
        TxKind::Call(Address::ZERO),
        U256::from(1),
        Bytes::new(),
        21_000,
    );
    let mut call = eip1559(
        1,
        TxKind::Call(token_address()),
        U256::ZERO,
        token::transfer_call(&Address::ZERO, U256::from(1)),
        100_000,
    );
    call.max_priority_fee_per_gas = 0;
    let wallet = producer.wallet(3).clone();
    let txs = vec![wallet.sign(transfer).unwrap(), wallet.sign(call).unwrap()];
    let mut block = producer.block_of(txs);
    block.header.gas_limit = 21_000 + 99_999;
    let ours = execute_block(
        &mut StateDb::new(&db.begin_session()),
        &producer.chain,
        &block,
    );
    let theirs = execute_block(&mut mem, &producer.chain, &block);
    for result in [ours, theirs] {
        assert!(
            matches!(
                result,
                Err(Error::BlockGasLimit {
                    index: 1,
                    gas_limit: 100_000,
                    available: 99_999
                })
            ),
            "{result:?}"
        );
    }
    // Ran, it would have fit: with room for its limit the block passes.
    block.header.gas_limit += 1;
    let outcome = execute_block(
        &mut StateDb::new(&db.begin_session()),
        &producer.chain,
        &block,
    )
    .unwrap();
    assert!(outcome.gas_used <= 21_000 + 99_999, "{}", outcome.gas_used);
}

#[test]
fn the_token_moves_balances_and_refuses_overdrafts_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut producer = Producer::new(&db.root().unwrap());
    let (a, b) = (producer.wallet(1).clone(), producer.wallet(2).address());
    let call = |nonce, value: u64, input: Bytes| {
        a.sign(eip1559(
            nonce,
            TxKind::Call(token_address()),
            U256::from(value),
            input,
            100_000,
        ))
        .unwrap()
    };
    let txs = vec![
        call(0, 0, token::transfer_call(&b, U256::from(400))),
        call(1, 0, token::transfer_call(&b, U256::from(601))),
        call(2, 1, token::transfer_call(&b, U256::from(1))),
        call(3, 0, token::transfer_call(&a.address(), U256::from(600))),
    ];
    let block = producer.block_of(txs);
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &producer.chain, &block).unwrap();
    let success: Vec<_> = outcome.receipts.iter().map(|r| r.status()).collect();
    assert_eq!(success, [true, false, false, true]);
    state.finish().unwrap();
    session.commit().unwrap();
    let reader = Reader(&db);
    let balance = |holder: &Address| {
        reader
            .storage_ref(token_address(), token::balance_slot(holder))
            .unwrap()
    };
    assert_eq!(balance(&a.address()), U256::from(600));
    assert_eq!(balance(&b), U256::from(1400));

    // balanceOf answers through revm's call path on the committed head.
    use pagetrie_revm::revm::context::{Context, TxEnv};
    use pagetrie_revm::revm::database::WrapDatabaseRef;
    use pagetrie_revm::revm::{ExecuteEvm, MainBuilder, MainContext};
    let mut evm = Context::mainnet()
        .with_db(WrapDatabaseRef(Reader(&db)))
        .build_mainnet();
    let query = TxEnv::builder()
        .caller(a.address())
        .kind(TxKind::Call(token_address()))
        .data(token::balance_of_call(&b))
        .nonce(4)
        .gas_limit(100_000)
        .build()
        .unwrap();
    let out = evm.transact(query).unwrap().result.into_output().unwrap();
    assert_eq!(U256::from_be_slice(&out), U256::from(1400));
}

#[test]
fn a_creation_over_existing_storage_leaves_none_of_it_as_revms_in_memory_database_does() {
    let dir = tempfile::tempdir().unwrap();
    let (mut entries, mut mem) = genesis_entries();
    let creator = wallet(5);
    let at = creator.address().create(0);
    // Slots at the address the creation lands on, with no account there
    // (which would make the creation collide).
    entries.extend(genesis::storage(&at, &U256::from(1), &U256::from(7)));
    mem.insert_account_storage(at, U256::from(1), U256::from(7))
        .unwrap();
    let db = pagetrie::Db::import(pagetrie::Options::new(dir.path()), entries, |_| {}).unwrap();
    assert_eq!(
        Reader(&db).storage_ref(at, U256::from(1)).unwrap(),
        U256::from(7)
    );
    let mut producer = Producer::new(&db.root().unwrap());
    // Init code: storage[2] = storage[1] + 1, storage[3] = 5; no code.
    #[rustfmt::skip]
    let init = Bytes::from_static(&[
        0x60, 0x01, 0x54, 0x60, 0x01, 0x01, 0x60, 0x02, 0x55, // SSTORE(2, SLOAD(1) + 1)
        0x60, 0x05, 0x60, 0x03, 0x55,                         // SSTORE(3, 5)
        0x00,
    ]);
    let create = creator
        .sign(eip1559(0, TxKind::Create, U256::ZERO, init, 100_000))
        .unwrap();
    let block = producer.block_of(vec![create]);
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let ours = execute_block(&mut state, &producer.chain, &block).unwrap();
    state.finish().unwrap();
    session.commit().unwrap();
    let theirs = execute_block(&mut mem, &producer.chain, &block).unwrap();
    assert_eq!(ours, theirs);
    assert!(ours.receipts[0].status());
    let reader = Reader(&db);
    for slot in 1..=3u64 {
        let slot = U256::from(slot);
        let expected = mem.cache.accounts[&at]
            .storage
            .get(&slot)
            .copied()
            .unwrap_or_default();
        assert_eq!(
            reader.storage_ref(at, slot).unwrap(),
            expected,
            "slot {slot}"
        );
    }
    // The old slot read as empty during the creation, and reads so after.
    assert_eq!(reader.storage_ref(at, U256::from(1)).unwrap(), U256::ZERO);
    assert_eq!(
        reader.storage_ref(at, U256::from(2)).unwrap(),
        U256::from(1)
    );
    assert_eq!(reader.basic_ref(at).unwrap().unwrap().nonce, 1);
}
