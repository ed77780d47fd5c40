//! The value layout: how account records, storage slots and code are
//! stored as bytes, each with one encoding, and their decoders, which refuse
//! anything else without panicking.

use pagetrie::KeyPath;
use revm::bytecode::Bytecode;
use revm::primitives::{Bytes, B256, KECCAK_EMPTY, U256};
use revm::state::AccountInfo;

use crate::Error;

/// An account without code: nonce (8 bytes) and balance (32), big-endian.
const PLAIN_LEN: usize = 8 + 32;
/// An account with code: the same, then its code hash (32).
const CONTRACT_LEN: usize = PLAIN_LEN + 32;
/// The byte after either that marks an account created by a transaction.
const CREATED: u8 = 1;

/// Where an account's storage slots are keyed ([`crate::keys::slot`]):
/// slots an account held before it was created by a transaction (from an
/// import) are not its slots once it is, as a creation clears storage in
/// revm's in-memory database; the slots can't be found to delete, so the
/// created account's live under other keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    /// Imported, or written by transactions without creating it (an
    /// externally owned account, an EIP-7702 delegation).
    #[default]
    Imported,
    /// Created by a transaction (a creation or `CREATE`/`CREATE2`).
    Created,
}

/// An imported account record's bytes ([`encode_record`] with
/// [`Origin::Imported`]).
pub fn encode_account(info: &AccountInfo) -> Vec<u8> {
    encode_record(info, Origin::Imported)
}

/// An account record's bytes: nonce and balance, then the code hash if the
/// account has code, then one byte if a transaction created it.
pub fn encode_record(info: &AccountInfo, origin: Origin) -> Vec<u8> {
    let has_code = info.code_hash != KECCAK_EMPTY;
    let mut out = Vec::with_capacity(CONTRACT_LEN + 1);
    out.extend_from_slice(&info.nonce.to_be_bytes());
    out.extend_from_slice(&info.balance.to_be_bytes::<32>());
    if has_code {
        out.extend_from_slice(info.code_hash.as_slice());
    }
    if origin == Origin::Created {
        out.push(CREATED);
    }
    out
}

/// The account stored at `key`. Its code is left for revm to ask for by
/// hash, so an account read costs one value.
pub fn decode_account(key: &KeyPath, bytes: &[u8]) -> Result<AccountInfo, Error> {
    decode_record(key, bytes).map(|(info, _)| info)
}

/// The account stored at `key` and where its slots are keyed.
pub fn decode_record(key: &KeyPath, bytes: &[u8]) -> Result<(AccountInfo, Origin), Error> {
    let corrupt = |what| Error::Corrupt { key: *key, what };
    let (bytes, origin) = match bytes.len() {
        PLAIN_LEN | CONTRACT_LEN => (bytes, Origin::Imported),
        n if n == PLAIN_LEN + 1 || n == CONTRACT_LEN + 1 => {
            if bytes[n - 1] != CREATED {
                return Err(corrupt("account record with an unknown last byte"));
            }
            (&bytes[..n - 1], Origin::Created)
        }
        _ => return Err(corrupt("account record of the wrong length")),
    };
    let code_hash = match bytes.len() {
        PLAIN_LEN => KECCAK_EMPTY,
        _ => {
            let hash = B256::from_slice(&bytes[PLAIN_LEN..]);
            if hash == KECCAK_EMPTY {
                return Err(corrupt("account record spells out the empty code hash"));
            }
            hash
        }
    };
    let mut nonce = [0u8; 8];
    nonce.copy_from_slice(&bytes[..8]);
    let balance = U256::from_be_slice(&bytes[8..PLAIN_LEN]);
    let info = AccountInfo {
        balance,
        nonce: u64::from_be_bytes(nonce),
        code_hash,
        // Code is fetched by hash only when revm runs it.
        code: (code_hash == KECCAK_EMPTY).then(Bytecode::default),
        ..AccountInfo::default()
    };
    Ok((info, origin))
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

/// Where the slots of the account `stored` at `key` are keyed; an absent
/// account's are where an import puts them.
pub(crate) fn origin(key: &KeyPath, stored: Option<&[u8]>) -> Result<Origin, Error> {
    stored.map_or(Ok(Origin::Imported), |bytes| {
        decode_record(key, bytes).map(|(_, origin)| origin)
    })
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

        let created = encode_record(&contract, Origin::Created);
        assert_eq!(created.len(), CONTRACT_LEN + 1);
        let (back, origin) = decode_record(&KEY, &created).unwrap();
        assert_eq!(
            (back.code_hash, origin),
            (B256::repeat_byte(3), Origin::Created)
        );
        let (_, origin) = decode_record(&KEY, &encode_record(&plain, Origin::Created)).unwrap();
        assert_eq!(origin, Origin::Created);

        for len in [0, 39, 42, 71, 74] {
            assert!(matches!(
                decode_account(&KEY, &vec![1; len]),
                Err(Error::Corrupt { .. })
            ));
        }
        // The byte after a record is 1 or nothing.
        for len in [41, 73] {
            assert!(matches!(
                decode_account(&KEY, &vec![2; len]),
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
