//! A chain that goes on across a reopen, and blocks built on a pending
//! block (an overlay), end at the same roots as one run straight through;
//! a block that fails leaves nothing behind.

mod common;

use common::*;
use pagetrie::{Db, Node, Options};
use pagetrie_revm::consensus::transaction::SignerRecoverable;
use pagetrie_revm::revm::primitives::{Address, Bytes, TxKind, U256};
use pagetrie_revm::revm::DatabaseRef;
use pagetrie_revm::{execute_block, Block, Error, Reader, StateDb};

/// Executes and commits the chain's next block on `db`; returns its root.
fn commit_next(
    db: &Db,
    chain: &mut Producer,
    mem: &mut pagetrie_revm::revm::database::InMemoryDB,
) -> Node {
    let block = chain.next_block(48);
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &chain.chain, &block).unwrap();
    state.finish().unwrap();
    let root = session.commit_and_prove().unwrap().root;
    execute_block(mem, &chain.chain, &block).unwrap();
    chain.seal(&outcome, block, &root);
    root
}

#[test]
fn a_reopen_in_the_middle_of_the_chain_continues_with_equal_roots() {
    let straight_dir = tempfile::tempdir().unwrap();
    let (straight, mut straight_mem) = import(straight_dir.path());
    let mut straight_chain = Producer::new(&straight.root().unwrap());
    let roots: Vec<Node> = (0..6)
        .map(|_| commit_next(&straight, &mut straight_chain, &mut straight_mem))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let mut chain = Producer::new(&db.root().unwrap());
    for root in &roots[..3] {
        assert_eq!(commit_next(&db, &mut chain, &mut mem), *root);
    }
    drop(db);
    let db = Db::open(Options::new(dir.path())).unwrap();
    assert_eq!(db.root().unwrap(), roots[2]);
    for root in &roots[3..] {
        assert_eq!(commit_next(&db, &mut chain, &mut mem), *root);
    }
    assert_eq!(db.root().unwrap(), expected_root(&mem));
    assert_same_state(&db, &mem);
}

#[test]
fn blocks_on_a_pending_block_end_where_the_chain_does() {
    let straight_dir = tempfile::tempdir().unwrap();
    let (straight, mut straight_mem) = import(straight_dir.path());
    let mut straight_chain = Producer::new(&straight.root().unwrap());
    let roots: Vec<Node> = (0..3)
        .map(|_| commit_next(&straight, &mut straight_chain, &mut straight_mem))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let mut chain = Producer::new(&db.root().unwrap());
    assert_eq!(commit_next(&db, &mut chain, &mut mem), roots[0]);

    // Block 2 stays pending; block 3 executes on it.
    let block2 = chain.next_block(48);
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let outcome = execute_block(&mut state, &chain.chain, &block2).unwrap();
    state.finish().unwrap();
    let pending = session.finish().unwrap().into_overlay();
    execute_block(&mut mem, &chain.chain, &block2).unwrap();
    assert_eq!(pending.root(), roots[1]);
    let block2 = chain.seal(&outcome, block2, &pending.root());

    // Reads of the pending state see block 2; the head does not yet.
    let sender = block2.body.transactions[0].recover_signer().unwrap();
    let pending_nonce = Reader(&pending).basic_ref(sender).unwrap().unwrap().nonce;
    let head_nonce = Reader(&db).basic_ref(sender).unwrap().unwrap().nonce;
    assert!(pending_nonce > head_nonce);

    let block3 = chain.next_block(48);
    let session = db.begin_session_on(&pending);
    let mut state = StateDb::new(&session);
    execute_block(&mut state, &chain.chain, &block3).unwrap();
    state.finish().unwrap();
    let last = session.finish().unwrap().into_overlay();
    execute_block(&mut mem, &chain.chain, &block3).unwrap();
    last.commit().unwrap();
    assert_eq!(db.root().unwrap(), roots[2]);
    assert_eq!(db.root().unwrap(), expected_root(&mem));
    assert_same_state(&db, &mem);
}

/// Executes `block`, which must fail as `failed` says, on a session of `db`,
/// then commits the session: neither it nor the database holds any of the
/// block.
fn fails_without_a_trace(
    db: &Db,
    chain: &Producer,
    block: &Block,
    failed: impl Fn(&Error) -> bool,
) {
    let before = db.root().unwrap();
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    let err = execute_block(&mut state, &chain.chain, block).unwrap_err();
    assert!(failed(&err), "{err:?}");
    // Transactions before the failing one ran: there was something to leak.
    assert!(!state.changes().writes.is_empty());
    assert!(matches!(state.finish(), Err(Error::BlockFailed)));
    let out = session.commit_and_prove().unwrap();
    assert_eq!(out.prev_root, before);
    assert_eq!(out.root, before);
    assert_eq!(db.root().unwrap(), before);
}

#[test]
fn a_failed_block_leaves_the_session_and_the_database_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = import(dir.path());
    let mut chain = Producer::new(&db.root().unwrap());
    let good = chain.next_block(8);
    let from = chain.wallet(7).clone();
    let transfer = |nonce, value| {
        from.sign(eip1559(
            nonce,
            TxKind::Call(Address::ZERO),
            value,
            Bytes::new(),
            21_000,
        ))
        .unwrap()
    };

    let mut bad_nonce = good.clone();
    bad_nonce.body.transactions[5] = transfer(3, U256::from(1));
    fails_without_a_trace(&db, &chain, &bad_nonce, |e| {
        matches!(e, Error::InvalidTransaction { index: 5, .. })
    });

    let mut broke = good.clone();
    broke.body.transactions[6] = transfer(0, ether() * U256::from(2));
    fails_without_a_trace(&db, &chain, &broke, |e| {
        matches!(e, Error::InvalidTransaction { index: 6, .. })
    });

    // Three ether transfers run; the first token transfer asks for more gas
    // than is left.
    let mut over = good.clone();
    over.header.gas_limit = 3 * 21_000 + 99_999;
    fails_without_a_trace(&db, &chain, &over, |e| {
        matches!(e, Error::BlockGasLimit { index: 3, .. })
    });

    // The database goes on from where it was.
    let before = db.root().unwrap();
    let session = db.begin_session();
    let mut state = StateDb::new(&session);
    execute_block(&mut state, &chain.chain, &good).unwrap();
    state.finish().unwrap();
    assert_ne!(session.commit().unwrap(), before);
}
