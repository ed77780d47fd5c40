//! A small chain for the tests: a genesis of accounts, the token and a
//! contract that records block hashes, and blocks mixing every kind of
//! transaction, loaded both into pagetrie and into revm's in-memory
//! database.

#![allow(dead_code)] // Each test file uses part of it.

use std::collections::HashMap;
use std::path::Path;

use pagetrie::trie::{compute_root, hash_value};
use pagetrie::{Db, KeyPath, Node, Options};
use pagetrie_revm::revm::bytecode::Bytecode;
use pagetrie_revm::revm::database::{AccountState, CacheDB, InMemoryDB};
use pagetrie_revm::revm::primitives::{keccak256, Address, Bytes, B256, U256};
use pagetrie_revm::revm::state::AccountInfo;
use pagetrie_revm::{genesis, token, Block, Header, Tx};

pub const ACCOUNTS: u64 = 300;
pub const TOKENS_EACH: u64 = 1_000;
pub const BASEFEE: u64 = 7;
pub const GAS_PRICE: u128 = 9;

pub fn address(id: u64) -> Address {
    Address::from_slice(&keccak256(id.to_be_bytes())[..20])
}

pub fn token_address() -> Address {
    Address::repeat_byte(0x70)
}

/// Stores BLOCKHASH(NUMBER - 1) in slot NUMBER.
pub fn recorder_address() -> Address {
    Address::repeat_byte(0x71)
}

#[rustfmt::skip]
const RECORDER: [u8; 8] = [
    0x60, 0x01, // PUSH1 1
    0x43,       // NUMBER
    0x03,       // SUB        NUMBER - 1
    0x40,       // BLOCKHASH
    0x43,       // NUMBER
    0x55,       // SSTORE     storage[NUMBER] = BLOCKHASH(NUMBER - 1)
    0x00,       // STOP
];

/// Init code that writes a slot, then self-destructs to the caller.
#[rustfmt::skip]
const SHORT_LIVED: [u8; 7] = [
    0x60, 0x01, // PUSH1 1
    0x60, 0x00, // PUSH1 0
    0x55,       // SSTORE     storage[0] = 1
    0x33,       // CALLER
    0xff,       // SELFDESTRUCT
];

pub fn ether() -> U256 {
    U256::from(10u64).pow(U256::from(18))
}

/// The genesis state: accounts, the token (every account holds tokens), the
/// recorder, in pagetrie's layout and in revm's in-memory database.
pub fn genesis_entries() -> (Vec<(KeyPath, Vec<u8>)>, InMemoryDB) {
    let mut entries = Vec::new();
    let mut mem = InMemoryDB::default();
    let tok = token_address();
    // Contracts first: storage inserted into revm's database loads its account.
    for (at, code) in [
        (tok, token::runtime()),
        (
            recorder_address(),
            Bytecode::new_legacy(Bytes::from_static(&RECORDER)),
        ),
    ] {
        entries.extend(genesis::contract(&at, &code, U256::ZERO));
        let info = AccountInfo {
            nonce: 1,
            code_hash: keccak256(code.original_byte_slice()),
            code: Some(code),
            ..AccountInfo::default()
        };
        mem.insert_account_info(at, info);
    }
    let info = AccountInfo::from_balance(ether());
    for id in 0..ACCOUNTS {
        let a = address(id);
        entries.push(genesis::account(&a, &info));
        mem.insert_account_info(a, info.clone());
        let slot = token::balance_slot(&a);
        let tokens = U256::from(TOKENS_EACH);
        entries.extend(genesis::storage(&tok, &slot, &tokens));
        mem.insert_account_storage(tok, slot, tokens).unwrap();
    }
    (entries, mem)
}

pub fn import(path: &Path) -> (Db, InMemoryDB) {
    let (entries, mem) = genesis_entries();
    let db = Db::import(Options::new(path), entries, |_| {}).unwrap();
    (db, mem)
}

/// Makes blocks of every kind of transaction, all valid.
pub struct Chain {
    rng: u64,
    nonces: HashMap<Address, u64>,
    next_fresh: u64,
    pub number: u64,
    pub parent_hash: B256,
}

