//! A small chain for the tests: a genesis of wallets, the token, a contract
//! that records block hashes and the system contracts, and blocks mixing
//! every kind of signed transaction, loaded both into pagetrie and into
//! revm's in-memory database.

#![allow(dead_code)] // Each test file uses part of it.

use std::collections::HashMap;
use std::path::Path;

use pagetrie::trie::{compute_root, hash_value};
use pagetrie::{Db, KeyPath, Node, Options};
use pagetrie_revm::consensus::{TxEip1559, TxEip2930, TxEip4844, TxEip7702, TxEnvelope, TxLegacy};
use pagetrie_revm::eips::eip2930::{AccessList, AccessListItem};
use pagetrie_revm::eips::eip4895::Withdrawal;
use pagetrie_revm::eips::eip7702::Authorization;
use pagetrie_revm::revm::bytecode::Bytecode;
use pagetrie_revm::revm::database::{AccountState, CacheDB, EmptyDB, InMemoryDB};
use pagetrie_revm::revm::primitives::{keccak256, Address, Bytes, TxKind, B256, U256};
use pagetrie_revm::revm::state::AccountInfo;
use pagetrie_revm::{
    codec, genesis, next_block, token, Block, BlockAttributes, BlockOutcome, Chain, Header, Wallet,
};

pub const CHAIN_ID: u64 = 1337;
pub const ACCOUNTS: u64 = 300;
pub const TOKENS_EACH: u64 = 1_000;
pub const GWEI: u128 = 1_000_000_000;
/// What every transaction offers per gas: far above the base fee, which
/// starts at 1 gwei and falls while blocks stay under half full.
pub const MAX_FEE: u128 = 10 * GWEI;
pub const TIP: u128 = GWEI;
pub const GENESIS_TIME: u64 = 1_700_000_000;
pub const GAS_LIMIT: u64 = 30_000_000;

pub fn chain() -> Chain {
    Chain::new(CHAIN_ID)
}

pub fn wallet(id: u64) -> Wallet {
    Wallet::derive(id)
}

/// An address no wallet of the genesis holds.
pub fn fresh_address(id: u64) -> Address {
    Address::from_slice(&keccak256(id.to_be_bytes())[..20])
}

pub fn token_address() -> Address {
    Address::repeat_byte(0x70)
}

/// Stores BLOCKHASH(NUMBER - 1) in slot 2 * NUMBER and BLOCKHASH(NUMBER - 3)
/// in slot 2 * NUMBER + 1, then logs NUMBER as a topic.
pub fn recorder_address() -> Address {
    Address::repeat_byte(0x71)
}

