//! What a verifier checks of a block besides re-executing it: its header
//! against the parent it builds on, its body against the header's roots,
//! and the header's execution fields against what re-execution decided.

use std::fmt;

use alloy_consensus::{Header, EMPTY_OMMER_ROOT_HASH};
use alloy_eips::eip4844::DATA_GAS_PER_BLOB;
use alloy_hardforks::EthereumHardforks;
use revm::primitives::{B256, U256};

use crate::block::{expected_base_fee, expected_excess_blob_gas};
use crate::execute::body_roots;
use crate::{Block, Chain};

/// The most gas a block may have (EIP-1559 keeps a limit within 1/1024 of
/// its parent's; this bounds what a header may claim outright).
const MAX_GAS_LIMIT: u64 = i64::MAX as u64;
/// The least gas a block may have.
const MIN_GAS_LIMIT: u64 = 5_000;
/// The longest extra data a header may carry.
const MAX_EXTRA_DATA: usize = 32;

/// Why a block's header is not the one its parent and contents imply.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderError {
    /// Its number is not the parent's plus one.
    Number {
        /// The parent's number.
        parent: u64,
        /// The header's.
        found: u64,
    },
    /// Its parent hash is not the parent header's hash.
    ParentHash {
        /// The hash of the parent header the verifier holds.
        expected: B256,
        /// The header's parent hash.
        found: B256,
    },
    /// Its timestamp is not later than the parent's.
    Timestamp {
        /// The parent's timestamp.
        parent: u64,
        /// The header's.
        found: u64,
    },
    /// Its gas limit moved by 1/1024 of the parent's or more, or is out of
    /// bounds (5,000 to 2^63 - 1).
    GasLimit {
        /// The parent's gas limit.
        parent: u64,
        /// The header's.
        found: u64,
    },
    /// Its base fee is not what the parent's gas use implies (EIP-1559).
    BaseFee {
        /// The base fee the parent implies.
        expected: Option<u64>,
        /// The header's.
        found: Option<u64>,
    },
    /// Its excess blob gas is not what the parent implies (EIP-4844).
    ExcessBlobGas {
        /// What the parent implies.
        expected: Option<u64>,
        /// The header's.
        found: Option<u64>,
    },
    /// A field the block's fork requires is missing, one it does not have
    /// is present, or one the merge fixed (difficulty, nonce, ommers) is
    /// not as fixed; the field's name.
    Field(&'static str),
    /// A root or hash the header commits to differs from the one its body
    /// or its re-execution gives: `transactions_root`, `withdrawals_root`,
    /// `receipts_root` or `requests_hash`.
    Commitment {
        /// The field's name.
        field: &'static str,
        /// What the body or re-execution gives.
        expected: B256,
        /// The header's.
        found: B256,
    },
    /// Its logs bloom is not the receipts' logs'.
    LogsBloom,
    /// Its gas used is not what re-execution used.
    GasUsed {
        /// What re-execution used.
        expected: u64,
        /// The header's.
        found: u64,
    },
    /// Its blob gas used is more than a block may use, or not a whole
    /// number of blobs.
    BlobGasLimit {
        /// The most a block may use.
        max: u64,
        /// The header's.
        found: u64,
    },
    /// Its blob gas used is not what re-execution used.
    BlobGasUsed {
        /// What re-execution used.
        expected: Option<u64>,
        /// The header's.
        found: Option<u64>,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Number { parent, found } => {
                write!(f, "number {found} does not follow the parent's {parent}")
            }
            HeaderError::ParentHash { expected, found } => {
                write!(f, "parent hash {found}, the parent's hash is {expected}")
            }
            HeaderError::Timestamp { parent, found } => {
                write!(f, "timestamp {found} is not after the parent's {parent}")
            }
            HeaderError::GasLimit { parent, found } => {
                write!(
                    f,
                    "gas limit {found} is out of bounds after the parent's {parent}"
                )
            }
            HeaderError::BaseFee { expected, found } => {
                write!(f, "base fee {found:?}, the parent implies {expected:?}")
            }
            HeaderError::ExcessBlobGas { expected, found } => {
                write!(
                    f,
                    "excess blob gas {found:?}, the parent implies {expected:?}"
                )
            }
            HeaderError::Field(field) => {
                write!(f, "field {field} is not as the block's fork requires")
            }
            HeaderError::Commitment {
                field,
                expected,
                found,
            } => write!(f, "{field} is {found}, the block gives {expected}"),
            HeaderError::LogsBloom => write!(f, "logs bloom is not the receipts' logs'"),
            HeaderError::GasUsed { expected, found } => {
                write!(f, "gas used {found}, re-execution used {expected}")
            }
            HeaderError::BlobGasLimit { max, found } => {
                write!(f, "blob gas used {found} is not whole blobs within {max}")
            }
            HeaderError::BlobGasUsed { expected, found } => {
                write!(f, "blob gas used {found:?}, re-execution used {expected:?}")
            }
        }
    }
}

impl std::error::Error for HeaderError {}

