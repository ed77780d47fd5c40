//! The whole API in one run: open a database, write a block through a session,
//! commit it with a witness, check the witness, read the values back, and reopen.
//!
//! `cargo run --release --example quickstart -- [dir]` (default: a temporary
//! directory, deleted at the end).

use pagetrie::trie::hash_value;
use pagetrie::{Db, Options};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp = tempfile::tempdir()?;
    let dir = match std::env::args().nth(1) {
        Some(path) => std::path::PathBuf::from(path),
        None => temp.path().to_path_buf(),
    };

    let db = Db::open(Options::new(&dir))?;
    println!("opened {} at root {}", dir.display(), hex(&db.root()?));

    // One block: a thousand accounts, keyed by the hash of their number.
    let key = |i: u64| hash_value(&i.to_be_bytes());
    let session = db.begin_session();
    for i in 0..1000u64 {
        session.write(key(i), Some((i * 10).to_le_bytes().to_vec()));
    }
    let out = session.commit_and_prove()?;
    println!("block 1: root {}", hex(&out.root));

    // The next block reads one account and moves its balance to another.
    let session = db.begin_session();
    let from = session.read(&key(7))?.ok_or("account 7 is missing")?;
    let balance = u64::from_le_bytes(from.as_slice().try_into()?);
    session.write(key(7), Some(0u64.to_le_bytes().to_vec()));
    session.write(key(1001), Some(balance.to_le_bytes().to_vec()));
    let out = session.commit_and_prove()?;
    println!(
        "block 2: root {}, witness {} bytes",
        hex(&out.root),
        out.witness.encode().len()
    );

    // What a light client checks: the witness proves the read against the old
    // root and, with the writes applied, yields the new one.
    let verified = out.witness.verify(&out.prev_root)?;
    verified.confirm(&key(7), Some(&hash_value(&from)))?;
    verified.confirm(&key(1001), None)?;
    assert_eq!(out.witness.verify_update(&out.prev_root)?, out.root);
    println!("witness verified against the previous root");

    // Committed values are durable: reopen and read them back.
    drop(db);
    let db = Db::open(Options::new(&dir))?;
    assert_eq!(db.root()?, out.root);
    assert_eq!(db.read(&key(1001))?, Some(70u64.to_le_bytes().to_vec()));
    assert_eq!(db.read(&key(7))?, Some(0u64.to_le_bytes().to_vec()));
    println!("reopened at the same root; balances read back");
    Ok(())
}
