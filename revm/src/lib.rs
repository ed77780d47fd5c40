//! revm on pagetrie: revm's database traits over pagetrie's sessions and
//! overlays, blocks as the chain has them (alloy's headers and signed typed
//! transactions) executed through alloy-evm's block executor and committed
//! with a witness, and stateless verification of a block against its parent
//! header from that witness alone.
//!
//! A producer derives the next header from its parent ([`next_block`]),
//! executes the block on a [`pagetrie::Session`] through a [`StateDb`]
//! (revm's `Database` and `DatabaseCommit`), hands the writes to the session
//! with [`StateDb::finish`] (which refuses a block that failed, so no part
//! of it is committed), commits with `commit_and_prove`, writes the root,
//! receipts root, bloom and gas into the header ([`BlockOutcome::seal`]) and
//! ships a [`BlockProof`]: the witness's multi-proof and the values the
//! block read. A verifier holding only the parent header checks the block
//! with [`verify_block`]: the header against the parent (number, parent
//! hash, timestamp, gas limit, base fee, blob gas), the body against the
//! header's roots, the senders from their signatures, then re-execution
//! against the parent's state root, and every execution field of the
//! header. [`Reader`] is revm's `DatabaseRef` over the committed head
//! ([`pagetrie::Db`]) or a pending block ([`pagetrie::Overlay`]); blocks
//! build on a pending one through a session begun on it
//! ([`pagetrie::Db::begin_session_on`]).
//!
//! Execution is alloy-evm's Ethereum block executor (system calls for
//! EIP-2935 and EIP-4788, receipts, withdrawals, EIP-7002 and EIP-7251
//! requests) committing straight into [`StateDb`], not revm's `State` with
//! its bundle: `StateDb` already keeps one value per key for the block and
//! hands the session exactly the block's writes, so a bundle would be a
//! second cache of the same values.
//!
//! ```
//! use pagetrie::{Db, Options};
//! use pagetrie_revm::consensus::TxEip1559;
//! use pagetrie_revm::revm::primitives::{Address, TxKind, U256};
//! use pagetrie_revm::revm::state::AccountInfo;
//! use pagetrie_revm::{execute_block, genesis, next_block, verify_block};
//! use pagetrie_revm::{BlockAttributes, BlockProof, Chain, StateDb, Wallet};
//!
//! # let dir = tempfile::tempdir()?;
//! let chain = Chain::new(1337);
//! let alice = Wallet::derive(1);
//! let rich = AccountInfo::from_balance(U256::from(10u64).pow(U256::from(18)));
//! let mut state = genesis::system_contracts();
//! state.push(genesis::account(&alice.address(), &rich));
//! let db = Db::import(Options::new(dir.path()), state, |_| {})?;
//! let parent = genesis::header(&chain, &db.root()?, 1_700_000_000, 30_000_000);
//!
//! let pay = alice.sign(TxEip1559 {
//!     chain_id: chain.chain_id(), nonce: 0, gas_limit: 21_000,
//!     max_fee_per_gas: 2_000_000_000, max_priority_fee_per_gas: 1,
//!     to: TxKind::Call(Address::repeat_byte(0xb)), value: U256::from(5),
//!     ..TxEip1559::default()
//! })?;
//! let attributes = BlockAttributes { timestamp: parent.timestamp + 12, ..Default::default() };
//! let block = next_block(&chain, &parent, attributes, vec![pay]);
//!
//! let session = db.begin_session();
//! let mut state = StateDb::new(&session);
//! let outcome = execute_block(&mut state, &chain, &block)?;
//! assert_eq!(outcome.gas_used, 21_000);
//! let changes = state.finish()?;
//! let out = session.commit_and_prove()?;
//! let block = outcome.seal(&chain, block, &out.root);
//! let proof = BlockProof::new(out.witness, changes);
//!
//! // Elsewhere, with the parent header and the proof's bytes alone:
//! let shipped = BlockProof::decode(&proof.encode())?;
//! assert_eq!(verify_block(&chain, &parent, &block, &shipped)?, outcome);
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
//! | account | blake3(0x01 ‖ address) | nonce (u64) ‖ balance (u256), then the code hash if it has code, then the byte 1 if a transaction created it: 40, 41, 72 or 73 bytes, big-endian |
//! | storage slot | blake3(0x02 ‖ address ‖ slot (32 bytes)); blake3(0x04 ‖ address ‖ slot) in an account a transaction created | the value big-endian without leading zero bytes; a slot set to zero is deleted |
//! | contract code | blake3(0x03 ‖ keccak256 of the code) | the code; stored once whatever number of accounts run it, never deleted |
//!
//! Block hashes are not keys of their own: `BLOCKHASH` reads the EIP-2935
//! history contract's ring of 8,191 slots, which a system call fills at the
//! start of each block ([`genesis::system_contracts`] deploys it).
//!
//! An account emptied (EIP-161) or self-destructed is deleted, and loses
//! its storage without a scan, because under Cancun's rules (EIP-6780) it
//! has none in the store: only an account created in the same transaction
//! self-destructs, so every slot it holds was written in that transaction
//! and goes with revm's journal, which the commit drops with the account;
//! an emptied account holds no storage, since only code writes storage and
//! an account that ran code has a nonce or code. A creation at an address
//! that holds slots but no nonce or code (an import can leave that;
//! EIP-7610 forbids the creation on Ethereum, revm allows it) drops them as
//! revm's in-memory database does: the created account's slots are keyed
//! under their own tag, so the old ones are never read again. They stay in
//! the trie, unreachable, and the root commits to them. A created account
//! is never created again (its nonce is at least 1, so a second creation
//! collides), so one tag for created accounts suffices. A self-destruct
//! under older rules of an account created earlier is refused
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

/// alloy's consensus types blocks are made of: headers, typed transactions,
/// receipts.
pub use alloy_consensus as consensus;
/// alloy's EIP types: withdrawals, requests, system contract addresses.
pub use alloy_eips as eips;
/// alloy's fork names, for [`Chain::with_later_forks`].
pub use alloy_hardforks as hardforks;
/// The revm this crate is built on, for its types.
pub use revm;

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
