//! Blocks as the chain has them: alloy's consensus header and body with
//! typed, signed transactions, and the header a producer derives from its
//! parent before executing.

use alloy_consensus::{BlockBody, Header, TxEnvelope, EMPTY_OMMER_ROOT_HASH};
use alloy_eips::eip1559::{BaseFeeParams, INITIAL_BASE_FEE};
use alloy_eips::eip4895::{Withdrawal, Withdrawals};
use alloy_eips::eip7685::EMPTY_REQUESTS_HASH;
use alloy_hardforks::EthereumHardforks;
use revm::primitives::{Address, B256};

use crate::Chain;

/// A block: alloy's consensus header over a body of signed transactions
/// (and withdrawals from Shanghai on; no ommers after the merge).
pub type Block = alloy_consensus::Block<TxEnvelope>;

/// What a producer chooses for its next block; the rest of the header
/// follows from the parent ([`next_block`]) or from execution
/// ([`crate::BlockOutcome::seal`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockAttributes {
    /// Seconds since the UNIX epoch; later than the parent's.
    pub timestamp: u64,
    /// Receives the transactions' priority fees.
    pub beneficiary: Address,
    /// The beacon chain's randomness (`PREVRANDAO`), the header's mix hash.
    pub prevrandao: B256,
    /// The parent beacon block's root (EIP-4788), kept in state by the
    /// beacon roots contract.
    pub parent_beacon_block_root: B256,
    /// Withdrawals from the beacon chain, credited after the transactions.
    pub withdrawals: Vec<Withdrawal>,
    /// The gas limit; `None` keeps the parent's. It may move from the
    /// parent's by less than 1/1024 of it.
    pub gas_limit: Option<u64>,
}

/// The block after `parent` with `transactions`: number, parent hash, base
/// fee and excess blob gas follow from the parent, the fields each fork adds
/// are present, and the fields execution decides (state root, gas used,
/// receipts root, logs bloom, ...) wait for [`crate::BlockOutcome::seal`].
pub fn next_block(
    chain: &Chain,
    parent: &Header,
    attributes: BlockAttributes,
    transactions: Vec<TxEnvelope>,
) -> Block {
    let number = parent.number + 1;
    let timestamp = attributes.timestamp;
    let shanghai = chain.is_shanghai_active_at_timestamp(timestamp);
    let cancun = chain.is_cancun_active_at_timestamp(timestamp);
    let header = Header {
        parent_hash: parent.hash_slow(),
        ommers_hash: EMPTY_OMMER_ROOT_HASH,
        beneficiary: attributes.beneficiary,
        number,
        gas_limit: attributes.gas_limit.unwrap_or(parent.gas_limit),
        timestamp,
        mix_hash: attributes.prevrandao,
        base_fee_per_gas: expected_base_fee(chain, parent, number),
        withdrawals_root: shanghai.then_some(B256::ZERO),
        blob_gas_used: cancun.then_some(0),
        excess_blob_gas: expected_excess_blob_gas(chain, parent, timestamp),
        parent_beacon_block_root: cancun.then_some(attributes.parent_beacon_block_root),
        requests_hash: chain
            .is_prague_active_at_timestamp(timestamp)
            .then_some(EMPTY_REQUESTS_HASH),
        ..Header::default()
    };
    let body = BlockBody {
        transactions,
        ommers: Vec::new(),
        withdrawals: shanghai.then(|| Withdrawals::new(attributes.withdrawals)),
    };
    Block { header, body }
}

/// The base fee of block `number` after `parent` (EIP-1559): the initial
/// one in London's first block, then what the parent's gas use implies.
pub(crate) fn expected_base_fee(chain: &Chain, parent: &Header, number: u64) -> Option<u64> {
    if !chain.is_london_active_at_block(number) {
        None
    } else if !chain.is_london_active_at_block(parent.number) {
        Some(INITIAL_BASE_FEE)
    } else {
        parent.next_block_base_fee(BaseFeeParams::ethereum())
    }
}

/// The excess blob gas of the block at `timestamp` after `parent`
/// (EIP-4844, with Osaka's reserve price): zero in Cancun's first block.
pub(crate) fn expected_excess_blob_gas(
    chain: &Chain,
    parent: &Header,
    timestamp: u64,
) -> Option<u64> {
    let params = chain.blob_params(timestamp)?;
    if !chain.is_cancun_active_at_timestamp(parent.timestamp) {
        return Some(0);
    }
    Some(parent.next_block_excess_blob_gas(params).unwrap_or(0))
}