/// Checks what `block`'s header and body must be before executing it: the
/// header against `parent`, the body against the header's roots.
pub(crate) fn check_before(
    chain: &Chain,
    parent: &Header,
    block: &Block,
) -> Result<(), HeaderError> {
    let header = &block.header;
    if Some(header.number) != parent.number.checked_add(1) {
        return Err(HeaderError::Number {
            parent: parent.number,
            found: header.number,
        });
    }
    let parent_hash = parent.hash_slow();
    if header.parent_hash != parent_hash {
        return Err(HeaderError::ParentHash {
            expected: parent_hash,
            found: header.parent_hash,
        });
    }
    if header.timestamp <= parent.timestamp {
        return Err(HeaderError::Timestamp {
            parent: parent.timestamp,
            found: header.timestamp,
        });
    }
    let bound = parent.gas_limit / 1024;
    if header.gas_limit.abs_diff(parent.gas_limit) >= bound
        || !(MIN_GAS_LIMIT..=MAX_GAS_LIMIT).contains(&header.gas_limit)
    {
        return Err(HeaderError::GasLimit {
            parent: parent.gas_limit,
            found: header.gas_limit,
        });
    }
    let base_fee = expected_base_fee(chain, parent, header.number);
    if header.base_fee_per_gas != base_fee {
        return Err(HeaderError::BaseFee {
            expected: base_fee,
            found: header.base_fee_per_gas,
        });
    }
    let excess = expected_excess_blob_gas(chain, parent, header.timestamp);
    if header.excess_blob_gas != excess {
        return Err(HeaderError::ExcessBlobGas {
            expected: excess,
            found: header.excess_blob_gas,
        });
    }
    check_fields(chain, block)?;
    if let (Some(params), Some(used)) = (chain.blob_params(header.timestamp), header.blob_gas_used)
    {
        let max = params.max_blob_gas_per_block();
        if used > max || !used.is_multiple_of(DATA_GAS_PER_BLOB) {
            return Err(HeaderError::BlobGasLimit { max, found: used });
        }
    }
    let (transactions_root, withdrawals_root) = body_roots(&block.body);
    commitment(
        "transactions_root",
        transactions_root,
        header.transactions_root,
    )?;
    // check_fields made both present or both absent.
    if withdrawals_root != header.withdrawals_root {
        return Err(HeaderError::Commitment {
            field: "withdrawals_root",
            expected: withdrawals_root.unwrap_or_default(),
            found: header.withdrawals_root.unwrap_or_default(),
        });
    }
    Ok(())
}

/// The fields each fork adds are present exactly when it is active, and
/// the ones the merge fixed are as fixed.
fn check_fields(chain: &Chain, block: &Block) -> Result<(), HeaderError> {
    let header = &block.header;
    let at = header.timestamp;
    let present = |field: &'static str, active: bool, has: bool| match active == has {
        true => Ok(()),
        false => Err(HeaderError::Field(field)),
    };
    let shanghai = chain.is_shanghai_active_at_timestamp(at);
    present(
        "withdrawals_root",
        shanghai,
        header.withdrawals_root.is_some(),
    )?;
    present("withdrawals", shanghai, block.body.withdrawals.is_some())?;
    let cancun = chain.is_cancun_active_at_timestamp(at);
    present("blob_gas_used", cancun, header.blob_gas_used.is_some())?;
    present(
        "parent_beacon_block_root",
        cancun,
        header.parent_beacon_block_root.is_some(),
    )?;
    let prague = chain.is_prague_active_at_timestamp(at);
    present("requests_hash", prague, header.requests_hash.is_some())?;
    let amsterdam = chain.is_amsterdam_active_at_timestamp(at);
    present(
        "block_access_list_hash",
        amsterdam,
        header.block_access_list_hash.is_some(),
    )?;
    present("slot_number", amsterdam, header.slot_number.is_some())?;
    if chain.is_paris_active_at_block(header.number) {
        present("difficulty", true, header.difficulty == U256::ZERO)?;
        present("nonce", true, header.nonce.is_zero())?;
        present(
            "ommers_hash",
            true,
            header.ommers_hash == EMPTY_OMMER_ROOT_HASH,
        )?;
        present("ommers", true, block.body.ommers.is_empty())?;
    }
    if header.extra_data.len() > MAX_EXTRA_DATA {
        return Err(HeaderError::Field("extra_data"));
    }
    Ok(())
}

/// Checks the header's execution fields against `expected`, the header
/// re-execution sealed (its state root is checked apart).
pub(crate) fn check_after(expected: &Header, found: &Header) -> Result<(), HeaderError> {
    if found.gas_used != expected.gas_used {
        return Err(HeaderError::GasUsed {
            expected: expected.gas_used,
            found: found.gas_used,
        });
    }
    if found.blob_gas_used != expected.blob_gas_used {
        return Err(HeaderError::BlobGasUsed {
            expected: expected.blob_gas_used,
            found: found.blob_gas_used,
        });
    }
    commitment("receipts_root", expected.receipts_root, found.receipts_root)?;
    if found.logs_bloom != expected.logs_bloom {
        return Err(HeaderError::LogsBloom);
    }
    if found.requests_hash != expected.requests_hash {
        return Err(HeaderError::Commitment {
            field: "requests_hash",
            expected: expected.requests_hash.unwrap_or_default(),
            found: found.requests_hash.unwrap_or_default(),
        });
    }
    Ok(())
}

fn commitment(field: &'static str, expected: B256, found: B256) -> Result<(), HeaderError> {
    match expected == found {
        true => Ok(()),
        false => Err(HeaderError::Commitment {
            field,
            expected,
            found,
        }),
    }
}

/// The longest block Osaka allows, RLP-encoded (EIP-7934): 10 MiB less a
/// 2 MiB margin for the beacon block around it.
pub(crate) const MAX_BLOCK_SIZE: usize = 8_388_608;

/// Refuses a block longer than Osaka allows, before any work that grows
/// with its size (roots, signatures).
pub(crate) fn check_size(chain: &Chain, block: &Block) -> Result<(), crate::Error> {
    if !chain.is_osaka_active_at_timestamp(block.header.timestamp) {
        return Ok(());
    }
    let size = alloy_rlp::Encodable::length(block);
    if size > MAX_BLOCK_SIZE {
        return Err(crate::Error::BlockTooLarge {
            size,
            max: MAX_BLOCK_SIZE,
        });
    }
    Ok(())
}
