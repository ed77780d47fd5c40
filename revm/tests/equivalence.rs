//! The same blocks on pagetrie and on revm's in-memory database: equal
//! outcomes (the gas of every transaction), equal state (every account and
//! slot), and pagetrie's root equal to the root of the in-memory state in
//! the key layout, computed by the trie core alone.

mod common;

use common::*;
use pagetrie_revm::revm::database::AccountState;
use pagetrie_revm::revm::primitives::{Address, Bytes, U256};
use pagetrie_revm::revm::DatabaseRef;
use pagetrie_revm::{execute_block, token, Error, Reader, StateDb};

#[test]
fn pagetrie_and_the_in_memory_database_agree_on_every_block() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    assert_eq!(db.root().unwrap(), expected_root(&mem));
    let mut chain = Chain::new();
    let mut blocks = Vec::new();
    for _ in 0..8 {
        let block = chain.next_block(64);
        let session = db.begin_session();
        let mut state = StateDb::new(&session);
        let ours = execute_block(&mut state, &block).unwrap();
        state.finish().unwrap();
        let root = session.commit_and_prove().unwrap().root;
        let theirs = execute_block(&mut mem, &block).unwrap();
        assert_eq!(ours, theirs, "block {}", block.header.number);
        assert_eq!(root, expected_root(&mem), "block {}", block.header.number);
        chain.sealed(&block, &root);
        blocks.push((block, chain.parent_hash, ours));
    }
    assert_same_state(&db, &mem);

    // The blocks did what the comparison is meant to cover.
    let outcomes: Vec<_> = blocks.iter().flat_map(|(_, _, o)| o.txs.clone()).collect();
    assert!(
        outcomes.iter().any(|o| !o.success),
        "no transaction reverted"
    );
    let reader = Reader(&db);
    let (mut deployed, mut destroyed, mut recorded) = (0, 0, 0);
    for (block, _, _) in &blocks {
        for tx in block.txs.iter().filter(|tx| tx.to.is_none()) {
            let created = tx.caller.create(tx.nonce);
            let slot = token::balance_slot(&tx.caller);
            if tx.data == token::deploy_code(500) {
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
    for (i, (block, _, _)) in blocks.iter().enumerate().skip(1) {
        if block.txs.iter().any(|tx| tx.to == Some(recorder_address())) {
            let number = U256::from(block.header.number);
            // The hash of the block before, as the chain computed it.
            let parent = blocks[i - 1].1;
            let stored = reader.storage_ref(recorder_address(), number).unwrap();
            assert_eq!(stored, U256::from_be_bytes(parent.0));
            recorded += 1;
        }
    }
    assert!(
        deployed > 0 && destroyed > 0 && recorded > 0,
        "{deployed} {destroyed} {recorded}"
    );
}

#[test]
fn both_refuse_an_invalid_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let mut block = Chain::new().next_block(4);
    block.txs[2].nonce += 1;
    let session = db.begin_session();
    let ours = execute_block(&mut StateDb::new(&session), &block);
    let theirs = execute_block(&mut mem, &block);
    assert!(
        matches!(ours, Err(Error::InvalidTransaction { index: 2, .. })),
        "{ours:?}"
    );
    assert!(
        matches!(theirs, Err(Error::InvalidTransaction { index: 2, .. })),
        "{theirs:?}"
    );
}

#[test]
fn a_block_over_its_gas_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut block = Chain::new().next_block(3);
    block.header.gas_limit = 50_000;
    let session = db.begin_session();
    let result = execute_block(&mut StateDb::new(&session), &block);
    assert!(
        matches!(
            result,
            Err(Error::BlockGasLimit {
                index: 2,
                gas_limit: 21_000,
                available: 8_000
            })
        ),
        "{result:?}"
    );
}

#[test]
fn a_transaction_asking_for_more_gas_than_is_left_is_refused_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    // An ether transfer (limit 21,000), then token transfers (100,000 each,
    // about half of it used): the second fits what it would use, not its
    // limit.
    let mut block = Chain::new().next_block(4);
    block.txs.remove(1);
    block.txs.remove(1);
    assert_eq!(block.txs[1].gas_limit, 100_000);
    block.header.gas_limit = 21_000 + 99_999;
    let session = db.begin_session();
    let ours = execute_block(&mut StateDb::new(&session), &block);
    let theirs = execute_block(&mut mem, &block);
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
    let outcome = execute_block(&mut StateDb::new(&db.begin_session()), &block).unwrap();
    assert!(outcome.gas_used <= 21_000 + 99_999, "{}", outcome.gas_used);
}

#[test]
fn the_token_moves_balances_and_refuses_overdrafts_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let (a, b) = (address(1), address(2));
    let mut chain = Chain::new();
    let mut block = chain.next_block(0);
    let call = |nonce, value: u64, data: Bytes| pagetrie_revm::Tx {
        caller: a,
        to: Some(token_address()),
        value: U256::from(value),
        data,
        nonce,
        gas_limit: 100_000,
        gas_price: GAS_PRICE,
    };
    block.txs = vec![
        call(0, 0, token::transfer_call(&b, U256::from(400))),
        call(1, 0, token::transfer_call(&b, U256::from(601))),
        call(2, 1, token::transfer_call(&b, U256::from(1))),
        call(3, 0, token::transfer_call(&a, U256::from(600))),
    ];
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &block).unwrap();
    let success: Vec<_> = outcome.txs.iter().map(|t| t.success).collect();
    assert_eq!(success, [true, false, false, true]);
    state.finish().unwrap();
    session.commit().unwrap();
    let reader = Reader(&db);
    let balance = |holder: &Address| {
        reader
            .storage_ref(token_address(), token::balance_slot(holder))
            .unwrap()
    };
    assert_eq!(balance(&a), U256::from(600));
    assert_eq!(balance(&b), U256::from(1400));

    // balanceOf answers through revm's call path on the committed head.
    use pagetrie_revm::revm::context::Context;
    use pagetrie_revm::revm::database::WrapDatabaseRef;
    use pagetrie_revm::revm::{ExecuteEvm, MainBuilder, MainContext};
    let mut evm = Context::mainnet()
        .with_db(WrapDatabaseRef(Reader(&db)))
        .build_mainnet();
    let query = pagetrie_revm::Tx {
        caller: a,
        to: Some(token_address()),
        value: U256::ZERO,
        data: token::balance_of_call(&b),
        nonce: 4,
        gas_limit: 100_000,
        gas_price: 0,
    };
    let out = evm
        .transact(query.env())
        .unwrap()
        .result
        .into_output()
        .unwrap();
    assert_eq!(U256::from_be_slice(&out), U256::from(1400));
}
