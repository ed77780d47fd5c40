//! What a transaction's state changes become in the key layout: revm's
//! [`DatabaseCommit`] for [`StateDb`].
//!
//! Storage is wiped without a scan because, under Cancun's rules (EIP-6780),
//! only an account created in the same transaction self-destructs, and every
//! slot such an account holds was written in that transaction, so it is in
//! the journal being committed. An account emptied (EIP-161) holds no storage
//! either: an account with storage has run code, so has a nonce or code. A
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
                if account.is_selfdestructed() && !account.is_created() {
                    self.refuse_wipe(address);
                }
                self.set(account_key, None);
                for slot in account.storage.keys() {
                    let key = keys::storage(&address, slot);
                    if self.may_hold(&key) {
                        self.set(key, None);
                    }
                }
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
            self.set(account_key, Some(codec::encode_account(&account.info)));
            for (slot, value) in account.changed_storage_slots() {
                self.set(
                    keys::storage(&address, slot),
                    codec::encode_slot(&value.present_value),
                );
            }
        }
    }
}
