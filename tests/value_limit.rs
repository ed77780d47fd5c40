//! One limit on a value's length, `MAX_VALUE_LEN`, kept by every path that
//! takes values in (a commit, an import, a state-sync chunk), and values at
//! the limit stay updatable.
//!
//! The refusals build their over-long values with `vec![0; n]`, whose pages
//! the allocator maps zeroed and nothing touches: they cost no RAM or disk.
//! The end-to-end test at the limit writes 1 GiB and is ignored; run it with
//! `cargo test --release --test value_limit -- --ignored`.

use pagetrie::trie::proof::prove_multi;
use pagetrie::trie::{compute_root, hash_value};
use pagetrie::{Chunk, Db, Error, Options, MAX_VALUE_LEN};

const OVER: usize = MAX_VALUE_LEN as usize + 1;

fn too_large<T>(result: Result<T, Error>, what: &str) {
    match result {
        Err(Error::ValueTooLarge(len)) => assert_eq!(len, OVER, "{what}"),
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("{what}: a value over the limit was taken"),
    }
}

#[test]
fn a_value_over_the_limit_is_refused_everywhere_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(Options::new(dir.path().join("db"))).unwrap();
    let session = db.begin_session();
    session.write([1; 32], Some(b"one".to_vec()));
    let root = session.commit().unwrap();

    let session = db.begin_session();
    session.write([2; 32], Some(vec![0; OVER]));
    too_large(session.commit(), "a commit");
    let session = db.begin_session();
    session.write([2; 32], Some(vec![0; OVER]));
    too_large(session.finish(), "a finish");
    let session = db.begin_session();
    session.write([2; 32], Some(vec![0; OVER]));
    too_large(session.into_pending(), "a pending session");
    assert_eq!(db.root().unwrap(), root);
    assert_eq!(db.read(&[2; 32]).unwrap(), None);

    let entries = vec![([3; 32], b"three".to_vec()), ([4; 32], vec![0; OVER])];
    too_large(
        Db::import(Options::new(dir.path().join("imported")), entries, |_| {}),
        "an import",
    );
    assert!(!dir.path().join("imported").exists());

    let entries = vec![([5; 32], vec![0; OVER])];
    let hashed = [([5; 32], hash_value(b""))];
    let proof = prove_multi(&hashed, &[[0; 32]]).unwrap();
    too_large(Chunk::new([0; 32], None, entries, &proof), "a chunk");
}

#[test]
fn a_chunk_whose_encoding_names_a_value_over_the_limit_is_refused_unread() {
    let value = b"abc".to_vec();
    let hashed = [([5; 32], hash_value(&value))];
    let proof = prove_multi(&hashed, &[[0; 32]]).unwrap();
    let chunk = Chunk::new([0; 32], None, vec![([5; 32], value)], &proof).unwrap();
    let mut bytes = chunk.encode();
    assert!(Chunk::decode(&bytes).is_ok());
    // The entry: its key, its length, its bytes.
    let mut entry = [5u8; 32].to_vec();
    entry.extend_from_slice(&3u32.to_le_bytes());
    entry.extend_from_slice(b"abc");
    let at = bytes
        .windows(entry.len())
        .position(|w| w == entry)
        .expect("the entry in the encoding")
        + 32;
    bytes[at..at + 4].copy_from_slice(&(OVER as u32).to_le_bytes());
    too_large(Chunk::decode(&bytes), "a decoded chunk");
}

/// Writes, overwrites and deletes a value of exactly `MAX_VALUE_LEN` bytes,
/// with and without history, across a reopen. Every commit that replaced
/// such a value used to fail.
#[test]
#[ignore = "writes 1 GiB to a temporary directory and holds a few GiB of RAM"]
fn a_value_at_the_limit_can_be_overwritten_and_deleted() {
    for history in [0, 4] {
        let dir = tempfile::tempdir().unwrap();
        let options = || Options::new(dir.path()).history(history);
        let big = vec![7u8; MAX_VALUE_LEN as usize];
        let db = Db::open(options()).unwrap();
        let session = db.begin_session();
        session.write([1; 32], Some(big.clone()));
        session.write([2; 32], Some(b"two".to_vec()));
        session.commit().unwrap();
        drop(db);
        let db = Db::open(options()).unwrap();
        assert_eq!(db.read(&[1; 32]).unwrap().map(|v| v.len()), Some(big.len()));
        let session = db.begin_session();
        session.write([1; 32], Some(b"small".to_vec()));
        session.commit().unwrap();
        if history > 0 {
            let back = db.roots().unwrap()[1];
            assert_eq!(db.read_at(&back, &[1; 32]).unwrap().as_ref(), Some(&big));
        }
        let session = db.begin_session();
        session.write([1; 32], Some(big.clone()));
        session.commit().unwrap();
        let session = db.begin_session();
        session.write([1; 32], None);
        let root = session.commit().unwrap();
        let expected = compute_root([([2; 32], hash_value(b"two"))]).unwrap();
        assert_eq!(root, expected);
        drop(db);
        let db = Db::open(options()).unwrap();
        assert_eq!(db.root().unwrap(), expected);
        assert_eq!(db.read(&[1; 32]).unwrap(), None);
    }
}
