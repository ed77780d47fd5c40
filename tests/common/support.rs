//! Test helpers shared by the unit tests (src/test_support.rs includes this
//! file) and the integration tests (tests/common): std, blake3 and proptest
//! only, never the crate's API, so that both sides compile the same code.
#![allow(dead_code)] // Each test binary uses a different part.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Lines};
use std::process::{ChildStdout, Command, ExitStatus, Stdio};

use proptest::test_runner::Config as ProptestConfig;

/// xorshift64 (shifts 13, 7, 17): repeatable randomness from a nonzero seed.
pub struct Rng(pub u64);

impl Rng {
    /// A generator for run or block `n`: the odd multiplier spreads
    /// neighbouring `n` apart and `| 1` keeps the seed nonzero.
    pub fn for_index(n: u64) -> Rng {
        Rng(n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Key `i`: the blake3 hash of its 8 little-endian bytes, so keys spread
/// uniformly over the trie.
pub fn key(i: u64) -> [u8; 32] {
    *blake3::hash(&i.to_le_bytes()).as_bytes()
}

/// The first `bits` bits of `base`, the rest of `rest`.
pub fn splice(base: &[u8; 32], rest: &[u8; 32], bits: usize) -> [u8; 32] {
    let mut out = *rest;
    for i in 0..bits {
        let mask = 0x80u8 >> (i % 8);
        out[i / 8] = (out[i / 8] & !mask) | (base[i / 8] & mask);
    }
    out
}

/// A proptest config with `default` cases unless PROPTEST_CASES says otherwise.
pub fn cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig::with_cases(cases)
}

/// A run of test `name` (its full path: `--exact`) of this same test binary,
/// in a child process with `env` set, whose printed lines come back through
/// [`Child::wait_for`] and [`Child::kill`].
pub struct Child {
    process: std::process::Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Child {
    pub fn spawn(name: &str, env: &[(&str, &OsStr)]) -> Child {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .stdout(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut process = command.spawn().unwrap();
        let lines = BufReader::new(process.stdout.take().unwrap()).lines();
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
    pub fn kill(mut self) -> (ExitStatus, Vec<String>) {
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