#[rustfmt::skip]
const RECORDER: [u8; 30] = [
    0x60, 0x01, 0x43, 0x03, 0x40, // BLOCKHASH(NUMBER - 1)
    0x60, 0x02, 0x43, 0x02,       // 2 * NUMBER
    0x55,                         // SSTORE
    0x60, 0x03, 0x43, 0x03, 0x40, // BLOCKHASH(NUMBER - 3)
    0x60, 0x01, 0x60, 0x02, 0x43, 0x02, 0x01, // 2 * NUMBER + 1
    0x55,                         // SSTORE
    0x43, 0x60, 0x00, 0x60, 0x00, // NUMBER, size 0, offset 0
    0xa1,                         // LOG1
    0x00,                         // STOP
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

pub fn short_lived_code() -> Bytes {
    Bytes::from_static(&SHORT_LIVED)
}

/// A blob's versioned hash: version 1 (KZG) then any 31 bytes.
pub fn versioned_hash() -> B256 {
    let mut hash = B256::repeat_byte(7);
    hash.0[0] = 1;
    hash
}

pub fn ether() -> U256 {
    U256::from(10u64).pow(U256::from(18))
}

/// The genesis state: wallets' accounts, the token (every wallet holds
/// tokens), the recorder and the system contracts, in pagetrie's layout and
/// in revm's in-memory database.
pub fn genesis_entries() -> (Vec<(KeyPath, Vec<u8>)>, InMemoryDB) {
    let mut entries = genesis::system_contracts();
    let mut mem = InMemoryDB::default();
    let tok = token_address();
    let system = [
        (
            pagetrie_revm::eips::eip2935::HISTORY_STORAGE_ADDRESS,
            &pagetrie_revm::eips::eip2935::HISTORY_STORAGE_CODE,
        ),
        (
            pagetrie_revm::eips::eip4788::BEACON_ROOTS_ADDRESS,
            &pagetrie_revm::eips::eip4788::BEACON_ROOTS_CODE,
        ),
        (
            pagetrie_revm::eips::eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS,
            &pagetrie_revm::eips::eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_CODE,
        ),
        (
            pagetrie_revm::eips::eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS,
            &pagetrie_revm::eips::eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_CODE,
        ),
    ]
    .map(|(at, code)| (at, Bytecode::new_raw(code.clone())));
    for (at, code) in &system {
        mem.insert_account_info(*at, contract_info(code));
    }
    // Contracts first: storage inserted into revm's database loads its account.
    for (at, code) in [
        (tok, token::runtime()),
        (
            recorder_address(),
            Bytecode::new_legacy(Bytes::from_static(&RECORDER)),
        ),
    ] {
        entries.extend(genesis::contract(&at, &code, U256::ZERO));
        mem.insert_account_info(at, contract_info(&code));
    }
    let info = AccountInfo::from_balance(ether());
    for id in 0..ACCOUNTS {
        let a = wallet(id).address();
        entries.push(genesis::account(&a, &info));
        mem.insert_account_info(a, info.clone());
        let slot = token::balance_slot(&a);
        let tokens = U256::from(TOKENS_EACH);
        entries.extend(genesis::storage(&tok, &slot, &tokens));
        mem.insert_account_storage(tok, slot, tokens).unwrap();
    }
    (entries, mem)
}

fn contract_info(code: &Bytecode) -> AccountInfo {
    AccountInfo {
        nonce: 1,
        code_hash: keccak256(code.original_byte_slice()),
        code: Some(code.clone()),
        ..AccountInfo::default()
    }
}

pub fn import(path: &Path) -> (Db, InMemoryDB) {
    let (entries, mem) = genesis_entries();
    let db = Db::import(Options::new(path), entries, |_| {}).unwrap();
    (db, mem)
}

/// An EIP-1559 transaction on the tests' chain with the tests' fees.
pub fn eip1559(nonce: u64, to: TxKind, value: U256, input: Bytes, gas_limit: u64) -> TxEip1559 {
    TxEip1559 {
        chain_id: CHAIN_ID,
        nonce,
        gas_limit,
        max_fee_per_gas: MAX_FEE,
        max_priority_fee_per_gas: TIP,
        to,
        value,
        access_list: AccessList::default(),
        input,
    }
}

/// Makes blocks of every kind of transaction, all valid, on the parent it
/// was last told of.
pub struct Producer {
    rng: u64,
    nonces: HashMap<Address, u64>,
    wallets: Vec<Wallet>,
    next_fresh: u64,
    pub chain: Chain,
    /// The header the next block builds on.
    pub parent: Header,
}

impl Producer {
    /// A producer on the genesis whose state root is `root`.
    pub fn new(root: &Node) -> Producer {
        let chain = chain();
        let parent = genesis::header(&chain, root, GENESIS_TIME, GAS_LIMIT);
        Producer {
            rng: 0x2545_f491_4f6c_dd1d,
            nonces: HashMap::new(),
            wallets: (0..ACCOUNTS).map(wallet).collect(),
            next_fresh: 1 << 40,
            chain,
            parent,
        }
    }

    fn random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    pub fn wallet(&self, id: u64) -> &Wallet {
        &self.wallets[id as usize]
    }

    /// The next nonce of wallet `id`, taken.
    pub fn take_nonce(&mut self, id: u64) -> u64 {
        let nonce = self
            .nonces
            .entry(self.wallets[id as usize].address())
            .or_insert(0);
        *nonce += 1;
        *nonce - 1
    }

    fn fresh(&mut self) -> Address {
        self.next_fresh += 1;
        fresh_address(self.next_fresh)
    }

    /// Transaction `i` of a block, from wallet `from`: transfers as EIP-1559,
    /// token calls as legacy (EIP-155), creations as EIP-2930 with an access
    /// list, calls to the recorder as EIP-1559, delegations as EIP-7702.
    fn tx(&mut self, i: usize, from: u64) -> TxEnvelope {
        let to = if self.random().is_multiple_of(4) {
            self.fresh()
        } else {
            let id = self.random() % ACCOUNTS;
            self.wallets[id as usize].address()
        };
        let amount = U256::from(1 + self.random() % 5);
        let nonce = self.take_nonce(from);
        let legacy = |nonce, input: Bytes| TxLegacy {
            chain_id: Some(CHAIN_ID),
            nonce,
            gas_price: MAX_FEE,
            gas_limit: 100_000,
            to: TxKind::Call(token_address()),
            value: U256::ZERO,
            input,
        };
        let wallet = self.wallets[from as usize].clone();
        let signed = match i % 8 {
            0..=2 => wallet.sign(eip1559(
                nonce,
                TxKind::Call(to),
                amount * U256::from(1_000_000u64),
                Bytes::new(),
                21_000,
            )),
            3..=5 => wallet.sign(legacy(nonce, token::transfer_call(&to, amount))),
            // More tokens than anyone holds: reverts.
            6 if i % 16 == 6 => wallet.sign(legacy(
                nonce,
                token::transfer_call(&to, U256::from(TOKENS_EACH * 1000)),
            )),
            // Nothing sent to a fresh account: touched, empty, not stored.
            6 => {
                let nobody = self.fresh();
                wallet.sign(eip1559(
                    nonce,
                    TxKind::Call(nobody),
                    U256::ZERO,
                    Bytes::new(),
                    21_000,
                ))
            }
            _ => match self.random() % 5 {
                0 | 1 => {
                    let (value, input, gas_limit) = if self.random().is_multiple_of(2) {
                        (U256::ZERO, token::deploy_code(500), 300_000)
                    } else {
                        (U256::from(3), short_lived_code(), 100_000)
                    };
                    wallet.sign(TxEip2930 {
                        chain_id: CHAIN_ID,
                        nonce,
                        gas_price: MAX_FEE,
                        gas_limit,
                        to: TxKind::Create,
                        value,
                        access_list: AccessList(vec![AccessListItem {
                            address: token_address(),
                            storage_keys: vec![B256::ZERO],
                        }]),
                        input,
                    })
                }
                2 => wallet.sign(eip1559(
                    nonce,
                    TxKind::Call(recorder_address()),
                    U256::ZERO,
                    Bytes::new(),
                    80_000,
                )),
                // A blob transaction without its blobs: one versioned hash.
                3 => wallet.sign(TxEip4844 {
                    chain_id: CHAIN_ID,
                    nonce,
                    gas_limit: 21_000,
                    max_fee_per_gas: MAX_FEE,
                    max_priority_fee_per_gas: TIP,
                    to,
                    value: amount,
                    access_list: AccessList::default(),
                    blob_versioned_hashes: vec![versioned_hash()],
                    max_fee_per_blob_gas: 1_000,
                    input: Bytes::new(),
                }),
                _ => {
                    // Another wallet lets its account run the recorder's code.
                    let authority = self.random() % ACCOUNTS;
                    let auth_nonce = if authority == from {
                        nonce + 1
                    } else {
                        self.take_nonce(authority)
                    };
                    if authority == from {
                        self.take_nonce(from);
                    }
                    let auth = Authorization {
                        chain_id: U256::from(CHAIN_ID),
                        address: recorder_address(),
                        nonce: auth_nonce,
                    };
                    let signed_auth = self.wallets[authority as usize]
                        .sign_authorization(auth)
                        .unwrap();
                    wallet.sign(TxEip7702 {
                        chain_id: CHAIN_ID,
                        nonce,
                        gas_limit: 100_000,
                        max_fee_per_gas: MAX_FEE,
                        max_priority_fee_per_gas: TIP,
                        to: self.wallets[authority as usize].address(),
                        value: U256::ZERO,
                        access_list: AccessList::default(),
                        authorization_list: vec![signed_auth],
                        input: Bytes::new(),
                    })
                }
            },
        };
        signed.unwrap()
    }

    /// The next block: `n` signed transactions and two withdrawals,
    /// unsealed (its execution fields wait for [`BlockOutcome::seal`]).
    pub fn next_block(&mut self, n: usize) -> Block {
        let txs = (0..n)
            .map(|i| {
                let from = self.random() % ACCOUNTS;
                self.tx(i, from)
            })
            .collect();
        self.block_of(txs)
    }

    /// The next block with `txs`.
    pub fn block_of(&mut self, txs: Vec<TxEnvelope>) -> Block {
        let number = self.parent.number + 1;
        let id = self.random() % ACCOUNTS;
        let addresses = [self.fresh(), self.wallets[id as usize].address()];
        let withdrawals = (0..2)
            .map(|i| Withdrawal {
                index: number * 2 + i,
                validator_index: i,
                address: addresses[i as usize],
                amount: 1 + self.random() % 1_000,
            })
            .collect();
        let attributes = BlockAttributes {
            timestamp: self.parent.timestamp + 12,
            beneficiary: Address::repeat_byte(0xbe),
            prevrandao: B256::from(U256::from(self.random())),
            parent_beacon_block_root: B256::from(U256::from(self.random())),
            withdrawals,
            gas_limit: None,
        };
        next_block(&self.chain, &self.parent, attributes, txs)
    }

    /// `block`, executed to `outcome` and committed at `root`, sealed; the
    /// next block builds on it.
    pub fn seal(&mut self, outcome: &BlockOutcome, block: Block, root: &Node) -> Block {
        let block = outcome.seal(&self.chain, block, root);
        self.parent = block.header.clone();
        block
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
        // revm's in-memory database marks what a creation cleared.
        let origin = match account.account_state {
            AccountState::StorageCleared => codec::Origin::Created,
            _ => codec::Origin::Imported,
        };
        let record = codec::encode_record(&account.info, origin);
        entries.push((pagetrie_revm::keys::account(address), record));
        for (slot, value) in &account.storage {
            if let Some(bytes) = codec::encode_slot(value) {
                entries.push((pagetrie_revm::keys::slot(address, origin, slot), bytes));
            }
        }
    }
    for code in mem.cache.contracts.values() {
        entries.extend(genesis::code(code));
    }
    let mut hashed: Vec<_> = entries.iter().map(|(k, v)| (*k, hash_value(v))).collect();
    hashed.sort();
    compute_root(hashed).unwrap()
}

/// Every account and slot revm's in-memory database holds, read through
/// pagetrie; panics at the first difference.
pub fn assert_same_state(db: &Db, mem: &CacheDB<EmptyDB>) {
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
