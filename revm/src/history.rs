//! `BLOCKHASH` served from state: the EIP-2935 history contract keeps the
//! last 8,191 block hashes in a ring of storage slots, written by a system
//! call at the start of each block, so a stateless verifier reads them
//! through the witness like any slot and state holds a fixed number of
//! them rather than one key per block forever.

use alloy_eips::eip2935::{HISTORY_SERVE_WINDOW, HISTORY_STORAGE_ADDRESS};
use revm::bytecode::Bytecode;
use revm::primitives::{Address, AddressMap, StorageKey, StorageValue, B256, U256};
use revm::state::{Account, AccountInfo};
use revm::{Database, DatabaseCommit};

/// Block `number`'s hash as the history contract holds it: its ring slot
/// `number % 8191`, zero where no hash was written. revm asks only within
/// the last 256 blocks, all of which the ring still holds.
pub(crate) fn block_hash<DB: Database + ?Sized>(
    db: &mut DB,
    number: u64,
) -> Result<B256, DB::Error> {
    let slot = U256::from(number % HISTORY_SERVE_WINDOW as u64);
    Ok(B256::from(db.storage(HISTORY_STORAGE_ADDRESS, slot)?))
}

/// Any database with `BLOCKHASH` answered by the history contract, so the
/// reference database and pagetrie's read the same hashes.
pub(crate) struct History<'a, DB>(pub(crate) &'a mut DB);

/// alloy-evm asks its databases for `Debug`; this one has nothing to show.
impl<DB> std::fmt::Debug for History<'_, DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("History")
    }
}

impl<DB: Database> Database for History<'_, DB> {
    type Error = DB::Error;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Self::Error> {
        self.0.basic(address)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Self::Error> {
        self.0.code_by_hash(code_hash)
    }

    fn storage(
        &mut self,
        address: Address,
        index: StorageKey,
    ) -> Result<StorageValue, Self::Error> {
        self.0.storage(address, index)
    }

    fn block_hash(&mut self, number: u64) -> Result<B256, Self::Error> {
        block_hash(self.0, number)
    }
}

impl<DB: DatabaseCommit> DatabaseCommit for History<'_, DB> {
    fn commit(&mut self, changes: AddressMap<Account>) {
        self.0.commit(changes)
    }
}
