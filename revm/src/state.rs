//! The database revm executes a block on: revm's read trait over any
//! [`Source`], with a block-wide cache of what it read and wrote, the values
//! it read (what a stateless verifier needs beside the witness), and the
//! block's writes, held back from the source until the block has succeeded.
//!
//! revm reloads each account and slot at every transaction; the cache makes
//! that one read of the source per key and block, so a [`pagetrie::Session`]
//! reads each key once and a witness covers it once.

use std::collections::{BTreeMap, HashMap};

use pagetrie::KeyPath;
use revm::bytecode::Bytecode;
use revm::primitives::{Address, StorageKey, StorageValue, B256, KECCAK_EMPTY};
use revm::state::AccountInfo;
use revm::Database;

use crate::{codec, keys, Error, Source};

/// What a block changed and read, once it is executed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Every key the block wrote, with its value at the block's end (`None`:
    /// deleted); a key set back to its value before the block may be here too.
    pub writes: BTreeMap<KeyPath, Option<Vec<u8>>>,
    /// Every present key read from the source before the block wrote it, with
    /// its value then, sorted by key. Keys read and found absent are not
    /// here: the witness proves them absent.
    pub reads: Vec<(KeyPath, Vec<u8>)>,
}

/// revm's [`Database`] and [`revm::DatabaseCommit`] over a [`Source`]: reads
/// go to the source once per key and block; writes stay here, in
/// [`Changes`], until [`StateDb::finish`] hands them to the source (a
/// session buffers them for its commit).
///
/// A block that failed ([`crate::execute_block`] returned an error, or a
/// storage wipe was refused) never reaches the source: `finish` refuses it,
/// so committing the session afterwards commits none of the block.
///
/// One block's `StateDb` takes a fresh session and is the only writer to
/// it: what it records as read must be the values at the session's base,
/// which is what the witness proves.
pub struct StateDb<S> {
    source: S,
    /// Each key's value at this point of the block: read once from the
    /// source, then what the block wrote.
    values: HashMap<KeyPath, Option<Vec<u8>>>,
    /// Code decoded once per block, by hash.
    code: HashMap<B256, Bytecode>,
    changes: Changes,
    /// An account whose storage a commit could not wipe: the block fails.
    wipe_refused: Option<Address>,
    /// The block's execution failed: its writes must not reach the source.
    failed: bool,
    /// The first read of the source that failed; revm saw
    /// [`Error::ReadFailed`].
    failure: Option<Error>,
}

impl<S: Source> StateDb<S> {
    /// A database over `source`'s state.
    pub fn new(source: S) -> StateDb<S> {
        StateDb {
            source,
            values: HashMap::new(),
            code: HashMap::new(),
            changes: Changes::default(),
            wipe_refused: None,
            failed: false,
            failure: None,
        }
    }

    /// The source it reads.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// A hint that `address`'s account will be read soon.
    pub fn warm_up(&self, address: &Address) {
        self.source.warm_up(&keys::account(address));
    }

    /// The block's writes and reads so far.
    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// Hands the block's writes to the source ([`Source::write`]) and
    /// returns its writes and reads: the only way the block's writes reach
    /// a session.
    ///
    /// Fails, writing nothing, if a read failed (with that read's error), a
    /// commit was refused ([`Error::StorageWipe`]) or the block's execution
    /// failed ([`Error::BlockFailed`]): the writes would be part of a block.
    pub fn finish(mut self) -> Result<Changes, Error> {
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        self.check()?;
        if self.failed {
            return Err(Error::BlockFailed);
        }
        for (key, value) in &self.changes.writes {
            self.source.write(*key, value.clone());
        }
        self.changes.reads.sort_unstable_by_key(|(k, _)| *k);
        Ok(self.changes)
    }

    fn check(&self) -> Result<(), Error> {
        match self.wipe_refused {
            Some(address) => Err(Error::StorageWipe(address)),
            None => Ok(()),
        }
    }

