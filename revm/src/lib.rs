//! revm on pagetrie: revm's database traits over pagetrie's sessions and
//! overlays, blocks executed and committed with a witness, and stateless
//! re-execution of a block from that witness alone.
//!
//! A node executes a block on a [`pagetrie::Session`] through a
//! [`StateDb`] (revm's `Database` and `DatabaseCommit`), hands the block's
//! writes to the session with [`StateDb::finish`] (which refuses a block
//! that failed, so no part of it is committed), commits the session with
//! `commit_and_prove`, and ships a [`BlockProof`]: the witness's
//! multi-proof and the values the block read (not the witness's writes,
//! which the verifier computes). A verifier with nothing but the previous
//! root and block hash re-executes the block from it with [`verify_block`]
//! and checks the new root. [`Reader`] is revm's `DatabaseRef` over the committed head
//! ([`pagetrie::Db`]) or a pending block ([`pagetrie::Overlay`]); blocks
//! build on a pending one through a session begun on it
//! ([`pagetrie::Db::begin_session_on`]).
//!
//! ```
//! use pagetrie::{Db, Options};
//! use pagetrie_revm::revm::primitives::{Address, U256};
//! use pagetrie_revm::revm::state::AccountInfo;
//! use pagetrie_revm::{execute_block, genesis, verify_block, Block, BlockProof, Header, StateDb, Tx};
//!
//! # let dir = tempfile::tempdir()?;
//! let (alice, bob) = (Address::repeat_byte(0xa), Address::repeat_byte(0xb));
//! let rich = AccountInfo::from_balance(U256::from(10u64).pow(U256::from(18)));
//! let db = Db::import(Options::new(dir.path()), [genesis::account(&alice, &rich)], |_| {})?;
//!
//! let header = Header { number: 1, parent_hash: Default::default(), timestamp: 1,
//!     beneficiary: Address::ZERO, gas_limit: 30_000_000, basefee: 7 };
//! let pay = Tx { caller: alice, to: Some(bob), value: U256::from(5), data: Default::default(),
//!     nonce: 0, gas_limit: 21_000, gas_price: 7 };
//! let block = Block { header, txs: vec![pay] };
//!
//! let session = db.begin_session();
//! let mut state = StateDb::new(&session);
//! let outcome = execute_block(&mut state, &block)?;
//! assert_eq!(outcome.gas_used, 21_000);
//! let changes = state.finish()?;
//! let out = session.commit_and_prove()?;
//! let proof = BlockProof::new(out.witness, changes);
//!
//! // Elsewhere, with the previous root and the proof's bytes alone:
//! let shipped = BlockProof::decode(&proof.encode())?;
//! // The verifier's own chain gives the root and the hash of the block before.
//! let parent = block.header.parent_hash;
//! assert_eq!(verify_block(&out.prev_root, &parent, &block, &shipped, &out.root)?, outcome);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Key layout
//!
//! Every item of Ethereum state is one key-value pair; each key is blake3 of
//! a one-byte domain tag and the item's identity ([`keys`]), so the domains
//! never collide:
//!
//! | item | key | value ([`codec`]) |
//! |---|---|---|
//! | account | blake3(0x01 ‖ address) | nonce (u64) ‖ balance (u256), then the code hash if it has code: 40 or 72 bytes, big-endian |
//! | storage slot | blake3(0x02 ‖ address ‖ slot (32 bytes)) | the value big-endian without leading zero bytes; a slot set to zero is deleted |
//! | contract code | blake3(0x03 ‖ keccak256 of the code) | the code; stored once whatever number of accounts run it, never deleted |
//! | block hash | blake3(0x04 ‖ number (u64)) | 32 bytes, stored by the next block when it begins |
//!
//! An account emptied (EIP-161) or self-destructed is deleted, and loses
//! its storage without a scan, because under Cancun's rules (EIP-6780) it
//! has none in the store: only an account created in the same transaction
//! self-destructs, so every slot it holds was written in that transaction
//! and goes with revm's journal, which the commit drops with the account;
//! an emptied account holds no storage, since only code writes storage and
//! an account that ran code has a nonce or code. The layout assumes no
//! account is created over existing storage (EIP-7610 forbids it). A
//! self-destruct under older rules of an account created earlier is refused
//! ([`Error::StorageWipe`]) rather than leaving its slots behind; a node
//! replaying pre-Cancun history would need a storage generation in the
//! account record, mixed into its slots' keys, instead.
//!
//! Slots are hashed with their address, so one contract's slots spread over
//! the whole trie as accounts do: a slot costs the same to read and prove as
//! an account.

#![deny(missing_docs)]

mod apply;
mod block;
mod chain;
pub mod codec;
mod error;
mod execute;
pub mod genesis;
mod history;
pub mod keys;
mod reader;
mod source;
mod state;
mod stateless;
pub mod token;
mod validate;
mod wallet;

/// The revm this crate is built on, for its types.
pub use revm;
/// alloy's consensus types blocks are made of: headers, typed transactions,
/// receipts.
pub use alloy_consensus as consensus;
/// alloy's EIP types: withdrawals, requests, system contract addresses.
pub use alloy_eips as eips;
/// alloy's fork names and conditions, for [`Chain::with_forks`].
pub use alloy_hardforks as hardforks;

pub use alloy_consensus::Header;
/// A transaction's signature.
pub use alloy_primitives::Signature;
pub use block::{next_block, Block, BlockAttributes};
pub use chain::Chain;
pub use error::Error;
pub use execute::{execute_block, BlockDb, BlockOutcome};
pub use reader::Reader;
pub use source::Source;
pub use state::{Changes, StateDb};
pub use stateless::{verify_block, BlockProof};
pub use validate::HeaderError;
pub use wallet::Wallet;
