//! Blocks: a header, its transactions, and the block hash that later blocks'
//! `BLOCKHASH` reads.

use revm::context::{BlockEnv, TxEnv};
use revm::primitives::hardfork::SpecId;
use revm::primitives::{keccak256, Address, Bytes, TxKind, B256, U256};

/// The chain id transactions are signed for and the EVM runs with.
pub const CHAIN_ID: u64 = 1;

/// The fork rules every block runs under, pinned so that a producer and a
/// verifier agree whatever revm's default: Osaka, which keeps Cancun's
/// self-destruct rules (EIP-6780) the key layout relies on.
pub const SPEC: SpecId = SpecId::OSAKA;

/// What a block's execution depends on besides its transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Its height; the first block after the imported state is 1.
    pub number: u64,
    /// The hash of the block before ([`Block::hash`]); stored in state as
    /// block `number - 1`'s hash when this block begins.
    pub parent_hash: B256,
    /// Seconds since the UNIX epoch.
    pub timestamp: u64,
    /// Receives the transactions' priority fees.
    pub beneficiary: Address,
    /// Gas its transactions may use together.
    pub gas_limit: u64,
    /// Base fee per gas (EIP-1559), burned.
    pub basefee: u64,
}

impl Header {
    /// revm's view of it.
    pub fn env(&self) -> BlockEnv {
        BlockEnv {
            number: U256::from(self.number),
            beneficiary: self.beneficiary,
            timestamp: U256::from(self.timestamp),
            gas_limit: self.gas_limit,
            basefee: self.basefee,
            prevrandao: Some(B256::ZERO),
            ..BlockEnv::default()
        }
    }
}

/// A transaction, already recovered: its sender is given, not signed for
/// (revm checks no signatures).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tx {
    /// The sender.
    pub caller: Address,
    /// The callee; `None` creates a contract from `data`.
    pub to: Option<Address>,
    /// Wei sent along.
    pub value: U256,
    /// Call data, or init code for a creation.
    pub data: Bytes,
    /// Must equal the sender's nonce.
    pub nonce: u64,
    /// Gas it may use.
    pub gas_limit: u64,
    /// Wei per gas it pays (at least the block's base fee).
    pub gas_price: u128,
}

impl Tx {
    /// revm's view of it: a legacy transaction on [`CHAIN_ID`].
    pub fn env(&self) -> TxEnv {
        TxEnv {
            tx_type: 0,
            caller: self.caller,
            gas_limit: self.gas_limit,
            gas_price: self.gas_price,
            kind: match self.to {
                Some(to) => TxKind::Call(to),
                None => TxKind::Create,
            },
            value: self.value,
            data: self.data.clone(),
            nonce: self.nonce,
            chain_id: Some(CHAIN_ID),
            ..TxEnv::default()
        }
    }

    /// Feeds every field, each at a fixed width or length-prefixed, so two
    /// transactions feed the same bytes only if they are equal.
    fn feed(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.caller.as_slice());
        match self.to {
            Some(to) => {
                out.push(1);
                out.extend_from_slice(to.as_slice());
            }
            None => out.push(0),
        }
        out.extend_from_slice(&self.value.to_be_bytes::<32>());
        out.extend_from_slice(&(self.data.len() as u64).to_be_bytes());
        out.extend_from_slice(&self.data);
        out.extend_from_slice(&self.nonce.to_be_bytes());
        out.extend_from_slice(&self.gas_limit.to_be_bytes());
        out.extend_from_slice(&self.gas_price.to_be_bytes());
    }
}

/// A block: its header and transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// What execution depends on besides the transactions.
    pub header: Header,
    /// Executed in order.
    pub txs: Vec<Tx>,
}

impl Block {
    /// The block's hash once its state root is `root`: keccak256 of the
    /// header's fields, the root and every transaction. This crate's own
    /// definition (no RLP header): it only has to bind a block to its
    /// contents for `BLOCKHASH`.
    pub fn hash(&self, root: &pagetrie::Node) -> B256 {
        let h = &self.header;
        let mut out = Vec::with_capacity(256 + self.txs.len() * 160);
        out.extend_from_slice(&h.number.to_be_bytes());
        out.extend_from_slice(h.parent_hash.as_slice());
        out.extend_from_slice(&h.timestamp.to_be_bytes());
        out.extend_from_slice(h.beneficiary.as_slice());
        out.extend_from_slice(&h.gas_limit.to_be_bytes());
        out.extend_from_slice(&h.basefee.to_be_bytes());
        out.extend_from_slice(root);
        out.extend_from_slice(&(self.txs.len() as u64).to_be_bytes());
        for tx in &self.txs {
            tx.feed(&mut out);
        }
        keccak256(&out)
    }
}
