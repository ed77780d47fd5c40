//! Builds a trie of random accounts in memory, prints its root, then proves a few
//! present and absent keys, checks the proof, and applies a block of writes to the
//! proof to get the next root, as a light client would.
//!
//! `cargo run --release --example in_memory_trie -- [accounts]` (default 1,000,000).

use std::time::Instant;

use pagetrie::trie::proof::{prove_multi, MultiProof};
use pagetrie::trie::{compute_root, hash_value, KeyPath, ValueHash};

fn account_key(id: u64) -> KeyPath {
    hash_value(&id.to_be_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let accounts: u64 = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|e| format!("accounts must be a number: {e}"))?,
        None => 1_000_000,
    };
    let balance = hash_value(&1000u64.to_be_bytes());
    let mut entries: Vec<(KeyPath, ValueHash)> =
        (0..accounts).map(|i| (account_key(i), balance)).collect();
    entries.sort_unstable();

    let start = Instant::now();
    let root = compute_root(entries.clone())?;
    let took = start.elapsed();
    println!("accounts:     {accounts}");
    println!("root:         {}", hex(&root));
    println!("compute_root: {:.1} ms", took.as_secs_f64() * 1e3);

    // A block touching two existing accounts and one fresh one.
    let (sender, receiver, fresh) = (
        account_key(1),
        account_key(accounts / 2),
        account_key(accounts + 1),
    );
    let proof = prove_multi(&entries, &[sender, receiver, fresh])?;
    let bytes = proof.encode();
    let proof = MultiProof::decode(&bytes)?;
    let verified = proof.verify(&root)?;
    verified.confirm(&sender, Some(&balance))?;
    verified.confirm(&fresh, None)?;
    println!(
        "witness:      3 keys, {} siblings, {} bytes; sender present, fresh account proven absent",
        proof.siblings.len(),
        bytes.len()
    );

    let mut writes = vec![
        (sender, Some(hash_value(&999u64.to_be_bytes()))),
        (receiver, Some(hash_value(&1001u64.to_be_bytes()))),
        (fresh, Some(hash_value(&1u64.to_be_bytes()))),
    ];
    writes.sort();
    let next_root = proof.verify_update(&root, &writes)?;

    // The same writes applied to the full set must give the same root.
    let mut updated = entries;
    for (key, value) in &writes {
        match (updated.binary_search_by(|e| e.0.cmp(key)), value) {
            (Ok(i), Some(v)) => updated[i].1 = *v,
            (Ok(i), None) => drop(updated.remove(i)),
            (Err(i), Some(v)) => updated.insert(i, (*key, *v)),
            (Err(_), None) => {}
        }
    }
    let recomputed = compute_root(updated)?;
    println!("next root:    {} (from the witness alone)", hex(&next_root));
    if next_root != recomputed {
        return Err("witness update disagrees with a full rebuild".into());
    }
    println!("check:        full rebuild agrees");
    Ok(())
}
