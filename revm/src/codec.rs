//! The value layout: how account records, storage slots, code and block
//! hashes are stored as bytes, each with one encoding, and their decoders,
//! which refuse anything else without panicking.

use pagetrie::KeyPath;
use revm::bytecode::Bytecode;
use revm::primitives::{Bytes, B256, KECCAK_EMPTY, U256};
use revm::state::AccountInfo;

use crate::Error;

/// An account without code: nonce (8 bytes) and balance (32), big-endian.
const PLAIN_LEN: usize = 8 + 32;
/// An account with code: the same, then its code hash (32).
const CONTRACT_LEN: usize = PLAIN_LEN + 32;

/// An account record's bytes: nonce and balance, then the code hash if the
/// account has code.
pub fn encode_account(info: &AccountInfo) -> Vec<u8> {
    let has_code = info.code_hash != KECCAK_EMPTY;
    let mut out = Vec::with_capacity(if has_code { CONTRACT_LEN } else { PLAIN_LEN });
    out.extend_from_slice(&info.nonce.to_be_bytes());
    out.extend_from_slice(&info.balance.to_be_bytes::<32>());
    if has_code {
        out.extend_from_slice(info.code_hash.as_slice());
    }
    out
}

/// The account stored at `key`. Its code is left for revm to ask for by
/// hash, so an account read costs one value.
pub fn decode_account(key: &KeyPath, bytes: &[u8]) -> Result<AccountInfo, Error> {
    let corrupt = |what| Error::Corrupt { key: *key, what };
    let code_hash = match bytes.len() {
        PLAIN_LEN => KECCAK_EMPTY,
        CONTRACT_LEN => {
            let hash = B256::from_slice(&bytes[PLAIN_LEN..]);
            if hash == KECCAK_EMPTY {
                return Err(corrupt("account record spells out the empty code hash"));
            }
            hash
        }
        _ => return Err(corrupt("account record of the wrong length")),
    };
    let mut nonce = [0u8; 8];
    nonce.copy_from_slice(&bytes[..8]);
    let balance = U256::from_be_slice(&bytes[8..PLAIN_LEN]);
    Ok(AccountInfo {
        balance,
        nonce: u64::from_be_bytes(nonce),
        code_hash,
        // Code is fetched by hash only when revm runs it.
        code: (code_hash == KECCAK_EMPTY).then(Bytecode::default),
        ..AccountInfo::default()
    })
}

/// A storage value's bytes: big-endian without leading zero bytes; `None`
/// for zero, which is stored as no value at all.
pub fn encode_slot(value: &U256) -> Option<Vec<u8>> {
    if value.is_zero() {
        return None;
    }
    let bytes = value.to_be_bytes::<32>();
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(31);
    Some(bytes[first..].to_vec())
}

/// The storage value stored at `key`.
pub fn decode_slot(key: &KeyPath, bytes: &[u8]) -> Result<U256, Error> {
    match bytes.first() {
        Some(0) | None => Err(Error::Corrupt {
            key: *key,
            what: "storage value with a leading zero byte",
        }),
        _ if bytes.len() > 32 => Err(Error::Corrupt {
            key: *key,
            what: "storage value longer than 32 bytes",
        }),
        _ => Ok(U256::from_be_slice(bytes)),
    }
}

/// The code stored at `key`, which must hash to `code_hash`.
pub fn decode_code(key: &KeyPath, code_hash: &B256, bytes: &[u8]) -> Result<Bytecode, Error> {
    let code =
        Bytecode::new_raw_checked(Bytes::copy_from_slice(bytes)).map_err(|_| Error::Corrupt {
            key: *key,
            what: "code that revm does not decode",
        })?;
    if code.hash_slow() != *code_hash {
        return Err(Error::Corrupt {
            key: *key,
            what: "code that does not hash to its key's code hash",
        });
    }
    Ok(code)
}

/// The account whose record is `stored` at `key`, if any.
pub(crate) fn account(key: &KeyPath, stored: Option<&[u8]>) -> Result<Option<AccountInfo>, Error> {
    stored.map(|bytes| decode_account(key, bytes)).transpose()
}

/// The code with hash `code_hash`, `stored` at `key`: an account names it,
/// so it must be there.
pub(crate) fn code(
    key: &KeyPath,
    code_hash: &B256,
    stored: Option<&[u8]>,
) -> Result<Bytecode, Error> {
    match stored {
        Some(bytes) => decode_code(key, code_hash, bytes),
        None => Err(Error::Corrupt {
            key: *key,
            what: "an account names code that is not stored",
        }),
    }
}

/// The storage value `stored` at `key`; zero if absent.
pub(crate) fn slot(key: &KeyPath, stored: Option<&[u8]>) -> Result<U256, Error> {
    stored.map_or(Ok(U256::ZERO), |bytes| decode_slot(key, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: KeyPath = [9; 32];

    #[test]
    fn accounts_round_trip_and_bad_lengths_are_refused() {
        let plain = AccountInfo {
            balance: U256::from(12345u64) << 100,
            nonce: 7,
            ..AccountInfo::default()
        };
        let bytes = encode_account(&plain);
        assert_eq!(bytes.len(), PLAIN_LEN);
        let back = decode_account(&KEY, &bytes).unwrap();
        assert_eq!(
            (back.balance, back.nonce, back.code_hash),
            (plain.balance, 7, KECCAK_EMPTY)
        );

        let contract = AccountInfo {
            code_hash: B256::repeat_byte(3),
            ..plain.clone()
        };
        let bytes = encode_account(&contract);
        assert_eq!(bytes.len(), CONTRACT_LEN);
        let back = decode_account(&KEY, &bytes).unwrap();
        assert_eq!(back.code_hash, B256::repeat_byte(3));
        assert!(back.code.is_none());

        for len in [0, 39, 41, 71, 73] {
            assert!(matches!(
                decode_account(&KEY, &vec![1; len]),
                Err(Error::Corrupt { .. })
            ));
        }
        let mut spelled = encode_account(&plain);
        spelled.extend_from_slice(KECCAK_EMPTY.as_slice());
        assert!(decode_account(&KEY, &spelled).is_err());
    }

    #[test]
    fn slots_are_minimal_and_zero_is_absent() {
        assert_eq!(encode_slot(&U256::ZERO), None);
        assert_eq!(encode_slot(&U256::from(1)), Some(vec![1]));
        assert_eq!(encode_slot(&U256::from(0x0100)), Some(vec![1, 0]));
        assert_eq!(encode_slot(&U256::MAX), Some(vec![0xff; 32]));
        for v in [U256::from(1), U256::from(u64::MAX) << 64, U256::MAX] {
            let bytes = encode_slot(&v).unwrap();
            assert_eq!(decode_slot(&KEY, &bytes).unwrap(), v);
        }
        assert!(decode_slot(&KEY, &[]).is_err());
        assert!(decode_slot(&KEY, &[0, 1]).is_err());
        assert!(decode_slot(&KEY, &[1; 33]).is_err());
    }

    #[test]
    fn code_must_hash_to_its_key() {
        let raw = [0x60, 0x00, 0x00];
        let hash = revm::primitives::keccak256(raw);
        assert_eq!(
            decode_code(&KEY, &hash, &raw)
                .unwrap()
                .original_byte_slice(),
            raw
        );
        assert!(decode_code(&KEY, &B256::ZERO, &raw).is_err());
        // An EIP-7702 designator of the wrong length.
        let bad = [0xef, 0x01, 0x00, 0x01];
        assert!(decode_code(&KEY, &revm::primitives::keccak256(bad), &bad).is_err());
    }
}