impl Chain {
    pub fn new() -> Chain {
        Chain {
            rng: 0x2545_f491_4f6c_dd1d,
            nonces: HashMap::new(),
            next_fresh: 1 << 40,
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

    fn tx(
        &mut self,
        caller: Address,
        to: Option<Address>,
        value: U256,
        data: Bytes,
        gas: u64,
    ) -> Tx {
        let nonce = self.nonces.entry(caller).or_insert(0);
        let tx = Tx {
            caller,
            to,
            value,
            data,
            nonce: *nonce,
            gas_limit: gas,
            gas_price: GAS_PRICE,
        };
        *nonce += 1;
        tx
    }

    /// The next block: `n` transactions.
    pub fn next_block(&mut self, n: usize) -> Block {
        self.number += 1;
        let mut txs = Vec::with_capacity(n);
        for i in 0..n {
            let from = address(self.random() % ACCOUNTS);
            let fresh = self.random().is_multiple_of(4);
            let to = if fresh {
                self.next_fresh += 1;
                address(self.next_fresh)
            } else {
                address(self.random() % ACCOUNTS)
            };
            let amount = U256::from(1 + self.random() % 5);
            let tx = match i % 8 {
                0..=2 => self.tx(
                    from,
                    Some(to),
                    amount * U256::from(1_000_000u64),
                    Bytes::new(),
                    21_000,
                ),
                3..=5 => self.tx(
                    from,
                    Some(token_address()),
                    U256::ZERO,
                    token::transfer_call(&to, amount),
                    100_000,
                ),
                // More tokens than anyone holds: reverts.
                6 if i % 16 == 6 => self.tx(
                    from,
                    Some(token_address()),
                    U256::ZERO,
                    token::transfer_call(&to, U256::from(TOKENS_EACH * 1000)),
                    100_000,
                ),
                // Nothing sent to a fresh account: touched, empty, not stored.
                6 => {
                    self.next_fresh += 1;
                    let nobody = address(self.next_fresh);
                    self.tx(from, Some(nobody), U256::ZERO, Bytes::new(), 21_000)
                }
                _ => match self.random() % 3 {
                    0 => self.tx(from, None, U256::ZERO, token::deploy_code(500), 300_000),
                    1 => self.tx(
                        from,
                        None,
                        U256::from(3),
                        Bytes::from_static(&SHORT_LIVED),
                        100_000,
                    ),
                    _ => self.tx(
                        from,
                        Some(recorder_address()),
                        U256::ZERO,
                        Bytes::new(),
                        50_000,
                    ),
                },
            };
            txs.push(tx);
        }
        Block {
            header: Header {
                number: self.number,
                parent_hash: self.parent_hash,
                timestamp: 1_700_000_000 + self.number * 12,
                beneficiary: Address::repeat_byte(0xbe),
                gas_limit: 30_000_000,
                basefee: BASEFEE,
            },
            txs,
        }
    }

    /// Records that `block` ended at `root`.
    pub fn sealed(&mut self, block: &Block, root: &Node) {
        self.parent_hash = block.hash(root);
    }
}

/// The root of the state revm's in-memory database holds, in pagetrie's
/// layout, computed without pagetrie's database.
pub fn expected_root(mem: &InMemoryDB) -> Node {
    let mut entries: Vec<(KeyPath, Vec<u8>)> = Vec::new();
    for (address, account) in &mem.cache.accounts {
        let exists = !matches!(account.account_state, AccountState::NotExisting);
        if !exists || account.info.is_empty() {
            continue;
        }
        entries.push(genesis::account(address, &account.info));
        for (slot, value) in &account.storage {
            entries.extend(genesis::storage(address, slot, value));
        }
    }
    for code in mem.cache.contracts.values() {
        entries.extend(genesis::code(code));
    }
    for (number, hash) in &mem.cache.block_hashes {
        let key = pagetrie_revm::keys::block_hash(number.to::<u64>());
        entries.push((key, hash.to_vec()));
    }
    let mut hashed: Vec<_> = entries.iter().map(|(k, v)| (*k, hash_value(v))).collect();
    hashed.sort();
    compute_root(hashed).unwrap()
}

/// Every account and slot revm's in-memory database holds, read through
/// pagetrie; panics at the first difference.
pub fn assert_same_state(db: &Db, mem: &CacheDB<pagetrie_revm::revm::database::EmptyDB>) {
    use pagetrie_revm::revm::DatabaseRef;
    let reader = pagetrie_revm::Reader(db);
    let mut slots = 0;
    for (address, account) in &mem.cache.accounts {
        let ours = reader.basic_ref(*address).unwrap().unwrap_or_default();
        let theirs = match account.account_state {
            AccountState::NotExisting => AccountInfo::default(),
            _ => account.info.clone(),
        };
        assert_eq!(
            (ours.balance, ours.nonce, ours.code_hash),
            (theirs.balance, theirs.nonce, theirs.code_hash),
            "account {address}"
        );
        for (slot, value) in &account.storage {
            assert_eq!(
                reader.storage_ref(*address, *slot).unwrap(),
                *value,
                "{address} slot {slot}"
            );
            slots += 1;
        }
    }
    assert!(
        slots >= ACCOUNTS as usize,
        "the comparison covered {slots} slots"
    );
}
