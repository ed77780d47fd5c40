//! The node's state and blocks: `2^n` funded accounts that each hold the
//! token, and blocks of ether and token transfers between random accounts,
//! a share of them to fresh ones.

use std::collections::HashMap;

use pagetrie::KeyPath;
use pagetrie::Session;
use pagetrie_revm::revm::primitives::{Address, Bytes, B256, U256};
use pagetrie_revm::revm::state::AccountInfo;
use pagetrie_revm::{genesis, keys, token, Block, Header, Tx};

/// Where the token lives.
pub const TOKEN: Address = Address::repeat_byte(0x70);
/// Tokens each account starts with.
pub const TOKENS_EACH: u64 = 1_000_000;
/// Wei per gas burned by every block.
pub const BASEFEE: u64 = 1_000_000_000;
/// Wei per gas each transaction pays: the base fee and a tip.
pub const GAS_PRICE: u128 = 2_000_000_000;

/// Account `id`'s address.
pub fn address(id: u64) -> Address {
    Address::from_slice(&blake3::hash(&id.to_be_bytes()).as_bytes()[..20])
}

/// The genesis entries, in any order: each account with one ether and its
/// token balance, then the token contract.
pub fn genesis(log2: u32) -> impl Iterator<Item = (KeyPath, Vec<u8>)> {
    let funded = AccountInfo::from_balance(U256::from(10u64).pow(U256::from(18)));
    let tokens = U256::from(TOKENS_EACH);
    let accounts = (0..1u64 << log2).flat_map(move |id| {
        let a = address(id);
        let balance = genesis::storage(&TOKEN, &token::balance_slot(&a), &tokens);
        std::iter::once(genesis::account(&a, &funded)).chain(balance)
    });
    accounts.chain(genesis::contract(&TOKEN, &token::runtime(), U256::ZERO))
}

/// The shape of every block.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub txs: usize,
    /// Percent of transactions that are token transfers; the rest send ether.
    pub token_percent: u64,
    /// Percent of recipients that are fresh accounts.
    pub fresh_percent: u64,
}

/// Makes the chain's blocks; it knows every sender's nonce, as a mempool
/// does, since every transaction it made is valid.
pub struct Chain {
    existing: u64,
    next_fresh: u64,
    nonces: HashMap<u64, u64>,
    rng: u64,
    pub number: u64,
    pub parent_hash: B256,
}

impl Chain {
    pub fn new(log2: u32) -> Chain {
        Chain {
            existing: 1 << log2,
            next_fresh: 1 << log2,
            nonces: HashMap::new(),
            rng: 0x9e37_79b9_7f4a_7c15,
            number: 0,
            parent_hash: B256::ZERO,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// The next block.
    pub fn next_block(&mut self, shape: Shape) -> Block {
        self.number += 1;
        let mut txs = Vec::with_capacity(shape.txs);
        for _ in 0..shape.txs {
            let sender = self.random() % self.existing;
            let recipient = if self.random() % 100 < shape.fresh_percent {
                self.next_fresh += 1;
                address(self.next_fresh - 1)
            } else {
                address(self.random() % self.existing)
            };
            let amount = 1 + self.random() % 10;
            let (to, value, data, gas_limit) = if self.random() % 100 < shape.token_percent {
                let call = token::transfer_call(&recipient, U256::from(amount));
                (TOKEN, U256::ZERO, call, 100_000)
            } else {
                (
                    recipient,
                    U256::from(amount * 1_000_000_000),
                    Bytes::new(),
                    21_000,
                )
            };
            let nonce = self.nonces.entry(sender).or_insert(0);
            txs.push(Tx {
                caller: address(sender),
                to: Some(to),
                value,
                data,
                nonce: *nonce,
                gas_limit,
                gas_price: GAS_PRICE,
            });
            *nonce += 1;
        }
        Block {
            header: Header {
                number: self.number,
                parent_hash: self.parent_hash,
                timestamp: 1_800_000_000 + 12 * self.number,
                beneficiary: Address::repeat_byte(0xbe),
                gas_limit: shape.txs as u64 * 100_000,
                basefee: BASEFEE,
            },
            txs,
        }
    }

    /// Records that `block` ended at `root`: the next block's parent hash.
    pub fn sealed(&mut self, block: &Block, root: &pagetrie::Node) {
        self.parent_hash = block.hash(root);
    }
}

/// Hints the keys `block`'s transactions name: each sender's and callee's
/// account, and for a token transfer the two balances' slots.
pub fn warm_up(session: &Session, block: &Block) {
    for tx in &block.txs {
        session.warm_up(&keys::account(&tx.caller));
        let Some(to) = tx.to else { continue };
        session.warm_up(&keys::account(&to));
        if to == TOKEN && tx.data.len() >= 36 {
            let recipient = Address::from_slice(&tx.data[16..36]);
            for holder in [tx.caller, recipient] {
                session.warm_up(&keys::storage(&TOKEN, &token::balance_slot(&holder)));
            }
        }
    }
}
