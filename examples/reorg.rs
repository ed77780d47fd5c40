//! Versions: a node that reads and proves at recent roots, and reorganises.
//!
//! Commits three blocks, answers an RPC-style read and proof at the root one
//! block back, then handles a reorg: rolls back two blocks (durably) and
//! commits a competing block on the restored root.
//!
//! ```sh
//! cargo run --release --example reorg
//! ```

use pagetrie::trie::hash_value;
use pagetrie::{Db, Options};

fn block(db: &Db, writes: &[([u8; 32], &[u8])]) -> Result<[u8; 32], pagetrie::Error> {
    let session = db.begin_session();
    for (key, value) in writes {
        session.write(*key, Some(value.to_vec()));
    }
    session.commit()
}

fn hex(root: &[u8; 32]) -> String {
    root[..6].iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Keep the last 16 commits readable, provable and restorable.
    let db = Db::open(Options::new(dir.path()).history(16))?;
    let alice = [0xa1; 32];
    let bob = [0xb0; 32];

    let b1 = block(&db, &[(alice, b"100"), (bob, b"0")])?;
    let b2 = block(&db, &[(alice, b"90"), (bob, b"10")])?;
    let b3 = block(&db, &[(alice, b"80"), (bob, b"20")])?;
    println!("committed blocks 1 to 3; head {}", hex(&b3));
    println!(
        "retained roots: {:?}",
        db.roots()?.iter().map(hex).collect::<Vec<_>>()
    );

    // An RPC asks for alice at block 2: the value, and a proof of it.
    let value = db.read_at(&b2, &alice)?;
    let proof = db.prove_at(&b2, &[alice])?;
    proof
        .verify(&b2)?
        .confirm(&alice, value.as_deref().map(hash_value).as_ref())?;
    println!(
        "alice at block 2: {:?}, proof of {} bytes checks against {}",
        value.as_deref().map(String::from_utf8_lossy),
        proof.encode().len(),
        hex(&b2)
    );

    // A reorg: the chain switches to a fork of block 1.
    let back = db.rollback(2)?;
    assert_eq!(back, b1);
    println!("rolled back 2 blocks: head {} again (durable)", hex(&back));
    let fork = block(&db, &[(alice, b"50"), (bob, b"50")])?;
    println!(
        "committed the fork's block 2: head {}; alice {:?}",
        hex(&fork),
        db.read(&alice)?.as_deref().map(String::from_utf8_lossy)
    );
    println!(
        "retained roots: {:?} (blocks 2 and 3 of the old chain are gone)",
        db.roots()?.iter().map(hex).collect::<Vec<_>>()
    );
    Ok(())
}
