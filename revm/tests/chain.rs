//! A chain that goes on across a reopen, and blocks built on a pending
//! block (an overlay), end at the same roots as one run straight through.

mod common;

use common::*;
use pagetrie::{Db, Node, Options};
use pagetrie_revm::revm::DatabaseRef;
use pagetrie_revm::{execute_block, Reader, StateDb};

/// Executes and commits the chain's next block on `db`; returns its root.
fn commit_next(
    db: &Db,
    chain: &mut Chain,
    mem: &mut pagetrie_revm::revm::database::InMemoryDB,
) -> Node {
    let block = chain.next_block(48);
    let session = db.begin_session();
    execute_block(&mut StateDb::new(&session), &block).unwrap();
    let root = session.commit_and_prove().unwrap().root;
    execute_block(mem, &block).unwrap();
    chain.sealed(&block, &root);
    root
}

#[test]
fn a_reopen_in_the_middle_of_the_chain_continues_with_equal_roots() {
    let straight_dir = tempfile::tempdir().unwrap();
    let (straight, mut straight_mem) = import(straight_dir.path());
    let mut straight_chain = Chain::new();
    let roots: Vec<Node> = (0..6)
        .map(|_| commit_next(&straight, &mut straight_chain, &mut straight_mem))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let mut chain = Chain::new();
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
    let mut straight_chain = Chain::new();
    let roots: Vec<Node> = (0..3)
        .map(|_| commit_next(&straight, &mut straight_chain, &mut straight_mem))
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let (db, mut mem) = import(dir.path());
    let mut chain = Chain::new();
    assert_eq!(commit_next(&db, &mut chain, &mut mem), roots[0]);

    // Block 2 stays pending; block 3 executes on it.
    let block2 = chain.next_block(48);
    let session = db.begin_session();
    execute_block(&mut StateDb::new(&session), &block2).unwrap();
    let pending = session.finish().unwrap().into_overlay();
    execute_block(&mut mem, &block2).unwrap();
    assert_eq!(pending.root(), roots[1]);
    chain.sealed(&block2, &pending.root());

    // Reads of the pending state see block 2; the head does not yet.
    let sender = block2.txs[0].caller;
    let pending_nonce = Reader(&pending).basic_ref(sender).unwrap().unwrap().nonce;
    let head_nonce = Reader(&db).basic_ref(sender).unwrap().unwrap().nonce;
    assert!(pending_nonce > head_nonce);

    let block3 = chain.next_block(48);
    let session = db.begin_session_on(&pending);
    execute_block(&mut StateDb::new(&session), &block3).unwrap();
    let last = session.finish().unwrap().into_overlay();
    execute_block(&mut mem, &block3).unwrap();
    last.commit().unwrap();
    assert_eq!(db.root().unwrap(), roots[2]);
    assert_eq!(db.root().unwrap(), expected_root(&mem));
    assert_same_state(&db, &mem);
}
