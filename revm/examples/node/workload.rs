//! The node's state and blocks: `2^n` funded accounts that each hold the
//! token, a first block that deploys the token, and blocks of ether and
//! token transfers between random accounts, a share of them to fresh ones.

use std::collections::HashMap;

use pagetrie::KeyPath;
use pagetrie::Session;
use pagetrie_revm::revm::primitives::{Address, Bytes, B256, U256};
use pagetrie_revm::revm::state::AccountInfo;
use pagetrie_revm::{genesis, keys, token, Block, Header, Tx};

/// Deploys the token in the first block, with its first transaction.
pub const DEPLOYER: Address = Address::repeat_byte(0xde);
/// Tokens each account starts with.
pub const TOKENS_EACH: u64 = 1_000_000;
/// Tokens the deployment credits the deployer with.
pub const SUPPLY: u32 = 1_000_000;
/// Gas the deployment may use (it uses about 130,000).
const DEPLOY_GAS: u64 = 500_000;
/// Gas limits of a token transfer and an ether transfer.
const TOKEN_GAS: u64 = 100_000;
const ETHER_GAS: u64 = 21_000;
/// Wei an ether transfer sends per unit of its random amount (1 to 10).
const WEI_PER_AMOUNT: u64 = 1_000_000_000;
/// Wei per gas burned by every block.
pub const BASEFEE: u64 = 1_000_000_000;
/// Wei per gas each transaction pays: the base fee and a tip.
pub const GAS_PRICE: u128 = 2_000_000_000;

/// Account `id`'s address.
pub fn address(id: u64) -> Address {
    Address::from_slice(&blake3::hash(&id.to_be_bytes()).as_bytes()[..20])
}

/// Where the token lives: created by [`DEPLOYER`]'s first transaction, so
/// known before it is deployed.
pub fn token_address() -> Address {
    DEPLOYER.create(0)
}

/// Wei each account needs so that it could send every transaction of the
/// run, whichever sender the random draw picks: no sender runs out of
/// ether, however few accounts there are. `None` if it overflows.
pub fn funding(blocks: usize, txs: usize) -> Option<U256> {
    let gas_price = U256::from(GAS_PRICE);
    let token = U256::from(TOKEN_GAS).checked_mul(gas_price)?;
    let ether = U256::from(ETHER_GAS)
        .checked_mul(gas_price)?
        .checked_add(U256::from(10 * WEI_PER_AMOUNT))?;
    let all = U256::from(blocks).checked_mul(U256::from(txs))?;
    let need = all.checked_mul(token.max(ether))?;
    Some(need.max(U256::from(10u64).pow(U256::from(18))))
}

/// The genesis entries, in any order: each account with `funding` wei and
/// its token balance, and the deployer with one ether.
///
/// The balances are slots of the token's address before the token is
/// deployed there (block 1): a genesis allocation standing in for an
/// airdrop of `2^n` transfers. revm creates over them, since it checks a
/// creation's address for a nonce or code only; an Ethereum client
/// following EIP-7610 would refuse a creation at an address with storage.
pub fn genesis(log2: u32, funding: U256) -> impl Iterator<Item = (KeyPath, Vec<u8>)> {
    let funded = AccountInfo::from_balance(funding);
    let tokens = U256::from(TOKENS_EACH);
    let token = token_address();
    let accounts = (0..1u64 << log2).flat_map(move |id| {
        let a = address(id);
        let balance = genesis::storage(&token, &token::balance_slot(&a), &tokens);
        std::iter::once(genesis::account(&a, &funded)).chain(balance)
    });
    let deployer = AccountInfo::from_balance(U256::from(10u64).pow(U256::from(18)));
    accounts.chain(std::iter::once(genesis::account(&DEPLOYER, &deployer)))
}

/// The shape of every transfer block.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    txs: usize,
    /// Percent of transactions that are token transfers; the rest send ether.
    token_percent: u64,
    /// Percent of recipients that are fresh accounts.
    fresh_percent: u64,
    /// Room for every transaction's gas limit.
    gas_limit: u64,
}

impl Shape {
    /// Blocks of `txs` transactions; `None` if their gas overflows.
    pub fn new(txs: usize, token_percent: u64, fresh_percent: u64) -> Option<Shape> {
        let gas_limit = u64::try_from(txs).ok()?.checked_mul(TOKEN_GAS)?;
        Some(Shape {
            txs,
            token_percent,
            fresh_percent,
            gas_limit,
        })
    }
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

    /// The first block: [`DEPLOYER`] creates the token.
    pub fn deployment(&mut self) -> Block {
        let deploy = Tx {
            caller: DEPLOYER,
            to: None,
            value: U256::ZERO,
            data: token::deploy_code(SUPPLY),
            nonce: 0,
            gas_limit: DEPLOY_GAS,
            gas_price: GAS_PRICE,
        };
        self.block(vec![deploy], DEPLOY_GAS)
    }

    /// The next block of transfers.
    pub fn next_block(&mut self, shape: Shape) -> Block {
        let token = token_address();
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
                (token, U256::ZERO, call, TOKEN_GAS)
            } else {
                let value = U256::from(amount) * U256::from(WEI_PER_AMOUNT);
                (recipient, value, Bytes::new(), ETHER_GAS)
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
        self.block(txs, shape.gas_limit)
    }

    /// The block after the last one, of `txs`.
    fn block(&mut self, txs: Vec<Tx>, gas_limit: u64) -> Block {
        self.number += 1;
        Block {
            header: Header {
                number: self.number,
                parent_hash: self.parent_hash,
                timestamp: 1_800_000_000u64.saturating_add(self.number.saturating_mul(12)),
                beneficiary: Address::repeat_byte(0xbe),
                gas_limit,
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
    let token = token_address();
    for tx in &block.txs {
        session.warm_up(&keys::account(&tx.caller));
        let Some(to) = tx.to else { continue };
        session.warm_up(&keys::account(&to));
        if to == token && tx.data.len() >= 36 {
            let recipient = Address::from_slice(&tx.data[16..36]);
            for holder in [tx.caller, recipient] {
                session.warm_up(&keys::storage(&token, &token::balance_slot(&holder)));
            }
        }
    }
}
