//! A starting state as key-value entries in the layout, for
//! [`pagetrie::Db::import`] (or a first commit).

use pagetrie::KeyPath;
use revm::bytecode::Bytecode;
use revm::primitives::{keccak256, Address, U256};
use revm::state::AccountInfo;

use crate::{codec, keys};

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
