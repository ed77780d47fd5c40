//! The key layout: where each kind of Ethereum state lives in pagetrie's
//! 32-byte key space (see the crate docs for the whole layout).
//!
//! Every key is blake3 of a one-byte domain tag followed by the item's
//! identity. Each domain's input has its own tag and its own fixed length,
//! so no item of one domain can hash to a key of another.

use pagetrie::KeyPath;
use revm::primitives::{Address, B256, U256};

use crate::codec::Origin;

/// Tag of an account record's key.
const ACCOUNT: u8 = 0x01;
/// Tag of a storage slot's key.
const STORAGE: u8 = 0x02;
/// Tag of contract code's key.
const CODE: u8 = 0x03;
/// Tag of a storage slot's key in an account a transaction created.
const CREATED_STORAGE: u8 = 0x04;

/// The key of `address`'s account record: blake3(0x01 ‖ address).
pub fn account(address: &Address) -> KeyPath {
    let mut input = [0u8; 21];
    input[0] = ACCOUNT;
    input[1..].copy_from_slice(address.as_slice());
    *blake3::hash(&input).as_bytes()
}

/// The key of storage slot `slot` of `address`, an imported account:
/// blake3(0x02 ‖ address ‖ slot as 32 bytes big-endian).
pub fn storage(address: &Address, slot: &U256) -> KeyPath {
    storage_tagged(STORAGE, address, slot)
}

/// The key of storage slot `slot` of `address`, an account a transaction
/// created: blake3(0x04 ‖ address ‖ slot as 32 bytes big-endian).
pub fn created_storage(address: &Address, slot: &U256) -> KeyPath {
    storage_tagged(CREATED_STORAGE, address, slot)
}

/// The key of storage slot `slot` of `address`, whose record says it is of
/// `origin`.
pub fn slot(address: &Address, origin: Origin, slot: &U256) -> KeyPath {
    match origin {
        Origin::Imported => storage(address, slot),
        Origin::Created => created_storage(address, slot),
    }
}

fn storage_tagged(tag: u8, address: &Address, slot: &U256) -> KeyPath {
    let mut input = [0u8; 53];
    input[0] = tag;
    input[1..21].copy_from_slice(address.as_slice());
    input[21..].copy_from_slice(&slot.to_be_bytes::<32>());
    *blake3::hash(&input).as_bytes()
}

/// The key of the code whose keccak256 hash is `code_hash`:
/// blake3(0x03 ‖ code hash). Code is stored once however many accounts run it.
pub fn code(code_hash: &B256) -> KeyPath {
    let mut input = [0u8; 33];
    input[0] = CODE;
    input[1..].copy_from_slice(code_hash.as_slice());
    *blake3::hash(&input).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_and_items_get_distinct_keys() {
        let a = Address::repeat_byte(7);
        let b = Address::repeat_byte(8);
        let keys = [
            account(&a),
            account(&b),
            storage(&a, &U256::ZERO),
            storage(&a, &U256::from(1)),
            storage(&b, &U256::ZERO),
            created_storage(&a, &U256::ZERO),
            created_storage(&b, &U256::ZERO),
            code(&B256::repeat_byte(7)),
            code(&B256::repeat_byte(8)),
        ];
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
    }
}
