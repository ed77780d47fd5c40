//! A starting state as key-value entries in the layout, for
//! [`pagetrie::Db::import`] (or a first commit).

use pagetrie::KeyPath;
use revm::bytecode::Bytecode;
use revm::primitives::{keccak256, Address, B256, U256};
use revm::state::AccountInfo;

use crate::{codec, keys, Chain, Header};

/// The entry of `address`'s account.
pub fn account(address: &Address, info: &AccountInfo) -> (KeyPath, Vec<u8>) {
    (keys::account(address), codec::encode_account(info))
}

/// The entry of `address`'s storage slot `slot`; `None` for zero, which is
/// not stored.
pub fn storage(address: &Address, slot: &U256, value: &U256) -> Option<(KeyPath, Vec<u8>)> {
    Some((keys::storage(address, slot), codec::encode_slot(value)?))
}

/// The entry of `code`, under its hash; `None` for empty code, which is not
/// stored.
pub fn code(code: &Bytecode) -> Option<(KeyPath, Vec<u8>)> {
    let bytes = code.original_byte_slice();
    if bytes.is_empty() {
        return None;
    }
    Some((keys::code(&keccak256(bytes)), bytes.to_vec()))
}

/// A contract account with `code` and `balance`, nonce 1 (EIP-161), as
/// genesis holds it, and its code's entry.
pub fn contract(address: &Address, code: &Bytecode, balance: U256) -> Vec<(KeyPath, Vec<u8>)> {
    let info = AccountInfo {
        balance,
        nonce: 1,
        code_hash: keccak256(code.original_byte_slice()),
        code: None,
        ..AccountInfo::default()
    };
    let mut entries = vec![account(address, &info)];
    entries.extend(self::code(code));
    entries
}

/// The system contracts a chain from Prague on calls each block, at their
/// addresses with their code, nonce 1: EIP-2935's block hash history,
/// EIP-4788's beacon roots, EIP-7002's withdrawal requests and EIP-7251's
/// consolidation requests. A genesis imports them with its accounts.
pub fn system_contracts() -> Vec<(KeyPath, Vec<u8>)> {
    use alloy_eips::{eip2935, eip4788, eip7002, eip7251};
    [
        (
            eip2935::HISTORY_STORAGE_ADDRESS,
            &eip2935::HISTORY_STORAGE_CODE,
        ),
        (eip4788::BEACON_ROOTS_ADDRESS, &eip4788::BEACON_ROOTS_CODE),
        (
            eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_ADDRESS,
            &eip7002::WITHDRAWAL_REQUEST_PREDEPLOY_CODE,
        ),
        (
            eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_ADDRESS,
            &eip7251::CONSOLIDATION_REQUEST_PREDEPLOY_CODE,
        ),
    ]
    .into_iter()
    .flat_map(|(address, code)| contract(&address, &Bytecode::new_raw(code.clone()), U256::ZERO))
    .collect()
}

/// The header of a chain's genesis block, whose state has root
/// `state_root` (what [`pagetrie::Db::import`] returned): number 0, the
/// initial base fee, and every field `chain`'s forks at `timestamp` add,
/// empty. The first block's parent.
pub fn header(
    chain: &Chain,
    state_root: &pagetrie::Node,
    timestamp: u64,
    gas_limit: u64,
) -> Header {
    use alloy_consensus::constants::{EMPTY_OMMER_ROOT_HASH, EMPTY_ROOT_HASH};
    use alloy_hardforks::EthereumHardforks;
    let shanghai = chain.is_shanghai_active_at_timestamp(timestamp);
    let cancun = chain.is_cancun_active_at_timestamp(timestamp);
    Header {
        ommers_hash: EMPTY_OMMER_ROOT_HASH,
        state_root: B256::from(*state_root),
        transactions_root: EMPTY_ROOT_HASH,
        receipts_root: EMPTY_ROOT_HASH,
        gas_limit,
        timestamp,
        base_fee_per_gas: chain
            .is_london_active_at_block(0)
            .then_some(alloy_eips::eip1559::INITIAL_BASE_FEE),
        withdrawals_root: shanghai.then_some(EMPTY_ROOT_HASH),
        blob_gas_used: cancun.then_some(0),
        excess_blob_gas: cancun.then_some(0),
        parent_beacon_block_root: cancun.then_some(B256::ZERO),
        requests_hash: chain
            .is_prague_active_at_timestamp(timestamp)
            .then_some(alloy_eips::eip7685::EMPTY_REQUESTS_HASH),
        ..Header::default()
    }
}
