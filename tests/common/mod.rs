//! Shared test helpers: a deliberately naive reference trie, key strategies,
//! hex, and (from support.rs, which the unit tests share) the generator, keys
//! by index, proptest cases and the child-process harness.
#![allow(dead_code)] // Each test crate uses a different part.

mod support;

use std::collections::BTreeMap;

use pagetrie::trie::{compute_root, hash_value};
use proptest::prelude::*;
// By name, as a glob would be ambiguous with the prelude's `Rng` trait;
// allowed unused, as each test crate uses a different part.
#[allow(unused_imports)]
pub use support::{cases, key, splice, tagged, Child, Rng};

pub type Key = [u8; 32];

/// The trie root by docs/design.md section 1 read literally: split by bit, recurse,
/// no shortcuts, no sharing of code with the crate.
pub fn naive_root(model: &BTreeMap<Key, Vec<u8>>) -> [u8; 32] {
    let items: Vec<(Key, [u8; 32])> = model
        .iter()
        .map(|(k, v)| (*k, *blake3::hash(v).as_bytes()))
        .collect();
    naive_subtree(items, 0)
}

fn naive_subtree(items: Vec<(Key, [u8; 32])>, depth: usize) -> [u8; 32] {
    if items.is_empty() {
        return [0; 32];
    }
    if items.len() == 1 {
        let mut h = blake3::Hasher::new();
        h.update(&items[0].0);
        h.update(&items[0].1);
        let mut out = *h.finalize().as_bytes();
        out[0] |= 0b1000_0000;
        return out;
    }
    let (left, right): (Vec<_>, Vec<_>) = items
        .into_iter()
        .partition(|(k, _)| (k[depth / 8] >> (7 - depth % 8)) & 1 == 0);
    let mut h = blake3::Hasher::new();
    h.update(&naive_subtree(left, depth + 1));
    h.update(&naive_subtree(right, depth + 1));
    let mut out = *h.finalize().as_bytes();
    out[0] &= 0b0111_1111;
    out
}

/// The crate's root of `model` (the builder's, unlike [`naive_root`]).
pub fn root_of(model: &BTreeMap<Key, Vec<u8>>) -> [u8; 32] {
    compute_root(model.iter().map(|(k, v)| (*k, hash_value(v)))).unwrap()
}

/// `(key, blake3(value))` for every entry, sorted: what the crate's provers take.
pub fn entries(model: &BTreeMap<Key, Vec<u8>>) -> Vec<(Key, [u8; 32])> {
    model
        .iter()
        .map(|(k, v)| (*k, *blake3::hash(v).as_bytes()))
        .collect()
}

/// Keys clustered around a base: each shares a random 0 to 256-bit prefix with it.
pub fn clustered_keys(max: usize) -> impl Strategy<Value = Vec<Key>> {
    (
        any::<Key>(),
        prop::collection::vec((0usize..=256, any::<Key>()), 0..max),
    )
        .prop_map(|(base, parts)| {
            parts
                .iter()
                .map(|(bits, rest)| splice(&base, rest, *bits))
                .collect()
        })
}

/// Values: often empty, sometimes long.
pub fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        prop::collection::vec(any::<u8>(), 1..8),
        prop::collection::vec(any::<u8>(), 0..200),
    ]
}

/// The cases of the reference vectors, tests/data/roots.json (roots NOMT
/// computed), each a name and steps of ops and the root after.
pub fn reference_cases() -> Vec<serde_json::Value> {
    const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/roots.json");
    let text = std::fs::read_to_string(VECTORS)
        .unwrap_or_else(|e| panic!("reference vectors missing at {VECTORS}: {e}"));
    let doc: serde_json::Value = serde_json::from_str(&text).expect("vectors parse as JSON");
    doc["cases"].as_array().expect("cases array").clone()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd-length hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

pub fn key_from_hex(s: &str) -> Key {
    unhex(s).try_into().expect("32-byte key path")
}

/// Whether `test` can run on io_uring here. Without it the test fails,
/// naming the reason, unless PAGETRIE_ALLOW_NO_URING is set: then it says on
/// stderr that it is skipped (written past the harness's capture, so a
/// passing run shows it) and the caller returns.
pub fn io_uring_or_skip(test: &str) -> bool {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let options = pagetrie::Options::new(dir.path()).io_backend(pagetrie::IoBackend::IoUring);
    let reason = match pagetrie::Db::open(options) {
        Ok(_) => return true,
        Err(e) => e.to_string(),
    };
    if std::env::var_os("PAGETRIE_ALLOW_NO_URING").is_none() {
        panic!("{test}: io_uring unavailable ({reason}); set PAGETRIE_ALLOW_NO_URING=1 to skip it");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: io_uring unavailable ({reason})"
    );
    false
}
