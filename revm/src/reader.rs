//! Read-only access for revm: [`DatabaseRef`] over any [`Source`], such as
//! the committed head ([`pagetrie::Db`]) or a pending block
//! ([`pagetrie::Overlay`]) for an RPC's calls or a mempool's nonce checks.
//! Nothing is cached; each call reads the source.

use revm::bytecode::Bytecode;
use revm::primitives::{Address, StorageKey, StorageValue, B256, KECCAK_EMPTY};
use revm::state::AccountInfo;
use revm::DatabaseRef;

use crate::{codec, keys, Error, Source};

/// revm's [`DatabaseRef`] over a [`Source`]. Wrap it in revm's
/// `WrapDatabaseRef` (or a `CacheDB`) to run calls that are never
/// committed.
///
/// Over the committed head (`Reader(&db)`) each read sees the head as it is
/// then: a commit landing during one revm call can give the call values
/// from two states (a balance before a block, a nonce after it). For a
/// consistent view through a call, read a [`pagetrie::Session`] (begun on
/// the head, never committed) or an [`pagetrie::Overlay`], which stay on
/// one state.
#[derive(Clone, Debug)]
pub struct Reader<S>(pub S);

impl<S: Source> DatabaseRef for Reader<S> {
    type Error = Error;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, Error> {
        let key = keys::account(&address);
        codec::account(&key, self.0.read(&key)?.as_deref())
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, Error> {
        if code_hash == KECCAK_EMPTY {
            return Ok(Bytecode::default());
        }
        let key = keys::code(&code_hash);
        codec::code(&key, &code_hash, self.0.read(&key)?.as_deref())
    }

    fn storage_ref(&self, address: Address, index: StorageKey) -> Result<StorageValue, Error> {
        let account = keys::account(&address);
        let origin = codec::origin(&account, self.0.read(&account)?.as_deref())?;
        let key = keys::slot(&address, origin, &index);
        codec::slot(&key, self.0.read(&key)?.as_deref())
    }

    /// From the EIP-2935 history contract's storage, as execution reads it.
    fn block_hash_ref(&self, number: u64) -> Result<B256, Error> {
        let slot = number % alloy_eips::eip2935::HISTORY_SERVE_WINDOW as u64;
        let hash = self.storage_ref(
            alloy_eips::eip2935::HISTORY_STORAGE_ADDRESS,
            StorageKey::from(slot),
        )?;
        Ok(B256::from(hash))
    }
}
