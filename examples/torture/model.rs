//! The model a torture run checks the database against: its states, the
//! blocks of writes it draws, and the generator behind them.

use std::collections::BTreeMap;

use pagetrie::trie::{compute_root, hash_value};
use pagetrie::{KeyPath, Node};

/// Keys a block draws from: a quarter share 200+ leading bits, a quarter 24+.
pub(crate) const POOL: u64 = 800;

pub(crate) type Model = BTreeMap<KeyPath, Vec<u8>>;
pub(crate) type Block = BTreeMap<KeyPath, Option<Vec<u8>>>;

/// Commits kept readable before the newest (`Options::history`).
pub(crate) const WINDOW: usize = 4;

/// The model: the newest state and the retained ones before it.
#[derive(Clone, Default)]
pub(crate) struct State {
    pub(crate) model: Model,
    /// Oldest first, at most [`WINDOW`].
    pub(crate) history: Vec<Model>,
}

impl State {
    /// After a commit of `writes`.
    pub(crate) fn committed(&self, writes: &Block) -> State {
        let mut next = self.clone();
        apply(&mut next.model, writes);
        next.history.push(self.model.clone());
        if next.history.len() > WINDOW {
            next.history.remove(0);
        }
        next
    }

    /// After a rollback of `k` commits (`k` at most the history's length).
    pub(crate) fn rolled_back(&self, k: usize) -> State {
        let mut next = self.clone();
        let keep = self.history.len() - k;
        next.model = next.history[keep].clone();
        next.history.truncate(keep);
        next
    }

    /// The retained roots, newest first, as `Db::roots` gives them.
    pub(crate) fn roots(&self) -> Vec<Node> {
        std::iter::once(&self.model)
            .chain(self.history.iter().rev())
            .map(root_of)
            .collect()
    }

    /// The state `back` commits before the newest.
    pub(crate) fn version(&self, back: usize) -> &Model {
        match back {
            0 => &self.model,
            b => &self.history[self.history.len() - b],
        }
    }
}

/// A xorshift generator.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub(crate) fn key(i: u64) -> KeyPath {
    let h = *blake3::hash(&i.to_le_bytes()).as_bytes();
    let shared = match i % 4 {
        0 => 200 + (i / 4 % 50) as usize,
        1 => 24 + (i / 4 % 16) as usize,
        _ => return h,
    };
    let mut out = h;
    for bit in 0..shared {
        let mask = 0x80u8 >> (bit % 8);
        out[bit / 8] = (out[bit / 8] & !mask) | (0x5a & mask);
    }
    out
}

/// Block `n`'s writes: 1 to 60 keys; deletes, empty values, short ones, ones
/// near the inline limit and long ones in overflow space.
pub(crate) fn block(seed: u64, n: u64) -> Block {
    let mut rng = Rng::new(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut writes = Block::new();
    for _ in 0..1 + rng.below(60) {
        let i = rng.below(POOL);
        let len = match rng.below(20) {
            0..=4 => None,
            5 => Some(0),
            6..=12 => Some(1 + rng.below(40)),
            13..=16 => Some(200 + rng.below(100)),
            _ => Some(300 + rng.below(20_000)),
        };
        let value = len.map(|len| (0..len).map(|j| (n * 31 + i * 7 + j) as u8).collect());
        writes.insert(key(i), value);
    }
    writes
}

pub(crate) fn apply(model: &mut Model, writes: &Block) {
    for (k, v) in writes {
        match v {
            Some(v) => model.insert(*k, v.clone()),
            None => model.remove(k),
        };
    }
}

pub(crate) fn root_of(model: &Model) -> Node {
    compute_root(model.iter().map(|(k, v)| (*k, hash_value(v)))).expect("sorted")
}
