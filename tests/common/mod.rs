//! Shared test helpers: a deliberately naive reference trie, key strategies, hex.
#![allow(dead_code)] // Each test crate uses a different part.

use std::collections::BTreeMap;

use proptest::prelude::*;

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

/// `(key, blake3(value))` for every entry, sorted: what the crate's provers take.
pub fn entries(model: &BTreeMap<Key, Vec<u8>>) -> Vec<(Key, [u8; 32])> {
    model
        .iter()
        .map(|(k, v)| (*k, *blake3::hash(v).as_bytes()))
        .collect()
}

/// The first `bits` bits of `base`, the rest of `rest`.
pub fn splice(base: &Key, rest: &Key, bits: usize) -> Key {
    let mut out = *rest;
    for i in 0..bits {
        let mask = 0x80u8 >> (i % 8);
        out[i / 8] = (out[i / 8] & !mask) | (base[i / 8] & mask);
    }
    out
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

/// A config with `default` cases unless PROPTEST_CASES says otherwise.
pub fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
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

/// A run of test `name` of this same test binary, in a child process with
/// `env` set, whose printed lines come back through [`Child::next_line`].
pub struct Child {
    process: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Child {
    pub fn spawn(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> Child {
        use std::io::BufRead;
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .stdout(std::process::Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut process = command.spawn().unwrap();
        let lines = std::io::BufReader::new(process.stdout.take().unwrap()).lines();
        Child { process, lines }
    }

    /// Waits for a line containing `tag` (the harness prints the test's
    /// name on the same line as the test's first output); returns what
    /// follows the tag.
    pub fn wait_for(&mut self, tag: &str) -> String {
        loop {
            let line = self.lines.next().expect("child output").unwrap();
            if let Some(rest) = tagged(&line, tag) {
                return rest;
            }
        }
    }

    /// Sends SIGKILL and returns how it ended and the lines it printed
    /// since those already read.
    pub fn kill(mut self) -> (std::process::ExitStatus, Vec<String>) {
        self.process.kill().unwrap();
        let status = self.process.wait().unwrap();
        (status, self.lines.map(Result::unwrap).collect())
    }
}

/// What follows `tag` in `line`, trimmed.
pub fn tagged(line: &str, tag: &str) -> Option<String> {
    line.find(tag)
        .map(|at| line[at + tag.len()..].trim().to_string())
}

/// A xorshift generator for kill delays.
pub struct Xorshift(pub u64);

impl Xorshift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