    /// Marks the block failed: [`StateDb::finish`] will refuse it.
    pub(crate) fn fail(&mut self) {
        self.failed = true;
    }

    /// The error of the first read that failed, if any.
    pub(crate) fn take_failure(&mut self) -> Option<Error> {
        self.failure.take()
    }

    /// The value of `key` at this point of the block.
    pub(crate) fn value(&mut self, key: &KeyPath) -> Result<Option<&[u8]>, Error> {
        self.check()?;
        if !self.values.contains_key(key) {
            let value = self.source.read(key)?;
            if let Some(v) = &value {
                self.changes.reads.push((*key, v.clone()));
            }
            self.values.insert(*key, value);
        }
        Ok(self.values.get(key).and_then(|v| v.as_deref()))
    }

    /// Sets `key` to `value` (`None` deletes), unless it already holds it.
    pub(crate) fn set(&mut self, key: KeyPath, value: Option<Vec<u8>>) {
        if self.values.get(&key) == Some(&value) {
            return;
        }
        self.changes.writes.insert(key, value.clone());
        self.values.insert(key, value);
    }

    /// Where `address`'s slots are keyed, as its record in the block says
    /// (revm loads an account before committing it).
    pub(crate) fn known_origin(&self, address: &Address) -> codec::Origin {
        let key = keys::account(address);
        match self.values.get(&key) {
            Some(Some(bytes)) => codec::origin(&key, Some(bytes)).unwrap_or_default(),
            _ => codec::Origin::Imported,
        }
    }

    /// Whether `key` is known to hold a value.
    pub(crate) fn holds(&self, key: &KeyPath) -> bool {
        matches!(self.values.get(key), Some(Some(_)))
    }

    pub(crate) fn refuse_wipe(&mut self, address: Address) {
        self.wipe_refused.get_or_insert(address);
    }
}

impl<S: Source> StateDb<S> {
    /// What revm gets from a read: its value, or on failure
    /// [`Error::ReadFailed`], the failure itself kept for
    /// [`StateDb::finish`] and [`crate::execute_block`] (revm and alloy-evm
    /// pass a database's error on only as text). The block fails.
    fn answer<T>(&mut self, key: KeyPath, result: Result<T, Error>) -> Result<T, Error> {
        result.map_err(|e| {
            self.failure.get_or_insert(e);
            self.failed = true;
            Error::ReadFailed(key)
        })
    }

    fn read_code(&mut self, key: &KeyPath, code_hash: B256) -> Result<Bytecode, Error> {
        let code = codec::code(key, &code_hash, self.value(key)?)?;
        self.code.insert(code_hash, code.clone());
        Ok(code)
    }
}

impl<S: Source> Database for StateDb<S> {
    type Error = Error;

    fn basic(&mut self, address: Address) -> Result<Option<AccountInfo>, Error> {
        let key = keys::account(&address);
        let result = self.value(&key).and_then(|v| codec::account(&key, v));
        self.answer(key, result)
    }

    fn code_by_hash(&mut self, code_hash: B256) -> Result<Bytecode, Error> {
        if code_hash == KECCAK_EMPTY {
            return Ok(Bytecode::default());
        }
        if let Some(code) = self.code.get(&code_hash) {
            return Ok(code.clone());
        }
        let key = keys::code(&code_hash);
        let result = self.read_code(&key, code_hash);
        self.answer(key, result)
    }

    fn storage(&mut self, address: Address, index: StorageKey) -> Result<StorageValue, Error> {
        let account = keys::account(&address);
        let origin = self
            .value(&account)
            .and_then(|v| codec::origin(&account, v));
        let origin = self.answer(account, origin)?;
        let key = keys::slot(&address, origin, &index);
        let result = self.value(&key).and_then(|v| codec::slot(&key, v));
        self.answer(key, result)
    }

    /// From the EIP-2935 history contract's storage.
    fn block_hash(&mut self, number: u64) -> Result<B256, Error> {
        crate::history::block_hash(self, number)
    }
}
