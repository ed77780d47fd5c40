//! A light client's side: it holds only a trusted root and receives a commit's
//! witness as bytes. With nothing but the verification API (which also builds
//! without `std`), it checks the reads the block made and computes the next root.
//!
//! `cargo run --release --example light_client`
//!
//! The "full node" half below makes the bytes; everything after the hand-over
//! uses only `Witness::decode`, `verify`, `confirm` and `verify_update`.

use pagetrie::trie::hash_value;
use pagetrie::{Db, Error, Node, Options, Witness};

/// What the client does with a block: nothing but the trusted root and bytes.
fn check_block(
    trusted_root: &Node,
    witness_bytes: &[u8],
    claimed: &[([u8; 32], Option<&[u8]>)],
) -> Result<Node, Error> {
    let witness = Witness::decode(witness_bytes)?;
    let verified = witness.verify(trusted_root)?;
    for (key, value) in claimed {
        verified.confirm(key, value.map(hash_value).as_ref())?;
    }
    witness.verify_update(trusted_root)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Full node: a database with some accounts, then a block that reads two of
    // them (one absent) and writes one.
    let dir = tempfile::tempdir()?;
    let db = Db::open(Options::new(dir.path()))?;
    let session = db.begin_session();
    for i in 0..10_000u32 {
        session.write(hash_value(&i.to_le_bytes()), Some(vec![1; 8]));
    }
    session.commit()?;
    let trusted_root = db.root()?;

    let (present, absent) = (hash_value(&5u32.to_le_bytes()), [0xab; 32]);
    let session = db.begin_session();
    let value = session.read(&present)?;
    assert_eq!(session.read(&absent)?, None);
    session.write(present, Some(vec![2; 8]));
    let out = session.commit_and_prove()?;
    let bytes = out.witness.encode();

    // Light client: the trusted root, the bytes and the node's claims.
    let claims = [(present, value.as_deref()), (absent, None)];
    let next_root = check_block(&trusted_root, &bytes, &claims)?;
    assert_eq!(next_root, out.root);
    println!(
        "witness of {} bytes checked: 2 reads confirmed, next root {}",
        bytes.len(),
        next_root
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );

    // A lie is caught: claim a different value for the key read.
    let lie = [(present, Some(&[9u8; 8][..]))];
    match check_block(&trusted_root, &bytes, &lie) {
        Err(e) => println!("a false claim is refused: {e}"),
        Ok(_) => return Err("a false claim was accepted".into()),
    }
    // So is a witness with a flipped bit.
    let mut damaged = bytes.clone();
    damaged[bytes.len() / 2] ^= 1;
    match check_block(&trusted_root, &damaged, &claims) {
        Err(e) => println!("a damaged witness is refused: {e}"),
        Ok(root) if root != out.root => println!("a damaged witness yields another root"),
        Ok(_) => return Err("a damaged witness was accepted".into()),
    }
    Ok(())
}
