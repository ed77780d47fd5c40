//! What a transaction's state changes become in the key layout: revm's
//! [`DatabaseCommit`] for [`StateDb`].
//!
//! Storage is wiped without a scan because there is none to wipe: under
//! Cancun's rules (EIP-6780) only an account created in the same
//! transaction self-destructs, so every slot it holds was written in that
//! transaction, is in the journal being committed, and is dropped with it.
//! An account emptied (EIP-161) holds no storage either: only code writes
//! storage, and an account that ran code has a nonce or code. A
//! self-destruct of an older account (rules before Cancun) is refused with
//! [`crate::Error::StorageWipe`] rather than leaving its slots behind.

use revm::primitives::{AddressMap, KECCAK_EMPTY};
use revm::state::Account;
use revm::DatabaseCommit;

use crate::{codec, keys, Source, StateDb};

impl<S: Source> DatabaseCommit for StateDb<S> {
    fn commit(&mut self, changes: AddressMap<Account>) {
        for (address, account) in changes {
            if !account.is_touched() {
                continue;
            }
            let account_key = keys::account(&address);
            if account.is_selfdestructed() || account.is_empty() {
                // Its slots, if any, were written in this transaction only:
                // dropped with the journal, they never reach the store.
                if account.is_selfdestructed() && !account.is_created() {
                    self.refuse_wipe(address);
                }
                self.set(account_key, None);
                continue;
            }
            // New code (a creation, an EIP-7702 delegation); code is stored
            // by its hash, so code already stored is the same.
            if let (Some(code), false) =
                (&account.info.code, account.info.code_hash == KECCAK_EMPTY)
            {
                let key = keys::code(&account.info.code_hash);
                if !self.holds(&key) {
                    self.set(key, Some(code.original_byte_slice().to_vec()));
                }
            }
            // A creation leaves whatever slots the address held behind,
            // under keys its slots no longer use.
            let origin = if account.is_created() {
                codec::Origin::Created
            } else {
                self.known_origin(&address)
            };
            self.set(
                account_key,
                Some(codec::encode_record(&account.info, origin)),
            );
            for (slot, value) in account.changed_storage_slots() {
                self.set(
                    keys::slot(&address, origin, slot),
                    codec::encode_slot(&value.present_value),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use pagetrie::KeyPath;
    use revm::primitives::{Address, B256, U256};
    use revm::state::{AccountInfo, EvmStorageSlot, TransactionId};
    use revm::Database;

    use super::*;
    use crate::{Error, Source};

    /// Stored values, and the keys handed to the source to write.
    struct Stored(BTreeMap<KeyPath, Vec<u8>>, RefCell<Vec<KeyPath>>);

    impl Source for Stored {
        fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
            Ok(self.0.get(key).cloned())
        }

        fn write(&self, key: KeyPath, _: Option<Vec<u8>>) {
            self.1.borrow_mut().push(key);
        }
    }

    const A: Address = Address::repeat_byte(0xa);

    /// Account `A` with balance 5 and slot 1 holding 7.
    fn stored() -> Stored {
        let info = AccountInfo::from_balance(U256::from(5));
        let mut stored = BTreeMap::new();
        stored.insert(keys::account(&A), codec::encode_account(&info));
        stored.insert(keys::storage(&A, &U256::from(1)), vec![7]);
        Stored(stored, RefCell::default())
    }

    fn state() -> StateDb<Stored> {
        StateDb::new(stored())
    }

    fn slot(before: u64, after: u64) -> EvmStorageSlot {
        EvmStorageSlot::new_changed(U256::from(before), U256::from(after), TransactionId::ZERO)
    }

    fn commit<S: Source>(state: &mut StateDb<S>, account: Account) {
        state.commit([(A, account)].into_iter().collect());
    }

    #[test]
    fn a_zeroed_slot_is_deleted_and_unchanged_values_are_not_written() {
        let mut state = state();
        let info = state.basic(A).unwrap().unwrap();
        assert_eq!(state.storage(A, U256::from(1)).unwrap(), U256::from(7));
        let account = Account::from(info)
            .with_touched_mark()
            .with_storage([(U256::from(1), slot(7, 0)), (U256::from(2), slot(0, 9))].into_iter());
        commit(&mut state, account);
        let changes = state.finish().unwrap();
        let expected: BTreeMap<_, _> = [
            (keys::storage(&A, &U256::from(1)), None),
            (keys::storage(&A, &U256::from(2)), Some(vec![9])),
        ]
        .into_iter()
        .collect();
        assert_eq!(changes.writes, expected);
        assert_eq!(changes.reads.len(), 2);
    }

    #[test]
    fn an_emptied_account_is_deleted() {
        let mut state = state();
        let mut info = state.basic(A).unwrap().unwrap();
        info.balance = U256::ZERO;
        commit(&mut state, Account::from(info).with_touched_mark());
        assert_eq!(state.basic(A).unwrap(), None);
        let writes = state.finish().unwrap().writes;
        assert_eq!(
            writes.into_iter().collect::<Vec<_>>(),
            [(keys::account(&A), None)]
        );
    }

    #[test]
    fn an_account_created_and_destroyed_in_one_transaction_leaves_no_slot() {
        let mut state = state();
        let info = AccountInfo::from_balance(U256::from(1));
        let account = Account::from(info)
            .with_touched_mark()
            .with_created_mark()
            .with_selfdestruct_mark()
            .with_storage([(U256::from(3), slot(0, 1))].into_iter());
        commit(&mut state, account);
        let writes = state.finish().unwrap().writes;
        assert_eq!(
            writes.into_iter().collect::<Vec<_>>(),
            [(keys::account(&A), None)]
        );
    }

    #[test]
    fn writes_reach_the_source_only_when_a_block_finishes() {
        let stored = stored();
        let mut state = StateDb::new(&stored);
        state.set(keys::code(&B256::repeat_byte(1)), Some(vec![1]));
        assert!(stored.1.borrow().is_empty());
        state.finish().unwrap();
        assert_eq!(*stored.1.borrow(), [keys::code(&B256::repeat_byte(1))]);

        let mut state = StateDb::new(&stored);
        state.set(keys::code(&B256::repeat_byte(2)), Some(vec![2]));
        state.fail();
        assert!(matches!(state.finish(), Err(Error::BlockFailed)));
        assert_eq!(*stored.1.borrow(), [keys::code(&B256::repeat_byte(1))]);
    }

    #[test]
    fn the_self_destruct_of_an_older_account_is_refused() {
        let stored = stored();
        let mut state = StateDb::new(&stored);
        let info = state.basic(A).unwrap().unwrap();
        commit(
            &mut state,
            Account::from(info)
                .with_touched_mark()
                .with_selfdestruct_mark(),
        );
        assert!(matches!(state.basic(A), Err(Error::ReadFailed(k)) if k == keys::account(&A)));
        assert!(matches!(state.finish(), Err(Error::StorageWipe(a)) if a == A));
        assert!(stored.1.borrow().is_empty());
    }
}
